"""Hubness reduction for cross-modal retrieval: cross-domain similarity local scaling
(CSLS; Conneau et al. 2018, "Word translation without parallel data", Eq. 6).

In a high-dimensional joint space a few images ("hubs") are near almost every caption,
and crowd the top of many text queries; the same happens to generic captions. CSLS
penalises each item by how close it is to its own neighbourhood in the other modality,
measured on a fixed *bank* of training items::

    r_img(x) = mean of the k_text largest cos(x, c) over a caption bank C
    r_txt(t) = mean of the k_image largest cos(t, b) over an image bank B
    score(x, t) = cos(x, t) - beta * r_img(x) - beta * r_txt(t)

(``beta = 1`` is the paper's ``2 cos - r - r`` up to a factor 2.) For a fixed query only
the other side's penalty changes the ranking: a text query ranks images by
``cos - beta * r_img``, an image ranks captions by ``cos - beta * r_txt``. An image's
penalty needs only the caption bank, so it is computed once when the image is indexed.

Shapes: embeddings are unit rows ``[n, D]``; banks ``[m, D]``; penalties ``[n]``.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

#: bundle files: the settings, and the image bank (image embeddings stored as int8 with
#: one scale per row: a bank only feeds means of its top-k cosines)
HUBNESS_INFO = "hubness.json"
HUBNESS_BANK = "hubness.npz"

CHUNK = 1024  # query rows per matrix product: 1024 x 30k floats = 120 MB


def mean_topk(x: np.ndarray, bank: np.ndarray, k: int, chunk: int = CHUNK) -> np.ndarray:
    """``[n]``: for each row of ``x`` ``[n, D]``, the mean of its ``k`` largest dot
    products with the rows of ``bank`` ``[m, D]`` (``k`` is capped at ``m``)."""
    if k < 1:
        raise ValueError(f"k: must be at least 1, got {k}")
    return mean_topks(x, bank, (k,), chunk)[k]


def mean_topks(
    x: np.ndarray, bank: np.ndarray, ks: tuple[int, ...], chunk: int = CHUNK
) -> dict[int, np.ndarray]:
    """:func:`mean_topk` for several ``k`` from one pass over the products:
    ``{k: [n]}`` (a settings search over a large bank)."""
    x = np.asarray(x, np.float32)
    bank = np.asarray(bank, np.float32)
    if not ks or min(ks) < 1:
        raise ValueError(f"ks: every k must be at least 1, got {ks}")
    if x.ndim != 2 or bank.ndim != 2 or x.shape[1] != bank.shape[1]:
        raise ValueError(f"mean_topk: shapes {x.shape} and {bank.shape} do not match")
    top = min(max(ks), len(bank))
    out = {k: np.empty(len(x), np.float32) for k in ks}
    for a in range(0, len(x), chunk):
        s = x[a : a + chunk] @ bank.T
        best = -np.sort(-np.partition(s, len(bank) - top, axis=1)[:, len(bank) - top :], axis=1)
        cum = np.cumsum(best, axis=1)
        for k in ks:
            kk = min(k, len(bank))
            out[k][a : a + chunk] = cum[:, kk - 1] / kk
    return out


@dataclass(frozen=True)
class HubnessConfig:
    """``beta``: the penalty weight; ``k_text`` / ``k_image``: neighbours averaged in the
    caption / image bank; ``caption_stride``: the caption bank is every ``stride``-th
    caption of the model's caption pool (its training captions)."""

    beta: float = 0.5
    k_text: int = 10
    k_image: int = 10
    caption_stride: int = 6

    def __post_init__(self) -> None:
        if not 0 <= self.beta <= 2:
            raise ValueError(f"hubness beta: must be in [0, 2], got {self.beta}")
        for name in ("k_text", "k_image", "caption_stride"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"hubness {name}: must be at least 1")


class Hubness:
    """CSLS penalties of one model: ``image_penalty(img_emb)`` and
    ``text_penalty(txt_emb)`` (both ``beta * r``, to subtract from cosines).

    ``image_bank``: ``[m, D]`` embeddings of training images (shipped in the bundle);
    ``caption_bank``: ``[c, D]`` embeddings of training captions, or a function that
    computes them when first needed (from the model's caption pool, see
    :attr:`BaseModel.hubness`: a search whose photos' penalties are all stored never
    needs them); ``caption_key`` / ``image_bank_key``: strings that identify the banks
    (the image bank's is its content hash unless given, e.g. the bundle's sha256).
    """

    def __init__(
        self,
        config: HubnessConfig,
        image_bank: np.ndarray,
        caption_bank: np.ndarray | Callable[[], np.ndarray],
        caption_key: str = "",
        image_bank_key: str | None = None,
    ) -> None:
        self.config = config
        self.image_bank = np.asarray(image_bank, np.float32)
        self._captions = caption_bank
        h = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode())
        if image_bank_key is None:
            h.update(np.ascontiguousarray(image_bank, np.float16).tobytes())
        else:
            h.update(image_bank_key.encode())
        #: changes with the settings and the image bank: what a text penalty depends on
        self.text_key = h.copy().hexdigest()[:12]
        h.update(caption_key.encode())
        #: changes with the settings and banks: names cached penalties (an index's)
        self.key = h.hexdigest()[:12]

    @property
    def caption_bank(self) -> np.ndarray:
        if callable(self._captions):
            self._captions = self._captions()
        return self._captions

    def image_penalty(self, img_emb: np.ndarray) -> np.ndarray:
        """``[n]``: ``beta * r_img`` of each image embedding (unit rows)."""
        c = self.config
        return c.beta * mean_topk(np.atleast_2d(img_emb), self.caption_bank, c.k_text)

    def text_penalty(self, txt_emb: np.ndarray) -> np.ndarray:
        """``[n]``: ``beta * r_txt`` of each text embedding (unit rows)."""
        c = self.config
        return c.beta * mean_topk(np.atleast_2d(txt_emb), self.image_bank, c.k_image)

    def scores(self, img_emb: np.ndarray, txt_emb: np.ndarray) -> np.ndarray:
        """``[n_images, n_texts]`` CSLS scores of unit embeddings."""
        img, txt = np.atleast_2d(img_emb), np.atleast_2d(txt_emb)
        s = img @ txt.T
        return s - self.image_penalty(img)[:, None] - self.text_penalty(txt)[None, :]


def caption_bank_texts(pool: list[str], stride: int) -> list[str]:
    """The caption bank: every ``stride``-th caption of the (de-duplicated) pool."""
    return list(dict.fromkeys(pool))[::stride]


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(int8 [m, D], float32 scale [m])`` with ``x ~= q * scale[:, None]``."""
    x = np.asarray(x, np.float32)
    scale = np.maximum(np.abs(x).max(1), 1e-12) / 127.0
    return np.round(x / scale[:, None]).astype(np.int8), scale.astype(np.float32)


def write_hubness(bundle: Path, config: HubnessConfig, image_bank: np.ndarray, info: dict) -> None:
    """Write ``hubness.npz`` (the image bank, int8 rows and their scales) and
    ``hubness.json`` (the settings, the bank's sha256 and the provenance ``info``)."""
    from vsekit.bundle import write_manifest
    from vsekit.fsio import atomic_write

    q, scale = quantize_rows(image_bank)
    buf = io.BytesIO()
    np.savez(buf, bank=q, scale=scale)
    data = buf.getvalue()
    atomic_write(bundle / HUBNESS_BANK, data)
    meta = {**asdict(config), "image_bank": len(image_bank),
            "sha256": hashlib.sha256(data).hexdigest(), **info}  # fmt: skip
    atomic_write(bundle / HUBNESS_INFO, json.dumps(meta, indent=2) + "\n")
    write_manifest(bundle)


def read_hubness(bundle: Path) -> tuple[HubnessConfig, np.ndarray, str] | None:
    """The bundle's hubness settings, image bank and that bank's sha256 (verified), or
    None if it has none; ValueError naming the file if they are malformed."""
    path = bundle / HUBNESS_INFO
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
        cfg = HubnessConfig(**{k: meta[k] for k in ("beta", "k_text", "k_image",
                                                     "caption_stride")})  # fmt: skip
        data = (bundle / HUBNESS_BANK).read_bytes()
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise ValueError(f"{HUBNESS_BANK} does not match its sha256")
        with np.load(io.BytesIO(data)) as z:
            bank = z["bank"].astype(np.float32) * z["scale"].astype(np.float32)[:, None]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: unreadable hubness settings ({e})") from e
    if bank.ndim != 2 or len(bank) != meta.get("image_bank"):
        raise ValueError(f"{bundle / HUBNESS_BANK}: expected {meta.get('image_bank')} rows, "
                         f"got shape {bank.shape}")  # fmt: skip
    return cfg, bank, meta["sha256"]
