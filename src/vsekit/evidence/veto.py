"""The annotation veto: captions and tags that name what the photo's ImageNet classes
rule out are demoted.

The ``imagenet`` source (:mod:`vsekit.evidence.imagenet`) knows, for a photo, the
probability of each of the 1,000 ImageNet classes, and, for a noun, the classes it names
through WordNet. A caption's *vetoable nouns* are the nouns it names (read as search reads
a query: :meth:`~vsekit.evidence.imagenet.WordNetMap.phrases`, longest compound first,
plurals to their lemma) whose common senses reach ImageNet classes and cover at least
``min_coverage`` of their WordNet leaves. People words are never vetoable: ImageNet has
no class for a man, a woman or a child, only three for people doing something
(:data:`PERSON_WNIDS`), and a noun any of whose common senses names only those is left
alone ("player", "person"). Nouns with no class ("cow", "grass", "beach") are left alone
too: the classifier cannot speak for them. For the shipped pool's captions, a word that a
part-of-speech tagger read as an adjective or a verb there is not a noun ("an orange
vest", "a small white dog", "another one watches"): ``evidence.json``'s
``imagenet.not_nouns`` names that file (:data:`NOT_NOUNS_KEY`, made by
``scripts/build_not_nouns.py``; the tagger is not needed at run time). Other texts are read
as before.

A noun's *mass* on a photo is the probability the photo's 1,000-way softmax puts on the
noun's classes ("dog": the 118 dog classes). The rule (:func:`adjust_scores`), with the
parameters of :class:`VetoRule` (the bundle's ``evidence.json``, ``imagenet.annotate``):

- a noun is *vetoed* when its mass is below ``floor``;
- a caption naming a vetoed noun loses ``demote`` from its score;
- a caption gains ``promote`` times the largest mass among its vetoable nouns;
- a caption that names no vetoable noun keeps its score.

Only the model's best ``candidates`` captions are re-ranked, so a demoted caption makes
room for the next ones and nothing from further down the pool jumps in. With ``tags``, a
tag that is a vetoed noun is dropped and the next tag takes its place.
``benchmarks/annotate_invention.py`` chose the parameters on the train slice and measured
them on dev (docs/model.md, "Captions and tags that don't invent").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsekit.evidence.imagenet import ImageNetClasses

#: the ImageNet-1k classes that are people (baseball player, bridegroom, scuba diver)
PERSON_WNIDS = frozenset({"n09835506", "n10148035", "n10565667"})
#: nouns remembered per text (a pool's candidates repeat across photos)
NOUN_CACHE = 65536
#: ``evidence.json``'s ``imagenet`` key naming the file of the pool's words that are not
#: nouns there: ``{"phrases": {caption: [phrase, ...]}, ...}``
NOT_NOUNS_KEY = "not_nouns"


@dataclass(frozen=True)
class VetoRule:
    """The veto's parameters (``evidence.json``: ``imagenet.annotate``)."""

    floor: float = 0.0  # a noun whose classes' probability is below this is vetoed
    demote: float = 0.0  # subtracted from the score of a caption naming a vetoed noun
    promote: float = 0.0  # times the largest mass of the caption's nouns, added
    min_coverage: float = 0.0  # a sense must cover this share of its WordNet leaves
    candidates: int = 50  # the model's best captions that are re-ranked
    tags: bool = False  # drop tags that are vetoed nouns
    enabled: bool = False

    @classmethod
    def from_config(cls, cfg: Mapping | None) -> VetoRule:
        """The rule from ``evidence.json``'s ``annotate`` entry (absent: off).
        ValueError naming the field that is not a number or a flag."""
        cfg = dict(cfg or {})
        out = {}
        for name, kind in (("floor", float), ("demote", float), ("promote", float),
                           ("min_coverage", float), ("candidates", int)):  # fmt: skip
            if name not in cfg:
                continue
            v = cfg[name]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"annotate.{name}: a number, not {v!r}")
            if v < 0 or (name == "candidates" and v < 1):
                raise ValueError(f"annotate.{name}: must not be below "
                                 f"{1 if name == 'candidates' else 0}, got {v}")  # fmt: skip
            out[name] = kind(v)
        for name in ("tags", "enabled"):
            if name in cfg:
                if not isinstance(cfg[name], bool):
                    raise ValueError(f"annotate.{name}: true or false, not {cfg[name]!r}")
                out[name] = cfg[name]
        return cls(**out)


def adjust_scores(
    scores: np.ndarray, low: np.ndarray, high: np.ndarray, rule: VetoRule
) -> tuple[np.ndarray, np.ndarray]:
    """The rule on arrays of one shape: ``scores`` (the model's), ``low`` (the smallest
    mass among each caption's vetoable nouns, ``inf`` when it names none) and ``high``
    (the largest, 0 when none). Returns ``(new scores, vetoed)``: ``scores - demote *
    vetoed + promote * high``, where ``vetoed = low < floor``."""
    low = np.asarray(low, np.float64)
    vetoed = low < rule.floor
    out = np.asarray(scores, np.float64) - rule.demote * vetoed
    out = out + rule.promote * np.asarray(high, np.float64)
    return out, vetoed


@dataclass(frozen=True)
class NounMass:
    """A vetoable noun of a caption or tag, and its classes' probability on the photo."""

    noun: str
    probability: float

    def as_dict(self) -> dict:
        return {"noun": self.noun, "probability": round(self.probability, 6)}


@dataclass(frozen=True)
class Ranked:
    """One caption (or tag) as the veto ranked it: ``score`` is what it ranks by,
    ``model_score`` the model's own, ``nouns`` its vetoable nouns and ``vetoed`` those
    below the floor."""

    text: str
    score: float
    model_score: float
    nouns: tuple[NounMass, ...] = ()
    vetoed: tuple[NounMass, ...] = ()

    def reason(self, floor: float) -> str:
        """Why it was demoted, in words."""
        parts = [f"{n.noun!r} {n.probability:.2g}" for n in self.vetoed]
        return f"ImageNet classes of {', '.join(parts)} below {floor:g}"


@dataclass
class Reranked:
    """One photo's annotation after the veto: the ``kept`` top captions and those the
    model had in its top ``k`` that the veto demoted out of it (``demoted``)."""

    kept: list[Ranked]
    demoted: list[Ranked]


class AnnotationVeto:
    """The veto of one bundle: its ``imagenet`` source and its :class:`VetoRule`."""

    def __init__(
        self,
        source: ImageNetClasses,
        rule: VetoRule,
        not_nouns: Mapping[str, Sequence[str]] | None = None,
    ):
        self.source = source
        self.rule = rule
        #: caption -> the class words a tagger read as adjectives or verbs in it
        self.not_nouns = {t: frozenset(p) for t, p in (not_nouns or {}).items()}
        classes = source.wordnet.classes
        self._person = frozenset(i for i, (w, _) in enumerate(classes) if w in PERSON_WNIDS)
        self._nouns: dict[str, tuple[tuple[str, np.ndarray], ...]] = {}

    @classmethod
    def from_bundle(cls, bundle: Path, enabled_only: bool = True) -> AnnotationVeto | None:
        """The veto ``evidence.json`` declares (``imagenet.annotate``), or None: no such
        entry, switched off (with ``enabled_only``) or the source's files absent.
        ModelError for a file present but not the one recorded, or a bad setting."""
        from vsekit.bundle import ModelError
        from vsekit.evidence import EVIDENCE_FILE, read_evidence_config

        cfg = read_evidence_config(bundle).get("imagenet")
        if not isinstance(cfg, dict) or not isinstance(cfg.get("annotate"), dict):
            return None
        try:
            rule = VetoRule.from_config(cfg["annotate"])
        except ValueError as e:
            raise ModelError(f"{Path(bundle) / EVIDENCE_FILE}: imagenet.{e}") from e
        if enabled_only and not rule.enabled:
            return None
        src = ImageNetClasses.from_bundle(Path(bundle), cfg)
        return None if src is None else cls(src, rule, read_not_nouns(Path(bundle), cfg))

    # -- nouns ---------------------------------------------------------------------
    def nouns(self, text: str) -> tuple[tuple[str, np.ndarray], ...]:
        """``((noun, class indices), ...)``: the vetoable nouns ``text`` names."""
        got = self._nouns.get(text)
        if got is not None:
            return got
        out = []
        skip = self.not_nouns.get(text, frozenset())
        for phrase, senses in self.source.wordnet.phrases(text):
            if phrase in skip:
                continue  # an adjective or a verb in this caption
            common = [s for s in senses if s.common]
            if not common or any(set(s.classes) <= self._person for s in common):
                continue  # a rare sense, or a person: ImageNet cannot speak for people
            kept = [s for s in common if s.coverage >= self.rule.min_coverage]
            cls = sorted({c for s in kept for c in s.classes} - self._person)
            if cls:
                out.append((phrase, np.asarray(cls, np.intp)))
        got = tuple(out)
        if len(self._nouns) >= NOUN_CACHE:
            self._nouns.clear()
        self._nouns[text] = got
        return got

    def masses(self, probs: np.ndarray, text: str) -> tuple[NounMass, ...]:
        """Each vetoable noun of ``text`` with its mass on one photo's ``[1000]`` class
        probabilities."""
        return tuple(NounMass(n, float(probs[c].sum())) for n, c in self.nouns(text))

    def class_probs(self, features: np.ndarray) -> np.ndarray:
        """``[N, F]`` image features -> ``[N, 1000]`` class probabilities."""
        return self.source.class_probs(np.atleast_2d(features))

    # -- ranking -------------------------------------------------------------------
    def rank(self, probs: np.ndarray, items: Sequence[tuple[str, float]]) -> list[Ranked]:
        """``items`` (text, model score) of one photo, re-scored by the rule and sorted
        by the new score (ties keep the model's order)."""
        rows = [(t, float(s), self.masses(probs, t)) for t, s in items]
        low = [min((m.probability for m in ms), default=math.inf) for _, _, ms in rows]
        high = [max((m.probability for m in ms), default=0.0) for _, _, ms in rows]
        new, vetoed = adjust_scores([s for _, s, _ in rows], low, high, self.rule)
        out = [
            Ranked(t, float(n), s, ms, tuple(m for m in ms if m.probability < self.rule.floor))
            for (t, s, ms), n in zip(rows, new, strict=True)
        ]
        order = sorted(range(len(out)), key=lambda i: -out[i].score)
        return [out[i] for i in order]

    def rerank(
        self, probs: np.ndarray, candidates: Sequence[Sequence[tuple[str, float]]], k: int
    ) -> list[Reranked]:
        """Each photo's candidate captions (the model's best, best first; ``probs [N,
        1000]``) -> its top ``k`` under the rule and the captions of the model's top
        ``k`` that it demoted out."""
        out = []
        for p, items in zip(np.atleast_2d(probs), candidates, strict=True):
            ranked = self.rank(p, items)
            kept = ranked[:k]
            shown = {r.text for r in kept}
            model_top = {t for t, _ in items[:k]}
            demoted = [r for r in ranked if r.vetoed and r.text in model_top
                       and r.text not in shown]  # fmt: skip
            demoted.sort(key=lambda r: -r.model_score)
            out.append(Reranked(kept, demoted))
        return out

    def filter_tags(
        self, probs: np.ndarray, tags: Sequence[tuple[str, float]], k: int
    ) -> tuple[list[tuple[str, float]], list[Ranked]]:
        """One photo's tags (best first, possibly more than ``k``) -> ``(its first k tags
        that are not vetoed nouns, the vetoed tags among the first k)``; with ``tags``
        off, the first ``k`` and none."""
        if not self.rule.tags:
            return list(tags[:k]), []
        kept, dropped = [], []
        for i, (t, s) in enumerate(tags):
            ms = self.masses(probs, t)
            bad = tuple(m for m in ms if m.probability < self.rule.floor)
            if bad and i < k:
                dropped.append(Ranked(t, s, s, ms, bad))
            elif not bad and len(kept) < k:
                kept.append((t, s))
        return kept, dropped


def read_not_nouns(bundle: Path, cfg: Mapping) -> dict[str, list[str]]:
    """The ``phrases`` of the file ``cfg`` (``evidence.json``'s ``imagenet`` entry) names
    under :data:`NOT_NOUNS_KEY` ({} when it names none); ModelError when the file is
    missing, unreadable, not the one its sha256 records, malformed, or made for another
    mapping than the bundle's."""
    import json

    from vsekit.bundle import ModelError
    from vsekit.fsio import file_sha256

    name = cfg.get(NOT_NOUNS_KEY)
    if not name:
        return {}
    shas = cfg.get("sha256") or {}
    if not isinstance(name, str) or "/" in name or "\\" in name or not isinstance(shas, dict):
        raise ModelError(f"{Path(bundle) / 'evidence.json'}: imagenet.{NOT_NOUNS_KEY}: a file "
                         f"name with its sha256 recorded, not {name!r}")  # fmt: skip
    path = Path(bundle) / name
    try:
        want = shas.get(name)
        if want is None:
            raise ValueError("no sha256 is recorded for it in evidence.json")
        got = file_sha256(path)
        if got != want:
            raise ValueError(f"sha256 {got[:12]}… is not the one recorded in evidence.json")
        data = json.loads(path.read_text())
        phrases = data.get("phrases") if isinstance(data, dict) else None
        ok = isinstance(phrases, dict) and all(
            isinstance(v, list) and all(isinstance(p, str) for p in v) for v in phrases.values()
        )
        if not ok:
            raise ValueError("'phrases' is not an object of lists of phrases")
        made_for = data.get("mapping_sha256")
        mapping = cfg.get("mapping")
        if made_for is not None and made_for != shas.get(mapping):
            raise ValueError(f"made for another {mapping} than this bundle's; "
                             "run scripts/build_not_nouns.py again")  # fmt: skip
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: {e}; reinstall vsekit or rebuild it") from e
    return phrases
