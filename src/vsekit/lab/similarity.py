"""The similarity registry of the lab: ``S(img[N, D], txt[M, D]) -> [N, M]`` (higher =
closer), created by name. The functions themselves are :mod:`vsekit.similarity`'s, the
one implementation the core uses too; the order similarity's gradient in training is a
fused function here, checked against autograd through that formula.

* ``cosine``: ``i . c`` on L2-normalised embeddings (journal paper eq. 2).
* ``order``: ``-||max(0, c - i)||^2`` (Vendrov et al.; journal paper eq. 3): a caption is
  above its image in the partial order when every coordinate of ``c`` is below ``i``'s.
  With ``abs=True``, both embeddings are taken in absolute value first, as in the original
  order-embedding code.
* ``euclidean``: ``-||i - c||^2`` (caption-retrieval report, section 4.2).

Created by name: ``create_similarity("order", abs=True)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

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

    Both passes walk the images in chunks whose ``r`` stays in cache, and the backward
    recomputes ``r`` instead of keeping it: autograd through the elementwise formula keeps
    three ``[N, M, D]`` tensors and makes about a dozen passes over them in memory. The
    values are the formula's to the bit; the gradients agree to float32 rounding
    (``tests/test_losses.py``; ``benchmarks/order_grad_speed.py`` times both)."""

    @staticmethod
    def forward(ctx, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(img, txt)
        out = img.new_empty(img.shape[0], txt.shape[0])
        with torch.autocast(img.device.type, enabled=False):
            for a, r in _order_chunks(img, txt):
                torch.sum(r.mul_(r), -1, out=out[a : a + len(r)])
        return out.neg_()

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        img, txt = ctx.saved_tensors
        want_img, want_txt = ctx.needs_input_grad
        # sums over chunks in float32 at least, whatever the inputs' precision
        acc = torch.promote_types(img.dtype, torch.float32)
        g = g.to(img.dtype)
        d_img = torch.empty_like(img) if want_img else None
        d_txt = torch.zeros_like(txt, dtype=acc) if want_txt else None
        with torch.autocast(img.device.type, enabled=False):  # backward may run inside one
            for a, r in _order_chunks(img, txt):
                ga = g[a : a + len(r)]  # [n, M]
                if d_img is not None:  # [n, 1, M] @ [n, M, D]
                    torch.bmm(ga[:, None, :], r, out=d_img[a : a + len(r), None, :])
                if d_txt is not None:  # [M, 1, n] @ [M, n, D]
                    d_txt += torch.bmm(ga.T[:, None, :], r.transpose(0, 1)).squeeze(1)
        return (
            d_img.mul_(2) if d_img is not None else None,
            d_txt.mul_(-2).to(txt.dtype) if d_txt is not None else None,
        )


def _order_chunks(img: torch.Tensor, txt: torch.Tensor) -> Iterator[tuple[int, torch.Tensor]]:
    """``(a, r)`` with ``r = max(0, txt[None] - img[a : a + n, None])``, ``[n, M, D]``."""
    step = max(1, core._ORDER_TILE // max(1, txt.numel()))  # the core's tile size
    for a in range(0, img.shape[0], step):
        yield a, (txt[None] - img[a : a + step, None]).clamp_(min=0)


def order_similarity(img: torch.Tensor, txt: torch.Tensor, abs: bool = False) -> torch.Tensor:
    """:func:`vsekit.similarity.order` on tensors. When a gradient is wanted (training),
    one fused function computes it (:class:`_OrderWithGrad`; no double backward);
    otherwise the core's tiled path."""
    if not (torch.is_grad_enabled() and (img.requires_grad or txt.requires_grad)):
        return core.order(img, txt, abs_=abs)
    if abs:
        img, txt = img.abs(), txt.abs()
    dtype = torch.result_type(img, txt)
    # contiguous rows: each S[n, m] then sums its D terms in the formula's order
    return _OrderWithGrad.apply(img.to(dtype).contiguous(), txt.to(dtype).contiguous())


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
