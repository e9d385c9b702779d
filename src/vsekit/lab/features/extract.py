"""Batched, resumable extraction of pooled activations into a FeatureStore.

Images are decoded and cropped in DataLoader worker processes; the backbone runs in
inference mode. Per image, the pooled activations of every FNE layer (and optionally the
R-MAC descriptor of the last conv map) are averaged over its crop views. A video item
(:func:`vsekit.media.video.is_video`) gives the frames its ``Sampling`` picks, each cropped the
same way, and its row is the mean over all of them: the mean over frames of the mean over
crops (Word2VisualVec section 3.4 mean-pools frame features).

Resumability: batches sit on a fixed grid (image ``k`` is always in batch
``k // batch_size``), and a batch is committed by writing its rows, flushing them, then
atomically replacing ``progress.json``. After a kill, the same command continues from the
last committed batch and produces the same bytes as an uninterrupted run. Unreadable
images are recorded in ``failed.jsonl`` and get no row; they are reported at the end.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from vsekit.fsio import LockBusy, RowFile, atomic_write, exclusive_lock
from vsekit.lab.features.backbones import Backbone
from vsekit.lab.features.crops import crop_views, decode_size
from vsekit.lab.features.rmac import rmac
from vsekit.lab.features.store import STORE_VERSION, FeatureStore, StoreError, ids_digest
from vsekit.media.images import ImageError, load_image
from vsekit.media.video import Sampling, is_video, read_frames


@dataclass(frozen=True)
class ExtractItem:
    id: str
    path: Path
    split: str = "all"


def item_views(path: Path, crops: int, size: int, sampling: Sampling | None) -> torch.Tensor:
    """``[V, 3, size, size]`` uint8: an image's ``crops`` views, or those of every sampled
    frame of a video (``V = frames x crops``)."""
    if is_video(path):
        _, frames = read_frames(path, sampling or Sampling(), decode_size(size))
        return torch.cat([crop_views(f, crops, size) for f in frames])
    return crop_views(load_image(path, decode_size(size)), crops, size)


class _ViewsDataset(torch.utils.data.Dataset):
    def __init__(
        self,
        items: Sequence[ExtractItem],
        start: int,
        crops: int,
        size: int,
        sampling: Sampling | None = None,
    ):
        self.items, self.start, self.crops, self.size = items, start, crops, size
        self.sampling = sampling

    def __len__(self) -> int:
        return len(self.items) - self.start

    def __getitem__(self, k: int):
        k += self.start
        return read_views(k, self.items[k].path, self.crops, self.size, self.sampling)


def read_views(k: int, path, crops: int, size: int, sampling: Sampling | None):
    """``(k, views, None)``, or ``(k, None, error)`` for a file that cannot be read: a
    bad file must never stop a long run (here, or in a Ray worker)."""
    try:
        return k, item_views(path, crops, size, sampling), None
    except ImageError as e:
        return k, None, str(e)
    except Exception as e:  # noqa: BLE001
        return k, None, f"{path}: {type(e).__name__}: {e}"


def _collate(batch):
    return batch  # list of (index, views | None, error | None)


#: (items, start, crops, size, sampling, with_rmac, batch_size) -> batches in item order,
#: each ``([(index, error or None)], pooled [good, D] float32, rmac [good, R] or None)``
BlockSource = Callable[..., Iterator[tuple[list, np.ndarray, np.ndarray | None]]]


def features_of(model: Backbone, batch: list, crops: int, with_rmac: bool):
    """``batch``: ``[(index, views or None, error or None)]`` -> ``([(index, error)],
    pooled, rmac)`` for the items whose views were read (the rows a store appends)."""
    good = [v for _, v, err in batch if err is None]
    pooled = rm = None
    if good:
        counts = [len(v) for v in good]
        p, r = pooled_features(model, torch.cat(good), crops, with_rmac, counts=counts)
        pooled, rm = p.numpy(), (r.numpy() if with_rmac else None)
    return [(k, err) for k, _, err in batch], pooled, rm


def local_blocks(model: Backbone, workers: int = 1) -> BlockSource:
    """This process computes the features; ``workers`` processes decode the views."""

    def source(items, start, crops, size, sampling, with_rmac, batch_size):
        loader = DataLoader(
            _ViewsDataset(items, start, crops, size, sampling),
            batch_size=batch_size,
            num_workers=workers,
            collate_fn=_collate,
            persistent_workers=False,
            prefetch_factor=4 if workers else None,
        )
        for batch in loader:
            yield features_of(model, batch, crops, with_rmac)

    return source


LOCK_NAME = "extract.lock"  # held by the one extraction writing a store

#: Crops per forward call. Small micro-batches are faster per crop on CPU (they stay in
#: cache): measured on a 2-core EPYC with ResNet-50, 8 crops take 0.062 s/crop, 80 crops
#: 0.080 s/crop (channels-last both).
FORWARD_CHUNK = 8


@torch.inference_mode()
def pooled_features(
    model: Backbone,
    views: torch.Tensor,
    n_crops: int,
    with_rmac: bool = False,
    chunk: int = FORWARD_CHUNK,
    counts: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``views``: ``[V, 3, S, S]`` uint8 -> ``([B, fne_dim], [B, C] | None)``, averaged
    over each item's views (R-MAC re-normalised after averaging). ``counts``: views per
    item (default: ``n_crops`` each, ``B = V / n_crops``); a video's frames x crops are
    one item. The backbone sees ``chunk`` views at a time."""
    device = model.mean.device
    if device.type != "cpu":
        chunk = len(views)  # accelerators prefer one large batch
    pooled_parts, rmac_parts = [], []
    for a in range(0, len(views), chunk):
        v = views[a : a + chunk].to(device, non_blocking=True)
        pooled, last = model.forward_pooled(
            v.contiguous(memory_format=torch.channels_last), keep_last_map=with_rmac
        )
        pooled_parts.append(pooled.float().cpu())
        if with_rmac:
            rmac_parts.append(rmac(last).float().cpu())
    counts = list(counts) if counts is not None else [n_crops] * (len(views) // n_crops)
    if sum(counts) != len(views):
        raise ValueError(f"counts add up to {sum(counts)} views, got {len(views)}")

    def item_means(x: torch.Tensor) -> torch.Tensor:
        return torch.stack([part.mean(dim=0) for part in torch.split(x, counts)])

    pooled = item_means(torch.cat(pooled_parts))
    r = None
    if with_rmac:
        r = torch.nn.functional.normalize(item_means(torch.cat(rmac_parts)), dim=1)
    return pooled, r


def prepare_model(model: Backbone, device: str | torch.device | None = None) -> Backbone:
    """Eval mode, channels-last memory (faster convolutions on CPU and GPU), on ``device``
    (default: CUDA when present, else CPU)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.eval().to(device, memory_format=torch.channels_last)


def _store_meta(
    model: Backbone,
    items: Sequence[ExtractItem],
    crops: int,
    rmac_on: bool,
    batch_size: int,
    dataset: str,
    sampling: Sampling | None,
) -> dict:
    videos = any(is_video(i.path) for i in items)
    return {
        "version": STORE_VERSION,
        "backbone": model.name,
        "weights": model.weights_source,
        "weights_sha256": model.weights_sha256,
        "layers": [{"name": lay.name, "channels": lay.channels} for lay in model.layers],
        "fne_dim": model.fne_dim,
        "baseline_layer": model.baseline_layer,
        "baseline_dim": model.baseline_dim,
        "rmac_dim": model.layer(model.last_map_layer).channels if rmac_on else None,
        "crops": crops,
        "input_size": model.input_size,
        "preprocess": {
            "mean": model.mean.flatten().tolist(),
            "std": model.std.flatten().tolist(),
            "resize": "see vsekit.lab.features.crops",
        },
        "batch_size": batch_size,
        "dataset": dataset,
        "n_items": len(items),
        "ids_sha1": ids_digest(i.id for i in items),
        # how frames were sampled, for stores of videos (None: images only)
        "video": (sampling or Sampling()).describe() if videos else None,
        "complete": False,
    }


_IDENTITY = (
    "backbone",
    "weights",
    "layers",
    "crops",
    "input_size",
    "rmac_dim",
    "batch_size",
    "n_items",
    "ids_sha1",
    "video",
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _one_writer(fn: Callable[..., FeatureStore]) -> Callable[..., FeatureStore]:
    """Run an extraction into the store ``out`` only while it holds the store's
    ``extract.lock``: two extractions into one store would both append rows."""

    @functools.wraps(fn)
    def locked(items, out, *args, **kwargs) -> FeatureStore:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        try:
            with exclusive_lock(out / LOCK_NAME):
                return fn(items, out, *args, **kwargs)
        except LockBusy:
            raise StoreError(
                f"{out}: another extraction is writing this store; let it finish (or stop "
                "it) and run the same command again to resume"
            ) from None

    return locked


@_one_writer
def extract_to_store(
    items: Sequence[ExtractItem],
    out: str | Path,
    model: Backbone,
    crops: int = 10,
    batch_size: int = 16,
    workers: int = 1,
    with_rmac: bool = True,
    dataset: str = "",
    progress: bool = True,
    on_batch: Callable[[int], None] | None = None,
    device: str | None = None,
    sampling: Sampling | None = None,
    blocks: BlockSource | None = None,
) -> FeatureStore:
    """Extract pooled features of ``items`` into the store at ``out`` (resuming it if it
    holds a matching unfinished extraction).

    Args:
        on_batch: called with the number of committed images after each batch (tests
            use it to simulate a kill).
        device: where the backbone runs (default: CUDA when present, else CPU).
        sampling: which frames of a video item are used (default: one a second).
        blocks: where the computed batches come from, in item order (default
            :func:`local_blocks`: this process, ``workers`` decoding processes;
            ``vse features extract --ray``: :func:`vsekit.lab.features.ray_extract.ray_blocks`).
            Each is committed as it arrives, so a killed run resumes after the last one.

    Raises:
        StoreError: ``out`` holds a store made with other settings or images, or
            another extraction is writing it (one writer per store: ``extract.lock``).
    """
    out = Path(out)  # created, and locked, by _one_writer
    model = prepare_model(model, device)
    meta = _store_meta(model, items, crops, with_rmac, batch_size, dataset, sampling)
    meta_file = out / "meta.json"
    if meta_file.is_file():
        old = json.loads(meta_file.read_text())
        diff = [k for k in _IDENTITY if old.get(k) != meta.get(k)]
        if diff:
            raise StoreError(
                f"{out}: holds features made with other settings ({', '.join(diff)} differ); "
                "choose another --out or delete it"
            )
        if old.get("complete"):
            return FeatureStore(out)
        meta = old
    else:
        atomic_write(meta_file, json.dumps(meta, indent=2))

    n, dim = len(items), model.fne_dim
    prog_file = out / "progress.json"
    prog = json.loads(prog_file.read_text()) if prog_file.is_file() else {}
    done, rows = int(prog.get("images", 0)), int(prog.get("rows", 0))
    elapsed = float(prog.get("seconds", 0.0))
    # One record per invocation, so a resumed store says how fast each stretch ran.
    runs: list[dict] = list(prog.get("runs", []))
    if not runs and done:
        runs.append({"from": 0, "images": done, "seconds": round(elapsed, 1), "started": None})
    runs.append({"from": done, "images": 0, "seconds": 0.0, "started": _now()})
    # Drop anything written after the last commit.
    for name, keep in (("ids.txt", rows), ("splits.txt", rows)):
        f = out / name
        lines = f.read_text(encoding="utf-8").splitlines()[:keep] if f.is_file() else []
        atomic_write(f, "".join(x + "\n" for x in lines))
    failed_f = out / "failed.jsonl"
    failed = (
        [json.loads(x) for x in failed_f.read_text().splitlines()] if failed_f.is_file() else []
    )
    failed = [f for f in failed if f["index"] < done]
    atomic_write(failed_f, "".join(json.dumps(f) + "\n" for f in failed))

    def open_rows(name: str, d: int) -> RowFile:
        f = RowFile(out / name, d)
        f.truncate(rows)  # the committed rows; an interrupted batch's bytes go
        return f

    pooled_rf = open_rows("pooled.f32", dim)
    rmac_rf = open_rows("rmac.f32", meta["rmac_dim"]) if meta["rmac_dim"] else None

    if blocks is None:
        blocks = local_blocks(model, workers)
    source = blocks(items, done, crops, model.input_size, sampling, rmac_rf is not None,
                    batch_size)  # fmt: skip
    bar = tqdm(
        total=n, initial=done, unit="img", disable=not progress, desc="extract", dynamic_ncols=True
    )
    t0 = time.perf_counter()
    with (
        open(out / "ids.txt", "a", encoding="utf-8") as ids_f,
        open(out / "splits.txt", "a", encoding="utf-8") as splits_f,
        open(failed_f, "a", encoding="utf-8") as fail_f,
        bar,
    ):
        for batch, pooled, r in source:
            good = [(k, None) for k, err in batch if err is None]
            for k, err in batch:
                if err is not None:
                    rec = {"index": k, "id": items[k].id, "path": str(items[k].path), "error": err}
                    fail_f.write(json.dumps(rec) + "\n")
            if good:
                pooled_rf.append(pooled)
                pooled_rf.sync()
                if rmac_rf is not None:
                    rmac_rf.append(r)
                    rmac_rf.sync()
                for k, _ in good:
                    ids_f.write(items[k].id + "\n")
                    splits_f.write(items[k].split + "\n")
            for f in (ids_f, splits_f, fail_f):
                f.flush()
                os.fsync(f.fileno())
            rows += len(good)
            done = batch[-1][0] + 1
            run_secs = time.perf_counter() - t0
            runs[-1].update(images=done - runs[-1]["from"], seconds=round(run_secs, 1))
            atomic_write(
                prog_file,
                json.dumps(
                    {"images": done, "rows": rows, "seconds": elapsed + run_secs, "runs": runs}
                ),
            )
            bar.update(len(batch))
            if on_batch is not None:
                on_batch(done)
    # Finish: every row was appended and fsync'ed before its count was committed; mark
    # the store complete.
    meta.update(
        n=rows,
        complete=True,
        failed=n - rows,
        extract_seconds=round(elapsed + time.perf_counter() - t0, 1),
        runs=[r for r in runs if r["images"]],
    )
    atomic_write(meta_file, json.dumps(meta, indent=2))
    return FeatureStore(out)


def failed_images(store: str | Path) -> list[dict]:
    """The unreadable images an extraction skipped: ``[{"id", "path", "error"}]``."""
    f = Path(store) / "failed.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines()] if f.is_file() else []


@torch.inference_mode()
def embed_images(
    model: Backbone, images: Sequence, crops: int = 1, with_rmac: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """Pooled features of PIL images or paths, in memory: ``([N, fne_dim], [N, C] | None)``.
    Raises :class:`~vsekit.media.images.ImageError` for an unreadable path."""
    views = [
        crop_views(
            im if not isinstance(im, str | Path) else load_image(im, decode_size(model.input_size)),
            crops,
            model.input_size,
        )
        for im in images
    ]
    if not views:
        return np.zeros((0, model.fne_dim), np.float32), None
    pooled, r = pooled_features(model, torch.cat(views), crops, with_rmac)
    return pooled.numpy(), (r.numpy() if r is not None else None)


def check_store_matches(store: FeatureStore, model: Backbone, crops: int) -> None:
    """Raise :class:`StoreError` if ``store`` was not made by ``model`` with ``crops``."""
    m = store.meta
    mine = {"backbone": model.name, "crops": crops}
    if "weights_sha256" in m:  # stores from before weight hashes compare by source
        mine["weights_sha256"] = model.weights_sha256
    else:
        mine["weights"] = model.weights_source
    diff = [f"{k}: store {m.get(k)!r} vs {v!r}" for k, v in mine.items() if m.get(k) != v]
    if diff:
        raise StoreError(f"{store.path}: features do not match the model ({'; '.join(diff)})")
