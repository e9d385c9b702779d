"""The bilinear tag ranker (tag-ranking paper, section 3); its losses, SJE and ListSJE,
are in :mod:`vsekit.lab.losses`.

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

Beyond the paper (``learn_tags: true``, trained with ``loss: tag_bce``): every training
tag ``y`` also gets a learned offset ``d_y`` and bias ``b_y``,

    s(x, y) = psi(x)^T W (phi(y) + d_y) + b_y,

and the loss is a sigmoid cross-entropy over *all* training tags (absent tags are
negatives), so ``sigmoid(s)`` estimates the probability that a tag applies and a
threshold can hide the doubtful ones. A tag that training never saw keeps its GloVe
vector (``d = 0``) and the mean bias: the vocabulary stays open.
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
    learn_tags: bool = False  # a learned offset and bias per training tag (see above)


class BilinearTagger(nn.Module):
    """``W: [img_dim, word_dim]``; ``vocab`` (the training tags) is kept for inference."""

    config_class = BilinearConfig

    def __init__(self, img_dim: int, vocab=None, cfg: BilinearConfig | None = None) -> None:
        super().__init__()
        self.cfg, self.vocab = cfg or BilinearConfig(), vocab
        self.W = nn.Parameter(torch.randn(img_dim, self.cfg.word_dim) * 0.01)
        self.embed_dim = self.cfg.word_dim
        if self.cfg.learn_tags:
            if vocab is None:
                raise ValueError("model.learn_tags: needs the training tag vocabulary")
            n = len(vocab.itos)
            self.offsets = nn.Parameter(torch.zeros(n, self.cfg.word_dim))
            self.bias = nn.Parameter(torch.zeros(n))
            self._row = {t: i for i, t in enumerate(vocab.itos)}

    def tag_ids(self, names: list[str]) -> torch.Tensor:
        """Rows of ``offsets``/``bias`` for tag ``names`` (-1: a tag training never saw)."""
        return torch.tensor([self._row.get(t, -1) for t in names], dtype=torch.long)

    def tag_terms(
        self, vectors: torch.Tensor, ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | float]:
        """``(phi(y) + d_y, b_y)`` for ``vectors [..., D]`` of tags ``ids [...]``; without
        ``learn_tags``, ``(phi(y), 0)``. Unseen tags (id -1) get ``d = 0`` and the mean bias."""
        vectors = vectors.to(self.device, torch.float32)
        if not self.cfg.learn_tags:
            return vectors, 0.0
        if ids is None:
            raise ValueError("a tagger with learned tags needs the tags' ids (tag_ids)")
        ids = ids.to(self.device)
        seen = ids >= 0
        safe = ids.clamp(min=0)
        off = self.offsets[safe] * seen.unsqueeze(-1)
        bias = torch.where(seen, self.bias[safe], self.bias.mean())
        return vectors + off, bias

    @property
    def device(self) -> torch.device:
        return self.W.device

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        """``psi(x)^T W``: ``[B, word_dim]``, so that ``s(x, y) = encode(x) . phi(y)``."""
        return features.to(self.device, torch.float32) @ self.W

    def scores(
        self, features: torch.Tensor, vectors: torch.Tensor, ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[B, F] x [T, D] -> [B, T]``: every image against one tag vocabulary
        (``ids [T]``: the tags' :meth:`tag_ids`, needed with ``learn_tags``)."""
        v, b = self.tag_terms(vectors, ids)
        return self.encode_images(features) @ v.T + b

    def score_lists(
        self, features: torch.Tensor, vectors: torch.Tensor, ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[B, F] x [B, L, D] -> [B, L]``: each image against its own tag list."""
        v, b = self.tag_terms(vectors, ids)
        return torch.einsum("bd,bld->bl", self.encode_images(features), v) + b
