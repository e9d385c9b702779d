"""Exact top-k over a matrix of embeddings, in chunks: the reference path every faster
search (FAISS) is tested against, and the caption pool's search.

``exact_search(emb[N, D], q[Q, D], k)`` returns ``(scores[Q, k'], rows[Q, k'])`` sorted
by decreasing score, ``k' = min(k, live rows)``; rows where ``live`` is False never appear.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

ScoreFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (emb[n, D], q[Q, D]) -> [Q, n]

EXACT_CHUNK = 65_536  # database rows per matrix product: 65k x 512 floats = 128 MB


def dot_scores(emb: np.ndarray, q: np.ndarray) -> np.ndarray:
    return q @ emb.T


def exact_search(
    emb: np.ndarray,
    q: np.ndarray,
    k: int,
    live: np.ndarray | None = None,
    score_fn: ScoreFn = dot_scores,
    chunk: int = EXACT_CHUNK,
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by scanning ``emb`` in chunks of ``chunk`` rows.

    ``bias``: ``[N]`` added to every query's score of each row (a CSLS penalty, negated).

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
        if bias is not None:
            s = s + np.asarray(bias[a : a + block.shape[0]], np.float32)[None, :]
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
