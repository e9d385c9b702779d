"""A backbone stage tuned with the joint model (``tune:`` in an experiment config).

VSE++ (Faghri et al., section 4) fine-tunes the whole CNN with the joint model; on a
2-core CPU only the last stage is affordable. With ``tune: {stage: layer4}`` a ResNet-50
run trains ``layer4`` (its pretrained weights as the start, batch-norm statistics frozen,
learning rate ``train.lr * tune.lr_scale``) and the model head together. The layers
below the stage run once per photo into a cache (:mod:`vsekit.lab.features.stage_cache`):

- training reads a random 14 x 14 window of each photo's 16 x 16 ``layer3`` map (the
  224-pixel crops of its 256 x 256 resize at 16-pixel steps) and, half the time, that
  window mirrored (close to, not equal to, a mirrored photo's map), a new draw every
  time the photo is shown;
- the selection and dev splits are scored on the two views an index embeds (the centre
  crop and its mirror), their pooled stage outputs averaged and L2-normalised, which is
  ``data.features: baseline`` computed through the tuned stage.

``tune.lr_scale: 0`` keeps the stage frozen and is the control: the same windows, the
same schedule, the pretrained stage, i.e. pool5 features with window augmentation.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vsekit.lab.data import Dataset, Vocabulary, load_dataset, tokenize
from vsekit.lab.eval.model_eval import evaluate_model
from vsekit.lab.features.backbones import Backbone, create_backbone
from vsekit.lab.features.stage_cache import StageCache, ensure_stage_cache, windows
from vsekit.lab.models.factory import create_model
from vsekit.lab.train import checkpoint as ckpt
from vsekit.lab.train.config import ExperimentConfig, TuneConfig
from vsekit.lab.train.features import train_and_selection
from vsekit.lab.train.retrieval_data import TrainData

#: the window side the stage trains on (224-pixel crops: a 14 x 14 layer3 map)
WINDOW = 14


class TunedStage(nn.Module):
    """A backbone stage and the pooling after it: ``[B, C, h, w]`` (or ``[B, V, C, h,
    w]``, the views averaged after pooling) -> ``[B, F]`` L2-normalised.

    Its batch-norm layers stay in eval mode (their running statistics are the
    pretrained ones; batches of 128 on a CPU are too small to re-estimate them), their
    scale and shift train. ``lr_scale`` (read by the optimizer's parameter groups) is
    the stage's learning rate relative to the head's; 0 freezes it and runs it without
    gradients."""

    def __init__(self, stage: nn.Module, lr_scale: float) -> None:
        super().__init__()
        self.stage = stage
        self.lr_scale = float(lr_scale)
        if self.lr_scale == 0:
            self.stage.requires_grad_(False)

    def train(self, mode: bool = True) -> TunedStage:
        super().train(mode)
        for m in self.stage.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        views = x.shape[1] if x.dim() == 5 else 0
        if views:
            x = x.flatten(0, 1)
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.lr_scale > 0):
            y = self.stage(x.float()).mean((2, 3))
        if views:
            y = y.view(-1, views, y.shape[-1]).mean(1)
        return F.normalize(y, dim=-1)


class TunedModel(nn.Module):
    """A joint model (``head``) whose image input is a tuned stage's: the model contract
    of :mod:`vsekit.lab.models.factory` with ``features`` the activations below the
    stage."""

    def __init__(self, head: nn.Module, stage: TunedStage) -> None:
        super().__init__()
        self.head, self.stage = head, stage
        self.cfg = head.cfg

    @property
    def embed_dim(self) -> int:
        return self.head.embed_dim

    @property
    def device(self) -> torch.device:
        return next(self.head.parameters()).device

    def encode_images(self, acts: torch.Tensor) -> torch.Tensor:
        return self.head.encode_images(self.stage(acts.to(self.device)))

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        return self.head.encode_texts(texts)

    def similarity(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        return self.head.similarity(img, txt)

    def training_outputs(self, acts: torch.Tensor, texts: list[str]):
        return self.head.training_outputs(self.stage(acts.to(self.device)), texts)


def stage_module(backbone: Backbone, stage: str) -> nn.Module:
    """A copy of ``backbone``'s ``stage`` (its pretrained weights)."""
    return copy.deepcopy(getattr(backbone.net, stage))


def tuned_model(
    img_dim: int, vocab: Vocabulary, model_cfg, tune: TuneConfig, backbone: Backbone
) -> TunedModel:
    """The head of ``model_cfg`` on a copy of ``backbone``'s tuned stage."""
    head = create_model(img_dim, vocab, model_cfg)
    return TunedModel(head, TunedStage(stage_module(backbone, tune.stage), tune.lr_scale))


class WindowRows:
    """The train split's rows as the Trainer indexes them: ``rows[ids]`` -> ``[B, C, 14,
    14]`` float32, a fresh random window (and mirror) of each photo's map per call."""

    def __init__(self, cache: StageCache, rows: np.ndarray, seed: int) -> None:
        self.cache, self.rows, self.seed = cache, rows, int(seed)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, ids) -> torch.Tensor:
        ids = np.asarray(ids, dtype=np.int64)
        r = self.rows[ids]
        order = np.argsort(r)  # memory-mapped reads in file order
        # the windows are drawn from the seed and the batch itself, so a resumed run
        # (whose batches the Trainer replays from its own saved state) draws the same ones
        rng = np.random.default_rng([self.seed, *ids.tolist()])
        out = windows(self.cache.acts[r[order]], WINDOW, rng)
        return out[np.argsort(order)]


class ViewRows:
    """The selection or dev split's rows: ``rows[a:b]`` -> ``[B, 2, C, 14, 14]``."""

    def __init__(self, cache: StageCache, rows: np.ndarray) -> None:
        self.cache, self.rows = cache, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, sl: slice) -> np.ndarray:
        r = self.rows[sl]
        return np.asarray(self.cache.acts[np.sort(r)], dtype=np.float32)[np.argsort(np.argsort(r))]


@dataclass
class TunedData(TrainData):
    """:class:`TrainData` whose image rows are the activations below the tuned stage."""

    backbone: Backbone | None = None
    tune: TuneConfig | None = None
    stage_dim: int = 2048
    dev_split: Dataset | None = None  # dev, for the report (selection is the carved slice)
    dev_rows: ViewRows | None = None

    def evaluate_dev(self, model) -> dict[str, float]:
        """Retrieval metrics on the dev split (a report; the run selects on its own
        selection split)."""
        assert self.dev_split is not None and self.dev_rows is not None
        return evaluate_model(
            model, self.dev_rows, self.dev_split.texts, self.dev_split.caption_to_image
        )

    @property
    def img_dim(self) -> int:  # the head's input: the stage's pooled output
        return self.stage_dim

    def new_model(self, cfg) -> torch.nn.Module:
        assert self.backbone is not None and self.tune is not None
        model = tuned_model(self.stage_dim, self.vocab, cfg, self.tune, self.backbone)
        if self.tune.init_from:
            run = Path(os.path.expanduser(self.tune.init_from))
            ckpt.load_model_weights(model, ckpt.load_pointer(run, "best"))
        return model


def photo_list(ds: Dataset) -> list[tuple[str, Path]]:
    return [(im.id, im.path) for im in ds.images]


def load_tuned_data(
    cfg: ExperimentConfig, vocab: Vocabulary | None = None, progress: bool = True
) -> TunedData:
    """The caches (made if missing: every train photo's map, and the two views of the
    selection and dev photos) and the split rows of a ``tune:`` run."""
    assert cfg.tune is not None
    ds = load_dataset(cfg.data.root, cfg.data.format)
    backbone = create_backbone(cfg.data.backbone, cfg.data.weights)
    train, sel = train_and_selection(ds, cfg.data)
    all_train, dev = ds.split(cfg.data.train_split), ds.split(cfg.data.dev_split)
    scored = {im.id: im.path for im in [*sel.images, *dev.images]}  # selection, then dev
    maps = ensure_stage_cache(
        cfg.tune.cache, photo_list(all_train), backbone, cfg.tune.stage, "train", progress=progress
    )
    views = ensure_stage_cache(
        cfg.tune.cache, list(scored.items()), backbone, cfg.tune.stage, "eval", progress=progress
    )
    if vocab is None and cfg.tune.init_from:  # the start's words, in the start's order
        vocab = Vocabulary.load(Path(os.path.expanduser(cfg.tune.init_from)) / "vocab.json")
    if vocab is None:
        words = (tokenize(c.text) for c in train.captions)
        vocab = Vocabulary.build(words, min_count=cfg.data.vocab_min_count)
    ids = [im.id for im in train.images]
    return TunedData(
        train_feats=WindowRows(maps, maps.rows_for(ids), cfg.train.seed),
        train_texts=train.texts,
        train_c2i=train.caption_to_image,
        dev_feats=ViewRows(views, views.rows_for([im.id for im in sel.images])),
        dev_texts=sel.texts,
        dev_c2i=sel.caption_to_image,
        vocab=vocab,
        store_fingerprint=f"{maps.path.name}+{views.path.name}",
        image_identity={
            "backbone": backbone.name,
            "weights_sha256": backbone.weights_sha256,
            "tuned_stage": cfg.tune.stage,
            "preprocessing": backbone.preprocessing(2),
        },
        backbone=backbone,
        tune=cfg.tune,
        dev_split=dev,
        dev_rows=ViewRows(views, views.rows_for([im.id for im in dev.images])),
    )
