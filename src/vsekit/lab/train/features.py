"""The image side of a training run: make sure the FeatureStore exists, then read the
chosen representation for a list of image ids."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vsekit.lab.data import Dataset
from vsekit.lab.features.audio_store import add_audio
from vsekit.lab.features.backbones import create_backbone
from vsekit.lab.features.extract import ExtractItem, extract_to_store
from vsekit.lab.features.fne_variant import FNEVariant
from vsekit.lab.features.store import FeatureStore, StoreError
from vsekit.lab.train.config import DataConfig
from vsekit.media.video import Sampling
from vsekit.runtime.kinds import features_of_kind

AUDIO_SUFFIX = "+audio"


def is_fne(kind: str) -> bool:
    """Whether ``kind`` (audio suffix aside) is the FNE or a variant of it."""
    k = kind.removesuffix(AUDIO_SUFFIX)
    return k == "fne" or k.startswith("fne[")


def ensure_store(cfg: DataConfig, ds: Dataset, progress: bool = True) -> FeatureStore:
    """Open ``cfg.store``; extract it from ``ds`` first if it does not exist or is
    unfinished (resuming), and fit the FNE on the train split if it is needed and missing."""
    path = Path(cfg.store).expanduser()
    meta_ok = (path / "meta.json").is_file()
    store = None
    if meta_ok:
        try:
            store = FeatureStore(path)
        except StoreError:
            store = None  # unfinished: resume below
    if store is None:
        if any(im.path is None for im in ds.images):
            raise StoreError(f"{path}: no features, and {ds.name} has no image files")
        model = create_backbone(cfg.backbone, weights=cfg.weights)
        items = [ExtractItem(im.id, im.path, im.split) for im in ds.images]
        store = extract_to_store(
            items,
            path,
            model,
            crops=cfg.crops,
            dataset=ds.name,
            progress=progress,
            sampling=sampling_of(cfg),
        )
    if cfg.features.endswith(AUDIO_SUFFIX) and "audio" not in store.meta:
        paths = {im.id: im.path for im in ds.images}
        add_audio(store, paths, cfg.train_split, cfg.audio_k, progress=progress)
    if is_fne(cfg.features):
        fne = store.meta.get("fne")
        if fne is None:
            store.fit_fne(cfg.train_split)
        elif fne["fit_split"] != cfg.train_split:
            raise StoreError(
                f"{path}: FNE statistics were fitted on split {fne['fit_split']!r}, "
                f"not {cfg.train_split!r}; rerun `vse features fne --fit-split {cfg.train_split}`"
            )
    return store


def sampling_of(cfg: DataConfig) -> Sampling:
    """How video frames are sampled for this config's store."""
    return Sampling(every=cfg.video_every, n=cfg.video_frames)


def train_and_selection(ds: Dataset, cfg: DataConfig) -> tuple[Dataset, Dataset]:
    """``(train, selection)``: the split a run trains on and the one that picks its
    epochs. With ``val_from_train`` the selection split is that many train images carved
    out (seeded by ``val_seed``), so dev is never looked at; else it is ``dev_split``."""
    if not cfg.val_from_train:
        return ds.split(cfg.train_split), ds.split(cfg.dev_split)
    ds = ds.carve(cfg.train_split, cfg.val_from_train, "train-val", cfg.val_seed)
    return ds.split(cfg.train_split), ds.split("train-val")


def image_features(store: FeatureStore, kind: str, ids: list[str]) -> np.ndarray:
    """``[len(ids), F]`` rows for the given image ids: ``fne`` (int8), ``baseline``
    (L2-normalised one-layer), ``baseline_raw`` (the same, not normalised), ``rmac``,
    ``pooled`` (every layer, raw) or an :class:`FNEVariant` ``fne[...]``. ``KIND+audio``
    appends a video's bag-of-MFCC histogram (the visual-audio vector of Word2VisualVec
    section 3.4), as float32."""
    if kind.endswith(AUDIO_SUFFIX):
        visual = image_features(store, kind[: -len(AUDIO_SUFFIX)], ids)
        audio = np.asarray(store.audio[store.rows_for(ids)])
        return np.concatenate([visual.astype(np.float32), audio], axis=1)
    rows = store.rows_for(ids)
    if kind == "fne":  # computed by features_of_kind when the FNE was fitted
        return np.asarray(store.fne[rows])
    if kind.startswith("fne["):
        return FNEVariant.parse(kind).features(store, rows)
    if kind == "rmac":
        return np.asarray(store.rmac[rows])
    sl = store.layer_slices()[store.meta["baseline_layer"]]
    return features_of_kind(np.asarray(store.pooled[rows]), kind, sl)
