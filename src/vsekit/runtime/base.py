"""What every model backend shares, with NumPy only: loading a bundle's metadata, the
public encode / similarity / annotate / tags API and its batching. A backend
(:class:`~vsekit.lab.torch_model.VSEModel` on PyTorch, :class:`~vsekit.runtime.onnx_model.
OnnxModel` on ONNX Runtime) supplies three things: ``_encode_text_batch(texts)``,
``image_features(images)`` and ``encode_image_features(features)``.

:class:`BaseModel` itself holds the encoders and the model's identity; it is the facade of
two parts it owns, each made on first use: ``model.pools``
(:class:`~vsekit.runtime.pools.ModelPools`: caption pool, compact pool, hubness
reduction, penalties, retrieval scores) and ``model.annotator``
(:class:`~vsekit.runtime.annotator.Annotator`: annotation, the veto, tags; the tag
ranking itself is :class:`~vsekit.runtime.tagging.TagRanker`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vsekit.bundle import ModelError
from vsekit.fne import FNEStats
from vsekit.media.video import Sampling, VideoVectors, embed_video
from vsekit.media.views import decode_size
from vsekit.progress import progress_bar
from vsekit.runtime.annotator import Annotator
from vsekit.runtime.inputs import ImageInput, as_image_list
from vsekit.runtime.kinds import FEATURE_KINDS
from vsekit.runtime.pools import ModelPools
from vsekit.runtime.precision import PrecisionChoice
from vsekit.runtime.tagging import TagRanker
from vsekit.similarity import similarity, unit

if TYPE_CHECKING:
    from vsekit.evidence.veto import AnnotationVeto
    from vsekit.runtime.captions import CaptionPool
    from vsekit.runtime.compact import CompactPool
    from vsekit.runtime.hubness import Hubness

__all__ = ["WEAK_COUNT", "BaseModel", "ImageInput", "unit"]


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
    # made on first use (class defaults: a subclass need not call __init__ to have them)
    _pools: ModelPools | None = None
    _annotator: Annotator | None = None

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
        self._tag_table = None  # ([T, D] word vectors of every tag, [T] known)
        self._tag_bias = None  # [T] per-tag bias of a tagger with learned tags
        # the TagRanker of the known tags: None until first used, and set back to None by
        # whoever replaces the three above (vsekit.lab.train.export.attach_tagger)
        self._tag_vectors: TagRanker | None = None

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
        items, single = as_image_list(images)
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

    # -- caption pools and hubness reduction (CSLS): :class:`ModelPools` -------------
    @property
    def pools(self) -> ModelPools:
        """The model's caption pool, compact pool and hubness reduction
        (:class:`~vsekit.runtime.pools.ModelPools`), made on first use."""
        if self._pools is None:
            with _OWNER_LOCK:  # one per model: it holds the pools' locks and caches
                if self._pools is None:
                    self._pools = ModelPools(self)
        return self._pools

    @property
    def hubness(self) -> Hubness | None:
        """The bundle's hubness reduction, or None (:attr:`ModelPools.hubness`)."""
        return self.pools.hubness

    @property
    def compact_pool(self) -> CompactPool | None:
        """The caption pool's shipped compact embeddings, or None
        (:attr:`ModelPools.compact_pool`)."""
        return self.pools.compact_pool

    def set_hubness(self, hubness: Hubness | None) -> None:
        """Use ``hubness`` (or none) instead of what the bundle ships."""
        self.pools.set_hubness(hubness)

    def image_penalty(self, image_emb) -> np.ndarray:
        """``[N]`` CSLS image penalties (:meth:`ModelPools.image_penalty`)."""
        return self.pools.image_penalty(image_emb)

    def text_penalty(self, text_emb) -> np.ndarray:
        """``[M]`` CSLS text penalties (:meth:`ModelPools.text_penalty`)."""
        return self.pools.text_penalty(text_emb)

    def retrieval_scores(self, image_emb, text_emb) -> np.ndarray:
        """``[N, M]`` scores to rank by: :meth:`similarity` less both CSLS penalties when
        the bundle ships hubness reduction (:meth:`ModelPools.retrieval_scores`)."""
        return self.pools.retrieval_scores(image_emb, text_emb)

    @property
    def caption_pool(self) -> CaptionPool:
        """The model's captions with their embeddings (computed once, cached on disk)."""
        return self.pools.caption_pool

    # -- video -----------------------------------------------------------------------
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

    # -- annotation and tags: :class:`Annotator` --------------------------------------
    @property
    def annotator(self) -> Annotator:
        """The model's annotation and tags (:class:`~vsekit.runtime.annotator.Annotator`),
        made on first use."""
        if self._annotator is None:
            with _OWNER_LOCK:
                if self._annotator is None:
                    self._annotator = Annotator(self)
        return self._annotator

    def annotate(self, images: ImageInput | Sequence[ImageInput], k: int = 5):
        """The ``k`` best captions of the model's pool for each image or video file, with
        scores (:meth:`Annotator.annotate`)."""
        return self.annotator.annotate(images, k)

    @property
    def annotation_veto(self) -> AnnotationVeto | None:
        """The bundle's annotation veto when it has one on, else None (:attr:`Annotator.veto`)."""
        return self.annotator.veto

    def tags(self, images: ImageInput | Sequence[ImageInput], k: int = 10):
        """The ``k`` best tags of each image (:meth:`Annotator.tags`)."""
        return self.annotator.tags(images, k)

    @property
    def tag_threshold(self) -> float | None:
        """The calibrated tagger's display threshold, or None (:attr:`Annotator.tag_threshold`)."""
        return self.annotator.tag_threshold

    def tags_from_features(
        self, features: np.ndarray, k: int = 10
    ) -> list[list[tuple[str, float]]]:
        """Top-``k`` tags of each image from its ``[N, F]`` features
        (:meth:`Annotator.tags_from_features`)."""
        return self.annotator.tags_from_features(features, k)

    # -- the tagger's data (read by the backend; see :mod:`vsekit.runtime.tagging`) ---
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
    def tag_ranker(self) -> TagRanker | None:
        """The tagger over its tags that have a word vector (:class:`~vsekit.runtime.
        tagging.TagRanker`), built on first use; None without a tagger."""
        if self.tagger is None:
            return None
        if self._tag_vectors is None:
            w, names = self.tagger
            vecs, known = self._tag_word_vectors()
            self._tag_vectors = TagRanker.of_known(w, names, vecs, known, self._tag_bias)
        return self._tag_vectors


#: taken while a model makes its :class:`ModelPools` or :class:`Annotator` (once per model)
_OWNER_LOCK = threading.Lock()

#: a word seen fewer times than this in the training captions is weakly supported
WEAK_COUNT = 10
