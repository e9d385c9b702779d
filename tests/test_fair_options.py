"""The training options the fair claims protocol grids (benchmarks/research/fair_protocol.py):
input normalisation of precomputed image features (``model.img_norm``) and reduce-on-plateau
before early stopping (``train.plateau_decays``), counted once a run has left its start
(``train.patience_from``)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.test_train import make_data, small_cfg
from vsekit.config import ConfigError
from vsekit.lab.models.joint import JointConfig, JointEmbedding
from vsekit.lab.text.encoders import TextEncoderConfig
from vsekit.lab.train.config import validate
from vsekit.lab.train.trainer import Trainer
from vsekit.text.vocab import Vocabulary


def _model(img_norm: str, dim: int = 6) -> JointEmbedding:
    torch.manual_seed(0)
    vocab = Vocabulary.build([["a", "dog"], ["a", "cat"]], min_count=1)
    text = TextEncoderConfig(kind="gru", word_dim=4, embed_dim=3)
    return JointEmbedding(dim, vocab, JointConfig(text=text, img_norm=img_norm)).eval()


def test_l2_input_changes_nothing_before_a_bias_free_map():
    """normalise(W x) is the same for x and x / |x|, and so is its gradient in W: the
    Jacobian of y / |y| is (I - y y^T / |y|^2) / |y|, whose 1/|y| cancels the |x| in
    x^T. So ``l2`` changes neither the embedding nor any training step of the joint
    model's bias-free map (the fair protocol's reason not to grid it); it matters only
    before an MLP (``img_hidden``), whose biases do not scale."""
    x = torch.tensor([[3.0, -1.0, 0.0, 2.0, 1.0, -4.0]])
    target = torch.tensor([[0.6, 0.0, 0.8]])
    grads, embs = {}, {}
    for norm in ("none", "l2"):
        m = _model(norm)
        embs[norm] = m.encode_images(x)
        (embs[norm] * target).sum().backward()
        grads[norm] = m.img_proj.weight.grad.clone()
    assert torch.allclose(embs["l2"], embs["none"], atol=1e-6)
    assert torch.allclose(grads["l2"], grads["none"], atol=1e-6)
    assert grads["none"].abs().sum() > 0
    assert "img_norm.weight" not in _model("l2").state_dict()
    mlp = {}
    for norm in ("none", "l2"):
        torch.manual_seed(0)
        vocab = Vocabulary.build([["a", "dog"]], min_count=1)
        cfg = JointConfig(text=TextEncoderConfig(kind="gru", word_dim=4, embed_dim=3),
                          img_hidden=[5], img_norm=norm)  # fmt: skip
        mlp[norm] = JointEmbedding(6, vocab, cfg).eval().encode_images(x)
    assert not torch.allclose(mlp["l2"], mlp["none"], atol=1e-3)


def test_layernorm_input_is_shift_and_scale_free_and_learned():
    m, plain = _model("layernorm"), _model("none")
    assert {"img_norm.weight", "img_norm.bias"} <= set(m.state_dict())
    x = torch.randn(4, 6)
    with torch.no_grad():
        assert torch.allclose(m.encode_images(x), m.encode_images(3 * x + 5), atol=1e-5)
        assert not torch.allclose(plain.encode_images(x), plain.encode_images(x + 5), atol=1e-3)


def test_unknown_img_norm_is_refused_before_training():
    with pytest.raises(ValueError, match="model.img_norm"):
        _model("batchnorm")
    cfg = small_cfg()
    cfg.model.img_norm = "batchnorm"
    with pytest.raises(ConfigError, match="model.img_norm must be none | l2 | layernorm"):
        validate(cfg)


def test_plateau_decays_the_rate_then_stops(tmp_path):
    """A rate too small to change any rank never improves the slice: after each
    ``patience`` epoch without gain the rate drops tenfold, twice, then training stops."""
    cfg = small_cfg(epochs=30, lr=1e-12, patience=1, plateau_decays=2)
    res = Trainer(cfg, make_data(), tmp_path / "run", progress=False).fit()
    rows = [json.loads(r) for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in rows if "lr" in r]
    assert lrs == pytest.approx([1e-12, 1e-12, 1e-13, 1e-14], rel=1e-6)
    events = [e["event"] for e in res["events"]]
    assert events == ["lr decay on plateau", "lr decay on plateau", "early stop"]
    assert res["epochs_run"] == 4


def test_a_run_below_patience_from_is_neither_decayed_nor_stopped(tmp_path):
    """The same never-improving run as above, but its best score never reaches
    ``patience_from``: it keeps its rate and runs every epoch; with the bar at its own
    score, plateaus count again."""
    cfg = small_cfg(epochs=6, lr=1e-12, patience=1, plateau_decays=2, patience_from=1e9)
    res = Trainer(cfg, make_data(), tmp_path / "high", progress=False).fit()
    rows = (tmp_path / "high" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["lr"] for r in rows if '"lr"' in r] == pytest.approx([1e-12] * 6)
    assert res["events"] == [] and res["epochs_run"] == 6
    bar = json.loads(rows[0])["rsum"]  # the score it never improves on
    cfg = small_cfg(epochs=30, lr=1e-12, patience=1, plateau_decays=2, patience_from=bar)
    res = Trainer(cfg, make_data(), tmp_path / "at", progress=False).fit()
    assert [e["event"] for e in res["events"]][-1] == "early stop" and res["epochs_run"] == 4


def test_plateau_decays_need_patience():
    with pytest.raises(ConfigError, match="train.plateau_decays"):
        validate(small_cfg(plateau_decays=1))
    with pytest.raises(ConfigError, match="train.patience_from"):
        validate(small_cfg(patience_from=20.0))
