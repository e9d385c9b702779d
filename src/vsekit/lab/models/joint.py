"""The joint image-text embedding of UVS / VSE++ / order embeddings (journal paper 3.2).

Images: a linear map without bias from the (frozen) image features into the joint space,
L2-normalised (optionally after an MLP, ``img_hidden``). The input features may be
normalised first (``img_norm``). Text: a registered text encoder.
Both sides share ``embed_dim``; the model's similarity (cosine, order, euclidean) is the one
its loss trains.

Contract used by evaluation, search and serving:
``encode_images(features[N, F]) -> [N, D]``, ``encode_texts(list[str]) -> [M, D]``,
``similarity(img[N, D], txt[M, D]) -> [N, M]``, ``embed_dim``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from vsekit.lab.similarity import create_similarity
from vsekit.lab.text.encoders import TextEncoderConfig, create_text_encoder
from vsekit.text.vocab import Vocabulary

IMG_NORMS = ("none", "l2", "layernorm")


@dataclass
class JointConfig:
    """The model section of a ``kind: joint`` config (UVS / VSE++ / order embeddings)."""

    kind: str = "joint"
    text: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    similarity: str = "cosine"  # cosine | order | euclidean
    abs: bool = False  # order similarity on absolute values (order embeddings)
    img_dropout: float = 0.0  # dropout on the input image features (regularises the map)
    img_noise: float = 0.0  # std of Gaussian noise added to image features in training
    img_hidden: list[int] = field(default_factory=list)  # MLP widths before the projection
    # the input features, before dropout and the map: none | l2 (each row to unit length) |
    # layernorm (each row standardised, then a learned per-dimension scale and shift)
    img_norm: str = "none"


class JointEmbedding(nn.Module):
    config_class = JointConfig

    def __init__(self, img_dim: int, vocab: Vocabulary, cfg: JointConfig) -> None:
        super().__init__()
        if cfg.img_norm not in IMG_NORMS:
            raise ValueError(f"model.img_norm: {cfg.img_norm!r} is not one of {IMG_NORMS}")
        self.cfg = cfg
        # registered only when used, so the state dicts of other models are unchanged
        if cfg.img_norm == "layernorm":
            self.img_norm = nn.LayerNorm(img_dim)
        self.text = create_text_encoder(vocab, cfg.text)
        self.embed_dim = cfg.text.embed_dim
        mlp: list[nn.Module] = []
        for width in cfg.img_hidden:  # optional MLP: Linear, ReLU, dropout per hidden layer
            mlp += [nn.Linear(img_dim, width), nn.ReLU(), nn.Dropout(cfg.img_dropout)]
            img_dim = width
        self.img_mlp = nn.Sequential(*mlp)
        self.img_proj = nn.Linear(img_dim, self.embed_dim, bias=False)
        # Xavier-uniform, as in UVS/VSE++: keeps initial scores in a trainable range
        nn.init.xavier_uniform_(self.img_proj.weight)
        self.img_drop = nn.Dropout(cfg.img_dropout)
        sim_kw = {"abs": cfg.abs} if cfg.similarity == "order" else {}
        self._sim = create_similarity(cfg.similarity, **sim_kw)

    @property
    def device(self) -> torch.device:
        return self.img_proj.weight.device

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        """``[N, F]`` image features (any dtype) -> ``[N, D]`` unit vectors."""
        x = features.to(self.device, torch.float32)
        if self.cfg.img_norm == "l2":
            x = nn.functional.normalize(x, dim=1)
        elif self.cfg.img_norm == "layernorm":
            x = self.img_norm(x)
        if self.training and self.cfg.img_noise > 0:
            x = x + self.cfg.img_noise * torch.randn_like(x)
        return nn.functional.normalize(self.img_proj(self.img_mlp(self.img_drop(x))), dim=1)

    def encode_texts(self, texts: Sequence[str]) -> torch.Tensor:
        """Raw captions -> ``[M, D]`` unit vectors."""
        batch = {k: v.to(self.device) for k, v in self.text.prepare(texts).items()}
        return self.text(**batch)

    def similarity(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        return self._sim(img, txt)

    def training_outputs(
        self, features: torch.Tensor, texts: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What the loss compares: both sides in the joint space."""
        return self.encode_images(features), self.encode_texts(texts)
