"""The one place that turns raw pooled activations into the image representation a model
reads (its *feature kind*). The FeatureStore, the featurizer of new images, the model
bundle and the training loader all call :func:`features_of_kind`.

Kinds, for pooled activations ``x [N, fne_dim]`` (every FNE layer, spatially averaged):

* ``pooled``: ``x`` itself;
* ``baseline_raw``: the one-layer baseline ``x[:, baseline]`` (ResNet pool5, VGG fc7);
* ``baseline``: the same, L2-normalised per row;
* ``fne``: the Full-Network Embedding (journal paper section 3): standardise every
  feature with train-split mean/std, then ternarise to {-1, 0, 1} at ``f_minus`` /
  ``f_plus`` (int8).
"""

from __future__ import annotations

import numpy as np

from vsekit.fne import F_MINUS, F_PLUS, FNEStats, full_network_embedding
from vsekit.similarity import unit

FEATURE_KINDS = ("fne", "baseline", "baseline_raw", "pooled")  # computable from pooled
STORE_KINDS = (*FEATURE_KINDS, "rmac")  # rmac comes from the last map, stores only


def l2_normalise(x: np.ndarray) -> np.ndarray:
    return unit(np.asarray(x, np.float32))


def features_of_kind(
    pooled: np.ndarray,
    kind: str,
    baseline: slice,
    fne_stats: FNEStats | None = None,
    f_minus: float = F_MINUS,
    f_plus: float = F_PLUS,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``[N, fne_dim]`` pooled activations -> ``[N, F]`` features of ``kind`` (see the
    module docstring). ``out``: a preallocated int8 array for ``fne`` (a memmap)."""
    if kind == "pooled":
        return np.asarray(pooled)
    if kind in ("baseline", "baseline_raw"):
        x = np.ascontiguousarray(pooled[:, baseline], dtype=np.float32)
        return x if kind == "baseline_raw" else l2_normalise(x)
    if kind == "fne":
        if fne_stats is None:
            raise ValueError("fne features need the train-split FNE statistics")
        return full_network_embedding(pooled, fne_stats, f_minus, f_plus, out=out)
    raise ValueError(f"unknown feature kind {kind!r}; use {' | '.join(STORE_KINDS)}")
