"""The text graph: what the PyTorch export's ``_TextGraph`` computes, from NumPy weights.

Inputs, as the model's text encoders need them: ``ids [B, T]`` int64 (0-padded) and
``lengths [B]`` int64 for word-level (GRU) members; ``input_ids [B, P]`` and
``attention_mask [B, P]`` int64 for word-piece members (MiniLM or MPNet: one kind per
model, as they read one tokenizer). Output ``embedding [B, D]``: each member's unit vector
times its ensemble scale, concatenated in the members' order.

Word-piece members whose transformer is frozen share one: its sentence vector is computed
once. A MiniLM member that tuned its top layers (``finetune_layers``) shares the frozen
layers below them with the others and runs its own tuned ones.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vsekit.graphs.builder import Graph
from vsekit.graphs.errors import UnsupportedModel
from vsekit.graphs.heads import projection_dim, projection_head
from vsekit.graphs.minilm import BertConfig, layer, mean_pool
from vsekit.graphs.model import PIECE_KINDS, BundleModel, Member
from vsekit.graphs.mpnet import MPNetConfig
from vsekit.graphs.ops import scaled_concat
from vsekit.graphs.recurrent import GRULayer, gru_sentence

#: the text graph's inputs for each kind of text encoder (``onnx_export``'s names)
WORD_INPUTS, PIECE_INPUTS = ("ids", "lengths"), ("input_ids", "attention_mask")

#: one transformer layer: (its identity, the initializers' name prefix, its weights)
LayerSource = tuple[str, str, Callable[[str], np.ndarray]]


def text_inputs(model: BundleModel) -> list[str]:
    """The graph's input names, in order (``onnx.json``'s ``text_inputs``)."""
    kinds = {m.text_kind for m in model.members}
    pieces = bool(kinds & set(PIECE_KINDS))
    return [*(WORD_INPUTS if "gru" in kinds else ()), *(PIECE_INPUTS if pieces else ())]


def pretrained_kind(model: BundleModel) -> str | None:
    """The word-piece members' transformer (``minilm`` or ``mpnet``), None without one;
    UnsupportedModel for a model that mixes them."""
    kinds = sorted({m.text_kind for m in model.members} & set(PIECE_KINDS))
    if len(kinds) > 1:
        raise UnsupportedModel(f"members with {' and '.join(kinds)} text encoders (two "
                               "tokenizers); one pretrained kind per model")  # fmt: skip
    return kinds[0] if kinds else None


#: each word-piece kind's transformer, as the graph writes it
CONFIGS: dict[str, type[BertConfig]] = {"minilm": BertConfig, "mpnet": MPNetConfig}


def _layer_sources(model: BundleModel, member: Member, state: dict[str, np.ndarray],
                   cfg: BertConfig) -> list[LayerSource]:  # fmt: skip
    """The transformer layers ``member`` runs: the pretrained ones, its tuned top ones
    (``<prefix>text.tuned.<j>.``) in place of the last ``finetune_layers``."""
    tuned = int(member.text.get("finetune_layers", 0))
    if not 0 <= tuned <= cfg.layers:
        raise ValueError(f"model.members[{member.index}]: finetune_layers {tuned}")
    if tuned and member.text_kind != "minilm":
        raise UnsupportedModel(f"model.members[{member.index}]: tuned {member.text_kind} layers")
    out: list[LayerSource] = []
    for i in range(cfg.layers):
        j = i - (cfg.layers - tuned)
        if j < 0:
            key = f"encoder.layer.{i}."
            out.append((f"pretrained:{key}", f"pretrained.{key}", cfg.layer_weights(state, key)))
        else:
            key = f"{member.text_prefix}tuned.{j}."
            if f"{key}attention.self.query.weight" not in model.state:
                raise ValueError(f"{model.path}: no weights {key}* for a tuned layer")
            out.append((key, key, lambda s, key=key: model.state[key + s]))
    return out


class _Transformers:
    """The word-piece members' transformers, written once per distinct stack of layers
    (and each shared lower part once)."""

    def __init__(self, g: Graph, input_ids: str, mask: str, state: dict[str, np.ndarray],
                 cfg: BertConfig) -> None:  # fmt: skip
        self.g, self.input_ids, self.mask, self.state, self.cfg = g, input_ids, mask, state, cfg
        self.states: dict[tuple[str, ...], str] = {}  # layers run so far -> [B, T, H]
        self.pooled: dict[tuple[str, ...], str] = {}
        self.stacks: list[tuple[str, ...]] = []
        self._bias: str | None = None

    def sentence(self, sources: list[LayerSource], member: Member) -> str:
        """``[B, H]`` unit sentence vectors of the stack ``sources``."""
        stack = tuple(s[0] for s in sources)
        if stack in self.pooled:
            return self.pooled[stack]
        if stack not in self.stacks:
            self.stacks.append(stack)
        name = f"/pretrained.{self.stacks.index(stack)}"
        g = self.g
        if () not in self.states:
            self.states[()], self._bias = self.cfg.inputs(
                g, self.input_ids, self.mask, self.state.__getitem__, name, "pretrained."
            )
        for i, (_, wkey, weights) in enumerate(sources):
            if stack[: i + 1] not in self.states:
                self.states[stack[: i + 1]] = layer(
                    g, self.states[stack[:i]], self._bias, weights, self.cfg,
                    f"{name}/encoder/layer.{i}", wkey,
                )  # fmt: skip
        out = mean_pool(g, self.states[stack], self.mask, f"/encs.{member.index}/pool")
        self.pooled[stack] = out
        return out


def text_graph(
    model: BundleModel,
    pretrained: tuple[dict[str, np.ndarray], dict] | None = None,
    fp16_storage: bool = True,
) -> Graph:
    """The text graph of ``model``; ``pretrained``: the transformer's ``(state,
    config.json)`` (:func:`vsekit.graphs.weights.pretrained_weights` of
    :func:`pretrained_kind`) when members read word pieces."""
    g = Graph("vsekit_text", fp16_storage)
    names = text_inputs(model)
    feeds = {n: g.input(n, "int64", ["b"] if n == "lengths" else
                        ["b", "p" if n in PIECE_INPUTS else "t"]) for n in names}  # fmt: skip
    bert = None
    if "input_ids" in feeds:
        kind = pretrained_kind(model)
        if pretrained is None or kind is None:
            raise ValueError(f"text_graph: the model has {kind} members; pass their weights")
        cfg = CONFIGS[kind].from_json(pretrained[1])
        bert = _Transformers(g, feeds["input_ids"], feeds["attention_mask"], pretrained[0], cfg)
    parts, dims = [], []
    for m in model.members:
        name = f"/encs.{m.index}"
        if m.text_kind == "gru":
            rnn = f"{m.text_prefix}rnn"
            layers = [GRULayer.from_state(model.state, rnn, k)
                      for k in range(int(m.text["num_layers"]))]  # fmt: skip
            parts.append(gru_sentence(g, feeds["ids"], feeds["lengths"], model.word_table(m),
                                      layers, name, m.text_prefix))  # fmt: skip
            dims.append(layers[-1].hidden)
        else:
            assert bert is not None
            pooled = bert.sentence(_layer_sources(model, m, bert.state, bert.cfg), m)
            parts.append(projection_head(g, pooled, model.state, m.text_prefix, name))
            dims.append(projection_dim(model.state, m.text_prefix))
    emb = scaled_concat(g, parts, model.scales, "/ensemble")
    g.output(emb, "embedding", "float32", ["b", sum(dims)])
    return g
