"""``vse model export | pin | onnx | expand-vocab``: the sub-commands of ``vse model``
that need PyTorch (registered with the core's ``vse model`` through an entry point)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vsekit.cli._base import model_command, positive_int


@model_command
def _add_export(msub: argparse._SubParsersAction) -> None:
    e = msub.add_parser(
        "export",
        help="package a training run as a model bundle (several runs: their ensemble)",
        epilog="example:\n  vse model export runs/gru runs/minilm models/gru+minilm --weights 1,1",
    )
    e.add_argument(
        "run", nargs="+", help="training run directory; two or more: one ensemble bundle"
    )
    e.add_argument("out", help="bundle directory to write")
    e.add_argument("--checkpoint", default="best", choices=["best", "last"])
    e.add_argument("--fp32", action="store_true", help="keep float32 weights (default float16)")
    e.add_argument(
        "--captions-from", help="dataset whose captions become the annotation pool (its --split)"
    )
    e.add_argument("--split", default="train", help="split of --captions-from (default train)")
    e.add_argument("--tagger", help="a tag-ranking run on the same image features, to ship too")
    e.add_argument(
        "--weights",
        help="an ensemble's similarity weights, comma-separated (default: equal)",
    )
    e.set_defaults(handler=_model_export)


@model_command
def _add_pin(msub: argparse._SubParsersAction) -> None:
    pin = msub.add_parser(
        "pin",
        help="record the installed backbone weights' sha256 in a bundle that lacks it "
        "(only after they classify the test photos correctly)",
    )
    pin.add_argument("bundle", help="model bundle directory")
    pin.add_argument("--weights", default="auto", help="weights file (default: installed)")
    pin.set_defaults(handler=_model_pin)


@model_command
def _add_onnx(msub: argparse._SubParsersAction) -> None:
    ox = msub.add_parser(
        "onnx", help="write a bundle's encoders as ONNX graphs, for ONNX Runtime (no PyTorch)"
    )
    ox.add_argument("bundle", help="model bundle directory, or 'default'")
    ox.add_argument(
        "--storage",
        choices=("fp16", "fp32"),
        default="fp16",
        help="weights: fp16 (stored half, computed fp32) or fp32",
    )
    ox.add_argument(
        "--text-int8",
        action="store_true",
        help="also text.int8.onnx: a pretrained text transformer (MiniLM) quantised "
        "dynamically, int8 weights per channel, half its fp16 size",
    )
    ox.add_argument(
        "--reduce-range",
        action="store_true",
        help="7-bit int8 weights in the int8 graphs, which no CPU's int8 kernels saturate "
        "(8-bit ones saturate on x86 CPUs without VNNI, which then run fp32)",
    )
    ox.add_argument(
        "--keep-float",
        choices=("none", "stem", "head", "stem-head"),
        default="none",
        help="image graph nodes left in float by --int8 (stem: the first convolution)",
    )
    ox.add_argument(
        "--int8",
        action="store_true",
        help="also image.int8.onnx: the image graph quantised statically (ONNX Runtime), "
        "calibrated on --calibrate; load_model(precision='int8') runs it",
    )
    ox.add_argument(
        "--int8-default", action="store_true", help="make the int8 image graph the default"
    )
    ox.add_argument(
        "--int8-only",
        action="store_true",
        help="write the int8 image graph alone, as the default (no image.onnx: half the "
        "image side's size; fp32 images then need the torch backend or a re-export)",
    )
    ox.add_argument(
        "--calibrate",
        help="dataset whose train split calibrates int8, or `samples`: the photographs "
        "bundled with scikit-image (what a build from a clean clone uses)",
    )
    ox.add_argument("--calibration-images", type=positive_int, default=200)
    ox.add_argument(
        "--calibration-method",
        choices=("minmax", "percentile"),
        default="percentile",
        help="int8 activation ranges (the shipped default: percentile)",
    )
    ox.set_defaults(handler=_model_onnx)


@model_command
def _add_expand_vocab(msub: argparse._SubParsersAction) -> None:
    ev = msub.add_parser(
        "expand-vocab",
        help="give words the captions never used vectors: a linear map from GloVe into the "
        "model's word space (Kiros et al. 2014)",
    )
    ev.add_argument("bundle", help="model bundle directory, or 'default'")
    ev.add_argument("--top", type=positive_int, default=100_000,
                    help="add the N most frequent GloVe words the vocabulary lacks")  # fmt: skip
    ev.add_argument("--ridge", type=float, default=1e-2, help="L2 penalty of the fitted map")
    ev.add_argument(
        "--if-missing", action="store_true", help="do nothing if it is already expanded"
    )
    ev.set_defaults(handler=_model_expand_vocab)


def _model_expand_vocab(args: argparse.Namespace) -> int:
    from vsekit.lab.encoders import expand_vocab

    print(expand_vocab(args.bundle, args.top, args.ridge, args.if_missing))
    return 0


def _model_export(args: argparse.Namespace) -> int:
    from vsekit.lab.train.export import attach_tagger, ensemble_from_models, model_from_run

    models = [model_from_run(r, args.checkpoint) for r in args.run]
    if args.weights and len(models) == 1:
        raise ValueError("--weights: only for an ensemble (two or more runs)")
    weights = [float(w) for w in args.weights.split(",")] if args.weights else None
    m = models[0] if len(models) == 1 else ensemble_from_models(models, weights)
    if args.tagger:
        attach_tagger(m, args.tagger)
    captions: list[str] = []
    if args.captions_from:
        from vsekit.lab.data import load_dataset

        ds = load_dataset(args.captions_from).split(args.split)
        captions = list(ds.texts)
    out = m.save(args.out, half=not args.fp32, captions=captions)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"wrote {out} ({size / 1e6:.1f} MB, {len(captions)} captions)")
    return 0


def _model_pin(args: argparse.Namespace) -> int:
    from vsekit.bundle import write_manifest
    from vsekit.fsio import atomic_write
    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.check import check_backbone

    path = Path(args.bundle) / "bundle.json"
    info = json.loads(path.read_text())
    spec = info["image"]
    if spec.get("weights_sha256"):
        raise ValueError(f"{path}: already pinned to weights sha256 {spec['weights_sha256']}")
    net = create_backbone(spec["backbone"], weights=args.weights)
    ok, _ = check_backbone(net)
    if not ok:
        raise ValueError(f"{net.weights_source}: fails `vse weights check`; not pinning")
    spec.update(net.identity(int(spec["crops"])))
    atomic_write(path, json.dumps(info, indent=2) + "\n")
    write_manifest(path.parent)
    print(f"{path}: pinned {spec['backbone']} weights sha256 {net.weights_sha256}")
    return 0


def _model_onnx(args: argparse.Namespace) -> int:
    from vsekit.lab.torch_model import VSEModel
    from vsekit.lab.train.onnx_export import export_onnx

    model = VSEModel.load(args.bundle, device="cpu")
    calibration = None
    for flag in ("int8_default", "int8_only"):
        if getattr(args, flag) and not args.int8:
            raise ValueError(f"--{flag.replace('_', '-')} needs --int8")
    if args.int8:
        if not args.calibrate:
            raise ValueError("--int8 needs --calibrate DATASET (its train split) or samples")
        from vsekit.lab.train.calibration import calibration_images

        calibration = calibration_images(args.calibrate, args.calibration_images)
    meta = export_onnx(
        model,
        model.path,
        storage=args.storage,
        calibration=calibration,
        calibration_method=args.calibration_method,
        int8_default=args.int8_default,
        int8_only=args.int8_only,
        text_int8=args.text_int8,
        calibration_source=None if not args.int8 else Path(args.calibrate).name,
        reduce_range=args.reduce_range,
        keep_float=args.keep_float,
    )
    for name in meta["sha256"]:
        size = (model.path / name).stat().st_size / 1e6
        print(f"{model.path / name}: {size:.1f} MB")
    return 0


@model_command
def _add_build(msub: argparse._SubParsersAction) -> None:
    b = msub.add_parser(
        "build",
        help="build a bundle from a recipe (configs/default-model.yaml: the shipped model)",
        epilog="example:\n  vse model build configs/default-model.yaml models/default-rebuilt",
    )
    b.add_argument("recipe", help="recipe YAML: members, weights, crops, captions, tagger, hubness")
    b.add_argument("out", help="bundle directory to write")
    b.add_argument("--root", default=".", help="folder the recipe's relative paths start from")
    b.add_argument("--train", action="store_true",
                   help="first train the runs the recipe names that are missing, as its "
                   "train sections say (a killed training resumes)")  # fmt: skip
    b.set_defaults(handler=_model_build)


def _model_build(args: argparse.Namespace) -> int:
    from vsekit.lab.build import build, load_recipe
    from vsekit.lab.torch_model import VSEModel

    recipe = load_recipe(args.recipe)
    if args.train:
        from vsekit.lab.build import train_missing

        for run in train_missing(recipe, args.root):
            print(f"trained {run}")
    out = build(recipe, args.out, args.root)
    m = VSEModel.load(out, device="cpu")
    print(f"wrote {out}: {recipe.name}, {len(recipe.members)} member(s), fingerprint "
          f"{m.fingerprint}; next: vse model expand-vocab {out}, vse model onnx {out}")  # fmt: skip
    return 0
