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
from torch.autograd.function import once_differentiable

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


class _OrderWithGrad(torch.autograd.Function):
    """``S[n, m] = -sum_d r[n, m, d]^2`` with ``r = max(0, txt[m] - img[n])``, and its
    gradient from ``r`` alone:

        dS/dimg[n, d] = 2 sum_m g[n, m] r[n, m, d]     dS/dtxt[m, d] = -2 sum_n g[n, m] r[n, m, d]

    as two batched matrix products. Autograd through the elementwise formula keeps three
    ``[N, M, D]`` intermediates and makes about a dozen passes over them; this keeps ``r``
    and makes four. The values are the formula's to the bit; the gradients agree to
    float32 rounding (``tests/test_losses.py``)."""

    @staticmethod
    def forward(ctx, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        r = (txt[None] - img[:, None]).clamp_(min=0)  # [N, M, D]
        ctx.save_for_backward(r)
        return -(r * r).sum(-1)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (r,) = ctx.saved_tensors
        g = g.to(r.dtype)
        d_img = torch.bmm(g[:, None, :], r).squeeze(1).mul_(2)  # [N, 1, M] @ [N, M, D]
        d_txt = torch.bmm(g.T[:, None, :], r.transpose(0, 1)).squeeze(1).mul_(-2)
        return d_img, d_txt


def order_similarity(img: torch.Tensor, txt: torch.Tensor, abs: bool = False) -> torch.Tensor:
    """:func:`vsekit.similarity.order` on tensors. When a gradient is wanted (training),
    one fused function computes it (:class:`_OrderWithGrad`, one ``[N, M, D]`` tensor
    held); otherwise the core's chunked path, whose memory stays bounded for any N."""
    if not (torch.is_grad_enabled() and (img.requires_grad or txt.requires_grad)):
        return core.order(img, txt, abs_=abs)
    if abs:
        img, txt = img.abs(), txt.abs()
    dtype = torch.result_type(img, txt)
    return _OrderWithGrad.apply(img.to(dtype), txt.to(dtype))


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
