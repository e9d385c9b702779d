"""ONNX Runtime backend against the PyTorch reference on real Flickr8k data, and the
NumPy crop views against torchvision's."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

import vsekit
from vsekit.bundle import default_model_dir
from vsekit.lab.torch_model import VSEModel
from vsekit.media.views import crop_views_array, resize_size


def _torchvision_views(img: Image.Image, n_crops: int, size: int = 224) -> np.ndarray:
    from torchvision.transforms.v2 import functional as TF

    x = TF.pil_to_tensor(img)
    big = resize_size(size)
    if n_crops == 10:
        five = torch.stack(TF.five_crop(TF.resize(x, [big, big], antialias=True), [size, size]))
        return torch.cat([five, five.flip(-1)]).numpy()
    x = TF.center_crop(TF.resize(x, big, antialias=True), [size, size])
    return (torch.stack([x, TF.horizontal_flip(x)]) if n_crops == 2 else x[None]).numpy()


@pytest.mark.parametrize("wh", [(224, 224), (900, 700), (500, 333), (300, 640)])
@pytest.mark.parametrize("n", [1, 2, 10])
def test_numpy_views_match_torchvision(wh, n):
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 255, (wh[1], wh[0], 3), dtype=np.uint8))
    img = img.resize((wh[0] // 4, wh[1] // 4)).resize(wh)  # some structure, not pure noise
    ours, ref = crop_views_array(img, n), _torchvision_views(img, n)
    assert ours.shape == ref.shape and ours.dtype == np.uint8
    assert np.abs(ours.astype(int) - ref).max() <= 1  # PIL vs torchvision rounding


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, flickr8k_root_module):
    from vsekit.lab.train.onnx_export import export_onnx

    out = tmp_path_factory.mktemp("onnx") / "default"
    shutil.copytree(default_model_dir(), out)
    export_onnx(VSEModel.load(out, device="cpu"), out)
    return (
        vsekit.load_model(out, backend="torch", device="cpu"),
        vsekit.load_model(out, backend="onnx"),
    )


@pytest.fixture(scope="module")
def flickr8k_root_module():
    from tests.conftest import FLICKR8K

    if not (FLICKR8K / "Flickr8k.token.txt").is_file():
        pytest.skip(f"real Flickr8k not found at {FLICKR8K}")
    return FLICKR8K


@pytest.mark.slow
def test_onnx_matches_torch_on_real_images_and_captions(bundles, flickr8k_root_module):
    from vsekit.lab.data import load_dataset

    torch_m, onnx_m = bundles
    assert (torch_m.backend, onnx_m.backend) == ("torch", "onnx")
    assert onnx_m.fingerprint == torch_m.fingerprint  # one index serves both
    dev = load_dataset(flickr8k_root_module).split("dev")
    paths = [im.path for im in dev.images[:24]]
    texts = list(dev.texts[:200]) + ["", "zzzz qqqq", "a dog"]
    for a, b in [
        (torch_m.encode_text(texts), onnx_m.encode_text(texts)),
        (torch_m.encode_image(paths), onnx_m.encode_image(paths, batch_size=5)),
    ]:
        assert a.shape == b.shape
        assert (a * b).sum(1).min() >= 0.9999
    assert [t for t, _ in torch_m.tags(paths[0], 5)] == [t for t, _ in onnx_m.tags(paths[0], 5)]
    assert torch_m.annotate(paths[1], 3)[0][0] == onnx_m.annotate(paths[1], 3)[0][0]


def test_onnx_files_are_verified(bundles):
    _, onnx_m = bundles
    path = onnx_m.path
    data = (path / "text.onnx").read_bytes()
    try:
        (path / "text.onnx").write_bytes(data[:-10] + b"0" * 10)
        with pytest.raises(vsekit.ModelError, match="text.onnx: sha256 .* is not the recorded"):
            vsekit.load_model(path, backend="onnx")
    finally:
        (path / "text.onnx").write_bytes(data)
    with pytest.raises(ValueError, match="backend: use auto | onnx | torch"):
        vsekit.load_model(path, backend="tf")
    meta = (path / "onnx.json").read_text()
    try:  # an onnx.json that lists no text graph: named, with the fix
        edited = json.loads(meta)
        for name in ("text.onnx", "text.int8.onnx"):
            edited["sha256"].pop(name, None)
        (path / "onnx.json").write_text(json.dumps(edited))
        with pytest.raises(vsekit.ModelError, match="onnx.json: lists no text graph"):
            vsekit.load_model(path, backend="onnx")
    finally:
        (path / "onnx.json").write_text(meta)


@pytest.mark.slow
def test_int8_image_graph_against_the_fp32_reference(tmp_path, flickr8k_root_module):
    """The quantised fast path (static QDQ, calibrated on train images) against fp32 on
    dev images it never saw; it is its own encoder: another fingerprint, recorded by an
    index, and an index built with it reopens with it."""
    from vsekit.index import Collection, model_info
    from vsekit.index.query import open_collection
    from vsekit.lab.data import load_dataset
    from vsekit.lab.train.onnx_export import export_onnx

    ds = load_dataset(flickr8k_root_module)
    calib = [im.path for im in ds.split("train").images[::500]]  # 12 train images
    out = tmp_path / "default"
    shutil.copytree(default_model_dir(), out)
    meta = export_onnx(VSEModel.load(out, device="cpu"), out, calibration=calib,
                       keep_float="stem")  # fmt: skip
    assert meta["int8"]["calibration_images"] == 12 and meta["int8"]["float_nodes"]
    fp32 = vsekit.load_model(out, backend="onnx")  # the bundle's default: fp32 here
    int8 = vsekit.load_model(out, backend="onnx", precision="int8")
    assert (fp32.precision, int8.precision) == ("fp32", "int8")
    dev = [im.path for im in ds.split("dev").images[:16]]
    a, b = fp32.encode_image(dev), int8.encode_image(dev)
    cos = (a * b).sum(1)
    assert cos.mean() >= 0.99 and cos.min() >= 0.97, cos
    # nearest neighbours among them are mostly kept, and text is untouched
    assert ((a @ a.T).argsort(1)[:, -2] == (b @ b.T).argsort(1)[:, -2]).mean() >= 0.75
    np.testing.assert_array_equal(fp32.encode_text("a dog"), int8.encode_text("a dog"))
    assert int8.fingerprint != fp32.fingerprint
    with pytest.raises(vsekit.ModelError, match="ONNX Runtime only"):
        vsekit.load_model(out, backend="torch", precision="int8")
    # an index built with int8 reopens with int8, not with the bundle's fp32 default
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in dev[:3]:
        shutil.copy(p, photos / p.name)
    coll = Collection(tmp_path / "idx", model_info(int8, str(out)))
    coll.update(photos, int8.encode_image, progress=False)
    assert len(coll) == 3
    _, reopened = open_collection(tmp_path / "idx")
    assert reopened.precision == "int8" and reopened.fingerprint == coll.fingerprint
    # the int8 graph alone (`--int8-only`, as the wheel ships it): the default, the same
    # embeddings; fp32 still reads text (an fp32 index stays searchable) and names the
    # missing graph when asked for an image
    meta = export_onnx(VSEModel.load(out, device="cpu"), out, calibration=calib,
                       keep_float="stem", int8_only=True)  # fmt: skip
    assert "image.onnx" not in meta["sha256"] and not (out / "image.onnx").exists()
    only = vsekit.load_model(out, backend="onnx")
    assert only.precision == "int8" and meta["default_precision"] == "int8"
    assert (only.encode_image(dev) * b).sum(1).min() >= 0.9999
    text_only = vsekit.load_model(out, backend="onnx", precision="fp32")
    np.testing.assert_array_equal(text_only.encode_text("a dog"), fp32.encode_text("a dog"))
    with pytest.raises(vsekit.ModelError, match="no fp32 image graph .image.onnx., only"):
        text_only.encode_image(dev[:1])
    # a bundle re-exported without calibration drops the stale int8 graph
    export_onnx(VSEModel.load(out, device="cpu"), out)
    assert not (out / "image.int8.onnx").exists() and (out / "image.onnx").is_file()
    with pytest.raises(vsekit.ModelError, match="no int8 image graph"):
        vsekit.load_model(out, backend="onnx", precision="int8")


def test_a_gpu_asked_for_is_used_or_refused(monkeypatch):
    """``VSEKIT_ONNX_DEVICE`` (set in ``--gpus-per-worker`` replicas): CUDA's provider
    first where ONNX Runtime has it; otherwise an error naming the package, never the
    CPU in its place."""
    import onnxruntime as ort

    from vsekit.runtime.onnx_model import providers

    monkeypatch.delenv("VSEKIT_ONNX_DEVICE", raising=False)
    assert providers() == ["CPUExecutionProvider"]
    monkeypatch.setenv("VSEKIT_ONNX_DEVICE", "tpu")
    with pytest.raises(RuntimeError, match="'cpu' or 'cuda'"):
        providers()
    monkeypatch.setenv("VSEKIT_ONNX_DEVICE", "cuda")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        assert providers()[0] == "CUDAExecutionProvider"
    else:
        with pytest.raises(RuntimeError, match="onnxruntime-gpu"):
            providers()
