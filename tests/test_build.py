"""`vse model build`: a bundle from a recipe file, pinned by its members' weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import make_tiny_model
from vsekit.cli import main
from vsekit.config import ConfigError
from vsekit.lab.build import build, load_recipe, weights_sha256
from vsekit.lab.torch_model import VSEModel
from vsekit.lab.train.export import ensemble_from_models

ROOT = Path(__file__).resolve().parents[1]
CAPS = ["a dog runs on grass", "a red car", "two people in the snow"]


def members(tmp_path: Path) -> list[dict]:
    out = []
    for seed in (0, 1):
        b = make_tiny_model(CAPS, seed=seed).save(tmp_path / f"m{seed}", half=False)
        out.append({"bundle": b.name, "weight": 0.6 if seed == 0 else 0.4,
                    "weights_sha256": weights_sha256(VSEModel.load(b, expand=False))})  # fmt: skip
    return out


def write(tmp_path: Path, **recipe) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"name": "tiny-2026.11", "released": "2026-11-23", **recipe}))
    return path


def test_build_reproduces_the_ensemble_and_records_the_version(tmp_path):
    recipe = write(tmp_path, members=members(tmp_path), crops=2)
    out = build(load_recipe(recipe), tmp_path / "built", tmp_path)
    built = VSEModel.load(out)
    direct = ensemble_from_models([VSEModel.load(tmp_path / f"m{s}") for s in (0, 1)], [0.6, 0.4])
    assert built.fingerprint != direct.fingerprint  # the crops are part of the image side
    direct.info["image"].update(crops=2, trained_on_crops=1)
    if "preprocessing" in direct.info["image"]:
        direct.info["image"]["preprocessing"]["crops"] = 2
    assert built.fingerprint == direct.fingerprint
    assert built.info["name"] == "tiny-2026.11" and built.info["image"]["crops"] == 2
    again = build(load_recipe(recipe), tmp_path / "again", tmp_path)
    assert VSEModel.load(again).fingerprint == built.fingerprint


def test_a_member_with_other_weights_is_refused(tmp_path):
    ms = members(tmp_path)
    ms[1]["weights_sha256"] = "0" * 64
    with pytest.raises(ConfigError, match=r"members\.1: m1 has weights sha256 .* not the recipe's"):
        build(load_recipe(write(tmp_path, members=ms)), tmp_path / "built", tmp_path)
    assert not (tmp_path / "built").exists()  # nothing half-written


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"members": []}, "members: List should have at least 1 item"),
        ({"crops": 0}, "crops: Input should be greater than or equal to 1"),
        ({"colour": 1}, r"config: unknown field\(s\) \['colour'\]"),
    ],
)
def test_recipe_errors_name_the_field(tmp_path, change, where):
    path = write(tmp_path, **{"members": members(tmp_path), **change})
    with pytest.raises(ConfigError, match=rf"recipe\.yaml: {where}"):
        load_recipe(path)
    nested = write(tmp_path, members=[{"run": "a", "train": {"config": "c", "bar": 1}}])
    with pytest.raises(ConfigError, match=r"members\[0\]\.train: unknown field\(s\) \['bar'\]; "
                       r"known: \['config', 'refit', 'set'\]"):  # fmt: skip
        load_recipe(nested)
    bad = write(tmp_path, members=[{"run": "a", "bundle": "b"}])
    with pytest.raises(
        ConfigError, match=r"recipe\.yaml: members\[0\]: Value error, give exactly one"
    ):
        load_recipe(bad)


def test_cli_build_and_the_shipped_recipe_parses(tmp_path, capsys):
    recipe = write(tmp_path, members=members(tmp_path))
    assert (
        main(["model", "build", str(recipe), str(tmp_path / "out"), "--root", str(tmp_path)]) == 0
    )
    assert "tiny-2026.11, 2 member(s), fingerprint" in capsys.readouterr().out
    shipped = load_recipe(ROOT / "configs" / "default-model.yaml")
    info = VSEModel.load("default").info
    assert shipped.name == info["name"]
    pinned = [m["weights_sha256"] for m in info["source"]["members"]]
    assert [m.weights_sha256 for m in shipped.members] == pinned


def test_build_ships_the_compact_caption_pool(tmp_path, flickr8k_root):
    """A recipe with captions: the bundle carries the compact pool made for its weights
    and captions, so a first annotate embeds none; its neighbours match the exact
    pool's."""
    import numpy as np

    from vsekit.runtime.captions import CaptionPool
    from vsekit.runtime.compact import COMPACT_FILE

    captions = {"dataset": str(flickr8k_root), "split": "dev"}
    recipe = write(tmp_path, members=members(tmp_path), captions=captions)
    out = build(load_recipe(recipe), tmp_path / "built", tmp_path)
    assert (out / COMPACT_FILE).is_file()
    m = VSEModel.load(out)
    pool = m.compact_pool
    assert pool is not None and len(pool) == len(dict.fromkeys(m.captions)) > 1000
    exact = CaptionPool(m, list(dict.fromkeys(m.captions)), cache=False).embeddings
    rebuilt = pool.rows(np.arange(len(pool)))
    assert np.abs(rebuilt - exact).max() < 0.05  # the same embeddings, compacted
    q = exact[:50]
    coords, off = pool.project(q)
    scores = coords @ pool.z.astype(np.float32).T + off[:, None]
    assert np.abs(scores - q @ exact.T).max() < 0.02  # what annotate ranks by


def test_rebuilding_the_shipped_default_gives_its_fingerprint(tmp_path):
    """Needs the member runs and the tagger run (under ~/.cache/vsekit/runs/, made by
    `vse model build configs/default-model.yaml OUT --train`) and the 2-crop store, which
    live on the machine that trained them."""
    recipe = load_recipe(ROOT / "configs" / "default-model.yaml")
    needs = [m.run for m in recipe.members] + [recipe.tagger.run, recipe.hubness.store]
    missing = [r for r in needs if not Path(r).expanduser().is_dir()]
    if missing:
        pytest.skip(f"not on this machine: {', '.join(missing)}")
    out = build(recipe, tmp_path / "default", ROOT)
    assert VSEModel.load(out).fingerprint == VSEModel.load("default").fingerprint


def test_a_failed_build_leaves_the_old_bundle_whole(tmp_path):
    """The bundle is built beside OUT and swapped in: a step that fails (here the
    hubness bank's store is missing) leaves OUT as it was and no partial folder."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "marker").write_text("old")
    hub = {"beta": 0.5, "k_text": 2, "k_image": 2, "image_bank": 2,
           "dataset": "data", "store": "no-such-store"}  # fmt: skip
    recipe = write(tmp_path, members=members(tmp_path), hubness=hub)
    with pytest.raises(Exception):  # noqa: B017  (whichever error the missing data gives)
        build(load_recipe(recipe), out, tmp_path)
    assert (out / "marker").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_build_train_trains_the_recipe_runs_once_and_reproducibly(tmp_path, capsys):
    """``vse model build --train``: each member with a ``train`` section is trained on
    the train split less the slice (``RUN-slice``), then refitted on every train image
    with that schedule; a second build trains nothing; the same recipe trained from
    scratch elsewhere gives the same weights (the pins hold on this machine)."""
    from tests.test_train import write_flickr8k_folder
    from vsekit.lab.build import DONE

    data = write_flickr8k_folder(tmp_path / "f8k", n=14, n_train=10)
    (tmp_path / "cfg.yaml").write_text(f"""
name: tiny-member
data: {{root: {data}, store: {tmp_path / "store"}, backbone: tiny-test, crops: 1,
        weights: random, features: baseline, val_from_train: 3}}
model: {{text: {{kind: gru, word_dim: 8, embed_dim: 16}}}}
loss: {{name: max_hinge, margin: 0.2}}
train: {{epochs: 3, batch_size: 4, lr: 0.001, collapse_epochs: 0, threads: 1}}
""")
    built = {}
    for where in ("a", "b"):
        recipe = write(
            tmp_path,
            members=[
                {
                    "run": f"{where}/member",
                    "train": {
                        "config": str(tmp_path / "cfg.yaml"),
                        "set": ["train.seed=1"],
                        "refit": True,
                    },
                }
            ],
        )
        args = ["model", "build", str(recipe), str(tmp_path / f"out-{where}"), "--root",
                str(tmp_path), "--train"]  # fmt: skip
        assert main(args) == 0
        assert f"trained {tmp_path / where / 'member'}" in capsys.readouterr().out
        run = tmp_path / where / "member"
        assert (run / DONE).is_file() and (run.with_name("member-slice") / DONE).is_file()
        meta = yaml.safe_load((run / "config.json").read_text())
        assert meta["config"]["data"]["val_from_train"] == 0  # the refit saw every image
        assert meta["config"]["train"]["refit_from"] == str(run.with_name("member-slice"))
        built[where] = VSEModel.load(tmp_path / f"out-{where}")
        assert main(args) == 0  # again: nothing to train
        assert "trained" not in capsys.readouterr().out
    assert built["a"].fingerprint == built["b"].fingerprint
    shas = [m["weights_sha256"] for m in built["a"].info["source"]["members"]]
    assert shas == [m["weights_sha256"] for m in built["b"].info["source"]["members"]]
    # a pinned member is trained too and checked as soon as it is done: the right pin
    # holds, a wrong one stops the build before the next member trains
    from vsekit.lab.build import train_missing

    member = {"train": {"config": str(tmp_path / "cfg.yaml"), "set": ["train.seed=1"],
                        "refit": True}}  # fmt: skip
    ok = {**member, "run": "c/member", "weights_sha256": shas[0]}
    assert train_missing(load_recipe(write(tmp_path, members=[ok])), tmp_path, False)
    bad = {**member, "run": "d/member", "weights_sha256": "ab" * 32}
    after = {**member, "run": "d/next"}
    with pytest.raises(ConfigError, match=rf"members\.0: d/member has weights sha256 "
                       rf"{shas[0]}, not the recipe's abab"):  # fmt: skip
        train_missing(load_recipe(write(tmp_path, members=[bad, after])), tmp_path, False)
    assert not (tmp_path / "d" / "next").exists()
    with pytest.raises(ConfigError, match=r"remove it and its -slice run to retrain"):
        train_missing(load_recipe(write(tmp_path, members=[bad, after])), tmp_path, False)
    assert not (tmp_path / "d" / "next").exists()  # a rerun does not skip past it either


def test_build_without_train_names_the_missing_run(tmp_path):
    recipe = write(tmp_path, members=[{"run": "gone/member", "train": {"config": "c.yaml"}}])
    with pytest.raises(ConfigError, match=r"gone/member: no training run there \(vse model "
                       r"build --train trains it\)"):  # fmt: skip
        build(load_recipe(recipe), tmp_path / "out", tmp_path)


def test_build_train_never_overwrites_or_reuses_a_run_it_did_not_make(tmp_path):
    from vsekit.lab.build import DONE, train_missing

    spec = {"config": "c.yaml", "set": ["train.seed=1"]}
    other = tmp_path / "runs" / "member"
    other.mkdir(parents=True)
    (other / "config.json").write_text("{}")  # a run trained some other way
    recipe = load_recipe(write(tmp_path, members=[{"run": "runs/member", "train": spec}]))
    with pytest.raises(ConfigError, match=r"member: a run is there that this recipe's --train"):
        train_missing(recipe, tmp_path)
    # finished by --train with another spec: refused, not taken as done
    (other / DONE).write_text('{"config": "c.yaml", "refit": false, "set": []}\n')
    with pytest.raises(ConfigError, match=r"member: trained by another train section"):
        train_missing(recipe, tmp_path)


def test_the_recipes_evidence_comes_with_its_files_checked(tmp_path):
    """`evidence: {bundle: DIR}` copies DIR's evidence.json and the files it records; a
    missing file, one with other bytes, or a bad setting stops the build, naming it."""
    import json
    import shutil

    from vsekit.bundle import bundle_dir
    from vsekit.evidence import load_sources
    from vsekit.evidence.veto import AnnotationVeto
    from vsekit.fsio import file_sha256

    shipped = bundle_dir("default")
    recipe = write(tmp_path, members=members(tmp_path), evidence={"bundle": str(shipped)})
    out = build(load_recipe(recipe), tmp_path / "built", tmp_path)
    assert json.loads((out / "evidence.json").read_text()) == json.loads(
        (shipped / "evidence.json").read_text())  # fmt: skip
    for name in ("imagenet_wordnet.json", "imagenet_head.safetensors", "imagenet_not_nouns.json"):
        assert file_sha256(out / name) == file_sha256(shipped / name)
    recorded = VSEModel.load(out).info["source"]["evidence_sha256"]
    assert recorded == file_sha256(shipped / "evidence.json") == file_sha256(out / "evidence.json")
    enabled = {s.name for s in load_sources(out)}
    assert enabled == {s.name for s in load_sources(shipped)} and "colour" in enabled
    veto, shipped_veto = AnnotationVeto.from_bundle(out), AnnotationVeto.from_bundle(shipped)
    assert veto.rule == shipped_veto.rule and veto.not_nouns == shipped_veto.not_nouns

    src = tmp_path / "ev"
    src.mkdir()
    cfg = json.loads((shipped / "evidence.json").read_text())
    (src / "evidence.json").write_text(json.dumps(cfg))
    recipe = write(tmp_path, members=members(tmp_path), evidence={"bundle": "ev"})
    with pytest.raises(ConfigError, match=r"evidence\.bundle: .*imagenet names imagenet_"):
        build(load_recipe(recipe), tmp_path / "b1", tmp_path)
    for name in ("imagenet_wordnet.json", "imagenet_head.safetensors", "imagenet_not_nouns.json"):
        shutil.copyfile(shipped / name, src / name)
    (src / "imagenet_head.safetensors").write_bytes(b"other bytes")
    with pytest.raises(ConfigError, match=r"imagenet_head\.safetensors has sha256 .* not the"):
        build(load_recipe(recipe), tmp_path / "b2", tmp_path)
    shutil.copyfile(shipped / "imagenet_head.safetensors", src / "imagenet_head.safetensors")
    cfg["consensus"]["weight"] = "much"
    (src / "evidence.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"evidence\.bundle: .*consensus\.weight"):
        build(load_recipe(recipe), tmp_path / "b3", tmp_path)
    empty = write(tmp_path, members=members(tmp_path), evidence={"bundle": "nowhere"})
    with pytest.raises(ConfigError, match=r"evidence\.bundle: .*evidence\.json: missing"):
        build(load_recipe(empty), tmp_path / "b4", tmp_path)
    assert not any((tmp_path / f"b{k}").exists() for k in range(1, 5))  # nothing half-built


def test_the_shipped_recipes_evidence_is_the_shipped_bundles():
    recipe = load_recipe(ROOT / "configs" / "default-model.yaml")
    assert recipe.evidence is not None
    assert (ROOT / recipe.evidence.bundle).resolve() == VSEModel.load("default").path.resolve()
