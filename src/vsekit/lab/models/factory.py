"""Model kinds by name: every trainer, evaluator and bundle builds models through here.

Contract of a model (see :mod:`vsekit.lab.models.joint`): ``encode_images(features)``,
``encode_texts(texts)``, ``similarity(img, txt)``, ``embed_dim``, and
``training_outputs(features, texts)``, the pair its loss compares. Each kind has its own
config dataclass (``config_class``); a config's ``model`` section is parsed into the one
its ``kind`` names, so an option of another kind is an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vsekit.config import from_dict, tagged
from vsekit.lab.models.bilinear import BilinearConfig, BilinearTagger
from vsekit.lab.models.conse import ConSEConfig, ConSEEmbedding
from vsekit.lab.models.dot import UnitDotModel
from vsekit.lab.models.joint import JointConfig, JointEmbedding
from vsekit.lab.models.w2vv import W2VVConfig, Word2VisualVec
from vsekit.lab.text.encoders import TextEncoderConfig
from vsekit.registry import Registry
from vsekit.similarity import ensemble_concat, ensemble_scales
from vsekit.text.vocab import Vocabulary


@dataclass
class EnsembleConfig:
    """The model section of a ``kind: ensemble`` bundle: member model sections, trained
    separately on the same image features, and the weight of each one's similarity."""

    kind: str = "ensemble"
    members: list[dict] = field(default_factory=list)  # each a model section (joint, ...)
    weights: list[float] = field(default_factory=list)  # default: equal; normalised to sum 1
    similarity: str = "cosine"  # the members' own (each must be cosine)


# a model section: its ``kind`` picks the dataclass (joint when absent)
ModelConfig = tagged(JointConfig, W2VVConfig, BilinearConfig, EnsembleConfig, ConSEConfig)


class EnsembleEmbedding(UnitDotModel, nn.Module):
    """Several cosine models as one: the weighted mean of their similarities.

    The weighting is :func:`vsekit.similarity.ensemble_concat` (the one implementation,
    shared with the benchmarks): a cosine model of dimension ``sum_k D_k``, so an index,
    its search and the ONNX graphs work unchanged.
    The members share the image features, so an ensemble of text towers costs one
    backbone pass per image at indexing time.
    """

    config_class = EnsembleConfig

    def __init__(self, img_dim: int, vocab: Vocabulary, cfg: EnsembleConfig) -> None:
        super().__init__()
        if len(cfg.members) < 2:
            raise ValueError("model.members: an ensemble needs at least 2 member models")
        weights = list(cfg.weights) or [1.0] * len(cfg.members)
        if len(weights) != len(cfg.members) or min(weights) <= 0:
            raise ValueError(f"model.weights: {len(cfg.members)} positive numbers, not {weights}")
        self.weights = weights
        parsed = [model_config(m, f"model.members[{k}]") for k, m in enumerate(cfg.members)]
        for k, m in enumerate(parsed):
            if getattr(m, "similarity", None) != "cosine":
                raise ValueError(f"model.members[{k}]: an ensemble member must use cosine")
        self.cfg = cfg
        self.members = nn.ModuleList(create_model(img_dim, vocab, m) for m in parsed)
        self.embed_dim = sum(m.embed_dim for m in self.members)

    @property
    def device(self) -> torch.device:
        return self.members[0].device

    @property
    def scales(self) -> list[float]:
        """Each member's factor in the concatenation (the ONNX exporter's too)."""
        return ensemble_scales(self.weights)

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        return ensemble_concat([m.encode_images(features) for m in self.members], self.weights)

    def encode_texts(self, texts: Sequence[str]) -> torch.Tensor:
        return ensemble_concat([m.encode_texts(texts) for m in self.members], self.weights)


MODELS: Registry[type[nn.Module]] = Registry("model")
MODELS.register("joint")(JointEmbedding)
MODELS.register("w2vv")(Word2VisualVec)
MODELS.register("bilinear")(BilinearTagger)
MODELS.register("ensemble")(EnsembleEmbedding)
MODELS.register("conse")(ConSEEmbedding)
list_models = MODELS.names


def text_encoders(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(state-dict prefix, encoder)`` of every text encoder in ``model`` (an ensemble
    has one per member), e.g. ``[("members.0.text.", GRUEncoder)]``."""
    if isinstance(model, EnsembleEmbedding):
        return [(f"members.{k}.{p}", e) for k, m in enumerate(model.members)
                for p, e in text_encoders(m)]  # fmt: skip
    enc = getattr(model, "text", None)
    return [("text.", enc)] if enc is not None else []


def word_encoders(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's word-level recurrent text encoders (each a vocabulary and a word table;
    what vocabulary expansion extends) with their state-dict prefixes."""
    return [(p, e) for p, e in text_encoders(model) if hasattr(e, "rnn")]


def word_encoder(model: nn.Module) -> tuple[str, nn.Module] | None:
    """The first of :func:`word_encoders` (an ensemble's members share one vocabulary)."""
    return next(iter(word_encoders(model)), None)


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
    return from_dict(ModelConfig, d, where)


def create_model(img_dim: int, vocab: Vocabulary, cfg: ModelConfig) -> nn.Module:
    return MODELS.get(cfg.kind)(img_dim, vocab, cfg)
