"""Open-vocabulary tagging: rank any tags that have word vectors for an image."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from vsekit.lab.text.glove import tag_vectors


@torch.inference_mode()
def rank_vocabulary(
    model, features: np.ndarray, words: Sequence[str], k: int = 10
) -> tuple[list[tuple[str, float]], list[str]]:
    """``([(tag, score)] best first, tags without a vector)`` for one image's features."""
    uniq = list(dict.fromkeys(words))
    vecs, known = tag_vectors(uniq)
    names = [w for w, ok in zip(uniq, known, strict=True) if ok]
    unknown = [w for w, ok in zip(uniq, known, strict=True) if not ok]
    if not names:
        return [], unknown
    x = torch.as_tensor(np.asarray(features)[:1])
    ids = model.tag_ids(names) if getattr(model.cfg, "learn_tags", False) else None
    s = model.scores(x, torch.from_numpy(vecs[known]), ids)[0].cpu().numpy()
    order = np.lexsort((np.arange(len(s)), -s))[:k]
    return [(names[i], float(s[i])) for i in order], unknown
