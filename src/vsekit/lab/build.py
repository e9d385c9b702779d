"""Building a model bundle from a recipe: the shipped model as data, not as benchmark output.

A recipe (``configs/default-model.yaml``) names the bundle's version, its members (training
runs or single-model bundles, each pinned by its weights' sha256, with its share of the
similarity), the crops it indexes with, the caption pool, the tagger, the hubness
settings and the evidence (``evidence.json``: the knowledge sources of
:mod:`vsekit.evidence` and the annotation settings, as the benchmarks' slice sweeps
chose them, with the files they name). ``vse model build RECIPE OUT`` joins them;
nothing is read from ``benchmarks/``.
The vocabulary expansion and the ONNX graphs are made afterwards, as for any bundle
(``vse model expand-vocab``, ``vse model onnx``; for the shipped one, the expansion is
tracked and ``scripts/onnx_default`` writes the graphs without PyTorch). The recipe is a
set of config dataclasses read by :func:`vsekit.config.from_dict`, as training configs
are: a wrong field is one line that names it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
import yaml
from pydantic import Field

from vsekit.config import ConfigError, from_dict
from vsekit.graphs.captions import write_pool
from vsekit.lab.torch_model import VSEModel


@dataclass(kw_only=True)
class TrainSpec:
    """How a run is trained: ``vse train CONFIG --set ...``. With ``refit``, first on the
    train split less the slice the config carves off (``data.val_from_train``), which
    chooses the schedule, into ``RUN-slice``; then on every train image with that schedule
    (``train.refit_from``) into ``RUN``."""

    config: str
    set: list[str] = field(default_factory=list)
    refit: bool = False


@dataclass(kw_only=True)
class Member:
    """One member: a training run or a single-model bundle, and its share."""

    run: str | None = None  # a training run directory (its best checkpoint)
    bundle: str | None = None  # or a bundle directory
    weight: Annotated[float, Field(gt=0)] = 1.0  # share of the similarity (normalised)
    weights_sha256: str | None = None  # the member's weights, checked when given
    name: str | None = None
    train: TrainSpec | None = None  # how ``run`` is trained (``vse model build --train``)

    def __post_init__(self) -> None:
        if (self.run is None) == (self.bundle is None):
            raise ValueError("give exactly one of run or bundle")


@dataclass(kw_only=True)
class Captions:
    dataset: str  # a dataset folder (any format vse data reads)
    split: str = "train"


@dataclass(kw_only=True)
class Tagger:
    run: str  # a tag-ranking run on the same image features
    train: TrainSpec | None = None  # how ``run`` is trained


@dataclass(kw_only=True)
class HubnessRecipe:
    """CSLS settings (:mod:`vsekit.runtime.hubness`) and how the image bank is drawn."""

    beta: Annotated[float, Field(ge=0)]
    k_text: Annotated[int, Field(ge=1)]
    k_image: Annotated[int, Field(ge=1)]
    caption_stride: Annotated[int, Field(ge=1)] = 1
    image_bank: Annotated[int, Field(ge=1)]  # train images drawn for the bank
    bank_seed: int = 0  # numpy default_rng seed of the draw
    dataset: str  # where the train images come from
    store: str  # the FeatureStore whose rows (at the bundle's crops) embed the bank
    chosen_on: str = ""  # how the settings were chosen (recorded)


@dataclass(kw_only=True)
class EvidenceRecipe:
    """Where the bundle's evidence comes from: the ``evidence.json`` of the bundle at
    ``bundle`` (whose settings the slice sweeps of ``benchmarks/`` write: the ImageNet
    classes, colour, object counts, the annotation veto and consensus) and the files it
    names, each checked against the sha256 it records."""

    bundle: str


@dataclass(kw_only=True)
class Recipe:
    name: str  # the version, e.g. default-2026.11
    released: str  # date
    members: Annotated[list[Member], Field(min_length=1)]
    crops: Annotated[int, Field(ge=1)] | None = None  # index with this many crops
    captions: Captions | None = None
    tagger: Tagger | None = None
    hubness: HubnessRecipe | None = None
    evidence: EvidenceRecipe | None = None
    notes: str = ""


def load_recipe(path: str | Path) -> Recipe:
    """The recipe at ``path``; ConfigError naming the file and the field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML ({e})") from e
    try:
        return from_dict(Recipe, raw)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e


DONE = "recipe-done.json"  # written into a run that train_missing finished
STARTED = "recipe-started.json"  # written into a run before train_missing trains it


def _path(root: Path, p: str) -> Path:
    q = Path(p).expanduser()
    return q if q.is_absolute() else root / q


def train_missing(recipe: Recipe, root: str | Path = ".", progress: bool = True) -> list[Path]:
    """Train every run the recipe names with a ``train`` spec and that is not finished
    (a killed one resumes from its last epoch); returns the runs trained. Without
    ``--train`` a build never trains: a missing run is an error naming it."""
    from vsekit.lab.train import load_config, train
    from vsekit.lab.train.config import apply_overrides

    root = Path(root)
    todo = [(f"members.{k}", m.run, m.train, m.weights_sha256)
            for k, m in enumerate(recipe.members) if m.run and m.train]  # fmt: skip
    if recipe.tagger is not None and recipe.tagger.train is not None:
        todo.append(("tagger", recipe.tagger.run, recipe.tagger.train, None))
    done = []
    for where, run_name, spec, pin in todo:
        run = _path(root, run_name)
        if _finished(run, spec):
            if pin:  # a finished run with other weights stops the build here, every time
                _check_pin(where, run_name, weights_sha256(_member_run(run)), pin, True)
            continue
        _check_foreign(run)
        cfg = apply_overrides(load_config(_path(root, spec.config)), spec.set)
        steps = [(run, cfg)]
        if spec.refit:
            if not cfg.data.val_from_train:
                raise ConfigError(f"{run_name}: train.refit needs data.val_from_train in "
                                  f"{spec.config} or its set")  # fmt: skip
            twin = run.with_name(f"{run.name}-slice")
            refit = apply_overrides(cfg, ["data.val_from_train=0", f"train.refit_from={twin}"])
            steps = [(twin, cfg), (run, refit)]
        for step_run, step_cfg in steps:
            if _finished(step_run, spec):
                continue
            _check_foreign(step_run)
            step_run.mkdir(parents=True, exist_ok=True)
            (step_run / STARTED).write_text(_stamp(spec))
            res = train(step_cfg, step_run, resume=(step_run / "config.json").is_file(),
                        progress=progress)  # fmt: skip
            if res.get("collapsed"):
                raise ConfigError(f"{step_run}: the run did not start learning; not used")
            (step_run / DONE).write_text(_stamp(spec))
        if pin:  # checked now, not after the other members' hours of training
            _check_pin(where, run_name, weights_sha256(_member_run(run)), pin, True)
        done.append(run)
    return done


def _check_pin(where: str, name: str, sha: str, pin: str, trained: bool) -> None:
    """ConfigError unless ``sha`` is the recipe's ``pin``; for a run ``--train`` trains,
    the message says what makes a retrain drift and the two ways on."""
    if sha == pin:
        return
    hint = ""
    if trained:
        hint = (" (a retrain gives the pinned weights only with the same CPU kind, thread "
                "count and library versions); remove it and its -slice run to retrain, "
                "or drop the pin to build a new version from it")  # fmt: skip
    raise ConfigError(f"{where}: {name} has weights sha256 {sha}, not the recipe's {pin}{hint}")


def _check_foreign(run: Path) -> None:
    if (run / "config.json").is_file() and not (run / STARTED).is_file():
        raise ConfigError(f"{run}: a run is there that this recipe's --train did not start; "
                          "move it away, or drop its train section")  # fmt: skip


def _stamp(spec: TrainSpec) -> str:
    return json.dumps(asdict(spec), sort_keys=True) + "\n"


def _finished(run: Path, spec: TrainSpec) -> bool:
    """Whether ``run`` was finished by train_missing with this very spec; ConfigError if
    it was trained with another, or a started run has another spec."""
    for marker in (DONE, STARTED):
        f = run / marker
        if f.is_file() and f.read_text() != _stamp(spec):
            raise ConfigError(f"{run}: trained by another train section ({f.read_text().strip()})")
    return (run / DONE).is_file()


def weights_sha256(model: VSEModel) -> str:
    """The sha256 of a model's weights (its state dict's tensors, in order, as stored in
    float32): what a recipe pins a member by."""
    state = model.model.state_dict()
    raw = b"".join(v.detach().cpu().float().numpy().tobytes() for v in state.values())
    return hashlib.sha256(raw).hexdigest()


def _member(m: Member, root: Path) -> VSEModel:
    if m.run is not None:
        run = _path(root, m.run)
        if not (run / "config.json").is_file():
            hint = " (vse model build --train trains it)" if m.train else ""
            raise ConfigError(f"{m.run}: no training run there{hint}")
        return _member_run(run)
    return VSEModel.load(_path(root, m.bundle), device="cpu", expand=False)


def _member_run(run: Path) -> VSEModel:
    from vsekit.lab.train.export import model_from_run

    return model_from_run(run)


def build(recipe: Recipe, out: str | Path, root: str | Path = ".") -> Path:
    """Write the bundle ``recipe`` describes to ``out`` (atomically); relative paths in
    the recipe are read from ``root``. Returns ``out``."""
    from vsekit.lab.data import load_dataset
    from vsekit.lab.train.export import attach_tagger, ensemble_from_models

    root = Path(root)
    models = [_member(m, root) for m in recipe.members]
    members = []
    for k, (m, model) in enumerate(zip(recipe.members, models, strict=True)):
        sha = weights_sha256(model)
        if m.weights_sha256:
            _check_pin(f"members.{k}", str(m.run or m.bundle), sha, m.weights_sha256,
                       m.train is not None)  # fmt: skip
        members.append({"name": m.name or Path(m.run or m.bundle).name, "weights_sha256": sha})
    weights = [m.weight for m in recipe.members]
    model = models[0] if len(models) == 1 else ensemble_from_models(models, weights)
    if recipe.crops and recipe.crops != int(model.info["image"]["crops"]):
        image = model.info["image"]
        image.setdefault("trained_on_crops", int(image["crops"]))
        image["crops"] = recipe.crops
        if "preprocessing" in image:
            image["preprocessing"]["crops"] = recipe.crops
    if recipe.tagger is not None:
        attach_tagger(model, _path(root, recipe.tagger.run))
    captions: list[str] = []
    if recipe.captions is not None:
        captions = list(
            load_dataset(root / recipe.captions.dataset).split(recipe.captions.split).texts
        )
    model.info.update(name=recipe.name, released=recipe.released)
    model.info["source"] = {"recipe": asdict(recipe), "members": members}
    evidence_sha = None
    if recipe.evidence is not None:  # which evidence.json the bundle takes, by content
        from vsekit.evidence import EVIDENCE_FILE
        from vsekit.fsio import file_sha256

        f = _path(root, recipe.evidence.bundle) / EVIDENCE_FILE
        evidence_sha = file_sha256(f) if f.is_file() else None
        model.info["source"]["evidence_sha256"] = evidence_sha
    # built beside ``out`` and swapped in whole: a failed step leaves ``out`` as it was
    out = Path(out)
    tmp = out.with_name(f".{out.name}.building")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save(tmp, captions=captions)
        if recipe.hubness is not None:
            _add_hubness(tmp, recipe.hubness, root, recipe.crops)
        if captions:  # the pool a first `vse annotate` reads, with the hubness penalties
            write_pool(VSEModel.load(tmp, device="cpu"), tmp, "the bundle's text encoder (PyTorch)")
        if recipe.evidence is not None:
            _add_evidence(tmp, _path(root, recipe.evidence.bundle), evidence_sha)
        old = out.with_name(f".{out.name}.old")
        if out.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _add_evidence(bundle: Path, source: Path, sha: str | None) -> None:
    """``source``'s ``evidence.json`` (as it is, whose sha256 ``sha`` the bundle's
    ``bundle.json`` records) and the files its entries record by sha256, into ``bundle``;
    ConfigError naming the file that is missing or not the one recorded, and the bundle's
    own checks (every source, the veto and consensus settings) must pass."""
    from vsekit.bundle import ModelError
    from vsekit.evidence import EVIDENCE_FILE, load_sources, read_evidence_config
    from vsekit.evidence.veto import AnnotationVeto
    from vsekit.fsio import file_sha256
    from vsekit.runtime.consensus import ConsensusRule

    where = f"evidence.bundle: {source / EVIDENCE_FILE}"
    try:
        cfg = read_evidence_config(source)
    except ModelError as e:
        raise ConfigError(f"evidence.bundle: {e}") from e
    if not cfg:
        raise ConfigError(f"{where}: missing")
    for name, entry in cfg.items():
        files = entry.get("sha256", {}) if isinstance(entry, dict) else {}
        if not isinstance(files, dict):
            raise ConfigError(f"{where}: {name}.sha256: an object of file names, not {files!r}")
        for fname, want in files.items():
            if Path(fname).name != fname or fname in ("", ".", ".."):
                raise ConfigError(f"{where}: {name}.sha256: {fname!r} is not a file name")
            f = source / fname
            if not f.is_file():
                raise ConfigError(f"{where}: {name} names {fname}, which is missing there")
            shutil.copyfile(f, bundle / fname)
            got = file_sha256(bundle / fname)  # the copy is what the bundle holds
            if got != want:
                raise ConfigError(f"{where}: {f} has sha256 {got}, not the recorded {want}")
    shutil.copyfile(source / EVIDENCE_FILE, bundle / EVIDENCE_FILE)  # the bundle is a temp dir
    got = file_sha256(bundle / EVIDENCE_FILE)
    if got != sha:  # changed while the bundle was built
        raise ConfigError(f"{where}: changed during the build (sha256 {got}, not {sha})")
    try:  # the settings as a search, the veto and annotation will read them
        load_sources(bundle, enabled_only=False)
        AnnotationVeto.from_bundle(bundle, enabled_only=False)
        ConsensusRule.from_bundle(bundle, enabled_only=False)
    except ModelError as e:
        raise ConfigError(f"{where}: {e}") from e


def _add_hubness(bundle: Path, h: HubnessRecipe, root: Path, crops: int | None) -> None:
    """The CSLS settings and an image bank drawn from the train split, embedded by the
    built model from the store's rows (the bundle's crops)."""
    from vsekit.lab.data import load_dataset
    from vsekit.lab.features.store import FeatureStore
    from vsekit.lab.train.features import image_features
    from vsekit.runtime.hubness import HubnessConfig, write_hubness

    model = VSEModel.load(bundle, device="cpu")
    train = load_dataset(root / h.dataset).split("train")
    pick = np.sort(np.random.default_rng(h.bank_seed).choice(len(train.images), h.image_bank,
                                                             replace=False))  # fmt: skip
    ids = [train.images[i].id for i in pick]
    store_path = Path(h.store).expanduser()
    store = FeatureStore(store_path if store_path.is_absolute() else root / store_path)
    want = int(model.info["image"]["crops"])
    if int(store.meta.get("crops", want)) != want:
        raise ConfigError(
            f"hubness.store: {store.path} holds {store.meta.get('crops')}-crop rows; the "
            f"bundle indexes with {want} (crops: {crops})"
        )
    bank = model.encode_image_features(image_features(store, model.info["image"]["features"], ids))
    cfg = HubnessConfig(beta=h.beta, k_text=h.k_text, k_image=h.k_image,
                        caption_stride=h.caption_stride)  # fmt: skip
    info = {"chosen_on": h.chosen_on, "model_fingerprint": model.fingerprint,
            "image_bank_from": f"{h.dataset} train, {h.image_bank} images drawn with numpy "
            f"default_rng({h.bank_seed}), FeatureStore {h.store}"}  # fmt: skip
    write_hubness(bundle, cfg, bank, info)
