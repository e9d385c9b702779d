"""Karpathy's split files: ``dataset_flickr8k.json``, ``dataset_flickr30k.json``,
``dataset_coco.json``.

Each ``images[]`` entry has ``filename``, optional ``filepath`` (COCO's ``train2014``),
``split`` (train / val / test / restval) and ``sentences[]`` with ``raw`` and ``tokens``.
``val`` is renamed ``dev``.
"""

from __future__ import annotations

from pathlib import Path

from vsekit.lab.data._io import read_json, require_field
from vsekit.lab.data.dataset import Dataset, DatasetError, build_dataset, missing_files_error


def load_karpathy(
    path: str | Path,
    image_root: str | Path | None = None,
    fold_restval: bool = True,
) -> Dataset:
    """Load a Karpathy-split JSON file.

    Args:
        path: the JSON file.
        image_root: folder the ``filepath/filename`` paths are relative to. If given,
            every image must exist; if None, images carry no path.
        fold_restval: put the ``restval`` images into ``train`` (the usual practice).
    """
    path = Path(path)
    data = read_json(path)
    entries = require_field(data, "images", str(path))
    if not isinstance(entries, list):
        raise DatasetError(f"{path}: field 'images' must be a list")
    root = Path(image_root) if image_root is not None else None
    records, captions = [], []
    for k, e in enumerate(entries):
        where = f"{path}: images[{k}]"
        fname = require_field(e, "filename", where)
        rel = Path(e.get("filepath") or "") / fname
        split = str(require_field(e, "split", where))
        if fold_restval and split == "restval":
            split = "train"
        image_id = str(rel)
        records.append((image_id, (root / rel) if root is not None else None, split))
        for j, s in enumerate(require_field(e, "sentences", where)):
            raw = s.get("raw") if isinstance(s, dict) else None
            if raw is None:
                tokens = s.get("tokens") if isinstance(s, dict) else None
                if tokens is None:
                    raise DatasetError(f"{where}.sentences[{j}]: needs 'raw' or 'tokens'")
                raw = " ".join(tokens)
            captions.append((image_id, str(raw).strip()))
    if root is not None:
        missing = [str(p) for _, p, _ in records if not p.is_file()]
        if missing:
            raise missing_files_error(root, missing)
    name = str(data.get("dataset") or path.stem.removeprefix("dataset_"))
    return build_dataset(name, records, captions)
