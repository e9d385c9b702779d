"""Tag ranking as a task of the shared trainer: image features, ranked tag lists, word
vectors, and the dev evaluation (precision@1/5 with no distractors, selected on p@1)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from vsekit.lab.models.task import FeatureTask
from vsekit.lab.tags.metrics import map_and_miap, precision_at_k, sample_distractors
from vsekit.lab.text.glove import tag_vectors
from vsekit.text.vocab import Vocabulary

PAD = 0


@dataclass
class TagData(FeatureTask):
    """Tag ids index ``tags``; id 0 is padding. ``*_lists[n]``: image n's tags, best first."""

    def new_model(self, cfg) -> torch.nn.Module:
        if getattr(cfg, "word_dim", None) != self.vectors.shape[1]:
            raise ValueError(
                f"model.word_dim: {getattr(cfg, 'word_dim', None)}, but the tag word vectors "
                f"are {self.vectors.shape[1]}-d (GloVe 6B-50d)"
            )
        return super().new_model(cfg)

    train_feats: torch.Tensor
    train_lists: list[np.ndarray]
    dev_feats: torch.Tensor
    dev_lists: list[np.ndarray]
    tags: list[str]  # tags[0] = "<pad>"
    vectors: torch.Tensor  # [T, D]
    vocab: Vocabulary  # the training tags with their counts (the default inference vocab)
    store_fingerprint: str = ""
    image_identity: dict | None = None  # backbone, weights sha256, preprocessing
    max_tags: int = 0  # keep at most this many tags per image (0: all)
    eval_k: tuple[int, ...] = field(default=(1, 5))
    negatives: int = 0  # tags of other images appended to each training list (see config)

    select = "p1"
    collapse_metric = None

    @classmethod
    def build(
        cls,
        train_feats,
        train_tags: list[list[str]],
        dev_feats,
        dev_tags: list[list[str]],
        fingerprint: str = "",
        max_tags: int = 0,
    ) -> TagData:
        """From per-image ranked tag names; tags without a word vector are dropped."""
        names = sorted({t for lst in train_tags + dev_tags for t in lst})
        vecs, known = tag_vectors(names)
        keep = [n for n, k in zip(names, known, strict=True) if k]
        tags = ["<pad>", *keep]
        ids = {t: i for i, t in enumerate(tags)}
        vec = np.concatenate([np.zeros((1, vecs.shape[1]), np.float32), vecs[known]])

        def lists(rows):
            out = []
            for lst in rows:
                a = [ids[t] for t in lst if t in ids]
                out.append(np.asarray(a[:max_tags] if max_tags else a, np.int64))
            return out

        counts = Counter(t for lst in train_tags for t in lst if t in ids)
        vocab = Vocabulary(sorted(counts, key=lambda t: (-counts[t], t)), (), dict(counts))
        return cls(
            torch.as_tensor(np.asarray(train_feats)),
            lists(train_tags),
            torch.as_tensor(np.asarray(dev_feats)),
            lists(dev_tags),
            tags,
            torch.from_numpy(vec),
            vocab,
            fingerprint,
            max_tags,
        )

    # -- the trainer's task interface ------------------------------------------------
    def epoch_batches(self, mode: str, batch_size: int, rng: np.random.Generator):
        order = rng.permutation(len(self.train_lists))
        return [order[a : a + batch_size] for a in range(0, len(order), batch_size)]

    def padded(self, lists: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        n = max((len(x) for x in lists), default=0)
        ids = torch.full((len(lists), max(n, 1)), PAD, dtype=torch.long)
        for r, x in enumerate(lists):
            ids[r, : len(x)] = torch.from_numpy(x)
        return ids, ids != PAD

    def model_ids(self, model) -> torch.Tensor | None:
        """``[T]`` the model's rows for ``tags`` (-1: unseen), for taggers with learned
        tags; None for the paper's ranker."""
        if not getattr(getattr(model, "cfg", None), "learn_tags", False):
            return None
        return model.tag_ids(self.tags)

    def batch_loss(self, model, loss_fn, b: np.ndarray) -> torch.Tensor:
        feats = self.train_feats[torch.from_numpy(np.asarray(b))]
        mids = self.model_ids(model)
        if getattr(loss_fn, "all_tags", False):  # every training tag, absent ones as 0
            if mids is None:
                raise ValueError("loss tag_bce: needs model.learn_tags: true")
            cols = torch.nonzero(mids >= 0).squeeze(1)
            where = torch.full((len(self.tags),), -1, dtype=torch.long)
            where[cols] = torch.arange(len(cols))
            targets = torch.zeros(len(b), len(cols), dtype=torch.bool)
            for r, j in enumerate(b):
                t = where[torch.from_numpy(self.train_lists[j])]
                targets[r, t[t >= 0]] = True
            scores = model.scores(feats, self.vectors[cols], mids[cols])
            return loss_fn(scores, targets.to(model.device))
        lists = [self.train_lists[j] for j in b]
        if self.negatives:
            # seeded by the batch itself, so a resumed run draws the same negatives
            rng = np.random.default_rng([int(x) for x in b])
            neg = sample_distractors(lists, len(self.tags), self.negatives, rng, exclude=(PAD,))
            lists = [np.concatenate([x, n]) for x, n in zip(lists, neg, strict=True)]
        ids, mask = self.padded(lists)
        scores = model.score_lists(
            feats, self.vectors[ids].to(model.device), None if mids is None else mids[ids]
        )
        return loss_fn(scores, mask.to(model.device))

    @torch.inference_mode()
    def evaluate(self, model, batch: int = 1024, distractors: int = 0, seed: int = 0) -> dict:
        """p@k of the dev images' own tags (+ ``distractors`` per image), and the random
        ranker's; keys ``p1``, ``p5``, ``random_p1``, ``random_p5``."""
        was = model.training
        model.eval()
        rng = np.random.default_rng(seed)
        extra = (
            sample_distractors(self.dev_lists, len(self.tags), distractors, rng, exclude=(PAD,))
            if distractors
            else [np.zeros(0, np.int64)] * len(self.dev_lists)
        )
        pools = [np.concatenate([own, e]) for own, e in zip(self.dev_lists, extra, strict=True)]
        scores = []
        mids = self.model_ids(model)
        for a in range(0, len(pools), batch):
            ids, _ = self.padded(pools[a : a + batch])
            s = model.score_lists(
                self.dev_feats[a : a + batch],
                self.vectors[ids].to(model.device),
                None if mids is None else mids[ids],
            )
            scores += [s[r, : len(p)].cpu().numpy() for r, p in enumerate(pools[a : a + batch])]
        out = {}
        for k in self.eval_k:
            p, r = precision_at_k(scores, [len(x) for x in self.dev_lists], k)
            out[f"p{k}"], out[f"random_p{k}"] = 100 * p, 100 * r
        if self.select == "miap":
            s, rel = self.vocab_scores(model)
            out["map"], out["miap"] = (100 * x for x in map_and_miap(s, rel))
        model.train(was)
        return out

    @torch.inference_mode()
    def vocab_scores(
        self, model, min_count: int = 5, model_tags_only: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``([N dev, V] scores, [N, V] relevant)`` of the dev images against the
        training tags seen ``min_count`` times or more (the MAP/MiAP vocabulary);
        ``model_tags_only``: of those, the tags the model itself trained on (what a
        shipped tagger ranks)."""
        counts = self.vocab.counts
        vocab_ids = [i for i, t in enumerate(self.tags) if counts.get(t, 0) >= min_count]
        mids = self.model_ids(model)
        if model_tags_only:
            own = set(model.vocab.itos)
            vocab_ids = [i for i in vocab_ids if self.tags[i] in own]
        ids = None if mids is None else mids[vocab_ids]
        vecs = self.vectors[vocab_ids]
        scores = torch.cat(
            [model.scores(self.dev_feats[a : a + 1024], vecs, ids)
             for a in range(0, len(self.dev_feats), 1024)]
        ).cpu().numpy()  # fmt: skip
        col = {t: j for j, t in enumerate(vocab_ids)}
        rel = np.zeros(scores.shape, bool)
        for r, lst in enumerate(self.dev_lists):
            for t in lst:
                if int(t) in col:
                    rel[r, col[int(t)]] = True
        return scores, rel

    def summary(self, row: dict) -> str:
        if "miap" in row:
            return f"dev MiAP {row['miap']:.1f}  MAP {row['map']:.1f}  p@1 {row['p1']:.1f}"
        return f"dev p@1 {row['p1']:.1f}  p@5 {row['p5']:.1f}  (random {row['random_p1']:.1f})"

    def closed_form(self, model, batches, ridge: float) -> float:
        raise ValueError("train.optimizer: closed_form is for linear regression models only")
