from __future__ import annotations

import numpy as np
import pytest
import torch

from vsekit.lab.eval import (
    METRIC_KEYS,
    evaluate_protocol,
    retrieval_metrics,
    retrieval_metrics_from_embeddings,
)


def naive_metrics(sims: np.ndarray, c2i: np.ndarray) -> dict[str, float]:
    """Per-query loops straight from the definition (pessimistic ties)."""
    n_img, n_cap = sims.shape
    i2t = []
    for i in range(n_img):
        correct = [j for j in range(n_cap) if c2i[j] == i]
        best = max(sims[i, j] for j in correct)
        i2t.append(1 + sum(1 for j in range(n_cap) if c2i[j] != i and sims[i, j] >= best))
    t2i = []
    for j in range(n_cap):
        own = sims[c2i[j], j]
        t2i.append(1 + sum(1 for i in range(n_img) if i != c2i[j] and sims[i, j] >= own))
    out = {}
    for name, ranks in (("i2t", np.array(i2t)), ("t2i", np.array(t2i))):
        for k in (1, 5, 10):
            out[f"{name}_r{k}"] = 100.0 * np.mean(ranks <= k)
        out[f"{name}_medr"] = float(np.floor(np.median(ranks)))
        out[f"{name}_meanr"] = float(np.mean(ranks))
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    return out


def vsepp_argsort_metrics(sims: np.ndarray, c2i: np.ndarray) -> dict[str, float]:
    """The original VSE++ style: argsort each query (valid when there are no ties)."""
    n_img, n_cap = sims.shape
    i2t = np.array(
        [
            min(np.where(np.argsort(sims[i])[::-1] == j)[0][0] for j in np.flatnonzero(c2i == i))
            + 1
            for i in range(n_img)
        ]
    )
    t2i = np.array(
        [np.where(np.argsort(sims[:, j])[::-1] == c2i[j])[0][0] + 1 for j in range(n_cap)]
    )
    return {
        "i2t_r1": 100 * np.mean(i2t <= 1),
        "t2i_r5": 100 * np.mean(t2i <= 5),
        "i2t_meanr": i2t.mean(),
        "t2i_meanr": t2i.mean(),
    }


def uneven_problem(seed: int, n_img: int = 23, ties: bool = False):
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 7, size=n_img)  # 1..6 captions per image
    c2i = rng.permutation(np.repeat(np.arange(n_img), counts))
    sims = rng.normal(size=(n_img, len(c2i))).astype(np.float32)
    # make the correct pairs a bit more similar so recalls are not all ~0
    sims[c2i, np.arange(len(c2i))] += 1.0
    if ties:
        sims = np.round(sims, 0)  # lots of exact ties
    return sims, c2i


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ties", [False, True])
def test_matches_naive_loop(seed, ties):
    sims, c2i = uneven_problem(seed, ties=ties)
    got, want = retrieval_metrics(sims, c2i), naive_metrics(sims, c2i)
    assert set(got) == set(METRIC_KEYS)
    for k in METRIC_KEYS:
        assert got[k] == pytest.approx(want[k]), k


def test_matches_vsepp_argsort_without_ties():
    sims, c2i = uneven_problem(7, n_img=40)
    got, ref = retrieval_metrics(sims, c2i), vsepp_argsort_metrics(sims, c2i)
    for k, v in ref.items():
        assert got[k] == pytest.approx(v), k


def test_chunking_and_inputs_agree():
    sims, c2i = uneven_problem(3, n_img=300)
    ref = naive_metrics(sims, c2i)
    from vsekit.lab.eval import retrieval as r

    rows, n, _ = r._matrix_rows(sims)
    ct = torch.as_tensor(c2i)
    for chunk in (1, 7, 1000):
        got = r.metrics_from_ranks(*r.ranks_from_rows(rows, ct, n, chunk=chunk))
        assert got == pytest.approx(ref)
    assert retrieval_metrics(torch.from_numpy(sims), c2i)["rsum"] == pytest.approx(ref["rsum"])


def test_from_embeddings_equals_matrix():
    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(50, 16, generator=g), dim=1)
    c2i = np.repeat(np.arange(50), 5)
    txt = torch.nn.functional.normalize(img[c2i] + 0.8 * torch.randn(250, 16, generator=g), dim=1)
    a = retrieval_metrics_from_embeddings(img, txt, c2i)
    b = retrieval_metrics((img @ txt.T).numpy(), c2i)
    assert a == pytest.approx(b)
    assert 0 < a["rsum"] < 600


def test_perfect_and_constant_scores():
    c2i = np.repeat(np.arange(10), 5)
    perfect = (np.arange(10)[:, None] == c2i[None, :]).astype(np.float32)
    m = retrieval_metrics(perfect, c2i)
    assert m["rsum"] == 600 and m["i2t_medr"] == 1 and m["t2i_meanr"] == 1
    c2i = np.repeat(np.arange(20), 5)
    const = retrieval_metrics(np.zeros((20, 100), np.float32), c2i)
    assert const["rsum"] == 0  # ties never help
    assert const["t2i_medr"] == 20 and const["i2t_medr"] == 96


def test_protocols():
    rng = np.random.default_rng(0)
    n = 5000
    c2i = np.repeat(np.arange(n), 2)
    sims = rng.normal(size=(n, 2 * n)).astype(np.float32)
    sims[c2i, np.arange(2 * n)] += 3
    one_k = evaluate_protocol(sims, c2i, "1k5fold")
    folds = [
        retrieval_metrics(
            sims[k * 1000 : (k + 1) * 1000, k * 2000 : (k + 1) * 2000],
            c2i[k * 2000 : (k + 1) * 2000] - k * 1000,
        )
        for k in range(5)
    ]
    assert one_k["rsum"] == pytest.approx(np.mean([f["rsum"] for f in folds]))
    assert evaluate_protocol(sims, c2i, "5k") == pytest.approx(retrieval_metrics(sims, c2i))
    with pytest.raises(ValueError, match="needs 5,000 images"):
        evaluate_protocol(sims[:10], c2i[:20], "5k")


def test_bad_inputs():
    with pytest.raises(ValueError, match="caption_to_image has shape"):
        retrieval_metrics(np.zeros((2, 3)), [0, 1])
    with pytest.raises(ValueError, match="at least one caption"):
        retrieval_metrics(np.zeros((3, 2)), [0, 1])
