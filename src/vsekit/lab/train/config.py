"""Experiment configuration: typed dataclasses loaded from a YAML (or JSON) file.

Only the CLI turns argv into a config; the library receives these objects. Unknown keys
and wrongly typed values are errors that name the field (``train.lr: expected float``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from vsekit.config import ConfigError, from_dict
from vsekit.lab.models.factory import ModelConfig, upgrade_model_section
from vsekit.lab.models.joint import JointConfig


@dataclass
class DataConfig:
    root: str = "../shared/data/flickr8k"  # dataset folder or file
    format: str | None = None  # dataset format (None: detect)
    store: str = "~/.cache/vsekit/stores/flickr8k-resnet50-c10"  # FeatureStore directory
    # fne | baseline | baseline_raw | rmac | pooled: image representation; KIND+audio
    # appends a video store's bag-of-MFCC histogram (`vse features audio`)
    features: str = "fne"
    backbone: str = "resnet50"  # used if the store must be extracted
    crops: int = 10  # used if the store must be extracted
    video_every: float | None = 1.0  # videos: one frame every this many seconds ...
    video_frames: int | None = None  # ... or this many frames per clip (then every: null)
    audio_k: int = 1024  # features KIND+audio: bag-of-MFCC codebook size (paper: 1024)
    weights: str = "auto"  # backbone weights if the store must be extracted ("auto": installed)
    train_split: str = "train"
    dev_split: str = "dev"
    vocab_min_count: int = 1  # words seen fewer times in train become <unk>
    # carve this many train images (seeded) as the slice that selects epochs, switches the
    # curriculum and stops early, so dev stays untouched (0: select on dev_split)
    val_from_train: int = 0
    val_seed: int = 0  # the carve's seed: the same slice whatever train.seed (ensembles)
    # drop every training (and selection) caption that uses one of these words, so the
    # model never reads them: the zero-shot protocol (benchmarks/zero_shot.py)
    hold_out_words: list[str] = field(default_factory=list)


@dataclass
class LossConfig:
    name: str = "max_hinge"  # sum_hinge (L_S) | max_hinge (L_M) | mse | sje | listsje
    # options; None leaves the loss's own default, and one the loss does not take is an error
    margin: float | None = None  # hinge losses: alpha (default 0.2)
    delta: str | None = None  # sje: structured term Delta^(I) or Delta^(II) (default II)
    k_top: int | None = None  # listsje: K_top (default 5)

    def options(self) -> dict:
        """The options set (not None), as keyword arguments of the loss."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "name" and v is not None}


@dataclass
class TagConfig:
    scheme: str = "nouns"  # nouns | compound
    relevance: str = "alpha=0.75"  # loc | freq | alpha=A | syntactic[:alpha=A]
    max_tags: int = 0  # keep at most this many ranked tags per image (0: all)
    negatives: int = 0  # beyond the paper: append this many tags of other images to each
    # training list, ranked after the image's own, so the ranker learns to reject them


@dataclass
class TrainConfig:
    epochs: int = 30  # maximum epochs (the best dev-rsum epoch is kept)
    batch_size: int = 128
    lr: float = 2e-4
    captions: str = "one"  # one: each image once with a random caption (paper); all: every caption
    grad_clip: float = 2.0  # gradient-norm clipping
    weight_decay: float = 0.0  # Adam(W) decoupled weight decay
    lr_decay_epochs: int = 0  # multiply lr by lr_decay every this many epochs (0: never)
    lr_decay: float = 0.1
    curriculum: str = "none"  # none | sum_then_max (PH / POE)
    curriculum_patience: int = 1  # epochs without dev improvement before switching to L_M
    curriculum_sum_epochs: int | None = None  # switch after at most this many L_S epochs
    lr_max_phase: float | None = None  # lr of the L_M phase (None: keep lr)
    collapse_epochs: int = 5  # a run with dev rsum < collapse_rsum after this many epochs ...
    collapse_rsum: float = 10.0  # ... has not started learning (journal paper, section 6)
    collapse_restart: bool = True  # restart once with a sum-loss warm-up (curriculum)
    patience: int = 0  # stop after this many epochs without improvement (0: never)
    # with patience: on each of the first plateau_decays plateaus, multiply lr by lr_decay
    # and go on (the count restarts at the curriculum's switch); stop at the next one
    plateau_decays: int = 0
    # with patience: plateaus count only once the best selection score reaches this, so
    # a run still at its start (the order loss's slow start) is neither decayed nor
    # stopped (None: from the first epoch); a curriculum's switch to L_M is not gated
    patience_from: float | None = None
    max_minutes: float | None = None  # training time budget (evaluation included)
    optimizer: str = "adam"  # adam (AdamW) | rmsprop | sgd | closed_form (linear w2vv only)
    eps: float | None = None  # optimizer epsilon (None: PyTorch's default)
    rmsprop_rho: float = 0.9  # RMSprop decay of the squared-gradient average
    ridge: float = 0.0  # closed_form: L2 penalty on the weights (not the bias)
    eval_batch: int = 1024
    seed: int = 0
    device: str | None = None  # None: CUDA if present, else CPU
    precision: str = "fp32"  # fp32 | bf16 (autocast of the forward and loss; weights fp32)
    threads: int | None = None  # torch CPU threads (None: default)
    # a finished run that selected on a carved slice (data.val_from_train): re-train on
    # every train image (this run's val_from_train is 0) with that run's schedule: the
    # curriculum switches at its switch epoch, reloading the epoch its switch reloaded,
    # and training stops at its best epoch; no selection split is read
    refit_from: str | None = None


@dataclass
class TuneConfig:
    """Train the backbone's last stage with the model (:mod:`vsekit.lab.train.tuned`):
    the layers below it are cached once (:mod:`vsekit.lab.features.stage_cache`), the
    stage starts from its pretrained weights, its batch-norm statistics stay frozen."""

    stage: str = "layer4"  # the tuned stage (ResNet-50: layer4)
    lr_scale: float = 0.1  # its learning rate is train.lr times this; 0 keeps it frozen
    cache: str = "~/.cache/vsekit/stages"  # where the activations below it are cached
    # a finished tune run whose best weights (head and stage) this run starts from
    # (VSE++'s protocol: train the head on the frozen stage, then tune both)
    init_from: str | None = None


@dataclass
class ExperimentConfig:
    name: str = "experiment"
    task: str = "retrieval"  # retrieval (image-text) | tags (tag ranking)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=JointConfig)  # its kind's own section
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    tags: TagConfig = field(default_factory=TagConfig)
    tune: TuneConfig | None = None  # fine-tune the backbone's last stage (None: frozen features)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_config(path: str | Path) -> ExperimentConfig:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a config file")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML ({e})") from e
    try:
        cfg = from_dict(ExperimentConfig, raw)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
    validate(cfg, str(path))
    return cfg


def _fne_variant_ok(kind: str) -> bool:
    from vsekit.lab.features.fne_variant import FNEVariant

    try:
        FNEVariant.parse(kind)
    except ValueError:
        return False
    return True


def validate(cfg: ExperimentConfig, where: str = "config") -> None:
    checks = [
        (
            cfg.data.features.removesuffix("+audio")
            in ("fne", "baseline", "baseline_raw", "rmac", "pooled")
            or _fne_variant_ok(cfg.data.features.removesuffix("+audio")),
            "data.features",
            "fne | fne[layers=A+B;t=F-/F+] | baseline | baseline_raw | rmac | pooled, "
            "optionally +audio",
        ),
        (cfg.train.captions in ("one", "all"), "train.captions", "one | all"),
        (cfg.task in ("retrieval", "tags"), "task", "retrieval | tags"),
        (
            cfg.train.curriculum in ("none", "sum_then_max"),
            "train.curriculum",
            "none | sum_then_max",
        ),
        (cfg.train.batch_size >= 2, "train.batch_size", ">= 2"),
        (cfg.train.epochs >= 1, "train.epochs", ">= 1"),
        (
            cfg.train.plateau_decays == 0 or cfg.train.patience > 0,
            "train.plateau_decays",
            "0 unless train.patience is set (a plateau is patience epochs without gain)",
        ),
        (
            cfg.train.patience_from is None or cfg.train.patience > 0,
            "train.patience_from",
            "null unless train.patience is set",
        ),
        (cfg.train.lr > 0, "train.lr", "> 0"),
        (cfg.train.eval_batch >= 1, "train.eval_batch", ">= 1"),
        (cfg.data.crops >= 1, "data.crops", ">= 1"),
        (cfg.data.val_from_train >= 0, "data.val_from_train", ">= 0"),
        (
            (cfg.data.video_every is None) != (cfg.data.video_frames is None),
            "data.video_every / data.video_frames",
            "exactly one set (the other null)",
        ),
        (cfg.data.audio_k >= 1, "data.audio_k", ">= 1"),
        (
            cfg.task == "retrieval" or not cfg.data.hold_out_words,
            "data.hold_out_words",
            "empty for task: tags (tags are mined from every caption)",
        ),
        (cfg.train.optimizer in OPTIMIZERS, "train.optimizer", " | ".join(OPTIMIZERS)),
        (cfg.train.precision in ("fp32", "bf16"), "train.precision", "fp32 | bf16"),
        (cfg.tune is None or cfg.tune.lr_scale >= 0, "tune.lr_scale", ">= 0"),
        (
            cfg.tune is None or cfg.data.val_from_train > 0,
            "data.val_from_train",
            "> 0 with tune: (a tuned stage selects on a slice carved from train)",
        ),
        (
            cfg.tune is None
            or (not cfg.data.hold_out_words and cfg.train.optimizer != "closed_form"),
            "tune",
            "without data.hold_out_words and train.optimizer: closed_form",
        ),
        (
            cfg.tune is None or (cfg.task == "retrieval" and cfg.data.features == "baseline"),
            "tune",
            "set only with task: retrieval and data.features: baseline (the stage's pooled output)",
        ),
        (
            not cfg.train.refit_from or cfg.data.val_from_train == 0,
            "data.val_from_train",
            "0 with train.refit_from (a refit trains on every train image)",
        ),
    ]
    checks += _registry_checks(cfg)
    for ok, name, want in checks:
        if not ok:
            raise ConfigError(f"{where}: {name} must be {want}")


OPTIMIZERS = ("adam", "rmsprop", "sgd", "closed_form")


def _registry_checks(cfg: ExperimentConfig) -> list[tuple[bool, str, str]]:
    """Every registry name in ``cfg`` is registered, and every loss option set is one the
    loss takes: checked before any work, so a typo costs no extraction."""
    from vsekit.lab.data.sources import SOURCES
    from vsekit.lab.features.backbones import BACKBONES
    from vsekit.lab.losses import LOSSES, loss_options
    from vsekit.lab.similarity import SIMILARITIES
    from vsekit.lab.text.encoders import TEXT_ENCODERS

    def one_of(reg) -> str:
        return " | ".join(reg.names())

    m = cfg.model
    out = [
        (cfg.loss.name in LOSSES, "loss.name", one_of(LOSSES)),
        (cfg.data.backbone in BACKBONES, "data.backbone", one_of(BACKBONES)),
        (cfg.data.format is None or cfg.data.format in SOURCES, "data.format", one_of(SOURCES)),
    ]
    if hasattr(m, "text"):
        out.append((m.text.kind in TEXT_ENCODERS, "model.text.kind", one_of(TEXT_ENCODERS)))
    if hasattr(m, "img_norm"):
        from vsekit.lab.models.joint import IMG_NORMS

        out.append((m.img_norm in IMG_NORMS, "model.img_norm", " | ".join(IMG_NORMS)))
    if hasattr(m, "similarity"):
        out.append((m.similarity in SIMILARITIES, "model.similarity", one_of(SIMILARITIES)))
    if cfg.loss.name in LOSSES:
        takes = loss_options(cfg.loss.name)
        for k in cfg.loss.options():
            out.append((k in takes, f"loss.{k}", f"unset: loss {cfg.loss.name} takes only "
                        f"{', '.join(sorted(takes)) or 'no options'}"))  # fmt: skip
    return out


def apply_overrides(cfg: ExperimentConfig, sets: list[str]) -> ExperimentConfig:
    """``["tags.scheme=compound", "loss.k_top=3"]`` -> a new, validated config. Values
    are read as YAML (``0.5``, ``true``, ``[1000]``); a wrong key or type names it."""
    d = cfg.to_dict()
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. train.lr=0.001")
        node, parts = d, key.split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                raise ConfigError(f"--set {key}: no section {p!r}")
            node = node[p]
        if parts[-1] not in node:
            raise ConfigError(f"--set {key}: unknown field {parts[-1]!r}")
        try:
            node[parts[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            first = str(e).splitlines()[0]
            raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({first})") from e
    out = from_dict(ExperimentConfig, d)
    validate(out, "--set")
    return out


def config_from_json(text: str) -> ExperimentConfig:
    """A config stored by a run (older runs' model sections are upgraded)."""
    d = json.loads(text)
    if isinstance(d.get("model"), dict):
        d["model"] = upgrade_model_section(d["model"])
    return from_dict(ExperimentConfig, d)
