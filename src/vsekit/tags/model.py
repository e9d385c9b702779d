"""The bilinear tag ranker and its losses (tag-ranking paper, sections 3 and 3.1).

Compatibility ``s(x, y) = psi(x)^T W phi(y)`` (eq. 1): ``psi`` the image features
(one-layer, FNE or R-MAC), ``phi`` fixed word vectors (GloVe; a compound noun is the
mean of its words' vectors), ``W`` learned.

Losses over one image's tags ``Y = (y_1..y_|Y|)`` ranked by the mined relevance, with
``s_i = s(x, y_i)``, averaged over the images of a batch:

* SJE (eq. 3): ``max_{1<=i<=|Y|} [Delta(1, i) + s_i - s_1]_+``;
* ListSJE (eq. 6): ``sum_{k<=K_top} sum_{k<i<=|Y|} [Delta(k, i) + s_i - s_k]_+``;
* ``Delta^(I)(k, i) = 1 - [k == i]`` (eq. 4), ``Delta^(II)(k, i) = 1 - 1/(i - k + 1)``
  (eq. 5; ListSJE always uses it).

Losses take ``(scores [B, L], mask [B, L])``: column ``k`` is the image's k-th ranked
tag, ``mask`` marks real (not padding) entries.
"""

from __future__ import annotations

import torch
from torch import nn

from ..losses import register_loss


class BilinearTagger(nn.Module):
    """``W: [img_dim, word_dim]``; ``vocab`` (the training tags) is kept for inference."""

    def __init__(self, img_dim: int, vocab=None, cfg=None, word_dim: int = 50) -> None:
        super().__init__()
        self.cfg, self.vocab = cfg, vocab
        self.W = nn.Parameter(torch.randn(img_dim, word_dim) * 0.01)
        self.embed_dim = word_dim

    @property
    def device(self) -> torch.device:
        return self.W.device

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        """``psi(x)^T W``: ``[B, word_dim]``, so that ``s(x, y) = encode(x) . phi(y)``."""
        return features.to(self.device, torch.float32) @ self.W

    def scores(self, features: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
        """``[B, F] x [T, D] -> [B, T]``: every image against one tag vocabulary."""
        return self.encode_images(features) @ vectors.to(self.device, torch.float32).T

    def score_lists(self, features: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
        """``[B, F] x [B, L, D] -> [B, L]``: each image against its own tag list."""
        return torch.einsum("bd,bld->bl", self.encode_images(features), vectors.float())


def delta_matrix(n: int, kind: str, device=None) -> torch.Tensor:
    """``[n, n]``: ``Delta(k, i)`` for 0-based ranks (used where ``i > k``)."""
    k = torch.arange(n, device=device)[:, None]
    i = torch.arange(n, device=device)[None, :]
    if kind == "I":
        return (k != i).float()
    if kind == "II":
        return 1.0 - 1.0 / (i - k + 1).clamp(min=1).float()
    raise ValueError(f"delta: use I | II, not {kind!r}")


@register_loss("sje")
class SJELoss(nn.Module):
    """Structured joint embedding loss (eq. 3) with Delta^(I) or Delta^(II)."""

    def __init__(self, delta: str = "II") -> None:
        super().__init__()
        delta_matrix(1, delta)  # validates
        self.delta = delta

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        d = delta_matrix(scores.shape[1], self.delta, scores.device)[0]  # Delta(1, i)
        viol = (d[None, :] + scores - scores[:, :1]).clamp(min=0)
        viol = viol.masked_fill(~mask, 0.0)  # i = 1 gives 0, so the max is at least 0
        return viol.max(dim=1).values.mean()


@register_loss("listsje")
class ListSJELoss(nn.Module):
    """Listwise SJE (eq. 6): hinge of every pair (k, i), k < i, k among the first
    ``k_top``, with Delta^(II)."""

    def __init__(self, k_top: int = 5) -> None:
        super().__init__()
        if k_top < 1:
            raise ValueError(f"k_top: must be >= 1, got {k_top}")
        self.k_top = k_top

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        n = scores.shape[1]
        d = delta_matrix(n, "II", scores.device)  # [k, i]
        k = torch.arange(n, device=scores.device)
        pair = (k[:, None] < k[None, :]) & (k[:, None] < self.k_top)  # [k, i]
        valid = pair[None] & mask[:, :, None] & mask[:, None, :]
        viol = (d[None] + scores[:, None, :] - scores[:, :, None]).clamp(min=0)
        return (viol * valid).sum(dim=(1, 2)).mean()
