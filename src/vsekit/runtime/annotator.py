"""Annotation: the caption pool's best captions and the tagger's tags for photos, under
the bundle's consensus re-ranking (:mod:`vsekit.runtime.consensus`) and annotation veto
(:mod:`vsekit.evidence.veto`) when it has them on.

``vse annotate``, ``GET``/``POST /annotate`` and :meth:`BaseModel.annotate
<vsekit.runtime.base.BaseModel.annotate>` all go through :func:`annotate_arrays`. With the
veto, the model's best ``candidates`` captions are re-ranked by the photo's ImageNet class
probabilities (from the image features the annotation decodes anyway for its tags);
with consensus, the model's best ``candidates`` are first re-ranked by how much each
agrees with the others; without either, annotation is the pool's top ``k``.

Each model owns one :class:`Annotator` (``model.annotator``): its ``annotate``,
``annotation_veto``, ``tags``, ``tag_threshold`` and ``tags_from_features`` delegate to it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from vsekit.media.video import is_video
from vsekit.runtime.inputs import ImageInput, as_image_list

if TYPE_CHECKING:
    from vsekit.evidence.veto import AnnotationVeto, Ranked
    from vsekit.runtime.base import BaseModel
    from vsekit.runtime.consensus import ConsensusRule

#: tags asked of the tagger beyond ``k``, to fill the places of vetoed ones
SPARE_TAGS = 10

#: ``veto=`` and ``consensus=`` default: the model's own (its bundle's ``evidence.json``)
FROM_MODEL = "model"


@dataclass
class Annotation:
    """One photo's annotation: ``captions`` and ``tags`` as ``(text, score)``, best
    first; what the veto demoted (``demoted``: captions the model had in its top ``k``)
    and dropped (``dropped_tags``); ``floor``: the veto's floor (None without a veto)."""

    captions: list[tuple[str, float]]
    tags: list[tuple[str, float]] = field(default_factory=list)
    demoted: list[Ranked] = field(default_factory=list)
    dropped_tags: list[Ranked] = field(default_factory=list)
    floor: float | None = None

    def as_dict(self, digits: int | None = None) -> dict:
        """The JSON form ``vse annotate --json`` prints and ``/annotate`` returns:
        ``captions`` and ``tags``, and with a veto ``vetoed`` and ``vetoed_tags``, each
        with its nouns' class probabilities and the reason."""

        def r(x: float) -> float:
            return round(x, digits) if digits is not None else x

        out = {"captions": [{"text": c, "score": r(s)} for c, s in self.captions],
               "tags": [{"tag": t, "score": r(s)} for t, s in self.tags]}  # fmt: skip
        if self.floor is not None:
            out["vetoed"] = [self._vetoed(v, "text", r) for v in self.demoted]
            out["vetoed_tags"] = [self._vetoed(v, "tag", r) for v in self.dropped_tags]
        return out

    def _vetoed(self, v: Ranked, key: str, r) -> dict:
        nouns = [n.as_dict() for n in v.vetoed]
        return {key: v.text, "score": r(v.model_score), "nouns": nouns,
                "reason": v.reason(self.floor)}  # fmt: skip


class Annotator:
    """The annotation and tags of one ``model``, under its bundle's veto (read once)."""

    def __init__(self, model: BaseModel) -> None:
        self.model = model
        self._veto: AnnotationVeto | bool | None = None  # False: the bundle has none on
        self._consensus: ConsensusRule | bool | None = None

    @property
    def veto(self) -> AnnotationVeto | None:
        """The bundle's annotation veto (:class:`vsekit.evidence.veto.AnnotationVeto`)
        when its ``evidence.json`` has one on, else None; read once."""
        if self._veto is None:
            from vsekit.evidence.veto import AnnotationVeto

            path = self.model.path
            found = AnnotationVeto.from_bundle(path) if path is not None else None
            self._veto = found or False
        return self._veto or None

    @property
    def consensus(self) -> ConsensusRule | None:
        """The bundle's consensus re-ranking (:class:`vsekit.runtime.consensus.
        ConsensusRule`) when its ``evidence.json`` has it on, else None; read once."""
        if self._consensus is None:
            from vsekit.runtime.consensus import ConsensusRule

            path = self.model.path
            found = ConsensusRule.from_bundle(path) if path is not None else None
            self._consensus = found or False
        return self._consensus or None

    def annotate(self, images: ImageInput | Sequence[ImageInput], k: int = 5):
        """The ``k`` best captions of the model's pool for each image or video file
        (a video by its whole-clip embedding), with scores; under the bundle's
        annotation veto when it has one on."""
        model = self.model
        items, single = as_image_list(images)
        if self.veto is None:
            vecs = _media_vectors(model, items)
            best = [a.captions for a in annotate_arrays(model, vecs, None, k)]
        else:
            emb, feats = embed_media(model, items)
            best = [a.captions for a in annotate_arrays(model, emb, feats, k)]
        return best[0] if single else best

    def tags(self, images: ImageInput | Sequence[ImageInput], k: int = 10):
        """The ``k`` best tags of each image (empty without a tagger in the bundle), less
        those the annotation veto rules out when it covers tags."""
        items, single = as_image_list(images)
        out = vetoed_tags(self.model, self.model.image_features(items), k) if items else []
        return out[0] if single else out

    @property
    def tag_threshold(self) -> float | None:
        """The calibrated probability below which a tag is not shown (taggers trained with
        ``loss: tag_bce``; their score is a logit), or None: always the top ``k``."""
        return (self.model.info.get("tagger") or {}).get("threshold")

    def tags_from_features(
        self, features: np.ndarray, k: int = 10
    ) -> list[list[tuple[str, float]]]:
        """Top-``k`` tags of each image from its ``[N, F]`` features: ``(tag, score)``,
        or, for a calibrated tagger, ``(tag, probability)`` of at most ``k`` tags whose
        probability reaches :attr:`tag_threshold` (possibly none)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        ranker = self.model.tag_ranker
        if ranker is None:
            return [[] for _ in range(len(features))]
        return ranker.top(features, k, self.tag_threshold)


def model_veto(model: BaseModel) -> AnnotationVeto | None:
    """The annotation veto ``model``'s bundle has on, or None (read once per model)."""
    return model.annotation_veto


def annotate_arrays(
    model: BaseModel,
    emb: np.ndarray,
    features: np.ndarray | None,
    k: int = 5,
    n_tags: int = 0,
    pool=None,
    veto: AnnotationVeto | None | str = FROM_MODEL,
    consensus: ConsensusRule | None | str = FROM_MODEL,
) -> list[Annotation]:
    """Annotations of photos from their ``[N, D]`` unit embeddings and ``[N, F]`` image
    features (None: no tags and no veto, which needs the features): the ``k`` best
    captions of ``pool`` (the model's caption pool by default) and at most ``n_tags``
    tags. ``veto`` and ``consensus``: the model's own by default, or one given, or None
    (off)."""
    if veto == FROM_MODEL:
        veto = model_veto(model)
    if consensus == FROM_MODEL:
        consensus = model.annotator.consensus
    pool = model.caption_pool if pool is None else pool
    if features is None:
        veto = None
    n = k if veto is None else max(k, veto.rule.candidates)
    if consensus is None:
        cand = pool.best(emb, n)
    else:
        from vsekit.runtime.consensus import best_captions

        cand = best_captions(pool, emb, n, consensus)
    if veto is None:
        out = [Annotation(list(c[:k])) for c in cand]
    else:
        probs = veto.class_probs(features)
        out = [Annotation([(x.text, x.score) for x in rr.kept], demoted=rr.demoted,
                          floor=veto.rule.floor)
               for rr in veto.rerank(probs, cand, k)]  # fmt: skip
    if n_tags > 0 and features is not None and model.tagger is not None:
        extra = SPARE_TAGS if veto is not None and veto.rule.tags else 0
        tags = model.tags_from_features(features, n_tags + extra)
        for i, (a, t) in enumerate(zip(out, tags, strict=True)):
            if veto is None:
                a.tags = list(t[:n_tags])
            else:
                a.tags, a.dropped_tags = veto.filter_tags(probs[i], t, n_tags)
    return out


def vetoed_tags(model: BaseModel, features: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
    """:meth:`BaseModel.tags_from_features` under the model's veto (when it has one on
    that covers tags): each photo's first ``k`` tags that are not vetoed nouns."""
    veto = model_veto(model)
    if veto is None or not veto.rule.tags or model.tagger is None:
        return model.tags_from_features(features, k)
    probs = veto.class_probs(features)
    tags = model.tags_from_features(features, k + SPARE_TAGS)
    return [veto.filter_tags(p, t, k)[0] for p, t in zip(probs, tags, strict=True)]


def _media_vectors(model: BaseModel, items: Sequence[ImageInput]) -> np.ndarray:
    """``[N, D]``: photos as :meth:`~BaseModel.encode_image`, video files by their clip
    vector (annotation without a veto needs no image features)."""
    videos = [k for k, x in enumerate(items) if isinstance(x, str | os.PathLike) and is_video(x)]
    if not videos:
        return model.encode_image(items)
    out = np.zeros((len(items), model.embed_dim), np.float32)
    photos = [k for k in range(len(items)) if k not in set(videos)]
    if photos:
        out[photos] = model.encode_image([items[k] for k in photos])
    for k in videos:
        out[k] = model.encode_video(items[k]).clip
    return out


def embed_media(model: BaseModel, items: Sequence, batch_size: int = 16):
    """``([N, D] unit embeddings, [N, F] features)`` of photos and video files (a video
    by its whole clip: the mean of its frames' embeddings and features)."""
    embs: list = [None] * len(items)
    feats: list = [None] * len(items)
    photos = [i for i, x in enumerate(items) if not (isinstance(x, str | os.PathLike)
                                                     and is_video(x))]  # fmt: skip
    for a in range(0, len(photos), batch_size):
        idx = photos[a : a + batch_size]
        e, f = model.embed_with_features([items[i] for i in idx])
        for j, i in enumerate(idx):
            embs[i], feats[i] = e[j], f[j]
    for i in set(range(len(items))) - set(photos):
        v = model.encode_video(items[i], with_features=True)
        embs[i], feats[i] = v.clip, v.features
    return np.stack(embs).astype(np.float32), np.stack(feats).astype(np.float32)
