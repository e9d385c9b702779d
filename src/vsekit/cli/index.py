"""``vse index``: embed every photo and video under a folder, incrementally."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

from vsekit.cli._base import (
    DEFAULT_INDEX,
    command,
    load_model,
    positive_float,
    positive_int,
    set_threads,
)

#: skipped files listed by name before the rest are summarised (``--verbose``: all)
SHOWN = 5


def report_skipped(failed: list[tuple[str, str]], verbose: bool = False) -> None:
    """One stderr line per skipped file, up to :data:`SHOWN` (all with ``verbose``), then
    one line counting the rest by reason: 100,000 empty files are not 100,000 lines."""
    from collections import Counter

    from vsekit.index.scan import shown

    def reason(path: str, err: str) -> str:
        return err[len(path) :].lstrip(": ") if err.startswith(path) else err

    for path, err in failed if verbose else failed[:SHOWN]:
        print(f"skipped {shown(path)}: {shown(reason(path, err))}", file=sys.stderr)
    rest = [] if verbose else failed[SHOWN:]
    if rest:
        why = Counter(reason(p, e).split(" (")[0] for p, e in rest)
        kinds = ", ".join(f"{n:,} {w}" for w, n in why.most_common(3))
        more = f", {len(why) - 3} other reasons" if len(why) > 3 else ""
        print(f"... and {len(rest):,} more skipped ({kinds}{more}); --verbose lists them",
              file=sys.stderr)  # fmt: skip


INT8_HINT_ROWS = 1_000_000  # from this many photos, vse index suggests int8 rows


@command
def _add_index(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="embed every photo and video under a folder (incremental)")
    p.add_argument("folder", help="folder of photos (searched recursively)")
    p.add_argument("--model", default="default", help="model bundle or run (default: shipped)")
    p.add_argument("--index", default=DEFAULT_INDEX, help="index directory")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument(
        "--threads", type=positive_int, help="CPU threads for the model (default: all cores)"
    )
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="build a new index beside the old one and swap it in when complete",
    )
    p.add_argument(
        "--repair",
        action="store_true",
        help="keep what a damaged index still holds and re-embed only what is missing",
    )
    p.add_argument(
        "--storage",
        choices=("f32", "int8"),
        help="how a new index stores its embeddings: f32 (the default), or int8 (a quarter "
        "of the disk, for collections beyond RAM; with --rebuild, converts an index)",
    )
    p.add_argument(
        "--max-ram",
        metavar="SIZE",
        help="RAM budget of the search structure (e.g. 4G, the default; recorded): above "
        "half of it in float32 rows, FAISS IVF-PQ, re-ranked from the rows on disk",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="embed on a Ray cluster ([ray] extra): ADDRESS of its head, `auto` for the "
        "running one, none for a local one; this process stays the one writer",
    )
    p.add_argument(
        "--workers", type=positive_int, help="with --ray: model replicas (default: CPUs / 1)"
    )
    p.add_argument(
        "--cpus-per-worker",
        type=positive_int,
        default=1,
        help="with --ray: CPUs (and model threads) each replica takes",
    )
    p.add_argument(
        "--gpus-per-worker",
        type=positive_float,
        default=0,
        help="with --ray: the share of a GPU each replica takes (e.g. 1 or 0.5); replicas "
        "then run on ONNX Runtime's CUDA provider (onnxruntime-gpu on every worker)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--no-caption-pool",
        action="store_true",
        help="do not prepare the model's caption pool now (the first annotation will)",
    )
    p.add_argument(
        "--verbose", action="store_true", help=f"list every skipped file (else the first {SHOWN})"
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip files whose path below the folder matches (repeatable), e.g. '*/raw/*'",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--watch",
        action="store_true",
        help="then keep watching the folder: new, changed, moved and deleted files are "
        "picked up within seconds (Ctrl-C stops)",
    )
    p.add_argument(
        "--interval", type=float, default=2.0, help="seconds between two looks at the folder"
    )
    p.set_defaults(handler=_index)


def _index(args: argparse.Namespace) -> int:
    from vsekit.index import Collection, model_info
    from vsekit.index.query import update_index

    t0 = time.perf_counter()
    if args.threads:
        set_threads(args.threads)
    index = Path(args.index).expanduser()
    if not Path(args.folder).expanduser().is_dir():  # before any index is created
        raise ValueError(f"{args.folder}: not a folder")
    if args.rebuild and args.repair:
        raise ValueError("--rebuild and --repair: choose one")
    from vsekit.index.ann import budget_note, choose_spec, parse_size
    from vsekit.index.schema import CollectionError
    from vsekit.index.store import storage_of

    budget = parse_size(args.max_ram) if args.max_ram else None
    try:
        existing = storage_of(index)
    except CollectionError:
        if not args.rebuild:
            raise
        existing = None  # a damaged index: --rebuild is the cure, in the storage asked for
    if args.storage and existing and args.storage != existing and not args.rebuild:
        raise ValueError(
            f"{index}: stores its embeddings as {existing}; add --rebuild to store them as "
            f"{args.storage}"
        )
    model = load_model(args.model)
    info = dict(model_info(model, args.model), storage=args.storage or existing or "f32")

    batches = None
    if args.ray is not None:
        from vsekit.index.ray_index import ray_batches

        # workers load the model by name, or by the same absolute path
        where = Path(args.model).expanduser()
        name = str(where.resolve()) if where.exists() else args.model
        batches = ray_batches(name, int(info["dim"]), model.decode_size,
                              info.get("similarity", "cosine") == "cosine", args.batch_size,
                              args.ray or None, args.workers, args.cpus_per_worker,
                              info["fingerprint"], args.gpus_per_worker)  # fmt: skip
    elif args.workers or args.cpus_per_worker != 1 or args.gpus_per_worker:
        raise ValueError("--workers, --cpus-per-worker and --gpus-per-worker go with --ray")

    def fill(coll: Collection):
        t1 = time.perf_counter()
        if budget is not None:
            choose_spec(max(len(coll), 1), coll.dim, budget)  # refused before it is recorded
            note = budget_note(max(len(coll), 1), coll.dim, budget)
            if note:
                print(note, file=sys.stderr)
            coll.store.set_ann_budget(budget)
        # embed, then each photo's CSLS penalty (and FAISS) and evidence, for `vse search`
        rep = update_index(coll, model, args.folder, args.batch_size,
                           not args.quiet and not args.json, args.exclude, batches)  # fmt: skip
        pool = model.caption_pool if model.captions and not args.no_caption_pool else None
        if pool is not None and not pool.ready and not pool.on_disk():
            # here, where a wait is expected, not at the first annotation or page view:
            # once per model and machine (then cached), with progress
            pool.prepare()
        rep.seconds = time.perf_counter() - t1
        return rep

    if args.watch:  # a SIGTERM in the first pass stops it as Ctrl-C does, cleanly
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.rebuild:  # the old index stays searchable, and is kept if this fails
            with Collection.rebuild(index, info) as coll:
                rep = fill(coll)
            coll = Collection(index, info)
        else:
            coll = Collection(index, info, repair=args.repair)
            rep = fill(coll)
    except KeyboardInterrupt:
        if not args.watch:
            raise
        if args.rebuild:  # an unfinished rebuild is thrown away: the old index stays
            print("stopped watching (in the first pass: the rebuild was not finished and "
                  "is discarded; the index is as it was)", file=sys.stderr)  # fmt: skip
            return 130
        print("stopped watching (in the first pass: what it committed is kept, and the "
              "next run embeds the rest)", file=sys.stderr)  # fmt: skip
        return 0
    rep.seconds = time.perf_counter() - t0  # the wall time: model load and caches too
    report_skipped(rep.failed, args.verbose)
    if rep.scanned == 0:
        from vsekit.media.images import IMAGE_SUFFIXES
        from vsekit.media.video import VIDEO_SUFFIXES

        kinds = ", ".join(sorted({*IMAGE_SUFFIXES, *VIDEO_SUFFIXES}))
        print(f"warning: {args.folder}: no photos or videos found (looked for {kinds})",
              file=sys.stderr)  # fmt: skip
    if args.json:
        print(json.dumps({"index": str(index), "images": len(coll), **asdict(rep)}, indent=2))
    else:
        print(f"{index}: {rep.summary()}; {len(coll):,} images indexed")
    if coll.store.storage == "f32" and len(coll) >= INT8_HINT_ROWS:
        gb = len(coll) * coll.dim * 4 / 1e9
        print(f"hint: {index} holds {gb:.1f} GB of float32 rows; `--storage int8 --rebuild` "
              "stores them in a quarter of that", file=sys.stderr)  # fmt: skip
    if args.watch:
        return _watch(args, coll, fill)
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _watch(args: argparse.Namespace, coll, fill) -> int:
    """Keep the index in line with the folder until Ctrl-C or SIGTERM."""
    import threading

    from vsekit.index.watch import watch

    if args.interval <= 0:
        raise ValueError(f"--interval: must be positive, got {args.interval}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"watching {args.folder} (every {args.interval:g} s; Ctrl-C stops)", file=sys.stderr)
    sys.stdout.flush()

    def report(rep) -> None:
        report_skipped(rep.failed, args.verbose)
        print(f"{time.strftime('%H:%M:%S')} {rep.summary()}; {len(coll):,} images indexed",
              flush=True)  # fmt: skip

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: a normal end
        watch(args.folder, lambda: fill(coll), args.interval, stop, args.exclude, report,
              lambda msg: print(f"warning: {msg}", file=sys.stderr, flush=True))  # fmt: skip
    print("stopped watching", file=sys.stderr)
    return 0
