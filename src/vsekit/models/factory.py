"""Model kinds by name: every trainer, evaluator and bundle builds models through here.

Contract of a model (see :mod:`vsekit.models.joint`): ``encode_images(features)``,
``encode_texts(texts)``, ``similarity(img, txt)``, ``embed_dim``, and
``training_outputs(features, texts)``, the pair its loss compares. Each kind has its own
config dataclass (``config_class``); a config's ``model`` section is parsed into the one
its ``kind`` names, so an option of another kind is an error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn

from ..config import _coerce
from ..data.vocab import Vocabulary
from ..registry import Registry
from ..text.encoders import TextEncoderConfig
from .bilinear import BilinearConfig, BilinearTagger
from .joint import JointConfig, JointEmbedding
from .w2vv import W2VVConfig, Word2VisualVec

ModelConfig = JointConfig | W2VVConfig | BilinearConfig

MODELS: Registry[type[nn.Module]] = Registry("model")
MODELS.register("joint")(JointEmbedding)
MODELS.register("w2vv")(Word2VisualVec)
MODELS.register("bilinear")(BilinearTagger)
list_models = MODELS.names

# the single model section every kind shared before per-kind sections, with its defaults
_LEGACY_DEFAULTS = {"text": dataclasses.asdict(TextEncoderConfig()), "similarity": "cosine",
                    "abs": False, "img_dropout": 0.0, "img_noise": 0.0, "hidden": [],
                    "dropout": 0.0, "out_relu": True}  # fmt: skip


def upgrade_model_section(d: dict) -> dict:
    """A model section stored by a run or bundle from before per-kind sections, without
    the shared options its kind does not read (they held their defaults)."""
    kind = d.get("kind", "joint")
    if kind not in MODELS:
        return d
    known = set(MODELS.get(kind).config_class.__dataclass_fields__)
    return {k: v for k, v in d.items() if k in known or _LEGACY_DEFAULTS.get(k, ...) != v}


def model_config(d: Any, where: str = "model") -> ModelConfig:
    """Parse a model section into its kind's config dataclass; an unknown kind or an
    option of another kind raises ConfigError naming the field."""
    return _coerce(d, ModelConfig, where)


def create_model(img_dim: int, vocab: Vocabulary, cfg: ModelConfig) -> nn.Module:
    return MODELS.get(cfg.kind)(img_dim, vocab, cfg)
