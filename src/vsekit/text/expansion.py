"""Vocabulary expansion (Kiros, Salakhutdinov & Zemel 2014, the UVS paper, section 4.3):
a linear map from a large pretrained word space into the model's learned word-embedding
space, fitted on the words both know, gives vectors to words the captions never used.

With GloVe ``g(w)`` (50-d, 400k words) and the model's learned table ``E`` (one row per
training word), the map ``W`` (with a bias) minimises the ridge objective

    sum_w ||[g(w), 1] W - E[w]||^2 + ridge * ||W[:-1]||^2      (training words w)

(closed form: ``W = (X^T X + ridge I')^{-1} X^T Y``). A word outside the vocabulary that
GloVe knows then gets ``[g(w), 1] W``. The expansion only *appends* words: every
training word keeps its id and its learned vector, so what the model did before is
unchanged, and its identity (fingerprint) with it.

The fit is reported by the R^2 of the map on a seeded 10% of the shared words held out
of the fit. Needs the GloVe package of the ``[train]`` extra; the result is stored in the
model bundle (``expansion.txt`` + ``expansion.safetensors``), which needs no GloVe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from vsekit.text.vocab import Vocabulary

#: words that can be tokens of a query: lower-case letters, inner hyphens or apostrophes
_WORD = re.compile(r"^[a-z]+(?:[-'][a-z]+)*$")


@dataclass
class Expansion:
    words: list[str]  # the added words, in GloVe frequency order
    vectors: np.ndarray  # [N, d] their vectors in the model's word space
    info: dict  # method, fitted_on, r2_held_out, ridge, top


def fit_linear_map(x: np.ndarray, y: np.ndarray, ridge: float = 1e-2) -> np.ndarray:
    """``[in+1, out]``: least squares ``[x, 1] W ~ y`` with an L2 penalty on the weights
    (not the bias)."""
    xb = np.hstack([np.asarray(x, np.float64), np.ones((len(x), 1))])
    reg = ridge * np.eye(xb.shape[1])
    reg[-1, -1] = 0.0
    return np.linalg.solve(xb.T @ xb + reg, xb.T @ np.asarray(y, np.float64))


def apply_map(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, np.float64) @ w[:-1] + w[-1]).astype(np.float32)


def r2_score(pred: np.ndarray, y: np.ndarray) -> float:
    """Coefficient of determination over all output dimensions."""
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean(0)) ** 2).sum())
    return 1.0 - ss_res / max(ss_tot, 1e-12)


def expand_vocabulary(
    vocab: Vocabulary,
    table: np.ndarray,
    source_index: dict[str, int],
    source_vectors: np.ndarray,
    top: int = 100_000,
    ridge: float = 1e-2,
    seed: int = 0,
) -> Expansion:
    """Vectors for the ``top`` most frequent source words (GloVe rows are in frequency
    order) that are words, not in ``vocab``, mapped into ``table``'s space.

    ``table``: ``[len(vocab), d]`` the model's learned word vectors."""
    shared = [
        (i, source_index[w])
        for i, w in enumerate(vocab.itos)
        if w not in vocab.specials and w in source_index
    ]
    if len(shared) < 2 * source_vectors.shape[1]:
        raise ValueError(
            f"only {len(shared)} vocabulary words have source vectors; too few to fit a map"
        )
    ids, rows = (np.array(v) for v in zip(*shared, strict=True))
    x, y = np.asarray(source_vectors[rows], np.float32), np.asarray(table[ids], np.float32)
    held = np.random.default_rng(seed).random(len(ids)) < 0.1
    w_fit = fit_linear_map(x[~held], y[~held], ridge)
    r2 = r2_score(apply_map(w_fit, x[held]), y[held]) if held.any() else float("nan")
    w = fit_linear_map(x, y, ridge)  # the map used: fitted on every shared word
    by_row = sorted(source_index.items(), key=lambda kv: kv[1])
    new = [
        (word, row) for word, row in by_row[:top] if word not in vocab.stoi and _WORD.match(word)
    ]
    words = [word for word, _ in new]
    vectors = (
        apply_map(w, source_vectors[[row for _, row in new]])
        if new
        else np.zeros((0, table.shape[1]), np.float32)
    )
    info = {
        "method": "linear map from GloVe 6B 50-d (Kiros et al. 2014)",
        "fitted_on": int(len(ids)),
        "r2_held_out": round(r2, 4),
        "ridge": ridge,
        "top": top,
        "words": len(words),
    }
    return Expansion(words, vectors, info)
