"""Image-caption similarities ``S(img[N, D], txt[M, D]) -> [N, M]`` (higher = closer).

* ``cosine``: ``i . c`` on L2-normalised embeddings (journal paper eq. 2).
* ``order``: ``-||max(0, c - i)||^2`` (Vendrov et al.; journal paper eq. 3): a caption is
  above its image in the partial order when every coordinate of ``c`` is below ``i``'s.
  With ``abs=True``, both embeddings are taken in absolute value first, as in the original
  order-embedding code.
* ``euclidean``: ``-||i - c||^2`` (caption-retrieval report, section 4.2).

Created by name: ``create_similarity("order", abs=True)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from vsekit.registry import Registry

Similarity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
SIMILARITIES: Registry[Callable[..., Similarity]] = Registry("similarity")
register_similarity = SIMILARITIES.register
list_similarities = SIMILARITIES.names
_ORDER_CHUNK = 1 << 24  # elements of the [n, m, D] difference tensor held at once


def create_similarity(name: str, **kwargs) -> Similarity:
    return SIMILARITIES.get(name)(**kwargs)


def cosine_similarity(img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
    """``[N, M]`` dot products (cosine for unit-norm inputs)."""
    return img @ txt.T


def order_similarity(img: torch.Tensor, txt: torch.Tensor, abs: bool = False) -> torch.Tensor:
    """``[N, M]`` with ``S[n, m] = -sum_d max(0, txt[m, d] - img[n, d])^2``, chunked over
    images so the ``[n, M, D]`` difference stays under ~64 MB."""
    if abs:
        img, txt = img.abs(), txt.abs()
    step = max(1, _ORDER_CHUNK // max(1, txt.shape[0] * txt.shape[1]))
    out = [
        -(txt.unsqueeze(0) - img[a : a + step].unsqueeze(1)).clamp(min=0).pow(2).sum(dim=2)
        for a in range(0, img.shape[0], step)
    ]  # each (step, M)
    return torch.cat(out) if out else img.new_zeros(0, txt.shape[0])


def euclidean_similarity(img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
    """``[N, M]`` negative squared euclidean distances."""
    return -torch.cdist(img, txt).pow(2)


@register_similarity("cosine")
def _cosine() -> Similarity:
    return cosine_similarity


@register_similarity("order")
def _order(abs: bool = False) -> Similarity:
    def sim(img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        return order_similarity(img, txt, abs=abs)

    return sim


@register_similarity("euclidean")
def _euclidean() -> Similarity:
    return euclidean_similarity
