"""What every model backend shares, with NumPy only: loading a bundle's metadata, the
public encode / similarity / annotate / tags API and its batching. A backend
(:class:`~vsekit.lab.torch_model.VSEModel` on PyTorch, :class:`~vsekit.runtime.onnx_model.
OnnxModel` on ONNX Runtime) supplies three things: ``_encode_text_batch(texts)``,
``image_features(images)`` and ``encode_image_features(features)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from vsekit.bundle import (
    ModelError,
)
from vsekit.fne import FNEStats
from vsekit.media.video import Sampling, VideoVectors, embed_video, is_video
from vsekit.media.views import decode_size
from vsekit.progress import progress_bar
from vsekit.runtime.compact import CompactPool, captions_key, read_compact, read_compact_info
from vsekit.runtime.hubness import Hubness, caption_bank_texts, read_hubness
from vsekit.runtime.kinds import FEATURE_KINDS
from vsekit.runtime.precision import PrecisionChoice
from vsekit.similarity import similarity, unit

ImageInput = str | os.PathLike | Image.Image


def _as_list(images) -> tuple[list, bool]:
    """``(items, single)``: one path or PIL image becomes a list of one."""
    single = isinstance(images, str | os.PathLike | Image.Image)
    return ([images] if single else list(images)), single


def _batches(items: Sequence, size: int) -> Iterator[Sequence]:
    if size < 1:
        raise ValueError(f"batch_size must be >= 1, got {size}")
    for a in range(0, len(items), size):
        yield items[a : a + size]


class BaseModel:
    """The public model API over one bundle (see :func:`vsekit.load_model`)."""

    backend = "base"
    precision = "fp32"  # of the image encoder (ONNX Runtime may run int8)
    #: what the ONNX backend chose for this CPU and why (None: the backend is fp32 only)
    precision_choice: PrecisionChoice | None = None

    def __init__(
        self,
        info: dict,
        fne_stats: FNEStats | None = None,
        captions: list[str] | None = None,
        path: Path | None = None,
        tagger: tuple[np.ndarray, list[str]] | None = None,
    ) -> None:
        kind = info["image"]["features"]
        if kind not in FEATURE_KINDS:
            raise ModelError(f"{path}: image features {kind!r} cannot be computed for new images")
        if kind == "fne" and fne_stats is None:
            raise ModelError(f"{path}: an FNE model needs its fne_stats")
        self.info = info
        self.fne_stats = fne_stats
        self.captions = captions or []
        self.path = path
        self.tagger = tagger  # (W [F, word_dim], tag names)
        self._tag_vectors = None  # (vectors of the known tags, their names)
        self._tag_table = None  # ([T, D] word vectors of every tag, [T] known)
        self._tag_bias = None  # [T] per-tag bias of a tagger with learned tags
        self._pool = None
        self._hub: Hubness | bool | None = None  # False: the bundle has none
        self._compact: CompactPool | bool | None = None  # False: none that fits
        self._bank_pool = None  # the hubness caption bank's pool when it is computed
        self._compact_info: dict | bool | None = None  # captions.emb.json; False: none fits

    # -- identity ------------------------------------------------------------------
    @property
    def embed_dim(self) -> int:
        raise NotImplementedError

    @property
    def model_config(self) -> dict:
        return self.info["config"]["model"]

    @property
    def similarity_name(self) -> str:
        return self.model_config.get("similarity", "cosine")

    def _weights_fp16(self) -> Iterator[tuple[str, np.ndarray]]:
        """The model's weights as float16 arrays, by name (for the fingerprint)."""
        raise NotImplementedError

    @property
    def fingerprint(self) -> str:
        """Changes whenever the weights or the image side (backbone, its weights' sha256,
        preprocessing, crops, feature kind) change (16 hex digits); the same for every
        backend of one bundle."""
        h = hashlib.sha256(json.dumps(self.info["image"], sort_keys=True).encode())
        for k, v in sorted(self._weights_fp16(), key=lambda kv: kv[0]):
            h.update(k.encode())
            h.update(np.ascontiguousarray(v, dtype=np.float16).tobytes())
        return h.hexdigest()[:16]

    @property
    def weights_fingerprint(self) -> str:
        """The fingerprint of the weights alone, whatever precision runs the image graph
        (what the caption pool's embeddings depend on)."""
        return self.fingerprint

    def describe(self, name: str | None = None) -> dict:
        """What an index records about the model its embeddings come from."""
        return {
            "name": name or (str(self.path) if self.path else "in-memory"),
            "fingerprint": self.fingerprint,
            "dim": self.embed_dim,
            "similarity": self.similarity_name,
            "precision": self.precision,
            "backbone": self.info["image"]["backbone"],
            "weights_sha256": self.info["image"].get("weights_sha256"),
        }

    @property
    def decode_size(self) -> int:
        """Short side to decode photos at (reduced-size JPEG decoding above it)."""
        return decode_size(int(self.info["image"].get("preprocessing", {}).get("input_size", 224)))

    @property
    def text_vocabulary(self):
        """The :class:`~vsekit.lab.data.Vocabulary` of a word-level text encoder, else None."""
        return None

    def unknown_words(self, text: str) -> tuple[list[str], list[str]]:
        """``(known, unknown)`` words of ``text`` for a word-level model (both empty for
        models that read every string, such as letter trigrams)."""
        vocab = self.text_vocabulary
        if vocab is None:
            return [], []
        from vsekit.text.tokenizer import tokenize

        words = [w for w in tokenize(text) if any(c.isalnum() for c in w)]
        return [w for w in words if w in vocab], [w for w in words if w not in vocab]

    def weak_words(self, text: str) -> list[tuple[str, int]]:
        """``(word, count)`` for the words of ``text`` the model knows only weakly: seen
        fewer than :data:`WEAK_COUNT` times in its training captions ("corgi": 3), or
        not at all (count 0): added by a vocabulary expansion, their vectors mapped
        from general word vectors ("drone": known only by analogy)."""
        vocab = self.text_vocabulary
        if vocab is None:
            return []
        known, _ = self.unknown_words(text)
        out = {}
        for w in known:
            n = 0 if vocab.by_analogy(w) else vocab.counts.get(w)
            if n is not None and n < WEAK_COUNT:
                out[w] = n
        return list(out.items())

    # -- backend hooks -------------------------------------------------------------
    def image_features(self, images: Sequence[ImageInput]) -> np.ndarray:
        """PIL images or paths -> ``[N, F]`` features of the model's kind (one batch)."""
        raise NotImplementedError

    def encode_image_features(self, features: np.ndarray, normalize: bool = True) -> np.ndarray:
        """``[N, F]`` image features -> ``[N, D]`` joint-space vectors."""
        raise NotImplementedError

    def _encode_text_batch(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _embed_batch(self, batch: Sequence[ImageInput], normalize: bool) -> np.ndarray:
        """One batch of images -> ``[B, D]``; a backend whose graph goes from pixels to
        the embedding in one pass overrides this."""
        return self.encode_image_features(self.image_features(batch), normalize)

    def embed_with_features(self, images: Sequence[ImageInput]) -> tuple[np.ndarray, np.ndarray]:
        """``([N, D] unit embeddings, [N, F] features)`` of one batch (annotation with
        tags needs both)."""
        feats = self.image_features(images)
        return self.encode_image_features(feats), feats

    # -- encoding ------------------------------------------------------------------
    def encode_image(
        self,
        images: ImageInput | Sequence[ImageInput],
        batch_size: int = 16,
        normalize: bool = True,
        show_progress: bool = False,
    ):
        """Paths or PIL images -> ``[N, D]`` float32 (one input -> ``[D]``).

        Images are decoded, cropped and run through the backbone ``batch_size`` at a time,
        so memory is bounded by the batch, not by ``len(images)``. ``normalize``: unit rows.
        """
        items, single = _as_list(images)
        out = np.zeros((len(items), self.embed_dim), np.float32)
        a = 0
        with progress_bar(len(items), "images", "image", show_progress) as bar:
            for batch in _batches(items, batch_size):
                out[a : a + len(batch)] = self._embed_batch(batch, normalize)
                a += len(batch)
                bar.update(len(batch))
        return out[0] if single else out

    def encode_text(
        self,
        texts: str | Sequence[str],
        batch_size: int = 256,
        normalize: bool = True,
        show_progress: bool = False,
    ):
        """Raw sentences -> ``[M, D]`` float32 (one string -> ``[D]``)."""
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        bad = [k for k, t in enumerate(items) if not isinstance(t, str)]
        if bad:
            raise TypeError(f"encode_text: item {bad[0]} is {type(items[bad[0]]).__name__}")
        for k, t in enumerate(items):
            try:
                t.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"encode_text: item {k} is not valid UTF-8 text") from None
        chunks = []
        with progress_bar(len(items), "texts", "text", show_progress) as bar:
            for batch in _batches(items, batch_size):
                chunks.append(self._encode_text_batch(list(batch)))
                bar.update(len(batch))
        out = np.concatenate(chunks) if chunks else np.zeros((0, self.embed_dim), np.float32)
        out = unit(out) if normalize else out
        return out[0] if single else out

    def similarity(self, image_emb, text_emb) -> np.ndarray:
        """``[N, D] x [M, D] -> [N, M]`` with the model's own similarity (cosine, order
        or euclidean; order is asymmetric, so images come first). 1-D inputs count as
        one row each."""
        a = np.atleast_2d(np.asarray(image_emb, np.float32))
        b = np.atleast_2d(np.asarray(text_emb, np.float32))
        return similarity(self.similarity_name, a, b, bool(self.model_config.get("abs", False)))

    # -- hubness reduction (CSLS) ---------------------------------------------------
    @property
    def hubness(self) -> Hubness | None:
        """The bundle's hubness reduction (:mod:`vsekit.runtime.hubness`), or None if it ships
        none. Its caption bank (every ``caption_stride``-th caption of the pool) is
        embedded on first use and cached on disk, like the caption pool."""
        if self._hub is None:
            with _POOL_LOCK:  # one bank per model, whatever the threads asking
                if self._hub is None:
                    self._hub = self._load_hubness()
        return self._hub or None

    def _load_hubness(self) -> Hubness | bool:
        """The bundle's hubness settings with a lazily embedded caption bank; False when
        the bundle ships none."""
        spec = None
        if self.path is not None and self.similarity_name == "cosine":
            try:
                spec = read_hubness(self.path)
            except ValueError as e:
                raise ModelError(str(e)) from e
        if spec is None:
            return False
        cfg, bank, bank_sha = spec
        if bank.shape[1] != self.embed_dim:
            raise ModelError(f"{self.path}: hubness image bank has {bank.shape[1]} "
                             f"columns, the model embeds in {self.embed_dim}")  # fmt: skip
        from vsekit.runtime.captions import CaptionPool

        texts = caption_bank_texts(self.captions, cfg.caption_stride)
        meta = self._compact_meta()
        if meta is not None:
            # the bank is every stride-th row of the shipped pool, read when first needed
            # (never by a search whose photos' penalties are all stored)
            rows = slice(None, None, cfg.caption_stride)
            key = f"{len(texts)}-compact-{meta['sha256'][:12]}"
            return Hubness(cfg, bank, lambda: self.compact_pool.rows(rows), key, bank_sha)
        pool = self._bank_pool = CaptionPool(self, texts, cache=True, name="caption bank")
        return Hubness(cfg, bank, lambda: pool.embeddings, pool.key, bank_sha)

    @property
    def compact_pool(self) -> CompactPool | None:
        """The caption pool's embeddings shipped with the bundle (:mod:`vsekit.runtime.
        compact`), read and verified on first use; None when the bundle has none, or
        has one made for other weights or captions (then they are computed)."""
        if self._compact is None:
            with _COMPACT_LOCK:
                if self._compact is None:
                    self._compact = self._load_compact() or False
        return self._compact or None

    def _compact_meta(self) -> dict | None:
        """``captions.emb.json`` when the bundle ships a compact pool made for these
        weights and captions (read, not the pool itself), else None."""
        if self._compact_info is None:
            meta = None
            if self.path is not None and self.captions and self.similarity_name == "cosine":
                meta = read_compact_info(self.path)
            fits = meta is not None and (
                meta.get("model_fingerprint") == self.weights_fingerprint
                and meta.get("embed_dim") == self.embed_dim
                and meta.get("captions_sha256") == captions_key(list(dict.fromkeys(self.captions)))
            )
            self._compact_info = meta if fits else False
        return self._compact_info or None

    def _load_compact(self) -> CompactPool | None:
        meta = self._compact_meta()
        return None if meta is None else read_compact(self.path, meta)

    def set_hubness(self, hubness: Hubness | None) -> None:
        """Use ``hubness`` (or none) instead of what the bundle ships."""
        self._hub = hubness if hubness is not None else False
        self._pool = None

    def image_penalty(self, image_emb) -> np.ndarray:
        """``[N]``: what CSLS subtracts from each image's scores against every text
        (zeros without hubness reduction); ``vse index`` stores it with each photo."""
        a = np.atleast_2d(np.asarray(image_emb, np.float32))
        hub = self.hubness
        return np.zeros(len(a), np.float32) if hub is None else hub.image_penalty(a)

    def text_penalty(self, text_emb) -> np.ndarray:
        """``[M]``: what CSLS subtracts from each text's scores against every image."""
        b = np.atleast_2d(np.asarray(text_emb, np.float32))
        hub = self.hubness
        return np.zeros(len(b), np.float32) if hub is None else hub.text_penalty(b)

    def retrieval_scores(self, image_emb, text_emb) -> np.ndarray:
        """``[N, M]`` scores to rank by: :meth:`similarity` less both CSLS penalties when
        the bundle ships hubness reduction (what search and annotation rank by), else
        :meth:`similarity` itself."""
        s = self.similarity(image_emb, text_emb)
        if self.hubness is None:
            return s
        return s - self.image_penalty(image_emb)[:, None] - self.text_penalty(text_emb)[None, :]

    # -- annotation and tags -------------------------------------------------------
    @property
    def caption_pool(self):
        """The model's captions with their embeddings (computed once, cached on disk)."""
        if self._pool is None:
            from vsekit.runtime.captions import CaptionPool

            with _POOL_LOCK:  # one pool per model, whatever the threads asking
                if self._pool is None:
                    self._pool = CaptionPool(self)
        return self._pool

    def encode_video(
        self,
        path: str | os.PathLike,
        every: float = 1.0,
        segment_seconds: float = 2.0,
        batch_size: int = 16,
        with_features: bool = False,
    ) -> VideoVectors:
        """A video file -> its embeddings: one frame every ``every`` seconds goes through
        the photo path, then the frames' unit embeddings are averaged per segment of
        ``segment_seconds`` and over the clip (:func:`vsekit.media.video.embed_video`).
        ``with_features``: also the clip's mean image features (for tags).
        Needs the ``[video]`` extra."""

        def embed(frames):
            if with_features:
                return self.embed_with_features(frames)
            return self.encode_image(frames, batch_size=batch_size)

        cosine = self.similarity_name == "cosine"
        return embed_video(path, embed, Sampling(every=every), segment_seconds,
                           self.decode_size, batch_size, cosine)  # fmt: skip

    def _embed_media(self, items: Sequence[ImageInput]) -> np.ndarray:
        """``[N, D]``: photos as :meth:`encode_image`, video files by their clip vector."""
        videos = [
            k for k, x in enumerate(items) if isinstance(x, str | os.PathLike) and is_video(x)
        ]
        if not videos:
            return self.encode_image(items)
        out = np.zeros((len(items), self.embed_dim), np.float32)
        photos = [k for k in range(len(items)) if k not in set(videos)]
        if photos:
            out[photos] = self.encode_image([items[k] for k in photos])
        for k in videos:
            out[k] = self.encode_video(items[k]).clip
        return out

    def annotate(self, images: ImageInput | Sequence[ImageInput], k: int = 5):
        """The ``k`` best captions of the model's pool for each image or video file
        (a video by its whole-clip embedding), with scores; under the bundle's
        annotation veto when it has one on (:mod:`vsekit.runtime.annotator`)."""
        from vsekit.runtime.annotator import annotate_arrays, embed_media

        items, single = _as_list(images)
        if self.annotation_veto is None:
            best = self.caption_pool.best(self._embed_media(items), k)
        else:
            emb, feats = embed_media(self, items)
            best = [a.captions for a in annotate_arrays(self, emb, feats, k)]
        return best[0] if single else best

    @property
    def annotation_veto(self):
        """The bundle's annotation veto (:class:`vsekit.evidence.veto.AnnotationVeto`)
        when its ``evidence.json`` has one on, else None; read once."""
        if getattr(self, "_veto", None) is None:
            from vsekit.evidence.veto import AnnotationVeto

            found = AnnotationVeto.from_bundle(self.path) if self.path is not None else None
            self._veto = found or False
        return self._veto or None

    def tags(self, images: ImageInput | Sequence[ImageInput], k: int = 10):
        """The ``k`` best tags of each image (empty without a tagger in the bundle), less
        those the annotation veto rules out when it covers tags."""
        from vsekit.runtime.annotator import vetoed_tags

        items, single = _as_list(images)
        out = vetoed_tags(self, self.image_features(items), k) if items else []
        return out[0] if single else out

    def _tag_word_vectors(self) -> tuple[np.ndarray, list[bool]]:
        """``([T, D] word vectors, [T] known)`` of the tagger's tags, shipped in the bundle
        (``tagger.safetensors``). The torch backend can also make them from GloVe for a
        bundle that lacks them; the core cannot."""
        if self._tag_table is None:
            raise ModelError(
                f"{self.path}: the tagger has no word vectors for its tags; re-export the "
                "bundle with vsekit[train] (vse model export --tagger)"
            )
        return self._tag_table

    @property
    def tag_threshold(self) -> float | None:
        """The calibrated probability below which a tag is not shown (taggers trained with
        ``loss: tag_bce``; their score is a logit), or None: always the top ``k``."""
        return (self.info.get("tagger") or {}).get("threshold")

    def tags_from_features(
        self, features: np.ndarray, k: int = 10
    ) -> list[list[tuple[str, float]]]:
        """Top-``k`` tags of each image from its ``[N, F]`` features: ``(tag, score)``,
        or, for a calibrated tagger, ``(tag, probability)`` of at most ``k`` tags whose
        probability reaches :attr:`tag_threshold` (possibly none)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if self.tagger is None:
            return [[] for _ in range(len(features))]
        w, names = self.tagger
        if self._tag_vectors is None:
            vecs, known = self._tag_word_vectors()
            keep = np.asarray(known, bool)
            kept = [n for n, ok in zip(names, known, strict=True) if ok]
            bias = None if self._tag_bias is None else np.asarray(self._tag_bias)[keep]
            self._tag_vectors = (vecs[keep], kept, bias)
        vecs, known_names, bias = self._tag_vectors
        s = (np.asarray(features, np.float32) @ np.asarray(w, np.float32)) @ vecs.T
        if bias is not None:
            s = s + bias
        kk = min(k, s.shape[1])
        top = np.argsort(-s, axis=1, kind="stable")[:, :kk]
        thr = self.tag_threshold
        if thr is None:
            return [[(known_names[j], float(row[j])) for j in idx] for row, idx in zip(s, top)]  # noqa: B905
        p = 1.0 / (1.0 + np.exp(-s))
        return [[(known_names[j], float(row[j])) for j in idx if row[j] >= thr]
                for row, idx in zip(p, top)]  # noqa: B905  # fmt: skip


_POOL_LOCK = threading.Lock()
_COMPACT_LOCK = threading.Lock()  # taken inside _POOL_LOCK (the hubness bank)

#: a word seen fewer times than this in the training captions is weakly supported
WEAK_COUNT = 10
