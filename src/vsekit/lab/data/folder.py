"""Your own data: a folder of images or videos plus a captions file.

The captions file is JSONL (one object per line) or CSV (with a header row). Each record
gives the image or video path (field ``image``; also accepted: ``video``, ``file``,
``filename``, ``path``),
relative to the folder or absolute, and the caption (``caption`` or ``text``). An optional
``split`` field assigns the split; the default is ``train``. An image may have any number
of captions.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from vsekit.lab.data._io import read_lines
from vsekit.lab.data.dataset import Dataset, DatasetError, build_dataset, missing_files_error

CAPTION_FILES = ("captions.jsonl", "captions.csv")
_IMAGE_KEYS = ("image", "video", "file", "filename", "path")
_TEXT_KEYS = ("caption", "text")


def find_captions_file(root: Path) -> Path | None:
    for name in CAPTION_FILES:
        if (root / name).is_file():
            return root / name
    return None


def _pick(rec: dict, keys: tuple[str, ...], where: str) -> str:
    for k in keys:
        if rec.get(k) not in (None, ""):
            return str(rec[k])
    raise DatasetError(f"{where}: missing field {keys[0]!r} (or {', '.join(keys[1:])})")


def _records(path: Path) -> list[tuple[str, dict]]:
    """``(where, record)`` pairs, ``where`` naming the file and line."""
    out = []
    if path.suffix.lower() == ".csv":
        lines = read_lines(path)
        for lineno, row in enumerate(csv.DictReader(lines), 2):
            out.append((f"{path}:{lineno}", row))
        return out
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}:{lineno}: invalid JSON ({e.msg})") from e
        if not isinstance(rec, dict):
            raise DatasetError(f"{path}:{lineno}: expected a JSON object")
        out.append((f"{path}:{lineno}", rec))
    return out


def load_folder(root: str | Path, captions_file: str | Path | None = None) -> Dataset:
    """Load a folder of images and its ``captions.jsonl`` / ``captions.csv``."""
    root = Path(root)
    cap_path = Path(captions_file) if captions_file is not None else find_captions_file(root)
    if cap_path is None:
        raise DatasetError(f"{root}: no {' or '.join(CAPTION_FILES)}")
    records: dict[str, tuple[str, Path, str]] = {}
    captions = []
    for where, rec in _records(cap_path):
        rel = _pick(rec, _IMAGE_KEYS, where)
        text = _pick(rec, _TEXT_KEYS, where).strip()
        split = str(rec.get("split") or "train")
        prev = records.get(rel)
        if prev is not None and prev[2] != split:
            raise DatasetError(f"{where}: image {rel!r} already in split {prev[2]!r}")
        records.setdefault(rel, (rel, root / rel, split))
        captions.append((rel, text))
    missing = [r for r, p, _ in records.values() if not p.is_file()]
    if missing:
        raise missing_files_error(root, missing)
    return build_dataset(root.name or "folder", list(records.values()), captions)
