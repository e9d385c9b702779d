"""Model kinds by name: every trainer, evaluator and bundle builds models through here.

Contract of a model (see :mod:`vsekit.models.joint`): ``encode_images(features)``,
``encode_texts(texts)``, ``similarity(img, txt)``, ``embed_dim``, and
``training_outputs(features, texts)``, the pair its loss compares.
"""

from __future__ import annotations

from torch import nn

from ..data.vocab import Vocabulary
from ..registry import Registry
from .bilinear import BilinearTagger
from .joint import JointConfig, JointEmbedding
from .w2vv import Word2VisualVec

MODELS: Registry[type[nn.Module]] = Registry("model")
MODELS.register("joint")(JointEmbedding)
MODELS.register("w2vv")(Word2VisualVec)
MODELS.register("bilinear")(BilinearTagger)


list_models = MODELS.names


def create_model(img_dim: int, vocab: Vocabulary, cfg: JointConfig) -> nn.Module:
    return MODELS.get(cfg.kind)(img_dim, vocab, cfg)
