"""The bundle's bilinear tag ranker in NumPy: the tags of images from their image features.

A tag ``y`` scores an image with features ``f [F]`` as ``s(f, y) = (f @ W) @ v_y + b_y``
(``W [F, E]`` the tagger's weights, ``v_y [E]`` the tag's word vector, ``b_y`` its bias for
a tagger trained with learned tags, else 0). Only tags with a word vector are ranked. A
calibrated tagger (``loss: tag_bce``) reads ``s`` as a logit: its tags are shown by
probability ``sigmoid(s)``, and only those that reach its threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TagRanker:
    """``w [F, E]``, the ``[T, E]`` word ``vectors`` of the ranked tags, their ``names``
    and ``bias [T]`` (None: no per-tag bias)."""

    w: np.ndarray
    vectors: np.ndarray
    names: list[str]
    bias: np.ndarray | None = None

    @classmethod
    def of_known(
        cls,
        w: np.ndarray,
        names: Sequence[str],
        vectors: np.ndarray,
        known: Sequence[bool],
        bias: np.ndarray | None = None,
    ) -> TagRanker:
        """The ranker over the tags that have a word vector (``known``): ``vectors
        [T, E]``, ``bias [T]`` and ``names`` cover every tag of the tagger."""
        keep = np.asarray(known, bool)
        kept = [n for n, ok in zip(names, known, strict=True) if ok]
        b = None if bias is None else np.asarray(bias)[keep]
        return cls(np.asarray(w, np.float32), vectors[keep], kept, b)

    def top(
        self, features: np.ndarray, k: int, threshold: float | None = None
    ) -> list[list[tuple[str, float]]]:
        """Top-``k`` tags of each image from its ``[N, F]`` features: ``(tag, score)``,
        or with a ``threshold``, ``(tag, probability)`` of at most ``k`` tags whose
        probability reaches it (possibly none)."""
        s = (np.asarray(features, np.float32) @ self.w) @ self.vectors.T
        if self.bias is not None:
            s = s + self.bias
        kk = min(k, s.shape[1])
        top = np.argsort(-s, axis=1, kind="stable")[:, :kk]
        names = self.names
        if threshold is None:
            return [[(names[j], float(row[j])) for j in idx] for row, idx in zip(s, top)]  # noqa: B905
        p = 1.0 / (1.0 + np.exp(-s))
        return [[(names[j], float(row[j])) for j in idx if row[j] >= threshold]
                for row, idx in zip(p, top)]  # noqa: B905  # fmt: skip
