"""MSCOCO's own caption JSON (``annotations/captions_train2014.json`` layout).

``images[]`` have ``id`` and ``file_name``; ``annotations[]`` have ``image_id`` and
``caption``. Splits come from split lists (text files of image ids or file names, one
per line); without lists, from the file name (``captions_val2014.json`` -> ``dev``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from vsekit.lab.data._io import read_json, read_lines, require_field
from vsekit.lab.data.dataset import (
    Dataset,
    DatasetError,
    build_dataset,
    missing_files_error,
    normalise_split,
)

UNASSIGNED = "unassigned"


def _split_from_name(path: Path) -> str:
    m = re.search(r"captions_([a-z]+)\d*", path.stem)
    return normalise_split(m.group(1)) if m else "train"


def load_coco(
    annotation_files: str | Path | Sequence[str | Path],
    image_root: str | Path | None = None,
    split_lists: Mapping[str, str | Path] | None = None,
) -> Dataset:
    """Load one or more COCO caption files.

    Args:
        annotation_files: ``captions_*.json`` file(s).
        image_root: folder holding the images, either directly or in a sub-folder named
            like the annotation file (``train2014/``). If given, images must exist.
        split_lists: ``{split: file}``; each file lists image ids or file names. Images
            in no list get the split ``"unassigned"``.
    """
    files = (
        [Path(annotation_files)]
        if isinstance(annotation_files, str | Path)
        else [Path(f) for f in annotation_files]
    )
    listed: dict[str, str] = {}
    for split, f in (split_lists or {}).items():
        for line in read_lines(Path(f)):
            if line.strip():
                listed[line.strip()] = normalise_split(split)

    root = Path(image_root) if image_root is not None else None
    records, captions = [], []
    for f in files:
        data = read_json(f)
        default_split = _split_from_name(f)
        subdir = re.sub(r"^captions_", "", f.stem)
        ids: dict[int, str] = {}
        for k, im in enumerate(require_field(data, "images", str(f))):
            where = f"{f}: images[{k}]"
            iid, fname = require_field(im, "id", where), require_field(im, "file_name", where)
            ids[iid] = fname
            if split_lists:
                split = listed.get(str(iid), listed.get(fname, UNASSIGNED))
            else:
                split = default_split
            p = None
            if root is not None:
                p = root / fname if (root / fname).is_file() else root / subdir / fname
            records.append((fname, p, split))
        for k, a in enumerate(require_field(data, "annotations", str(f))):
            where = f"{f}: annotations[{k}]"
            iid = require_field(a, "image_id", where)
            if iid not in ids:
                raise DatasetError(f"{where}: image_id {iid} not in images[]")
            captions.append((ids[iid], str(require_field(a, "caption", where)).strip()))
    if root is not None:
        missing = [str(p) for _, p, _ in records if not p.is_file()]
        if missing:
            raise missing_files_error(root, missing)
    return build_dataset("coco", records, captions)


def find_coco(root: Path) -> tuple[list[Path], dict[str, Path]]:
    """Annotation files and split lists of a COCO folder (``annotations/captions_*.json``,
    ``splits/{split}.txt``)."""
    files = sorted((root / "annotations").glob("captions_*.json")) or sorted(
        root.glob("captions_*.json")
    )
    if not files:
        raise DatasetError(f"{root}: no annotations/captions_*.json")
    lists = {p.stem: p for p in sorted((root / "splits").glob("*.txt"))}
    return files, lists
