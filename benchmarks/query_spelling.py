"""Query normalisation (:mod:`vsekit.text.spelling`): misspelt and informal queries
rewritten to words the model learnt, measured on typo'd captions, clean captions and
the query scoreboard.

The rule and the bar, fixed before anything was measured:

1. ``--slice``: choices are made on the 500 train photos carved out for selection
   (``val_from_train: 500``, seed 0) and nothing of dev. Four slice sets:

   - *typo'd captions*: the slice's 2,500 captions with typos injected by a seeded
     generator (:func:`typo_caption`, seed 0): each word of 4 letters or more gets one
     with probability 0.3, and every caption at least one; a typo is a deletion (never
     of the first letter), a swap of two neighbouring letters, a doubled letter or a
     phonetic spelling (:data:`PHONETIC`), drawn at random among those that change the
     word;
   - *clean captions*: the same 2,500 captions as written;
   - *synonym captions*: the slice captions that hold a word of the open-vocabulary
     benchmark's substitutions (``open_vocabulary.CANDIDATES``), rewritten with it where
     the substitute is known only by analogy (the vocabulary expansion): real words the
     model knows weakly, which correction must leave alone;
   - the slice's query scoreboard (``queries/slice.jsonl``: 63 queries, 8 informal).

   For every setting of :func:`grid` (:class:`~vsekit.text.spelling.SpellingRule`:
   ``max_distance`` 0 (the informal table alone) | 1 | 2 | len, ``min_count`` 10 | 30 |
   100, ``analogy`` off | on, ``rare_below`` 0 | 3 | 10: 57 settings), the captions are
   ranked against the 500 photos as search ranks (the model's similarity less each
   photo's CSLS penalty), and text-to-image R@1 + R@5 + R@10 (percent) is measured as
   typed and corrected: ``T`` (typo'd, corrected), ``T0`` (typo'd as typed), ``C`` /
   ``C0`` (clean), ``S`` / ``S0`` (synonyms). A setting is **admissible** when it
   changes at most 0.5% of the clean captions (12 of 2,500), ``C >= C0 - 0.5``,
   ``S >= S0 - 0.5``, and the scoreboard's P@5 over all queries and over the informal
   ones is not below the exact search's. The **chosen** setting is the admissible one
   with the largest ``T``; ties (equal to 0.01) go to the most conservative
   (:func:`conservative`: smaller distance, then larger min count, then fewer known
   words admitted). **Bar**: correction is on by default when ``T - T0 >= 5.0`` for the
   chosen setting; otherwise search stays exact by default (:func:`choose`).
2. ``--dev``, once, with the rule search ships (``DEFAULT_RULE``, which must be the
   slice's choice): dev's scoreboard per category (P@5, P@10, nDCG@10, refused) exact
   and corrected; dev rsum on the 5,000 dev captions exact and corrected (text to
   image as search ranks; image to text is the caption pool's and does not change) and
   how many captions correction changed; the typo'd dev captions (the same generator,
   seed 0) exact and corrected. ``--dev-words`` lists every word the rule rewrites in
   the dev captions as written (no ranking).

Photo embeddings are cached under ``~/.cache/vsekit/query_benchmark`` (as the
scoreboard caches them), never in the repo. Other jobs share the 2-core CPU
(``cpu_shared`` in the JSON): these are quality figures, not timings.

Run: python benchmarks/query_spelling.py --slice | --dev | --dev-words [--cpu-shared WHAT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from query_scoreboard import (  # noqa: E402
    FLICKR8K,
    SPLIT_FILES,
    cached_photos,
    evaluate,
    load_queries,
    split_images,
)

GRID_DISTANCE = ("0", "1", "2", "len")
GRID_MIN_COUNT = (10, 30, 100)
GRID_ANALOGY = (False, True)
GRID_RARE = (0, 3, 10)
#: the most clean captions a setting may change (0.5% of 2,500)
MAX_CLEAN_CHANGED = 0.005
#: the most a setting may cost clean or synonym captions (R@1 + R@5 + R@10 points)
MAX_LOSS = 0.5
#: the least gain on typo'd captions (R@1 + R@5 + R@10 points) that turns correction on
BAR = 5.0
TYPO_RATE = 0.3
SEED = 0
#: phonetic misspellings: (written, as misspelt), applied at one place in a word
PHONETIC = (
    ("ph", "f"), ("ck", "k"), ("ee", "ea"), ("ea", "ee"), ("ou", "ow"), ("ie", "ei"),
    ("ei", "ie"), ("ll", "l"), ("ss", "s"), ("tt", "t"), ("pp", "p"), ("rr", "r"),
    ("nn", "n"), ("mm", "m"), ("ce", "se"), ("c", "k"), ("s", "z"), ("y", "ie"),
    ("tion", "shun"), ("ight", "ite"), ("er", "ur"), ("ar", "er"), ("or", "er"),
    ("ai", "ay"), ("wh", "w"), ("kn", "n"), ("oo", "u"), ("a", "e"), ("e", "a"),
    ("i", "e"), ("o", "a"),
)  # fmt: skip


def grid():
    """Every :class:`SpellingRule` of the sweep (distance 0 has no known words to
    admit)."""
    from vsekit.text.spelling import SpellingRule

    for d, n, a, r in itertools.product(GRID_DISTANCE, GRID_MIN_COUNT, GRID_ANALOGY, GRID_RARE):
        if d == "0" and (a or r):
            continue
        yield SpellingRule(max_distance=d, min_count=n, analogy=a, rare_below=r)


# -- typos ----------------------------------------------------------------------------
def typo_word(word: str, rng: np.random.Generator) -> str:
    """``word`` with one typo (see the module docstring), or as it is when none of the
    kinds changes it."""
    for kind in rng.permutation(["delete", "swap", "double", "phonetic"]):
        out = _typo(str(kind), word, rng)
        if out != word:
            return out
    return word


def _typo(kind: str, w: str, rng: np.random.Generator) -> str:
    n = len(w)
    if kind == "delete":
        i = int(rng.integers(1, n))
        return w[:i] + w[i + 1 :]
    if kind == "swap":
        sites = [i for i in range(1, n - 1) if w[i] != w[i + 1]]
        if not sites:
            return w
        i = sites[int(rng.integers(len(sites)))]
        return w[:i] + w[i + 1] + w[i] + w[i + 2 :]
    if kind == "double":
        i = int(rng.integers(1, n))
        return w[: i + 1] + w[i:]
    sites = [(m.start(), a, b) for a, b in PHONETIC for m in re.finditer(re.escape(a), w)]
    if not sites:
        return w
    at, a, b = sites[int(rng.integers(len(sites)))]
    return w[:at] + b + w[at + len(a) :]


def typo_caption(
    text: str, rng: np.random.Generator, rate: float = TYPO_RATE
) -> tuple[str, list[tuple[str, str]]]:
    """``text`` with typos in its words of 4 letters or more (each with probability
    ``rate``, at least one), and the ``(word, as misspelt)`` pairs (lower case)."""
    words = [m for m in re.finditer(r"[A-Za-z]+", text) if len(m.group(0)) >= 4]
    pick = [m for m in words if rng.random() < rate]
    if not pick and words:
        pick = [words[int(rng.integers(len(words)))]]
    parts, pairs, at = [], [], 0
    for m in pick:
        w = m.group(0)
        t = typo_word(w.lower(), rng)
        t = t[:1].upper() + t[1:] if w[:1].isupper() else t
        parts += [text[at : m.start()], t]
        pairs.append((w.lower(), t.lower()))
        at = m.end()
    return "".join([*parts, text[at:]]), pairs


def typo_captions(texts: Sequence[str], seed: int = SEED) -> tuple[list[str], list]:
    rng = np.random.default_rng(seed)
    out = [typo_caption(t, rng) for t in texts]
    return [t for t, _ in out], [p for _, p in out]


# -- the rule ---------------------------------------------------------------------------
def conservative(rule: dict) -> tuple:
    """Sort key: the more conservative setting first."""
    weak = int(rule["analogy"]) + rule["rare_below"]
    return (GRID_DISTANCE.index(rule["max_distance"]), -rule["min_count"], weak, rule["analogy"])


def admissible(row: dict, base: dict, n_clean: int) -> bool:
    """Whether one setting's slice figures keep clean, synonym and scoreboard queries
    as they were (the module docstring's rule)."""
    return (
        row["clean_changed"] <= MAX_CLEAN_CHANGED * n_clean
        and row["clean"] >= base["clean"] - MAX_LOSS
        and row["synonyms"] >= base["synonyms"] - MAX_LOSS
        and row["p@5"] >= base["p@5"]
        and row["informal_p@5"] >= base["informal_p@5"]
    )


def choose(rows: list[dict], base: dict, n_clean: int) -> dict:
    """``{"chosen": rule or None, "gain", "on": bool, "admissible": count}``: the
    admissible setting with the largest typo'd-caption recall sum (ties within 0.01 to
    the most conservative), on by default when it gains at least :data:`BAR` over the
    typo'd captions as typed. ``rows``: each setting's ``rule`` and figures; ``base``:
    the exact search's figures."""
    ok = [r for r in rows if admissible(r, base, n_clean)]
    if not ok:
        return {"chosen": None, "gain": 0.0, "on": False, "admissible": 0}
    best = max(r["typos"] for r in ok)
    tied = [r for r in ok if r["typos"] >= best - 0.01]
    pick = min(tied, key=lambda r: conservative(r["rule"]))
    gain = round(pick["typos"] - base["typos"], 2)
    return {"chosen": pick["rule"], "gain": gain, "on": gain >= BAR, "admissible": len(ok)}


# -- measuring ----------------------------------------------------------------------------
class Encoder:
    """The model's text embeddings, each distinct text encoded once."""

    def __init__(self, model) -> None:
        self.model = model
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if new:
            for t, v in zip(new, self.model.encode_text(new), strict=True):
                self.cache[t] = v
        return np.stack([self.cache[t] for t in texts])


def t2i_sum(scores: np.ndarray, c2i: np.ndarray) -> dict:
    """Text-to-image R@1/5/10 (percent) and their sum, ``scores [captions, images]``."""
    own = scores[np.arange(len(c2i)), c2i]
    rank = (scores > own[:, None]).sum(1)
    out = {f"r{k}": round(float((rank < k).mean() * 100), 2) for k in (1, 5, 10)}
    out["sum"] = round(out["r1"] + out["r5"] + out["r10"], 2)
    return out


def caption_recall(model, enc: Encoder, img: np.ndarray, texts, c2i) -> dict:
    """:func:`t2i_sum` of ``texts`` as search ranks (less each photo's CSLS penalty)."""
    s = model.similarity(img, enc(texts)).T - model.image_penalty(img)[None, :]
    return t2i_sum(s, np.asarray(c2i))


def query_scores(model, speller, img: np.ndarray, texts: Sequence[str], cache: dict) -> np.ndarray:
    """``[Q, N]`` as the scoreboard's default scorer ranks, each query corrected by
    ``speller`` (None: exact); a query search refuses scores -inf."""
    from vsekit.index.query import embed_query

    bias = -model.image_penalty(img)
    out = np.full((len(texts), len(img)), -np.inf, np.float32)
    for j, t in enumerate(texts):
        q = t if speller is None else speller.normalise(t).text
        if q not in cache:
            try:
                cache[q] = embed_query(model, q)[0]
            except ValueError:
                cache[q] = None
        if cache[q] is not None:
            out[j] = model.similarity(img, cache[q])[:, 0] + bias
    return out


def fixed(speller, texts: Sequence[str]) -> list[str]:
    return [speller.normalise(t).text for t in texts]


def typo_outcomes(speller, pairs: list) -> dict:
    """For every injected typo: restored (rewritten to the word it came from), rewritten
    to another word, or left."""
    c = Counter()
    for word, typo in (p for caption in pairs for p in caption):
        ch = speller.rewrite(typo)
        c["restored" if ch and ch.to == word else "other" if ch else "left"] += 1
    return dict(c)


def typo_landing(speller, pairs: list) -> dict:
    """Where the injected typos land in the vocabulary."""
    c = Counter()
    for _, typo in (p for caption in pairs for p in caption):
        n = speller.count(typo)
        c["unknown" if n is None else "analogy" if n == 0 else "rare (<10)" if n < 10
          else "well known"] += 1  # fmt: skip
    return dict(c)


def synonym_captions(vocab, texts: Sequence[str], c2i) -> tuple[list[str], list[str], list[int]]:
    """``(as written, rewritten, their photos)``: the captions holding a substitution
    source of the open-vocabulary benchmark whose substitute the model knows only by
    analogy."""
    from open_vocabulary import CANDIDATES, rewrite

    subs = {s: t for s, t in CANDIDATES.items()
            if s in vocab and not vocab.by_analogy(s) and vocab.by_analogy(t)}  # fmt: skip
    pat = re.compile(r"\b(" + "|".join(map(re.escape, subs)) + r")\b", re.IGNORECASE)
    keep = [k for k, t in enumerate(texts) if pat.search(t)]
    written = [texts[k] for k in keep]
    return written, [rewrite(t, subs) for t in written], [int(c2i[k]) for k in keep]


def _rule_dict(rule) -> dict:
    return {"max_distance": rule.max_distance, "min_count": rule.min_count,
            "analogy": rule.analogy, "rare_below": rule.rare_below}  # fmt: skip


def _summary(res: dict) -> dict:
    keep = ("queries", "p@5", "p@10", "ndcg@10", "refused")
    return {c: {k: s[k] for k in keep} for c, s in res["summary"].items()}


def slice_sweep() -> dict:
    import vsekit
    from vsekit.lab.data import load_dataset
    from vsekit.text.spelling import Speller

    model = vsekit.load_model("default")
    vocab = model.text_vocabulary
    ids = split_images("slice")
    ds = load_dataset(FLICKR8K).carve("train", 500, "train-val", 0).split("train-val")
    if [Path(im.path).name for im in ds.images] != ids:
        raise SystemExit("slice image order differs from the scoreboard's")
    texts, c2i = list(ds.texts), np.asarray(ds.caption_to_image)
    img = cached_photos(model, ids, model.encode_image)
    enc = Encoder(model)
    typod, pairs = typo_captions(texts)
    syn_w, syn_r, syn_c2i = synonym_captions(vocab, texts, c2i)
    queries = load_queries(SPLIT_FILES["slice"])
    qtexts = [q["text"] for q in queries]
    qcache: dict = {}

    def board(speller) -> dict:
        return evaluate(queries, ids, query_scores(model, speller, img, qtexts, qcache))

    b0 = board(None)
    base = {"typos": caption_recall(model, enc, img, typod, c2i)["sum"],
            "clean": caption_recall(model, enc, img, texts, c2i)["sum"],
            "synonyms": caption_recall(model, enc, img, syn_r, syn_c2i)["sum"],
            "synonyms_as_written": caption_recall(model, enc, img, syn_w, syn_c2i)["sum"],
            "p@5": b0["summary"]["all"]["p@5"],
            "informal_p@5": b0["summary"]["informal"]["p@5"]}  # fmt: skip
    print("exact", base, flush=True)
    rows = []
    for rule in grid():
        sp = Speller(vocab, rule)
        clean_fixed = fixed(sp, texts)
        syn_fixed = fixed(sp, syn_r)
        b = board(sp)
        row = {
            "rule": _rule_dict(rule),
            "typos": caption_recall(model, enc, img, fixed(sp, typod), c2i)["sum"],
            "clean": caption_recall(model, enc, img, clean_fixed, c2i)["sum"],
            "clean_changed": sum(a != b for a, b in zip(clean_fixed, texts, strict=True)),
            "synonyms": caption_recall(model, enc, img, syn_fixed, syn_c2i)["sum"],
            "synonyms_changed": sum(a != b for a, b in zip(syn_fixed, syn_r, strict=True)),
            "p@5": b["summary"]["all"]["p@5"],
            "informal_p@5": b["summary"]["informal"]["p@5"],
            "typo_outcomes": typo_outcomes(sp, pairs),
        }  # fmt: skip
        rows.append(row)
        print(rule.describe(), {k: row[k] for k in row if k != "rule"}, flush=True)
    decision = choose(rows, base, len(texts))
    print("decision", decision, flush=True)
    out = {"images": len(ids), "captions": len(texts), "typos_injected": sum(map(len, pairs)),
           "typo_landing": typo_landing(Speller(vocab), pairs),
           "synonym_captions": len(syn_r), "exact": base, "settings": rows,
           "decision": decision,
           "examples": [{"typed": t, "corrected": fixed(Speller(vocab), [t])[0]}
                        for t in typod[:12]]}  # fmt: skip
    if decision["chosen"] is not None:
        from vsekit.text.spelling import SpellingRule

        sp = Speller(vocab, SpellingRule(**decision["chosen"]))
        out["scoreboard"] = {"exact": _summary(b0), "corrected": _summary(board(sp))}
        out["informal_queries"] = [{"typed": t, "searched": sp.normalise(t).text}
                                   for q, t in zip(queries, qtexts, strict=True)
                                   if q["category"] == "informal"]  # fmt: skip
    return out


def dev_once() -> dict:
    import vsekit
    from vsekit.lab.data import load_dataset
    from vsekit.lab.eval import retrieval_metrics
    from vsekit.text.spelling import DEFAULT_RULE, Speller

    prev = _read().get("slice", {}).get("decision", {})
    if prev.get("chosen") != _rule_dict(DEFAULT_RULE):
        raise SystemExit(f"DEFAULT_RULE is not the slice's choice ({prev.get('chosen')})")
    model = vsekit.load_model("default")
    sp = Speller(model.text_vocabulary, DEFAULT_RULE)
    ids = split_images("dev")
    dev = load_dataset(FLICKR8K).split("dev")
    if [Path(im.path).name for im in dev.images] != ids:
        raise SystemExit("dev image order differs from the scoreboard's")
    texts, c2i = list(dev.texts), np.asarray(dev.caption_to_image)
    img = cached_photos(model, ids, model.encode_image)
    queries = load_queries(SPLIT_FILES["dev"])
    qtexts = [q["text"] for q in queries]
    qcache: dict = {}
    boards = {name: evaluate(queries, ids, query_scores(model, s, img, qtexts, qcache))
              for name, s in (("exact", None), ("corrected", sp))}  # fmt: skip
    enc = Encoder(model)
    fixed_texts = fixed(sp, texts)
    rsum = {}
    for name, tt in (("exact", texts), ("corrected", fixed_texts)):
        m = retrieval_metrics(model.retrieval_scores(img, enc(tt)), c2i)
        rsum[name] = {k: round(float(v), 2) for k, v in m.items()}
    changed = [(a, b) for a, b in zip(texts, fixed_texts, strict=True) if a != b]
    typod, pairs = typo_captions(texts)
    return {
        "rule": sp.rule.describe(),
        "scoreboard": {k: _summary(v) for k, v in boards.items()},
        "informal_queries": [{"typed": t, "searched": sp.normalise(t).text}
                             for q, t in zip(queries, qtexts, strict=True)
                             if q["category"] == "informal"],  # fmt: skip
        "rsum": rsum,
        "clean_captions_changed": len(changed),
        "clean_changes": [{"typed": a, "corrected": b} for a, b in changed[:40]],
        "typos_injected": sum(map(len, pairs)),
        "typo_outcomes": typo_outcomes(sp, pairs),
        "typo_captions": {"exact": caption_recall(model, enc, img, typod, c2i),
                          "corrected": caption_recall(model, enc, img, fixed(sp, typod), c2i)},
    }  # fmt: skip


def dev_words() -> dict:
    """Every word the shipped rule rewrites in the 5,000 dev captions as written (no
    ranking: what ``--dev`` lists the first 40 captions of), with how often."""
    import vsekit
    from vsekit.lab.data import load_dataset
    from vsekit.text.spelling import DEFAULT_RULE, Speller

    sp = Speller(vsekit.load_model("default").text_vocabulary, DEFAULT_RULE)
    found = Counter(
        (c.word.lower(), c.to, c.why)
        for t in load_dataset(FLICKR8K).split("dev").texts
        for c in sp.normalise(t).changes
    )
    return {"rule": sp.rule.describe(),
            "words": [{"from": a, "to": b, "why": w, "captions": n}
                      for (a, b, w), n in sorted(found.items())]}  # fmt: skip


def _path() -> Path:
    return Path(__file__).with_suffix(".json")


def _read() -> dict:
    return json.loads(_path().read_text()) if _path().is_file() else {}


def main() -> dict:
    from _common import record

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--slice", action="store_true", help="sweep the rules on the train slice")
    g.add_argument("--dev", action="store_true", help="measure the shipped rule on dev, once")
    g.add_argument("--dev-words", action="store_true", help="list the dev captions' rewrites")
    ap.add_argument("--cpu-shared", default="", help="what else ran on the CPU")
    args = ap.parse_args()
    old = _read()
    part = "slice" if args.slice else "dev" if args.dev else "dev_words"
    res = slice_sweep() if args.slice else dev_once() if args.dev else dev_words()
    res["command"] = shlex.join(["python", "benchmarks/query_spelling.py", *sys.argv[1:]])
    res["cpu_shared"] = args.cpu_shared or "nothing else declared; see load_average"
    keep = {k: old[k] for k in ("slice", "dev", "dev_words") if k in old and k != part}
    return record(_path(), {**keep, part: res})


if __name__ == "__main__":
    main()
