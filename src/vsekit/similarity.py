"""Image-caption similarities and L2 normalisation, written once for both layers.

Every function works on NumPy arrays (the core, at inference) and on PyTorch tensors (the
lab, in training, with gradients) through the operators the two share (``@``, ``**``,
``.sum``, ``.clip``); the lab's similarity registry wraps these same functions (and adds a
fused gradient for ``order`` in training).

``S(img[N, D], txt[M, D]) -> [N, M]``, higher = closer:

* ``cosine``: ``i . c`` on L2-normalised embeddings (journal paper eq. 2).
* ``order``: ``-||max(0, c - i)||^2`` (Vendrov et al.; journal paper eq. 3): a caption is
  above its image in the partial order when every coordinate of ``c`` is below ``i``'s.
  With ``abs_=True`` both are taken in absolute value first, as in the original code.
* ``euclidean``: ``-||i - c||^2`` (caption-retrieval report, section 4.2).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

Array = Any  # numpy.ndarray or torch.Tensor
SIMILARITY_NAMES = ("cosine", "order", "euclidean")
_ORDER_TILE = 1 << 19  # elements of one tile's [n, m, D] difference (order)


def _cat(parts: list, like: Array, axis: int = 0) -> Array:
    """Concatenate in the inputs' own library (torch only if it is already in use: the
    core never imports it)."""
    if type(like).__module__.startswith("torch"):
        torch = sys.modules["torch"]
        return torch.cat(parts, axis) if parts else like.new_zeros(0, 0)
    return np.concatenate(parts, axis) if parts else np.zeros((0, 0), np.float32)


def unit(x: Array, eps: float = 1e-12) -> Array:
    """Rows scaled to unit L2 norm (rows of zeros stay zero): ``x / max(||x||, eps)``."""
    return x / ((x * x).sum(-1)[..., None] ** 0.5).clip(min=eps)


def cosine(img: Array, txt: Array) -> Array:
    """``[N, M]`` dot products (cosine for unit-norm inputs)."""
    return img @ txt.T


def order(img: Array, txt: Array, abs_: bool = False) -> Array:
    """``[N, M]`` with ``S[n, m] = -sum_d max(0, txt[m, d] - img[n, d])^2``.

    Computed in tiles of images x captions whose ``[n, m, D]`` difference holds about
    ``_ORDER_TILE`` elements (2 MB in float32), so every pass over it stays in cache; each
    ``S[n, m]`` sums the same ``D`` terms in the same order whatever the tiling."""
    if abs_:
        img, txt = abs(img), abs(txt)
    if not (img.shape[0] and txt.shape[0]):
        return -(txt[None, :, :0] - img[:, None, :0]).sum(-1)  # [N, M] zeros
    d = max(1, txt.shape[1])
    cols = max(1, min(txt.shape[0], _ORDER_TILE // (8 * d)))  # captions a tile
    rows = max(1, _ORDER_TILE // (cols * d))  # images a tile
    parts = [
        _cat([-(((txt[None, b : b + cols] - img[a : a + rows, None]).clip(min=0)) ** 2).sum(-1)
              for b in range(0, txt.shape[0], cols)], img, axis=1)
        for a in range(0, img.shape[0], rows)
    ]  # fmt: skip
    return _cat(parts, img)


def euclidean(img: Array, txt: Array) -> Array:
    """``[N, M]`` negative squared euclidean distances."""
    d = (img**2).sum(1)[:, None] + (txt**2).sum(1)[None, :] - 2 * (img @ txt.T)
    return -d.clip(min=0)


def similarity(name: str, img: Array, txt: Array, abs_: bool = False) -> Array:
    """The named similarity (``abs_`` applies to ``order``); ValueError for another."""
    if name == "cosine":
        return cosine(img, txt)
    if name == "order":
        return order(img, txt, abs_)
    if name == "euclidean":
        return euclidean(img, txt)
    raise ValueError(f"unknown similarity {name!r}; use {' | '.join(SIMILARITY_NAMES)}")


# ------------------------------------------------------------------ ensembles
def ensemble_scales(weights: list[float]) -> list[float]:
    """``sqrt(w_k / sum w)`` of each member: with unit member embeddings ``i_k``, ``t_k``,

        sum_k w_k cos(i_k, t_k) / sum w = < [s_1 i_1; ...], [s_1 t_1; ...] >

    and both concatenations are unit vectors, so an ensemble of cosine models is one
    cosine model (its index, search and ONNX graphs work unchanged)."""
    if not weights or min(weights) <= 0:
        raise ValueError(f"ensemble weights: positive numbers, not {weights}")
    total = float(sum(weights))
    return [math.sqrt(w / total) for w in weights]


def group_weights(groups: list[str], share: float, first: str = "gru") -> list[float]:
    """Member weights that give the members of group ``first`` ``share`` of the weight
    together and the others the rest, equally within each (all of it to the only group
    present)."""
    n_first = groups.count(first)
    n_rest = len(groups) - n_first
    if not n_first or not n_rest:
        share = 1.0 if n_first else 0.0
    return [share / n_first if g == first else (1 - share) / n_rest for g in groups]


def ensemble_concat(parts: list[Array], weights: list[float]) -> Array:
    """``[N, sum D_k]``: the members' unit embeddings scaled by :func:`ensemble_scales`
    and concatenated (NumPy arrays or tensors)."""
    scales = ensemble_scales(weights)
    return _cat([s * p for s, p in zip(scales, parts, strict=True)], parts[0], axis=1)
