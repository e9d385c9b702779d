"""MSVD, the Microsoft Research Video Description corpus (Chen & Dolan 2011), in the
layout its common release uses (Word2VisualVec section 4.3, Table 5).

* Descriptions: ``AllVideoDescriptions.txt``, one ``<clip> <description>`` line each
  (lines starting with ``#`` are comments), or the original
  ``MSR Video Description Corpus.csv`` (``VideoID, Start, End, ..., Language,
  Description``; English rows only, clip ``<VideoID>_<Start>_<End>``).
* Videos: ``YouTubeClips/<clip>.avi`` (also ``videos/``; any of mp4/avi/webm/mkv/mov).
* Splits: with ``youtube_mapping.txt`` (``<clip> vid<N>`` lines), the partition of Xu
  et al. / Venugopalan et al. that Table 5 uses: vid1-1200 train, 1201-1300 dev,
  1301-1970 test. Without it every clip is ``unassigned``; pass your own split then.

Clips without a video file are an error naming a few of them (``missing="skip"`` drops
them instead: the public release lacks a few dozen deleted YouTube videos).
"""

from __future__ import annotations

import csv
from pathlib import Path

from vsekit.lab.data._io import find_file, read_lines
from vsekit.lab.data.dataset import Dataset, DatasetError, build_dataset, missing_files_error

DESCRIPTION_FILES = ("AllVideoDescriptions.txt", "MSR Video Description Corpus.csv")
VIDEO_DIRS = ("YouTubeClips", "videos", "clips", ".")
MAPPING_FILE = "youtube_mapping.txt"
VIDEO_EXTS = (".avi", ".mp4", ".webm", ".mkv", ".mov")
SPLIT_BOUNDS = (("train", 1200), ("dev", 1300), ("test", 1970))


def find_msvd(root: Path) -> Path | None:
    for name in DESCRIPTION_FILES:
        if (root / name).is_file():
            return root / name
    return None


def _descriptions(path: Path) -> list[tuple[str, str]]:
    out = []
    if path.suffix.lower() == ".csv":
        rows = csv.DictReader(read_lines(path))
        for lineno, row in enumerate(rows, 2):
            try:
                if (row["Language"] or "").strip().lower() != "english":
                    continue
                clip = f"{row['VideoID']}_{row['Start']}_{row['End']}"
                text = (row["Description"] or "").strip()
            except KeyError as e:
                raise DatasetError(f"{path}:{lineno}: missing column {e.args[0]!r}") from e
            if text:
                out.append((clip, text))
        return out
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip() or line.startswith("#"):
            continue
        clip, _, text = line.strip().partition(" ")
        if not text.strip():
            raise DatasetError(f"{path}:{lineno}: expected '<clip> <description>'")
        out.append((clip, text.strip()))
    return out


def _splits(root: Path) -> dict[str, str]:
    f = root / MAPPING_FILE
    if not f.is_file():
        return {}
    out = {}
    for lineno, line in enumerate(read_lines(f), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].startswith("vid") or not parts[1][3:].isdigit():
            raise DatasetError(f"{f}:{lineno}: expected '<clip> vid<N>'")
        n = int(parts[1][3:])
        out[parts[0]] = next((s for s, top in SPLIT_BOUNDS if n <= top), "unassigned")
    return out


def load_msvd(root: str | Path, missing: str = "error") -> Dataset:
    """Load MSVD from ``root`` (see the module docstring)."""
    root = Path(root)
    desc = find_msvd(root)
    if desc is None:
        raise DatasetError(f"{root}: no {' or '.join(DESCRIPTION_FILES)}")
    pairs = _descriptions(desc)
    if not pairs:
        raise DatasetError(f"{desc}: no descriptions")
    splits = _splits(root)
    clips = list(dict.fromkeys(c for c, _ in pairs))
    files = {c: find_file(root, VIDEO_DIRS, c, VIDEO_EXTS) for c in clips}
    absent = [c for c in clips if files[c] is None]
    if absent and missing == "error":
        raise missing_files_error(root, absent, "video")
    keep = [c for c in clips if files[c] is not None]
    records = [(c, files[c], splits.get(c, "unassigned")) for c in keep]
    kept = set(keep)
    return build_dataset("msvd", records, [(c, t) for c, t in pairs if c in kept])
