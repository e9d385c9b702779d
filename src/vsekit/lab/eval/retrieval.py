"""Bidirectional retrieval metrics: R@K, median and mean rank, rsum.

Pure functions of a similarity matrix ``sims[n_images, n_captions]`` (higher is more
similar) and ``caption_to_image[n_captions]``. Nothing is printed or written.

Definitions (the standard ones of Karpathy & Fei-Fei, VSE++ and the FNE journal paper):

* Image annotation (i2t): for image ``i``, the rank of its best-ranked correct caption.
* Image retrieval (t2i): for caption ``j``, the rank of its image.
* R@K: percentage of queries whose rank is <= K. rsum: the sum of the six recalls.

Ranks are 1-based. Ties are broken pessimistically: an incorrect item scoring *equal* to
the best correct item is ranked above it, so a degenerate model with constant scores gets
the worst rank, never a perfect one::

    rank_i2t(i) = 1 + #{j : c2i[j] != i and sims[i, j] >= max_{j': c2i[j'] = i} sims[i, j']}
    rank_t2i(j) = 1 + #{i : i != c2i[j] and sims[i, j] >= sims[c2i[j], j]}

The computation is chunked over queries, so a 5,000 x 25,000 problem needs only a few
tens of MB besides the input, and the input may be a memory-map or produced block by
block from embeddings (:func:`retrieval_metrics_from_embeddings`) without ever forming
the full matrix.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

KS = (1, 5, 10)
METRIC_KEYS = (
    "i2t_r1",
    "i2t_r5",
    "i2t_r10",
    "i2t_medr",
    "i2t_meanr",
    "t2i_r1",
    "t2i_r5",
    "t2i_r10",
    "t2i_medr",
    "t2i_meanr",
    "rsum",
)
PROTOCOLS = ("full", "1k5fold", "5k")

# A callable giving row blocks of the similarity matrix: rows(i0, i1) -> [i1-i0, n_captions]
# (a torch tensor). Both directions are computed from row blocks: row-major access is
# cache-friendly for a C-ordered matrix or a memmap, and from embeddings it is one matmul.
RowBlock = Callable[[int, int], torch.Tensor]


def _as_index(caption_to_image, n_images: int, n_captions: int) -> torch.Tensor:
    c2i = torch.as_tensor(np.asarray(caption_to_image), dtype=torch.long)
    if c2i.ndim != 1 or len(c2i) != n_captions:
        raise ValueError(f"caption_to_image has shape {tuple(c2i.shape)}, expected ({n_captions},)")
    if n_captions and (int(c2i.min()) < 0 or int(c2i.max()) >= n_images):
        raise ValueError(f"caption_to_image has indices outside [0, {n_images})")
    if len(torch.unique(c2i)) != n_images:
        raise ValueError("every image needs at least one caption for i2t metrics")
    return c2i


def ranks_from_rows(
    rows: RowBlock,
    c2i: torch.Tensor,
    n_images: int,
    own: torch.Tensor | None = None,
    chunk: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """``(i2t_ranks[n_images], t2i_ranks[n_captions])``, 1-based, from row blocks.

    ``own[j]`` is caption ``j``'s score with its own image, ``sims[c2i[j], j]``; if not
    given it is gathered in a first pass over the rows. With ``best[i]``, the highest
    ``own`` among image ``i``'s captions, one pass then counts both directions::

        i2t(i) = 1 + #{j : s[i, j] >= best[i]} - #{j : c2i[j] = i, own[j] >= best[i]}
        t2i(j) = #{i : s[i, j] >= own[j]}            (the own image is counted once)
    """
    n_captions = len(c2i)
    if own is None:
        own = torch.empty(n_captions)
        cols = torch.arange(n_captions)
        for a in range(0, n_images, chunk):
            b = min(a + chunk, n_images)
            mine = (c2i >= a) & (c2i < b)
            own[mine] = rows(a, b)[c2i[mine] - a, cols[mine]]
    best = torch.full((n_images,), float("-inf")).scatter_reduce(0, c2i, own, "amax")
    correct_ge = torch.bincount(c2i, weights=(own >= best[c2i]).double(), minlength=n_images)
    i2t = torch.empty(n_images, dtype=torch.long)
    t2i = torch.zeros(n_captions, dtype=torch.long)
    for a in range(0, n_images, chunk):
        b = min(a + chunk, n_images)
        s = rows(a, b)  # (B, C)
        i2t[a:b] = (s >= best[a:b, None]).sum(dim=1)
        t2i += (s >= own).sum(dim=0)
    i2t = i2t + 1 - correct_ge.long()
    return i2t.numpy(), t2i.numpy()


def _summary(ranks: np.ndarray, prefix: str) -> dict[str, float]:
    out = {f"{prefix}_r{k}": 100.0 * float(np.mean(ranks <= k)) for k in KS}
    # VSE++ convention: floor of the median (of an even count of ranks).
    out[f"{prefix}_medr"] = float(np.floor(np.median(ranks)))
    out[f"{prefix}_meanr"] = float(np.mean(ranks))
    return out


def metrics_from_ranks(i2t: np.ndarray, t2i: np.ndarray) -> dict[str, float]:
    """The metric dict (keys :data:`METRIC_KEYS`) from per-query ranks."""
    out = {**_summary(i2t, "i2t"), **_summary(t2i, "t2i")}
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in KS)
    return out


def _matrix_rows(sims) -> tuple[RowBlock, int, int]:
    if len(sims.shape) != 2:
        raise ValueError(f"sims must be 2-D [n_images, n_captions], got shape {sims.shape}")
    if isinstance(sims, torch.Tensor):
        t = sims.detach()

        def rows(a: int, b: int) -> torch.Tensor:
            return t[a:b].float().cpu()
    else:
        arr = sims if isinstance(sims, np.memmap) else np.asarray(sims)

        def rows(a: int, b: int) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(arr[a:b], dtype=np.float32))

    return rows, int(sims.shape[0]), int(sims.shape[1])


def retrieval_ranks(sims, caption_to_image) -> tuple[np.ndarray, np.ndarray]:
    """``(i2t_ranks[n_images], t2i_ranks[n_captions])``, 1-based, pessimistic on ties."""
    rows, n_img, n_cap = _matrix_rows(sims)
    c2i = _as_index(caption_to_image, n_img, n_cap)
    return ranks_from_rows(rows, c2i, n_img)


def retrieval_metrics(sims, caption_to_image) -> dict[str, float]:
    """R@1/5/10, median and mean rank in both directions, and rsum.

    Args:
        sims: ``[n_images, n_captions]`` similarities (NumPy array, memmap or tensor).
        caption_to_image: ``[n_captions]`` index of each caption's image.

    Returns:
        A dict with the keys :data:`METRIC_KEYS`; recalls in percent, ranks 1-based.
    """
    rows, n_img, n_cap = _matrix_rows(sims)
    c2i = _as_index(caption_to_image, n_img, n_cap)
    if isinstance(sims, torch.Tensor):
        own = sims.detach()[c2i.to(sims.device), torch.arange(n_cap, device=sims.device)]
        own = own.float().cpu()
    else:
        own = torch.from_numpy(np.asarray(sims[c2i.numpy(), np.arange(n_cap)], np.float32))
    return metrics_from_ranks(*ranks_from_rows(rows, c2i, n_img, own))


@torch.inference_mode()
def retrieval_metrics_from_embeddings(
    img_emb: torch.Tensor,
    txt_emb: torch.Tensor,
    caption_to_image,
    similarity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, float]:
    """As :func:`retrieval_metrics`, from ``[N, D]`` image and ``[M, D]`` caption
    embeddings, never materialising the ``[N, M]`` matrix.

    ``similarity(a[n, D], b[m, D]) -> [n, m]``; default is the dot product.
    """
    sim = similarity or (lambda im, tx: im @ tx.T)

    def rows(a: int, b: int) -> torch.Tensor:
        return sim(img_emb[a:b], txt_emb).float().cpu()

    n_img = len(img_emb)
    c2i = _as_index(caption_to_image, n_img, len(txt_emb))
    return metrics_from_ranks(*ranks_from_rows(rows, c2i, n_img))


def fold_indices(
    caption_to_image, n_images: int, protocol: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(image_indices, caption_indices)`` of each evaluation fold.

    * ``full``: all images.
    * ``1k5fold``: COCO 1K, five folds of 1,000 consecutive images (needs >= 5,000).
    * ``5k``: COCO 5K, the first 5,000 images.
    """
    c2i = np.asarray(caption_to_image)
    if protocol == "full":
        bounds = [(0, n_images)]
    elif protocol == "1k5fold":
        if n_images < 5000:
            raise ValueError(f"protocol 1k5fold needs 5,000 images, this split has {n_images}")
        bounds = [(k * 1000, (k + 1) * 1000) for k in range(5)]
    elif protocol == "5k":
        if n_images < 5000:
            raise ValueError(f"protocol 5k needs 5,000 images, this split has {n_images}")
        bounds = [(0, 5000)]
    else:
        raise ValueError(f"unknown protocol {protocol!r}; choose from {', '.join(PROTOCOLS)}")
    return [(np.arange(a, b), np.flatnonzero((c2i >= a) & (c2i < b))) for a, b in bounds]


def evaluate_protocol(sims, caption_to_image, protocol: str = "full") -> dict[str, float]:
    """:func:`retrieval_metrics` under a protocol; fold metrics are averaged (as VSE++
    reports COCO 1K, ranks included)."""
    n_img = int(sims.shape[0])
    c2i = np.asarray(caption_to_image)
    results = []
    for imgs, caps in fold_indices(c2i, n_img, protocol):
        if len(imgs) == n_img and len(caps) == len(c2i):
            sub = sims
        elif len(caps) and caps[-1] - caps[0] + 1 == len(caps):  # contiguous: a view
            sub = sims[imgs[0] : imgs[-1] + 1, caps[0] : caps[-1] + 1]
        else:
            sub = sims[imgs[0] : imgs[-1] + 1][:, caps]
        results.append(retrieval_metrics(sub, c2i[caps] - imgs[0]))
    return {k: float(np.mean([r[k] for r in results])) for k in METRIC_KEYS}
