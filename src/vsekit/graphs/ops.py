"""Small blocks every graph here uses: linear layers and L2 normalisation, written as
``torch.onnx.export`` writes the PyTorch modules they stand for."""

from __future__ import annotations

import numpy as np

from vsekit.graphs.builder import Graph

#: ``torch.nn.functional.normalize``'s floor on the norm
NORM_EPS = 1e-12


def l2_normalize(g: Graph, x: str, name: str, eps: float = NORM_EPS) -> str:
    """``[B, D]`` -> each row divided by ``max(||row||, eps)`` (rows of zeros stay zero)."""
    norm = g.op("ReduceL2", x, name=f"{name}/ReduceL2", axes=[1], keepdims=1)
    norm = g.op("Clip", norm, g.const(eps, name=f"{name}/eps"), name=f"{name}/Clip")
    return g.op("Div", x, norm, name=f"{name}/Div")


def linear(g: Graph, x: str, w: np.ndarray, b: np.ndarray | None, name: str,
           key: str, batched: bool = False) -> str:  # fmt: skip
    """``nn.Linear``: ``x @ w.T + b`` for ``w [out, in]``, ``b [out]`` (or None).

    A 2-d input with a bias is one Gemm (``transB``, the weight kept ``[out, in]``);
    otherwise (``batched``: ``[B, T, in]`` inputs, or no bias) a MatMul with the weight
    stored transposed, then an Add of the bias. ``key``: the weight's name in the state
    dict (the initializers are named after it)."""
    if b is not None and not batched:
        return g.op("Gemm", x, g.weight(key + ".weight", w), g.weight(key + ".bias", b),
                    name=f"{name}/Gemm", alpha=1.0, beta=1.0, transB=1)  # fmt: skip
    y = g.op("MatMul", x, g.weight(key + ".weight_t", np.ascontiguousarray(w.T)),
             name=f"{name}/MatMul")  # fmt: skip
    if b is not None:
        y = g.op("Add", g.weight(key + ".bias", b), y, name=f"{name}/Add")
    return y


def scaled_concat(g: Graph, parts: list[str], scales: list[float], name: str = "") -> str:
    """An ensemble's members' unit embeddings, each times its scale
    (:func:`vsekit.similarity.ensemble_scales`), concatenated along the features:
    ``[B, D_1] ... [B, D_k] -> [B, sum D_k]``; a single part is returned as it is."""
    out = []
    for k, (p, s) in enumerate(zip(parts, scales, strict=True)):
        if s != 1.0:
            p = g.op("Mul", p, g.const(s, name=f"{name}/scale.{k}"), name=f"{name}/Mul")
        out.append(p)
    return out[0] if len(out) == 1 else g.op("Concat", *out, name=f"{name}/Concat", axis=1)
