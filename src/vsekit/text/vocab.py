"""Word vocabulary, built from the training split only."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from vsekit.errors import DatasetError
from vsekit.fsio import atomic_write

PAD, UNK, START, END = "<pad>", "<unk>", "<start>", "<end>"
DEFAULT_SPECIALS = (PAD, UNK, START, END)


class Vocabulary:
    """A word <-> id map. Specials come first, so ``<pad>`` is 0 and ``<unk>`` is 1.

    Words are ordered by decreasing count, ties alphabetically, so a build is
    deterministic.
    """

    def __init__(
        self,
        words: Sequence[str],
        specials: Sequence[str] = DEFAULT_SPECIALS,
        counts: dict[str, int] | None = None,
    ) -> None:
        self.specials = tuple(specials)
        self.itos: list[str] = list(self.specials) + [w for w in words if w not in self.specials]
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("vocabulary words must be unique")
        self.counts = dict(counts or {})
        self.unk_id = self.stoi.get(UNK)
        #: the first id of words added by :meth:`extended` (a vocabulary expansion):
        #: the model knows them only by analogy, never from a photo's caption
        self.analogy_from = len(self.itos)

    @classmethod
    def build(
        cls,
        token_lists: Iterable[Sequence[str]],
        max_size: int | None = None,
        min_count: int = 1,
        specials: Sequence[str] = DEFAULT_SPECIALS,
    ) -> Vocabulary:
        """Count words and keep those seen ``min_count`` times or more, at most
        ``max_size`` of them (the most frequent), not counting specials.

        Pass only the TRAIN split's captions: dev/test words must stay unknown.
        """
        counts = Counter(w for toks in token_lists for w in toks)
        words = sorted(
            (w for w, c in counts.items() if c >= min_count and w not in specials),
            key=lambda w: (-counts[w], w),
        )
        if max_size is not None:
            words = words[:max_size]
        return cls(words, specials, {w: counts[w] for w in words})

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: str) -> bool:
        return word in self.stoi

    def encode(self, tokens: Sequence[str], add_bounds: bool = False) -> list[int]:
        """Token ids; unknown words map to ``<unk>``. ``add_bounds`` wraps in start/end."""
        if self.unk_id is None:
            missing = [t for t in tokens if t not in self.stoi]
            if missing:
                raise KeyError(f"words not in vocabulary and no {UNK}: {missing[:5]}")
        ids = [self.stoi.get(t, self.unk_id) for t in tokens]
        if add_bounds:
            ids = [self.stoi[START], *ids, self.stoi[END]]
        return ids

    def extended(self, words: Sequence[str]) -> Vocabulary:
        """This vocabulary with ``words`` appended (a vocabulary expansion): every
        existing word keeps its id; words already present are an error."""
        dup = [w for w in words if w in self.stoi]
        if dup:
            raise ValueError(f"expansion words already in the vocabulary: {dup[:5]}")
        base = self.itos[len(self.specials) :]
        out = Vocabulary([*base, *words], self.specials, self.counts)
        out.analogy_from = self.analogy_from
        return out

    def by_analogy(self, word: str) -> bool:
        """``word`` came from a vocabulary expansion, not from training captions."""
        i = self.stoi.get(word)
        return i is not None and i >= self.analogy_from

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[i] for i in ids]

    def to_dict(self) -> dict:
        return {
            "specials": list(self.specials),
            "words": self.itos[len(self.specials) :],
            "counts": self.counts,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Vocabulary:
        return cls(d["words"], d.get("specials", DEFAULT_SPECIALS), d.get("counts"))

    def save(self, path: str | Path) -> None:
        """Write JSON atomically (temp file + rename)."""
        atomic_write(path, json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        path = Path(path)
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}:{e.lineno}: invalid vocabulary JSON ({e.msg})") from e
        if not isinstance(d, dict) or "words" not in d:
            raise DatasetError(f"{path}: missing field 'words'")
        return cls.from_dict(d)
