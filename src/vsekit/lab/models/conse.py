"""A concept channel from the backbone's own ImageNet classifier (ConSE).

Norouzi et al. 2014, "Zero-Shot Learning by Convex Combination of Semantic Embeddings":
an image is embedded as the convex combination of the word vectors of its top ``T``
ImageNet classes, weighted by the classifier's probabilities,

    f(x) = 1/Z sum_{t=1..T} p(y_t | x) s(y_t),    Z = sum_{t=1..T} p(y_t | x),

where ``s(y)`` is the mean GloVe vector of the words of class ``y``'s name ("golden
retriever"). A sentence is embedded as the mean GloVe vector of its words (stop words
dropped), and the two are compared by cosine. Nothing is trained: a query word that no
caption ever used ("giraffe", "kayak") finds photos the classifier recognises.

The model reads the same unit pool5 features as the joint models (so it can join an
ensemble, ``kind: ensemble``, at no indexing cost): the classifier's logits are
``W (n x) + b`` with ``n = pool5_norm``, the mean L2 norm of raw pool5 rows on the
training images (``x`` is unit, so this restores the scale the classifier was trained at;
for crops averaged before the classifier, the logits are those of the mean feature).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch
from torch import nn

from vsekit.lab.models.dot import UnitDotModel
from vsekit.text.vocab import Vocabulary


@dataclass
class ConSEConfig:
    kind: str = "conse"
    top_k: int = 10  # T, the image's top classes combined (the paper's T = 10)
    pool5_norm: float = 0.0  # mean L2 norm of raw pool5 rows (required, > 0)
    backbone: str = "resnet50"  # whose ImageNet classifier (fc) scores the classes
    weights: str = "auto"  # its weights file (auto: the installed ones)
    stopwords: bool = True  # drop English stop words from sentences
    similarity: str = "cosine"


def imagenet_classes() -> list[str]:
    """The 1,000 ILSVRC-2012 class names, in the classifier's output order."""
    text = resources.files("vsekit").joinpath("assets/imagenet_classes.txt").read_text()
    return text.splitlines()


def class_vectors(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``([C, 50] mean GloVe vector of each name's words, [C] has a known word)``."""
    from vsekit.lab.text.glove import tag_vectors

    return tag_vectors([n.lower().replace("-", " ").replace("'", "") for n in names])


class ConSEEmbedding(UnitDotModel, nn.Module):
    """ConSE image and sentence embeddings, ``[B, 50]`` unit vectors, cosine similarity."""

    config_class = ConSEConfig

    def __init__(self, img_dim: int, vocab: Vocabulary | None, cfg: ConSEConfig) -> None:
        super().__init__()
        from vsekit.lab.features.weights import read_weights, weights_file
        from vsekit.lab.text.encoders import TextEncoderConfig
        from vsekit.lab.text.vectorizers import MeanWordVectors

        if cfg.pool5_norm <= 0:
            raise ValueError("model.pool5_norm: the mean norm of raw pool5 rows, > 0")
        if cfg.top_k < 1:
            raise ValueError(f"model.top_k: at least 1, not {cfg.top_k}")
        self.cfg = cfg
        state, _ = read_weights(weights_file(cfg.backbone, cfg.weights))
        w, b = state["fc.weight"].float(), state["fc.bias"].float()
        if w.shape[1] != img_dim:
            raise ValueError(f"{cfg.backbone} fc takes {w.shape[1]}-d features, not {img_dim}")
        vec, known = class_vectors(imagenet_classes())
        if len(vec) != w.shape[0]:
            raise ValueError(f"{len(vec)} class names for a {w.shape[0]}-way classifier")
        # buffers, not parameters: nothing here trains; not saved (rebuilt from the
        # backbone weights and GloVe, both hash-checked where they are installed)
        self.register_buffer("fc_w", w, persistent=False)
        self.register_buffer("fc_b", b, persistent=False)
        self.register_buffer("vectors", torch.from_numpy(vec), persistent=False)
        self.register_buffer("known", torch.from_numpy(known), persistent=False)
        words = TextEncoderConfig(kind="mean_glove", stopwords=cfg.stopwords)
        self.words = MeanWordVectors(None, words)
        self.embed_dim = self.words.dim

    @property
    def device(self) -> torch.device:
        return self.fc_w.device

    def class_probabilities(self, features: torch.Tensor) -> torch.Tensor:
        """``[B, 1000]`` softmax of the classifier on unit ``[B, D]`` features."""
        x = features.to(self.device, torch.float32) * self.cfg.pool5_norm
        return torch.softmax(x @ self.fc_w.t() + self.fc_b, dim=1)

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        p = self.class_probabilities(features) * self.known  # names GloVe cannot read: out
        top, idx = p.topk(self.cfg.top_k, dim=1)
        f = (top.unsqueeze(-1) * self.vectors[idx]).sum(1)  # the 1/Z cancels in the norm
        return nn.functional.normalize(f, dim=1)

    def encode_texts(self, texts: Sequence[str]) -> torch.Tensor:
        x = self.words(**self.words.prepare(texts)).to(self.device)
        return nn.functional.normalize(x, dim=1)
