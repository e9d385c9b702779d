"""A bundle's vocabulary expansion, and its ONNX encoders made again through the PyTorch
export with the settings its ``onnx.json`` records. The shipped default's encoders are
written without PyTorch, by :mod:`vsekit.graphs.default` (the wheel build and
``scripts/onnx_default``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from vsekit.lab.torch_model import VSEModel

DEFAULT_EXPANSION_TOP = 60_000


def expand_vocab(bundle: str | Path, top: int = DEFAULT_EXPANSION_TOP, ridge: float = 1e-2,
                 if_missing: bool = False) -> str:  # fmt: skip
    """Give the words GloVe has and the captions never used vectors in each member's word
    space (a ridge map fitted on the training words; Kiros et al. 2014). A bundle with ONNX
    files gets them made again with its recorded settings (the text graph holds the word
    table), int8 calibration included. Returns a one-line summary."""
    from vsekit.bundle import write_expansion
    from vsekit.lab.models.factory import word_encoders
    from vsekit.lab.text.glove import load_glove
    from vsekit.text.expansion import expand_vocabulary

    model = VSEModel.load(bundle, device="cpu")
    if model.expansion is not None:
        if if_missing:
            return f"{model.path}: already expanded ({len(model.expansion[0]):,} words)"
        raise ValueError(f"{model.path}: the vocabulary is already expanded")
    encs = word_encoders(model.model)
    if not encs:
        raise ValueError(f"{model.path}: no word-level text encoder to expand")
    index, vectors = load_glove()
    fits = {p: expand_vocabulary(e.vocab, e.embed.weight.detach().cpu().numpy(), index, vectors,
                                 top, ridge) for p, e in encs}  # fmt: skip
    exp = fits[encs[0][0]]  # the words depend only on the (shared) vocabulary and GloVe
    if len(encs) > 1:  # an ensemble: one map per member's learned word space
        exp.vectors = {p: f.vectors for p, f in fits.items()}
        exp.info = dict(exp.info, members={p: f.info for p, f in fits.items()})
    onnx_meta = model.path / "onnx.json"
    prev = json.loads(onnx_meta.read_text()) if onnx_meta.is_file() else None
    calibration = _calibration_of(model.path, prev) if prev is not None else None  # first
    write_expansion(model.path, exp.words, exp.vectors, exp.info)
    note = ""
    if prev is not None:
        note = "; ONNX files re-made with their recorded settings"
        remake_encoders(model.path, prev, calibration)
    return (
        f"{model.path}: {len(exp.words):,} words added (map fitted on "
        f"{exp.info['fitted_on']:,} training words, held-out R^2 "
        f"{exp.info['r2_held_out']:.3f}){note}"
    )


def _calibration_of(bundle: Path, prev: dict) -> list | None:
    """The calibration photos ``prev`` (an onnx.json) records, found again; ValueError
    naming what to do when they cannot be (checked before anything is written)."""
    from vsekit.graphs.default import CALIBRATION_SOURCE
    from vsekit.lab.train.calibration import SAMPLES, calibration_images
    from vsekit.runtime.parity import sample_views

    int8 = prev.get("int8") or {}
    calibration = None
    if int8:
        source = int8.get("calibration_source")
        if not source:
            raise ValueError(
                f"{bundle}/onnx.json: its int8 graph records no calibration source; run "
                "`vse model onnx` again with --int8 --calibrate"
            )
        if source == CALIBRATION_SOURCE:  # the shipped photos' views (vsekit.graphs)
            return sample_views(n=int(int8["calibration_images"]))
        if source != SAMPLES:  # a dataset, recorded by name: find it again
            data = os.environ.get("VSEKIT_CALIBRATION_DATA", "")
            if Path(data).name != source:
                raise ValueError(
                    f"{bundle}/onnx.json: its int8 graph was calibrated on {source}; set "
                    "VSEKIT_CALIBRATION_DATA to that dataset's folder to make it again"
                )
            source = data
        calibration = calibration_images(source, int(int8["calibration_images"]))
    return calibration


def _image_weights(meta: dict) -> str:
    """The int8 image graph's weight form in an ``onnx.json`` (one form, or one a side)."""
    forms = meta.get("int8_weights", "8bit")
    return forms.get("image", "8bit") if isinstance(forms, dict) else forms


def remake_encoders(bundle: Path, prev: dict, calibration: list | None = None) -> dict:
    """Export ``bundle`` again as its previous ``onnx.json`` (``prev``) describes it
    (``calibration``: its photos, when already found)."""
    from vsekit.bundle import text_files
    from vsekit.lab.train.onnx_export import export_onnx

    int8 = prev.get("int8") or {}
    if int8 and calibration is None:
        calibration = _calibration_of(bundle, prev)
    only = prev.get("default_precision") == "int8" and "image.onnx" not in prev["sha256"]
    return export_onnx(
        VSEModel.load(bundle, device="cpu"), bundle, storage=prev.get("storage", "fp16"),
        calibration=calibration, calibration_method=int8.get("calibration_method", "minmax"),
        int8_default=prev.get("default_precision") == "int8", int8_only=only,
        text_int8="int8" in text_files(prev), keep_float=int8.get("keep_float", "none"),
        calibration_source=int8.get("calibration_source"),
        reduce_range=_image_weights(prev) == "7bit",
    )  # fmt: skip
