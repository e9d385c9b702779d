"""int8 quantisation and fp16 storage of ONNX graphs, with ONNX Runtime's own tools and
the ``onnx`` package: no PyTorch, so that a build from a clean clone and the lab's
exporter make the int8 graphs one way.

x86 CPUs without VNNI saturate 8-bit weights' products (:mod:`vsekit.runtime.precision`),
so the shipped 8-bit graphs run only on CPUs that add int8 products exactly; graphs made
with ``reduce_range`` (7-bit weights) saturate on no CPU, at some accuracy.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def fp16_storage(path: Path, min_elements: int = 4096) -> None:
    """Store float32 initializers of at least ``min_elements`` as float16 + Cast."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    m = onnx.load(str(path))
    g = m.graph
    casts, keep = [], []
    for init in g.initializer:
        if init.data_type == TensorProto.FLOAT and np.prod(init.dims) >= min_elements:
            arr = numpy_helper.to_array(init).astype(np.float16)
            half = numpy_helper.from_array(arr, init.name + "__fp16")
            keep.append(half)
            casts.append(helper.make_node("Cast", [half.name], [init.name], to=TensorProto.FLOAT))
        else:
            keep.append(init)
    del g.initializer[:]
    g.initializer.extend(keep)
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(casts + nodes)
    onnx.save(m, str(path))


def quantize_image_int8(
    fp32_model: Path,
    out: Path,
    calibration: list,
    crops: int,
    size: int,
    batch: int = 2,
    method: str = "minmax",
    keep_float: str = "none",
    moving_average: bool = False,
    preprocess: bool = False,
    reduce_range: bool = False,
    weights: str = "s8",
) -> list[str]:
    """Static int8 quantisation of the image graph with ONNX Runtime's own tools: QDQ,
    per-channel int8 weights, uint8 activations whose ranges are calibrated (``method``)
    on ``calibration`` images (paths or PIL images; never the evaluation split).

    ``keep_float``: nodes left in float, the usual remedy for quantisation's accuracy
    cost: ``stem`` (the first convolution, which sees raw pixels), ``head`` (the
    projection's matrix products), ``stem-head`` (both) or ``none``.
    ``moving_average``: MinMax ranges as a moving average over calibration batches
    instead of the extreme values. ``preprocess``: ONNX Runtime's ``quant_pre_process``
    first (shape inference, and graph optimisation that folds batch norms into the
    convolutions and fuses activations, so what is quantised is what runs).
    ``reduce_range``: 7-bit weights (-64..64), so that a pair of uint8 x int8 products
    fits in int16 (2 x 255 x 64 < 32768): x86 CPUs without VNNI add such pairs with
    saturation (``vpmaddubsw``), and 7-bit weights make that saturation impossible, so
    the graph computes the same on every CPU (see :mod:`vsekit.runtime.precision`).
    ``weights``: ``s8`` (int8 weights, the u8s8 kernels) or ``u8`` (uint8 weights with a
    zero point per channel: ONNX Runtime's u8u8 kernels, which widen before adding and
    saturate on no CPU, at 8 bits).
    Returns the names of the nodes kept in float."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    from vsekit.media.images import load_image
    from vsekit.media.views import crop_views_array, decode_size

    # equal batches: the histogram collectors stack a collection's outputs into one array
    batch = max(d for d in range(1, batch + 1) if len(calibration) % d == 0)

    class Reader(CalibrationDataReader):
        """One batch per collection (ONNX Runtime's ``CalibStridedMinMax`` stride of 1,
        which every calibrator honours): the collectors merge each batch's ranges or
        histograms and drop its activations, so memory holds one batch's, not all."""

        def __init__(self) -> None:
            self.starts = list(range(0, len(calibration), batch))
            self.pending = iter(self.starts)

        def __len__(self) -> int:
            return len(self.starts)

        def set_range(self, start_index: int, end_index: int) -> None:
            self.pending = iter(self.starts[start_index:end_index])

        def get_next(self):
            a = next(self.pending, None)
            if a is None:
                return None
            ims = [load_image(p, decode_size(size)) if isinstance(p, str | os.PathLike) else p
                   for p in calibration[a : a + batch]]  # fmt: skip
            return {"views": np.stack([crop_views_array(im, crops, size) for im in ims])}

    methods = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
               "entropy": CalibrationMethod.Entropy}  # fmt: skip
    if preprocess:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        pre = fp32_model.with_name(fp32_model.name + ".pre.onnx")
        quant_pre_process(str(fp32_model), str(pre))
        os.replace(pre, fp32_model)
    excluded = float_nodes(fp32_model, keep_float)
    quantize_static(
        str(fp32_model), str(out), Reader(), quant_format=QuantFormat.QDQ,
        per_channel=True, activation_type=QuantType.QUInt8,
        weight_type=QuantType.QUInt8 if weights == "u8" else QuantType.QInt8,
        calibrate_method=methods[method], nodes_to_exclude=excluded,
        reduce_range=reduce_range,
        extra_options={"CalibMovingAverage": moving_average, "CalibStridedMinMax": 1},
    )  # fmt: skip
    return excluded


#: text-graph nodes :func:`quantize_pretrained_int8` leaves float, by pretrained kind: the
#: feed-forward output products whose run-time int8 activations (the long-tailed GELU
#: outputs) cost the most. MiniLM: its first three layers', whose error every later layer
#: carries. MPNet: its upper six layers' (6-11), chosen on slice captions by the text
#: embeddings' cosine to fp32 among ten variants (``benchmarks/text_int8.py``, its rule
#: written after five had been seen: median 0.940 with MiniLM's choice, 0.993 with this
#: one; layers 6, 7, 8 or 11 alone, 0-5 and 9-11 stay under 0.97; sets of two to five
#: of layers 6-11 were not tried)
TEXT_INT8_KEEP_FLOAT = {
    "minilm": tuple(f"/encoder/layer.{k}/output/dense/" for k in range(3)),
    "mpnet": tuple(f"/encoder/layer.{k}/output/dense/" for k in range(6, 12)),
}


def quantize_pretrained_int8(path: Path, reduce_range: bool = False, weights: str = "s8",
                             kind: str = "minilm",
                             keep_float: tuple[str, ...] | None = None) -> None:  # fmt: skip
    """Dynamic int8 quantisation, in place, of the pretrained transformer in a text graph
    (ONNX Runtime's ``quantize_dynamic``): its matrix products and word-piece table get
    int8 weights, one scale per output channel; activations are quantised at run time.
    Other nodes (a GRU's word table, the projections, :data:`TEXT_INT8_KEEP_FLOAT` of the
    transformer's ``kind``, or the node-name parts ``keep_float`` gives) stay float.
    ``reduce_range`` and ``weights``: as in :func:`quantize_image_int8`.
    ValueError if the graph has no pretrained transformer."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    keep = TEXT_INT8_KEEP_FLOAT[kind] if keep_float is None else keep_float
    nodes = [n.name for n in onnx.load(str(path), load_external_data=False).graph.node
             if "/pretrained." in n.name and n.op_type in ("MatMul", "Gather")
             and not any(k in n.name for k in keep)]  # fmt: skip
    if not nodes:
        raise ValueError("text int8: the text graph has no pretrained transformer to quantise")
    out = path.with_name(path.name + ".int8.onnx")
    try:
        quantize_dynamic(
            str(path), str(out), per_channel=True,
            weight_type=QuantType.QUInt8 if weights == "u8" else QuantType.QInt8,
            reduce_range=reduce_range, nodes_to_quantize=nodes,
            op_types_to_quantize=["MatMul", "Gather"],
        )  # fmt: skip
        os.replace(out, path)
    finally:
        out.unlink(missing_ok=True)


KEEP_FLOAT = ("none", "stem", "head", "stem-head")


def float_nodes(model_path: Path, keep: str) -> list[str]:
    """Names of the nodes ``keep`` (see :func:`quantize_image_int8`) leaves in float."""
    if keep not in KEEP_FLOAT:
        raise ValueError(f"keep_float: use {' | '.join(KEEP_FLOAT)}, not {keep!r}")
    import onnx

    nodes = list(onnx.load(str(model_path), load_external_data=False).graph.node)
    out = []
    if "stem" in keep:
        out.append(next(n.name for n in nodes if n.op_type == "Conv"))
    if "head" in keep:
        out += [n.name for n in nodes if n.op_type in ("MatMul", "Gemm")]
    return out
