"""``vse model``, ``vse index``, ``vse search``, ``vse annotate`` and ``vse serve``:
the photo-collection side of the command line (registered into :mod:`vsekit.cli`)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from ._base import command, port_number, positive_int

DEFAULT_INDEX = "~/.cache/vsekit/index"


def _set_threads(n: int) -> None:
    """CPU threads for whichever backend runs (PyTorch if installed; ONNX Runtime reads
    ``OMP_NUM_THREADS``)."""
    os.environ["OMP_NUM_THREADS"] = str(n)
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(n)


def _load_model(name: str):
    from ..runtime import load_model

    return load_model(name)


# ---------------------------------------------------------------- vse model
@command
def _add_model(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="export and inspect self-contained embedding models")
    msub = p.add_subparsers(dest="model_cmd", required=True, metavar="COMMAND")
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
    pin = msub.add_parser(
        "pin",
        help="record the installed backbone weights' sha256 in a bundle that lacks it "
        "(only after they classify the test photos correctly)",
    )
    pin.add_argument("bundle", help="model bundle directory")
    pin.add_argument("--weights", default="auto", help="weights file (default: installed)")
    pin.set_defaults(handler=_model_pin)
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
        help="quantise a pretrained text transformer (MiniLM) in text.onnx dynamically: int8 "
        "weights per channel, half its fp16 size",
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
    ox.add_argument("--calibrate", help="dataset whose train split calibrates int8")
    ox.add_argument("--calibration-images", type=positive_int, default=200)
    ox.add_argument(
        "--calibration-method", choices=("minmax", "percentile", "entropy"), default="minmax"
    )
    ox.add_argument(
        "--keep-float",
        choices=("none", "stem", "head", "stem-head"),
        default="none",
        help="int8: leave the first convolution (stem) and/or the projection (head) in float",
    )
    ox.add_argument(
        "--moving-average", action="store_true", help="int8 minmax: moving-average ranges"
    )
    ox.add_argument(
        "--preprocess",
        action="store_true",
        help="int8: ONNX Runtime's quant_pre_process first (fold batch norms, fuse)",
    )
    ox.set_defaults(handler=_model_onnx)
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
    i = msub.add_parser("info", help="what a model is, how it was trained and its dev metrics")
    i.add_argument("model", nargs="?", default="default")
    i.set_defaults(handler=_model_info)


def _model_expand_vocab(args: argparse.Namespace) -> int:
    from ..models.factory import word_encoders
    from ..runtime import VSEModel
    from ..runtime.model import write_expansion
    from ..text.expansion import expand_vocabulary
    from ..text.glove import load_glove
    from ..train.onnx_export import export_onnx

    model = VSEModel.load(args.bundle, device="cpu")
    if model.expansion is not None:
        if args.if_missing:
            print(f"{model.path}: already expanded ({len(model.expansion[0]):,} words)")
            return 0
        raise ValueError(f"{model.path}: the vocabulary is already expanded")
    encs = word_encoders(model.model)
    if not encs:
        raise ValueError(f"{model.path}: no word-level text encoder to expand")
    index, vectors = load_glove()
    fits = {p: expand_vocabulary(e.vocab, e.embed.weight.detach().cpu().numpy(), index, vectors,
                                 args.top, args.ridge) for p, e in encs}  # fmt: skip
    exp = fits[encs[0][0]]  # the words depend only on the (shared) vocabulary and GloVe
    if len(encs) > 1:  # an ensemble: one map per member's learned word space
        exp.vectors = {p: f.vectors for p, f in fits.items()}
        exp.info = dict(exp.info, members={p: f.info for p, f in fits.items()})
    onnx_meta = model.path / "onnx.json"
    prev = json.loads(onnx_meta.read_text()) if onnx_meta.is_file() else None
    write_expansion(model.path, exp.words, exp.vectors, exp.info)
    if prev is not None:  # the text graph holds the word table: make it again
        export_onnx(VSEModel.load(model.path, device="cpu"), model.path,
                    text_int8=prev.get("text_storage") == "int8")  # fmt: skip
    print(
        f"{model.path}: {len(exp.words):,} words added (map fitted on {exp.info['fitted_on']:,} "
        f"training words, held-out R^2 {exp.info['r2_held_out']:.3f})"
        + ("; ONNX files re-made (add --int8 again if you used it)" if prev else "")
    )
    return 0


def _model_export(args: argparse.Namespace) -> int:
    from ..train.export import attach_tagger, ensemble_from_models, model_from_run

    models = [model_from_run(r, args.checkpoint) for r in args.run]
    if args.weights and len(models) == 1:
        raise ValueError("--weights: only for an ensemble (two or more runs)")
    weights = [float(w) for w in args.weights.split(",")] if args.weights else None
    m = models[0] if len(models) == 1 else ensemble_from_models(models, weights)
    if args.tagger:
        attach_tagger(m, args.tagger)
    captions: list[str] = []
    if args.captions_from:
        from ..data import load_dataset

        ds = load_dataset(args.captions_from).split(args.split)
        captions = list(ds.texts)
    out = m.save(args.out, half=not args.fp32, captions=captions)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"wrote {out} ({size / 1e6:.1f} MB, {len(captions)} captions)")
    return 0


def _model_pin(args: argparse.Namespace) -> int:
    from ..features import create_backbone
    from ..features.check import check_backbone
    from ..fsio import atomic_write

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
    print(f"{path}: pinned {spec['backbone']} weights sha256 {net.weights_sha256}")
    return 0


def _model_onnx(args: argparse.Namespace) -> int:
    from ..runtime import VSEModel
    from ..train.onnx_export import export_onnx

    model = VSEModel.load(args.bundle, device="cpu")
    calibration = None
    for flag in ("int8_default", "int8_only"):
        if getattr(args, flag) and not args.int8:
            raise ValueError(f"--{flag.replace('_', '-')} needs --int8")
    if args.int8:
        if not args.calibrate:
            raise ValueError("--int8 needs --calibrate DATASET (its train split)")
        from ..data import load_dataset

        train = load_dataset(args.calibrate).split("train")
        step = max(1, len(train.images) // args.calibration_images)
        calibration = [im.path for im in train.images[::step][: args.calibration_images]]
    meta = export_onnx(
        model,
        model.path,
        storage=args.storage,
        calibration=calibration,
        calibration_method=args.calibration_method,
        keep_float=args.keep_float,
        moving_average=args.moving_average,
        preprocess=args.preprocess,
        int8_default=args.int8_default,
        int8_only=args.int8_only,
        text_int8=args.text_int8,
    )
    for name in meta["sha256"]:
        size = (model.path / name).stat().st_size / 1e6
        print(f"{model.path / name}: {size:.1f} MB")
    return 0


def _model_info(args: argparse.Namespace) -> int:
    from ..hubness import HUBNESS_INFO

    m = _load_model(args.model)
    info = {k: v for k, v in m.info.items() if k != "config"}
    info["fingerprint"] = m.fingerprint
    info["captions"] = len(m.captions)
    info["path"] = str(m.path)
    hub = m.path / HUBNESS_INFO if m.path else None
    info["hubness"] = json.loads(hub.read_text()) if hub and hub.is_file() else None
    print(json.dumps(info, indent=2))
    return 0


# ---------------------------------------------------------------- vse index
@command
def _add_index(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="embed every photo and video under a folder (incremental)")
    p.add_argument("folder", help="folder of photos (searched recursively)")
    p.add_argument("--model", default="default", help="model bundle or run (default: shipped)")
    p.add_argument("--index", default=DEFAULT_INDEX, help=f"index directory ({DEFAULT_INDEX})")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--threads", type=positive_int, help="torch CPU threads (default: all cores)")
    p.add_argument("--rebuild", action="store_true", help="delete the index and start again")
    p.add_argument(
        "--repair",
        action="store_true",
        help="keep what a damaged index still holds and re-embed only what is missing",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip files whose path below the folder matches (repeatable), e.g. '*/raw/*'",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=_index)


def _index(args: argparse.Namespace) -> int:
    from ..index import Collection, model_info
    from ..index.query import text_query_bias

    if args.threads:
        _set_threads(args.threads)
    index = Path(args.index).expanduser()
    if not Path(args.folder).expanduser().is_dir():  # before any index is created
        raise ValueError(f"{args.folder}: not a folder")
    if args.rebuild and args.repair:
        raise ValueError("--rebuild and --repair: choose one")
    model = _load_model(args.model)
    if args.rebuild and index.exists():
        shutil.rmtree(index)
    coll = Collection(index, model_info(model, args.model), repair=args.repair)
    rep = coll.update(
        args.folder,
        model.encode_image,
        args.batch_size,
        not args.quiet and not args.json,
        reduce_to=model.decode_size,
        exclude=args.exclude,
    )
    text_query_bias(coll, model)  # each photo's CSLS penalty, cached for `vse search`
    for path, err in rep.failed:
        note = f"skipped {path}: {err}" if not err.startswith(path) else f"skipped {err}"
        print(note, file=sys.stderr)
    if args.json:
        print(json.dumps({"index": str(index), "images": len(coll), **asdict(rep)}, indent=2))
    else:
        print(f"{index}: {rep.summary()}; {len(coll)} images indexed")
    return 0


def clock(seconds: float | None) -> str:
    """``75.5`` -> ``1:15.5`` (a video time as people read it)."""
    m, s = divmod(float(seconds or 0.0), 60)
    return f"{int(m)}:{s:04.1f}"


# ---------------------------------------------------------------- vse search
@command
def _add_search(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="find indexed photos by text or by a similar image")
    p.add_argument("query", nargs="?", help="what is in the photo")
    p.add_argument("--image", help="find photos similar to this image instead")
    p.add_argument("--index", default=DEFAULT_INDEX)
    p.add_argument("--model", help="model (default: the one the index was built with)")
    p.add_argument("--k", type=positive_int, default=20)
    p.add_argument("--method", default="auto", choices=["auto", "exact", "faiss"])
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument(
        "--paths-only", "-f", action="store_true", help="print only the paths (for pipes)"
    )
    p.set_defaults(handler=_search)


def _search(args: argparse.Namespace) -> int:
    from ..index.query import check_words, open_collection, search_image, search_text

    if (args.query is None) == (args.image is None):
        raise ValueError("give either a text query or --image FILE")
    coll, model = open_collection(args.index, args.model)
    if args.query is not None:
        unknown = check_words(model, args.query)
        if unknown:
            print(f"note: the model does not know {', '.join(unknown)}", file=sys.stderr)
        hits = search_text(coll, model, args.query, args.k, args.method)
    else:
        hits = search_image(coll, model, args.image, args.k, args.method)
    if args.json:
        print(json.dumps([h.__dict__ for h in hits], indent=2))
    elif args.paths_only:
        for h in hits:
            print(h.path)
    else:
        for h in hits:
            at = f"  [{clock(h.start)}-{clock(h.end)}]" if h.start is not None else ""
            print(f"{h.score:7.4f}  {h.path}{at}")
    return 0


# ---------------------------------------------------------------- vse annotate
@command
def _add_annotate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("annotate", help="the best captions (and tags) for an image or a video")
    p.add_argument("image", help="a photo, or a video file (by its whole clip)")
    p.add_argument("--model", default="default")
    p.add_argument("--k", type=positive_int, default=5)
    p.add_argument(
        "--tags",
        type=positive_int,
        default=10,
        help="at most this many tags, if the model has a tagger (a calibrated one shows "
        "only the tags it is sure of, possibly none)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_annotate)


def _annotate(args: argparse.Namespace) -> int:
    from ..video import is_video

    model = _load_model(args.model)
    if not model.captions:
        raise ValueError(f"model {args.model!r} has no caption pool (export it --captions-from)")
    if is_video(args.image):  # the whole clip: mean of its frames' embeddings and features
        v = model.encode_video(args.image, with_features=True)
        emb, feats = v.clip[None], v.features[None]
    else:
        emb, feats = model.embed_with_features([args.image])
    best = model.caption_pool.best(emb, args.k)[0]
    tags = model.tags_from_features(feats, args.tags)[0]
    if args.json:
        caps = [{"text": c, "score": s} for c, s in best]
        print(
            json.dumps(
                {"captions": caps, "tags": [{"tag": t, "score": s} for t, s in tags]}, indent=2
            )
        )
    else:
        for c, s in best:
            print(f"{s:7.4f}  {c}")
        if tags:
            print("tags: " + ", ".join(t for t, _ in tags))
    return 0


# ---------------------------------------------------------------- vse serve
@command
def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="HTTP API and web page over an index")
    p.add_argument("--index", default=DEFAULT_INDEX)
    p.add_argument("--model", help="model (default: the one the index was built with)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only)")
    p.add_argument("--port", type=port_number, default=8000)
    p.add_argument(
        "--token",
        default=os.environ.get("VSEKIT_TOKEN"),
        help="require this token on every endpoint (default: $VSEKIT_TOKEN); the way to "
        "expose the service on a network",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name clients may use besides the bound host (repeatable; '*': any)",
    )
    p.add_argument("--show-paths", action="store_true", help="send absolute file paths to clients")
    p.set_defaults(handler=_serve)


def _limit_malloc_arenas(n: int = 2) -> None:
    """glibc gives each of the server's worker threads its own malloc arena; with a
    thread pool that fragments memory into hundreds of MB. Two arenas, as
    ``MALLOC_ARENA_MAX=2`` would (a no-op where glibc is absent)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-8, n)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..index.query import open_collection
    from ..serve.app import create_app
    from ..serve.guard import LOOPBACK, GuardConfig

    wildcard = args.host in ("0.0.0.0", "::", "")
    if wildcard and not args.allow_host:
        raise ValueError(
            "--host: binding every interface needs --allow-host NAME (the host names "
            "clients will use, or '*') and should have --token"
        )
    if args.host not in LOOPBACK and not args.token:
        print(f"warning: serving on {args.host} without --token", file=sys.stderr)
    hosts = [*LOOPBACK, *([] if wildcard else [args.host]), *args.allow_host]
    guard = GuardConfig(token=args.token, allowed_hosts=hosts, show_paths=args.show_paths)
    _limit_malloc_arenas()
    coll, model = open_collection(args.index, args.model)
    print(f"serving {len(coll)} images from {coll.path} on http://{args.host}:{args.port}/")
    sys.stdout.flush()
    app = create_app(coll, model, guard=guard)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
