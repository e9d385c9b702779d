"""Flickr8k in its original text layout.

``Flickr8k.token.txt`` holds ``<image>.jpg#<n>\\t<caption>`` lines; the split files
``Flickr_8k.{train,dev,test}Images.txt`` list image names. Any split file may be
absent; captioned images listed in no split get the split ``"unassigned"``.
Handled quirks of the real files: ids written ``name.jpg.1#0``, CRLF line ends,
a UTF-8 BOM, blank lines.
"""

from __future__ import annotations

import re
from pathlib import Path

from vsekit.lab.data._io import read_lines
from vsekit.lab.data.dataset import Dataset, DatasetError, build_dataset, missing_files_error

TOKEN_FILE = "Flickr8k.token.txt"
SPLIT_FILES = {
    "train": "Flickr_8k.trainImages.txt",
    "dev": "Flickr_8k.devImages.txt",
    "test": "Flickr_8k.testImages.txt",
}
IMAGE_DIRS = ("images", "Flicker8k_Dataset", "Flickr8k_Dataset", "Flickr8k_images")
TEXT_DIRS = (".", "Flickr8k_text", "text")
UNASSIGNED = "unassigned"

_ID = re.compile(r"^(?P<name>.+?\.(?:jpe?g|png))(?:\.\d+)?#(?P<n>\d+)$", re.IGNORECASE)


def find_text_dir(root: Path) -> Path | None:
    for d in TEXT_DIRS:
        if (root / d / TOKEN_FILE).is_file():
            return (root / d).resolve() if d != "." else root
    return None


def _image_dir(root: Path) -> Path:
    for d in IMAGE_DIRS:
        if (root / d).is_dir():
            return root / d
    return root


def parse_token_file(path: Path) -> list[tuple[str, str]]:
    """``(image_name, caption)`` pairs, in file order."""
    pairs = []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        key, sep, caption = line.partition("\t")
        m = _ID.match(key.strip())
        if not sep or m is None:
            raise DatasetError(
                f"{path}:{lineno}: expected '<image>.jpg#<n><TAB><caption>', got {line[:60]!r}"
            )
        pairs.append((m["name"], caption.strip()))
    return pairs


def load_flickr8k(root: str | Path, images_dir: str | Path | None = None) -> Dataset:
    """Load Flickr8k (or Flickr30k in the same layout) from ``root``.

    Args:
        root: folder holding ``Flickr8k.token.txt`` (directly or in ``Flickr8k_text/``).
        images_dir: where the JPEGs are; default ``root/images`` or ``root/Flicker8k_Dataset``.

    Raises:
        DatasetError: malformed lines (with file and line number), or captioned images
            whose file is missing (lists a few of them).
    """
    root = Path(root)
    text_dir = find_text_dir(root)
    if text_dir is None:
        raise DatasetError(f"{root}: no {TOKEN_FILE} here or in Flickr8k_text/")
    img_dir = Path(images_dir) if images_dir is not None else _image_dir(root)
    pairs = parse_token_file(text_dir / TOKEN_FILE)

    split_of: dict[str, str] = {}
    for split, fname in SPLIT_FILES.items():
        f = text_dir / fname
        if f.is_file():
            for name in read_lines(f):
                if name.strip():
                    split_of[name.strip()] = split

    names = list(dict.fromkeys(name for name, _ in pairs))
    missing = [n for n in names if not (img_dir / n).is_file()]
    if missing:
        raise missing_files_error(img_dir, missing)
    records = [(n, img_dir / n, split_of.get(n, UNASSIGNED)) for n in names]
    return build_dataset("flickr8k", records, pairs)
