"""Full evaluation of a tag ranker on a split: tag predictability with 0/5/10/20
distractors (and the random ranker), and MAP/MiAP over the training tag vocabulary."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .data import TagData
from .metrics import map_and_miap


@torch.inference_mode()
def evaluate_tags(
    model,
    data: TagData,
    distractors: Sequence[int] = (0, 5, 10, 20),
    min_count: int = 5,
    seed: int = 0,
) -> dict:
    """``{"predictability": {d: {p1, p5, random_p1, random_p5}}, "map", "miap",
    "vocab_tags"}``, percentages. The MAP/MiAP vocabulary is the training tags seen
    ``min_count`` times or more; an image's relevant tags are its mined ones."""
    pred = {str(d): data.evaluate(model, distractors=d, seed=seed) for d in distractors}
    counts = data.vocab.counts
    vocab_ids = [i for i, t in enumerate(data.tags) if counts.get(t, 0) >= min_count]
    vecs = data.vectors[vocab_ids]
    scores = (
        torch.cat(
            [
                model.scores(data.dev_feats[a : a + 1024], vecs)
                for a in range(0, len(data.dev_feats), 1024)
            ]
        )
        .cpu()
        .numpy()
    )
    col = {t: j for j, t in enumerate(vocab_ids)}
    rel = np.zeros_like(scores, dtype=bool)
    for r, lst in enumerate(data.dev_lists):
        for t in lst:
            if int(t) in col:
                rel[r, col[int(t)]] = True
    m, mi = map_and_miap(scores, rel)
    return {"predictability": pred, "map": 100 * m, "miap": 100 * mi, "vocab_tags": len(vocab_ids)}
