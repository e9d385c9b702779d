"""The relevance cue: a search score read as a strong, weak or no match.

Search scores are raw (the similarity less the photo's CSLS penalty): a good hit scores
about 0.25-0.40 with the default model, an unrelated photo 0.10-0.13, and the numbers
mean nothing to a user. A bundle may ship ``relevance.json``, two thresholds on that same
score, calibrated on held-out captions (``benchmarks/relevance.py``: Flickr8k dev, every
caption against every photo)::

    score >= strong          "strong"  (as well as half the captions score with their own photo)
    weak <= score < strong   "weak"
    score < weak             "none"    (where unrelated caption-photo pairs fall)

Short queries score lower than sentences: "a dog" scores its dogs about as a sentence
scores a photo it was not written for. So the file may hold a second pair, ``short``,
found by the same two rules on short texts (each dev caption's first noun phrase: "a
black dog", "two young girls"), and the largest number of words a query may have to be
read with it (``short_queries.max_words``: the words of the query's text terms,
:func:`vsekit.index.query.query_words`). A file without it reads every query with the
sentence pair.

One set of thresholds per image precision (``int8``, ``fp32``), since the graphs give
slightly different scores, each with the fingerprint of the model it was measured with
(the image graph is part of it). The file is listed in the bundle's manifest (verified
with the others); a model without an entry of its own fingerprint gets no cue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

RELEVANCE_FILE = "relevance.json"
CUES = ("strong", "weak", "none")


@dataclass(frozen=True)
class Relevance:
    """Two thresholds on a text search's score (``weak <= strong``), calibrated on
    sentences, and optionally a second ``short`` pair for queries of at most
    ``short_words`` words."""

    strong: float
    weak: float
    short: Relevance | None = None
    short_words: int = 0

    def bands(self, words: int | None = None) -> Relevance:
        """The thresholds for a query of ``words`` words (None: not known, read as a
        sentence)."""
        if self.short is not None and words is not None and 0 < words <= self.short_words:
            return self.short
        return self

    def cue(self, score: float, words: int | None = None) -> str:
        """``strong``, ``weak`` or ``none`` for a text search's ``score``, with the
        thresholds of a query of ``words`` words (:meth:`bands`)."""
        t = self.bands(words)
        if score >= t.strong:
            return "strong"
        return "weak" if score >= t.weak else "none"


def read_relevance(bundle: Path, fingerprint: str, precision: str) -> Relevance | None:
    """The thresholds of ``bundle`` for a model with ``fingerprint`` running its image
    graph in ``precision``; None when the bundle has no calibration for it (none at all,
    none for that precision, or one measured with other weights). ValueError naming the
    file if malformed."""
    path = Path(bundle) / RELEVANCE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        cal = data["by_precision"].get(precision)
        if cal is None or cal["model_fingerprint"] != fingerprint:
            return None
        pairs = [(float(cal["strong"]), float(cal["weak"]))]
        if "short" in cal:  # a file from before the short queries' pair has none
            pairs.append((float(cal["short"]["strong"]), float(cal["short"]["weak"])))
            words = int(data["short_queries"]["max_words"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: unreadable relevance calibration ({e})") from e
    for strong, weak in pairs:
        if not weak <= strong:
            raise ValueError(f"{path}: weak threshold {weak} above strong {strong}")
    if len(pairs) == 1:
        return Relevance(*pairs[0])
    return Relevance(*pairs[0], short=Relevance(*pairs[1]), short_words=words)


def model_relevance(model) -> Relevance | None:
    """The calibration of a loaded model's bundle (read once per model), or None."""
    cached = getattr(model, "_relevance", None)
    if cached is None:
        choice = getattr(model, "precision_choice", None)
        precision = choice.image if choice is not None else getattr(model, "precision", "fp32")
        rel = None
        if getattr(model, "path", None) is not None:
            rel = read_relevance(model.path, model.fingerprint, precision)
        cached = (rel,)
        model._relevance = cached
    return cached[0]


def write_relevance(bundle: Path, calibration: dict) -> None:
    """Write ``relevance.json`` (per image precision: the thresholds, the short queries'
    where measured, and the fingerprint of the model measured; how they were found) and
    record it in the bundle's manifest."""
    from vsekit.bundle import write_manifest
    from vsekit.fsio import atomic_write

    def entry(c: dict) -> dict:
        out = {"strong": c["strong"], "weak": c["weak"]}
        if "short" in c:
            out["short"] = {"strong": c["short"]["strong"], "weak": c["short"]["weak"]}
        return {**out, "model_fingerprint": c["model_fingerprint"]}

    keep = {
        "by_precision": {p: entry(c) for p, c in calibration["by_precision"].items()},
        "rule": calibration["rule"],
        "score": calibration["score"],
        "calibrated_by": calibration["command"],
    }
    if "short_queries" in calibration:
        keep["short_queries"] = calibration["short_queries"]
    atomic_write(Path(bundle) / RELEVANCE_FILE, json.dumps(keep, indent=2) + "\n")
    write_manifest(Path(bundle))
