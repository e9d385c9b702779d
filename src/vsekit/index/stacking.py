"""Duplicates stacked in search results: copies of one photo make one result.

Without it, five copies of one photo (the same file in three folders, a resized and a
re-encoded version) fill five of the top ten. A stack is the best-ranked of them, with
the others in :attr:`~vsekit.index.snapshot.Hit.copies` (best first), so nothing is
lost: ``--json`` and the HTTP results list every copy.

What counts as a copy is :mod:`vsekit.index.duplicates`' definition, not a second one:
the same content (the sha256 recorded at index time) or a near-duplicate pair by
:func:`~vsekit.index.duplicates.pairs_of` at its defaults (perceptual hash, then
embedding). Only the
results are compared with each other (``O(k^2)``), never the whole collection. Videos
are never stacked (two clips can share frames and still be two clips).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from vsekit.index import duplicates
from vsekit.index.snapshot import Hit, Snapshot


def copy_groups(snap: Snapshot, hits: list[Hit]) -> list[list[int]]:
    """The groups of copies among ``hits`` (ranked), as lists of positions in ``hits``,
    each in rank order, groups in the order of their best-ranked member; a hit without
    copies is a group of one. Videos are each alone."""
    photos = [i for i, h in enumerate(hits) if h.start is None and h.id in snap.id_to_pos]
    parent = list(range(len(hits)))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def join(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)  # the root stays the best-ranked member

    if len(photos) > 1:
        pos = [snap.id_to_pos[hits[i].id] for i in photos]
        sha = snap.photo_meta.get("sha256") or [None] * len(snap)
        first: dict[str, int] = {}
        for i, p in zip(photos, pos, strict=True):
            if sha[p]:
                join(first.setdefault(sha[p], i), i)
        if snap.unit_rows:  # near-duplicates: perceptual hashes, then unit image rows
            emb = np.asarray(snap.emb[snap.rows[pos]], np.float32)
            phash = snap.photo_meta.get("phash") or [None] * len(snap)
            crops = snap.photo_meta.get("phash_crops") or [None] * len(snap)
            pairs = duplicates.pairs_of([phash[p] for p in pos], emb, crops=[crops[p] for p in pos])
            for a, b, _, _ in pairs:
                join(photos[a], photos[b])
    groups: dict[int, list[int]] = {}
    for i in range(len(hits)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def stack_hits(snap: Snapshot, hits: list[Hit]) -> list[Hit]:
    """``hits`` (ranked) with each group of copies folded into its best-ranked member,
    whose ``copies`` lists the others in rank order; the stacks keep the order of their
    best members."""
    return [replace(hits[g[0]], copies=tuple(hits[i] for i in g[1:])) if len(g) > 1
            else hits[g[0]] for g in copy_groups(snap, hits)]  # fmt: skip


def stacked_search(fetch: Callable[[int], list[Hit]], snap: Snapshot, k: int) -> list[Hit]:
    """The first ``k`` stacks of a ranking: ``fetch(n)`` gives its first ``n`` hits; more
    are fetched (doubling) while copies leave fewer than ``k`` stacks and more exist."""
    n = min(2 * k + 8, max(len(snap), 1))
    while True:
        hits = fetch(n)
        out = stack_hits(snap, hits)
        if len(out) >= k or len(hits) < n or n >= len(snap):
            return out[:k]
        n = min(2 * n, len(snap))


def copy_ids(snap: Snapshot, hits: list[Hit]) -> list[list[int]]:
    """For each of ``hits`` (ranked, not stacked), the ids of its copies among them (in
    rank order): the stacks of an unstacked listing, where every file keeps its place."""
    out: list[list[int]] = [[] for _ in hits]
    for g in copy_groups(snap, hits):
        for i in g:
            out[i] = [hits[j].id for j in g if j != i]
    return out
