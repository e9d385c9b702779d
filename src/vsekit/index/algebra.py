"""Query algebra: ``"a dog" + "beach" - "snow"``, weights, and image terms.

A query is a sum of weighted terms, as rclip's: each term is embedded on its own (a
sentence by the text encoder, a photo by the image encoder), the weighted unit vectors
are added, and the sum is scaled back to unit length::

    q = sum_i w_i e_i / || sum_i w_i e_i ||

so that a query of one term is exactly that term's embedding, and the hubness penalty
keeps the weight it has against a plain sentence. Photos are then ranked as for a
sentence (:func:`vsekit.index.query.search_text_embedding`).

Syntax (operators need a space on both sides, so ``black-and-white`` stays one word):

* ``"a dog" + "beach" - "snow"``: terms joined by `` + `` and `` - ``; quotes are
  optional around a term without operators in it;
* ``2:"golden retriever"`` or ``0.5:#12``: a weight before a quoted term, an indexed
  photo or a path (``2:dog`` stays the text "2:dog");
* ``#12``: the indexed photo with id 12 (CLI, Python and the service);
* ``./beach.jpg``, ``~/x.png``, ``/abs/y.jpg``: a photo file (CLI and Python only: the
  service never reads paths from a query).

A query that is none of these and has no operator is plain text, whatever quotes or
slashes it holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: a weight: only before a quote, a "#id" or a path, so that "12:30 train" stays text
_WEIGHT = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))\s*:\s*(?=[\"#/.~])")
_ID = re.compile(r"^#(\d+)$")
_PATH_START = ("/", "./", "../", "~/")


@dataclass(frozen=True)
class Term:
    """One weighted part of a query: ``text``, an indexed photo ``file_id``, or a
    photo file ``path``."""

    weight: float
    text: str | None = None
    file_id: int | None = None
    path: str | None = None

    def describe(self) -> str:
        what = self.text if self.text is not None else f"#{self.file_id}" if self.path is None \
            else self.path  # fmt: skip
        return f"{self.weight:g}:{what!r}"


def _split_lenient(query: str) -> list[tuple[int, str]]:
    """:func:`_split`, or the whole query as one term when its quotes do not pair and
    it has no operator (one that does is malformed algebra: the error says so)."""
    try:
        return _split(query)
    except ValueError:
        if re.search(r"\s[+-]\s", query):
            raise
        return [(1, query.strip())]


def _split(query: str) -> list[tuple[int, str]]:
    """``[(sign, raw term), ...]``: split at `` + `` / `` - `` outside quotes."""
    parts: list[tuple[int, str]] = []
    sign, buf, quoted, i = 1, [], False, 0
    while i < len(query):
        c = query[i]
        if c == '"':
            quoted = not quoted
        is_op = (not quoted and c in "+-" and i > 0 and query[i - 1].isspace()
                 and i + 1 < len(query) and query[i + 1].isspace())  # fmt: skip
        if is_op:
            parts.append((sign, "".join(buf).strip()))
            sign, buf = (1 if c == "+" else -1), []
        else:
            buf.append(c)
        i += 1
    if quoted:
        raise ValueError("query: a quote is not closed")
    parts.append((sign, "".join(buf).strip()))
    return parts


#: the largest weight a term may have (beyond it float32 sums lose the other terms)
MAX_WEIGHT = 1000.0


def parse_query(query: str, allow_paths: bool = True) -> list[Term]:
    """The terms of ``query``; ValueError naming the first malformed one. A query
    without operators that is not a quoted term, an ``#ID``, a weighted term or (where
    ``allow_paths``) a path is plain text, quotes and slashes included (``a sign that
    says "stop"``, ``/r/pics``)."""
    parts = _split_lenient(query)
    if len(parts) == 1 and parts[0][0] == 1:
        raw = parts[0][1]
        quoted = len(raw) >= 2 and raw[0] == raw[-1] == '"' and '"' not in raw[1:-1]
        special = quoted or _ID.match(raw) or _WEIGHT.match(raw)
        path = allow_paths and raw.startswith(_PATH_START) and " " not in raw
        if not special and not path:
            return [Term(1.0, text=raw)]
    terms: list[Term] = []
    for sign, raw in _split(query):
        if not raw:
            raise ValueError(f"query: an empty term in {query!r}")
        weight = 1.0
        m = _WEIGHT.match(raw)
        if m:
            weight, raw = float(m.group(1)), raw[m.end() :].strip()
            if abs(weight) > MAX_WEIGHT:
                raise ValueError(f"query: weight {m.group(1)}: at most {MAX_WEIGHT:g} either way")
        weight *= sign
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            text = raw[1:-1].strip()
            if not text:
                raise ValueError("query: an empty quoted term")
            terms.append(Term(weight, text=text))
        elif _ID.match(raw):
            terms.append(Term(weight, file_id=int(raw[1:])))
        elif raw.startswith(_PATH_START) and " " not in raw.strip():
            if not allow_paths:
                raise ValueError(f"query: {raw}: paths are not read here; use #ID for "
                                 "an indexed photo")  # fmt: skip
            terms.append(Term(weight, path=str(Path(raw).expanduser())))
        else:
            if '"' in raw:
                raise ValueError(f"query: {raw}: quote the whole term")
            terms.append(Term(weight, text=raw))
    return terms


def combine(vectors: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """``[D]``: the unit-length weighted sum of unit ``vectors``; ValueError when the
    terms cancel out."""
    total = np.zeros_like(np.asarray(vectors[0], np.float32))
    for v, w in zip(vectors, weights, strict=True):
        total += np.float32(w) * np.asarray(v, np.float32)
    norm = float(np.linalg.norm(total))
    if norm < 1e-6:
        raise ValueError("query: the terms cancel each other out")
    return total / norm


def query_vector(
    terms: list[Term],
    encode_text: Callable[[str], np.ndarray],
    encode_image: Callable[[str], np.ndarray],
    indexed: Callable[[int], np.ndarray | None],
) -> np.ndarray:
    """``[D]`` unit query vector of ``terms``; ``indexed(file_id)`` gives an indexed
    photo's embedding (None: not indexed, a ValueError naming the id)."""
    vectors = []
    for t in terms:
        if t.text is not None:
            v = encode_text(t.text)
        elif t.file_id is not None:
            v = indexed(t.file_id)
            if v is None:
                raise ValueError(f"query: #{t.file_id}: no indexed photo has this id")
        else:
            v = encode_image(t.path)
        vectors.append(np.asarray(v, np.float32).reshape(-1))
    return combine(vectors, [t.weight for t in terms])
