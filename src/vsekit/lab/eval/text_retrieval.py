"""Text-to-text retrieval (Word2VisualVec, section 4.2) and per-caption-length recall
(the caption-retrieval report, section 5).

Text-to-text: the first caption of each image is a query, the image's other captions
are the pool; a pool caption is relevant to a query when both describe the same image.
Sentences are compared by cosine in whatever space they were vectorised into
(bag-of-words, mean word vectors, or Word2VisualVec's visual space), and mean average
precision over the queries is reported.
"""

from __future__ import annotations

import numpy as np


def first_caption_split(c2i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(query caption indices, pool caption indices)``: the first caption of each image
    (in caption order) is its query; every other caption goes to the pool."""
    c2i = np.asarray(c2i)
    _, first = np.unique(c2i, return_index=True)
    is_query = np.zeros(len(c2i), bool)
    is_query[first] = True
    return np.flatnonzero(is_query), np.flatnonzero(~is_query)


def average_precision_rows(scores: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """AP of each row of ``scores [Q, P]`` given boolean ``relevant [Q, P]``.

    Items are ranked by decreasing score; ties are broken pessimistically (relevant
    items after irrelevant ones of the same score), so a constant scorer earns no
    credit from the order of the pool. Rows with no relevant item get AP 0.
    """
    # sort by (-score, relevant): among equal scores irrelevant (False) comes first
    order = np.lexsort((relevant, -scores), axis=1)
    rel = np.take_along_axis(relevant, order, axis=1)
    hits = np.cumsum(rel, axis=1)
    ranks = np.arange(1, rel.shape[1] + 1)
    prec = np.where(rel, hits / ranks, 0.0)
    n_rel = rel.sum(axis=1)
    return np.where(n_rel > 0, prec.sum(axis=1) / np.maximum(n_rel, 1), 0.0)


def text_to_text_map(vectors: np.ndarray, c2i: np.ndarray, chunk: int = 1024) -> float:
    """mAP (in %) of first-caption queries against the other captions, by cosine.

    ``vectors [M, D]``: one row per caption (any space); ``c2i [M]``: image of each.
    Zero vectors (e.g. a sentence of stop words only) score 0 against everything.
    """
    x = np.asarray(vectors, np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    q_idx, p_idx = first_caption_split(c2i)
    c2i = np.asarray(c2i)
    aps = []
    for a in range(0, len(q_idx), chunk):
        q = q_idx[a : a + chunk]
        s = x[q] @ x[p_idx].T
        rel = c2i[q][:, None] == c2i[p_idx][None, :]
        aps.append(average_precision_rows(s, rel))
    return float(np.concatenate(aps).mean() * 100) if aps else 0.0


def recall_by_length(
    ranks: np.ndarray, lengths: np.ndarray, edges: list[int], k: int = 10
) -> list[dict]:
    """R@k of caption->image ranks per caption-length bin.

    ``ranks [M]``: 1-based rank of each caption's image; ``lengths [M]``: tokens per
    caption; ``edges``: inner bin edges, e.g. ``[8, 10, 12, 14, 17]`` makes bins
    ``<=8, 9-10, 11-12, 13-14, 15-17, >=18``.
    """
    ranks, lengths = np.asarray(ranks), np.asarray(lengths)
    bounds = [-np.inf, *edges, np.inf]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        m = (lengths > lo) & (lengths <= hi)
        label = (
            f"<={int(hi)}"
            if lo == -np.inf
            else (f">={int(lo) + 1}" if hi == np.inf else f"{int(lo) + 1}-{int(hi)}")
        )
        out.append(
            {
                "bin": label,
                "captions": int(m.sum()),
                f"r{k}": float((ranks[m] <= k).mean() * 100) if m.any() else None,
            }
        )
    return out
