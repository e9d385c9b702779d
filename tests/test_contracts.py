"""Contract tests over every registry (timm style): each registered text encoder, model
kind, similarity and loss gives the right shapes, trains (every trainable parameter gets
a finite gradient), and saves and loads to identical outputs."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load, save

from vsekit.lab.losses import create_loss, list_losses, loss_options
from vsekit.lab.models.factory import MODELS, create_model, list_models
from vsekit.lab.similarity import create_similarity, list_similarities
from vsekit.lab.text.encoders import TextEncoderConfig, create_text_encoder, list_text_encoders
from vsekit.text.tokenizer import tokenize
from vsekit.text.vocab import Vocabulary

TEXTS = ["a dog runs on the grass", "two people in the snow", "a red car", "the dog"]
VOCAB = Vocabulary.build([tokenize(t) for t in TEXTS])


def _roundtrip(module: torch.nn.Module, build) -> torch.nn.Module:
    """A new module from ``build()`` with ``module``'s weights, through safetensors bytes."""
    blob = save({k: v.contiguous() for k, v in module.state_dict().items()})
    other = build()
    other.load_state_dict(load(blob))
    return other.eval()


def _all_trainable_get_grads(module: torch.nn.Module) -> list[str]:
    return [
        n
        for n, p in module.named_parameters()
        if p.requires_grad and (p.grad is None or not torch.isfinite(p.grad).all())
    ]


def _encoder_cfg(kind: str, **kw) -> TextEncoderConfig:
    base = {"kind": kind, "word_dim": 8, "embed_dim": 6}
    if kind == "mean_glove":
        base["word_dim"] = 50
    return TextEncoderConfig(**{**base, **kw})


# every registered encoder, plus the recurrent variants the shipped model family uses
ENCODER_CASES = [(k, {}) for k in list_text_encoders()] + [
    ("gru", {"glove": True, "word_dim": 50}),
    ("lstm", {"bidirectional": True}),
    ("gru", {"num_layers": 2}),
    ("lstm", {"num_layers": 2, "bidirectional": True, "dropout": 0.1}),
    ("minilm", {"finetune_layers": 1, "proj_hidden": 16}),
]


@pytest.mark.parametrize(
    ("kind", "extra"),
    ENCODER_CASES,
    ids=[f"{k}-{'-'.join(e) or 'plain'}" for k, e in ENCODER_CASES],
)
def test_text_encoder_contract(kind, extra):
    if kind == "mpnet":
        from vsekit.graphs.weights import GraphWeightsError, mpnet_dir

        try:
            mpnet_dir()
        except GraphWeightsError as e:
            pytest.skip(f"all-mpnet-base-v2 is not here: {e}")
    torch.manual_seed(0)
    cfg = _encoder_cfg(kind, **extra)
    enc = create_text_encoder(VOCAB, cfg).train()
    batch = enc.prepare(TEXTS)
    out = enc(**batch)
    assert out.shape == (len(TEXTS), enc.dim) and torch.isfinite(out).all()
    if any(p.requires_grad for p in enc.parameters()):
        out.pow(2).sum().backward()
        assert _all_trainable_get_grads(enc) == []
    enc.eval()
    again = _roundtrip(enc, lambda: create_text_encoder(VOCAB, cfg))
    with torch.no_grad():
        torch.testing.assert_close(again(**again.prepare(TEXTS)), enc(**batch), rtol=0, atol=0)


def test_glove_initialisation_copies_known_words():
    from vsekit.lab.text.glove import load_glove

    enc = create_text_encoder(VOCAB, _encoder_cfg("gru", glove=True, word_dim=50))
    index, vectors = load_glove()
    row = VOCAB.stoi["dog"]
    want = torch.tensor(np.asarray(vectors[index["dog"]]))
    torch.testing.assert_close(enc.embed.weight[row], want)


def _model_cfg(kind: str):
    cls = MODELS.get(kind).config_class
    if kind == "bilinear":
        return cls(word_dim=5)
    if kind == "conse":  # nothing trained: the backbone's classifier on 12-d features
        import tempfile

        from vsekit.lab.features.weight_files import save_weights

        path = Path(tempfile.mkdtemp()) / "fc.safetensors"
        save_weights(path, {"fc.weight": torch.randn(1000, 12), "fc.bias": torch.zeros(1000)}, {})
        return cls(pool5_norm=2.0, weights=str(path))
    kw = {"text": _encoder_cfg("gru")}
    if kind == "w2vv":
        kw["hidden"] = [7]
    if kind == "ensemble":
        member = {"kind": "joint", "text": {"kind": "gru", "word_dim": 8, "embed_dim": 6}}
        return cls(members=[member, dict(member, img_hidden=[5])], weights=[2, 1])
    return cls(**kw)


@pytest.mark.parametrize("kind", list_models())
def test_model_kind_contract(kind):
    torch.manual_seed(0)
    cfg = _model_cfg(kind)
    model = create_model(12, VOCAB, cfg).train()
    feats = torch.randn(len(TEXTS), 12)
    img = model.encode_images(feats)
    assert img.shape == (len(TEXTS), model.embed_dim)
    if kind == "bilinear":
        vecs = torch.randn(3, 5)
        scores = model.scores(feats, vecs)
        assert scores.shape == (len(TEXTS), 3)
        out = model.score_lists(feats, torch.randn(len(TEXTS), 2, 5)).sum()
    else:
        txt = model.encode_texts(TEXTS)
        assert txt.shape == (len(TEXTS), model.embed_dim)
        assert model.similarity(img, txt).shape == (len(TEXTS), len(TEXTS))
        a, b = model.training_outputs(feats, TEXTS)
        assert a.shape[0] == b.shape[0] == len(TEXTS)
        out = (a - b).pow(2).sum()
    if out.requires_grad:  # (ConSE trains nothing)
        out.backward()
    assert _all_trainable_get_grads(model) == []
    model.eval()
    again = _roundtrip(model, lambda: create_model(12, VOCAB, cfg))
    with torch.no_grad():
        torch.testing.assert_close(again.encode_images(feats), model.encode_images(feats))
        if kind != "bilinear":
            torch.testing.assert_close(again.encode_texts(TEXTS), model.encode_texts(TEXTS))


@pytest.mark.parametrize("name", list_similarities())
def test_similarity_contract(name):
    img = torch.randn(5, 4, requires_grad=True)
    txt = torch.randn(3, 4, requires_grad=True)
    s = create_similarity(name)(img, txt)
    assert s.shape == (5, 3) and torch.isfinite(s).all()
    s.sum().backward()
    assert img.grad is not None and txt.grad is not None
    # row i, column j is S(img_i, txt_j): the same as scoring the pair alone
    one = create_similarity(name)(img[2:3], txt[1:2])
    torch.testing.assert_close(one[0, 0], s[2, 1])


@pytest.mark.parametrize("name", list_losses())
def test_loss_contract(name):
    torch.manual_seed(0)
    if name in ("sje", "listsje", "tag_bce"):  # tag losses: (scores [B, L], mask [B, L])
        a = torch.randn(4, 6, requires_grad=True)
        b = torch.ones(4, 6, dtype=torch.bool)
        b[:, 4:] = False
        inputs = (a, b)
    else:
        a = torch.randn(4, 5, requires_grad=True)
        b = torch.randn(4, 5, requires_grad=True)
        inputs = (a, b)
    loss = create_loss(name)
    value = loss(*inputs)
    assert value.ndim == 0 and torch.isfinite(value)
    value.backward()
    assert a.grad is not None and torch.isfinite(a.grad).all() and a.grad.abs().sum() > 0
    # the options a loss declares are exactly its constructor's; each round-trips
    again = create_loss(
        name, **{k: getattr(loss, k) for k in loss_options(name) if hasattr(loss, k)}
    )
    torch.testing.assert_close(again(*inputs), value)


def test_registry_errors_list_the_known_names():
    with pytest.raises(ValueError, match="unknown loss 'nope'; known: .*max_hinge"):
        create_loss("nope")
    with pytest.raises(ValueError, match="unknown text encoder"):
        create_text_encoder(VOCAB, TextEncoderConfig(kind="gur"))


def test_safetensors_roundtrip_helper_is_exact():
    m = torch.nn.Linear(3, 2)
    buf = io.BytesIO(save(m.state_dict()))
    assert torch.equal(load(buf.getvalue())["weight"], m.weight.detach())
