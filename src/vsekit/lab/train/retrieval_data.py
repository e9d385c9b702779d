"""The retrieval task's training data: image features and captions, aligned, with the
task interface the :class:`~vsekit.lab.train.trainer.Trainer` calls (epoch batches, the
batch loss, dev evaluation). :mod:`vsekit.lab.train.tuned` extends it for a tuned
backbone stage, :mod:`vsekit.lab.train.tags` implements the same interface for tags."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vsekit.lab.data import Dataset, Vocabulary, load_dataset, tokenize
from vsekit.lab.eval.model_eval import evaluate_model
from vsekit.lab.losses import create_loss
from vsekit.lab.models.task import FeatureTask
from vsekit.lab.train.config import ExperimentConfig
from vsekit.lab.train.distributed import SINGLE, Dist, global_loss, shard
from vsekit.lab.train.features import ensure_store, image_features, train_and_selection


@dataclass
class TrainData(FeatureTask):
    """Everything a training run reads, already aligned: row k of ``*_feats`` is image k."""

    train_feats: torch.Tensor  # (N_train, F), int8 (FNE) or float32
    train_texts: list[str]
    train_c2i: np.ndarray  # (M_train,)
    dev_feats: torch.Tensor
    dev_texts: list[str]
    dev_c2i: np.ndarray
    vocab: Vocabulary
    store_fingerprint: str = ""
    image_identity: dict | None = None  # backbone, weights sha256, preprocessing

    # -- the task interface the Trainer uses (tag ranking implements the same) --------
    select = "rsum"  # dev metric that picks the best checkpoint
    collapse_metric = "rsum"  # the paper's "has not started learning" criterion uses it

    def epoch_batches(self, mode: str, batch_size: int, rng: np.random.Generator):
        """Index batches of one epoch: ``[B, 2]`` (image, caption) rows."""
        pairs = epoch_pairs(self.train_c2i, len(self.train_feats), mode, rng)
        return [pairs[a : a + batch_size] for a in range(0, len(pairs), batch_size)]

    #: the task can train on several processes (global-batch negatives)
    distributed = True

    def batch_loss(
        self, model, loss_fn, b: np.ndarray, d: Dist = SINGLE, forward=None
    ) -> torch.Tensor:
        """The loss of the global batch ``b`` (``[B, 2]`` rows). On ``d.world``
        processes this rank embeds its shard (through ``forward``, the DDP wrapper) and
        the loss compares it with every rank's (:mod:`vsekit.lab.train.distributed`);
        rows that share an image are never each other's negatives."""
        part = b[shard(len(b), d)]
        ids = torch.from_numpy(part[:, 0])
        img, txt = (forward or model.training_outputs)(
            self.train_feats[ids], [self.train_texts[j] for j in part[:, 1]]
        )
        return global_loss(loss_fn, img, txt, ids, d)

    def evaluate(self, model, batch: int = 1024) -> dict[str, float]:
        return evaluate_model(model, self.dev_feats, self.dev_texts, self.dev_c2i, batch=batch)

    @staticmethod
    def summary(row: dict) -> str:
        return (
            f"dev rsum {row['rsum']:.1f}  (i2t R@1 {row['i2t_r1']:.1f}, "
            f"t2i R@1 {row['t2i_r1']:.1f})"
        )

    def closed_form(self, model, batches, ridge: float) -> float:
        """Ridge regression on every pair of the epoch in one solve; returns train MSE."""
        model.eval()
        pairs = np.concatenate(batches) if batches else np.zeros((0, 2), np.int64)

        def chunks(bs: int = 4096):
            for a in range(0, len(pairs), bs):
                b = pairs[a : a + bs]
                yield (
                    self.train_feats[torch.from_numpy(b[:, 0])].float(),
                    [self.train_texts[j] for j in b[:, 1]],
                )

        model.fit_closed_form(chunks(), ridge)
        loss_fn, total = create_loss("mse"), 0.0
        with torch.no_grad():
            for f, tx in chunks():
                total += float(loss_fn(*model.training_outputs(f, tx))) * len(tx)
        return total / max(len(pairs), 1)

    @classmethod
    def from_datasets(
        cls,
        train: Dataset,
        dev: Dataset,
        train_feats,
        dev_feats,
        vocab: Vocabulary | None = None,
        min_count: int = 1,
        fingerprint: str = "",
    ) -> TrainData:
        if vocab is None:
            vocab = Vocabulary.build(
                (tokenize(c.text) for c in train.captions), min_count=min_count
            )
        return cls(
            torch.as_tensor(np.asarray(train_feats)),
            train.texts,
            train.caption_to_image,
            torch.as_tensor(np.asarray(dev_feats)),
            dev.texts,
            dev.caption_to_image,
            vocab,
            fingerprint,
        )


def load_train_data(
    cfg: ExperimentConfig, vocab: Vocabulary | None = None, progress: bool = True
) -> TrainData:
    ds = load_dataset(cfg.data.root, cfg.data.format)
    store = ensure_store(cfg.data, ds, progress=progress)
    train, dev = train_and_selection(ds, cfg.data)
    if cfg.data.hold_out_words:  # never read: not in the vocabulary, not in any batch
        train = train.without_words(cfg.data.hold_out_words)
        if cfg.data.val_from_train:
            dev = dev.without_words(cfg.data.hold_out_words)
    tf = image_features(store, cfg.data.features, [im.id for im in train.images])
    df = image_features(store, cfg.data.features, [im.id for im in dev.images])
    data = TrainData.from_datasets(
        train, dev, tf, df, vocab, cfg.data.vocab_min_count, store.fingerprint()
    )
    data.image_identity = store.identity()
    return data


def epoch_pairs(c2i: np.ndarray, n_images: int, mode: str, rng: np.random.Generator) -> np.ndarray:
    """``[P, 2]`` (image, caption) pairs of one epoch, shuffled. ``one``: each image once
    with a random caption of its own; ``all``: every caption once."""
    if mode == "all":
        pairs = np.stack([c2i, np.arange(len(c2i))], axis=1)
    else:
        order = np.argsort(c2i, kind="stable")
        counts = np.bincount(c2i, minlength=n_images)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        has = np.flatnonzero(counts)
        pick = starts[has] + (rng.random(len(has)) * counts[has]).astype(np.int64)
        pairs = np.stack([has, order[pick]], axis=1)
    return pairs[rng.permutation(len(pairs))]
