"""Perceptual hashes of photos: the first stage of duplicate detection.

A photo's hash is computed by ``vse index`` from the pixels it decodes for the model (no
second read; about 5 ms for a photo decoded at 683x512, against about 100 ms for its
embedding, both on a shared two-core machine) and kept in the ``photo_meta`` table's
``phash`` column: 16 hex digits, the 64-bit DCT hash of :func:`imagehash.phash` (the
sign of the lowest 8x8 frequencies of the 32x32 grey image against their median).
Resized, re-encoded or colour-edited copies of a photo land a few bits apart, 90% crops
about 10, different photos about half of the 64 (``benchmarks/duplicates.json``). ``""``
marks a file without a hash (a video, or a file that could not be decoded when it was
backfilled): not tried again until it changes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

import numpy as np
from PIL import Image

#: the hash recorded (the benchmark names it in its JSON)
HASH_KIND = "imagehash.phash, 64 bits"
#: hashes compared at once: a block of rows against the rest stays under 256 MB
BLOCK_PAIRS = 32 * 2**20


def image_hash(im: Image.Image) -> str:
    """The perceptual hash of a decoded photo, as 16 hex digits."""
    import imagehash

    return str(imagehash.phash(im))


def hash_array(hashes: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """``(uint64 values, which are known)`` of hex hashes (None or ``""``: unknown)."""
    known = np.asarray([bool(h) for h in hashes], bool)
    vals = np.asarray([int(h, 16) if h else 0 for h in hashes], np.uint64)
    return vals, known


def hash_distances(a: Sequence[str | None], b: Sequence[str | None]) -> np.ndarray:
    """Hamming distances ``[len(a), len(b)]`` (65 where either hash is unknown)."""
    va, ka = hash_array(a)
    vb, kb = hash_array(b)
    d = np.bitwise_count(va[:, None] ^ vb[None, :]).astype(np.int16)
    d[~(ka[:, None] & kb[None, :])] = 65
    return d


def hash_pairs(
    hashes: Sequence[str | None], max_distance: int, block: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(i, j, distance)`` arrays of every ``i < j`` whose hashes are at most
    ``max_distance`` bits apart (unknown hashes pair with nothing), by blocks."""
    vals, known = hash_array(hashes)
    pos = np.flatnonzero(known)
    v = vals[pos]
    n = len(v)
    out_i, out_j, out_d = [], [], []
    block = block or max(1, min(4096, BLOCK_PAIRS // max(n, 1)))
    for a in range(0, n, block):
        d = np.bitwise_count(v[a : a + block, None] ^ v[None, a:])
        ii, jj = np.nonzero(d <= max_distance)
        keep = jj > ii
        ii, jj = ii[keep], jj[keep]
        out_i.append(pos[ii + a])
        out_j.append(pos[jj + a])
        out_d.append(d[ii, jj].astype(np.int64))
    if not out_i:
        return (np.zeros(0, np.int64),) * 3
    return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_d)


def backfill_hashes(
    w: sqlite3.Connection,
    load: Callable[[str], Image.Image],
    block: int = 64,
    progress: bool = False,
) -> int:
    """Hash the indexed files that have metadata but no ``phash`` yet (an index made
    before hashes were kept), decoding each with ``load``; in blocks, each committed. A
    video or a file that cannot be decoded gets ``""``. Returns how many were hashed."""
    from vsekit.progress import progress_bar

    todo = w.execute(
        "SELECT f.id, f.path FROM files f JOIN photo_meta m ON m.file_id = f.id "
        "WHERE m.phash IS NULL"
    ).fetchall()
    with progress_bar(len(todo), "perceptual hashes", "file", show=progress and bool(todo)) as bar:
        for a in range(0, len(todo), block):
            part = todo[a : a + block]
            out = [(_hash_or_blank(p, load), i) for i, p in part]
            with w:
                w.executemany("UPDATE photo_meta SET phash = ? WHERE file_id = ?", out)
            bar.update(len(part))
    return len(todo)


def _hash_or_blank(path: str, load: Callable[[str], Image.Image]) -> str:
    """The hash of the photo at ``path``; ``""`` for a video or a file that cannot be
    decoded."""
    from vsekit.media.images import ImageError
    from vsekit.media.video import is_video

    if is_video(path):
        return ""
    try:
        return image_hash(load(path))
    except (ImageError, OSError):
        return ""
