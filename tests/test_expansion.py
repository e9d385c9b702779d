"""Vocabulary expansion (Kiros et al. 2014): the fitted map, the appended words, and a
model that keeps its identity and its old behaviour while gaining words."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import make_tiny_model
from vsekit.lab.torch_model import VSEModel
from vsekit.text.expansion import apply_map, expand_vocabulary, fit_linear_map
from vsekit.text.vocab import Vocabulary

WORDS = ["a", "dog", "runs", "on", "grass", "red", "car", "two", "people", "in", "the", "snow"]


def test_map_equals_least_squares_and_the_ridge_formula():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 4)), rng.normal(size=(50, 3))
    w = fit_linear_map(x, y, ridge=0.0)
    xb = np.hstack([x, np.ones((50, 1))])
    np.testing.assert_allclose(w, np.linalg.lstsq(xb, y, rcond=None)[0], atol=1e-8)
    lam = 0.5
    reg = lam * np.diag([1, 1, 1, 1, 0.0])  # the bias is not penalised
    np.testing.assert_allclose(
        fit_linear_map(x, y, lam), np.linalg.inv(xb.T @ xb + reg) @ xb.T @ y, atol=1e-8
    )
    np.testing.assert_allclose(apply_map(w, x[:2]), xb[:2] @ w, rtol=1e-5)


def fake_source(dim=4, extra=("canine", "automobile", "3.14", "lad", "dog's", "snow")):
    """A GloVe-like source: frequency-ordered words with vectors."""
    rng = np.random.default_rng(1)
    words = WORDS + [w for w in extra if w not in WORDS]
    return {w: k for k, w in enumerate(words)}, rng.normal(size=(len(words), dim)).astype(
        np.float32
    )


def test_expansion_appends_mapped_words_and_keeps_every_old_id():
    vocab = Vocabulary.build([WORDS])
    index, src = fake_source()
    w_true = np.random.default_rng(2).normal(size=(5, 3))
    table = np.zeros((len(vocab), 3), np.float32)
    for i, word in enumerate(vocab.itos):
        if word in index:
            table[i] = apply_map(w_true, src[index[word]][None])[0]
    exp = expand_vocabulary(vocab, table, index, src, top=100, ridge=0.0)
    assert exp.words == ["canine", "automobile", "lad", "dog's"]  # "3.14" is no word
    assert exp.info["fitted_on"] == len(WORDS) and exp.info["r2_held_out"] == pytest.approx(1.0)
    want = apply_map(w_true, src[[index[w] for w in exp.words]])
    np.testing.assert_allclose(exp.vectors, want, atol=1e-4)  # the map is recovered
    assert expand_vocabulary(vocab, table, index, src, top=len(WORDS) + 1).words == ["canine"]
    big = vocab.extended(exp.words)
    assert big.itos[: len(vocab)] == vocab.itos and big.stoi["canine"] == len(vocab)
    with pytest.raises(ValueError, match="already in the vocabulary"):
        big.extended(["dog"])


def expanded_tiny(tmp_path):
    m = make_tiny_model(["a dog runs on grass", "a red car", "two people in the snow"])
    words = ["canine", "automobile"]
    vectors = np.random.default_rng(3).normal(size=(2, 8)).astype(np.float32)
    before = {
        "fp": m.fingerprint,
        "emb": m.encode_text(["a dog runs", "a red car in the snow", "a canine"]),
    }
    m.expand_vocabulary(words, vectors, {"method": "test"})
    return m, before, vectors


def test_an_expanded_model_keeps_its_identity_and_old_behaviour(tmp_path):
    from vsekit.lab.torch_model import VSEModel

    m, before, vectors = expanded_tiny(tmp_path)
    assert m.fingerprint == before["fp"]  # an index built before still fits
    after = m.encode_text(["a dog runs", "a red car in the snow", "a canine"])
    np.testing.assert_allclose(after[:2], before["emb"][:2], atol=1e-6)  # known words: same
    assert not np.allclose(after[2], before["emb"][2], atol=1e-3)  # canine was <unk>
    assert m.unknown_words("a canine")[1] == []
    # the bundle stores the base weights and the expansion beside them
    out = m.save(tmp_path / "bundle", half=False)
    assert (out / "expansion.txt").read_text().split() == ["canine", "automobile"]
    from safetensors.numpy import load_file

    assert load_file(out / "model.safetensors")["text.embed.weight"].shape[0] == len(
        Vocabulary.load(out / "vocab.json")
    )
    again = VSEModel.load(out, device="cpu")
    assert again.fingerprint == before["fp"] and again.info["vocab_expansion"] == {"method": "test"}
    assert "vocab_expansion" not in (out / "bundle.json").read_text()  # in expansion.json
    np.testing.assert_allclose(again.encode_text(["a canine"]), after[2:], atol=1e-5)
    with pytest.raises(Exception, match="already expanded"):
        again.expand_vocabulary(["lad"], vectors[:1], {})


@pytest.mark.slow
def test_onnx_text_graph_carries_the_expansion(tmp_path):
    import vsekit
    from vsekit.lab.train.onnx_export import export_onnx

    m, _, _ = expanded_tiny(tmp_path)
    out = m.save(tmp_path / "bundle", half=False)
    export_onnx(VSEModel.load(out, device="cpu"), out)
    onnx_m = vsekit.load_model(out, backend="onnx")
    texts = ["a canine on grass", "an automobile", "a dog"]
    a, b = m.encode_text(texts), onnx_m.encode_text(texts)
    assert (a * b).sum(1).min() >= 0.9999
    # a text graph made before an expansion is refused, not read out of range
    from vsekit.bundle import write_expansion

    write_expansion(out, ["canine", "automobile", "lad"], np.zeros((3, 8), np.float32), {})
    with pytest.raises(vsekit.ModelError, match="re-create it with `vse model onnx`"):
        vsekit.load_model(out, backend="onnx")


def test_cli_expand_vocab(tmp_path, monkeypatch, capsys):
    import vsekit.lab.text.glove as glove
    from vsekit.cli import main
    from vsekit.lab.torch_model import VSEModel

    index, src = fake_source(dim=4)
    monkeypatch.setattr(glove, "load_glove", lambda: (index, src))
    out = make_tiny_model(["a dog runs on grass", "a red car", "two people in the snow"]).save(
        tmp_path / "bundle"
    )
    fp = VSEModel.load(out, device="cpu").fingerprint
    weights = (out / "model.safetensors").read_bytes()
    assert main(["model", "expand-vocab", str(out), "--top", "100"]) == 0
    assert (out / "model.safetensors").read_bytes() == weights  # only files added
    assert "words added" in capsys.readouterr().out
    m = VSEModel.load(out, device="cpu")
    assert m.fingerprint == fp and "canine" in m.text_vocabulary.stoi
    assert main(["model", "expand-vocab", str(out)]) == 2
    assert "already expanded" in capsys.readouterr().err
    assert main(["model", "expand-vocab", str(out), "--if-missing"]) == 0  # setup re-runs


@pytest.mark.slow
def test_ensemble_expands_every_word_encoder(tmp_path, monkeypatch):
    """An ensemble of two GRU models: `vse model expand-vocab` fits one map per member's
    learned word space; a new word then has a vector in both tables (no id out of any
    table's range), the bundle keeps one array per member, and ONNX agrees."""
    import vsekit
    import vsekit.lab.text.glove as glove
    from vsekit.cli import main
    from vsekit.lab.models.factory import word_encoders
    from vsekit.lab.torch_model import VSEModel
    from vsekit.lab.train.export import ensemble_from_models
    from vsekit.lab.train.onnx_export import export_onnx

    index, src = fake_source(dim=4)
    monkeypatch.setattr(glove, "load_glove", lambda: (index, src))
    caps = ["a dog runs on grass", "a red car", "two people in the snow"]
    ens = ensemble_from_models([make_tiny_model(caps, seed=0), make_tiny_model(caps, seed=1)])
    out = ens.save(tmp_path / "ens", half=False)
    export_onnx(VSEModel.load(out, device="cpu"), out)
    assert main(["model", "expand-vocab", str(out), "--top", "100"]) == 0
    m = VSEModel.load(out, device="cpu")
    encs = word_encoders(m.model)
    assert len(encs) == 2
    for _, enc in encs:
        assert "canine" in enc.vocab.stoi and enc.embed.weight.shape[0] == len(enc.vocab)
    a, b = (e.embed.weight[e.vocab.stoi["canine"]] for _, e in encs)
    assert not torch.allclose(a, b)  # each member's own map
    from safetensors.numpy import load_file

    assert set(load_file(str(out / "expansion.safetensors"))) == {p for p, _ in encs}
    texts = ["a canine on grass", "an automobile", "a dog"]
    x, y = m.encode_text(texts), vsekit.load_model(out, backend="onnx").encode_text(texts)
    assert (x * y).sum(1).min() >= 0.9999


def test_weakly_known_words_get_a_note():
    """'corgi', 'dachshund' and 'drone' got no note and no relevant result: the default
    model saw the first two in a handful of captions and the third in none (it comes
    from the vocabulary expansion)."""
    import vsekit
    from vsekit.text.notes import weak_note

    model = vsekit.load_model("default")
    weak = dict(model.weak_words("a corgi and a dachshund under a drone near a dog"))
    assert weak.keys() == {"corgi", "dachshund", "drone"} and weak["drone"] == 0
    assert 0 < weak["corgi"] < 10 and "dog" not in weak
    note = weak_note(list(weak.items()))
    assert "drone only by analogy" in note and "corgi in only" in note
    assert weak_note([]) is None
    assert weak_note([("corgi", 3)]) == (
        "note: the model saw corgi in only 3 training captions: results may be weak"
    )
