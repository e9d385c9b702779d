"""``vse train`` and ``vse eval``: train from an experiment config, evaluate a run."""

from __future__ import annotations

import argparse
import json
import os
import sys

from vsekit.cli._base import command, positive_float, positive_int


@command
def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a joint embedding from an experiment config")
    p.add_argument("config", help="experiment YAML (see configs/)")
    p.add_argument("--run-dir", help="run directory (default: runs/<config name>)")
    p.add_argument("--resume", action="store_true", help="continue a killed run exactly")
    p.add_argument(
        "--data-root",
        default=os.environ.get("VSEKIT_DATA_ROOT"),
        help="override data.root (a Flickr8k folder, ...); $VSEKIT_DATA_ROOT",
    )
    p.add_argument("--store", help="override data.store (FeatureStore directory)")
    p.add_argument("--epochs", type=positive_int, help="override train.epochs")
    p.add_argument("--max-minutes", type=positive_float, help="override train.max_minutes")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config field, e.g. --set tags.scheme=compound (repeatable)",
    )
    p.add_argument(
        "--nproc",
        type=positive_int,
        default=1,
        help="processes on this machine (torchrun; DistributedDataParallel, the global "
        "batch's negatives on every rank); several machines: run torchrun yourself",
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
    e.add_argument(
        "--data-root",
        default=os.environ.get("VSEKIT_DATA_ROOT"),
        help="override the dataset folder of the run's config; $VSEKIT_DATA_ROOT",
    )
    e.add_argument("--store", help="override the FeatureStore of the run's config")
    e.add_argument("--json", action="store_true")
    e.set_defaults(handler=_eval)


def _launch(nproc: int) -> int:
    """Run this very command again under torchrun on ``nproc`` local processes."""
    import subprocess

    argv, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            argv.append(a)
    # the program that is running (the `vse` script, `python -m vsekit`'s __main__.py, or
    # a wrapper of the caller's), so that each rank runs exactly this command
    prog = sys.argv[0] if os.path.isfile(sys.argv[0]) else None
    target = [prog] if prog else ["-m", "vsekit"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", *target, *argv]  # fmt: skip
    return subprocess.call(cmd)


def _train(args: argparse.Namespace) -> int:
    from vsekit.lab.train import load_config, train
    from vsekit.lab.train.config import apply_overrides

    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        return _launch(args.nproc)
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
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # rank 0 reports, and its exit code says whether the run collapsed
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


def format_table(m: dict, video: bool = False) -> str:
    """The journal paper's layout: annotation and retrieval R@1/5/10, Med r, mean r, rsum;
    for videos, Word2VisualVec Table 5's names (video-to-sentence first)."""
    names = ("video-to-sentence", "sentence-to-video") if video else ("annotation", "retrieval")
    w = max(12, len(names[0]) + 2)
    head = f"{'':<{w}}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'Med r':>7}{'Mean r':>8}"
    rows = [
        f"{name:<{w}}"
        + "".join(f"{m[f'{d}_r{k}']:>7.1f}" for k in (1, 5, 10))
        + f"{m[f'{d}_medr']:>7.0f}{m[f'{d}_meanr']:>8.1f}"
        for name, d in zip(names, ("i2t", "t2i"), strict=True)
    ]
    return "\n".join([head, *rows, f"{'rsum':<{w}}{m['rsum']:>7.1f}"])


def _eval(args: argparse.Namespace) -> int:
    from vsekit.lab.data import load_dataset
    from vsekit.lab.eval import evaluate_model
    from vsekit.lab.features.store import FeatureStore
    from vsekit.lab.train import load_run
    from vsekit.lab.train.config import DataConfig, from_dict
    from vsekit.lab.train.features import image_features
    from vsekit.media.video import is_video

    model, meta = load_run(args.run, args.checkpoint)
    if meta["config"].get("tune"):
        print(f"vse: {args.run}: a tuned-stage run (tune:) is scored by its own selection "
              "split and benchmarks/backbone_tuning.py; `vse eval` reads frozen features",
              file=sys.stderr)  # fmt: skip
        return 2
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
    video = any(im.path is not None and is_video(im.path) for im in ds.images)
    print(json.dumps(m, indent=2) if args.json else format_table(m, video))
    return 0


def _eval_tags(args: argparse.Namespace, model, meta: dict) -> int:
    from vsekit.lab.tags.evaluate import evaluate_tags
    from vsekit.lab.train.config import ExperimentConfig, from_dict
    from vsekit.lab.train.tags import load_tag_data

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
