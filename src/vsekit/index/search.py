"""Top-k search over a matrix of embeddings: exact (chunked matrix products) or FAISS.

Both take database rows ``emb[N, D]`` (may be a read-only memmap), queries ``q[Q, D]``
and return ``(scores[Q, k'], rows[Q, k'])`` sorted by decreasing score, with
``k' = min(k, live rows)``. Rows where ``live`` is False never appear.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

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

FAISS_MIN_ROWS = 100_000  # "auto" switches to FAISS from this many live rows


class FaissSearcher:
    """Approximate inner-product search with a FAISS inverted-file index (IVF-Flat).

    ``nlist`` defaults to ``sqrt(N)`` clusters, trained on 40 sampled points per
    cluster; a query visits ``nprobe`` of them. Collections with fewer than 39 points
    per cluster fall back to ``IndexFlatIP``, which is exact. Only live rows are
    added, under their row number, so results map straight back to the index.
    """

    def __init__(
        self,
        emb: np.ndarray,
        live: np.ndarray | None = None,
        nlist: int | None = None,
        nprobe: int = 32,
        seed: int = 0,
        add_chunk: int = 262_144,
    ) -> None:
        import faiss

        n, d = emb.shape
        rows = np.arange(n) if live is None else np.flatnonzero(live[:n])
        self.n = len(rows)
        nlist = nlist or max(1, int(np.sqrt(self.n)))
        if self.n < 39 * nlist:
            self.index = faiss.IndexIDMap(faiss.IndexFlatIP(d))
        else:
            quantizer = faiss.IndexFlatIP(d)
            ivf = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
            rng = np.random.default_rng(seed)
            sample = np.sort(rng.choice(rows, size=min(self.n, 40 * nlist), replace=False))
            ivf.train(np.ascontiguousarray(emb[sample], dtype=np.float32))
            ivf.nprobe = nprobe
            self.index = ivf
        for a in range(0, len(rows), add_chunk):
            r = rows[a : a + add_chunk]
            self.index.add_with_ids(np.ascontiguousarray(emb[r], dtype=np.float32), r)

    def save(self, path) -> None:
        """Write the FAISS index atomically (written beside, then renamed)."""
        import faiss

        from vsekit.fsio import atomic_write

        atomic_write(path, lambda tmp: faiss.write_index(self.index, str(tmp)))

    @classmethod
    def load(cls, path, nprobe: int = 32) -> FaissSearcher:
        import faiss

        self = cls.__new__(cls)
        self.index = faiss.read_index(str(path))
        self.n = int(self.index.ntotal)
        if hasattr(self.index, "nprobe"):
            self.index.nprobe = nprobe
        return self

    def search(
        self, q: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)`` of the ``k`` best rows (``-1`` pads when fewer exist);
        ``allowed``: ``[rows]`` bool, search only those (a filter), through a FAISS
        bitmap ID selector (one bit a row)."""
        import faiss

        k = min(k, self.n)
        if k == 0:
            return np.zeros((len(q), 0), np.float32), np.zeros((len(q), 0), np.int64)
        params, bits_alive = None, None
        if allowed is not None:
            bits = np.packbits(np.asarray(allowed, bool), bitorder="little")
            sel = faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits))  # size in bytes
            bits_alive = bits
            if hasattr(self.index, "nprobe"):
                params = faiss.SearchParametersIVF(sel=sel, nprobe=self.index.nprobe)
            else:
                params = faiss.SearchParameters(sel=sel)
        s, r = self.index.search(np.ascontiguousarray(q, dtype=np.float32), k, params=params)
        del bits_alive  # the selector reads the bitmap until the search returns
        return s, r


def rerank(
    emb: np.ndarray, q: np.ndarray, cand: np.ndarray, bias: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Re-score candidate rows ``cand[Q, c]`` (``-1``: none) by ``q . emb[row] +
    bias[row]`` and keep the best ``k`` per query, sorted (FAISS candidates under a
    per-row bias); padded with ``-inf`` / ``-1`` when fewer candidates exist."""
    out_s = np.full((len(q), k), -np.inf, np.float32)
    out_r = np.full((len(q), k), -1, np.int64)
    for j, (qv, rows) in enumerate(zip(q, cand, strict=True)):
        rows = np.sort(rows[rows >= 0])
        s = np.asarray(emb[rows], np.float32) @ qv + bias[rows]
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

        def top_rows(k_rows: int):
            if bias is None:
                s, r = searcher.search(q, k_rows, sel)
            else:
                _, cand = searcher.search(q, min(4 * k_rows + 100, n_live), sel)
                s, r = rerank(snap.emb, q, cand, bias, k_rows)
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
