"""The ``vse`` command. Thin: parses arguments, calls the library, prints.

Each command group is a function that adds its sub-parser; a handler receives the parsed
``argparse.Namespace`` and returns an exit code. Library errors that describe bad input
(:class:`vsekit.data.DatasetError`, ``FileNotFoundError``, ``ValueError``) become a
one-line ``vse: error: ...`` message and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence

from . import __version__

CommandAdder = Callable[[argparse._SubParsersAction], None]
_COMMANDS: list[CommandAdder] = []


def command(fn: CommandAdder) -> CommandAdder:
    """Register a function that adds one sub-command (group) to ``vse``."""
    _COMMANDS.append(fn)
    return fn


# ---------------------------------------------------------------- vse data
@command
def _add_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="inspect datasets")
    dsub = p.add_subparsers(dest="data_cmd", required=True, metavar="COMMAND")
    s = dsub.add_parser("stats", help="images, captions, caption lengths and vocabulary per split")
    s.add_argument("path", help="dataset folder or file")
    s.add_argument("--format", choices=_source_names(), help="source format (default: detect)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(handler=_data_stats)


def _source_names() -> list[str]:
    from .data import list_sources

    return list_sources()


def _data_stats(args: argparse.Namespace) -> int:
    from .data import dataset_stats, load_dataset

    stats = dataset_stats(load_dataset(args.path, args.format))
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    print(f"dataset: {stats['name']}")
    cols = f"{'split':<12}{'images':>8}{'captions':>10}{'cap/img':>9}{'vocab':>8}"
    print(f"{cols}  length q0/25/50/75/95/100")
    for split, s in stats["splits"].items():
        q = "/".join(f"{v:g}" for v in s["length_quantiles"].values())
        print(
            f"{split:<12}{s['images']:>8}{s['captions']:>10}{s['captions_per_image']:>9g}"
            f"{s['vocab_size']:>8}  {q}"
        )
    return 0


# ---------------------------------------------------------------- vse weights
@command
def _add_weights(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("weights", help="install and check pretrained backbone weights (offline)")
    wsub = p.add_subparsers(dest="weights_cmd", required=True, metavar="COMMAND")
    i = wsub.add_parser("install", help="fetch and convert a backbone's ImageNet weights")
    i.add_argument("name", help="backbone name, e.g. resnet50")
    i.add_argument("--force", action="store_true", help="convert again even if cached")
    i.set_defaults(handler=_weights_install)
    c = wsub.add_parser("check", help="classify two test photos; non-zero exit if wrong")
    c.add_argument("name")
    c.add_argument("--weights", default="auto", help="weights file (default: installed)")
    c.set_defaults(handler=_weights_check)


def _weights_install(args: argparse.Namespace) -> int:
    from .features import install_weights

    print(f"{args.name}: {install_weights(args.name, force=args.force)}")
    return 0


def _weights_check(args: argparse.Namespace) -> int:
    from .features import create_backbone
    from .features.check import check_backbone

    model = create_backbone(args.name, weights=args.weights)
    ok, res = check_backbone(model)
    for img, top in res.items():
        print(f"{img:>8}: " + ", ".join(f"{lab} {p:.3f}" for lab, p in top))
    print(f"{args.name} ({model.weights_source}): {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


# ---------------------------------------------------------------- vse features
@command
def _add_features(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("features", help="image features: layers, extraction, FNE, store info")
    fsub = p.add_subparsers(dest="features_cmd", required=True, metavar="COMMAND")
    lay = fsub.add_parser("layers", help="a backbone's FNE layers and dimensions (no weights)")
    lay.add_argument("name")
    lay.add_argument("--json", action="store_true")
    lay.set_defaults(handler=_features_layers)

    ex = fsub.add_parser("extract", help="extract pooled activations into a FeatureStore")
    src = ex.add_mutually_exclusive_group(required=True)
    src.add_argument("--root", help="dataset folder (or file) to read images from")
    src.add_argument("--images", help="a plain folder of images (all of them, split 'all')")
    ex.add_argument("--dataset", choices=_source_names(), help="dataset format (default: detect)")
    ex.add_argument("--splits", help="comma-separated splits to extract (default: all)")
    ex.add_argument("--backbone", default="resnet50")
    ex.add_argument("--weights", default="auto", help="weights file (default: installed)")
    ex.add_argument("--crops", type=int, choices=(1, 2, 10), default=10)
    ex.add_argument("--batch-size", type=int, default=8, help="images per batch")
    ex.add_argument("--workers", type=int, default=1, help="image-decoding processes")
    ex.add_argument("--no-rmac", action="store_true", help="skip R-MAC descriptors")
    ex.add_argument("--threads", type=int, help="torch CPU threads (default: all cores)")
    ex.add_argument("--out", required=True, help="store directory (resumed if unfinished)")
    ex.set_defaults(handler=_features_extract)

    fne = fsub.add_parser("fne", help="fit FNE statistics on one split and discretise")
    fne.add_argument("--store", required=True)
    fne.add_argument("--fit-split", default="train")
    fne.add_argument("--f-minus", type=float, default=-0.25)
    fne.add_argument("--f-plus", type=float, default=0.15)
    fne.set_defaults(handler=_features_fne)

    info = fsub.add_parser("info", help="describe a FeatureStore")
    info.add_argument("store")
    info.add_argument("--json", action="store_true")
    info.set_defaults(handler=_features_info)


def _features_layers(args: argparse.Namespace) -> int:
    from .features import create_backbone

    m = create_backbone(args.name, weights="random")
    layers = [{"name": lay.name, "channels": lay.channels, "kind": lay.kind} for lay in m.layers]
    if args.json:
        out = {
            "backbone": args.name,
            "fne_dim": m.fne_dim,
            "baseline_dim": m.baseline_dim,
            "baseline_layer": m.baseline_layer,
            "input_size": m.input_size,
            "layers": layers,
        }
        print(json.dumps(out, indent=2))
        return 0
    for lay in layers:
        print(f"{lay['name']:<12}{lay['channels']:>6}  {lay['kind']}")
    print(f"FNE dim {m.fne_dim}; one-layer baseline {m.baseline_layer} ({m.baseline_dim})")
    return 0


def _extract_items(args: argparse.Namespace):
    from pathlib import Path

    from .features.extract import ExtractItem
    from .images import IMAGE_SUFFIXES

    if args.images:
        root = Path(args.images)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such folder")
        files = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        return [ExtractItem(str(p.relative_to(root)), p, "all") for p in files], root.name
    from .data import load_dataset

    ds = load_dataset(args.root, args.dataset)
    if args.splits:
        ds = ds.split(*args.splits.split(","))
    if any(im.path is None for im in ds.images):
        raise ValueError(f"{args.root}: this dataset has no image files to extract from")
    return [ExtractItem(im.id, im.path, im.split) for im in ds.images], ds.name


def _features_extract(args: argparse.Namespace) -> int:
    import torch

    from .features import create_backbone
    from .features.extract import extract_to_store, failed_images

    if args.threads:
        torch.set_num_threads(args.threads)
    items, name = _extract_items(args)
    model = create_backbone(args.backbone, weights=args.weights)
    store = extract_to_store(
        items,
        args.out,
        model,
        crops=args.crops,
        batch_size=args.batch_size,
        workers=args.workers,
        with_rmac=not args.no_rmac,
        dataset=name,
    )
    failed = failed_images(args.out)
    for f in failed:
        print(f"skipped {f['error']}", file=sys.stderr)
    print(
        f"{store.path}: {store.n} images, {store.fne_dim}-d pooled features"
        f" ({len(failed)} unreadable skipped) in {store.meta['extract_seconds']} s"
    )
    return 0


def _features_fne(args: argparse.Namespace) -> int:
    from .features.store import FeatureStore

    store = FeatureStore(args.store)
    store.fit_fne(args.fit_split, args.f_minus, args.f_plus)
    fne = store.fne
    frac = [float((fne[:2000] == v).mean()) for v in (-1, 0, 1)]
    print(
        f"{store.path}: FNE fitted on {store.meta['fne']['n_fit']} {args.fit_split} rows; "
        f"fractions -1/0/1 (first rows): " + "/".join(f"{f:.2f}" for f in frac)
    )
    return 0


def _features_info(args: argparse.Namespace) -> int:
    from .features.store import FeatureStore

    d = FeatureStore(args.store).describe()
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    for k, v in d.items():
        if k == "runs":
            v = "; ".join(
                f"{r['images']:,} images in {r['seconds']:,.0f} s"
                + (f" ({r['images'] / r['seconds']:.2f} img/s)" if r["seconds"] else "")
                for r in v
            )
        print(f"{k:>15}: {v}")
    return 0


# ---------------------------------------------------------------- vse train / eval
@command
def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a joint embedding from an experiment config")
    p.add_argument("config", help="experiment YAML (see configs/)")
    p.add_argument("--run-dir", help="run directory (default: runs/<config name>)")
    p.add_argument("--resume", action="store_true", help="continue a killed run exactly")
    p.add_argument("--data-root", help="override data.root (a Flickr8k folder, ...)")
    p.add_argument("--store", help="override data.store (FeatureStore directory)")
    p.add_argument("--epochs", type=int, help="override train.epochs")
    p.add_argument("--max-minutes", type=float, help="override train.max_minutes")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config field, e.g. --set tags.scheme=compound (repeatable)",
    )
    p.set_defaults(handler=_train)

    e = sub.add_parser("eval", help="evaluate a trained run on a split")
    e.add_argument("run", help="run directory")
    e.add_argument("--split", default="dev")
    e.add_argument("--protocol", choices=("full", "1k5fold", "5k"), default="full")
    e.add_argument("--checkpoint", choices=("best", "last"), default="best")
    e.add_argument(
        "--queries",
        choices=("caption", "image"),
        default="caption",
        help="image: one text query per image, the mean of its captions (baseline + weight)",
    )
    e.add_argument("--data-root", help="override the dataset folder of the run's config")
    e.add_argument("--store", help="override the FeatureStore of the run's config")
    e.add_argument("--json", action="store_true")
    e.set_defaults(handler=_eval)


def _train(args: argparse.Namespace) -> int:
    from .train import load_config, train
    from .train.config import apply_overrides

    cfg = apply_overrides(load_config(args.config), args.set)
    if args.data_root:
        cfg.data.root = args.data_root
    if args.store:
        cfg.data.store = args.store
    if args.epochs:
        cfg.train.epochs = args.epochs
    if args.max_minutes:
        cfg.train.max_minutes = args.max_minutes
    run = args.run_dir or f"runs/{cfg.name}"
    res = train(cfg, run, resume=args.resume)
    m = res["best_metrics"]
    state = "COLLAPSED (did not start learning)" if res["collapsed"] else "done"
    best = (
        f"p@1 {m.get('p1', float('nan')):.1f}"
        if cfg.task == "tags"
        else (f"rsum {m.get('rsum', float('nan')):.1f}")
    )
    print(
        f"{run}: {state}; {res['epochs_run']} epochs in {res['seconds']} s; best epoch "
        f"{res['best_epoch']} dev {best}"
    )
    return 3 if res["collapsed"] else 0


def format_table(m: dict) -> str:
    """The journal paper's layout: annotation and retrieval R@1/5/10, Med r, mean r, rsum."""
    head = f"{'':<12}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'Med r':>7}{'Mean r':>8}"
    rows = [
        f"{name:<12}"
        + "".join(f"{m[f'{d}_r{k}']:>7.1f}" for k in (1, 5, 10))
        + f"{m[f'{d}_medr']:>7.0f}{m[f'{d}_meanr']:>8.1f}"
        for name, d in (("annotation", "i2t"), ("retrieval", "t2i"))
    ]
    return "\n".join([head, *rows, f"{'rsum':<12}{m['rsum']:>7.1f}"])


def _eval(args: argparse.Namespace) -> int:
    from .data import load_dataset
    from .eval import evaluate_model
    from .features.store import FeatureStore
    from .train import load_run
    from .train.config import DataConfig, from_dict
    from .train.features import image_features

    model, meta = load_run(args.run, args.checkpoint)
    if meta["config"].get("task") == "tags":
        return _eval_tags(args, model, meta)
    data = from_dict(DataConfig, meta["config"]["data"], "data")
    ds = load_dataset(args.data_root or data.root, data.format).split(args.split)
    store = FeatureStore(os.path.expanduser(args.store or data.store))
    if store.fingerprint() != meta.get("store_fingerprint"):
        print(
            f"vse: warning: {store.path} is not the store this run was trained on", file=sys.stderr
        )
    feats = image_features(store, data.features, [im.id for im in ds.images])
    m = evaluate_model(
        model, feats, ds.texts, ds.caption_to_image, protocol=args.protocol, queries=args.queries
    )
    print(json.dumps(m, indent=2) if args.json else format_table(m))
    return 0


def _eval_tags(args: argparse.Namespace, model, meta: dict) -> int:
    from .tags.evaluate import evaluate_tags
    from .tags.training import load_tag_data
    from .train.config import ExperimentConfig, from_dict

    cfg = from_dict(ExperimentConfig, meta["config"])
    cfg.data.dev_split = args.split
    if args.data_root:
        cfg.data.root = args.data_root
    if args.store:
        cfg.data.store = args.store
    m = evaluate_tags(model, load_tag_data(cfg, progress=False))
    if args.json:
        print(json.dumps(m, indent=2))
        return 0
    print(
        f"{'distractors':<12}" + "".join(f"{h:>10}" for h in ("p@1", "p@5", "rand p@1", "rand p@5"))
    )
    for d, r in m["predictability"].items():
        vals = (r["p1"], r["p5"], r["random_p1"], r["random_p5"])
        print(f"{d:<12}" + "".join(f"{v:>10.1f}" for v in vals))
    print(f"MAP {m['map']:.1f}  MiAP {m['miap']:.1f}  over {m['vocab_tags']} tags")
    return 0


# ---------------------------------------------------------------- entry point
from . import search_cli, tags_cli  # noqa: E402, F401  (register more commands)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vse", description="vsekit: visual-semantic embeddings for images and sentences."
    )
    parser.add_argument("--version", action="version", version=f"vsekit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .data import DatasetError

    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (DatasetError, FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"vse: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vse: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
