"""Backbone activations below a tuned stage, computed once.

Fine-tuning only the last stage of a backbone (ResNet-50's ``layer4``, 15 M of its 25 M
weights but a fifth of its FLOPs) means the layers below it never change, so their output
is cached and every epoch runs only the tuned stage. For ResNet-50 that is ``layer3``'s
output, ``[1024, S/16, S/16]`` per view of side ``S``, kept as float16.

Two kinds of cache, each ``[N, V, C, h, w]``:

- ``train`` (``size=256``, ``V=1``): the photo resized to 256 x 256, as the 10-crop
  training features are (:func:`vsekit.media.views.crop_views_array`), giving a 16 x 16
  map; training reads random 14 x 14 windows of it (the 224-pixel crops at 16-pixel
  steps, the 10-crop positions among them) and their mirror images (:func:`windows`);
- ``eval`` (``size=224``, ``V=2``): the two views the index embeds (``crops=2``: the
  aspect-kept centre crop and its mirror), so a tuned model is scored exactly as the
  exported graph would see a photo.

A cache is resumable: rows are written in chunks into a preallocated ``.npy`` and
``progress.json`` records how many are final; ``meta.json`` appears only when every row
is. An unreadable photo stops the run naming the file (a training cache must not skip).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from vsekit.fsio import atomic_write
from vsekit.lab.features.backbones import Backbone
from vsekit.media.images import load_image
from vsekit.media.views import crop_views_array, decode_size

#: the tuned stage of each backbone and the layers (as attributes of ``net``) below it
BELOW_STAGE = {
    ("resnet50", "layer4"): ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3"),
}
#: view layouts: name -> (square side, views per photo, crops argument of the views)
LAYOUTS = {"train": (256, 1, 10), "eval": (224, 2, 2)}
CACHE_VERSION = 1


class StageCacheError(RuntimeError):
    """A cache that cannot be made or read (names the file)."""


def below_stage(backbone: Backbone, stage: str) -> nn.Module:
    """The frozen layers under ``stage``, input normalisation included: ``[B, 3, S, S]``
    uint8 -> ``[B, C, S/16, S/16]``."""
    names = BELOW_STAGE.get((backbone.name, stage))
    if names is None:
        known = ", ".join(f"{b}.{s}" for b, s in BELOW_STAGE)
        raise ValueError(f"tune.stage: {backbone.name}.{stage} cannot be tuned (known: {known})")
    net = backbone.net

    class _Below(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = backbone.normalize(x)
            for n in names:
                x = getattr(net, n)(x)
            return x

    return _Below().eval()


def photo_views(path: Path, layout: str) -> np.ndarray:
    """``[V, 3, S, S]`` uint8 views of one photo in ``layout`` (see :data:`LAYOUTS`)."""
    size, views, crops = LAYOUTS[layout]
    img = load_image(path, decode_size(size))
    if layout == "train":  # the 10-crop path's square resize, without cropping
        return np.asarray(img.resize((size, size), Image.BILINEAR)).transpose(2, 0, 1)[None].copy()
    return crop_views_array(img, crops, size)[:views]


@dataclass
class StageCache:
    """An opened cache: :attr:`acts` ``[N, V, C, h, w]`` float16 (memory-mapped) and the
    photo :attr:`ids` in row order."""

    path: Path
    acts: np.ndarray
    ids: list[str]
    meta: dict

    def rows_for(self, ids: Sequence[str]) -> np.ndarray:
        where = {k: i for i, k in enumerate(self.ids)}
        missing = [k for k in ids if k not in where]
        if missing:
            raise StageCacheError(f"{self.path}: no rows for {len(missing)} photos ({missing[0]})")
        return np.array([where[k] for k in ids], dtype=np.int64)


def cache_dir(
    root: str | Path, backbone: Backbone, stage: str, layout: str, ids: Sequence[str]
) -> Path:
    """``root/<backbone>-<stage>-<layout>-<hash of ids and weights>``."""
    h = hashlib.sha256(
        json.dumps([backbone.weights_sha256, stage, layout, CACHE_VERSION, list(ids)]).encode()
    ).hexdigest()[:12]
    return Path(os.path.expanduser(str(root))) / f"{backbone.name}-{stage}-{layout}-{h}"


def open_cache(path: Path) -> StageCache | None:
    """The finished cache at ``path``, or None when it is not finished."""
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        return None
    meta = json.loads(meta_file.read_text())
    ids = json.loads((path / "ids.json").read_text())
    acts = np.load(path / "acts.npy", mmap_mode="r")
    if acts.shape[0] != len(ids):
        raise StageCacheError(f"{path / 'acts.npy'}: {acts.shape[0]} rows for {len(ids)} photos")
    return StageCache(path, acts, ids, meta)


def ensure_stage_cache(
    root: str | Path,
    photos: Sequence[tuple[str, Path]],
    backbone: Backbone,
    stage: str,
    layout: str,
    batch_size: int = 32,
    progress: bool = True,
) -> StageCache:
    """The cache of ``photos`` (``(id, path)`` pairs) under ``root``, made or finished
    first. Resumes from the last chunk written."""
    ids = [k for k, _ in photos]
    path = cache_dir(root, backbone, stage, layout, ids)
    done_cache = open_cache(path)
    if done_cache is not None:
        return done_cache
    below = below_stage(backbone, stage)
    size, views, _ = LAYOUTS[layout]
    path.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        probe = below(torch.zeros(1, 3, size, size, dtype=torch.uint8))
    shape = (len(ids), views, *probe.shape[1:])
    acts_file, prog_file = path / "acts.npy", path / "progress.json"
    start = 0
    if acts_file.is_file() and prog_file.is_file():
        prog = json.loads(prog_file.read_text())
        acts = np.load(acts_file, mmap_mode="r+")
        if tuple(acts.shape) == shape and prog.get("ids") == len(ids):
            start = int(prog["done"])
        else:
            del acts
    if start == 0:
        prog_file.unlink(missing_ok=True)  # a stale count must never survive a restart
        (path / "ids.json").write_text(json.dumps(ids))
        acts = np.lib.format.open_memmap(acts_file, mode="w+", dtype=np.float16, shape=shape)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(ids), initial=start, desc=f"{stage} inputs ({layout})", unit="photo")
    for a in range(start, len(ids), batch_size):
        chunk = photos[a : a + batch_size]
        x = []
        for _, p in chunk:
            try:
                x.append(photo_views(Path(p), layout))
            except Exception as e:  # noqa: BLE001
                raise StageCacheError(f"{p}: cannot be read for the stage cache ({e})") from None
        x = torch.from_numpy(np.concatenate(x))
        with torch.inference_mode():
            y = below(x).to(torch.float16).numpy()
        acts[a : a + len(chunk)] = y.reshape(len(chunk), views, *y.shape[1:])
        acts.flush()
        atomic_write(prog_file, json.dumps({"done": a + len(chunk), "ids": len(ids)}))
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    del acts
    meta = {
        "backbone": backbone.name,
        "weights_sha256": backbone.weights_sha256,
        "stage": stage,
        "layout": layout,
        "size": size,
        "views": views,
        "shape": list(shape),
        "version": CACHE_VERSION,
    }
    atomic_write(path / "meta.json", json.dumps(meta, indent=1))
    out = open_cache(path)
    assert out is not None
    return out


def windows(acts: np.ndarray, out: int, rng: np.random.Generator | None) -> torch.Tensor:
    """``[B, C, out, out]`` float32 windows of ``acts`` (``[B, 1, C, h, w]``, one train
    view each): with ``rng``, each row's own random window and, half the time, its mirror
    image (flipped along the width: close to, not equal to, a mirrored photo's map);
    without, the centre window."""
    a = torch.from_numpy(np.asarray(acts[:, 0], dtype=np.float32))
    h = a.shape[-1]
    if rng is None:
        o = (h - out) // 2
        return a[..., o : o + out, o : o + out].contiguous()
    top = rng.integers(0, h - out + 1, len(a))
    left = rng.integers(0, h - out + 1, len(a))
    flip = rng.random(len(a)) < 0.5
    rows = []
    for i in range(len(a)):
        w = a[i, :, top[i] : top[i] + out, left[i] : left[i] + out]
        rows.append(w.flip(-1) if flip[i] else w)
    return torch.stack(rows)
