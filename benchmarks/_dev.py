"""The Flickr8k dev split read straight from its files (no vsekit import), so that a
benchmark can score two code trees the same way: ``(image paths, captions, caption ->
image index)`` in the files' order."""

from __future__ import annotations

from pathlib import Path

F8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def dev_split(root: Path = F8K) -> tuple[list[str], list[str], list[int]]:
    names = (root / "Flickr_8k.devImages.txt").read_text().split()
    pos = {n: k for k, n in enumerate(names)}
    texts, c2i = [], []
    for line in (root / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines():
        key, _, caption = line.partition("\t")
        name = key.split("#")[0]
        if name in pos and caption.strip():
            texts.append(caption.strip())
            c2i.append(pos[name])
    return [str(root / "images" / n) for n in names], texts, c2i
