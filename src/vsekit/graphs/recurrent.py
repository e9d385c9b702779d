"""A word-level GRU text encoder (:class:`~vsekit.lab.text.encoders.GRUEncoder`,
unidirectional, any number of layers) as ONNX nodes.

PyTorch's ``nn.GRU`` keeps its gates in the order (r, z, n) and applies the reset gate
after the hidden state's linear map, ``n = tanh(W_n x + b_in + r * (U_n h + b_hn))``;
ONNX's GRU orders them (z, r, h) and computes that only with ``linear_before_reset=1``.
The weights are reordered here, and that attribute set.

The sentence vector is the last layer's state at each sequence's last token
(``lengths - 1``, at least 0), read from the outputs of a run over the whole padded
batch, as the PyTorch export reads it: a unidirectional state never depends on the
padding after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vsekit.graphs.builder import Graph
from vsekit.graphs.ops import l2_normalize


@dataclass(frozen=True)
class GRULayer:
    """One layer's PyTorch weights: ``w_ih [3H, I]``, ``w_hh [3H, H]``, ``b_ih``, ``b_hh``
    ``[3H]``, gates stacked (r, z, n)."""

    w_ih: np.ndarray
    w_hh: np.ndarray
    b_ih: np.ndarray
    b_hh: np.ndarray

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], rnn: str, layer: int) -> GRULayer:
        """Layer ``layer`` of the ``nn.GRU`` at state-dict prefix ``rnn`` (``...text.rnn``)."""
        return cls(*(state[f"{rnn}.{n}_l{layer}"]
                     for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")))  # fmt: skip

    @property
    def hidden(self) -> int:
        return self.w_hh.shape[1]


def torch_to_onnx_gates(a: np.ndarray) -> np.ndarray:
    """Rows stacked (r, z, n) -> (z, r, n), along the first axis."""
    r, z, n = np.split(a, 3, axis=0)
    return np.concatenate([z, r, n], axis=0)


def gru_sentence(
    g: Graph, ids: str, lengths: str, table: np.ndarray, layers: list[GRULayer], name: str,
    key: str,
) -> str:  # fmt: skip
    """``ids [B, T]`` int64 (0-padded), ``lengths [B]`` int64 -> ``[B, H]`` unit vectors:
    the word table ``table [V, W]`` (the vocabulary expansion's rows included), the GRU
    stack, the last layer's state at ``max(lengths - 1, 0)``, L2-normalised. ``key``: the
    encoder's state-dict prefix, for the initializers' names."""
    x = g.op("Gather", g.weight(f"{key}embed.weight", table), ids, name=f"{name}/embed/Gather")
    x = g.op("Transpose", x, name=f"{name}/rnn/Transpose", perm=[1, 0, 2])  # [T, B, W]
    for k, layer in enumerate(layers):
        h = layer.hidden
        w = g.weight(f"{key}rnn.W_l{k}", torch_to_onnx_gates(layer.w_ih)[None])
        r = g.weight(f"{key}rnn.R_l{k}", torch_to_onnx_gates(layer.w_hh)[None])
        b = np.concatenate([torch_to_onnx_gates(layer.b_ih), torch_to_onnx_gates(layer.b_hh)])
        y = g.op("GRU", x, w, r, g.weight(f"{key}rnn.B_l{k}", b[None]), name=f"{name}/rnn/GRU",
                 hidden_size=h, linear_before_reset=1)  # fmt: skip  # Y: [T, 1, B, H]
        x = g.op("Squeeze", y, g.const([1], "int64", f"{name}/axis1"), name=f"{name}/rnn/Squeeze")
    x = g.op("Transpose", x, name=f"{name}/rnn/Transpose_1", perm=[1, 0, 2])  # [B, T, H]
    last = g.op("Sub", lengths, g.const(1, "int64", f"{name}/one"), name=f"{name}/Sub")
    last = g.op("Clip", last, g.const(0, "int64", f"{name}/zero"), name=f"{name}/Clip")
    last = g.op("Unsqueeze", last, g.const([1], "int64", f"{name}/axis1"),
                name=f"{name}/Unsqueeze")  # fmt: skip  # [B, 1]
    x = g.op("GatherND", x, last, name=f"{name}/GatherND", batch_dims=1)  # [B, H]
    return l2_normalize(g, x, name)
