"""A bundle's model as the graph writer reads it, without PyTorch: its members (a joint
model, or an ensemble's joint members with their scales), each one's text encoder kind,
the weights (``model.safetensors`` as float32), the vocabulary expansion's rows, and the
checks that say which bundles the PyTorch-free writer covers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsekit.bundle import read_bundle_extras, verify_bundle
from vsekit.graphs.errors import UnsupportedModel
from vsekit.runtime.base import BaseModel
from vsekit.similarity import ensemble_scales
from vsekit.text.vocab import Vocabulary

#: what the writer covers; anything else needs the PyTorch export (``vse model onnx``)
TEXT_KINDS = ("gru", "minilm", "mpnet")
#: the pretrained transformers that read word pieces (``tokenizer.json``)
PIECE_KINDS = ("minilm", "mpnet")
FEATURE_KINDS = ("baseline", "baseline_raw", "pooled")
BACKBONES = ("resnet50", "resnet152")  # the lab's ResNets (torchvision layout)
PYTORCH_EXPORT = "use the PyTorch export (`vse model onnx`, vsekit[train])"

#: the lab's defaults for a text section's keys (``TextEncoderConfig``)
_TEXT_DEFAULTS = {"kind": "gru", "num_layers": 1, "bidirectional": False, "finetune_layers": 0}


@dataclass(frozen=True)
class Member:
    """One joint model: its state-dict ``prefix`` (``members.1.``, or "" for a lone
    model), its ``scale`` in the ensemble's concatenation, its text section."""

    index: int
    prefix: str
    scale: float
    text: dict

    @property
    def text_kind(self) -> str:
        return self.text["kind"]

    @property
    def text_prefix(self) -> str:
        return f"{self.prefix}text."


@dataclass
class BundleModel:
    """What the graphs are written from (see :func:`read_model`)."""

    path: Path
    info: dict
    members: list[Member]
    state: dict[str, np.ndarray]  # model.safetensors, float32
    vocab_size: int | None  # the word vocabulary, expansion included; None without words
    expansion: dict[str, np.ndarray]  # a word encoder's text prefix -> its added rows
    fingerprint: str

    @property
    def image(self) -> dict:
        return self.info["image"]

    @property
    def scales(self) -> list[float]:
        return [m.scale for m in self.members]

    def word_table(self, member: Member) -> np.ndarray:
        """``[V, W]``: a word-level member's embedding table, expansion rows appended."""
        base = self.state[f"{member.text_prefix}embed.weight"]
        extra = self.expansion.get(member.text_prefix)
        return base if extra is None else np.concatenate([base, extra])

    def members_of(self, kind: str) -> Iterator[Member]:
        return (m for m in self.members if m.text_kind == kind)


class _Fingerprint(BaseModel):
    """The fingerprint every backend gives a bundle (:attr:`BaseModel.fingerprint`), from
    its stored float16 weights."""

    def __init__(self, info: dict, state16: dict[str, np.ndarray]) -> None:
        self.info = info
        self._state16 = state16

    def _weights_fp16(self) -> Iterator[tuple[str, np.ndarray]]:
        yield from self._state16.items()


def _text_section(cfg: dict, where: str) -> dict:
    text = {**_TEXT_DEFAULTS, **(cfg.get("text") or {})}
    kind = text["kind"]
    if kind not in TEXT_KINDS:
        raise UnsupportedModel(f"{where}: a {kind!r} text encoder; {PYTORCH_EXPORT}")
    if kind == "gru" and text["bidirectional"]:
        raise UnsupportedModel(f"{where}: a bidirectional GRU; {PYTORCH_EXPORT}")
    return text


def _image_section(cfg: dict, where: str) -> None:
    """UnsupportedModel for an image side the writer does not build (input normalisation)."""
    if cfg.get("img_norm", "none") != "none":
        raise UnsupportedModel(f"{where}: img_norm {cfg['img_norm']!r}; {PYTORCH_EXPORT}")


def config_members(cfg: dict) -> list[Member]:
    """The members of a bundle's ``config.model`` section; UnsupportedModel for what the
    writer does not cover."""
    kind = cfg.get("kind", "joint")
    if kind == "joint":
        _image_section(cfg, "model")
        return [Member(0, "", 1.0, _text_section(cfg, "model"))]
    if kind != "ensemble":
        raise UnsupportedModel(f"model kind {kind!r}; {PYTORCH_EXPORT}")
    sections = list(cfg.get("members") or [])
    weights = list(cfg.get("weights") or []) or [1.0] * len(sections)
    if len(sections) < 2 or len(weights) != len(sections):
        raise ValueError(f"model.members: {len(sections)} members for weights {weights}")
    out = []
    for k, (m, s) in enumerate(zip(sections, ensemble_scales(weights), strict=True)):
        if m.get("kind", "joint") != "joint":
            raise UnsupportedModel(f"model.members[{k}]: kind {m['kind']!r}; {PYTORCH_EXPORT}")
        _image_section(m, f"model.members[{k}]")
        out.append(Member(k, f"members.{k}.", s, _text_section(m, f"model.members[{k}]")))
    return out


def check_image(image: dict) -> None:
    """UnsupportedModel unless the image side is one the writer covers."""
    if image["backbone"] not in BACKBONES:
        raise UnsupportedModel(f"backbone {image['backbone']!r}; {PYTORCH_EXPORT}")
    if image["features"] not in FEATURE_KINDS:
        raise UnsupportedModel(f"image features {image['features']!r}; {PYTORCH_EXPORT}")


def read_model(bundle: Path) -> BundleModel:
    """Read and verify (:func:`vsekit.bundle.verify_bundle`) the bundle at ``bundle``;
    UnsupportedModel naming what the PyTorch-free writer does not cover."""
    from safetensors.numpy import load_file

    bundle = Path(bundle)
    verify_bundle(bundle)
    info = json.loads((bundle / "bundle.json").read_text())
    members = config_members(info["config"]["model"])
    check_image(info["image"])
    state16 = load_file(bundle / "model.safetensors")
    state = {k: v.astype(np.float32) for k, v in state16.items()}
    extras = read_bundle_extras(bundle, info)
    words = [m for m in members if m.text_kind == "gru"]
    expansion: dict[str, np.ndarray] = {}
    vocab_size = len(Vocabulary.load(bundle / "vocab.json")) if words else None
    if extras["expansion"] is not None:
        added, vectors, _ = extras["expansion"]
        if not words:
            raise ValueError(f"{bundle}: a vocabulary expansion, and no word-level encoder")
        if not isinstance(vectors, dict):  # one table: the first word encoder's
            vectors = {words[0].text_prefix: vectors}
        if set(vectors) != {m.text_prefix for m in words}:
            raise ValueError(f"{bundle}: expansion vectors for {sorted(vectors)}; the word "
                             f"encoders are {[m.text_prefix for m in words]}")  # fmt: skip
        expansion = {k: np.asarray(v, np.float32) for k, v in vectors.items()}
        vocab_size = (vocab_size or 0) + len(added)
    for m in words:
        base = state[f"{m.text_prefix}embed.weight"]
        rows = len(base) + len(expansion.get(m.text_prefix, ()))
        if rows != vocab_size:
            raise ValueError(f"{bundle}: {m.text_prefix}embed has {rows} rows for a "
                             f"vocabulary of {vocab_size}")  # fmt: skip
    return BundleModel(
        path=bundle, info=info, members=members, state=state, vocab_size=vocab_size,
        expansion=expansion, fingerprint=_Fingerprint(info, state16).fingerprint,
    )  # fmt: skip
