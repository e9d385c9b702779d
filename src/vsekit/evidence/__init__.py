"""Evidence sources: knowledge beyond the joint embedding, added to a text query's scores.

Each source is one module behind :class:`EvidenceScorer`, so that a source can be added,
measured and dropped alone:

- at index time, :meth:`EvidenceScorer.index` turns a :class:`PhotoBatch` (the photos'
  decoded pixels and the image graph's ``features`` output, ``[N, F]``, each computed
  only when a source asks for it) into small per-photo arrays to keep;
- at query time, :meth:`EvidenceScorer.score` turns a query text and those arrays into
  an additive ``[N]`` bonus, or None when the query says nothing the source knows.

:func:`fuse` is the one place the bonuses join the model's scores. A bundle declares
its sources in ``evidence.json`` (each source's files with their sha256 and its fusion
settings); :func:`load_sources` returns those whose files are present, verified and
enabled, so a source whose files are absent is simply off.

Sources: ``imagenet`` (:mod:`vsekit.evidence.imagenet`), the backbone's own 1000-way
ImageNet head tied to words through WordNet (reads features); ``colour``
(:mod:`vsekit.evidence.colour`), the share of each basic colour term in regions of the
photo, tied to the query's colour words (reads pixels); ``objects``
(:mod:`vsekit.evidence.objects`), a COCO detector's boxes tied to the counts a query
names ("three children"; reads pixels).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from vsekit.bundle import ModelError

EVIDENCE_FILE = "evidence.json"

#: per-photo arrays of one source, each ``[N, ...]`` (row ``i`` is photo ``i``)
Evidence = Mapping[str, np.ndarray]


class PhotoBatch:
    """One batch of photos as evidence sources see them at index time: their decoded RGB
    pixels (:attr:`images`) and the image graph's features (:attr:`features`, ``[N, F]``).

    Either may be given, or made on first use: the images decoded from ``paths`` (at
    ``decode_size`` on the short side, as the model decodes them), the features by
    ``featurise`` (the model's ``image_features``) from those decoded images, so a photo is
    decoded once for every source. A source that reads only pixels never runs the
    backbone; one that reads only features never needs the pixels kept. ValueError (an
    :class:`~vsekit.media.images.ImageError` for an unreadable photo) when a source asks
    for what the batch cannot make."""

    def __init__(
        self,
        images: Sequence | None = None,
        features: np.ndarray | None = None,
        *,
        paths: Sequence[str] | None = None,
        featurise: Callable[[list], np.ndarray] | None = None,
        decode_size: int | None = None,
    ):
        self._images = None if images is None else list(images)
        self._features = None if features is None else np.asarray(features)
        self.paths = None if paths is None else [str(p) for p in paths]
        self._featurise = featurise
        self.decode_size = decode_size
        sizes = {len(x) for x in (self._images, self._features, self.paths) if x is not None}
        if len(sizes) != 1:
            raise ValueError(f"a photo batch needs images, features or paths of one length, "
                             f"got lengths {sorted(sizes)}")  # fmt: skip
        self.n = sizes.pop()

    def __len__(self) -> int:
        return self.n

    @property
    def images(self) -> list:
        """The decoded photos (PIL, RGB), decoded on first use."""
        if self._images is None:
            if self.paths is None:
                raise ValueError("this photo batch holds features only, no pixels")
            from vsekit.media.images import load_image

            self._images = [load_image(p, self.decode_size) for p in self.paths]
        return self._images

    @property
    def features(self) -> np.ndarray:
        """``[N, F]`` image-graph features, computed on first use."""
        if self._features is None:
            if self._featurise is None:
                raise ValueError("this photo batch holds pixels only, no model to featurise")
            self._features = np.asarray(self._featurise(self.images))
        return self._features


@runtime_checkable
class EvidenceScorer(Protocol):
    """One evidence source."""

    #: the source's key in ``evidence.json`` and in stored evidence
    name: str
    #: the version of what :meth:`index` computes: stored with each photo's arrays, so
    #: that arrays made by another version are recomputed, and never scored meanwhile
    version: int

    def index(self, photos: PhotoBatch) -> dict[str, np.ndarray]:
        """A batch of ``N`` photos -> the arrays to keep per photo, each ``[N, ...]``
        (small: they are stored for every photo of an index)."""
        ...

    def score(self, text: str, evidence: Evidence) -> np.ndarray | None:
        """``[N]`` bonus for the query ``text`` over the photos of ``evidence``, to add
        to the model's scores; None when the source has nothing to say about ``text``
        (then the scores stay exactly as they are)."""
        ...


def fuse(
    scores: np.ndarray,
    texts: Sequence[str],
    sources: Sequence[EvidenceScorer],
    evidence: Mapping[str, Evidence],
) -> np.ndarray:
    """``scores [Q, N]`` (one row per query of ``texts``) plus each source's bonus, where
    ``evidence[source.name]`` holds that source's arrays for the same ``N`` photos. A
    source without stored evidence, or with nothing to say about a query, adds nothing.
    Returns a new array; ``scores`` is not changed."""
    out = np.array(scores, np.float32, copy=True)
    if out.ndim != 2 or out.shape[0] != len(texts):
        raise ValueError(f"scores {out.shape} do not match {len(texts)} queries")
    for src in sources:
        ev = evidence.get(src.name)
        if ev is None:
            continue
        for j, t in enumerate(texts):
            bonus = src.score(t, ev)
            if bonus is not None:
                out[j] += np.asarray(bonus, np.float32)
    return out


def read_evidence_config(bundle: Path) -> dict:
    """The bundle's ``evidence.json`` (``{}`` when it has none)."""
    path = Path(bundle) / EVIDENCE_FILE
    if not path.is_file():
        return {}
    try:
        cfg = json.loads(path.read_text())
        if not isinstance(cfg, dict):
            raise TypeError("not a JSON object")
    except (OSError, ValueError, TypeError) as e:
        raise ModelError(f"{path}: unreadable ({e}); reinstall vsekit or rebuild it") from e
    return cfg


def load_sources(bundle: Path, enabled_only: bool = True) -> list[EvidenceScorer]:
    """The evidence sources of the bundle at ``bundle``: those ``evidence.json`` names
    whose files are present (sha256 verified); with ``enabled_only``, only those whose
    fusion settings say ``"enabled": true``. ModelError for a file that is present but
    not the one recorded."""
    from vsekit.evidence.colour import ColourNames
    from vsekit.evidence.imagenet import ImageNetClasses
    from vsekit.evidence.objects import ObjectCounts

    makers = {ImageNetClasses.name: ImageNetClasses.from_bundle,
              ColourNames.name: ColourNames.from_bundle,
              ObjectCounts.name: ObjectCounts.from_bundle}  # fmt: skip
    out = []
    for name, cfg in read_evidence_config(bundle).items():
        make = makers.get(name)
        if make is None:
            continue  # a source this version does not know: off
        src = make(Path(bundle), cfg)
        if src is not None and (src.enabled or not enabled_only):
            out.append(src)
    return out
