"""The image graph: what the PyTorch export's ``_ImageGraph`` computes, from NumPy weights.

``views [N, C, 3, S, S] uint8`` (C crops per image, from
:func:`vsekit.media.views.crop_views_array`) -> ``embedding [N, D]`` and
``features [N, F]``: the backbone with its preprocessing, the spatial average of the
layer(s) the feature kind reads (``baseline``: the baseline layer alone, ResNet-50's
pool5, and nothing after it is computed), the mean over the crops, the feature kind
(``baseline``: L2-normalised; ``baseline_raw``, ``pooled``: as they are), and each member's
image head, scaled and concatenated.
"""

from __future__ import annotations

import numpy as np

from vsekit.graphs.builder import Graph
from vsekit.graphs.heads import image_head
from vsekit.graphs.model import BundleModel
from vsekit.graphs.ops import l2_normalize, scaled_concat
from vsekit.graphs.resnet import ResNetConfig, ResNetNodes, normalize_pixels


def image_graph(
    model: BundleModel, backbone: dict[str, np.ndarray], meta: dict[str, str],
    fp16_storage: bool = True,
) -> Graph:  # fmt: skip
    """The image graph of ``model`` on the backbone weights ``backbone`` (torchvision
    layout) with their file's ``meta``."""
    spec = model.image
    crops = int(spec["crops"])
    size = int((spec.get("preprocessing") or {}).get("input_size", 224))
    kind = spec["features"]
    cfg = ResNetConfig.from_weights(backbone, meta)
    g = Graph("vsekit_image", fp16_storage)
    views = g.input("views", "uint8", ["n", crops, 3, size, size])
    x = g.op("Reshape", views, g.const([-1, 3, size, size], "int64", "/views_shape"),
             name="/Reshape")  # fmt: skip
    x = normalize_pixels(g, x, cfg)
    net = ResNetNodes(g, backbone, cfg)
    if kind == "pooled":  # every layer, each spatially averaged, concatenated
        pooled = [g.op("ReduceMean", f, name=f"/pool/{layer}/ReduceMean", axes=[2, 3], keepdims=0)
                  for layer, f in net.layers(x)]  # fmt: skip
        pooled = g.op("Concat", *pooled, name="/pool/Concat", axis=1)
    else:  # one layer: pool only that one, run nothing after it
        layer = spec["baseline_layer"]
        if layer not in cfg.layer_names():
            raise ValueError(f"{spec['backbone']} has no layer {layer!r}")
        *_, (_, last) = net.layers(x, until=layer)
        pooled = g.op("ReduceMean", last, name="/ReduceMean", axes=[2, 3], keepdims=0)
    dim = int(model.info["img_dim"])
    want = sum(_channels(backbone, n) for n in cfg.layer_names()) if kind == "pooled" else (
        _channels(backbone, spec["baseline_layer"]))  # fmt: skip
    if want != dim:
        raise ValueError(f"the bundle's img_dim {dim} is not the backbone's {want} features")
    pooled = g.op("Reshape", pooled, g.const([-1, crops, dim], "int64", "/crops_shape"),
                  name="/Reshape_1")  # fmt: skip
    pooled = g.op("ReduceMean", pooled, name="/ReduceMean_1", axes=[1], keepdims=0)  # [N, F]
    feats = l2_normalize(g, pooled, "/features") if kind == "baseline" else pooled
    parts = [image_head(g, feats, model.state, m.prefix, f"/members.{m.index}")
             for m in model.members]  # fmt: skip
    emb = scaled_concat(g, parts, model.scales, "/ensemble")
    g.output(emb, "embedding", "float32", ["n", sum(_dim(model, m.prefix) for m in model.members)])
    g.output(feats, "features", "float32", ["n", dim])
    return g


def _channels(backbone: dict[str, np.ndarray], layer: str) -> int:
    """Output channels of a ResNet layer (``stem`` or ``layer{s}.{j}``)."""
    key = "conv1.weight" if layer == "stem" else f"{layer}.conv3.weight"
    return backbone[key].shape[0]


def _dim(model: BundleModel, prefix: str) -> int:
    return model.state[f"{prefix}img_proj.weight"].shape[0]
