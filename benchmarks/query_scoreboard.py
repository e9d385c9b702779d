"""The query scoreboard: typed queries with judged relevant photos, over Flickr8k dev
(1,000 photos, ``queries/dev.jsonl``) and over the 500 train photos carved out for
selection (``data.val_from_train: 500``, ``val_seed`` 0; ``queries/slice.jsonl``).

Every query is in one category (:data:`CATEGORIES`); its relevant photos were judged by
hand from the five captions and, where the captions do not settle it, the pixels (each
line's ``judged_by``). This script ranks each split's photos for every query and reports
P@5, P@10 and nDCG@10 (binary relevance) per category and overall.

The scorer is pluggable: a function ``(query texts, image ids) -> scores [Q, N]`` (image
ids are file names under ``flickr8k/images``). ``default`` is the shipped model as
``vse search`` ranks: the query corrected as search corrects it (misspellings and
informal forms, :func:`vsekit.index.query.correct_query`), through the query parser and
text encoder, each photo's embedding as ``vse index`` makes it, the model's similarity
less each photo's CSLS penalty; ``default-exact`` searches the words as typed (``vse
search --exact``). Another scorer is ``--scorer path/to/file.py:factory`` or
``--scorer package.module:factory``, where ``factory()`` returns the scorer (and may
carry a ``name`` attribute). Each scorer's figures are kept under its name in the JSON.

Photo embeddings are cached under ``~/.cache/vsekit/query_benchmark`` (by model
fingerprint and precision), never in the repo.

Run: python benchmarks/query_scoreboard.py
[--scorer default|default-exact|FILE.py:FACTORY|MOD:FACTORY] [--model BUNDLE]
[--split dev|slice|both]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
QUERIES = HERE / "queries"
FLICKR8K = HERE.parents[1] / "shared" / "data" / "flickr8k"
SPLIT_FILES = {"dev": QUERIES / "dev.jsonl", "slice": QUERIES / "slice.jsonl"}
CATEGORIES = ("colour", "count", "rare_noun", "action", "scene", "relation", "long", "informal")
JUDGED_BY = ("captions", "looked")
KS = (5, 10)

#: ``(query texts, image ids) -> [len(texts), len(ids)]`` scores, higher ranks first
Scorer = Callable[[Sequence[str], Sequence[str]], np.ndarray]


# -- judgments ---------------------------------------------------------------------
def load_queries(path: Path) -> list[dict]:
    """The queries of one judgment file (JSON lines), in file order."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from e
    return out


def split_images(split: str) -> list[str]:
    """The image file names of ``dev`` (the official dev list) or ``slice`` (the 500
    train images a config's ``data.val_from_train: 500`` carves out with seed 0), in
    the dataset's order."""
    from vsekit.lab.data import load_dataset

    ds = load_dataset(FLICKR8K)
    if split == "slice":
        ds = ds.carve("train", 500, "train-val", 0).split("train-val")
    elif split == "dev":
        ds = ds.split("dev")
    else:
        raise ValueError(f"split: use dev | slice, not {split!r}")
    return [Path(im.path).name for im in ds.images]


# -- metrics -------------------------------------------------------------------------
def precision_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """The share of the top ``k`` that is relevant (divided by ``k`` even when fewer than
    ``k`` photos are relevant: see :func:`best_precision_at` for the ceiling)."""
    return sum(r in relevant for r in ranked[:k]) / k


def best_precision_at(n_relevant: int, k: int) -> float:
    """The highest :func:`precision_at` a query with ``n_relevant`` relevant photos can
    reach."""
    return min(n_relevant, k) / k


def ndcg_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """Binary-relevance nDCG@k: ``sum_{i<=k} rel_i / log2(i + 1)`` over the same sum for
    the ideal ranking (every relevant photo first, ``min(|relevant|, k)`` of them)."""
    dcg = sum(1 / math.log2(i + 2) for i, r in enumerate(ranked[:k]) if r in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal if ideal else 0.0


def rank_ids(scores: np.ndarray, ids: Sequence[str]) -> list[str]:
    """``ids`` by decreasing score, ties by id (a deterministic order); photos scored
    ``-inf`` or NaN are not returned (a query search refuses returns nothing)."""
    s = np.asarray(scores, np.float64)
    order = np.lexsort((np.asarray(ids), -s))
    return [ids[i] for i in order if np.isfinite(s[i])]


def query_metrics(ranked: Sequence[str], relevant: set[str]) -> dict[str, float]:
    """P@5, P@10, nDCG@10 and the rank of the first relevant photo (1-based; None when
    nothing relevant is returned)."""
    first = next((i for i, r in enumerate(ranked, 1) if r in relevant), None)
    return {
        **{f"p@{k}": precision_at(ranked, relevant, k) for k in KS},
        "ndcg@10": ndcg_at(ranked, relevant, 10),
        "first_relevant_rank": first,
    }


def summarise(rows: list[dict]) -> dict:
    """Means of each metric (and of the P@k ceilings) per category and over all."""
    out = {}
    for cat in (*CATEGORIES, "all"):
        sel = [r for r in rows if cat in ("all", r["category"])]
        if not sel:
            continue
        out[cat] = {
            "queries": len(sel),
            **{
                m: round(float(np.mean([r[m] for r in sel])), 4) for m in ("p@5", "p@10", "ndcg@10")
            },  # fmt: skip
            **{
                f"best_p@{k}": round(
                    float(np.mean([best_precision_at(r["n_relevant"], k) for r in sel])), 4
                )
                for k in KS
            },  # fmt: skip
            # a query with nothing relevant returned counts as ranking it last
            "median_first_relevant_rank": float(
                np.median([r["first_relevant_rank"] or math.inf for r in sel])
            ),  # fmt: skip
            "refused": sum(r["returned"] == 0 for r in sel),
        }
    return out


def evaluate(queries: list[dict], ids: Sequence[str], scores: np.ndarray) -> dict:
    """Per-query metrics and their per-category means for ``scores [Q, N]`` over
    ``ids``."""
    rows = []
    for q, s in zip(queries, scores, strict=True):
        ranked = rank_ids(s, ids)
        rel = set(q["relevant"])
        rows.append({"id": q["id"], "category": q["category"], "n_relevant": len(rel),
                     "returned": len(ranked), **query_metrics(ranked, rel),
                     "top5": ranked[:5]})  # fmt: skip
    return {"summary": summarise(rows), "queries": rows}


# -- scorers ------------------------------------------------------------------------
def cached_photos(model, ids: Sequence[str], encode, kind: str = "") -> np.ndarray:
    """``encode(paths)`` of the photos ``ids`` in batches of 16, stacked (``[N, ...]``),
    cached under ``~/.cache/vsekit/query_benchmark`` by model fingerprint, image
    precision, ``kind`` ("": embeddings) and the id list."""
    from vsekit.fsio import atomic_write, cache_dir, np_bytes

    choice = getattr(model, "precision_choice", None)
    precision = choice.image if choice is not None else "fp32"
    key = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
    name = "-".join([model.fingerprint, precision, *([kind] if kind else []), str(len(ids)), key])
    path = cache_dir() / "query_benchmark" / f"{name}.npy"
    if path.is_file():
        return np.load(path)
    paths = [str(FLICKR8K / "images" / i) for i in ids]
    out = np.concatenate([encode(paths[a : a + 16]) for a in range(0, len(paths), 16)])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, np_bytes(out.astype(np.float32)))
    return out


def default_scorer(
    model_name: str = "default",
    exact: bool = False,
    evidence_sources: bool = True,
    skip_sources: Sequence[str] = (),
) -> Scorer:
    """The shipped model as ``vse search`` ranks: each photo embedded as ``vse index``
    embeds it (cached by model fingerprint and image precision), the query corrected
    (unless ``exact``) and embedded as the search command does
    (:func:`vsekit.index.query.correct_query`, :func:`~vsekit.index.query.embed_query`),
    scored with the model's similarity less each photo's CSLS penalty, plus the bonus of
    the model's enabled evidence sources for the query's text
    (:func:`~vsekit.index.query.evidence_text`), each photo's evidence computed as ``vse
    index`` computes it (``evidence_sources=False``: the model alone; ``skip_sources``:
    without the sources named, the base a source's own benchmark adds its bonus to)."""
    import vsekit
    from vsekit.evidence import PhotoBatch
    from vsekit.evidence.store import model_sources
    from vsekit.index.query import correct_query, embed_query, evidence_text

    model = vsekit.load_model(model_name)
    choice = getattr(model, "precision_choice", None)
    sources = model_sources(model) if evidence_sources else []
    sources = [s for s in sources if s.name not in skip_sources]
    evidence: dict[tuple[str, tuple[str, ...]], dict] = {}

    def photo_evidence(src, ids: Sequence[str]) -> dict:
        key = (src.name, tuple(ids))
        if key not in evidence:
            parts = []
            for a in range(0, len(ids), 64):
                paths = [str(FLICKR8K / "images" / i) for i in ids[a : a + 64]]
                parts.append(src.index(PhotoBatch(paths=paths, featurise=model.image_features,
                                                  decode_size=model.decode_size)))  # fmt: skip
            evidence[key] = {k: np.concatenate([x[k] for x in parts]) for k in parts[0]}
        return evidence[key]

    def score(texts: Sequence[str], ids: Sequence[str]) -> np.ndarray:
        img = cached_photos(model, ids, model.encode_image)
        bias = -model.image_penalty(img)[None, :]
        out = np.full((len(texts), len(ids)), -np.inf, np.float32)
        for j, t in enumerate(texts):
            searched = t if exact else correct_query(model, t).text
            try:
                q = embed_query(model, searched)[0]
            except ValueError:  # search refuses it (no known word): the user sees nothing
                continue
            out[j] = model.similarity(img, q)[:, 0] + bias[0]
            words = evidence_text(searched) if sources else ""
            for src in sources if words else ():
                bonus = src.score(words, photo_evidence(src, ids))
                if bonus is not None:
                    out[j] += np.asarray(bonus, np.float32)
        return out

    other = model.info.get("name") or Path(model_name).name  # keyed by its model's name
    score.name = "default" if model_name == "default" else f"default:{other}"
    score.name += "-exact" if exact else ""
    score.name += "".join(f"-{s}" for s in skip_sources)  # never recorded as the full scorer
    score.name += "" if evidence_sources else "-model-only"
    score.describe = {"model_name": model.info.get("name"), "model_fingerprint": model.fingerprint,
                      "backend": getattr(model, "backend", None),
                      "precision": None if choice is None else choice.as_dict(),
                      "evidence": [src.name for src in sources]}  # fmt: skip
    return score


def load_scorer(spec: str, model: str) -> Scorer:
    """``default``, ``default-exact`` or ``FILE.py:FACTORY`` / ``MODULE:FACTORY``
    (``FACTORY()`` returns the scorer)."""
    if spec in ("default", "default-exact"):
        return default_scorer(model, exact=spec == "default-exact")
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise ValueError(f"--scorer: use default, FILE.py:FACTORY or MODULE:FACTORY, not {spec!r}")
    if where.endswith(".py"):
        loader = importlib.util.spec_from_file_location(Path(where).stem, where)
        mod = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(mod)
    else:
        mod = importlib.import_module(where)
    scorer = getattr(mod, attr)()
    if not getattr(scorer, "name", None):
        scorer.name = spec
    return scorer


# -- report ------------------------------------------------------------------------
def table(summary: dict) -> list[str]:
    """Markdown rows: category, queries, P@5, P@10, nDCG@10, best P@5."""
    rows = ["| category | queries | P@5 | P@10 | nDCG@10 | best possible P@5 |",
            "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for cat, s in summary.items():
        rows.append(f"| {cat} | {s['queries']} | {s['p@5']:.3f} | {s['p@10']:.3f} | "
                    f"{s['ndcg@10']:.3f} | {s['best_p@5']:.3f} |")  # fmt: skip
    return rows


def main() -> dict:
    sys.path.insert(0, str(HERE))
    from _common import record

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scorer", default="default")
    ap.add_argument("--model", default="default", help="the bundle of the default scorer")
    ap.add_argument("--split", choices=("dev", "slice", "both"), default="both")
    args = ap.parse_args()
    scorer = load_scorer(args.scorer, args.model)
    splits = ("dev", "slice") if args.split == "both" else (args.split,)
    path = Path(__file__).with_suffix(".json")
    runs = json.loads(path.read_text()).get("scorers", {}) if path.is_file() else {}
    mine = runs.get(scorer.name, {})
    for split in splits:
        queries = load_queries(SPLIT_FILES[split])
        ids = split_images(split)
        t0 = time.perf_counter()
        scores = np.asarray(scorer([q["text"] for q in queries], ids))
        seconds = time.perf_counter() - t0
        sha = hashlib.sha256(SPLIT_FILES[split].read_bytes()).hexdigest()[:16]
        mine[split] = {"images": len(ids), "judgments_sha256": sha, "seconds": round(seconds, 1),
                       **evaluate(queries, ids, scores)}  # fmt: skip
        print(f"{scorer.name} on {split} ({len(queries)} queries, {len(ids)} photos)")
        print("\n".join(table(mine[split]["summary"])))
    mine["describe"] = getattr(scorer, "describe", None)
    mine["command"] = " ".join(["python benchmarks/query_scoreboard.py", *sys.argv[1:]])
    runs[scorer.name] = mine
    # each split's figures carry the sha256 of the judgments they were scored on: a
    # scorer whose sha differs from this one was scored on older judgments
    judgments = {s: hashlib.sha256(SPLIT_FILES[s].read_bytes()).hexdigest()[:16]
                 for s in SPLIT_FILES if SPLIT_FILES[s].is_file()}  # fmt: skip
    return record(path, {"judgments_sha256": judgments, "scorers": runs})


if __name__ == "__main__":
    main()
