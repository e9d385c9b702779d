"""``vse features``: backbone layers, FeatureStore extraction (images and videos), FNE,
the audio channel of videos, store info."""

from __future__ import annotations

import argparse
import json
import sys

from vsekit.cli._base import FORMAT_HELP, command, positive_float, positive_int


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
    src.add_argument("--root", help="dataset folder (or file) to read images or videos from")
    src.add_argument(
        "--images", help="a plain folder of images and videos (all of them, split 'all')"
    )
    ex.add_argument("--dataset", help=FORMAT_HELP)
    ex.add_argument("--splits", help="comma-separated splits to extract (default: all)")
    ex.add_argument("--backbone", default="resnet50")
    ex.add_argument("--weights", default="auto", help="weights file (default: installed)")
    ex.add_argument("--crops", type=int, choices=(1, 2, 10), default=10)
    ex.add_argument("--batch-size", type=positive_int, default=8, help="images per batch")
    ex.add_argument(
        "--workers",
        type=positive_int,
        help="image-decoding processes (default 1); with --ray: backbone replicas (default: "
        "the cluster's CPUs / --cpus-per-worker)",
    )
    ex.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run the backbone on a Ray cluster ([ray] extra): ADDRESS of its head, `auto` "
        "for the running one, none for a local one; this process writes the store",
    )
    ex.add_argument("--cpus-per-worker", type=positive_int, default=1,
                    help="with --ray: CPUs (and torch threads) each replica takes")  # fmt: skip
    ex.add_argument("--gpus-per-worker", type=positive_float, default=0,
                    help="with --ray: the share of a GPU each replica takes; the backbone "
                    "then runs on CUDA")  # fmt: skip
    ex.add_argument("--no-rmac", action="store_true", help="skip R-MAC descriptors")
    ex.add_argument(
        "--threads", type=positive_int, help="CPU threads for the model (default: all cores)"
    )
    ex.add_argument("--out", required=True, help="store directory (resumed if unfinished)")
    add_sampling_args(ex)
    ex.set_defaults(handler=_features_extract)

    au = fsub.add_parser(
        "audio", help="bag-of-MFCC audio histograms of a video store (codebook fit on one split)"
    )
    au.add_argument("--store", required=True)
    au.add_argument("--root", required=True, help="the dataset the store was extracted from")
    au.add_argument("--dataset", help=FORMAT_HELP)
    au.add_argument("--fit-split", default="train", help="split the k-means codebook is fit on")
    au.add_argument("--k", type=positive_int, default=1024, help="codebook size (paper: 1024)")
    au.add_argument("--seed", type=int, default=0)
    au.set_defaults(handler=_features_audio)

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


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--every", type=float, default=None, help="videos: one frame every SECONDS (default: 1)"
    )
    g.add_argument("--frames", type=positive_int, help="videos: N frames per clip instead")


def sampling_of(args: argparse.Namespace):
    from vsekit.media.video import Sampling

    if args.frames:
        return Sampling(every=None, n=args.frames)
    return Sampling(every=args.every or 1.0)


def _features_layers(args: argparse.Namespace) -> int:
    from vsekit.lab.features.backbones import create_backbone

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

    from vsekit.lab.features.extract import ExtractItem
    from vsekit.media.images import IMAGE_SUFFIXES
    from vsekit.media.video import VIDEO_SUFFIXES

    if args.images:
        root = Path(args.images)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such folder")
        media = IMAGE_SUFFIXES + VIDEO_SUFFIXES
        files = sorted(p for p in root.rglob("*") if p.suffix.lower() in media)
        return [ExtractItem(str(p.relative_to(root)), p, "all") for p in files], root.name
    from vsekit.lab.data import load_dataset

    ds = load_dataset(args.root, args.dataset)
    if args.splits:
        ds = ds.split(*args.splits.split(","))
    if any(im.path is None for im in ds.images):
        raise ValueError(f"{args.root}: this dataset has no image files to extract from")
    return [ExtractItem(im.id, im.path, im.split) for im in ds.images], ds.name


def _features_extract(args: argparse.Namespace) -> int:
    import torch

    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.extract import extract_to_store, failed_images

    if args.threads:
        torch.set_num_threads(args.threads)
    items, name = _extract_items(args)
    model = create_backbone(args.backbone, weights=args.weights)
    blocks = None
    if args.ray is not None:
        from vsekit.lab.features.ray_extract import ray_blocks

        blocks = ray_blocks(model, args.ray or None, args.workers, args.cpus_per_worker,
                            args.gpus_per_worker)  # fmt: skip
    elif args.cpus_per_worker != 1 or args.gpus_per_worker:
        raise ValueError("--cpus-per-worker and --gpus-per-worker go with --ray")
    store = extract_to_store(
        items,
        args.out,
        model,
        crops=args.crops,
        batch_size=args.batch_size,
        workers=args.workers or 1,
        with_rmac=not args.no_rmac,
        dataset=name,
        sampling=sampling_of(args),
        blocks=blocks,
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
    from vsekit.lab.features.store import FeatureStore

    store = FeatureStore(args.store)
    store.fit_fne(args.fit_split, args.f_minus, args.f_plus)
    fne = store.fne
    frac = [float((fne[:2000] == v).mean()) for v in (-1, 0, 1)]
    print(
        f"{store.path}: FNE fitted on {store.meta['fne']['n_fit']} {args.fit_split} rows; "
        f"fractions -1/0/1 (first rows): " + "/".join(f"{f:.2f}" for f in frac)
    )
    return 0


def _features_audio(args: argparse.Namespace) -> int:
    from vsekit.lab.data import load_dataset
    from vsekit.lab.features.audio_store import add_audio
    from vsekit.lab.features.store import FeatureStore

    store = FeatureStore(args.store)
    ds = load_dataset(args.root, args.dataset)
    info = add_audio(store, {im.id: im.path for im in ds.images}, args.fit_split, args.k, args.seed)
    clips = ", ".join(f"{n} {what}" for what, n in info["clips"].items())
    print(
        f"{store.path}: {info['k']}-word audio codebook fit on {info['n_fit_clips']} "
        f"{args.fit_split} clips ({info['n_fit_frames']:,} MFCC frames); clips: {clips}"
    )
    return 0


def _features_info(args: argparse.Namespace) -> int:
    from vsekit.lab.features.store import FeatureStore

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
