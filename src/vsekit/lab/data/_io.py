"""Small helpers shared by the dataset loaders."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vsekit.lab.data.dataset import DatasetError


def read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file, with CRLF/LF ends and a BOM removed."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    return text.splitlines()


def read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from e


def find_file(root: Path, dirs: Sequence[str], stem: str, exts: Sequence[str]) -> Path | None:
    """The first ``root/<dir>/<stem><ext>`` that exists (video sets keep clips by id
    under one of several folder names and containers)."""
    for d in dirs:
        for ext in exts:
            p = root / d / f"{stem}{ext}"
            if p.is_file():
                return p
    return None


def require_field(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise DatasetError(f"{where}: missing field {key!r}")
    return obj[key]
