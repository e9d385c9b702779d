"""Word2VisualVec and the regression baseline: vectorisers, MLP, closed-form ridge,
text-to-text mAP, per-image query pooling, recall by caption length, and training
through the shared trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.test_train import make_data
from vsekit.lab.data import Vocabulary, tokenize
from vsekit.lab.eval.model_eval import evaluate_model, pool_per_image
from vsekit.lab.eval.text_retrieval import first_caption_split, recall_by_length, text_to_text_map
from vsekit.lab.losses import create_loss
from vsekit.lab.models import Word2VisualVec, create_model
from vsekit.lab.models.w2vv import W2VVConfig
from vsekit.lab.text.encoders import TextEncoderConfig, create_text_encoder
from vsekit.lab.text.glove import load_glove
from vsekit.lab.text.vectorizers import letter_trigrams
from vsekit.lab.train.config import DataConfig, ExperimentConfig, LossConfig, TrainConfig
from vsekit.lab.train.trainer import Trainer, load_run

TRAIN = ["A dog runs on the grass .", "The black dog jumps", "a cat"]


def vocab() -> Vocabulary:
    return Vocabulary.build(tokenize(t) for t in TRAIN)


def enc(kind: str, **kw):
    return create_text_encoder(vocab(), TextEncoderConfig(kind=kind, **kw))


def vec(e, texts):
    return e(**e.prepare(texts)).numpy()


def test_letter_trigrams():
    assert letter_trigrams("cat") == ["#ca", "cat", "at#"]
    assert letter_trigrams("a") == ["#a#"]
    assert letter_trigrams("dog") == ["#do", "dog", "og#"]


def test_bag_of_words_counts():
    e = enc("bow")
    words = [w for w in vocab().itos if w not in vocab().specials and w != "."]
    assert e.dim == len(words)  # every train word, no frequency cut; no punctuation
    v = vec(e, ["dog dog runs , unseenword", ""])
    assert v.shape == (2, e.dim)
    assert v[0, e.index["dog"]] == 2 and v[0, e.index["runs"]] == 1 and v[0].sum() == 3
    assert v[1].sum() == 0
    sw = enc("bow", stopwords=True)
    assert "the" not in sw.index and "a" not in sw.index and "dog" in sw.index
    assert vec(sw, ["the dog"]).sum() == 1


def test_trigram_counts():
    e = enc("trigram")
    v = vec(e, ["cat cat", "dogs"])
    assert v[0, e.index["#ca"]] == 2 and v[0, e.index["at#"]] == 2 and v[0].sum() == 6
    # "dogs": #do, dog known from "dog"; ogs, gs# unknown trigrams are dropped
    assert v[1, e.index["#do"]] == 1 and v[1, e.index["dog"]] == 1 and v[1].sum() == 2


def test_mean_glove_is_the_mean_of_word_vectors():
    index, vectors = load_glove()
    e = enc("mean_glove")
    v = vec(e, ["Dog runs zzqqxx .", "the the", "zzqqxx"])
    expect = (np.asarray(vectors[index["dog"]]) + np.asarray(vectors[index["runs"]])) / 2
    np.testing.assert_allclose(v[0], expect, rtol=1e-6)
    assert e.dim == 50 and not v[2].any()
    sw = enc("mean_glove", stopwords=True)
    assert not vec(sw, ["the the"]).any()


def w2vv_cfg(**kw) -> W2VVConfig:
    base = dict(kind="w2vv", text=TextEncoderConfig(kind="bow"), hidden=[16, 8], dropout=0.2)
    base.update(kw)
    return W2VVConfig(**base)


def test_mlp_shapes_and_output_relu():
    m = create_model(5, vocab(), w2vv_cfg())
    assert isinstance(m, Word2VisualVec)
    lin = [x for x in m.mlp if isinstance(x, torch.nn.Linear)]
    assert [(x.in_features, x.out_features) for x in lin] == [(m.text.dim, 16), (16, 8), (8, 5)]
    assert sum(isinstance(x, torch.nn.Dropout) for x in m.mlp) == 2  # after each hidden layer
    r = m.predict(TRAIN)
    assert r.shape == (3, 5) and (r >= 0).all()  # eq. 5: ReLU on the output
    assert torch.allclose(m.encode_texts(TRAIN).norm(dim=1), torch.ones(3))
    lin_model = create_model(5, vocab(), w2vv_cfg(hidden=[], out_relu=False))
    assert len(lin_model.mlp) == 1
    img, pred = m.training_outputs(torch.ones(3, 5, dtype=torch.int8), TRAIN)
    assert img.dtype == torch.float32 and pred.shape == (3, 5)


def test_mse_loss_matches_formula():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))
    got = create_loss("mse")(torch.tensor(a), torch.tensor(b))
    naive = sum(((b[k] - a[k]) ** 2).sum() for k in range(4)) / (4 * 6)
    assert float(got) == pytest.approx(naive)


@pytest.mark.parametrize("ridge", [0.0, 0.7])
def test_closed_form_ridge_equals_numpy(ridge):
    texts = ["dog runs", "black dog", "a cat", "cat runs", "the grass", "dog on grass", "cat"]
    rng = np.random.default_rng(1)
    y = rng.normal(size=(len(texts), 4)).astype(np.float32)
    m = create_model(4, vocab(), w2vv_cfg(hidden=[], out_relu=False, similarity="euclidean"))
    batches = [(torch.from_numpy(y[:3]), texts[:3]), (torch.from_numpy(y[3:]), texts[3:])]
    m.fit_closed_form(batches, ridge)
    x = m.vectorize(texts).double().numpy()
    xa = np.hstack([x, np.ones((len(x), 1))])
    if ridge == 0:
        sol = np.linalg.lstsq(xa, y.astype(np.float64), rcond=None)[0]
    else:  # ridge as least squares on rows sqrt(ridge) * I appended (bias not penalised)
        pen = np.sqrt(ridge) * np.eye(xa.shape[1])[:-1]
        sol = np.linalg.lstsq(
            np.vstack([xa, pen]), np.vstack([y, np.zeros((len(pen), 4))]), rcond=None
        )[0]
    np.testing.assert_allclose(m.mlp[0].weight.detach().numpy(), sol[:-1].T, atol=1e-4)
    np.testing.assert_allclose(m.mlp[0].bias.detach().numpy(), sol[-1], atol=1e-4)
    with pytest.raises(ValueError, match="hidden"):
        create_model(4, vocab(), w2vv_cfg()).fit_closed_form(batches)


def naive_map(vectors, c2i):
    q_idx, p_idx = [], []
    seen = set()
    for j, i in enumerate(c2i):
        (p_idx if i in seen else q_idx).append(j)
        seen.add(i)
    aps = []
    for q in q_idx:
        scored = []
        for p in p_idx:
            a, b = vectors[q], vectors[p]
            na, nb = np.linalg.norm(a), np.linalg.norm(b)
            s = 0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb))
            scored.append((s, c2i[p] == c2i[q]))
        scored.sort(key=lambda t: (-t[0], t[1]))  # ties: irrelevant first (pessimistic)
        hits, precs = 0, []
        for rank, (_, rel) in enumerate(scored, 1):
            if rel:
                hits += 1
                precs.append(hits / rank)
        aps.append(np.mean(precs) if precs else 0.0)
    return 100 * float(np.mean(aps))


def test_text_to_text_map_equals_naive():
    rng = np.random.default_rng(3)
    c2i = np.repeat(np.arange(30), 5)
    rng.shuffle(c2i)
    v = rng.normal(size=(150, 7))
    v[5] = 0  # a zero vector (all stop words)
    v[:, 0] = np.round(v[:, 0])  # some near-ties
    assert text_to_text_map(v, c2i, chunk=7) == pytest.approx(naive_map(v, c2i))
    ints = rng.integers(0, 2, size=(150, 3)).astype(float)  # many exact ties
    assert text_to_text_map(ints, c2i) == pytest.approx(naive_map(ints, c2i))
    q, p = first_caption_split(c2i)
    assert len(q) == 30 and len(p) == 120 and set(c2i[q]) == set(range(30))


def test_pool_per_image_and_recall_by_length():
    txt = torch.tensor([[1.0, 0], [3, 0], [0, 2], [0, 4]])
    pooled = pool_per_image(txt, [0, 0, 1, 1], normalize=False)
    assert torch.allclose(pooled, torch.tensor([[2.0, 0], [0, 3]]))
    bins = recall_by_length([1, 20, 3, 11], [5, 8, 12, 30], [8, 12], k=10)
    assert [b["bin"] for b in bins] == ["<=8", "9-12", ">=13"]
    assert [b["captions"] for b in bins] == [2, 1, 1]
    assert [b["r10"] for b in bins] == [50.0, 100.0, 0.0]


def w2vv_experiment(**train_kw) -> ExperimentConfig:
    t = dict(epochs=40, batch_size=16, lr=1e-2, captions="all", seed=0, threads=1,
             optimizer="rmsprop", eps=1e-6, collapse_epochs=0)  # fmt: skip
    t.update(train_kw)
    return ExperimentConfig(
        name="w2vv-planted",
        data=DataConfig(),
        model=w2vv_cfg(hidden=[64], dropout=0.0, out_relu=False),
        loss=LossConfig(name="mse"),
        train=TrainConfig(**t),
    )


def test_w2vv_trains_through_the_shared_trainer(tmp_path):
    res = Trainer(w2vv_experiment(), make_data(), tmp_path / "run", progress=False).fit()
    m = res["best_metrics"]
    assert m["t2i_r1"] >= 90, m  # planted words: each caption's word names its image
    model, meta = load_run(tmp_path / "run")
    assert isinstance(model, Word2VisualVec) and meta["config"]["model"]["kind"] == "w2vv"


def test_regression_closed_form_is_one_epoch(tmp_path):
    cfg = w2vv_experiment(optimizer="closed_form", ridge=0.1)
    cfg.model = w2vv_cfg(hidden=[], out_relu=False, similarity="euclidean")
    data = make_data()
    res = Trainer(cfg, data, tmp_path / "run", progress=False).fit()
    assert res["epochs_run"] == 1 and res["best_metrics"]["t2i_r1"] >= 90
    model, _ = load_run(tmp_path / "run")
    weighted = evaluate_model(model, data.dev_feats, data.dev_texts, data.dev_c2i, queries="image")
    assert weighted["t2i_r1"] >= 90
