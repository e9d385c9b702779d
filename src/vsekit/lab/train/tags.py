"""Loading a tag-ranking experiment: features from the FeatureStore, tags mined from the
captions (cached), aligned per split."""

from __future__ import annotations

from vsekit.lab.data import load_dataset
from vsekit.lab.tags.data import TagData
from vsekit.lab.tags.mining import mine_tags
from vsekit.lab.train.config import ExperimentConfig
from vsekit.lab.train.features import ensure_store, image_features, train_and_selection


def load_tag_data(cfg: ExperimentConfig, progress: bool = True) -> TagData:
    ds = load_dataset(cfg.data.root, cfg.data.format)
    store = ensure_store(cfg.data, ds, progress=progress)
    mined = mine_tags(ds, cfg.tags.scheme, cfg.tags.relevance, progress=progress)
    train, dev = train_and_selection(ds, cfg.data)
    tf = image_features(store, cfg.data.features, [im.id for im in train.images])
    df = image_features(store, cfg.data.features, [im.id for im in dev.images])
    names = [[t for t, _ in mined[im.id]] for im in train.images]
    dev_names = [[t for t, _ in mined[im.id]] for im in dev.images]
    data = TagData.build(tf, names, df, dev_names, store.fingerprint(), cfg.tags.max_tags)
    data.negatives = cfg.tags.negatives
    if cfg.loss.name == "tag_bce":  # a probability per tag: select on MiAP over all tags
        data.select = "miap"
    data.image_identity = store.identity()
    return data
