"""A pretrained MPNet encoder (all-mpnet-base-v2: 12 layers, 768-d, 12 heads) and its mean
pooling as ONNX nodes, computing what :class:`MPNetEncoder
<vsekit.lab.text.pretrained.MPNetEncoder>` computes with Hugging Face's ``MPNetModel``
(eager attention, eval mode).

MPNet is BERT with three differences, and this module writes only those; the layers are
:func:`vsekit.graphs.minilm.layer` reading MPNet's weights under BERT's names:

* embeddings: word pieces plus positions, no token types. A token at index ``t`` of a
  right-padded batch has position ``pad + 1 + t`` (``create_position_ids_from_input_ids``
  with ``padding_idx`` 1, MPNet's pad id, when the padding is not id 1), so the graph
  gathers rows ``pad + 1 .. pad + T``. vsekit pads with id 0, so padded tokens get the
  same positions as in Hugging Face; with id-1 padding they would differ, which the mask
  makes irrelevant (it keeps them out of every real token's attention and the pooling);
* a relative position bias, ``[1, heads, T, T]``, computed once and added to every
  layer's attention scores: ``relative_attention_bias[bucket(k - q)]`` with T5's
  buckets (:func:`relative_buckets`: 32 buckets, half per direction, exact below 8,
  logarithmic up to a distance of 128);
* MPNet's names: ``attention.attn.q`` for BERT's ``attention.self.query`` and so on
  (:data:`BERT_NAMES`).

The bias is added to the padding mask's once, in ``/position_bias``, outside the
``/pretrained.`` nodes that the text int8 quantisation picks: its 384 numbers stay float.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vsekit.graphs.builder import Graph
from vsekit.graphs.errors import UnsupportedModel
from vsekit.graphs.minilm import BertConfig, Weights, attention_bias, layer_norm

#: BERT's weight names (what :func:`vsekit.graphs.minilm.layer` reads) -> MPNet's
BERT_NAMES = {
    "attention.self.query.": "attention.attn.q.",
    "attention.self.key.": "attention.attn.k.",
    "attention.self.value.": "attention.attn.v.",
    "attention.output.dense.": "attention.attn.o.",
    "attention.output.LayerNorm.": "attention.LayerNorm.",
}


@dataclass(frozen=True)
class MPNetConfig(BertConfig):
    pad: int  # the pad token's id: positions start after it
    positions: int  # rows of the position table
    buckets: int  # relative position buckets
    max_distance: int = 128  # Hugging Face's fixed default

    @classmethod
    def from_json(cls, cfg: dict) -> MPNetConfig:
        """From a Hugging Face ``config.json`` of ``model_type: mpnet``."""
        if cfg.get("model_type") != "mpnet":
            raise UnsupportedModel(f"an {cfg.get('model_type')!r} transformer as MPNet")
        # transformers' MPNet fixes both, whatever its config says
        if int(cfg.get("pad_token_id", 1)) != 1 or int(cfg.get("relative_attention_num_buckets",
                                                               32)) != 32:  # fmt: skip
            raise UnsupportedModel("an MPNet with a pad id other than 1 or other than 32 "
                                   "relative position buckets")  # fmt: skip
        base = vars(BertConfig.from_json(cfg))  # the activation checked there
        return cls(**{**base, "eps": float(cfg.get("layer_norm_eps", 1e-5))}, pad=1,
                   positions=int(cfg["max_position_embeddings"]), buckets=32)  # fmt: skip

    @property
    def max_tokens(self) -> int:
        """The longest input the position table covers."""
        return self.positions - self.pad - 1

    def layer_weights(self, state: dict[str, np.ndarray], key: str) -> Weights:
        """The weights of MPNet's layer under ``key`` (``encoder.layer.3.``), read by
        BERT's names below it (:data:`BERT_NAMES`)."""

        def read(name: str) -> np.ndarray:
            for bert, mpnet in BERT_NAMES.items():
                if name.startswith(bert):
                    return state[key + mpnet + name[len(bert) :]]
            return state[key + name]

        return read

    def inputs(self, g: Graph, input_ids: str, mask: str, w: Weights, name: str,
               wkey: str) -> tuple[str, str]:  # fmt: skip
        """``(token states [B, T, H], the bias every layer adds to its scores)``: the
        :func:`embeddings` and :func:`scores_bias` (relative positions and padding)."""
        return (embeddings(g, input_ids, w, self, name, wkey),
                scores_bias(g, input_ids, mask, w, self))  # fmt: skip


def relative_buckets(relative: np.ndarray, buckets: int, max_distance: int) -> np.ndarray:
    """The bucket of each relative position ``k - q`` (int64), as Hugging Face's
    ``MPNetEncoder.relative_position_bucket`` computes it, float32 logarithm included:
    one half of the buckets for keys before the query, one for keys after; within each,
    distances below a quarter of ``buckets`` exactly, the rest on a log scale up to
    ``max_distance`` (beyond it the last bucket)."""
    n = -np.asarray(relative, dtype=np.int64)
    half = buckets // 2
    out = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    with np.errstate(divide="ignore"):  # log(0): the exact branch takes those
        log = np.log(n.astype(np.float32) / np.float32(exact))
        scaled = log / np.float32(math.log(max_distance / exact)) * np.float32(half - exact)
    large = exact + np.where(np.isfinite(scaled), scaled, 0).astype(np.int64)
    large = np.minimum(large, half - 1)
    return out + np.where(n < exact, n, large)


def embeddings(g: Graph, input_ids: str, w: Weights, cfg: MPNetConfig, name: str,
               wkey: str) -> str:  # fmt: skip
    """``input_ids [B, T]`` -> ``[B, T, H]``: word + position (``pad + 1 + t``)
    embeddings, LayerNorm."""
    p = f"{name}/embeddings"
    x = g.op("Gather", g.weight(f"{wkey}embeddings.word_embeddings.weight",
                                w("embeddings.word_embeddings.weight")), input_ids,
             name=f"{p}/word_embeddings/Gather")  # fmt: skip
    t = g.op("Shape", input_ids, name=f"{p}/Shape", start=1, end=2)  # [1]: T
    first = cfg.pad + 1
    end = g.op("Add", t, g.const([first], "int64", f"{p}/first"), name=f"{p}/Add_end")
    positions = g.op(
        "Slice",
        g.const(np.arange(cfg.positions)[None], "int64", f"{wkey}embeddings.position_ids"),
        g.const([first], "int64", f"{p}/start"),
        end,
        g.const([1], "int64", f"{p}/axes"),
        name=f"{p}/Slice",
    )  # [1, T]
    pos = g.op("Gather", g.weight(f"{wkey}embeddings.position_embeddings.weight",
                                  w("embeddings.position_embeddings.weight")), positions,
               name=f"{p}/position_embeddings/Gather")  # fmt: skip
    x = g.op("Add", x, pos, name=f"{p}/Add")
    return layer_norm(g, x, w, "embeddings.LayerNorm", cfg.eps, f"{p}/LayerNorm", wkey)


def scores_bias(g: Graph, input_ids: str, mask: str, w: Weights, cfg: MPNetConfig,
                name: str = "/position_bias") -> str:  # fmt: skip
    """``[B, heads, T, T]`` added to every layer's attention scores: the relative
    position bias plus the padding mask's (:func:`vsekit.graphs.minilm.attention_bias`).
    Exact for the scores of real keys (0 is added to the bias); a padded key's score
    stays at float32's minimum, whose softmax weight is 0 either way."""
    span = cfg.max_tokens - 1  # relative positions -span..span
    table = relative_buckets(np.arange(-span, span + 1), cfg.buckets, cfg.max_distance)
    t = g.op("Shape", input_ids, name=f"{name}/Shape", start=1, end=2)
    t = g.op("Squeeze", t, g.const([0], "int64", f"{name}/axis0"), name=f"{name}/Squeeze")
    r = g.op("Range", g.const(0, "int64", f"{name}/zero"), t, g.const(1, "int64", f"{name}/one"),
             name=f"{name}/Range")  # fmt: skip
    keys = g.op("Unsqueeze", r, g.const([0], "int64", f"{name}/rows"), name=f"{name}/Unsqueeze")
    queries = g.op("Unsqueeze", r, g.const([1], "int64", f"{name}/cols"),
                   name=f"{name}/Unsqueeze_1")  # fmt: skip
    rel = g.op("Sub", keys, queries, name=f"{name}/Sub")  # [T, T]: k - q
    rel = g.op("Add", rel, g.const(span, "int64", f"{name}/span"), name=f"{name}/Add")
    bucket = g.op("Gather", g.const(table, "int64", f"{name}/buckets"), rel,
                  name=f"{name}/Gather")  # fmt: skip
    bias = g.op("Gather", g.weight("pretrained.encoder.relative_attention_bias.weight",
                                   w("encoder.relative_attention_bias.weight")), bucket,
                name=f"{name}/Gather_1")  # [T, T, heads]  # fmt: skip
    bias = g.op("Transpose", bias, name=f"{name}/Transpose", perm=[2, 0, 1])
    bias = g.op("Unsqueeze", bias, g.const([0], "int64", f"{name}/batch"),
                name=f"{name}/Unsqueeze_2")  # [1, heads, T, T]  # fmt: skip
    return g.op("Add", bias, attention_bias(g, mask, f"{name}/mask"), name=f"{name}/Add_1")
