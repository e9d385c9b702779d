"""A model bundle's encoders as ONNX graphs, for :class:`vsekit.runtime.OnnxModel`.

``export_onnx(model, bundle_dir)`` writes beside the bundle's files:

* ``image.onnx``: ``views [N, C, 3, S, S] uint8`` (C crops per image, from
  :func:`vsekit.media.views.crop_views_array`) -> ``embedding [N, D]`` and ``features [N, F]``
  (the model's feature kind, for the tagger): the backbone with its preprocessing, the
  pooling of the layers its feature kind reads (pool5 alone for ``baseline``), the
  average over crops, the feature kind (baseline / FNE standardise-and-ternarise) and
  the projection into the joint space;
* ``text.onnx``: ``ids [B, T] int64`` (0-padded) and ``lengths [B] int64`` ->
  ``embedding [B, D]``: the word embeddings and the recurrent encoder, whose final state
  is read at each sequence's last token (exact for unidirectional GRU/LSTM stacks);
* ``onnx.json``: the sha256 of both files, checked when they are loaded.

Large weights are stored as float16 with a Cast to float32 (``storage="fp16"``), which
ONNX Runtime folds once when the session starts: the files are half the size and the
arithmetic stays float32.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vsekit.bundle import IMAGE_FILES, TEXT_FILES, TOKENIZER_FILE
from vsekit.fsio import atomic_write
from vsekit.graphs.quantize import (
    KEEP_FLOAT,  # noqa: F401  (the CLI's choices)
    fp16_storage,
    quantize_image_int8,
    quantize_pretrained_int8,
)
from vsekit.lab.models.factory import EnsembleEmbedding
from vsekit.lab.torch_model import VSEModel

ONNX_OPSET = 17


class _ImageGraph(nn.Module):
    def __init__(self, vse: VSEModel) -> None:
        super().__init__()
        spec = vse.info["image"]
        self.net = vse.backbone().float().to("cpu", memory_format=torch.contiguous_format)
        self.model = vse.model.to("cpu")
        self.kind = spec["features"]
        self.baseline_layer = spec["baseline_layer"]
        self.size = self.net.input_size
        if self.kind == "fne":
            st = vse.fne_stats
            safe = np.where(st.std > 0, st.std, np.inf)
            self.register_buffer("mean", torch.tensor(st.mean, dtype=torch.float32))
            self.register_buffer("inv_std", torch.tensor(1.0 / safe, dtype=torch.float32))
            self.f_minus, self.f_plus = spec["fne"]["f_minus"], spec["fne"]["f_plus"]

    def forward(self, views: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, c = views.shape[0], views.shape[1]
        x = views.reshape(n * c, 3, self.size, self.size)
        if self.kind in ("baseline", "baseline_raw"):  # one layer: pool only that one
            pooled = self.net.forward_layer_pooled(x, self.baseline_layer)
        else:
            pooled, _ = self.net.forward_pooled(x)  # [N*C, F_all]
        pooled = pooled.reshape(n, c, pooled.shape[1]).mean(dim=1)
        if self.kind in ("pooled", "baseline_raw"):
            feats = pooled
        elif self.kind == "baseline":
            feats = nn.functional.normalize(pooled, dim=1)
        else:  # fne
            z = (pooled - self.mean) * self.inv_std
            feats = (z > self.f_plus).float() - (z < self.f_minus).float()
        return self.model.encode_images(feats), feats


#: the text graph's inputs for each kind of text encoder
WORD_INPUTS, PIECE_INPUTS = ("ids", "lengths"), ("input_ids", "attention_mask")


class _TextGraph(nn.Module):
    """The model's text side: one encoder, or an ensemble's members scaled and
    concatenated (:class:`~vsekit.lab.models.factory.EnsembleEmbedding`). Word-level
    encoders read ``ids``/``lengths``, word-piece ones ``input_ids``/``attention_mask``;
    the graph takes the inputs its encoders need (``self.inputs``)."""

    def __init__(self, vse: VSEModel) -> None:
        super().__init__()
        model = vse.model
        members = list(model.members) if isinstance(model, EnsembleEmbedding) else [model]
        self.scales = list(getattr(model, "scales", [1.0]))
        encs = []
        for m in members:
            enc = getattr(m, "text", None)
            if type(m).__name__ != "JointEmbedding" or not (
                hasattr(enc, "rnn") or hasattr(enc, "tokenizer")
            ):
                raise ValueError(
                    "ONNX export covers joint models (and their ensembles) with a gru, lstm "
                    "or minilm text encoder"
                )
            if hasattr(enc, "rnn") and enc.cfg.bidirectional:
                raise ValueError("ONNX export: a bidirectional text encoder is not supported")
            encs.append(enc.to("cpu"))
        self.encs = nn.ModuleList(encs)
        # a frozen pretrained transformer lives outside its encoder's module tree (it is
        # not trained or saved); registered here, its weights become initializers
        # (once: frozen towers share one, whose sentence vector the graph computes once)
        berts = {id(e.transformer): e.transformer for e in encs if hasattr(e, "transformer")}
        self.pretrained = nn.ModuleList(berts.values())
        words = any(hasattr(e, "rnn") for e in encs)
        pieces = any(hasattr(e, "tokenizer") for e in encs)
        self.inputs = [*(WORD_INPUTS if words else ()), *(PIECE_INPUTS if pieces else ())]

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        x = dict(zip(self.inputs, args, strict=True))
        outs, pooled = [], {}
        for scale, enc in zip(self.scales, self.encs, strict=True):
            if hasattr(enc, "rnn"):
                out, _ = enc.rnn(enc.embed(x["ids"]))  # [B, T, D]
                last = (x["lengths"] - 1).clamp(min=0).view(-1, 1, 1)
                last = last.expand(-1, 1, out.shape[2])
                emb = nn.functional.normalize(out.gather(1, last).squeeze(1), dim=1)
            else:
                key = id(enc.transformer)
                if key not in pooled:
                    pooled[key] = enc.encode_tokens(x["input_ids"], x["attention_mask"])
                emb = enc(pooled=pooled[key])
            outs.append(scale * emb if scale != 1.0 else emb)
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)

    def example(self) -> tuple[tuple[torch.Tensor, ...], dict]:
        """Example inputs for tracing, and their dynamic axes."""
        ids = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]], dtype=torch.long)
        feeds = {"ids": ids, "lengths": torch.tensor([3, 2], dtype=torch.long),
                 "input_ids": torch.tensor([[101, 1037, 3899, 102], [101, 2048, 102, 0]]),
                 "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])}  # fmt: skip
        axes = {"ids": {0: "b", 1: "t"}, "lengths": {0: "b"}, "input_ids": {0: "b", 1: "p"},
                "attention_mask": {0: "b", 1: "p"}, "embedding": {0: "b"}}  # fmt: skip
        return tuple(feeds[k] for k in self.inputs), {
            k: v for k, v in axes.items() if k in self.inputs or k == "embedding"
        }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@torch.no_grad()
def export_onnx(
    vse: VSEModel,
    out: str | Path,
    storage: str = "fp16",
    calibration: list | None = None,
    calibration_method: str = "minmax",
    keep_float: str = "none",
    moving_average: bool = False,
    preprocess: bool = False,
    int8_default: bool = False,
    text_int8: bool = False,
    int8_only: bool = False,
    calibration_source: str | None = None,
    reduce_range: bool = False,
) -> dict:
    """Write ``image.onnx``, ``text.onnx`` and ``onnx.json`` into the bundle ``out``.
    ``storage``: ``fp16`` (weights stored half, computed in float32) or ``fp32``.
    With ``calibration`` (training image paths, never the evaluation split), also
    ``image.int8.onnx``: the image graph quantised statically
    (:func:`quantize_image_int8`), which ``precision="int8"`` runs, and the bundle's
    default when ``int8_default``. ``int8_only``: that graph alone, as the default, and no
    ``image.onnx`` (a stale one is removed): the bundle's image side at half the size,
    for a wheel; fp32 image embeddings then need the torch backend or a re-export.
    ``text_int8``: also ``text.int8.onnx``, the text graph with its pretrained
    transformer quantised dynamically (:func:`quantize_pretrained_int8`); ``text.onnx``
    stays the float one. ``calibration_source``: what
    the calibration images are (a dataset's name, or ``samples``), recorded in onnx.json.
    ``reduce_range``: 7-bit int8 weights in both int8 graphs, which no CPU's int8 kernels
    saturate (:func:`quantize_image_int8`); recorded in onnx.json as ``int8_weights``,
    which :mod:`vsekit.runtime.precision` reads."""
    if storage not in ("fp16", "fp32"):
        raise ValueError(f"storage: use fp16 | fp32, not {storage!r}")
    if (int8_default or int8_only) and not calibration:
        raise ValueError("an int8 default needs calibration images (training images)")
    int8_default = int8_default or int8_only
    out = Path(out)
    vse.model.eval()
    image, text = _ImageGraph(vse).eval(), _TextGraph(vse).eval()
    crops, size = int(vse.info["image"]["crops"]), image.size
    views = torch.randint(0, 255, (2, crops, 3, size, size), dtype=torch.uint8)
    text_args, text_axes = text.example()
    files: dict[str, str] = {}
    kept: list[str] = []
    image_spec = (
        "image",
        image,
        (views,),
        ["views"],
        ["embedding", "features"],
        {"views": {0: "n"}, "embedding": {0: "n"}, "features": {0: "n"}},
    )
    text_spec = ("text", text, text_args, text.inputs, ["embedding"], text_axes)
    # the word-piece transformer's kind (its text int8 float nodes differ)
    pretrained = next((e.kind for e in text.encs if hasattr(e, "tokenizer")), "minilm")
    graphs = [
        *([] if int8_only else [(IMAGE_FILES["fp32"], image_spec, storage)]),
        (TEXT_FILES["fp32"], text_spec, storage),
        *([(TEXT_FILES["int8"], text_spec, "text-int8")] if text_int8 else []),
    ]  # fmt: skip
    if calibration:
        graphs.append((IMAGE_FILES["int8"], image_spec, "int8"))
    for fname, spec, how in graphs:
        path = out / fname

        def write(tmp: Path, spec=spec, how=how, pretrained=pretrained) -> None:
            _, module, args, inputs, outputs, axes = spec
            with warnings.catch_warnings():  # tracer notes; parity is tested instead
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    module, args, str(tmp), input_names=inputs, output_names=outputs,
                    dynamic_axes=axes, opset_version=ONNX_OPSET, dynamo=False,
                )  # fmt: skip
            if how == "fp16":
                fp16_storage(tmp)
            elif how == "text-int8":
                quantize_pretrained_int8(tmp, reduce_range=reduce_range, kind=pretrained)
                fp16_storage(tmp)  # the rest (word tables, recurrent layers, projections)
            elif how == "int8":
                fp32 = tmp.with_name(tmp.name + ".fp32.onnx")
                tmp.rename(fp32)
                try:
                    kept[:] = quantize_image_int8(
                        fp32, tmp, calibration, crops, size, method=calibration_method,
                        keep_float=keep_float, moving_average=moving_average,
                        preprocess=preprocess, reduce_range=reduce_range,
                    )  # fmt: skip
                finally:
                    fp32.unlink(missing_ok=True)

        atomic_write(path, write)
        files[fname] = _sha256(path)
    if set(PIECE_INPUTS) <= set(text.inputs):  # the word-piece vocabulary the graph reads
        files[TOKENIZER_FILE] = _sha256(out / TOKENIZER_FILE)
    meta = {"opset": ONNX_OPSET, "storage": storage, "sha256": files,
            "embed_dim": vse.embed_dim, "model_fingerprint": vse.fingerprint,
            "default_precision": "int8" if int8_default else "fp32",
            "text_inputs": text.inputs,
            "text_storage": storage,
            "int8_weights": "7bit" if reduce_range else "8bit",
            "text_vocab": len(words.vocab) if (words := vse._word_encoder()) else None}  # fmt: skip
    if calibration:
        meta["int8"] = {"calibration_images": len(calibration),
                        "calibration_source": calibration_source,
                        "calibration_method": calibration_method, "keep_float": keep_float,
                        "float_nodes": kept,
                        "moving_average": moving_average, "preprocess": preprocess}  # fmt: skip
    atomic_write(out / "onnx.json", json.dumps(meta, indent=2) + "\n")
    # then drop what onnx.json no longer lists: graphs of the old weights or layout
    for stale in (*IMAGE_FILES.values(), *TEXT_FILES.values()):
        if stale not in files:
            (out / stale).unlink(missing_ok=True)
    return meta
