"""Top-k search over a matrix of embeddings: exact (chunked matrix products) or FAISS
(:mod:`vsekit.index.ann`: IVF-Flat in RAM, or IVF-PQ re-ranked from the rows on disk).

Both take database rows ``emb[N, D]`` (may be a read-only memmap), queries ``q[Q, D]``
and return ``(scores[Q, k'], rows[Q, k'])`` sorted by decreasing score, with
``k' = min(k, live rows)``. Rows where ``live`` is False never appear.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vsekit.index.ann import FAISS_MIN_ROWS, FaissSearcher
from vsekit.topk import EXACT_CHUNK, ScoreFn, dot_scores, exact_search

__all__ = [
    "EXACT_CHUNK",
    "FAISS_MIN_ROWS",
    "FaissSearcher",
    "ScoreFn",
    "dot_scores",
    "exact_search",
    "rerank",
    "search_snapshot",
]


def rerank(
    emb, q: np.ndarray, cand: np.ndarray, bias: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Re-score candidate rows ``cand[Q, c]`` (``-1``: none) by ``q . emb[row] +
    bias[row]`` (``bias`` None: no bias) and keep the best ``k`` per query, sorted: FAISS
    candidates under a per-row bias, or IVF-PQ's approximate candidates re-scored with
    the full rows; padded with ``-inf`` / ``-1`` when fewer candidates exist."""
    out_s = np.full((len(q), k), -np.inf, np.float32)
    out_r = np.full((len(q), k), -1, np.int64)
    for j, (qv, rows) in enumerate(zip(q, cand, strict=True)):
        rows = np.sort(rows[rows >= 0])
        s = np.asarray(emb[rows], np.float32) @ qv
        if bias is not None:
            s = s + bias[rows]
        order = np.lexsort((rows, -s))[:k]
        out_s[j, : len(order)], out_r[j, : len(order)] = s[order], rows[order]
    return out_s, out_r


def search_snapshot(
    snap,
    queries: np.ndarray,
    k: int,
    method: str,
    score_fn: ScoreFn | None = None,
    bias: np.ndarray | None = None,
    faiss: Callable[[], FaissSearcher] | None = None,
    allowed: np.ndarray | None = None,
) -> list[list]:
    """Top-k files of a :class:`~vsekit.index.snapshot.Snapshot` for each query vector
    ``[Q, dim]``, a file scoring its best row; a video hit carries the start and end of
    its best segment. Reads only.

    ``bias``: ``[rows]`` added to every query's score of each row (a negated CSLS
    penalty); FAISS then re-ranks its ``4k + 100`` best rows by the biased score.
    ``method``: ``exact`` (one chunked matrix product), ``faiss`` (``faiss()`` gives the
    searcher) or ``auto`` (FAISS from ``FAISS_MIN_ROWS`` live rows, dot-product models).
    ``allowed``: ``[rows]`` bool, the only rows that may be returned (a filter, applied
    before the top-k: FAISS searches them through an ID selector, and exact search
    takes over if the approximate search finds fewer than ``k`` of them).
    """
    q = np.atleast_2d(np.asarray(queries, np.float32))
    dot = score_fn is None
    if method == "auto":
        method = "faiss" if dot and len(snap) >= FAISS_MIN_ROWS else "exact"
    live = snap.live if allowed is None else allowed & snap.live
    n_live = int(live.sum())
    if n_live == 0:
        return [[] for _ in q]
    if method == "faiss":
        if not dot:
            raise ValueError("FAISS search needs a dot-product (cosine) model")
        if faiss is None:
            raise ValueError("FAISS search needs a FAISS index")
        searcher = faiss()
        sel = None if allowed is None else live
        # an index grown row by row also holds rows deleted since: keep to the live ones
        bits = snap.live_bits if allowed is None and searcher.n != n_live else None

        def top_rows(k_rows: int):
            if bias is None and not searcher.approximate:
                s, r = searcher.search(q, k_rows, sel, bits)
            else:  # re-score candidates with the full rows (and the bias)
                n_cand = max(4 * k_rows + 100, searcher.rerank if searcher.approximate else 0)
                _, cand = searcher.search(q, min(n_cand, n_live), sel, bits)
                # only live (and allowed) rows, whatever the FAISS selector let through
                cand = np.where(live[cand.clip(0, len(live) - 1)], cand, -1)
                rows = snap.scattered if searcher.approximate else snap.emb
                s, r = rerank(rows, q, cand, bias, k_rows)
            if sel is not None and ((r >= 0).sum(1) < min(k_rows, n_live)).any():
                # an inverted file visits only some lists: a narrow filter can leave
                # fewer than k there, while k exist; rank the filtered rows exactly
                return exact_search(snap.emb, q, k_rows, live, bias=bias)
            return s, r
    elif method == "exact":
        kw = {} if dot else {"score_fn": score_fn}

        def top_rows(k_rows: int):
            return exact_search(snap.emb, q, k_rows, live, bias=bias, **kw)
    else:
        raise ValueError(f"unknown search method {method!r}; use auto | exact | faiss")
    # a file can own several rows (a video's segments): ask for more rows until k
    # distinct files are found or every row has been ranked
    k_rows = min(k, n_live) if not snap.segment_rows else min(4 * k + 16, n_live)
    while True:
        scores, rows = top_rows(max(k_rows, 1))
        out = [snap.hits(srow, rrow, k) for srow, rrow in zip(scores, rows, strict=True)]
        if k_rows >= n_live or all(len(h) >= k for h in out):
            break
        k_rows = min(2 * k_rows, n_live)
    return [
        [snap.with_best_segment(h, qv, score_fn, bias) for h in hits]
        for hits, qv in zip(out, q, strict=True)
    ]
