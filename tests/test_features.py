from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.conftest import write_image
from vsekit.cli import main
from vsekit.fne import FNEStats, full_network_embedding, ternarise
from vsekit.lab.features.backbones import create_backbone, list_backbones
from vsekit.lab.features.crops import crop_views
from vsekit.lab.features.extract import ExtractItem, extract_to_store, failed_images
from vsekit.lab.features.featurizer import ImageFeaturizer
from vsekit.lab.features.rmac import rmac
from vsekit.lab.features.store import FeatureStore, StoreError

EXPECTED_DIMS = {"vgg16": (12416, 4096), "resnet50": (15168, 2048), "vgg19": (13696, 4096),
                 "resnet152": (47936, 2048), "efficientnet-lite0": (3120, 1280)}  # fmt: skip


@pytest.mark.parametrize("name", [n for n in list_backbones() if n != "tiny-test"])
def test_backbone_layers_and_dims(name):
    m = create_backbone(name, weights="random")
    if name in EXPECTED_DIMS:
        assert (m.fne_dim, m.baseline_dim) == EXPECTED_DIMS[name]
    x = torch.randint(0, 255, (1, 3, m.input_size, m.input_size), dtype=torch.uint8)
    with torch.inference_mode():
        feats = m.forward_intermediates(x)
        pooled, last = m.forward_pooled(x, keep_last_map=True)
    assert [f.shape[1] for f in feats] == [lay.channels for lay in m.layers]
    assert pooled.shape == (1, m.fne_dim) and torch.isfinite(pooled).all()
    assert last.shape[1] == m.layer(m.last_map_layer).channels and last.ndim == 4
    # the pooled vector is exactly the per-layer spatial means, concatenated
    ref = torch.cat([f.mean(dim=(2, 3)) if f.ndim == 4 else f for f in feats], dim=1)
    torch.testing.assert_close(pooled, ref)
    # one layer alone (what an ONNX image graph of baseline features computes): its
    # columns of the full pooled vector, for the baseline layer and an earlier one
    for lay in {m.baseline_layer, m.layers[1].name}:
        with torch.inference_mode():
            one = m.forward_layer_pooled(x, lay)
        torch.testing.assert_close(one, pooled[:, m.layer_slices()[lay]])
    with pytest.raises(KeyError):
        m.forward_layer_pooled(x, "no-such-layer")


def test_features_layers_cli(capsys):
    assert main(["features", "layers", "vgg16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fne_dim"] == 12416 and out["baseline_dim"] == 4096
    assert len(out["layers"]) == 15 and out["layers"][-1]["name"] == "fc7"


# ------------------------------------------------------------------ FNE
def test_ternarise_matches_naive():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(50, 40)).astype(np.float32)
    z[0, :4] = [-0.25, 0.15, -0.2500001, 0.1500001]
    t = ternarise(z)
    naive = np.array([[-1 if v < -0.25 else (1 if v > 0.15 else 0) for v in row] for row in z])
    assert t.dtype == np.int8 and set(np.unique(t)) <= {-1, 0, 1}
    np.testing.assert_array_equal(t, naive)
    assert list(t[0, :4]) == [0, 0, -1, 1]


def test_fne_statistics_use_train_rows_only(tmp_path):
    rng = np.random.default_rng(1)
    train = rng.normal(2.0, 3.0, size=(200, 8))
    dev = rng.normal(50.0, 0.1, size=(30, 8))  # far away: any leak shifts mean/std a lot
    x = np.concatenate([train[:100], dev, train[100:]]).astype(np.float32)
    split_rows = np.r_[0:100, 130:230]
    stats = FNEStats.fit(x, split_rows)
    np.testing.assert_allclose(stats.mean, train.astype(np.float32).mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.std, train.astype(np.float32).std(0), rtol=1e-4)
    # chunked FNE equals the direct formula
    fne = full_network_embedding(x, stats)
    np.testing.assert_array_equal(fne, ternarise((x - stats.mean) / stats.std))


def test_store_fit_fne_ignores_dev_rows(tmp_path):
    store = make_store(tmp_path / "s", n_train=6, n_dev=3)
    stats = store.fit_fne("train")
    pooled = np.asarray(store.pooled)
    train = pooled[store.rows("train")]
    np.testing.assert_allclose(stats.mean, train.astype(np.float64).mean(0), rtol=1e-6)
    # changing dev rows must not change the statistics
    before = stats.mean.copy()
    mm = np.memmap(store.path / "pooled.f32", np.float32, "r+", shape=pooled.shape)
    mm[store.rows("dev")] += 1000
    mm.flush()
    again = FeatureStore(store.path).fit_fne("train")
    np.testing.assert_allclose(again.mean, before)
    fne = FeatureStore(store.path).fne
    assert fne.dtype == np.int8 and set(np.unique(fne)) <= {-1, 0, 1}
    assert (fne[store.rows("dev")] == 1).mean() > 0.3  # the shifted dev rows read as "high"


# ------------------------------------------------------------------ crops and R-MAC
def coordinate_image(size: int = 256) -> Image.Image:
    yy, xx = np.mgrid[0:size, 0:size]
    arr = np.stack([xx, yy, np.zeros_like(xx)], axis=2).astype(np.uint8)
    return Image.fromarray(arr)


def test_ten_crop_geometry():
    v = crop_views(coordinate_image(256), 10, 224)  # 256 -> 256: no resampling
    assert v.shape == (10, 3, 224, 224) and v.dtype == torch.uint8
    corners = [(0, 0), (32, 0), (0, 32), (32, 32), (16, 16)]  # tl, tr, bl, br, centre (x, y)
    for k, (x0, y0) in enumerate(corners):
        assert (int(v[k, 0, 0, 0]), int(v[k, 1, 0, 0])) == (x0, y0), k
        assert (int(v[k, 0, -1, -1]), int(v[k, 1, -1, -1])) == (x0 + 223, y0 + 223), k
        torch.testing.assert_close(v[k + 5], v[k].flip(-1))  # mirrored views
    one = crop_views(coordinate_image(256), 1, 224)
    torch.testing.assert_close(one[0], v[4])
    two = crop_views(coordinate_image(256), 2, 224)
    torch.testing.assert_close(two[1], one[0].flip(-1))


def test_rmac_matches_naive_regions():
    g = torch.Generator().manual_seed(0)
    fmap = torch.rand(2, 5, 7, 7, generator=g)
    got = rmac(fmap)
    want = torch.zeros(2, 5)
    for s in (1, 2, 4):
        for i in range(s):
            for j in range(s):
                r0, r1 = (i * 7) // s, -((-(i + 1) * 7) // s)
                c0, c1 = (j * 7) // s, -((-(j + 1) * 7) // s)
                v = fmap[:, :, r0:r1, c0:c1].amax(dim=(2, 3))
                want += v / v.norm(dim=1, keepdim=True)
    torch.testing.assert_close(got, want / want.norm(dim=1, keepdim=True))


# ------------------------------------------------------------------ extraction
def make_items(root: Path, n_train: int, n_dev: int) -> list[ExtractItem]:
    items = []
    for k in range(n_train + n_dev):
        p = write_image(root / f"im{k:03d}.jpg", seed=k, size=40 + k)
        items.append(ExtractItem(p.name, p, "train" if k < n_train else "dev"))
    return items


def make_store(out: Path, n_train: int = 6, n_dev: int = 3, **kw) -> FeatureStore:
    items = make_items(out.parent / f"{out.name}-img", n_train, n_dev)
    model = create_backbone("tiny-test", weights="random")
    return extract_to_store(items, out, model, crops=2, batch_size=4, workers=0,
                            progress=False, **kw)  # fmt: skip


class Killed(Exception):
    pass


def test_resumed_extraction_equals_uninterrupted(tmp_path, capsys):
    items = make_items(tmp_path / "img", 9, 4)
    model = create_backbone("tiny-test", weights="random")
    kw = dict(crops=2, batch_size=3, workers=0, progress=False)
    full = extract_to_store(items, tmp_path / "full", model, **kw)

    def kill(done: int) -> None:
        if done >= 6:
            raise Killed

    with pytest.raises(Killed):
        extract_to_store(items, tmp_path / "resumed", model, on_batch=kill, **kw)
    with pytest.raises(StoreError, match="not finished"):
        FeatureStore(tmp_path / "resumed")
    # garbage after the last commit must not survive (a kill mid-write)
    with open(tmp_path / "resumed" / "ids.txt", "a") as f:
        f.write("half-written-id\n")
    resumed = extract_to_store(items, tmp_path / "resumed", model, **kw)
    for name in ("pooled.f32", "rmac.f32", "ids.txt", "splits.txt"):
        assert (full.path / name).read_bytes() == (resumed.path / name).read_bytes(), name
    assert resumed.ids == [i.id for i in items]
    assert resumed.n == 13 and resumed.rmac.shape == (13, 6)
    # each invocation is recorded: 6 images before the kill, the other 7 after
    assert [(r["from"], r["images"]) for r in resumed.meta["runs"]] == [(0, 6), (6, 7)]
    assert [(r["from"], r["images"]) for r in full.meta["runs"]] == [(0, 13)]
    assert main(["features", "info", str(resumed.path)]) == 0
    out = capsys.readouterr().out
    assert "rows: 13" in out and re.search(r"runs: 6 images in .*; 7 images in", out)


def test_unreadable_images_are_reported_and_skipped(tmp_path):
    items = make_items(tmp_path / "img", 5, 0)
    good = (tmp_path / "img" / "im000.jpg").read_bytes()
    (tmp_path / "img" / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (tmp_path / "img" / "notes.jpg").write_text("this is a text file, not a JPEG")
    items.insert(2, ExtractItem("truncated.jpg", tmp_path / "img" / "truncated.jpg", "train"))
    items.append(ExtractItem("notes.jpg", tmp_path / "img" / "notes.jpg", "train"))
    model = create_backbone("tiny-test", weights="random")
    store = extract_to_store(items, tmp_path / "s", model, crops=1, batch_size=2, workers=1,
                             progress=False)  # fmt: skip
    assert store.n == 5 and "truncated.jpg" not in store.ids and "notes.jpg" not in store.ids
    assert store.meta["failed"] == 2
    failed = {f["id"]: f["error"] for f in failed_images(store.path)}
    assert set(failed) == {"truncated.jpg", "notes.jpg"}
    assert "notes.jpg: not an image" in failed["notes.jpg"]
    assert "truncated.jpg" in failed["truncated.jpg"]


def test_store_refuses_other_settings(tmp_path):
    store = make_store(tmp_path / "s")
    items = make_items(tmp_path / "s-img", 6, 3)
    model = create_backbone("tiny-test", weights="random")
    with pytest.raises(StoreError, match="crops"):
        extract_to_store(items, store.path, model, crops=10, batch_size=4, workers=0,
                         progress=False)  # fmt: skip
    with pytest.raises(StoreError, match="not in this store"):
        store.rows_for(["im000.jpg", "elsewhere.jpg"])
    np.testing.assert_array_equal(store.rows_for(["im002.jpg", "im000.jpg"]), [2, 0])


def test_baseline_is_l2_normalised_layer(tmp_path):
    store = make_store(tmp_path / "s")
    b = store.baseline()
    assert b.shape == (9, 5)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1, rtol=1e-5)
    raw = np.asarray(store.pooled)[:, store.layer_slices()["fc"]]
    np.testing.assert_allclose(b, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-5)


# ------------------------------------------------------------------ real weights
@pytest.mark.parametrize("name", ["resnet50", "efficientnet-lite0"])
def test_weights_check_real(name, capsys):
    """Needs `vse weights install resnet50` (scripts/setup runs it)."""
    assert main(["weights", "check", name]) == 0
    assert "OK" in capsys.readouterr().out


def test_featurizer_reproduces_store_rows(tmp_path):
    store = make_store(tmp_path / "s", n_train=4, n_dev=2)
    store.fit_fne("train")
    store = FeatureStore(store.path)
    model = create_backbone("tiny-test", weights="random")
    feat = ImageFeaturizer(store, model=model, device="cpu")
    paths = [tmp_path / "s-img" / i for i in store.ids[:3]]
    out = feat(paths)
    np.testing.assert_allclose(out["pooled"], np.asarray(store.pooled[:3]), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["rmac"], np.asarray(store.rmac[:3]), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["baseline"], store.baseline()[:3], rtol=1e-4, atol=1e-5)
    assert (out["fne"] == np.asarray(store.fne[:3])).mean() > 0.99
    other = create_backbone("tiny-test", weights="random")
    other.weights_sha256 = "0" * 64  # other weights than the store was extracted with
    with pytest.raises(StoreError, match="do not match the model"):
        ImageFeaturizer(store, model=other)


def test_one_extraction_writes_a_store_at_a_time(tmp_path):
    """A second `vse features extract` on a store another one is writing is refused
    (both would append rows), and the first one's lock goes with it."""
    import fcntl

    from tests.conftest import write_image
    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.extract import LOCK_NAME, ExtractItem, extract_to_store
    from vsekit.lab.features.store import StoreError

    items = [ExtractItem(f"i{k}", write_image(tmp_path / f"i{k}.png", seed=k), "train")
             for k in range(3)]  # fmt: skip
    model = create_backbone("tiny-test", weights="random")
    out = tmp_path / "store"
    out.mkdir()
    with open(out / LOCK_NAME, "a+") as other:  # another process's extraction
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StoreError, match="another extraction is writing this store"):
            extract_to_store(items, out, model, crops=1, progress=False)
        assert not (out / "meta.json").exists()  # refused before writing anything
    store = extract_to_store(items, out, model, crops=1, progress=False)
    assert store.n == 3


# ------------------------------------------------------------------ FNE variants
def test_fne_variant_with_the_paper_thresholds_is_the_stored_fne(tmp_path):
    from vsekit.lab.features.fne_variant import FNEVariant
    from vsekit.lab.train.features import image_features

    store = make_store(tmp_path / "s", n_train=6, n_dev=3)
    store.fit_fne("train")
    store = FeatureStore(store.path)
    ids = list(store.ids)
    got = image_features(store, "fne[t=-0.25/0.15]", ids)
    np.testing.assert_array_equal(got, np.asarray(store.fne))
    # a block subset: the same columns, standardised with the same train statistics
    name = next(iter(store.layer_slices()))
    sl = store.layer_slices()[name]
    sub = image_features(store, f"fne[layers={name}]", ids)
    np.testing.assert_array_equal(sub, np.asarray(store.fne)[:, sl])
    # other thresholds: the naive ternarisation of the standardised columns
    wide = FNEVariant.parse("fne[t=-1/1]").features(store, np.arange(len(ids)))
    z = store.fne_stats().standardise(np.asarray(store.pooled))
    np.testing.assert_array_equal(wide, (z > 1).astype(np.int8) - (z < -1).astype(np.int8))
    assert (wide == 0).mean() > (np.asarray(store.fne) == 0).mean()
    # t=none: the standardised columns themselves, float32 (steps 1-2 without step 3)
    raw = image_features(store, f"fne[layers={name};t=none]", ids)
    assert raw.dtype == np.float32
    np.testing.assert_allclose(raw, z[:, sl], rtol=1e-6)
    # shift: the same values moved off the origin; a whole shift of the ternary keeps int8
    up = image_features(store, "fne[shift=1]", ids)
    assert up.dtype == np.int8
    np.testing.assert_array_equal(up, np.asarray(store.fne) + 1)
    assert set(np.unique(up)) <= {0, 1, 2}
    half = image_features(store, "fne[shift=0.5]", ids)
    assert half.dtype == np.float32
    np.testing.assert_array_equal(half, np.asarray(store.fne).astype(np.float32) + 0.5)
    far = image_features(store, "fne[shift=127]", ids)  # 1 + 127 leaves int8: float32
    assert far.dtype == np.float32
    np.testing.assert_array_equal(far, np.asarray(store.fne).astype(np.float32) + 127)
    low = image_features(store, "fne[shift=-127]", ids)  # -1 - 127 = -128 still fits
    assert low.dtype == np.int8 and low.min() == -128
    floats = image_features(store, f"fne[layers={name};t=none;shift=2]", ids)
    np.testing.assert_allclose(floats, z[:, sl] + 2, rtol=1e-6)


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("fne[t=0.5/-0.5]", r"thresholds need f- <= f\+"),
        ("fne[t=1]", r"'t=1' is not layers=A\+B, t=F-/F\+, t=none or shift=F"),
        ("fne[shift=up]", r"shift='up' is not a number"),
        ("fne[shift=nan]", r"shift='nan' is not a finite number"),
        ("fne[depth=2]", r"'depth=2' is not layers=A\+B, t=F-/F\+"),
        ("fne[layers=]", r"'layers=' is not layers=A\+B"),
        ("fne[t=none;t=-0.5/0.5]", r"t=none keeps no thresholds"),
        ("fne", r"'fne' is not an FNE variant"),
    ],
)
def test_fne_variant_errors_say_what_is_wrong(kind, says):
    from vsekit.lab.features.fne_variant import FNEVariant

    with pytest.raises(ValueError, match=says):
        FNEVariant.parse(kind)


def test_fne_variant_kinds_validate_in_a_config():
    from vsekit.config import ConfigError
    from vsekit.lab.train import load_config
    from vsekit.lab.train.config import apply_overrides

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "flickr8k-fne-sh.yaml")
    ok = apply_overrides(cfg, ["data.features=fne[layers=layer3+layer4;t=-0.5/0.5]"])
    assert ok.data.features == "fne[layers=layer3+layer4;t=-0.5/0.5]"
    with pytest.raises(ConfigError, match="data.features"):
        apply_overrides(cfg, ["data.features=fne[t=oops]"])
