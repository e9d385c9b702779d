"""The VSE++/SCAN precomputed layout: ``{split}_caps.txt`` plus ``{split}_ims.npy``.

``{split}_caps.txt`` has one caption per line. ``{split}_ims.npy`` has either one row
per image (captions of an image are consecutive, ``n_caps / n_rows`` each) or one row
per caption (each image's row repeated for each of its captions; consecutive equal
rows are one image). Features are memory-mapped, never loaded whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vsekit.lab.data._io import read_lines
from vsekit.lab.data.dataset import (
    Caption,
    Dataset,
    DatasetError,
    FeatureRows,
    ImageRecord,
    normalise_split,
)

_CHUNK = 4096


def precomp_splits(root: Path) -> list[str]:
    return sorted(p.name.removesuffix("_caps.txt") for p in root.glob("*_caps.txt"))


def _repeat_groups(ims: np.ndarray) -> np.ndarray:
    """Start row of each run of identical consecutive rows (streamed in chunks)."""
    starts = [0]
    prev = None
    for a in range(0, len(ims), _CHUNK):
        block = np.asarray(ims[a : a + _CHUNK]).reshape(min(_CHUNK, len(ims) - a), -1)
        if prev is not None and not np.array_equal(prev, block[0]):
            starts.append(a)
        diff = np.any(block[1:] != block[:-1], axis=1)
        starts.extend((a + 1 + np.flatnonzero(diff)).tolist())
        prev = block[-1]
    return np.asarray(starts, dtype=np.int64)


def load_precomp(
    root: str | Path,
    splits: list[str] | None = None,
    captions_per_image: int | None = None,
) -> Dataset:
    """Load a precomputed-features folder.

    Args:
        root: folder with ``{split}_caps.txt`` and ``{split}_ims.npy``.
        splits: which splits to load (default: every ``*_caps.txt``).
        captions_per_image: when the rows repeat once per caption, how many captions each
            image has; by default runs of identical rows are detected.
    """
    root = Path(root)
    names = splits or precomp_splits(root)
    if not names:
        raise DatasetError(f"{root}: no *_caps.txt files")
    images: list[ImageRecord] = []
    captions: list[Caption] = []
    parts: list[np.ndarray] = []
    index: list[np.ndarray] = []
    for p, name in enumerate(names):
        caps_file, ims_file = root / f"{name}_caps.txt", root / f"{name}_ims.npy"
        if not caps_file.is_file():
            raise DatasetError(f"{caps_file}: missing")
        if not ims_file.is_file():
            raise DatasetError(f"{ims_file}: missing (needed beside {caps_file.name})")
        lines = [line.strip() for line in read_lines(caps_file)]
        while lines and not lines[-1]:
            lines.pop()
        try:
            ims = np.load(ims_file, mmap_mode="r")
        except ValueError as e:
            raise DatasetError(f"{ims_file}: not a .npy array ({e})") from e
        n_rows, n_caps = len(ims), len(lines)
        if n_rows == n_caps and captions_per_image != 1:
            if captions_per_image:
                starts = np.arange(0, n_rows, captions_per_image)
            else:
                starts = _repeat_groups(ims)
        elif n_rows and n_caps % n_rows == 0:
            starts = np.arange(n_rows) * (n_caps // n_rows)
        else:
            raise DatasetError(
                f"{ims_file}: {n_rows} feature rows do not match {n_caps} captions in "
                f"{caps_file.name} (need one row per image or one per caption)"
            )
        per_caption_rows = n_rows == n_caps
        bounds = np.append(starts, n_caps)
        split = normalise_split(name)
        base = len(images)
        for k in range(len(starts)):
            images.append(ImageRecord(f"{split}/{k}", None, split))
            for c in range(bounds[k], bounds[k + 1]):
                captions.append(Caption(lines[c], base + k))
        rows = starts if per_caption_rows else np.arange(n_rows)
        parts.append(ims)
        index.append(np.stack([np.full(len(rows), p), rows], axis=1))
    feats = FeatureRows(parts, np.concatenate(index))
    return Dataset(images, captions, root.name or "precomp", feats)
