"""Consensus re-ranking of annotation captions (vsekit.runtime.consensus): the agreement
against a per-pair loop, the settings checked by name, annotation through the library
and `vse annotate` on a tiny bundle with it on, and the selection rule of
benchmarks/annotate_consensus.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_tiny_model, one_photo_service, write_image
from vsekit.bundle import ModelError
from vsekit.runtime.consensus import ConsensusRule, agreement, best_captions, rescore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from annotate_consensus import BAR, R1_SLACK, TRUE_SLACK, choose  # noqa: E402

CAPTIONS = ["a dog runs on grass", "a man stands in a field", "a red car on the road",
            "two dogs play in the snow", "a woman sits on a bench", "a black dog jumps",
            "people walk down the street", "a boy rides a bike"]  # fmt: skip


def test_agreement_is_the_mean_cosine_with_the_best_others():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(3, 7, 5)) * rng.uniform(0.5, 2.0, size=(3, 7, 1))  # any norms
    u = v / np.linalg.norm(v, axis=-1, keepdims=True)
    for m in (2, 4, 7, 20):
        top = min(m, 7)
        ref = [[np.mean([u[b, j] @ u[b, x] for x in range(top) if x != j]) for j in range(7)]
               for b in range(3)]  # fmt: skip
        np.testing.assert_allclose(agreement(v, m), ref, atol=1e-6)  # float32
    rule = ConsensusRule(weight=0.3, neighbours=4)
    s = rng.normal(size=(3, 7))
    np.testing.assert_allclose(rescore(s, v, rule), s + 0.3 * agreement(v, 4), atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        agreement(v[:, :1], 4)


def test_settings_are_checked_by_name():
    r = ConsensusRule.from_config({"weight": 0.2, "neighbours": 10, "candidates": 50,
                                   "enabled": True})  # fmt: skip
    assert (r.weight, r.neighbours, r.candidates, r.enabled) == (0.2, 10, 50, True)
    assert ConsensusRule.from_config(None) == ConsensusRule()  # absent: off
    for bad, field in (({"weight": "much"}, "weight"), ({"weight": -0.1}, "weight"),
                       ({"neighbours": 1}, "neighbours"), ({"neighbours": 2.5}, "neighbours"),
                       ({"candidates": 0}, "candidates"), ({"enabled": "yes"}, "enabled"),
                       ({"weight": float("inf")}, "weight"),
                       ({"candidates": 5}, "candidates"),  # fewer than the 10 neighbours
                       ({"neighbors": 20}, r": unknown field\(s\) \['neighbors'\]")):  # fmt: skip
        with pytest.raises(ValueError, match=f"consensus.?{field}"):
            ConsensusRule.from_config(bad)
    for kw in ({"neighbours": 0}, {"neighbours": 1}, {"weight": float("nan")},
               {"neighbours": 20, "candidates": 10}):  # fmt: skip
        with pytest.raises(ValueError):  # built directly, checked as well
            ConsensusRule(**kw)
    assert ConsensusRule.from_config({"weight": 0.1, "chosen_on": "slice"}).weight == 0.1


def consensus_bundle(tmp_path: Path, rule: dict) -> Path:
    bundle = make_tiny_model(CAPTIONS).save(tmp_path / "m")
    (bundle / "evidence.json").write_text(json.dumps({"consensus": rule}))
    return bundle


def _by_hand(m, photo: str, rule: ConsensusRule) -> list[tuple[str, float]]:
    """The pool's captions re-ranked by the formula, from the pool's own scores."""
    pool = m.caption_pool
    raw = pool.best(m.encode_image([photo]), len(CAPTIONS))[0]
    vec = {c: pool.embeddings[pool.captions.index(c)].astype(np.float64) for c, _ in raw}
    unit = {c: v / np.linalg.norm(v) for c, v in vec.items()}
    top = [c for c, _ in raw[: rule.neighbours]]
    new = []
    for c, s in raw:
        others = [unit[c] @ unit[o] for o in top if o != c]
        new.append((c, s + rule.weight * float(np.mean(others))))
    return sorted(new, key=lambda x: -x[1])


def test_library_and_cli_annotate_under_the_bundles_consensus(tmp_path, capsys):
    import vsekit
    from vsekit.cli import main

    setting = {"weight": 1.0, "neighbours": 3, "candidates": len(CAPTIONS), "enabled": True}
    bundle = consensus_bundle(tmp_path, setting)
    photo = str(write_image(tmp_path / "p.jpg", seed=3))
    m = vsekit.load_model(str(bundle), backend="torch")
    rule = m.annotator.consensus
    assert rule == ConsensusRule(1.0, 3, len(CAPTIONS), True)
    want = _by_hand(m, photo, rule)
    raw = m.caption_pool.best(m.encode_image([photo]), len(CAPTIONS))[0]
    assert [c for c, _ in want] != [c for c, _ in raw]  # the weight changes the order
    got = m.annotate(photo, k=4)
    assert [c for c, _ in got] == [c for c, _ in want[:4]]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want[:4]], atol=1e-5)
    assert main(["annotate", photo, "--model", str(bundle), "--k", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["text"] for c in out["captions"]] == [c for c, _ in want[:4]]
    # off, or weight 0: the pool's own order
    off = consensus_bundle(tmp_path / "off", {**setting, "enabled": False})
    m_off = vsekit.load_model(str(off), backend="torch")
    assert m_off.annotator.consensus is None and m_off.annotate(photo, k=4) == raw[:4]
    zero = best_captions(m.caption_pool, m.encode_image([photo]), 4,
                         ConsensusRule(0.0, 3, len(CAPTIONS)))[0]  # fmt: skip
    assert [c for c, _ in zero] == [c for c, _ in raw[:4]]


def test_a_bad_setting_is_a_model_error_naming_the_file_and_field(tmp_path):
    bundle = consensus_bundle(tmp_path, {"weight": "much", "enabled": True})
    with pytest.raises(ModelError, match="evidence.json: consensus.weight"):
        ConsensusRule.from_bundle(bundle)
    (bundle / "evidence.json").write_text(json.dumps({"consensus": [1, 2]}))
    with pytest.raises(ModelError, match="evidence.json: consensus: an object"):
        ConsensusRule.from_bundle(bundle)


# -- the selection rule of benchmarks/annotate_consensus.py ----------------------------
def _row(rate: float, r1: float, r5: float, true: float = 1.5, weight: float = 0.1,
         m: int = 10) -> dict:  # fmt: skip
    return {"setting": {"weight": weight, "neighbours": m, "candidates": 50},
            "captions": {"invented_rate": rate}, "i2t": {"r1": r1, "r5": r5},
            "true_per_annotation": true}  # fmt: skip


BASE = {"captions": {"invented_rate": 30.0}, "i2t": {"r1": 50.0, "r5": 80.0},
        "true_per_annotation": 1.5}  # fmt: skip


def test_selection_needs_recall_and_true_nouns_kept_and_the_bar():
    rows = [_row(20.0, 50.0, 79.8),  # R@5 falls
            _row(21.0, 50.0 - R1_SLACK - 0.2, 80.0),  # R@1 falls past the slack
            _row(22.0, 50.0, 80.0, true=1.5 * (1 - TRUE_SLACK) - 0.01),  # says less
            _row(27.0, 50.0 - R1_SLACK, 80.0, true=1.5 * (1 - TRUE_SLACK)),  # admissible
            _row(27.5, 50.2, 80.2)]  # fmt: skip
    pick = choose(BASE, rows)
    assert pick["best"] is rows[3] and pick["admissible"] == 2
    assert pick["drop"] == 3.0 and pick["enabled"]
    short = choose(BASE, [_row(30.0 - BAR + 0.01, 50.0, 80.0)])
    assert short["best"] is not None and not short["enabled"]
    none = choose(BASE, rows[:3])
    assert none["best"] is None and not none["enabled"]
    tie = choose(BASE, [_row(25.0, 50.0, 80.0, weight=0.5), _row(25.0, 50.0, 80.0, weight=0.2)])
    assert tie["best"]["setting"]["weight"] == 0.2


def test_consensus_and_the_veto_together_and_small_pools(tmp_path):
    """With both on, the veto re-ranks consensus's order (its scores are consensus's);
    a pool smaller than k, or of one caption, or no photos at all, are no errors."""
    import vsekit
    from tests.test_annotate_veto import DOGGY, RULE, veto_bundle
    from vsekit.runtime.annotator import annotate_arrays

    bundle = veto_bundle(tmp_path)
    cfg = json.loads((bundle / "evidence.json").read_text())
    cfg["consensus"] = {"weight": 1.0, "neighbours": 3, "candidates": 8, "enabled": True}
    (bundle / "evidence.json").write_text(json.dumps(cfg))
    photo = str(write_image(tmp_path / "p.jpg", seed=3))
    m = vsekit.load_model(str(bundle), backend="torch")
    rule = m.annotator.consensus
    assert rule is not None and m.annotation_veto is not None and RULE["demote"] == 1.0
    emb, feats = m.embed_with_features([photo])
    a = annotate_arrays(m, emb, feats, k=8)[0]
    cons = best_captions(m.caption_pool, emb, 8, rule)[0]
    want = sorted(cons, key=lambda c: -(c[1] - (1.0 if c[0] in DOGGY else 0.0)))
    assert [c for c, _ in a.captions] == [c for c, _ in want]
    assert {v.text for v in a.demoted} <= DOGGY
    # small pools and no photos
    one = best_captions(m.caption_pool, emb, 20, rule)[0]
    assert len(one) == len(dict.fromkeys(m.caption_pool.captions))  # k past the pool
    assert best_captions(m.caption_pool, emb[:0], 3, rule) == []


def test_pool_rows_and_vectors_reproduce_the_compact_pools_scores():
    """The default's compact pool: the vectors of best_rows' rows, scored against the
    query less each caption's hubness penalty, give best_rows' scores."""
    import vsekit

    m = vsekit.load_model("default")
    pool = m.caption_pool
    assert pool.compact is not None
    q = m.encode_text(["a dog runs on the beach", "two children play in the snow"])
    scores, rows = pool.best_rows(q, 7)
    vec = pool.vectors(rows)
    assert vec.shape == (2, 7, m.embed_dim)
    pen = pool._hub_penalty()
    pen = np.zeros(len(pool.captions)) if pen is None else pen
    again = np.einsum("bnd,bd->bn", vec, q) - pen[rows]
    np.testing.assert_allclose(again, scores, atol=1e-4)
    assert [[c for c, _ in r] for r in pool.best(q, 7)] == [
        [pool.captions[j] for j in r] for r in rows]  # fmt: skip


def test_the_service_names_a_bad_consensus_setting(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    import vsekit
    from vsekit.serve.app import create_app

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    bundle = consensus_bundle(tmp_path, {"weight": 0.5, "neighbours": 3, "candidates": 8,
                                         "enabled": True})  # fmt: skip
    c, m, coll = one_photo_service(tmp_path, bundle)
    r = c.get("/annotate/1", params={"k": 3})
    assert r.status_code == 200, r.text
    want = best_captions(m.caption_pool, coll.embedding_of(1), 3, m.annotator.consensus)[0]
    assert [x["text"] for x in r.json()["captions"]] == [t for t, _ in want]
    (bundle / "evidence.json").write_text(json.dumps({"consensus": {"weight": "much"}}))
    m2 = vsekit.load_model(str(bundle), backend="torch")
    r = TestClient(create_app(coll, m2), base_url="http://127.0.0.1").get("/annotate/1")
    assert r.status_code == 500 and "evidence.json: consensus.weight" in r.text, r.text
