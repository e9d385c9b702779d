"""Duplicate photos in an index, in groups of two kinds:

* **exact**: files with the same content (sha256 of their bytes, recorded at index
  time): copies under other names or folders;
* **near**: different files that are copies or near-copies of one photo, found in two
  stages:

  1. the **perceptual hash** (:mod:`vsekit.index.phash`, recorded at index time): two
     photos are copies when their hashes are at most :data:`HASH_DISTANCE` bits apart
     (resized, re-encoded, colour-edited), or when one's hash is at most
     :data:`CROP_DISTANCE` bits from a hash of a crop of the other (cropped copies),
     provided their embeddings are not far apart (cosine >= :data:`COPY_FLOOR`,
     against hash collisions of plain images); hashes up to
     :data:`CANDIDATE_DISTANCE` bits apart are candidates (crops elsewhere move the hash
     more), confirmed by a cosine of at least :data:`CONFIRM_COSINE`;
  2. the **embedding** alone: a cosine of at least ``threshold`` (default
     :data:`NEAR_THRESHOLD`), for what moves the hash entirely (bursts, rotations,
     heavier crops and edits).

A near group is a connected component of those pairs (single linkage); each exact group
takes part in it through its first file. Files without a hash (videos, an index not yet
backfilled) take part through the embedding only.

The thresholds were chosen on a labelled set built from the 500 photos of the train
slice (250 of them with ten kinds of copies) and reported on dev, 1,000 photos (250
with copies), in ``benchmarks/duplicates.py`` (figures in ``benchmarks/duplicates.json``
and docs/benchmarks.md). On dev: recall 1.0 on 50% and 25% resizes, JPEG quality-30
re-encodes, colour edits, 90% centre crops and 90% crops from a corner, 0.98 on 90%
crops at other places, 0.61 on 80% crops and 0.59 on 75% crops, almost nothing on
90-degree rotations; no false pair among 3 million negative pairs, and no group among
the 1,000 dev originals. The embedding alone is strict (0.98): two different photos of
the slice already reach a cosine of 0.856, and the largest such cosine grows by about
0.06 each time a library doubles; ``--threshold 0.9`` groups bursts too, at the price
of some look-alikes.

Cost: the hashes by blocks of XORs and the embedding pairs by blocks of matrix
products, ``O(N^2 D)``: about 3 s for 7,000 photos of 2,048 dimensions on two shared
cores, the crop hashes included (they add no measurable time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from vsekit.index.phash import crop_distances, crops_array, hash_array

#: cosine over which two photos are near-duplicates (see ``benchmarks/duplicates.json``)
NEAR_THRESHOLD = 0.98


@dataclass
class DuplicateGroup:
    kind: str  # "exact" | "near"
    ids: list[int]
    paths: list[str]
    #: the lowest similarity of the pairs that joined the group (1.0 for exact)
    similarity: float = 1.0
    pairs: list[tuple[int, int, float]] = field(default_factory=list, repr=False)
    #: the largest hash distance of the pairs the hash stage joined (None: none did)
    hash_distance: int | None = None


class _Union:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


#: the largest hash distance accepted: past it, different photos begin to match
MAX_HASH_DISTANCE = 32
#: the lowest threshold accepted: below it nearly every pair of photos would be a
#: "duplicate" (and listing them would cost memory quadratic in the collection)
MIN_THRESHOLD = 0.5
#: scores computed at once: a block of rows against the rest stays under 256 MB
BLOCK_SCORES = 64 * 2**20


def near_pairs(
    emb: np.ndarray, threshold: float, block: int | None = None
) -> list[tuple[int, int, float]]:
    """``(i, j, cosine)`` for every ``i < j`` with ``emb[i] . emb[j] >= threshold``
    (unit rows), by blocks of ``block`` rows against the rest (by default as many as
    keep a block's scores under :data:`BLOCK_SCORES`)."""
    out: list[tuple[int, int, float]] = []
    n = len(emb)
    block = block or max(1, min(2048, BLOCK_SCORES // max(n, 1)))
    for a in range(0, n, block):
        x = np.asarray(emb[a : a + block], np.float32)
        s = x @ np.asarray(emb[a:], np.float32).T  # only j >= a: the upper triangle
        ii, jj = np.nonzero(s >= threshold)
        keep = jj + a > ii + a
        for i, j in zip(ii[keep], jj[keep], strict=True):
            out.append((int(i + a), int(j + a), float(s[i, j])))
    return out


#: hash distance (bits of 64) up to which two photos are copies (see the module docstring)
HASH_DISTANCE = 6
#: the cosine a hash-stage copy needs at least: a plain image's hash says little
COPY_FLOOR = 0.2
#: hash distance up to which two photos are candidates, kept at :data:`CONFIRM_COSINE`
CANDIDATE_DISTANCE = 26
#: the cosine that confirms a candidate of the hash stage
CONFIRM_COSINE = 0.87
#: hash distance up to which one photo's whole hash and a crop hash of the other make
#: them copies (cropped copies), with a cosine of at least :data:`COPY_FLOOR`
CROP_DISTANCE = 3


def pairs_of(
    hashes: Sequence[str | None],
    emb: np.ndarray,
    hash_distance: int = HASH_DISTANCE,
    threshold: float = NEAR_THRESHOLD,
    candidate_distance: int = CANDIDATE_DISTANCE,
    confirm: float = CONFIRM_COSINE,
    floor: float = COPY_FLOOR,
    crops: Sequence[str | None] | None = None,
    crop_distance: int = CROP_DISTANCE,
) -> list[tuple[int, int, float, int | None]]:
    """``(i, j, cosine, hash distance or None)`` for every ``i < j`` that the two stages
    call duplicates (see the module docstring; unit rows of ``emb``), the hash distance
    where the hash stage accepts the pair (whole against whole, or whole against a
    crop's: :func:`vsekit.index.phash.crop_distances`), by blocks of rows against the
    rest. ``crops``: the photos' :func:`~vsekit.index.phash.crop_hashes` (None: none)."""
    vals, known = hash_array(hashes)
    cvals, cknown = crops_array(crops if crops is not None else [None] * len(vals))
    n = len(emb)
    out: list[tuple[int, int, float, int | None]] = []
    block = max(1, min(2048, BLOCK_SCORES // max(n, 1)))
    for a in range(0, n, block):  # only j >= a: the upper triangle
        b = slice(a, a + block)
        s = np.asarray(emb[b], np.float32) @ np.asarray(emb[a:], np.float32).T
        d = np.bitwise_count(vals[b, None] ^ vals[None, a:])
        d[~(known[b, None] & known[None, a:])] = 255  # no hash: no hash stage
        dc = crop_distances(vals[b], cvals[b], vals[a:], cvals[a:], cknown[b], cknown[a:])
        dc[~(known[b, None] & known[None, a:])] = 255
        by_hash = (
            ((d <= hash_distance) & (s >= floor))
            | ((dc <= crop_distance) & (s >= floor))
            | ((d <= candidate_distance) & (s >= confirm))
        )
        ii, jj = np.nonzero(by_hash | (s >= threshold))
        keep = jj > ii
        for i, j in zip(ii[keep], jj[keep], strict=True):
            hd = int(min(d[i, j], dc[i, j])) if by_hash[i, j] else None
            out.append((int(i + a), int(j + a), float(s[i, j]), hd))
    return out


def components(n: int, pairs: Iterable[tuple[int, int]]) -> list[list[int]]:
    """The connected components of ``pairs`` over ``range(n)``, each sorted, in order of
    their first member."""
    u = _Union(n)
    for i, j in pairs:
        u.join(i, j)
    comp: dict[int, list[int]] = {}
    for k in range(n):
        comp.setdefault(u.find(k), []).append(k)
    return sorted(comp.values())


def find_duplicates(
    snap,
    threshold: float = NEAR_THRESHOLD,
    kinds: str = "all",
    hash_distance: int = HASH_DISTANCE,
) -> list[DuplicateGroup]:
    """The duplicate groups of a :class:`~vsekit.index.snapshot.Snapshot`: exact groups
    first, then near groups, each sorted by path, groups by their first path.
    ``kinds``: ``all``, ``exact`` or ``near``. ``threshold``: the embedding stage's
    cosine; ``hash_distance``: the hash stage's (-1: the embedding alone), which also
    caps the crop hashes' :data:`CROP_DISTANCE`."""
    if not MIN_THRESHOLD <= threshold <= 1:
        raise ValueError(f"threshold: must be in [{MIN_THRESHOLD}, 1], got {threshold}")
    if not -1 <= hash_distance <= MAX_HASH_DISTANCE:
        raise ValueError(
            f"hash distance: must be in [-1, {MAX_HASH_DISTANCE}], got {hash_distance}"
        )
    if kinds not in ("all", "exact", "near"):
        raise ValueError(f"kind: {kinds!r}; use all | exact | near")
    n = len(snap)
    sha = snap.photo_meta.get("sha256") or [None] * n
    phash = snap.photo_meta.get("phash") or [None] * n
    pcrops = snap.photo_meta.get("phash_crops") or [None] * n
    by_sha: dict[str, list[int]] = {}
    for pos, h in enumerate(sha):
        if h:
            by_sha.setdefault(h, []).append(pos)
    groups: list[DuplicateGroup] = []
    if kinds in ("all", "exact"):
        for members in by_sha.values():
            if len(members) > 1:
                members = sorted(members, key=lambda p: snap.paths[p])
                groups.append(DuplicateGroup("exact", [int(snap.ids[p]) for p in members],
                                             [snap.paths[p] for p in members]))  # fmt: skip
    if kinds in ("all", "near") and n > 1:
        # one representative per exact group: a copy is not also a near-duplicate
        reps = sorted({members[0] for members in by_sha.values()} |
                      {p for p, h in enumerate(sha) if not h})  # fmt: skip
        snap.verify(snap.rows[reps])  # a damaged row must not join a group
        emb = np.asarray(snap.emb[snap.rows[reps]], np.float32)
        hashes = [phash[p] if hash_distance >= 0 else None for p in reps]
        candidate = CANDIDATE_DISTANCE if hash_distance >= 0 else -1
        crops = [pcrops[p] if hash_distance >= 0 else None for p in reps]
        pairs = pairs_of(hashes, emb, hash_distance, threshold, candidate, crops=crops,
                         crop_distance=min(hash_distance, CROP_DISTANCE))  # fmt: skip
        for comp in components(len(reps), [(i, j) for i, j, _, _ in pairs]):
            if len(comp) < 2:
                continue
            members = set(comp)
            mine = [p for p in pairs if p[0] in members]
            pos = sorted((reps[m] for m in comp), key=lambda p: snap.paths[p])
            dists = [d for _, _, _, d in mine if d is not None]
            groups.append(DuplicateGroup(
                "near", [int(snap.ids[p]) for p in pos], [snap.paths[p] for p in pos],
                round(min(c for _, _, c, _ in mine), 6),
                [(int(snap.ids[reps[i]]), int(snap.ids[reps[j]]), c) for i, j, c, _ in mine],
                max(dists) if dists else None))  # fmt: skip
    return sorted(groups, key=lambda g: (g.kind != "exact", g.paths[0]))
