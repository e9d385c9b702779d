"""A small ONNX graph builder: named nodes, NumPy initializers, and the float16 storage of
large weights. The only module of :mod:`vsekit.graphs` that imports ``onnx``.

Node names follow what ``torch.onnx.export`` writes for the same modules
(``/pretrained.0/encoder/layer.0/output/dense/MatMul``, ``/layer1.0/conv1/Conv``): the
quantisers of :mod:`vsekit.lab.train.onnx_export` pick nodes by these names, so they
treat a graph from here as they treat the traced one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vsekit.fsio import atomic_write

#: the opset of the PyTorch export (``onnx_export.ONNX_OPSET``)
ONNX_OPSET = 17
#: IR version 8: what ``torch.onnx.export`` writes at opset 17, which every ONNX Runtime
#: that runs opset 17 reads (``onnx.helper`` would stamp its own, newer one)
IR_VERSION = 8
#: float32 weights of at least this many elements are stored as float16 + Cast
#: (``onnx_export._fp16_storage``)
FP16_MIN_ELEMENTS = 4096

DTYPES = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "uint8": TensorProto.UINT8}
Dim = int | str


class Graph:
    """An ONNX graph under construction.

    ``fp16_storage``: float32 weights of at least :data:`FP16_MIN_ELEMENTS` elements are
    stored as float16 initializers (``<name>__fp16``) with a Cast to float32 in front of
    the graph, as the PyTorch export's ``storage="fp16"`` does: half the file, float32
    arithmetic (ONNX Runtime folds the casts once, when a session starts)."""

    def __init__(self, name: str, fp16_storage: bool = True) -> None:
        self.name = name
        self.fp16_storage = fp16_storage
        self._casts: list[onnx.NodeProto] = []
        self._nodes: list[onnx.NodeProto] = []
        # the model the weights go straight into: protobuf copies a message it is given,
        # so a list of initializers handed over at the end would hold every weight twice
        self._model = onnx.ModelProto()
        self._inits = self._model.graph.initializer
        self._inputs: list[onnx.ValueInfoProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []
        self._names: set[str] = set()  # every tensor and node name given so far
        #: the model's metadata (``metadata_props``), written when the model is built
        self.metadata: dict[str, str] = {}

    def _fresh(self, name: str) -> str:
        """``name``, or ``name_1``, ``name_2``... when taken (as the tracer numbers them)."""
        out, k = name, 0
        while out in self._names:
            k += 1
            out = f"{name}_{k}"
        self._names.add(out)
        return out

    # -- graph inputs and outputs --------------------------------------------------
    def input(self, name: str, dtype: str, shape: Sequence[Dim]) -> str:
        """A graph input of ``dtype`` (``float32 | int64 | uint8``); a str dim is dynamic."""
        self._names.add(name)
        self._inputs.append(helper.make_tensor_value_info(name, DTYPES[dtype], list(shape)))
        return name

    def output(self, tensor: str, name: str, dtype: str, shape: Sequence[Dim]) -> str:
        """Expose ``tensor`` as the graph output ``name`` (an Identity renames it)."""
        if tensor != name:
            self._names.add(name)
            self._nodes.append(helper.make_node("Identity", [tensor], [name], name=f"/{name}"))
        self._outputs.append(helper.make_tensor_value_info(name, DTYPES[dtype], list(shape)))
        return name

    # -- constants -----------------------------------------------------------------
    def weight(self, name: str, array: np.ndarray) -> str:
        """An initializer named ``name`` holding ``array`` (float arrays as float32; large
        ones stored float16 under ``fp16_storage``); returns the float32 tensor's name."""
        a = np.asarray(array)
        if a.dtype.kind == "f":
            a = a.astype(np.float32, copy=False)
        name = self._fresh(name)
        if self.fp16_storage and a.dtype == np.float32 and a.size >= FP16_MIN_ELEMENTS:
            half = self._fresh(name + "__fp16")
            self._inits.append(numpy_helper.from_array(a.astype(np.float16), half))
            self._casts.append(
                helper.make_node("Cast", [half], [name], name=f"{name}/Cast", to=TensorProto.FLOAT)
            )
        else:
            self._inits.append(numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def const(self, value: float | int | Sequence | np.ndarray, dtype: str = "float32",
              name: str = "const") -> str:  # fmt: skip
        """A small constant (a scalar or a shape) as an initializer."""
        return self.weight(name, np.asarray(value, dtype=dtype))

    def filled(self, shape: str, value: float | int, dtype: str, name: str) -> str:
        """A tensor of the runtime shape ``shape`` (a 1-d int64 tensor) filled with
        ``value`` (ConstantOfShape)."""
        fill = numpy_helper.from_array(np.asarray([value], dtype=dtype), "value")
        return self.op("ConstantOfShape", shape, name=name, value=fill)

    # -- nodes ---------------------------------------------------------------------
    def op(self, op_type: str, *inputs: str, name: str, **attrs) -> str:
        """Add one node ``name`` (a path such as ``/layer1.0/conv1/Conv``); returns its
        output, named ``<name>_output_0``. ``""`` is an omitted optional input."""
        return self.op_multi(op_type, *inputs, name=name, outputs=1, **attrs)[0]

    def op_multi(self, op_type: str, *inputs: str, name: str, outputs: int, **attrs) -> list[str]:
        """As :meth:`op`, for a node with ``outputs`` outputs; returns their names."""
        node = self._fresh(name)
        outs = [self._fresh(f"{node}_output_{k}") for k in range(outputs)]
        self._nodes.append(helper.make_node(op_type, list(inputs), outs, name=node, **attrs))
        return outs

    # -- result --------------------------------------------------------------------
    def model(self) -> onnx.ModelProto:
        """The finished model (the graph's own message: build it once, at the end)."""
        m = self._model
        if not m.graph.name:
            m.ir_version = IR_VERSION
            m.producer_name = "vsekit.graphs"
            m.opset_import.append(helper.make_opsetid("", ONNX_OPSET))
            m.graph.name = self.name
            m.graph.node.extend(self._casts + self._nodes)
            m.graph.input.extend(self._inputs)
            m.graph.output.extend(self._outputs)
            for key, value in self.metadata.items():
                m.metadata_props.add(key=key, value=value)
        return m

    def save(self, path: str | Path, check: bool = True) -> int:
        """Write the model to ``path`` atomically (the written file checked by
        ``onnx.checker`` first when ``check``); returns its size in bytes."""
        model = self.model()
        size = 0

        def write(tmp: Path) -> None:
            nonlocal size
            data = model.SerializeToString()
            size = len(data)
            tmp.write_bytes(data)
            del data
            if check:
                onnx.checker.check_model(str(tmp))

        atomic_write(Path(path), write)
        return size
