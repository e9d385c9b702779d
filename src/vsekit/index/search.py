"""Top-k search over a matrix of embeddings: exact (chunked matrix products) or FAISS.

Both take database rows ``emb[N, D]`` (may be a read-only memmap), queries ``q[Q, D]``
and return ``(scores[Q, k'], rows[Q, k'])`` sorted by decreasing score, with
``k' = min(k, live rows)``. Rows where ``live`` is False never appear.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

ScoreFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (emb[n, D], q[Q, D]) -> [Q, n]

EXACT_CHUNK = 65_536  # database rows per matrix product: 65k x 512 floats = 128 MB
FAISS_MIN_ROWS = 100_000  # "auto" switches to FAISS from this many live rows


def dot_scores(emb: np.ndarray, q: np.ndarray) -> np.ndarray:
    return q @ emb.T


def exact_search(
    emb: np.ndarray,
    q: np.ndarray,
    k: int,
    live: np.ndarray | None = None,
    score_fn: ScoreFn = dot_scores,
    chunk: int = EXACT_CHUNK,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by scanning ``emb`` in chunks of ``chunk`` rows.

    Memory is ``O(Q * (chunk + k))`` whatever N is; each chunk's candidates are merged
    into the running top-k with ``argpartition`` (ties broken towards lower rows).
    """
    q = np.ascontiguousarray(q, dtype=np.float32)
    n_q = q.shape[0]
    best_s = np.full((n_q, 0), -np.inf, np.float32)
    best_r = np.zeros((n_q, 0), np.int64)
    for a in range(0, emb.shape[0], chunk):
        block = np.asarray(emb[a : a + chunk], dtype=np.float32)
        s = score_fn(block, q).astype(np.float32, copy=False)
        if live is not None:
            s = np.where(live[a : a + block.shape[0]][None, :], s, -np.inf)
        rows = np.broadcast_to(np.arange(a, a + block.shape[0]), s.shape)
        s = np.concatenate([best_s, s], axis=1)
        rows = np.concatenate([best_r, rows], axis=1)
        if s.shape[1] > k:
            part = np.argpartition(-s, k - 1, axis=1)[:, :k]
            s = np.take_along_axis(s, part, axis=1)
            rows = np.take_along_axis(rows, part, axis=1)
        best_s, best_r = s, rows
    order = np.lexsort((best_r, -best_s))  # score descending, then row
    best_s = np.take_along_axis(best_s, order, axis=1)
    best_r = np.take_along_axis(best_r, order, axis=1)
    n_live = emb.shape[0] if live is None else int(live[: emb.shape[0]].sum())
    keep = min(k, n_live)
    return best_s[:, :keep], best_r[:, :keep]


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
        import os

        import faiss

        tmp = f"{path}.{os.getpid()}.tmp"
        faiss.write_index(self.index, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path, nprobe: int = 32) -> FaissSearcher:
        import faiss

        self = cls.__new__(cls)
        self.index = faiss.read_index(str(path))
        self.n = int(self.index.ntotal)
        if hasattr(self.index, "nprobe"):
            self.index.nprobe = nprobe
        return self

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, self.n)
        if k == 0:
            return np.zeros((len(q), 0), np.float32), np.zeros((len(q), 0), np.int64)
        s, r = self.index.search(np.ascontiguousarray(q, dtype=np.float32), k)
        return s, r
