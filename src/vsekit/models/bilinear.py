"""The bilinear tag ranker (tag-ranking paper, section 3); its losses, SJE and ListSJE,
are in :mod:`vsekit.losses`.

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

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class BilinearConfig:
    """The model section of a ``kind: bilinear`` config (the tag ranker)."""

    kind: str = "bilinear"
    word_dim: int = 50  # size of the fixed tag word vectors phi(y) (GloVe 6B-50d: 50)


class BilinearTagger(nn.Module):
    """``W: [img_dim, word_dim]``; ``vocab`` (the training tags) is kept for inference."""

    config_class = BilinearConfig

    def __init__(self, img_dim: int, vocab=None, cfg: BilinearConfig | None = None) -> None:
        super().__init__()
        self.cfg, self.vocab = cfg or BilinearConfig(), vocab
        self.W = nn.Parameter(torch.randn(img_dim, self.cfg.word_dim) * 0.01)
        self.embed_dim = self.cfg.word_dim

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
