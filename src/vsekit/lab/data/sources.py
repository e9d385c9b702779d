"""One entry point for every dataset source: ``load_dataset(path, format=None)``.

A source is one registered loader taking a path; ``detect_format`` picks it from the
files present when no format is named. Adding a source is one ``@register_source``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vsekit.lab.data._io import read_json
from vsekit.lab.data.coco import find_coco, load_coco
from vsekit.lab.data.dataset import Dataset, DatasetError
from vsekit.lab.data.flickr8k import find_text_dir, load_flickr8k
from vsekit.lab.data.folder import find_captions_file, load_folder
from vsekit.lab.data.karpathy import load_karpathy
from vsekit.lab.data.msrvtt import find_msrvtt, load_msrvtt
from vsekit.lab.data.msvd import find_msvd, load_msvd
from vsekit.lab.data.precomp import load_precomp, precomp_splits
from vsekit.registry import Registry

Loader = Callable[..., Dataset]
SOURCES: Registry[Loader] = Registry("dataset format")
register_source = SOURCES.register
list_sources = SOURCES.names


@register_source("flickr8k")
def _flickr8k(path: Path, **kw) -> Dataset:
    return load_flickr8k(path, **kw)


@register_source("karpathy")
def _karpathy(path: Path, **kw) -> Dataset:
    if path.is_dir():
        found = sorted(path.glob("dataset_*.json"))
        if not found:
            raise DatasetError(f"{path}: no dataset_*.json")
        kw.setdefault("image_root", path / "images" if (path / "images").is_dir() else None)
        path = found[0]
    return load_karpathy(path, **kw)


@register_source("precomp")
def _precomp(path: Path, **kw) -> Dataset:
    return load_precomp(path, **kw)


@register_source("coco")
def _coco(path: Path, **kw) -> Dataset:
    if path.is_file():
        return load_coco(path, **kw)
    files, lists = find_coco(path)
    kw.setdefault("split_lists", lists or None)
    kw.setdefault("image_root", path)
    return load_coco(files, **kw)


@register_source("msvd")
def _msvd(path: Path, **kw) -> Dataset:
    return load_msvd(path, **kw)


@register_source("msrvtt")
def _msrvtt(path: Path, **kw) -> Dataset:
    return load_msrvtt(path, **kw)


@register_source("folder")
def _folder(path: Path, **kw) -> Dataset:
    if path.is_file():
        return load_folder(path.parent, captions_file=path, **kw)
    return load_folder(path, **kw)


def detect_format(path: str | Path) -> str:
    """Guess the source format of ``path`` from the files it holds."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such file or folder")
    if path.is_file():
        if path.suffix.lower() in (".jsonl", ".csv"):
            return "folder"
        if path.suffix.lower() == ".json":
            data = read_json(path)
            if isinstance(data, dict) and "annotations" in data:
                return "coco"
            if isinstance(data, dict) and "images" in data:
                return "karpathy"
            if isinstance(data, dict) and "videos" in data and "sentences" in data:
                return "msrvtt"
        raise DatasetError(f"{path}: cannot tell the dataset format; pass --format")
    if find_text_dir(path) is not None:
        return "flickr8k"
    if precomp_splits(path):
        return "precomp"
    if find_msvd(path) is not None:
        return "msvd"
    if find_msrvtt(path):
        return "msrvtt"
    if find_captions_file(path) is not None:
        return "folder"
    if list((path / "annotations").glob("captions_*.json")) or list(path.glob("captions_*.json")):
        return "coco"
    if list(path.glob("dataset_*.json")):
        return "karpathy"
    raise DatasetError(
        f"{path}: cannot tell the dataset format (no Flickr8k.token.txt, *_caps.txt, "
        "captions.jsonl/csv, annotations/captions_*.json, dataset_*.json, "
        "AllVideoDescriptions.txt or *videodatainfo*.json); pass --format"
    )


def load_dataset(path: str | Path, format: str | None = None, **kwargs) -> Dataset:
    """Load any supported dataset. ``format`` is one of :func:`list_sources` or None to detect.

    Extra keyword arguments go to the source's loader (e.g. ``fold_restval=False``).
    """
    path = Path(path).expanduser()
    fmt = format or detect_format(path)
    if fmt not in SOURCES:
        raise DatasetError(f"unknown dataset format {fmt!r}; known: {', '.join(list_sources())}")
    return SOURCES.get(fmt)(path, **kwargs)
