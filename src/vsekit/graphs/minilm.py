"""A pretrained BERT encoder (all-MiniLM-L6-v2: 6 layers, 384-d, 12 heads) and its mean
pooling as ONNX nodes, computing what :meth:`MiniLMEncoder.encode_tokens
<vsekit.lab.text.pretrained.MiniLMEncoder.encode_tokens>` computes with Hugging Face's
``BertModel`` (eager attention, eval mode): word-piece, position (0..T-1) and token-type
(0) embeddings, LayerNorm, then per layer multi-head self-attention with the additive
mask ``(1 - mask) * float32.min``, residual + LayerNorm, a GELU (erf) feed-forward,
residual + LayerNorm; then the mean of the real tokens' states, L2-normalised.

Nodes are named as the PyTorch export names them (``/pretrained.0/encoder/layer.0/
output/dense/MatMul``), so that its text int8 quantisation picks the same ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vsekit.graphs.builder import Graph
from vsekit.graphs.errors import UnsupportedModel
from vsekit.graphs.ops import l2_normalize, linear

#: a weight by its Hugging Face name below the model (``encoder.layer.0.output.dense.weight``)
Weights = Callable[[str], np.ndarray]
#: the mean pooling's floor on the token count (``pretrained.mean_pool``)
POOL_EPS = 1e-9


@dataclass(frozen=True)
class BertConfig:
    hidden: int
    heads: int
    layers: int
    eps: float

    @classmethod
    def from_json(cls, cfg: dict) -> BertConfig:
        """From a Hugging Face ``config.json``; UnsupportedModel for what this module
        does not write (another activation, relative positions)."""
        if cfg.get("hidden_act", "gelu") != "gelu":
            raise UnsupportedModel(f"pretrained transformer with {cfg['hidden_act']!r} activations")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise UnsupportedModel("pretrained transformer with relative position embeddings")
        return cls(
            hidden=int(cfg["hidden_size"]),
            heads=int(cfg["num_attention_heads"]),
            layers=int(cfg["num_hidden_layers"]),
            eps=float(cfg.get("layer_norm_eps", 1e-12)),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_weights(self, state: dict[str, np.ndarray], key: str) -> Weights:
        """The weights of the layer under ``key`` (``encoder.layer.3.``), read by BERT's
        names below it (what :func:`layer` reads)."""
        return lambda name: state[key + name]

    def inputs(self, g: Graph, input_ids: str, mask: str, w: Weights, name: str,
               wkey: str) -> tuple[str, str]:  # fmt: skip
        """``(token states [B, T, H], the bias every layer adds to its scores)``: the
        :func:`embeddings` and the padding mask's :func:`attention_bias`."""
        return (embeddings(g, input_ids, w, self, name, wkey),
                attention_bias(g, mask, f"{name}/extended_attention_mask"))  # fmt: skip


def layer_norm(g: Graph, x: str, w: Weights, key: str, eps: float, name: str,
                wkey: str) -> str:  # fmt: skip
    return g.op("LayerNormalization", x, g.weight(f"{wkey}{key}.weight", w(f"{key}.weight")),
                g.weight(f"{wkey}{key}.bias", w(f"{key}.bias")),
                name=f"{name}/LayerNormalization", axis=-1, epsilon=eps)  # fmt: skip


def _dense(g: Graph, x: str, w: Weights, key: str, name: str, wkey: str) -> str:
    """A ``[B, T, in]`` Linear: MatMul on the transposed weight, then the bias."""
    return linear(g, x, w(f"{key}.weight"), w(f"{key}.bias"), name, wkey + key, batched=True)


def embeddings(g: Graph, input_ids: str, w: Weights, cfg: BertConfig, name: str, wkey: str) -> str:
    """``input_ids [B, T]`` -> ``[B, T, H]``: word + token type 0 + position (0..T-1)
    embeddings, LayerNorm."""
    p = f"{name}/embeddings"
    x = g.op("Gather", g.weight(f"{wkey}embeddings.word_embeddings.weight",
                                w("embeddings.word_embeddings.weight")), input_ids,
             name=f"{p}/word_embeddings/Gather")  # fmt: skip
    shape = g.op("Shape", input_ids, name=f"{p}/Shape")
    zeros = g.filled(shape, 0, "int64", name=f"{p}/ConstantOfShape")
    types = g.op("Gather", g.weight(f"{wkey}embeddings.token_type_embeddings.weight",
                                    w("embeddings.token_type_embeddings.weight")), zeros,
                 name=f"{p}/token_type_embeddings/Gather")  # fmt: skip
    x = g.op("Add", x, types, name=f"{p}/Add")
    # the first T of the positions 0..max-1 (as BertEmbeddings slices its buffer)
    table = w("embeddings.position_embeddings.weight")
    t = g.op("Shape", input_ids, name=f"{p}/Shape_1", start=1, end=2)  # [1]: T
    positions = g.op(
        "Slice",
        g.const(np.arange(len(table))[None], "int64", f"{wkey}embeddings.position_ids"),
        g.const([0], "int64", f"{p}/start"),
        t,
        g.const([1], "int64", f"{p}/axes"),
        name=f"{p}/Slice",
    )  # [1, T]
    pos = g.op("Gather", g.weight(f"{wkey}embeddings.position_embeddings.weight", table),
               positions,
               name=f"{p}/position_embeddings/Gather")  # fmt: skip
    x = g.op("Add", x, pos, name=f"{p}/Add_1")
    return layer_norm(g, x, w, "embeddings.LayerNorm", cfg.eps, f"{p}/LayerNorm", wkey)


def attention_bias(g: Graph, mask: str, name: str) -> str:
    """``attention_mask [B, T]`` (1 real, 0 padding) -> ``[B, 1, 1, T]`` float32 added to
    the attention scores: 0, or float32's minimum where masked."""
    m = g.op("Unsqueeze", mask, g.const([1, 2], "int64", f"{name}/axes"), name=f"{name}/Unsqueeze")
    m = g.op("Cast", m, name=f"{name}/Cast", to=1)
    m = g.op("Sub", g.const(1.0, name=f"{name}/one"), m, name=f"{name}/Sub")
    lowest = float(np.finfo(np.float32).min)
    return g.op("Mul", m, g.const(lowest, name=f"{name}/lowest"), name=f"{name}/Mul")


def _heads(g: Graph, x: str, cfg: BertConfig, perm: list[int], name: str) -> str:
    """``[B, T, H]`` -> the heads' ``[B, heads, T, d]`` (``perm`` [0, 2, 1, 3]) or, for the
    keys, ``[B, heads, d, T]`` (``perm`` [0, 2, 3, 1])."""
    shape = g.const([0, 0, cfg.heads, cfg.head_dim], "int64", f"{name}/shape")
    x = g.op("Reshape", x, shape, name=f"{name}/Reshape")
    return g.op("Transpose", x, name=f"{name}/Transpose", perm=perm)


def layer(g: Graph, x: str, bias: str, w: Weights, cfg: BertConfig, name: str,
          wkey: str) -> str:  # fmt: skip
    """One encoder layer on ``x [B, T, H]`` with the attention ``bias``, added to the
    scaled scores ``[B, heads, T, T]``: the padding mask's ``[B, 1, 1, T]`` (BERT), or
    that plus MPNet's relative position bias, ``[B, heads, T, T]``;
    ``w`` reads this layer's weights by their names below it (``attention.self.query.weight``)."""
    a = f"{name}/attention/self"
    q = _heads(g, _dense(g, x, w, "attention.self.query", f"{a}/query", wkey), cfg,
               [0, 2, 1, 3], f"{a}/q")  # fmt: skip
    k = _heads(g, _dense(g, x, w, "attention.self.key", f"{a}/key", wkey), cfg,
               [0, 2, 3, 1], f"{a}/k")  # fmt: skip
    v = _heads(g, _dense(g, x, w, "attention.self.value", f"{a}/value", wkey), cfg,
               [0, 2, 1, 3], f"{a}/v")  # fmt: skip
    s = g.op("MatMul", q, k, name=f"{a}/MatMul")  # [B, heads, T, T]
    s = g.op("Mul", s, g.const(1.0 / math.sqrt(cfg.head_dim), name=f"{a}/scale"), name=f"{a}/Mul")
    s = g.op("Add", s, bias, name=f"{a}/Add")
    s = g.op("Softmax", s, name=f"{a}/Softmax", axis=-1)
    c = g.op("MatMul", s, v, name=f"{a}/MatMul_1")  # [B, heads, T, d]
    c = g.op("Transpose", c, name=f"{a}/Transpose_3", perm=[0, 2, 1, 3])
    merge = g.const([0, 0, cfg.hidden], "int64", f"{a}/merge")
    c = g.op("Reshape", c, merge, name=f"{a}/Reshape_3")  # [B, T, H]
    o = f"{name}/attention/output"
    y = _dense(g, c, w, "attention.output.dense", f"{o}/dense", wkey)
    y = g.op("Add", y, x, name=f"{o}/Add")
    x = layer_norm(g, y, w, "attention.output.LayerNorm", cfg.eps, f"{o}/LayerNorm", wkey)
    i = f"{name}/intermediate"
    h = _dense(g, x, w, "intermediate.dense", f"{i}/dense", wkey)
    act = f"{i}/intermediate_act_fn"  # GELU: h * 0.5 * (1 + erf(h / sqrt(2)))
    e = g.op("Div", h, g.const(math.sqrt(2.0), name=f"{act}/sqrt2"), name=f"{act}/Div")
    e = g.op("Erf", e, name=f"{act}/Erf")
    e = g.op("Add", e, g.const(1.0, name=f"{act}/one"), name=f"{act}/Add")
    h = g.op("Mul", h, e, name=f"{act}/Mul")
    h = g.op("Mul", h, g.const(0.5, name=f"{act}/half"), name=f"{act}/Mul_1")
    o = f"{name}/output"
    y = _dense(g, h, w, "output.dense", f"{o}/dense", wkey)
    y = g.op("Add", y, x, name=f"{o}/Add")
    return layer_norm(g, y, w, "output.LayerNorm", cfg.eps, f"{o}/LayerNorm", wkey)


def mean_pool(g: Graph, h: str, mask: str, name: str) -> str:
    """``h [B, T, H]``, ``mask [B, T]`` -> ``[B, H]``: the unit mean of the real tokens'
    states (``pretrained.mean_pool``)."""
    m = g.op("Unsqueeze", mask, g.const([-1], "int64", f"{name}/axis"), name=f"{name}/Unsqueeze")
    m = g.op("Cast", m, name=f"{name}/Cast", to=1)  # [B, T, 1]
    axis = g.const([1], "int64", f"{name}/axis1")
    total = g.op("ReduceSum", g.op("Mul", h, m, name=f"{name}/Mul"), axis,
                 name=f"{name}/ReduceSum", keepdims=0)  # fmt: skip
    count = g.op("ReduceSum", m, axis, name=f"{name}/ReduceSum_1", keepdims=0)
    count = g.op("Clip", count, g.const(POOL_EPS, name=f"{name}/eps"), name=f"{name}/Clip")
    return l2_normalize(g, g.op("Div", total, count, name=f"{name}/Div"), name)
