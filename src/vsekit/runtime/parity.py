"""int8 against fp32 on this CPU: the parity check of ``vse doctor`` and the test suite.

The same bundle is loaded twice, with its int8 graphs and with its fp32 graphs, and both
embed the same inputs; the cosine between each pair of embeddings says how much int8
changes them on the CPU that runs the check. The thresholds (:data:`MEDIAN_MIN`,
:data:`WORST_MIN`) are what the int8 graphs must meet to be used anywhere.

Inputs: photos (by default the twelve that ship in ``vsekit/assets/photos``, each seen
four ways, to make 48) and sentences (by default 48 spread evenly over the bundle's
annotation pool: captions written by people, in the forms queries take).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from vsekit.similarity import unit

#: the photos that ship with vsekit (see their README for sources and licences)
SAMPLE_PHOTOS = Path(__file__).resolve().parents[1] / "assets" / "photos"
MEDIAN_MIN = 0.995  # median cosine, int8 to fp32, at least this
WORST_MIN = 0.98  # and every input's at least this
N_INPUTS = 48


@dataclass(frozen=True)
class Parity:
    """Cosine between int8 and fp32 embeddings of the same inputs, on this CPU."""

    side: str  # "image" | "text"
    n: int
    median: float
    worst: float

    @property
    def ok(self) -> bool:
        return self.median >= MEDIAN_MIN and self.worst >= WORST_MIN

    def line(self) -> str:
        verdict = "ok" if self.ok else f"FAILS (needs median >= {MEDIAN_MIN}, min >= {WORST_MIN})"
        return (f"{self.side} int8 vs fp32 over {self.n}: median {self.median:.4f}, "
                f"min {self.worst:.4f}: {verdict}")  # fmt: skip

    def as_dict(self) -> dict:
        return dict(asdict(self), ok=self.ok)


def sample_views(photos: Sequence[str | os.PathLike] | None = None, n: int = N_INPUTS) -> list:
    """``n`` PIL images from ``photos`` (default: the shipped samples), each photo seen
    as itself, mirrored, its centre and its top-left corner (70% of each side) in turn,
    until there are ``n``: what the graphs see differs in every view."""
    from PIL import Image, ImageOps

    from vsekit.media.images import load_image

    paths = sorted(SAMPLE_PHOTOS.glob("*.jpg")) if photos is None else list(photos)
    if not paths:
        raise ValueError("parity: no photos to check on")
    decoded = [load_image(p, 640) for p in paths]

    def view(im: Image.Image, k: int) -> Image.Image:
        w, h = im.size
        cw, ch = int(w * 0.7), int(h * 0.7)
        if k == 0:
            return im
        if k == 1:
            return ImageOps.mirror(im)
        if k == 2:
            return im.crop(((w - cw) // 2, (h - ch) // 2, (w + cw) // 2, (h + ch) // 2))
        return im.crop((0, 0, cw, ch))

    out = []
    for k in range(n):
        im, turn = decoded[k % len(decoded)], (k // len(decoded)) % 4
        out.append(view(im, turn))
    return out


def sample_sentences(captions: Sequence[str], n: int = N_INPUTS) -> list[str]:
    """``n`` captions spread evenly over ``captions`` (an annotation pool)."""
    if not captions:
        raise ValueError("parity: the model has no caption pool; pass sentences")
    step = max(1, len(captions) // n)
    return list(captions[::step][:n])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (unit(a) * unit(b)).sum(axis=1)


def int8_parity(
    bundle: str | os.PathLike = "default",
    photos: Sequence[str | os.PathLike] | None = None,
    sentences: Sequence[str] | None = None,
    n: int = N_INPUTS,
) -> dict[str, Parity]:
    """The parity of ``bundle``'s int8 graphs with its fp32 ones on this CPU, for each
    side that has both (``{"image": Parity, "text": Parity}``), over ``n`` photo views
    and ``n`` sentences; a side with one graph only is left out. ModelError when the
    bundle has no int8 graph at all."""
    from vsekit.bundle import IMAGE_FILES, ModelError, bundle_dir, read_onnx_meta, text_files
    from vsekit.runtime.onnx_model import OnnxModel

    path = bundle_dir(bundle)
    meta = read_onnx_meta(path)
    files = meta.get("sha256", {})
    has_image = all(f in files for f in IMAGE_FILES.values())
    has_text = set(text_files(meta)) == {"fp32", "int8"}
    if not (has_image or has_text):
        raise ModelError(f"{path}: no pair of int8 and fp32 graphs to compare")
    fp32 = OnnxModel.load(path, precision="fp32")
    int8 = OnnxModel.load(path, precision="int8")
    out = {}
    if has_image:
        views = sample_views(photos, n)
        cos = _cosines(int8.encode_image(views), fp32.encode_image(views))
        out["image"] = Parity("image", len(cos), float(np.median(cos)), float(cos.min()))
    if has_text:
        texts = list(sentences) if sentences is not None else sample_sentences(fp32.captions, n)
        cos = _cosines(int8.encode_text(texts), fp32.encode_text(texts))
        out["text"] = Parity("text", len(cos), float(np.median(cos)), float(cos.min()))
    return out
