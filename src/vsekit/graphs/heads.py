"""The trained heads of a joint model (:class:`~vsekit.lab.models.joint.JointEmbedding`)
as ONNX nodes: the image side's MLP and projection, and a pretrained text tower's
projection (:class:`~vsekit.lab.text.pretrained.MiniLMEncoder`'s ``proj``); each ends
L2-normalised, as the modules do in eval mode (dropout off)."""

from __future__ import annotations

import re

import numpy as np

from vsekit.graphs.builder import Graph
from vsekit.graphs.ops import l2_normalize, linear

StateDict = dict[str, np.ndarray]


def sequential_linears(state: StateDict, prefix: str) -> list[str]:
    """The state-dict prefixes of the Linear layers of an ``nn.Sequential`` at ``prefix``
    (``members.1.img_mlp.``), in order: ``["members.1.img_mlp.0", "members.1.img_mlp.3"]``."""
    found = sorted(int(m.group(1)) for k in state
                   if (m := re.fullmatch(rf"{re.escape(prefix)}(\d+)\.weight", k)))  # fmt: skip
    return [f"{prefix}{i}" for i in found]


def image_head(g: Graph, features: str, state: StateDict, prefix: str, name: str) -> str:
    """``JointEmbedding.encode_images``: ``[N, F]`` features -> ``[N, D]`` unit vectors:
    ``img_mlp`` (Linear + ReLU per hidden width), the bias-free ``img_proj``, L2
    normalisation. ``prefix``: the member's state-dict prefix (``members.1.`` or "")."""
    x = features
    for key in sequential_linears(state, f"{prefix}img_mlp."):
        sub = f"{name}/img_mlp.{key.rpartition('.')[2]}"
        x = linear(g, x, state[f"{key}.weight"], state[f"{key}.bias"], sub, key)
        x = g.op("Relu", x, name=f"{sub}/Relu")
    key = f"{prefix}img_proj"
    x = linear(g, x, state[f"{key}.weight"], state.get(f"{key}.bias"), f"{name}/img_proj", key)
    return l2_normalize(g, x, name)


def projection_head(g: Graph, pooled: str, state: StateDict, prefix: str, name: str) -> str:
    """``MiniLMEncoder.forward(pooled=...)``: ``[B, H]`` sentence vectors -> ``[B, D]``
    unit vectors through ``proj`` (Linear layers with ReLU between them). ``prefix``: the
    encoder's state-dict prefix (``members.1.text.``)."""
    keys = sequential_linears(state, f"{prefix}proj.")
    x = pooled
    for i, key in enumerate(keys):
        sub = f"{name}/proj/proj.{key.rpartition('.')[2]}"
        x = linear(g, x, state[f"{key}.weight"], state.get(f"{key}.bias"), sub, key)
        if i < len(keys) - 1:
            x = g.op("Relu", x, name=f"{sub}/Relu")
    return l2_normalize(g, x, name)


def projection_dim(state: StateDict, prefix: str) -> int:
    """The output width of the ``proj`` at ``prefix`` (its last Linear's)."""
    return state[sequential_linears(state, f"{prefix}proj.")[-1] + ".weight"].shape[0]
