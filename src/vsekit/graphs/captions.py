"""A bundle's caption pool in its compact form (:mod:`vsekit.runtime.compact`), written
from the exact float32 embeddings, so that a first ``vse annotate`` embeds no caption:
for the default bundle when its weights or captions change
(``scripts/caption_embeddings``; the files are then tracked in git, sha256-recorded in
the bundle's manifest), and by ``vse model build`` for every bundle it builds."""

from __future__ import annotations

from pathlib import Path

from vsekit.runtime.compact import write_compact


def write_pool(model, bundle: Path, made_from: str, cache: bool = False) -> dict | None:
    """Write ``bundle``'s compact pool from ``model`` (loaded from ``bundle``): its
    de-duplicated captions through its own text encoder, and each caption's CSLS
    penalty when it has a hubness bank. None (nothing written) for a bundle without
    captions or with a similarity other than cosine (compact pools are unit rows).
    ``cache``: keep the float32 embeddings in ``~/.cache/vsekit/captions`` too (the
    default bundle's, which a later run may read; a built bundle's would only fill the
    user's disk)."""
    from vsekit.runtime.captions import CaptionPool

    if not model.captions or model.similarity_name != "cosine":
        return None
    captions = list(dict.fromkeys(model.captions))
    emb = CaptionPool(model, captions, cache=cache).embeddings
    hub = model.hubness
    penalty = None if hub is None else hub.text_penalty(emb)
    info = {"made_from": f"{made_from} over captions.txt, de-duplicated; penalties from "
            "the float32 embeddings", "chosen_by": "benchmarks/caption_compact.py"}  # fmt: skip
    return write_compact(bundle, captions, emb, model.weights_fingerprint, penalty,
                         None if hub is None else hub.text_key, info)  # fmt: skip


def build_default(bundle: Path | None = None) -> dict:
    """Write the default bundle's compact pool through the fp32 text graph (ONNX
    Runtime; read from the verified cache when an earlier run computed it). What
    ``scripts/caption_embeddings`` runs."""
    from vsekit.bundle import default_model_dir
    from vsekit.runtime.onnx_model import OnnxModel

    bundle = bundle or default_model_dir()
    model = OnnxModel.load(bundle, precision="fp32")
    out = write_pool(model, bundle, "the fp32 text graph (ONNX Runtime)", cache=True)
    assert out is not None, "the default bundle has a cosine caption pool"
    return out
