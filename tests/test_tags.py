"""Tag mining (relevance scores by hand), SJE/ListSJE against naive loops, precision@k
and MAP/MiAP against naive implementations, and training through the shared trainer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.conftest import write_image
from vsekit.lab.losses import ListSJELoss, SJELoss
from vsekit.lab.tags.data import TagData
from vsekit.lab.tags.metrics import map_and_miap, precision_at_k, sample_distractors
from vsekit.lab.tags.mining import (
    Mention,
    ParsedCaption,
    parse_captions,
    parse_relevance,
    rank_tags,
)


def cap(n_words, nouns, height=3):
    """nouns: (tag, position, depth)."""
    ms = tuple(Mention(*m) for m in nouns)
    return ParsedCaption(n_words, height, ms, ms)


# "A dog runs on grass" / "Grass and a dog" / "The dog bites ."
CAPS = [
    cap(5, [("dog", 2, 1), ("grass", 5, 2)], height=2),
    cap(4, [("grass", 1, 0), ("dog", 4, 1)], height=1),
    cap(3, [("dog", 2, 1)], height=1),
]


def test_relevance_by_hand():
    # r_loc(dog) = max(1-2/5, 1-4/4, 1-2/3) = 0.6 ; r_loc(grass) = max(1-5/5, 1-1/4) = 0.75
    # |t| = 2 + 2 + 1 = 5 ; r_freq(dog) = 3/5, r_freq(grass) = 2/5
    loc = dict(rank_tags(CAPS, "nouns", alpha=0.0))
    assert loc == pytest.approx({"grass": 0.75, "dog": 0.6})
    assert [t for t, _ in rank_tags(CAPS, "nouns", 0.0)] == ["grass", "dog"]
    freq = dict(rank_tags(CAPS, "nouns", alpha=1.0))
    assert freq == pytest.approx({"dog": 0.6, "grass": 0.4})
    a = dict(rank_tags(CAPS, "nouns", alpha=0.75))
    assert a == pytest.approx({"dog": 0.6, "grass": 0.75 * 0.4 + 0.25 * 0.75})
    # syntactic: 1 - (depth+1)/(height+1): dog max(1-2/3, 1-2/2, 1-2/2) = 1/3,
    # grass max(1-3/3, 1-1/2) = 1/2
    syn = dict(rank_tags(CAPS, "nouns", alpha=0.0, syntactic=True))
    assert syn == pytest.approx({"dog": 1 / 3, "grass": 0.5})


def test_ties_are_broken_deterministically():
    c = [cap(4, [("zebra", 1, 0), ("apple", 1, 0)])]  # same loc, same freq
    assert [t for t, _ in rank_tags(c, "nouns", 0.5)] == ["apple", "zebra"]
    # equal r_0.5 = 0.5 for a (loc .5, freq .5) and b (loc .75, freq .25): b, the higher
    # r_loc, comes first although a sorts first alphabetically
    c2 = [cap(2, [("a", 1, 0)]), cap(4, [("b", 1, 0)]), cap(4, [("a", 3, 0), ("z", 4, 0)])]
    r = rank_tags(c2, "nouns", 0.5)
    assert r == [("b", 0.5), ("a", 0.5), ("z", 0.125)]
    assert rank_tags(list(reversed(c2)), "nouns", 0.5) == r


def test_relevance_specs():
    assert parse_relevance("loc") == (0.0, False)
    assert parse_relevance("freq") == (1.0, False)
    assert parse_relevance("alpha=0.25") == (0.25, False)
    assert parse_relevance("syntactic") == (0.0, True)
    assert parse_relevance("syntactic:alpha=0.5") == (0.5, True)
    for bad in ["alpha=2", "alpha=x", "nope"]:
        with pytest.raises(ValueError, match="relevance"):
            parse_relevance(bad)


def test_spacy_parses_the_papers_example_and_compounds():
    dog, field = parse_captions(["The dog bites.", "A boy kicks a ball on the soccer field ."])
    assert dog.n_words == 3
    (m,) = [m for m in dog.nouns if m.tag == "dog"]
    assert m.position / dog.n_words == pytest.approx(2 / 3)  # the paper's loc = 2/3
    assert dict(rank_tags([dog], "nouns", 0.0))["dog"] == pytest.approx(1 / 3)
    assert {m.tag for m in field.nouns} >= {"boy", "ball", "soccer", "field"}
    comp = {m.tag: m for m in field.compounds}
    assert "soccer field" in comp and "soccer" not in comp and "field" not in comp
    assert comp["soccer field"].position == 8  # first word of the compound
    # a punctuation token inside a compound (seen in Flickr8k) is not a word of the tag
    (odd,) = parse_captions(["A woman fans herself in the mid-afternoon sun ."])
    assert all("-" not in m.tag.split() for m in odd.compounds)


# ---------------------------------------------------------------- losses
def naive_sje(s, n, delta):
    out = 0.0
    for row, m in zip(s, n, strict=True):
        best = 0.0
        for i in range(m):
            d = (0.0 if i == 0 else 1.0) if delta == "I" else 1 - 1 / (i + 1)
            best = max(best, d + row[i] - row[0])
        out += best
    return out / len(s)


def naive_listsje(s, n, k_top):
    out = 0.0
    for row, m in zip(s, n, strict=True):
        for k in range(min(k_top, m)):
            for i in range(k + 1, m):
                out += max(0.0, 1 - 1 / (i - k + 1) + row[i] - row[k])
    return out / len(s)


@pytest.mark.parametrize("delta", ["I", "II"])
def test_sje_equals_naive_loop(delta):
    rng = np.random.default_rng(0)
    s = rng.normal(size=(6, 7))
    n = [7, 1, 3, 5, 2, 6]
    mask = torch.tensor([[j < m for j in range(7)] for m in n])
    got = SJELoss(delta)(torch.tensor(s), mask)
    assert float(got) == pytest.approx(naive_sje(s, n, delta))


@pytest.mark.parametrize("k_top", [1, 3, 5, 10])
def test_listsje_equals_naive_loop(k_top):
    rng = np.random.default_rng(1)
    s = rng.normal(size=(5, 8))
    n = [8, 2, 1, 6, 4]
    mask = torch.tensor([[j < m for j in range(8)] for m in n])
    got = ListSJELoss(k_top)(torch.tensor(s), mask)
    assert float(got) == pytest.approx(naive_listsje(s, n, k_top))


# ---------------------------------------------------------------- metrics
def naive_pk(pool_scores, n_own, k):
    vals = []
    for s, m in zip(pool_scores, n_own, strict=True):
        idx = sorted(range(len(s)), key=lambda j: (-s[j], -j))  # ties: against the model
        kk = min(k, m)
        vals.append(len(set(idx[:k]) & set(range(kk))) / kk)
    return float(np.mean(vals))


def test_precision_at_k_equals_naive_and_random_reference():
    rng = np.random.default_rng(2)
    pools = [np.round(rng.normal(size=p), 1) for p in (3, 8, 12, 5)]  # rounding: ties
    n_own = [3, 4, 2, 5]
    for k in (1, 2, 5):
        p, r = precision_at_k(pools, n_own, k)
        assert p == pytest.approx(naive_pk(pools, n_own, k))
        # the random reference: the mean over many random rankings
        sims = [naive_pk([rng.random(len(x)) for x in pools], n_own, k) for _ in range(3000)]
        assert r == pytest.approx(np.mean(sims), abs=0.02)
    perfect = [np.arange(len(x))[::-1].astype(float) for x in pools]
    assert precision_at_k(perfect, n_own, 5)[0] == 1.0


def test_distractors_are_other_tags():
    rng = np.random.default_rng(3)
    own = [np.array([1, 2, 3]), np.array([4])]
    d = sample_distractors(own, 12, 6, rng, exclude=(0,))
    for o, x in zip(own, d, strict=True):
        assert len(set(x)) == 6 and not (set(x) & set(o)) and 0 not in x
    with pytest.raises(ValueError, match="distractors"):
        sample_distractors(own, 5, 4, rng)


def naive_ap(scores, rel):
    idx = sorted(range(len(scores)), key=lambda j: (-scores[j], rel[j]))
    hits, precs = 0, []
    for rank, j in enumerate(idx, 1):
        if rel[j]:
            hits += 1
            precs.append(hits / rank)
    return np.mean(precs)


def test_map_and_miap_equal_naive():
    rng = np.random.default_rng(4)
    s = np.round(rng.normal(size=(9, 6)), 1)
    rel = rng.random((9, 6)) < 0.3
    rel[:, 5] = False  # a tag nobody has: left out of MAP
    rel[0, 0] = True
    m, mi = map_and_miap(s, rel)
    cols = [t for t in range(6) if rel[:, t].any()]
    rows = [i for i in range(9) if rel[i].any()]
    assert m == pytest.approx(np.mean([naive_ap(s[:, t], rel[:, t]) for t in cols]))
    assert mi == pytest.approx(np.mean([naive_ap(s[i], rel[i]) for i in rows]))


# ---------------------------------------------------------------- training
WORDS = ["dog", "cat", "car", "tree", "ball", "man", "boat", "horse", "bike", "beach"]


def planted_tags(n, seed):
    """Features are a rank-weighted sum of the tags' GloVe vectors (plus noise), so a
    bilinear W can recover both the tags and their order."""
    from vsekit.lab.text.glove import tag_vectors

    vecs, _ = tag_vectors(WORDS)
    rng = np.random.default_rng(seed)
    lists, feats = [], []
    for _ in range(n):
        tags = list(rng.choice(len(WORDS), size=3, replace=False))
        lists.append([WORDS[t] for t in tags])
        f = 3 * vecs[tags[0]] + 2 * vecs[tags[1]] + vecs[tags[2]]
        feats.append(np.concatenate([f, rng.normal(0, 0.1, size=14)]))
    return np.asarray(feats, np.float32), lists


@pytest.mark.parametrize("loss", [{"name": "sje", "delta": "II"}, {"name": "listsje", "k_top": 2}])
def test_tag_ranker_trains_through_the_shared_trainer(tmp_path, loss):
    from vsekit.lab.models.bilinear import BilinearConfig
    from vsekit.lab.train.config import DataConfig, ExperimentConfig, LossConfig, TrainConfig
    from vsekit.lab.train.trainer import Trainer, load_run

    tf, tl = planted_tags(300, 0)
    df, dl = planted_tags(100, 1)
    data = TagData.build(tf, tl, df, dl)
    cfg = ExperimentConfig(
        name="tags", task="tags", data=DataConfig(), model=BilinearConfig(),
        loss=LossConfig(**loss),
        train=TrainConfig(epochs=15, batch_size=16, lr=1e-2, seed=0, threads=1,
                          collapse_epochs=0),
    )  # fmt: skip
    res = Trainer(cfg, data, tmp_path / "run", progress=False).fit()
    m = res["best_metrics"]
    assert m["p1"] >= 80 and m["random_p1"] == pytest.approx(100 / 3), m
    rows = [json.loads(r) for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["loss"] < rows[0]["loss"]
    model, meta = load_run(tmp_path / "run")
    assert meta["config"]["task"] == "tags" and set(model.vocab.itos) == set(WORDS)
    # with distractors the model still beats the random ranker by far
    d10 = data.evaluate(model, distractors=7)
    assert d10["p1"] > 3 * d10["random_p1"]
    from vsekit.lab.tags.ranking import rank_vocabulary

    ranked, unknown = rank_vocabulary(model, df[:1], [*WORDS, "zzqqxx"], k=3)
    assert unknown == ["zzqqxx"] and ranked[0][0] == dl[0][0]
    from vsekit.lab.tags.evaluate import evaluate_tags

    full = evaluate_tags(model, data, distractors=(0, 3))
    assert set(full["predictability"]) == {"0", "3"} and full["vocab_tags"] == len(WORDS)
    assert full["miap"] > 80 and 0 < full["map"] <= 100


def test_negatives_are_other_tags_appended_after_the_own_ones():
    tf, tl = planted_tags(40, 0)
    data = TagData.build(tf, tl, tf, tl)
    data.negatives = 4
    seen = []

    def spy(scores, mask):
        seen.append((scores.shape, mask.sum(dim=1)))
        return scores.sum() * 0

    class Scorer(torch.nn.Module):
        device = torch.device("cpu")

        def score_lists(self, feats, vecs, ids=None):
            return vecs.sum(dim=2)

    b = np.arange(8)
    data.batch_loss(Scorer(), spy, b)
    ((shape, lengths),) = seen
    assert shape == (8, 7) and lengths.tolist() == [7] * 8  # 3 own + 4 negatives
    ids, _ = data.padded([data.train_lists[0]])
    assert ids.shape[1] == 3


def test_tag_bce_equals_naive():
    from vsekit.lab.losses import TagBCELoss

    rng = np.random.default_rng(0)
    s, y = rng.normal(size=(3, 5)), rng.random((3, 5)) < 0.3
    p = 1 / (1 + np.exp(-s))
    naive = -np.mean(np.where(y, np.log(p), np.log(1 - p)))
    got = TagBCELoss()(torch.from_numpy(s), torch.from_numpy(y))
    assert float(got) == pytest.approx(naive, rel=1e-9)


def test_shown_tags_and_calibration_equal_naive():
    from vsekit.lab.tags.metrics import calibrate_threshold, shown_tags

    rng = np.random.default_rng(1)
    rel = rng.random((30, 12)) < 0.2
    probs = np.clip(0.6 * rel + 0.5 * rng.random((30, 12)), 0, 1)
    for thr in (0.3, 0.55, 0.8):
        got = shown_tags(probs, rel, thr, k=3)
        shown = [[j for j in np.argsort(-row, kind="stable")[:3] if row[j] >= thr] for row in probs]
        n = sum(map(len, shown))
        hits = sum(int(rel[r, j]) for r, js in enumerate(shown) for j in js)
        assert got["precision"] == pytest.approx(hits / n)
        assert got["tags_per_image"] == pytest.approx(n / 30)
        assert got["recall"] == pytest.approx(hits / rel.sum())
        assert got["images_with_tags"] == pytest.approx(np.mean([bool(s) for s in shown]))
    t = calibrate_threshold(probs, rel, 0.9, k=3)
    assert shown_tags(probs, rel, t, 3)["precision"] >= 0.9
    assert shown_tags(probs, rel, round(t - 0.05, 2), 3)["precision"] < 0.9  # the lowest such
    with pytest.raises(ValueError, match="no threshold"):
        calibrate_threshold(np.zeros((2, 3)) + 0.99, np.zeros((2, 3), bool))


def test_calibrated_tagger_learns_to_reject_absent_tags(tmp_path):
    """learn_tags + tag_bce: s = x W (phi + d) + b over every tag; unseen tags keep their
    GloVe vector and get the mean bias; the runtime shows only tags above the threshold."""
    from vsekit.lab.models.bilinear import BilinearConfig
    from vsekit.lab.text.glove import tag_vectors
    from vsekit.lab.train.config import DataConfig, ExperimentConfig, LossConfig, TrainConfig
    from vsekit.lab.train.trainer import Trainer, load_run
    from vsekit.runtime.base import BaseModel

    tf, tl = planted_tags(300, 0)
    df, dl = planted_tags(100, 1)
    data = TagData.build(tf, tl, df, dl)
    data.select = "miap"
    cfg = ExperimentConfig(
        name="tags", task="tags", data=DataConfig(), model=BilinearConfig(learn_tags=True),
        loss=LossConfig(name="tag_bce"),
        train=TrainConfig(epochs=40, batch_size=32, lr=3e-2, seed=0, threads=1,
                          collapse_epochs=0),
    )  # fmt: skip
    res = Trainer(cfg, data, tmp_path / "run", progress=False).fit()
    assert res["best_metrics"]["miap"] > 90, res["best_metrics"]
    model, _ = load_run(tmp_path / "run")
    names = [*WORDS, "zebra"]  # zebra: never a training tag
    vecs, _ = tag_vectors(names)
    ids = model.tag_ids(names)
    assert ids[-1] == -1 and (ids[:-1] >= 0).all()
    with torch.no_grad():
        got = model.scores(torch.from_numpy(df[:4]), torch.from_numpy(vecs), ids).numpy()
        W, off, b = model.W.numpy(), model.offsets.numpy(), model.bias.numpy()
    rows = ids.numpy()
    for j in range(len(names)):
        v = vecs[j] + (off[rows[j]] if rows[j] >= 0 else 0)
        bj = b[rows[j]] if rows[j] >= 0 else b.mean()
        np.testing.assert_allclose(got[:, j], df[:4] @ W @ v + bj, rtol=1e-4, atol=1e-4)
    # the runtime path (numpy): the shipped table holds phi + d and b; threshold applied
    rt = BaseModel.__new__(BaseModel)
    rt.info = {"tagger": {"threshold": 0.5}}
    rt.tagger = (W, list(model.vocab.itos))
    tv, _ = tag_vectors(list(model.vocab.itos))
    with torch.no_grad():
        v, bias = model.tag_terms(torch.from_numpy(tv), model.tag_ids(list(model.vocab.itos)))
    rt._tag_table, rt._tag_bias, rt._tag_vectors = (v.numpy(), [True] * len(tv)), bias.numpy(), None
    shown = rt.tags_from_features(df[:20], k=10)
    p = 1 / (1 + np.exp(-(df[:20] @ W @ v.numpy().T + bias.numpy())))
    for r, tags in enumerate(shown):
        want = sorted(
            (model.vocab.itos[j] for j in np.flatnonzero(p[r] >= 0.5)),
            key=lambda t: -p[r][model.vocab.itos.index(t)],
        )
        assert {t for t, _ in tags} == set(want[:10])  # (ties may swap saturated ones)
        for t, q in tags:
            assert q == pytest.approx(p[r][model.vocab.itos.index(t)], abs=1e-5)
        assert [q for _, q in tags] == sorted((q for _, q in tags), reverse=True)
        assert set(t for t, _ in tags) <= set(dl[r])  # confident tags are right here
        assert all(0.5 <= q <= 1 for _, q in tags)


def test_config_overrides():
    from vsekit.lab.models.w2vv import W2VVConfig
    from vsekit.lab.train.config import ConfigError, ExperimentConfig, LossConfig, apply_overrides

    base = ExperimentConfig(model=W2VVConfig(), loss=LossConfig(name="listsje"))
    cfg = apply_overrides(base, ["tags.scheme=compound", "loss.k_top=3", "model.hidden=[10, 5]"])
    assert cfg.tags.scheme == "compound" and cfg.loss.k_top == 3 and cfg.model.hidden == [10, 5]
    for bad, msg in [("loss.nope=1", "unknown field"), ("train.lr=abc", "train.lr"),
                     ("task=other", "task"), ("novalue", "KEY=VALUE"),
                     ("loss.margin=0.1", "loss.margin must be unset: loss listsje takes only"),
                     ("loss.name=listsej", "loss.name must be"),
                     ("model.text.kind=gur", "model.text.kind must be"),
                     ("train.optimizer=adma", "train.optimizer must be"),
                     ("train.lr=[1", "not valid YAML")]:  # fmt: skip
        with pytest.raises(ConfigError, match=msg):
            apply_overrides(base, [bad])
    with pytest.raises(ConfigError, match="unknown field"):  # w2vv's option on a joint model
        apply_overrides(ExperimentConfig(), ["model.hidden=[10]"])


def test_cli_tags_mine(tmp_path, capsys):
    from vsekit.cli import main

    root = tmp_path / "ds"
    rows = []
    for k, caps in enumerate([["A dog runs on the grass .", "The dog is black ."],
                              ["A man rides a bike on the soccer field ."]]):  # fmt: skip
        write_image(root / f"{k}.jpg", seed=k)
        rows += [{"image": f"{k}.jpg", "caption": c, "split": "train"} for c in caps]
    (root / "captions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "tags.json.gz"
    args = ["tags", "mine", "--root", str(root), "--scheme", "compound", "--out", str(out)]
    assert main([*args, "--relevance", "alpha=0.5"]) == 0
    text = capsys.readouterr().out
    assert "2 images" in text and "soccer field" in text
    from vsekit.lab.tags.mining import load_tags

    meta, tags = load_tags(out)
    assert meta["scheme"] == "compound" and tags["0.jpg"][0][0] == "dog"
    assert main([*args, "--relevance", "alpha=7"]) == 2
    assert "relevance" in capsys.readouterr().err
