"""Tag-ranking metrics.

*Tag predictability* (tag-ranking paper, section 4.3): each image's pool is its own mined
tags plus ``d`` distractors (tags of other images, sampled at test time); the model
ranks the pool, and precision@k is the share of the model's top k that are among the
ground truth's top k: ``|top_k(model) & top_k(mined)| / min(k, |Y|)``. A random ranker
scores ``min(k, P) / P`` in expectation for a pool of ``P`` tags, which is reported as
the reference.

*MAP* (tag-centric: per tag, rank images) and *MiAP* (image-centric: per image, rank
tags) over a tag vocabulary, with the mined tags as the relevant set.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vsekit.lab.eval.text_retrieval import average_precision_rows


def sample_distractors(
    own: Sequence[Sequence[int]],
    n_tags: int,
    d: int,
    rng: np.random.Generator,
    exclude: Sequence[int] = (),
) -> list[np.ndarray]:
    """``d`` tag ids in ``[0, n_tags)`` per image, distinct, none of them the image's own
    tags nor ``exclude`` (e.g. a padding id)."""
    out = []
    for tags in own:
        mine = set(int(t) for t in tags) | set(exclude)
        avail = n_tags - len(mine)
        if d > avail:
            raise ValueError(f"distractors: {d} asked, only {avail} other tags exist")
        picked: list[int] = []
        while len(picked) < d:
            for t in rng.integers(0, n_tags, size=2 * (d - len(picked)) + 4):
                t = int(t)
                if t not in mine:
                    mine.add(t)
                    picked.append(t)
                    if len(picked) == d:
                        break
        out.append(np.asarray(picked, np.int64))
    return out


def precision_at_k(
    pool_scores: Sequence[np.ndarray], n_own: Sequence[int], k: int
) -> tuple[float, float]:
    """``(model p@k, random-ranker p@k)``, both averaged over images.

    ``pool_scores[n]``: the model's scores of image n's pool, own tags first in their
    mined order (``n_own[n]`` of them), then the distractors. Ties are broken against
    the model (distractors and lower-ranked own tags first).
    """
    ps, rand = [], []
    for s, m in zip(pool_scores, n_own, strict=True):
        s = np.asarray(s, np.float64)
        if m == 0:
            continue
        p = len(s)
        # stable order: by score desc, ties -> higher pool index first (pessimistic)
        order = np.lexsort((-np.arange(p), -s))
        kk = min(k, m)
        top_model = set(order[:k].tolist())
        ps.append(len(top_model & set(range(kk))) / kk)
        rand.append(min(k, p) / p)
    return float(np.mean(ps)), float(np.mean(rand))


def map_and_miap(scores: np.ndarray, relevant: np.ndarray) -> tuple[float, float]:
    """``(MAP, MiAP)`` of ``scores [N images, T tags]`` against boolean ``relevant``.
    MAP averages over tags with at least one relevant image, MiAP over images with at
    least one relevant tag."""
    rel = np.asarray(relevant, bool)
    cols = rel.any(axis=0)
    rows = rel.any(axis=1)
    tag_ap = average_precision_rows(np.asarray(scores).T[cols], rel.T[cols])
    img_ap = average_precision_rows(np.asarray(scores)[rows], rel[rows])
    return float(tag_ap.mean()), float(img_ap.mean())


#: probability thresholds tried by :func:`calibrate_threshold`
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 20))


def shown_tags(probs: np.ndarray, relevant: np.ndarray, threshold: float, k: int = 10) -> dict:
    """What a user sees when each image shows its tags (at most ``k``) whose probability
    reaches ``threshold``, scored against the mined tags ``relevant [N, T]``: the share of
    shown tags that are right (``precision``), of right tags shown (``recall``), tags
    shown per image, and the share of images that show any."""
    probs = np.asarray(probs)
    rel = np.asarray(relevant, bool)
    kth = np.sort(probs, axis=1)[:, -min(k, probs.shape[1])][:, None]
    shown = (probs >= threshold) & (probs >= kth)
    n, hits = int(shown.sum()), int((shown & rel).sum())
    return {
        "threshold": threshold,
        "precision": hits / n if n else None,
        "recall": hits / max(int(rel.sum()), 1),
        "tags_per_image": n / len(probs),
        "images_with_tags": float(shown.any(axis=1).mean()),
    }


def calibrate_threshold(
    probs: np.ndarray, relevant: np.ndarray, precision: float = 0.8, k: int = 10
) -> float:
    """The lowest of :data:`THRESHOLDS` at which the shown tags reach ``precision`` on
    these images (a selection slice): the most tags shown at that precision."""
    for t in THRESHOLDS:
        p = shown_tags(probs, relevant, t, k)["precision"]
        if p is not None and p >= precision:
            return t
    raise ValueError(f"no threshold reaches precision {precision} on these images")
