"""MSR-VTT (Xu et al. 2016) in its JSON release, which Word2VisualVec section 4.4.2 trains
on: ``train_val_videodatainfo.json`` / ``test_videodatainfo.json`` (or any
``*videodatainfo*.json``), each ``{"videos": [{"video_id", "split"}], "sentences":
[{"video_id", "caption"}]}``; videos ``<video_id>.mp4`` in ``TrainValVideo/``,
``TestVideo/`` or ``videos/``. The split ``validate`` becomes ``dev``.
"""

from __future__ import annotations

from pathlib import Path

from vsekit.lab.data._io import find_file, read_json, require_field
from vsekit.lab.data.dataset import Dataset, DatasetError, build_dataset, missing_files_error

VIDEO_DIRS = ("TrainValVideo", "TestVideo", "videos", "video", ".")
VIDEO_EXTS = (".mp4", ".webm", ".mkv", ".avi")
SPLITS = {"train": "train", "validate": "dev", "val": "dev", "test": "test"}


def find_msrvtt(root: Path) -> list[Path]:
    return sorted(root.glob("*videodatainfo*.json"))


def load_msrvtt(root: str | Path, missing: str = "error") -> Dataset:
    """Load every ``*videodatainfo*.json`` under ``root`` (or the one file given)."""
    root = Path(root)
    files = [root] if root.is_file() else find_msrvtt(root)
    base = root.parent if root.is_file() else root
    if not files:
        raise DatasetError(f"{root}: no *videodatainfo*.json")
    records: dict[str, tuple[str, Path | None, str]] = {}
    captions = []
    for f in files:
        data = read_json(f)
        for k, v in enumerate(require_field(data, "videos", str(f))):
            where = f"{f}: videos[{k}]"
            vid = str(require_field(v, "video_id", where))
            split = str(require_field(v, "split", where)).lower()
            if split not in SPLITS:
                raise DatasetError(f"{where}: unknown split {split!r}")
            records.setdefault(
                vid, (vid, find_file(base, VIDEO_DIRS, vid, VIDEO_EXTS), SPLITS[split])
            )
        for k, s in enumerate(require_field(data, "sentences", str(f))):
            where = f"{f}: sentences[{k}]"
            vid = str(require_field(s, "video_id", where))
            if vid not in records:
                raise DatasetError(f"{where}: video {vid!r} is not in 'videos'")
            captions.append((vid, str(require_field(s, "caption", where)).strip()))
    absent = [v for v, p, _ in records.values() if p is None]
    if absent and missing == "error":
        raise missing_files_error(base, absent, "video")
    keep = {v for v, p, _ in records.values() if p is not None}
    recs = [r for r in records.values() if r[0] in keep]
    return build_dataset("msrvtt", recs, [(v, t) for v, t in captions if v in keep])
