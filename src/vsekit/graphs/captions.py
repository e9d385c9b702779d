"""The default bundle's caption pool in its compact form (:mod:`vsekit.runtime.compact`),
written from the exact float32 embeddings when the default's weights or captions change
(``scripts/caption_embeddings``); the files are then tracked in git, sha256-recorded in
the bundle's manifest."""

from __future__ import annotations

from pathlib import Path

from vsekit.runtime.compact import write_compact


def build_default(bundle: Path | None = None) -> dict:
    """Write the default bundle's compact pool from its exact float32 embeddings: the
    caption pool through the fp32 text graph (ONNX Runtime; read from the verified
    cache when an earlier run computed it), and each caption's CSLS penalty from them.
    What ``scripts/caption_embeddings`` runs."""
    from vsekit.bundle import default_model_dir
    from vsekit.runtime.captions import CaptionPool
    from vsekit.runtime.onnx_model import OnnxModel

    bundle = bundle or default_model_dir()
    model = OnnxModel.load(bundle, precision="fp32")
    captions = list(dict.fromkeys(model.captions))
    emb = CaptionPool(model, captions, cache=True).embeddings
    hub = model.hubness
    penalty = None if hub is None else hub.text_penalty(emb)
    info = {"made_from": "the fp32 text graph (ONNX Runtime) over captions.txt, "
            "de-duplicated; penalties from the float32 embeddings",
            "chosen_by": "benchmarks/caption_compact.py"}  # fmt: skip
    return write_compact(bundle, captions, emb, model.weights_fingerprint, penalty,
                         None if hub is None else hub.text_key, info)  # fmt: skip
