"""Perceptual hashes of photos: the first stage of duplicate detection.

A photo's hash is computed by ``vse index`` from the pixels it decodes for the model (no
second read; about 5 ms for a photo decoded at 683x512, against about 100 ms for its
embedding, both on a shared two-core machine) and kept in the ``photo_meta`` table's
``phash`` column: 16 hex digits, the 64-bit DCT hash of :func:`imagehash.phash` (the
sign of the lowest 8x8 frequencies of the 32x32 grey image against their median).
Resized, re-encoded or colour-edited copies of a photo land a few bits apart, 90% crops
10 to 30, different photos about half of the 64 (``benchmarks/duplicates.json``). ``""``
marks a file without a hash (a video, or a file that could not be decoded when it was
backfilled): not tried again until it changes.

A crop moves the whole photo's hash because the frame moves. So beside it, the
``phash_crops`` column keeps the hashes of five crops of the photo (:data:`CROPS`: 90%
of each side, from the centre and from each corner), 80 hex digits: a copy cropped
like one of them hashes, whole, within a few bits of that crop's hash
(:func:`crop_distances`). The five crops cost about 4 ms more per photo: they are hashed
from a grey copy reduced to :data:`CROP_SIDE` pixels once.
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


#: the crops hashed beside the whole photo: (left, top) of a box of :data:`CROP_KEEP`
#: of each side, as fractions of the room left (0.5: centred)
CROPS = {
    "centre": (0.5, 0.5),
    "top left": (0.0, 0.0),
    "top right": (1.0, 0.0),
    "bottom left": (0.0, 1.0),
    "bottom right": (1.0, 1.0),
}
#: the share of each side a crop keeps
CROP_KEEP = 0.9
#: the longer side of the grey copy the crops are hashed from (phash reads 32x32)
CROP_SIDE = 256


def image_hash(im: Image.Image) -> str:
    """The perceptual hash of a decoded photo, as 16 hex digits."""
    import imagehash

    return str(imagehash.phash(im))


def crop_hashes(im: Image.Image) -> str:
    """The perceptual hashes of the :data:`CROPS` of a decoded photo, in that order:
    ``16 * len(CROPS)`` hex digits."""
    import imagehash

    grey = im.convert("L")
    grey.thumbnail((CROP_SIDE, CROP_SIDE), Image.Resampling.BOX)
    w, h = grey.size
    cw, ch = max(1, round(w * CROP_KEEP)), max(1, round(h * CROP_KEEP))
    out = []
    for fx, fy in CROPS.values():
        left, top = round((w - cw) * fx), round((h - ch) * fy)
        out.append(str(imagehash.phash(grey.crop((left, top, left + cw, top + ch)))))
    return "".join(out)


def crops_array(crops: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """``(uint64 values [N, len(CROPS)], which are known [N])`` of :func:`crop_hashes`
    strings (None or ``""``: unknown)."""
    k = len(CROPS)
    known = np.asarray([bool(c) and len(c) == 16 * k for c in crops], bool)
    vals = np.zeros((len(crops), k), np.uint64)
    for i in np.flatnonzero(known):
        c = crops[i]
        vals[i] = [int(c[16 * j : 16 * j + 16], 16) for j in range(k)]
    return vals, known


def crop_distances(
    full_a: np.ndarray,
    crops_a: np.ndarray,
    full_b: np.ndarray,
    crops_b: np.ndarray,
    has_a: np.ndarray | None = None,
    has_b: np.ndarray | None = None,
) -> np.ndarray:
    """``[A, B]`` the fewest bits between one photo's whole hash and a crop hash of the
    other, either way round: small when one is a crop of the other like a
    :data:`CROPS` box. ``full_*``: uint64 ``[A]``/``[B]``; ``crops_*``: ``[A, K]``/
    ``[B, K]`` (:func:`crops_array`); ``has_*``: which photos have crop hashes (those
    without are compared through the other's crops only; 255 where neither has any)."""
    has_a = np.ones(len(full_a), bool) if has_a is None else has_a
    has_b = np.ones(len(full_b), bool) if has_b is None else has_b
    d = np.full((len(full_a), len(full_b)), 255, np.uint8)
    for j in range(crops_a.shape[1]):
        x = np.bitwise_count(full_a[:, None] ^ crops_b[None, :, j])
        x[:, ~has_b] = 255
        np.minimum(d, x, out=d)
        y = np.bitwise_count(crops_a[:, j, None] ^ full_b[None, :])
        y[~has_a] = 255
        np.minimum(d, y, out=d)
    return d


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
    tap: Callable[[list, list], None] | None = None,
) -> int:
    """Hash the indexed files that have metadata but no ``phash`` or no
    ``phash_crops`` yet (an index made before they were kept), decoding each with
    ``load``; in blocks, each committed. A hash already recorded is kept (only what is
    missing is filled). A video or a file that cannot be decoded gets ``""``; a file
    that is not there now (a drive unplugged) is left as it is, to be tried again by a
    later update. ``tap``: shown each block's decoded photos with their (path, size,
    mtime_ns) as indexed (the update's :data:`vsekit.index.update.Tap`), so that what
    else needs their pixels does not decode them again. Returns how many were hashed."""
    from vsekit.progress import progress_bar

    todo = w.execute(
        "SELECT f.id, f.path, f.size, f.mtime_ns FROM files f JOIN photo_meta m "
        "ON m.file_id = f.id WHERE m.phash IS NULL OR m.phash_crops IS NULL"
    ).fetchall()
    done = 0
    with progress_bar(len(todo), "perceptual hashes", "file", show=progress and bool(todo)) as bar:
        for a in range(0, len(todo), block):
            out, files, images = [], [], []
            for i, p, size, mtime in todo[a : a + block]:
                im = _decoded(p, load)
                if im is None:
                    continue  # away now: tried again later
                if isinstance(im, str):  # a video, or undecodable
                    out.append(("", "", i))
                    continue
                out.append((image_hash(im), crop_hashes(im), i))
                files.append((p, size, mtime))
                images.append(im)
            with w:
                w.executemany(
                    "UPDATE photo_meta SET phash = COALESCE(phash, ?), "
                    "phash_crops = COALESCE(phash_crops, ?) WHERE file_id = ?",
                    out,
                )
            if tap is not None and images:
                tap(files, images)
            done += len(out)
            bar.update(len(todo[a : a + block]))
    return done


def _decoded(path: str, load: Callable[[str], Image.Image]) -> Image.Image | str | None:
    """The decoded photo at ``path``; ``""`` for a video or a file that cannot be
    decoded; None for a file that is not there now."""
    import os

    from vsekit.media.images import ImageError
    from vsekit.media.video import is_video

    if is_video(path):
        return ""
    if not os.path.exists(path):
        return None
    try:
        return load(path)
    except FileNotFoundError:
        return None
    except (ImageError, OSError):
        return ""
