"""Backbone stage tuning: the cache below the stage, its windows, and a tune run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.test_train import write_flickr8k_folder
from vsekit.lab.features import stage_cache as sc
from vsekit.lab.features.backbones import create_backbone


@pytest.fixture(scope="module")
def backbone():
    torch.manual_seed(0)
    return create_backbone("resnet50", "random")


def photos_of(root: Path, n: int) -> list[tuple[str, Path]]:
    return [(f"img{k}.jpg", root / "images" / f"img{k}.jpg") for k in range(n)]


def test_cache_holds_the_layers_below_the_stage_and_resumes_after_a_failure(
    tmp_path, backbone, monkeypatch
):
    root = write_flickr8k_folder(tmp_path / "f8k", n=5, n_train=5)
    photos = photos_of(root, 5)
    real_views, calls = sc.photo_views, []

    def failing(path, layout):
        calls.append(path.name)
        if path.name == "img3.jpg":
            raise OSError("unplugged")
        return real_views(path, layout)

    monkeypatch.setattr(sc, "photo_views", failing)
    with pytest.raises(sc.StageCacheError, match="img3.jpg"):
        sc.ensure_stage_cache(tmp_path / "c", photos, backbone, "layer4", "train", batch_size=2)
    out = sc.cache_dir(tmp_path / "c", backbone, "layer4", "train", [k for k, _ in photos])
    assert not (out / "meta.json").exists()  # an unfinished cache is never opened
    assert json.loads((out / "progress.json").read_text())["done"] == 2

    calls.clear()
    monkeypatch.setattr(
        sc, "photo_views", lambda p, layout: (calls.append(p.name), real_views(p, layout))[1]
    )
    cache = sc.ensure_stage_cache(tmp_path / "c", photos, backbone, "layer4", "train", batch_size=2)
    assert calls == ["img2.jpg", "img3.jpg", "img4.jpg"]  # resumed after the 2 rows written
    assert cache.acts.shape == (5, 1, 1024, 16, 16) and cache.acts.dtype == np.float16
    below = sc.below_stage(backbone, "layer4")
    with torch.inference_mode():
        want = below(torch.from_numpy(np.stack([real_views(p, "train")[0] for _, p in photos])))
    np.testing.assert_allclose(
        cache.acts[:, 0].astype(np.float32), want.numpy(), rtol=1e-2, atol=1e-2
    )

    views = sc.ensure_stage_cache(tmp_path / "c", photos[:2], backbone, "layer4", "eval")
    assert views.acts.shape == (2, 2, 1024, 14, 14)  # centre crop and its mirror, 224 px
    with pytest.raises(ValueError, match="resnet50.layer3 cannot be tuned"):
        sc.below_stage(backbone, "layer3")


def test_windows_are_crops_of_the_map_and_their_mirrors():
    acts = np.arange(2 * 1 * 3 * 16 * 16, dtype=np.float16).reshape(2, 1, 3, 16, 16)
    centre = sc.windows(acts, 14, None)
    assert torch.equal(centre, torch.from_numpy(acts[:, 0, :, 1:15, 1:15].astype(np.float32)))
    rng = np.random.default_rng(0)
    seen_flip = seen_shift = False
    for _ in range(20):
        w = sc.windows(acts, 14, rng).numpy()
        for i in range(2):
            m = acts[i, 0].astype(np.float32)
            hits = [
                (t, left, f)
                for t in range(3)
                for left in range(3)
                for f in (False, True)
                if np.array_equal(
                    w[i],
                    (
                        m[:, t : t + 14, left : left + 14][..., ::-1]
                        if f
                        else m[:, t : t + 14, left : left + 14]
                    ),
                )
            ]
            assert len(hits) == 1  # each window is exactly one crop, mirrored or not
            seen_flip |= hits[0][2]
            seen_shift |= hits[0][:2] != (1, 1)
    assert seen_flip and seen_shift


def tune_config(tmp_path: Path, root: Path, lr_scale: float, init_from: Path | None = None) -> Path:
    cfg = tmp_path / f"tune{lr_scale}{'-init' if init_from else ''}.yaml"
    init = f", init_from: {init_from}" if init_from else ""
    cfg.write_text(f"""
name: tiny-tune
data: {{root: {root}, backbone: resnet50, weights: random, features: baseline,
        val_from_train: 2}}
model: {{text: {{kind: gru, word_dim: 8, embed_dim: 16}}}}
loss: {{name: max_hinge, margin: 0.2}}
train: {{epochs: 2, batch_size: 4, lr: 0.01, collapse_epochs: 0, threads: 1}}
tune: {{stage: layer4, lr_scale: {lr_scale}, cache: {tmp_path / "stages"}{init}}}
""")
    return cfg


def test_a_tune_run_trains_the_stage_only_when_asked_and_reloads(tmp_path):
    from vsekit.cli import main
    from vsekit.lab.train.config import load_config
    from vsekit.lab.train.trainer import load_run
    from vsekit.lab.train.tuned import TunedModel, load_tuned_data

    root = write_flickr8k_folder(tmp_path / "f8k", n=10, n_train=8)
    frozen, tuned = tmp_path / "frozen", tmp_path / "tuned"
    torch.manual_seed(0)
    assert main(["train", str(tune_config(tmp_path, root, 0.0)), "--run-dir", str(frozen)]) == 0
    init = frozen
    assert (
        main(["train", str(tune_config(tmp_path, root, 1.0, init)), "--run-dir", str(tuned)]) == 0
    )
    torch.manual_seed(0)
    start = create_backbone("resnet50", "random").net.layer4.state_dict()

    def stage_weights(run: Path) -> dict:
        best = json.loads((run / "best.json").read_text())["path"]
        w = load_file(str(run / best / "model.safetensors"))
        return {k.removeprefix("stage.stage."): v for k, v in w.items() if k.startswith("stage.")}

    w0, w1 = stage_weights(frozen), stage_weights(tuned)
    conv = "0.conv1.weight"
    assert torch.equal(w0[conv], start[conv])  # lr_scale 0: the pretrained stage, untouched
    assert not torch.equal(w1[conv], start[conv])  # tuned
    bn = "0.bn1.running_mean"
    assert torch.equal(w1[bn], start[bn])  # batch-norm statistics stay frozen

    model, meta = load_run(tuned)
    assert isinstance(model, TunedModel) and meta["image"]["tuned_stage"] == "layer4"
    data = load_tuned_data(load_config(tune_config(tmp_path, root, 1.0, init)), progress=False)
    with torch.no_grad():
        a = model.encode_images(torch.from_numpy(data.dev_rows[0:2]))
    assert a.shape == (2, model.embed_dim)
    # the reloaded model scores as the run recorded on its selection split (the carve)
    log = [json.loads(x) for x in (tuned / "metrics.jsonl").read_text().splitlines()]
    best = max(r["rsum"] for r in log if "rsum" in r)
    assert data.evaluate(model)["rsum"] == pytest.approx(best, abs=1e-6)
    assert 0 <= data.evaluate_dev(model)["rsum"] <= 600  # dev, a report: 2 photos here
    assert len(data.dev_feats) == 2 and len(data.dev_rows) == 2

    # what cannot use a tuned run says so instead of failing inside a convolution
    assert main(["eval", str(tuned)]) == 2
    from vsekit.bundle import ModelError
    from vsekit.lab.train.export import model_from_run

    with pytest.raises(ModelError, match="tuned-stage run"):
        model_from_run(tuned)


def test_window_draws_depend_on_the_batch_not_on_what_came_before(tmp_path):
    """A resumed run replays its batches; their windows must be the same draws."""
    from vsekit.lab.train.tuned import WindowRows

    acts = np.random.default_rng(0).normal(size=(6, 1, 2, 16, 16)).astype(np.float16)
    cache = sc.StageCache(tmp_path, acts, [str(k) for k in range(6)], {})
    a, b = WindowRows(cache, np.arange(6), seed=3), WindowRows(cache, np.arange(6), seed=3)
    first = a[np.array([4, 1, 2])]
    a[np.array([0, 5])]  # another batch in between changes nothing
    assert torch.equal(a[np.array([4, 1, 2])], first)
    assert torch.equal(b[np.array([4, 1, 2])], first)
    # rows come back in the batch's order: each is a window of its own photo's map
    for i, k in enumerate([4, 1, 2]):
        m = torch.from_numpy(acts[k, 0].astype(np.float32))
        crops = [m[:, t : t + 14, s : s + 14] for t in range(3) for s in range(3)]
        crops += [c.flip(-1) for c in crops]
        assert any(torch.equal(first[i], c) for c in crops)


def test_tune_configs_are_checked_before_anything_runs(tmp_path):
    from vsekit.lab.train.config import ConfigError, load_config, validate

    cfg = tmp_path / "bad.yaml"
    cfg.write_text("data: {features: baseline}\ntune: {stage: layer4}\n")
    with pytest.raises(ConfigError, match="val_from_train"):
        validate(load_config(cfg))


def test_a_cache_restarted_from_scratch_ignores_an_old_progress_count(
    tmp_path, backbone, monkeypatch
):
    """A restart from row 0 (no usable acts.npy) that dies before its first chunk must
    not leave an old progress count for the next run to trust over zero rows."""
    root = write_flickr8k_folder(tmp_path / "f8k", n=3, n_train=3)
    photos = photos_of(root, 3)
    out = sc.cache_dir(tmp_path / "c", backbone, "layer4", "eval", [k for k, _ in photos])
    out.mkdir(parents=True)
    (out / "progress.json").write_text(json.dumps({"done": 2, "ids": 3}))  # a stale count
    real_views = sc.photo_views

    def killed(path, layout):
        raise OSError("killed")

    monkeypatch.setattr(sc, "photo_views", killed)
    with pytest.raises(sc.StageCacheError):
        sc.ensure_stage_cache(tmp_path / "c", photos, backbone, "layer4", "eval")
    monkeypatch.setattr(sc, "photo_views", real_views)
    cache = sc.ensure_stage_cache(tmp_path / "c", photos, backbone, "layer4", "eval")
    assert all(np.abs(cache.acts[i].astype(np.float32)).sum() > 0 for i in range(3))
