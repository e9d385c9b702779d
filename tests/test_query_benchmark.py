"""benchmarks/query_scoreboard.py: the judgment files are well-formed, and the metrics
are right on a hand-worked example."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import query_scoreboard as qs  # noqa: E402

MIN_QUERIES = {"dev": 150, "slice": 60}


@pytest.fixture(scope="module")
def split_ids() -> dict[str, set[str]]:
    if not (qs.FLICKR8K / "Flickr8k.token.txt").is_file():
        pytest.skip(f"real Flickr8k not found at {qs.FLICKR8K}")
    return {s: set(qs.split_images(s)) for s in qs.SPLIT_FILES}


@pytest.mark.parametrize("split", sorted(qs.SPLIT_FILES))
def test_judgments_well_formed(split, split_ids):
    queries = qs.load_queries(qs.SPLIT_FILES[split])
    assert len(queries) >= MIN_QUERIES[split]
    assert {q["category"] for q in queries} == set(qs.CATEGORIES)
    ids = [q["id"] for q in queries]
    assert len(ids) == len(set(ids)), "duplicate query ids"
    texts = [q["text"].strip().lower() for q in queries]
    assert len(texts) == len(set(texts)), "duplicate query texts"
    photos = split_ids[split]
    for q in queries:
        assert set(q) >= {"id", "text", "category", "relevant", "judged_by", "notes"}, q["id"]
        assert q["text"].strip(), q["id"]
        assert q["category"] in qs.CATEGORIES, q["id"]
        assert q["judged_by"] in qs.JUDGED_BY, q["id"]
        assert q["relevant"], f"{q['id']}: no relevant photo"
        assert len(q["relevant"]) == len(set(q["relevant"])), f"{q['id']}: a photo twice"
        missing = set(q["relevant"]) - photos
        assert not missing, f"{q['id']}: not {split} photos: {sorted(missing)}"
        assert set(q.get("looked_at", [])) <= photos, q["id"]
        assert all((qs.FLICKR8K / "images" / p).is_file() for p in q["relevant"]), q["id"]


def test_dev_and_slice_photos_are_disjoint(split_ids):
    assert not split_ids["dev"] & split_ids["slice"]
    assert len(split_ids["dev"]) == 1000 and len(split_ids["slice"]) == 500


# hand-worked: relevant {a, b, c, d}; the ranking returns a, x, b, y, c, ...
RANKED = ["a", "x", "b", "y", "c", "z", "d"]
RELEVANT = {"a", "b", "c", "d"}


def test_precision_by_hand():
    assert qs.precision_at(RANKED, RELEVANT, 5) == pytest.approx(3 / 5)
    assert qs.precision_at(RANKED, RELEVANT, 2) == pytest.approx(1 / 2)
    # divided by k even when fewer are returned or relevant
    assert qs.precision_at(RANKED, RELEVANT, 10) == pytest.approx(4 / 10)
    assert qs.best_precision_at(4, 5) == pytest.approx(4 / 5)
    assert qs.best_precision_at(4, 10) == pytest.approx(4 / 10)


def test_ndcg_by_hand():
    # DCG@5 = 1/log2(2) + 1/log2(4) + 1/log2(6) = 1 + 0.5 + 0.386853 = 1.886853
    # IDCG@5 (four relevant) = 1 + 0.630930 + 0.5 + 0.430677 = 2.561606
    assert qs.ndcg_at(RANKED, RELEVANT, 5) == pytest.approx(0.736590, abs=1e-5)
    # an ideal ranking scores 1; nothing relevant in the top k scores 0
    assert qs.ndcg_at(["d", "c", "b", "a"], RELEVANT, 10) == pytest.approx(1.0)
    assert qs.ndcg_at(["x", "y", "a"], RELEVANT, 2) == 0.0
    # one relevant photo at rank 3: 1/log2(4) over 1
    assert qs.ndcg_at(["x", "y", "a"], {"a"}, 10) == pytest.approx(0.5)
    # wrong formulas give other values: log2(i) discounts, or an ideal of the hits only
    assert not math.isclose(qs.ndcg_at(RANKED, RELEVANT, 5), 1.886853 / (1 + 1 + 1 / math.log2(3)))
    assert not math.isclose(qs.ndcg_at(RANKED, RELEVANT, 5), 1.886853 / 2.130930)


def test_rank_ids_ties_and_refused_queries():
    ids = ["b", "a", "c"]
    assert qs.rank_ids(np.array([1.0, 1.0, 2.0]), ids) == ["c", "a", "b"]
    assert qs.rank_ids(np.full(3, -np.inf), ids) == []
    m = qs.query_metrics([], {"a"})
    assert m["p@5"] == m["ndcg@10"] == 0 and m["first_relevant_rank"] is None


def test_evaluate_summarises_per_category():
    queries = [
        {"id": "q1", "category": "colour", "relevant": ["a", "b"]},
        {"id": "q2", "category": "count", "relevant": ["c"]},
    ]
    ids = ["a", "b", "c", "d", "e", "f"]
    scores = np.array([[6, 5, 4, 3, 2, 1], [6, 5, 4, 3, 2, 1]], np.float32)
    out = qs.evaluate(queries, ids, scores)["summary"]
    assert out["colour"]["p@5"] == pytest.approx(2 / 5)
    assert out["colour"]["ndcg@10"] == pytest.approx(1.0)
    assert out["count"]["ndcg@10"] == pytest.approx(0.5)
    assert out["all"]["queries"] == 2
    assert out["all"]["p@5"] == pytest.approx((2 / 5 + 1 / 5) / 2)


def test_paired_comparison_counts_wins_and_brackets_the_difference():
    import scoreboard_paired as sp

    base = [{"id": f"q{i}", "category": "c" if i % 2 else "d", "p@5": 0.2} for i in range(40)]
    same = sp.paired(base, base, "p@5")
    assert same["mean_difference"] == 0 and same["interval_95"] == [0, 0] and same["ties"] == 40
    better = [dict(q, **{"p@5": 0.6 if i < 10 else 0.2}) for i, q in enumerate(base)]
    r = sp.paired(base, better, "p@5")
    assert (r["wins"], r["losses"], r["ties"]) == (10, 0, 30)
    assert r["mean_difference"] == pytest.approx(0.1)
    lo, hi = r["interval_95"]
    assert 0 < lo < 0.1 < hi
    assert r["by_category"] == {"c": pytest.approx(0.1), "d": pytest.approx(0.1)}
