"""The one in-memory form every dataset source loads into.

A :class:`Dataset` is a list of images (id, path, split) and a list of captions
(text, index of their image). Nothing assumes a fixed number of captions per
image. Precomputed layouts may also carry one feature row per image.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vsekit.errors import DatasetError  # noqa: F401  (re-exported)

#: Split names are normalised to these; the Karpathy/COCO name "val" becomes "dev".
SPLIT_ALIASES = {"val": "dev", "valid": "dev", "validation": "dev", "validate": "dev"}


def normalise_split(name: str) -> str:
    """Map a source's split name onto vsekit's (``val`` -> ``dev``)."""
    name = name.strip().lower()
    return SPLIT_ALIASES.get(name, name)


class FeatureRows:
    """A lazy row view over one or more (possibly memory-mapped) feature arrays.

    Precomputed features can be far larger than memory (COCO precomp is tens of GB), so
    selecting a split only renumbers rows; data is read when indexed.

    Args:
        parts: arrays with equal trailing shape, e.g. one ``np.load(..., mmap_mode="r")``
            per split.
        index: ``[n, 2]`` int array, row ``k`` of the view being ``parts[index[k,0]][index[k,1]]``.
    """

    def __init__(self, parts: Sequence[np.ndarray], index: np.ndarray) -> None:
        self.parts = list(parts)
        self.index = np.asarray(index, dtype=np.int64).reshape(-1, 2)
        tails = {p.shape[1:] for p in self.parts}
        if len(tails) > 1:
            raise DatasetError(f"feature arrays disagree on row shape: {sorted(tails)}")

    def __len__(self) -> int:
        return len(self.index)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self), *self.parts[0].shape[1:])

    def take(self, rows: np.ndarray) -> FeatureRows:
        """A view of the given rows (no data is read)."""
        return FeatureRows(self.parts, self.index[np.asarray(rows, dtype=np.int64)])

    def __getitem__(self, rows: int | slice | np.ndarray) -> np.ndarray:
        """Read rows into memory."""
        if isinstance(rows, int | np.integer):
            part, row = self.index[rows]
            return np.asarray(self.parts[part][row])
        sel = self.index[rows]
        out = np.empty((len(sel), *self.parts[0].shape[1:]), dtype=self.parts[0].dtype)
        for p, arr in enumerate(self.parts):
            mask = sel[:, 0] == p
            if mask.any():
                out[mask] = arr[sel[mask, 1]]
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[np.arange(len(self))]
        return out if dtype is None else out.astype(dtype)


@dataclass(frozen=True)
class ImageRecord:
    """One image. ``path`` is None for sources that only ship features (precomp)."""

    id: str
    path: Path | None
    split: str


@dataclass(frozen=True)
class Caption:
    """One caption of the image at ``image`` (an index into ``Dataset.images``)."""

    text: str
    image: int


@dataclass
class Dataset:
    """Images, their captions and their splits.

    Attributes:
        images: one record per image.
        captions: one record per caption; ``caption.image`` indexes ``images``.
        name: a label for reports (e.g. ``"flickr8k"``).
        features: optional lazy ``[n_images, ...]`` rows of precomputed image features,
            row ``i`` belonging to ``images[i]`` (the VSE++/SCAN precomp layout).
    """

    images: list[ImageRecord]
    captions: list[Caption]
    name: str = "dataset"
    features: FeatureRows | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        n = len(self.images)
        for k, cap in enumerate(self.captions):
            if not 0 <= cap.image < n:
                raise DatasetError(
                    f"{self.name}: caption {k} points to image {cap.image}, "
                    f"but there are {n} images"
                )
        if self.features is not None and len(self.features) != n:
            raise DatasetError(f"{self.name}: {len(self.features)} feature rows for {n} images")

    def __len__(self) -> int:
        return len(self.images)

    @property
    def splits(self) -> list[str]:
        """Split names in order of first appearance."""
        return list(dict.fromkeys(im.split for im in self.images))

    @property
    def caption_to_image(self) -> np.ndarray:
        """``[n_captions]`` int64 array: the image index of each caption."""
        return np.fromiter(
            (c.image for c in self.captions), dtype=np.int64, count=len(self.captions)
        )

    @property
    def texts(self) -> list[str]:
        return [c.text for c in self.captions]

    def captions_per_image(self) -> np.ndarray:
        """``[n_images]`` count of captions of each image."""
        return np.bincount(self.caption_to_image, minlength=len(self.images))

    def image_captions(self) -> list[list[int]]:
        """For each image, the indices of its captions (in caption order)."""
        out: list[list[int]] = [[] for _ in self.images]
        for k, c in enumerate(self.captions):
            out[c.image].append(k)
        return out

    def carve(self, split: str, n: int, new_split: str, seed: int = 0) -> Dataset:
        """The same dataset with ``n`` images of ``split``, chosen at random with
        ``seed``, moved to ``new_split`` (a validation slice carved from train)."""
        rows = [k for k, im in enumerate(self.images) if im.split == split]
        if not 0 < n < len(rows):
            raise DatasetError(f"{self.name}: cannot carve {n} of the {len(rows)} {split!r} images")
        chosen = set(np.random.default_rng(seed).choice(rows, n, replace=False).tolist())
        images = [
            ImageRecord(im.id, im.path, new_split) if k in chosen else im
            for k, im in enumerate(self.images)
        ]
        return Dataset(images, self.captions, self.name, self.features)

    def split(self, *names: str) -> Dataset:
        """The sub-dataset of the images in the given splits, and their captions.

        Image indices are renumbered; order is preserved. ``"val"`` means ``"dev"``.
        """
        wanted = {normalise_split(n) for n in names}
        unknown = wanted - set(self.splits)
        if unknown:
            raise DatasetError(
                f"{self.name}: no split named {sorted(unknown)}; splits are {self.splits}"
            )
        keep = [i for i, im in enumerate(self.images) if im.split in wanted]
        return self.subset(keep, name=f"{self.name}:{'+'.join(sorted(wanted))}")

    def subset(self, image_indices: Sequence[int], name: str | None = None) -> Dataset:
        """The images at ``image_indices`` (in that order) with all their captions."""
        remap = {old: new for new, old in enumerate(image_indices)}
        images = [self.images[i] for i in image_indices]
        captions = [Caption(c.text, remap[c.image]) for c in self.captions if c.image in remap]
        feats = None
        if self.features is not None:
            feats = self.features.take(np.asarray(image_indices, dtype=np.int64))
        return Dataset(images, captions, name or self.name, feats)

    def without_words(self, words: Iterable[str]) -> Dataset:
        """The captions that use none of ``words`` (as tokens, lower-cased), and the
        images that keep at least one caption: what a model trained on it never read
        (the zero-shot protocol)."""
        from vsekit.text.tokenizer import tokenize

        banned = {w.lower() for w in words}
        keep = [c for c in self.captions if not banned.intersection(tokenize(c.text))]
        kept = Dataset(self.images, keep, self.name, self.features)
        has = np.flatnonzero(kept.captions_per_image())
        return kept.subset(has.tolist())

    def split_sizes(self) -> dict[str, dict[str, int]]:
        """``{split: {"images": n, "captions": m}}``."""
        img = Counter(im.split for im in self.images)
        cap = Counter(self.images[c.image].split for c in self.captions)
        return {s: {"images": img[s], "captions": cap[s]} for s in self.splits}


def build_dataset(
    name: str,
    records: Iterable[tuple[str, Path | None, str]],
    captions: Iterable[tuple[str, str]],
) -> Dataset:
    """Assemble a :class:`Dataset` from ``(image_id, path, split)`` records and
    ``(image_id, caption_text)`` pairs. Images keep the order of ``records``.
    """
    images = [ImageRecord(i, p, normalise_split(s)) for i, p, s in records]
    index = {im.id: k for k, im in enumerate(images)}
    if len(index) != len(images):
        dup = next(i for i, n in Counter(im.id for im in images).items() if n > 1)
        raise DatasetError(f"{name}: image id {dup!r} appears twice")
    caps = []
    for image_id, text in captions:
        if image_id not in index:
            raise DatasetError(f"{name}: caption for unknown image {image_id!r}")
        caps.append(Caption(text, index[image_id]))
    return Dataset(images, caps, name)


def missing_files_error(source: Path, missing: list[str], what: str = "image") -> DatasetError:
    """A one-line error listing a few of the missing files."""
    shown = ", ".join(missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return DatasetError(f"{source}: {len(missing)} captioned {what} file(s) missing: {shown}{more}")
