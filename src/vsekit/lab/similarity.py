"""The similarity registry of the lab: ``S(img[N, D], txt[M, D]) -> [N, M]`` (higher =
closer), created by name. The functions themselves are :mod:`vsekit.similarity`'s, the
one implementation the core uses too.

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

from vsekit import similarity as core
from vsekit.registry import Registry

Similarity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
SIMILARITIES: Registry[Callable[..., Similarity]] = Registry("similarity")
register_similarity = SIMILARITIES.register
list_similarities = SIMILARITIES.names


def create_similarity(name: str, **kwargs) -> Similarity:
    return SIMILARITIES.get(name)(**kwargs)


#: the one implementation, shared with the core (NumPy) and used here on tensors
cosine_similarity = core.cosine
euclidean_similarity = core.euclidean


def order_similarity(img: torch.Tensor, txt: torch.Tensor, abs: bool = False) -> torch.Tensor:
    """:func:`vsekit.similarity.order` on tensors."""
    return core.order(img, txt, abs_=abs)


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
