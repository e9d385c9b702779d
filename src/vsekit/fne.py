"""The Full-Network Embedding (Garcia-Gasulla et al.; journal paper section 3.1).

Given pooled activations ``x[N, D]`` of every layer (see :mod:`.extract`):

1. standardise each feature with statistics of the TRAIN split only:
   ``z = (x - mu) / sigma``;
2. ternarise with two thresholds (defaults ``f- = -0.25``, ``f+ = 0.15``)::

       t = -1 if z < f-,   1 if z > f+,   0 otherwise

and store ``t`` as int8. Features with ``sigma = 0`` on train standardise to 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F_MINUS, F_PLUS = -0.25, 0.15
_CHUNK = 2048


@dataclass
class FNEStats:
    """Per-feature mean and standard deviation, fitted on the training rows."""

    mean: np.ndarray  # (D,) float64
    std: np.ndarray  # (D,) float64
    n: int  # rows they were fitted on

    @classmethod
    def fit(cls, x: np.ndarray, rows: np.ndarray | None = None) -> FNEStats:
        """Fit on ``x[rows]`` (all rows if None), streaming in chunks (``x`` may be a
        memmap larger than memory); float64 accumulation, population std."""
        idx = np.arange(len(x)) if rows is None else np.asarray(rows)
        if len(idx) == 0:
            raise ValueError("cannot fit FNE statistics on zero rows")
        s = np.zeros(x.shape[1])
        ss = np.zeros(x.shape[1])
        for a in range(0, len(idx), _CHUNK):
            block = np.asarray(x[idx[a : a + _CHUNK]], dtype=np.float64)
            s += block.sum(0)
            ss += np.square(block).sum(0)
        mean = s / len(idx)
        var = np.maximum(ss / len(idx) - mean**2, 0.0)
        return cls(mean, np.sqrt(var), len(idx))

    def standardise(self, x: np.ndarray) -> np.ndarray:
        safe = np.where(self.std > 0, self.std, np.inf)
        return ((np.asarray(x, dtype=np.float64) - self.mean) / safe).astype(np.float32)


def ternarise(z: np.ndarray, f_minus: float = F_MINUS, f_plus: float = F_PLUS) -> np.ndarray:
    """Map standardised values to int8 {-1, 0, 1}."""
    if not f_minus <= f_plus:
        raise ValueError(f"thresholds need f_minus <= f_plus, got {f_minus}, {f_plus}")
    return ((z > f_plus).astype(np.int8) - (z < f_minus).astype(np.int8)).astype(np.int8)


def full_network_embedding(
    x: np.ndarray,
    stats: FNEStats,
    f_minus: float = F_MINUS,
    f_plus: float = F_PLUS,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``[N, D]`` int8 FNE of pooled activations ``x`` (chunked), written into ``out``
    (e.g. a memmap) when given, so no full-size copy is held in memory."""
    if out is None:
        out = np.empty(x.shape, dtype=np.int8)
    for a in range(0, len(x), _CHUNK):
        out[a : a + _CHUNK] = ternarise(stats.standardise(x[a : a + _CHUNK]), f_minus, f_plus)
    return out
