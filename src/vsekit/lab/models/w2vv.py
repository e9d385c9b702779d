"""Word2VisualVec (Dong et al. 2016) and the multi-response regression baseline.

A sentence vector ``s(q)`` (a registered vectoriser: bag-of-words, letter trigrams or
mean word vectors) goes through an MLP into the *visual feature space*::

    h_1 = relu(W_1 s(q) + b_1),  h_i = relu(W_i h_{i-1} + b_i),  r(q) = relu(W_l h + b_l)

(eq. 3-5; dropout after each hidden layer; the output ReLU is optional, since FNE
targets are ternary). Training regresses ``r(q)`` on the image's feature ``phi(x)`` with
MSE (eq. 6); matching is by cosine between ``r(q)`` and ``phi(x)`` (eq. 8), or by
``-||phi(x) - r(q)||^2`` for the regression baseline of the caption-retrieval report
(section 4.1).

With no hidden layer and no output ReLU this is multi-response linear regression; its
ridge solution has a closed form (:meth:`Word2VisualVec.fit_closed_form`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from vsekit.lab.similarity import create_similarity
from vsekit.lab.text.encoders import TextEncoderConfig, create_text_encoder
from vsekit.text.vocab import Vocabulary


@dataclass
class W2VVConfig:
    """The model section of a ``kind: w2vv`` config (Word2VisualVec, the regression
    baseline): text vector -> MLP -> the visual feature space."""

    kind: str = "w2vv"
    text: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    similarity: str = "cosine"  # cosine | euclidean: matching in the visual space
    hidden: list[int] = field(default_factory=list)  # hidden layer sizes ([]: linear)
    dropout: float = 0.0  # dropout after each hidden layer
    out_relu: bool = True  # ReLU on the output layer (eq. 5; off for FNE targets)


class Word2VisualVec(nn.Module):
    config_class = W2VVConfig

    def __init__(self, img_dim: int, vocab: Vocabulary, cfg: W2VVConfig) -> None:
        super().__init__()
        if cfg.similarity not in ("cosine", "euclidean"):
            raise ValueError(
                f"model.similarity: w2vv matches by cosine or euclidean, not {cfg.similarity!r}"
            )
        self.cfg = cfg
        self.text = create_text_encoder(vocab, cfg.text)
        dims = [self.text.dim, *cfg.hidden, img_dim]
        layers: list[nn.Module] = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                layers += [nn.ReLU(), nn.Dropout(cfg.dropout)]
            elif cfg.out_relu:
                layers.append(nn.ReLU())
        self.mlp = nn.Sequential(*layers)
        self.embed_dim = img_dim
        self._normalize = cfg.similarity == "cosine"
        self._sim = create_similarity(cfg.similarity)

    @property
    def device(self) -> torch.device:
        return self.mlp[0].weight.device

    def vectorize(self, texts: Sequence[str]) -> torch.Tensor:
        """``s(q)``: ``[B, text.dim]``."""
        batch = {k: v.to(self.device) for k, v in self.text.prepare(texts).items()}
        return self.text(**batch)

    def predict(self, texts: Sequence[str]) -> torch.Tensor:
        """``r(q)``: ``[B, img_dim]``, the predicted visual feature."""
        return self.mlp(self.vectorize(texts))

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        x = features.to(self.device, torch.float32)
        return nn.functional.normalize(x, dim=1) if self._normalize else x

    def encode_texts(self, texts: Sequence[str]) -> torch.Tensor:
        r = self.predict(texts)
        return nn.functional.normalize(r, dim=1) if self._normalize else r

    def similarity(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        return self._sim(img, txt)

    def training_outputs(
        self, features: torch.Tensor, texts: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(phi(x), r(q))``, raw, for the MSE loss."""
        return features.to(self.device, torch.float32), self.predict(texts)

    @torch.no_grad()
    def fit_closed_form(
        self, batches: Iterable[tuple[torch.Tensor, Sequence[str]]], ridge: float = 0.0
    ) -> None:
        """Ridge regression in closed form, streamed over ``(features [B, F], texts)``
        batches: ``[W b] = Y^T X~ (X~^T X~ + ridge * I')^{-1}`` with ``X~ = [s(q) 1]``;
        the bias is not penalised. Needs a linear model (no hidden layer, no output ReLU)."""
        if len(self.mlp) != 1:
            raise ValueError("fit_closed_form needs model.hidden: [] and model.out_relu: false")
        lin: nn.Linear = self.mlp[0]
        m = lin.in_features + 1
        xtx = torch.zeros(m, m, dtype=torch.float64, device=self.device)
        xty = torch.zeros(m, lin.out_features, dtype=torch.float64, device=self.device)
        for feats, texts in batches:
            x = self.vectorize(texts).double()
            x = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype, device=x.device)], dim=1)
            y = feats.to(self.device, torch.float64)
            xtx += x.T @ x
            xty += x.T @ y
        reg = torch.full((m,), float(ridge), dtype=torch.float64, device=self.device)
        reg[-1] = 0.0
        sol = torch.linalg.lstsq(xtx + torch.diag(reg), xty).solution  # (m, F)
        lin.weight.copy_(sol[:-1].T.float())
        lin.bias.copy_(sol[-1].float())
