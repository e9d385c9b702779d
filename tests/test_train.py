from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from vsekit.lab.data.dataset import Caption, Dataset, ImageRecord
from vsekit.lab.models.joint import JointConfig
from vsekit.lab.text.encoders import TextEncoderConfig
from vsekit.lab.train.config import (
    ConfigError,
    DataConfig,
    ExperimentConfig,
    LossConfig,
    TrainConfig,
    load_config,
)
from vsekit.lab.train.retrieval_data import TrainData, epoch_pairs
from vsekit.lab.train.trainer import Trainer, load_run

FILLER = ["a", "photo", "of", "the", "some", "nice", "picture", "with"]


def planted(n: int, split: str, seed: int) -> Dataset:
    """Images with random features; each image's captions contain its own word."""
    rng = np.random.default_rng(seed)
    images = [ImageRecord(f"{split}{k}", None, split) for k in range(n)]
    caps = []
    for k in range(n):
        for _ in range(3):
            words = list(rng.choice(FILLER, 3)) + [f"w{k}"]
            rng.shuffle(words)
            caps.append(Caption(" ".join(words), k))
    return Dataset(images, caps, split)


def make_data() -> TrainData:
    train = planted(40, "train", 0)
    rng = np.random.default_rng(99)
    feats = rng.normal(size=(40, 24)).astype(np.float32)
    # dev = the same planted words on the same images (a memorisation task, seconds to learn)
    dev = Dataset(
        [ImageRecord(f"dev{k}", None, "dev") for k in range(40)],
        [Caption(f"the w{k}", k) for k in range(40)],
        "dev",
    )
    return TrainData.from_datasets(train, dev, feats, feats)


def write_flickr8k_folder(root: Path, n: int, n_train: int) -> Path:
    """A raw Flickr8k-layout folder: ``n`` small images, two captions each naming the
    image's own word, the first ``n_train`` in train and the rest in dev."""
    from tests.conftest import write_image

    lines, train_names, dev_names = [], [], []
    for k in range(n):
        name = f"img{k}.jpg"
        write_image(root / "images" / name, seed=k)
        (train_names if k < n_train else dev_names).append(name)
        lines += [f"{name}#{j}\tA picture number w{k} , take {j} ." for j in range(2)]
    (root / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    (root / "Flickr_8k.trainImages.txt").write_text("\n".join(train_names) + "\n")
    (root / "Flickr_8k.devImages.txt").write_text("\n".join(dev_names) + "\n")
    return root


def small_cfg(**train_kw) -> ExperimentConfig:
    t = dict(
        epochs=30, batch_size=16, lr=3e-3, captions="all", seed=0, collapse_epochs=0, threads=1
    )
    t.update(train_kw)
    return ExperimentConfig(
        name="planted",
        data=DataConfig(),
        model=JointConfig(text=TextEncoderConfig(kind="gru", word_dim=16, embed_dim=32)),
        loss=LossConfig(name="sum_hinge", margin=0.2),
        train=TrainConfig(**t),
    )


def test_planted_words_train_to_near_perfect_recall(tmp_path):
    res = Trainer(small_cfg(), make_data(), tmp_path / "run", progress=False).fit()
    m = res["best_metrics"]
    assert m["t2i_r1"] >= 90 and m["i2t_r1"] >= 90, m
    rows = [json.loads(r) for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and rows[-1]["loss"] < rows[0]["loss"]
    assert (tmp_path / "run" / "curves.png").stat().st_size > 1000
    model, meta = load_run(tmp_path / "run")
    assert model.embed_dim == 32 and meta["img_dim"] == 24


def test_bf16_autocast_trains_to_the_same_recall(tmp_path):
    """train.precision: bf16 autocasts the forward and loss; the weights stay float32."""
    res = Trainer(small_cfg(precision="bf16"), make_data(), tmp_path / "run", progress=False).fit()
    m = res["best_metrics"]
    assert m["t2i_r1"] >= 90 and m["i2t_r1"] >= 90, m
    model, _ = load_run(tmp_path / "run")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with pytest.raises(ConfigError, match="train.precision"):
        from vsekit.lab.train.config import validate

        validate(small_cfg(precision="fp16"))


def test_bf16_on_a_cpu_that_emulates_it_trains_in_fp32_gemms_to_the_same_model(
    tmp_path, monkeypatch
):
    """Where bf16 would be emulated, the Trainer's GEMMs reach PyTorch's fp32 kernels
    (``lab.train.bf16``), and the run ends where PyTorch's bf16 kernels take it."""
    from tests.test_bf16 import Kernels
    from vsekit.lab.train import trainer as trainer_module
    from vsekit.runtime.precision import CpuInfo

    avx2 = CpuInfo("x86_64", frozenset({"AVX2", "FMA3"}))
    native = CpuInfo("x86_64", frozenset({"AVX2", "AVX512F", "AVX512BF16"}))
    data, runs = make_data(), {}
    for name, cpu in (("emulating", avx2), ("native", native)):
        monkeypatch.setattr(trainer_module, "cpu_info", lambda cpu=cpu: cpu)
        trainer = Trainer(small_cfg(precision="bf16"), data, tmp_path / name, progress=False)
        with Kernels() as kernels:
            runs[name] = (trainer.gemm_kernels, trainer.fit()["best_metrics"], kernels.dtypes)
    assert runs["emulating"][0] == "fp32" and runs["native"][0] == "native"
    for name in runs:  # each epoch's log names its kernels (a resume may change machine)
        rows = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        logged = {r.get("gemm_kernels") for r in rows if "event" not in r}
        assert logged == {runs[name][0]}, (name, logged)
    assert torch.bfloat16 not in runs["emulating"][2]
    assert torch.bfloat16 in runs["native"][2]
    fast, ref = runs["emulating"][1], runs["native"][1]
    assert abs(fast["rsum"] - ref["rsum"]) <= 5, (fast, ref)  # two of the 40 queries' R@1


def test_resumed_run_equals_uninterrupted(tmp_path):
    data = make_data()
    Trainer(small_cfg(epochs=3), data, tmp_path / "full", progress=False).fit()
    Trainer(small_cfg(epochs=2), data, tmp_path / "part", progress=False).fit()
    # "kill" after epoch 2, then continue the same run to 3 epochs
    Trainer(small_cfg(epochs=3), data, tmp_path / "part", progress=False).fit(resume=True)
    a = load_file(
        str(
            tmp_path
            / "full"
            / json.loads((tmp_path / "full" / "last.json").read_text())["path"]
            / "model.safetensors"
        )
    )
    b = load_file(
        str(
            tmp_path
            / "part"
            / json.loads((tmp_path / "part" / "last.json").read_text())["path"]
            / "model.safetensors"
        )
    )
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    with pytest.raises(FileExistsError, match="--resume"):
        Trainer(small_cfg(epochs=3), data, tmp_path / "part", progress=False).fit()


def test_collapse_detector_fires_on_a_run_that_cannot_learn(tmp_path):
    data = make_data()
    cfg = small_cfg(
        epochs=4, lr=0.0, collapse_epochs=2, collapse_rsum=200.0, collapse_restart=False
    )
    res = Trainer(cfg, data, tmp_path / "r", progress=False).fit()
    assert res["collapsed"] and res["epochs_run"] == 2
    assert any(e["event"] == "collapsed" for e in res["events"])
    cfg = small_cfg(epochs=3, lr=0.0, collapse_epochs=1, collapse_rsum=200.0)
    res = Trainer(cfg, data, tmp_path / "r2", progress=False).fit()
    assert any(e["event"].startswith("restart") for e in res["events"])


def test_curriculum_switches_from_sum_to_max(tmp_path):
    cfg = small_cfg(epochs=6, curriculum="sum_then_max", curriculum_patience=1, lr=0.0)
    res = Trainer(cfg, make_data(), tmp_path / "r", progress=False).fit()
    rows = [json.loads(r) for r in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["phase"] == "sum" and rows[-1]["phase"] == "max"
    assert any("switch" in e["event"] for e in res["events"])


def test_curriculum_max_phase_starts_from_the_best_sum_checkpoint(tmp_path):
    """Journal 3.5: at the switch, the best L_S weights are reloaded and the optimiser
    starts afresh; the first L_M epoch trains from exactly those weights."""
    from vsekit.lab.train import checkpoint as ckpt

    cfg = small_cfg(epochs=4, curriculum="sum_then_max", curriculum_patience=1, lr=3e-3)
    data = make_data()
    scripted = iter([10.0, 20.0, 15.0, 30.0])  # dev rsum per epoch: epoch 2 is worse
    real_eval = data.evaluate

    def evaluate(model, batch):
        return {**real_eval(model, batch), "rsum": next(scripted)}

    data.evaluate = evaluate
    seen, ends = {}, {}
    trainer = Trainer(cfg, data, tmp_path / "r", progress=False)
    real = trainer._train_epoch

    def spy(model, opt, loss_fn, batches, epoch):
        seen[epoch] = ({k: v.clone() for k, v in model.state_dict().items()}, opt.state_dict())
        out = real(model, opt, loss_fn, batches, epoch)
        ends[epoch] = {k: v.clone() for k, v in model.state_dict().items()}
        return out

    trainer._train_epoch = spy
    res = trainer.fit()
    switch = next(e for e in res["events"] if e["event"] == "switch to max_hinge")
    assert switch["epoch"] == 2 and switch["optimizer"] == "fresh"
    best = ends[switch["from_best_epoch"]]  # the best L_S epoch's trained weights
    assert switch["from_best_epoch"] == 1  # not the last L_S epoch: the reload matters
    assert not torch.equal(seen[3][0]["img_proj.weight"], ends[2]["img_proj.weight"])
    weights, opt_state = seen[3]  # the first L_M epoch
    for k, v in weights.items():
        torch.testing.assert_close(v, best[k], rtol=0, atol=0)
    assert opt_state["state"] == {}  # no Adam moments carried over
    assert ckpt.load_pointer(tmp_path / "r", "last").name == "e0003"


def test_epoch_pairs_one_caption_per_image():
    c2i = np.array([0, 0, 1, 2, 2, 2])
    rng = np.random.default_rng(0)
    pairs = epoch_pairs(c2i, 3, "one", rng)
    assert sorted(pairs[:, 0]) == [0, 1, 2]
    assert all(c2i[c] == i for i, c in pairs)
    assert len(epoch_pairs(c2i, 3, "all", rng)) == 6


def test_config_errors_name_the_field(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  lr: fast\n")
    with pytest.raises(ConfigError, match="train.lr: expected float"):
        load_config(p)
    p.write_text("model:\n  text:\n    kind: gru\n    colour: red\n")
    with pytest.raises(ConfigError, match=r"model.text: unknown field\(s\) \['colour'\]"):
        load_config(p)
    p.write_text("train:\n  lr: 2e-4\n  captions: some\n")
    with pytest.raises(ConfigError, match="train.captions must be"):
        load_config(p)
    p.write_text("train:\n  lr: 2e-4\n")
    assert load_config(p).train.lr == 2e-4


def test_train_and_eval_cli_from_a_raw_folder(tmp_path, capsys):
    """One command from images + captions to a trained run, extracting the features."""
    from vsekit.cli import main

    root = write_flickr8k_folder(tmp_path / "f8k", n=12, n_train=8)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"""
name: tiny
data: {{root: {root}, store: {tmp_path / "store"}, backbone: tiny-test, crops: 1, weights: random,
        features: fne}}
model: {{text: {{kind: gru, word_dim: 8, embed_dim: 16}}}}
loss: {{name: max_hinge, margin: 0.2}}
train: {{epochs: 2, batch_size: 4, lr: 0.001, collapse_epochs: 0}}
""")
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--run-dir", str(run)]) == 0
    assert (tmp_path / "store" / "fne.i8").is_file()  # extracted and discretised on the way
    from vsekit.lab.features.store import FeatureStore as _Store

    meta = json.loads((run / "config.json").read_text())
    assert meta["image"] == _Store(tmp_path / "store").identity()
    assert meta["image"]["backbone"] == "tiny-test" and meta["image"]["preprocessing"]["crops"] == 1
    assert json.loads((tmp_path / "store" / "meta.json").read_text())["fne"]["n_fit"] == 8
    capsys.readouterr()
    assert main(["eval", str(run), "--split", "dev", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    # the CLI's figures are the metrics of the run's model on the dev rows, recomputed here

    from vsekit.lab.data import load_dataset
    from vsekit.lab.eval import retrieval_metrics_from_embeddings
    from vsekit.lab.features.store import FeatureStore
    from vsekit.lab.train.trainer import load_run

    model, _ = load_run(run)
    store = FeatureStore(tmp_path / "store")
    dev = load_dataset(root).split("dev")
    rows = store.rows_for([im.id for im in dev.images])
    with torch.no_grad():
        img = model.encode_images(torch.from_numpy(np.asarray(store.fne[rows])))
        txt = model.encode_texts(list(dev.texts))
    want = retrieval_metrics_from_embeddings(img, txt, dev.caption_to_image)
    assert m == pytest.approx(want)
    assert main(["eval", str(run), "--split", "dev"]) == 0
    table = capsys.readouterr().out
    assert "annotation" in table and f"{want['rsum']:.1f}" in table

    # run -> vse model export -> load_model: the bundle computes the store's FNE rows
    # from the image files, and embeds them as the run's model does
    import vsekit

    assert main(["model", "export", str(run), str(tmp_path / "bundle")]) == 0
    bundle = vsekit.load_model(tmp_path / "bundle")
    paths = [im.path for im in dev.images]
    np.testing.assert_array_equal(bundle.image_features(paths), np.asarray(store.fne[rows]))
    np.testing.assert_allclose(bundle.encode_image(paths), img.numpy(), atol=2e-3)  # fp16


#: model recipes (vse model build), not experiment configs; tests/test_build.py loads them
CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))
#: model recipes (``vse model build``): the default's, and candidates for its next version
RECIPES = [p for p in CONFIGS if p.stem == "default-model" or p.stem.startswith("candidate-")]


@pytest.mark.parametrize("path", [p for p in CONFIGS if p not in RECIPES], ids=lambda p: p.stem)
def test_shipped_configs_load(path):
    cfg = load_config(path)
    assert cfg.name == path.stem


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_shipped_recipes_load_and_train_from_shipped_configs(path):
    from vsekit.lab.build import load_recipe

    recipe = load_recipe(path)
    root = Path(__file__).parents[1]
    specs = [m.train for m in recipe.members if m.train] + [recipe.tagger.train]
    assert specs and all(load_config(root / t.config) for t in specs)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("loss: {name: max_hinj}", "loss.name"),
        ("model: {kind: jiont}", "model.kind"),
        ("model: {text: {kind: gur}}", "model.text.kind"),
        ("model: {similarity: cosin}", "model.similarity"),
        ("train: {optimizer: adma}", "train.optimizer"),
        ("loss: {name: max_hinge, k_top: 3}", "loss.k_top"),
        ("model: {kind: joint, hidden: [10]}", "hidden"),
    ],
)
def test_config_typos_fail_before_any_extraction(tmp_path, capsys, line, field):
    """A typo in any registry name or option is a one-line error before the store is
    touched (no extraction, no run directory)."""
    from vsekit.cli import main

    cfg = tmp_path / "cfg.yaml"
    store = tmp_path / "store"
    cfg.write_text(f"name: t\ndata: {{root: {tmp_path / 'none'}, store: {store}}}\n{line}\n")
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vse: error:") and field in err and err.count("\n") == 1
    assert not store.exists() and not (tmp_path / "run").exists()


def test_selection_on_a_slice_carved_from_train_never_reads_dev(tmp_path):
    """``data.val_from_train``: epochs are chosen on train images carved out (seeded,
    no longer trained on), and no dev image is loaded for training or selection."""
    from vsekit.lab.data import load_dataset
    from vsekit.lab.train.config import DataConfig
    from vsekit.lab.train.features import train_and_selection

    root = write_flickr8k_folder(tmp_path / "f8k", n=12, n_train=9)
    ds = load_dataset(root)
    train, sel = train_and_selection(ds, DataConfig(val_from_train=3))
    train_ids, sel_ids = {im.id for im in train.images}, {im.id for im in sel.images}
    assert len(train_ids) == 6 and len(sel_ids) == 3 and not train_ids & sel_ids
    assert (train_ids | sel_ids) == {im.id for im in ds.split("train").images}
    assert len(sel.captions) == 6  # each carved image keeps its captions
    again = train_and_selection(ds, DataConfig(val_from_train=3))[1]
    assert [im.id for im in again.images] == [im.id for im in sel.images]  # seeded
    other = train_and_selection(ds, DataConfig(val_from_train=3, val_seed=1))[1]
    assert {im.id for im in other.images} != sel_ids  # data.val_seed picks the slice
    plain = train_and_selection(ds, DataConfig())[1]
    assert {im.id for im in plain.images} == {im.id for im in ds.split("dev").images}


def test_held_out_words_are_never_read(tmp_path):
    """data.hold_out_words (the zero-shot protocol): captions using them leave training
    and the selection slice, images left without captions leave too, and the words are
    not in the vocabulary; dev is untouched."""
    from vsekit.lab.data import load_dataset
    from vsekit.lab.train.config import from_dict
    from vsekit.lab.train.retrieval_data import load_train_data

    root = write_flickr8k_folder(tmp_path / "f8k", n=12, n_train=10)
    token = root / "Flickr8k.token.txt"
    old, new = "img3.jpg#1\tA picture number w3", "img3.jpg#1\tA zebra picture number w3"
    token.write_text(token.read_text().replace(old, new))
    ds = load_dataset(root)
    kept = ds.split("train").without_words(["w1", "ZEBRA"])
    assert "img1.jpg" not in [im.id for im in kept.images]  # both captions used w1
    assert [c.text for c in kept.captions if "w3" in c.text] == ["A picture number w3 , take 0 ."]
    cfg = from_dict(ExperimentConfig, {
        "data": {"root": str(root), "store": str(tmp_path / "store"), "backbone": "tiny-test",
                 "crops": 1, "weights": "random", "features": "baseline",
                 "hold_out_words": ["w1", "zebra"], "val_from_train": 3},
        "model": {"text": {"kind": "gru", "word_dim": 8, "embed_dim": 8}},
    })  # fmt: skip
    data = load_train_data(cfg, progress=False)
    assert "w1" not in data.vocab.stoi and "zebra" not in data.vocab.stoi
    assert not any("w1" in t or "zebra" in t for t in data.train_texts + data.dev_texts)
    assert "w0" in data.vocab.stoi


def test_refit_replays_the_reference_schedule_on_all_train_images(tmp_path):
    """``train.refit_from``: the slice run's curriculum switch (reloading the epoch its
    switch reloaded, fresh optimiser) and its best epoch, with nothing evaluated."""
    from vsekit.lab.train import checkpoint as ckpt

    ref_cfg = small_cfg(epochs=5, curriculum="sum_then_max", curriculum_patience=1)
    ref_cfg.data.val_from_train = 3
    data = make_data()
    scripted = iter([10.0, 20.0, 15.0, 30.0, 25.0])  # switch after epoch 2, best epoch 3
    real_eval = data.evaluate
    data.evaluate = lambda model, batch: {**real_eval(model, batch), "rsum": next(scripted)}
    ref = Trainer(ref_cfg, data, tmp_path / "ref", progress=False).fit()
    assert ref["best_epoch"] == 3

    cfg = small_cfg(epochs=5, curriculum="sum_then_max", curriculum_patience=1)
    cfg.train.refit_from = str(tmp_path / "ref")
    data = make_data()
    data.evaluate = lambda model, batch: pytest.fail("a refit reads no selection split")
    trainer = Trainer(cfg, data, tmp_path / "refit", progress=True)  # its log line too
    seen, ends = {}, {}
    real = trainer._train_epoch

    def spy(model, opt, loss_fn, batches, epoch):
        seen[epoch] = {k: v.clone() for k, v in model.state_dict().items()}
        out = real(model, opt, loss_fn, batches, epoch)
        ends[epoch] = {k: v.clone() for k, v in model.state_dict().items()}
        return out

    trainer._train_epoch = spy
    res = trainer.fit()
    assert res["epochs_run"] == 4 and res["best_epoch"] == 3
    plan = res["events"][0]
    assert plan["event"] == "refit" and (plan["switch"], plan["sum_best"]) == (2, 1)
    switch = next(e for e in res["events"] if e["event"] == "switch to max_hinge")
    assert switch["epoch"] == 2 and switch["from_best_epoch"] == 1
    for k, v in seen[3].items():  # the L_M phase starts from the refit's own epoch 1
        torch.testing.assert_close(v, ends[1][k], rtol=0, atol=0)
    assert ckpt.load_pointer(tmp_path / "refit", "best").name == "e0003"

    bad = small_cfg(epochs=2)
    bad.train.refit_from = str(tmp_path / "refit")  # it selected nothing on a slice
    with pytest.raises(ValueError, match="selected its epochs on dev"):
        Trainer(bad, make_data(), tmp_path / "again", progress=False).fit()


@pytest.mark.parametrize("kind", ["adam", "rmsprop", "sgd"])
def test_the_optimizers_multi_tensor_update_equals_one_tensor_at_a_time_bit_for_bit(kind):
    """make_optimizer's ``foreach`` update against PyTorch's one-tensor-at-a-time path, on
    this CPU: the same parameters after the same gradients, bit for bit."""
    from vsekit.lab.train.checkpoint import optimizer_from_flat, optimizer_to_flat
    from vsekit.lab.train.trainer import make_optimizer

    torch.manual_seed(0)
    start = torch.nn.Sequential(torch.nn.Linear(300, 64), torch.nn.GRU(64, 32)).state_dict()

    def run(foreach: bool) -> list[torch.Tensor]:
        model = torch.nn.Sequential(torch.nn.Linear(300, 64), torch.nn.GRU(64, 32))
        model.load_state_dict(start)
        model[1].lr_scale = 0.5  # two parameter groups
        t = TrainConfig(lr=1e-3, optimizer=kind, weight_decay=0.01, eps=1e-6)
        opt = make_optimizer(model, t)
        assert len(opt.param_groups) == 2 and all(g["foreach"] for g in opt.param_groups)
        if not foreach:
            for g in opt.param_groups:
                g["foreach"] = False
        g = torch.Generator().manual_seed(1)
        for step in range(6):
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=g) * 0.01
            opt.step()
            if step == 2:  # a resume keeps this optimizer's way of updating
                tensors, info = optimizer_to_flat(opt)
                for group in info["param_groups"]:
                    group["foreach"] = None  # as an older checkpoint has it
                opt = make_optimizer(model, t)
                opt.param_groups[0]["foreach"] = opt.param_groups[1]["foreach"] = foreach
                optimizer_from_flat(opt, tensors, info)
                assert all(g["foreach"] is foreach for g in opt.param_groups)
        return [p.detach().clone() for p in model.parameters()]

    fast, ref = run(True), run(False)
    assert not torch.equal(fast[0], start["0.weight"])  # it did update
    assert all(torch.equal(a, b) for a, b in zip(fast, ref, strict=True))
