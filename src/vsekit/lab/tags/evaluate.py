"""Full evaluation of a tag ranker on a split: tag predictability with 0/5/10/20
distractors (and the random ranker), and MAP/MiAP over the training tag vocabulary."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vsekit.lab.tags.data import TagData
from vsekit.lab.tags.metrics import map_and_miap


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
    scores, rel = data.vocab_scores(model, min_count)
    m, mi = map_and_miap(scores, rel)
    return {"predictability": pred, "map": 100 * m, "miap": 100 * mi, "vocab_tags": rel.shape[1]}
