"""TF.js graph models (``format: graph-model``) read in NumPy and written as ONNX.

A TF.js graph model is a TensorFlow GraphDef in JSON (``modelTopology.node``) whose
constants live in binary shards (``weightsManifest``), often stored float16. This module
reads both and translates the ops convolutional detectors use, for the part of the
graph a caller asks for (the nodes its outputs depend on):

============================  =====================================================
TF.js op                      ONNX
============================  =====================================================
``_FusedConv2D``              Conv (+ bias) [+ Relu | Clip 0..6]
``FusedDepthwiseConv2dNative`` Conv with ``group = in`` (+ bias) [+ activation]
``Conv2D``                    Conv
``DepthwiseConv2dNative``     Conv with ``group = in``
``Add``, ``AddV2``, ``Mul``   Add, Mul (a per-channel constant reshaped to ``[C, 1, 1]``)
``Relu``, ``Relu6``           Relu, Clip 0..6
``Sigmoid``, ``Identity``     Sigmoid, Identity
``Mean`` over H, W            ReduceMean over axes 2, 3
``ConcatV2`` on channels      Concat on axis 1
``ResizeBilinear``            Resize, linear, ``asymmetric`` (``align_corners`` and
                              ``half_pixel_centers`` false) or ``half_pixel``
============================  =====================================================

TensorFlow computes NHWC; the ONNX graph takes the same NHWC input, transposes it once
to NCHW and keeps every 4-d tensor NCHW (outputs are NCHW). ``SAME`` padding is ONNX's
``SAME_UPPER`` (TensorFlow puts the odd pixel after). Any other op, attribute or layout
raises :class:`GraphWeightsError` naming the node, so a model outside this subset is
refused, never translated approximately. The translation is tested against the model's
own runtime (``@tensorflow/tfjs``) on real photos: ``tests/test_detector.py``.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsekit.graphs.errors import GraphWeightsError

#: the translation's version, written into each graph's metadata
#: (``vsekit.tfjs_translator``): a graph written by another version is written again
TRANSLATOR_VERSION = 1
_DTYPES = {"float32": "<f4", "int32": "<i4"}
_QUANT = {"float16": "<f2", "uint8": "u1", "uint16": "<u2"}


@dataclass(frozen=True)
class TfjsGraph:
    """A TF.js graph model in memory: ``nodes`` by name (GraphDef JSON nodes, in file
    order) and ``consts`` (every weight of the manifest, dequantised, float32 or int32)."""

    nodes: dict[str, dict]
    consts: dict[str, np.ndarray]
    signature: dict

    def attr(self, node: dict, key: str, default=None):
        """A node attribute as Python: ints, floats, bools, strings and their lists."""
        a = node.get("attr", {}).get(key)
        if a is None:
            return default
        if "list" in a:
            lst = a["list"]
            if "i" in lst:
                return [int(v) for v in lst["i"]]
            if "s" in lst:
                return [base64.b64decode(v).decode() for v in lst["s"]]
            return []
        if "s" in a:
            return base64.b64decode(a["s"]).decode()
        if "i" in a:
            return int(a["i"])
        if "f" in a:
            return float(a["f"])
        if "b" in a:
            return bool(a["b"])
        return default


def _spec(model_json: Path) -> dict:
    """The model's JSON; GraphWeightsError naming the file when it is unreadable or not
    a TF.js graph model."""
    try:
        spec = json.loads(Path(model_json).read_text())
        if not isinstance(spec, dict):
            raise ValueError("not a JSON object")
        spec["modelTopology"]["node"], spec["weightsManifest"]  # noqa: B018 - must exist
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise GraphWeightsError(f"{model_json}: not a readable TF.js model ({e!r})") from e
    return spec


def read_weights(model_json: Path) -> dict[str, np.ndarray]:
    """Every weight of a TF.js model's manifest, dequantised: float16-stored weights to
    float32, affine uint8/uint16 ones by their ``scale`` and ``min``. GraphWeightsError
    naming the file (and the weight, where one is at fault) for a shard shorter or longer
    than the manifest says, an unknown dtype or a malformed manifest."""
    try:
        return _read_weights(model_json)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, GraphWeightsError):
            raise
        raise GraphWeightsError(f"{model_json}: a malformed weights manifest ({e!r})") from e


def _read_weights(model_json: Path) -> dict[str, np.ndarray]:
    spec = _spec(model_json)
    folder = Path(model_json).parent
    out: dict[str, np.ndarray] = {}
    for group in spec["weightsManifest"]:
        try:
            blob = b"".join((folder / p).read_bytes() for p in group["paths"])
        except OSError as e:
            raise GraphWeightsError(f"{model_json}: a weight shard is unreadable ({e})") from e
        offset = 0
        for w in group["weights"]:
            n = int(np.prod(w["shape"])) if w["shape"] else 1
            q = w.get("quantization")
            if q is not None and q["dtype"] not in _QUANT:
                raise GraphWeightsError(f"{model_json}: {w['name']}: quantisation {q['dtype']}")
            if q is None and w["dtype"] not in _DTYPES:
                raise GraphWeightsError(f"{model_json}: {w['name']}: dtype {w['dtype']}")
            stored = np.dtype(_QUANT[q["dtype"]] if q is not None else _DTYPES[w["dtype"]])
            if offset + n * stored.itemsize > len(blob):
                raise GraphWeightsError(f"{model_json}: the shards end inside {w['name']} "
                                        f"({len(blob)} bytes)")  # fmt: skip
            raw = np.frombuffer(blob, stored, n, offset)
            offset += raw.nbytes
            if q is None:
                a = raw.copy()
            else:
                a = raw.astype(np.float32)
                if q["dtype"] != "float16":
                    a = a * np.float32(q["scale"]) + np.float32(q["min"])
                if w["dtype"] == "int32":
                    a = np.rint(a).astype(np.int32)
            out[w["name"]] = a.reshape(w["shape"])
        if offset != len(blob):
            raise GraphWeightsError(f"{model_json}: shards hold {len(blob)} bytes, the "
                                    f"manifest {offset}")  # fmt: skip
    return out


def read_graph_model(model_json: Path) -> TfjsGraph:
    """The graph model at ``model_json`` (its shards beside it)."""
    spec = _spec(model_json)
    if spec.get("format") != "graph-model":
        raise GraphWeightsError(f"{model_json}: not a TF.js graph model ({spec.get('format')})")
    try:
        nodes = {n["name"]: n for n in spec["modelTopology"]["node"]}
    except (KeyError, TypeError) as e:
        raise GraphWeightsError(f"{model_json}: a malformed graph ({e!r})") from e
    return TfjsGraph(nodes, read_weights(model_json), spec.get("signature", {}))


class _Translator:
    """One translation: TF.js tensor names -> ONNX tensor names, with 4-d tensors NCHW."""

    def __init__(self, graph: TfjsGraph, g) -> None:
        self.tf = graph
        self.g = g
        self.done: dict[str, str] = {}

    def fail(self, node: dict, why: str):
        raise GraphWeightsError(f"TF.js node {node['name']} ({node['op']}): {why}")

    def const(self, name: str) -> np.ndarray:
        base = name.split(":")[0]
        node = self.tf.nodes.get(base)
        if base not in self.tf.consts or (node is not None and node["op"] != "Const"):
            raise GraphWeightsError(f"TF.js tensor {name}: expected a constant")
        return self.tf.consts[base]

    def tensor(self, name: str) -> str:
        """The ONNX tensor of TF.js tensor ``name``, translating what it depends on
        (iteratively: graphs are deeper than Python's recursion allows)."""
        stack = [name.split(":")[0]]
        waiting: set[str] = set()  # nodes whose inputs are being translated
        while stack:
            top = stack[-1]
            if top in self.done:
                stack.pop()
                continue
            node = self.tf.nodes.get(top)
            if node is None:
                raise GraphWeightsError(f"TF.js tensor {top}: no such node")
            todo = [
                i.split(":")[0]
                for i in self._activation_inputs(node)
                if i.split(":")[0] not in self.done
            ]
            if todo:
                if top in waiting:
                    self.fail(node, "a cycle (a loop): only feed-forward graphs translate")
                waiting.add(top)
                stack.extend(todo)
                continue
            self.done[top] = self.translate(node)
            stack.pop()
        return self.done[name.split(":")[0]]

    def _activation_inputs(self, node: dict) -> list[str]:
        """The inputs of ``node`` that are computed, not constants."""
        if node["op"] in ("Placeholder", "Const"):
            return []
        out = []
        for i in node.get("input", []):
            src = self.tf.nodes.get(i.lstrip("^").split(":")[0])
            if src is None:
                self.fail(node, f"its input {i} is no node of the graph")
            if not i.startswith("^") and src["op"] != "Const":
                out.append(i)
        return out

    # -- ops -----------------------------------------------------------------------
    def translate(self, node: dict) -> str:
        op, name = node["op"], "/" + node["name"]
        ins = [i for i in node.get("input", []) if not i.startswith("^")]
        if op == "Placeholder":
            return self.done[node["name"]]  # registered by to_onnx
        if op in ("_FusedConv2D", "Conv2D", "FusedDepthwiseConv2dNative", "DepthwiseConv2dNative"):
            return self.conv(node, ins, name)
        if op in ("Add", "AddV2", "Mul"):
            a, b = (self._operand(node, i) for i in ins)
            return self.g.op("Mul" if op == "Mul" else "Add", a, b, name=name)
        if op == "Relu":
            return self.g.op("Relu", self.tensor(ins[0]), name=name)
        if op == "Relu6":
            return self.relu6(self.tensor(ins[0]), name)
        if op in ("Sigmoid", "Identity"):
            return self.g.op(op, self.tensor(ins[0]), name=name)
        if op == "Mean":
            axes = sorted(int(a) % 4 for a in np.atleast_1d(self.const(ins[1])))
            if axes != [1, 2]:
                self.fail(node, f"a mean over NHWC axes {axes} (only over H, W)")
            if not self.tf.attr(node, "keep_dims", False):
                self.fail(node, "a mean that drops H and W (only keep_dims)")
            return self.g.op("ReduceMean", self.tensor(ins[0]), name=name, axes=[2, 3],
                             keepdims=1)  # fmt: skip
        if op == "ConcatV2":
            axis = int(self.const(ins[-1])) % 4
            if axis != 3:
                self.fail(node, f"a concatenation on NHWC axis {axis} (only on channels)")
            return self.g.op("Concat", *(self.tensor(i) for i in ins[:-1]), name=name, axis=1)
        if op == "ResizeBilinear":
            return self.resize(node, ins, name)
        self.fail(node, "an op this translator does not know")

    def _operand(self, node: dict, tf_name: str) -> str:
        base = tf_name.split(":")[0]
        if self.tf.nodes[base]["op"] != "Const":
            return self.tensor(tf_name)
        c = np.asarray(self.const(tf_name), np.float32)
        if c.ndim == 0 or c.size == 1:
            return self.g.const(c.reshape(()), name=base)
        if c.ndim in (1, 4) and c.shape[:-1] == (1,) * (c.ndim - 1):  # per channel
            return self.g.weight(base, c.reshape(-1, 1, 1))
        self.fail(node, f"a constant operand of shape {c.shape}")

    def relu6(self, x: str, name: str) -> str:
        lo, hi = self.g.const(0.0, name="zero"), self.g.const(6.0, name="six")
        return self.g.op("Clip", x, lo, hi, name=name)

    def conv(self, node: dict, ins: list[str], name: str) -> str:
        op = node["op"]
        if self.tf.attr(node, "data_format", "NHWC") != "NHWC":
            self.fail(node, "data_format other than NHWC")
        strides = self.tf.attr(node, "strides", [1, 1, 1, 1])
        dil = self.tf.attr(node, "dilations", [1, 1, 1, 1])
        if strides[0] != 1 or strides[3] != 1 or dil[0] != 1 or dil[3] != 1:
            self.fail(node, f"strides {strides} or dilations {dil} across batch or channels")
        w = np.asarray(self.const(ins[1]), np.float32)
        kh, kw = w.shape[:2]
        depthwise = "Depthwise" in op
        if depthwise:  # [kh, kw, in, mult] -> [in * mult, 1, kh, kw]
            group = w.shape[2]
            wt = w.transpose(2, 3, 0, 1).reshape(w.shape[2] * w.shape[3], 1, kh, kw)
        else:  # HWIO -> OIHW
            group = 1
            wt = w.transpose(3, 2, 0, 1)
        pad = self.tf.attr(node, "padding", "VALID")
        attrs = {"kernel_shape": [kh, kw], "strides": strides[1:3], "dilations": dil[1:3],
                 "group": group}  # fmt: skip
        if pad == "SAME" and dil[1:3] != [1, 1]:
            self.fail(node, f"SAME padding with dilations {dil}")
        if pad == "SAME":
            attrs["auto_pad"] = "SAME_UPPER"
        elif pad == "VALID":
            attrs["pads"] = [0, 0, 0, 0]
        else:
            self.fail(node, f"padding {pad}")
        args = [self.tensor(ins[0]), self.g.weight(ins[1] + "/oihw", wt)]
        fused = self.tf.attr(node, "fused_ops", []) if op.startswith(("_Fused", "Fused")) else []
        acts = list(fused)
        if acts[:1] == ["BiasAdd"]:
            if self.tf.attr(node, "num_args", 1) != 1:
                self.fail(node, "a BiasAdd with other than one argument")
            args.append(self.g.weight(ins[2], np.asarray(self.const(ins[2]), np.float32)))
            acts = acts[1:]
        y = self.g.op("Conv", *args, name=name + "/Conv", **attrs)
        for act in acts:
            if act == "Relu":
                y = self.g.op("Relu", y, name=name + "/Relu")
            elif act == "Relu6":
                y = self.relu6(y, name + "/Relu6")
            else:
                self.fail(node, f"a fused {fused} (only BiasAdd, Relu, Relu6)")
        return y

    def resize(self, node: dict, ins: list[str], name: str) -> str:
        size = np.asarray(self.const(ins[1]), np.int64).reshape(-1)
        if self.tf.attr(node, "align_corners", False):
            self.fail(node, "align_corners")
        half = self.tf.attr(node, "half_pixel_centers", False)
        x = self.tensor(ins[0])
        nc = self.g.op("Slice", self.g.op("Shape", x, name=name + "/Shape"),
                       self.g.const([0], "int64", "starts"), self.g.const([2], "int64", "ends"),
                       name=name + "/Slice")  # fmt: skip
        sizes = self.g.op("Concat", nc, self.g.const(size, "int64", "hw"), name=name + "/sizes",
                          axis=0)  # fmt: skip
        return self.g.op(
            "Resize",
            x,
            "",
            "",
            sizes,
            name=name,
            mode="linear",
            coordinate_transformation_mode="half_pixel" if half else "asymmetric",
        )


def to_onnx(graph: TfjsGraph, outputs: dict[str, str], name: str = "tfjs"):
    """The ONNX graph (:class:`vsekit.graphs.builder.Graph`) of ``graph``'s one input
    (NHWC, named ``images``) and ``outputs`` (ONNX name -> TF.js tensor), NCHW. Only the
    nodes the outputs depend on are translated. The graph's metadata records
    :data:`TRANSLATOR_VERSION` (``vsekit.tfjs_translator``)."""
    from vsekit.graphs.builder import Graph

    inputs = [n for n in graph.nodes.values() if n["op"] == "Placeholder"]
    if len(inputs) != 1:
        raise GraphWeightsError(f"TF.js graph: {len(inputs)} inputs (placeholders), not one")
    inp = inputs[0]
    shape = inp.get("attr", {}).get("shape", {}).get("shape", {}).get("dim")
    if not shape or len(shape) != 4:
        raise GraphWeightsError(f"TF.js node {inp['name']}: an input that is not NHWC 4-d")
    dims = [int(d.get("size", -1)) for d in shape]
    g = Graph(name)
    x = g.input("images", "float32", ["batch", *dims[1:]])
    t = _Translator(graph, g)
    t.done[inp["name"]] = g.op("Transpose", x, name="/to_nchw", perm=[0, 3, 1, 2])
    for out, tf_name in outputs.items():
        g.output(t.tensor(tf_name), out, "float32", ["batch", "c", "h", "w"])
    g.metadata["vsekit.tfjs_translator"] = str(TRANSLATOR_VERSION)
    return g
