"""The caption side one model owns beyond its encoders: its caption pool
(:class:`~vsekit.runtime.captions.CaptionPool`), the compact form of that pool the bundle
may ship (:mod:`vsekit.runtime.compact`), and the bundle's hubness reduction
(:mod:`vsekit.runtime.hubness`) with its caption bank; the CSLS penalties and the
retrieval scores built on them.

:class:`~vsekit.runtime.base.BaseModel` owns one :class:`ModelPools` (``model.pools``) and
its ``caption_pool``, ``compact_pool``, ``hubness``, ``set_hubness``, ``image_penalty``,
``text_penalty`` and ``retrieval_scores`` delegate to it. Everything here is read or
computed on first use.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

from vsekit.bundle import ModelError
from vsekit.runtime.captions import CaptionPool
from vsekit.runtime.compact import CompactPool, captions_key, read_compact, read_compact_info
from vsekit.runtime.hubness import Hubness, caption_bank_texts, read_hubness

if TYPE_CHECKING:
    from vsekit.runtime.base import BaseModel


class ModelPools:
    """The caption pool, compact pool and hubness reduction of ``model`` (one bundle)."""

    def __init__(self, model: BaseModel) -> None:
        self.model = model
        self._pool: CaptionPool | None = None
        self._hub: Hubness | bool | None = None  # False: the bundle has none
        self._compact: CompactPool | bool | None = None  # False: none that fits
        #: the hubness caption bank's pool when it is computed (None: not loaded yet, or
        #: read from the compact pool)
        self.bank_pool: CaptionPool | None = None
        self._compact_info: dict | bool | None = None  # captions.emb.json; False: none fits

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
        m = self.model
        spec = None
        if m.path is not None and m.similarity_name == "cosine":
            try:
                spec = read_hubness(m.path)
            except ValueError as e:
                raise ModelError(str(e)) from e
        if spec is None:
            return False
        cfg, bank, bank_sha = spec
        if bank.shape[1] != m.embed_dim:
            raise ModelError(f"{m.path}: hubness image bank has {bank.shape[1]} "
                             f"columns, the model embeds in {m.embed_dim}")  # fmt: skip
        texts = caption_bank_texts(m.captions, cfg.caption_stride)
        meta = self._compact_meta()
        if meta is not None:
            # the bank is every stride-th row of the shipped pool, read when first needed
            # (never by a search whose photos' penalties are all stored)
            rows = slice(None, None, cfg.caption_stride)
            key = f"{len(texts)}-compact-{meta['sha256'][:12]}"
            return Hubness(cfg, bank, lambda: self.compact_pool.rows(rows), key, bank_sha)
        pool = self.bank_pool = CaptionPool(m, texts, cache=True, name="caption bank")
        return Hubness(cfg, bank, lambda: pool.embeddings, pool.key, bank_sha)

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
        """``[N, M]`` scores to rank by: the model's :meth:`~vsekit.runtime.base.BaseModel.
        similarity` less both CSLS penalties when the bundle ships hubness reduction (what
        search and annotation rank by), else the similarity itself::

            score[i, j] = sim(img_i, txt_j) - image_penalty(img_i) - text_penalty(txt_j)
        """
        s = self.model.similarity(image_emb, text_emb)
        if self.hubness is None:
            return s
        return s - self.image_penalty(image_emb)[:, None] - self.text_penalty(text_emb)[None, :]

    # -- the caption pool and its compact form -------------------------------------
    @property
    def caption_pool(self) -> CaptionPool:
        """The model's captions with their embeddings (computed once, cached on disk)."""
        if self._pool is None:
            with _POOL_LOCK:  # one pool per model, whatever the threads asking
                if self._pool is None:
                    self._pool = CaptionPool(self.model)
        return self._pool

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
            m = self.model
            meta = None
            if m.path is not None and m.captions and m.similarity_name == "cosine":
                meta = read_compact_info(m.path)
            fits = meta is not None and (
                meta.get("model_fingerprint") == m.weights_fingerprint
                and meta.get("embed_dim") == m.embed_dim
                and meta.get("captions_sha256") == captions_key(list(dict.fromkeys(m.captions)))
            )
            self._compact_info = meta if fits else False
        return self._compact_info or None

    def _load_compact(self) -> CompactPool | None:
        meta = self._compact_meta()
        return None if meta is None else read_compact(self.model.path, meta)


_POOL_LOCK = threading.Lock()
_COMPACT_LOCK = threading.Lock()  # taken inside _POOL_LOCK (the hubness bank)
