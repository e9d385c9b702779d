from __future__ import annotations

import numpy as np
import pytest
import torch

from vsekit.lab.losses import create_loss, list_losses
from vsekit.lab.similarity import create_similarity, order_similarity


def naive_order(i: torch.Tensor, c: torch.Tensor, abs: bool = False) -> float:
    if abs:
        i, c = i.abs(), c.abs()
    return -sum(max(0.0, float(c[d] - i[d])) ** 2 for d in range(len(i)))


def naive_hinge(img, txt, sim, margin, use_max):
    s = lambda a, b: float(sim(img[a : a + 1], txt[b : b + 1])[0, 0])  # noqa: E731
    n, total = len(img), 0.0
    for k in range(n):
        pos = s(k, k)
        neg_c = [max(0.0, margin - pos + s(k, j)) for j in range(n) if j != k]
        neg_i = [max(0.0, margin - pos + s(j, k)) for j in range(n) if j != k]
        total += (max(neg_c) + max(neg_i)) if use_max else (sum(neg_c) + sum(neg_i))
    return total


@pytest.mark.parametrize(
    "similarity,abs", [("cosine", False), ("order", False), ("order", True), ("euclidean", False)]
)
@pytest.mark.parametrize("name", ["sum_hinge", "max_hinge"])
def test_hinge_losses_equal_naive_loop(name, similarity, abs):
    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(7, 5, generator=g), dim=1)
    txt = torch.nn.functional.normalize(torch.randn(7, 5, generator=g), dim=1)
    kw = {"abs": abs} if similarity == "order" else {}
    loss = create_loss(name, margin=0.2, similarity=similarity, **kw)
    want = naive_hinge(img, txt, create_similarity(similarity, **kw), 0.2, name == "max_hinge")
    assert float(loss(img, txt)) == pytest.approx(want, rel=1e-5)


def test_order_similarity_formula_and_chunking(monkeypatch):
    g = torch.Generator().manual_seed(1)
    img, txt = torch.randn(9, 4, generator=g), torch.randn(6, 4, generator=g)
    for abs in (False, True):
        got = order_similarity(img, txt, abs=abs)
        want = torch.tensor([[naive_order(i, c, abs) for c in txt] for i in img])
        torch.testing.assert_close(got, want)
    import vsekit.similarity as core

    # tiles of images x captions give the untiled formula's values to the bit, in both
    # libraries, whatever the tiling (one tile; several, uneven, both ways; one pair a tile)
    big_i, big_t = torch.randn(37, 64, generator=g), torch.randn(29, 64, generator=g)
    untiled = -(((big_t[None] - big_i[:, None]).clip(min=0)) ** 2).sum(-1)
    untiled_np = -((np.clip(big_t.numpy()[None] - big_i.numpy()[:, None], 0, None)) ** 2).sum(-1)
    for tile in (1 << 19, 2560, 1000, 1):  # 5 captions x 8 images; 1 x 15; 1 x 1
        monkeypatch.setattr(core, "_ORDER_TILE", tile)
        assert torch.equal(order_similarity(big_i, big_t), untiled)
        assert np.array_equal(core.order(big_i.numpy(), big_t.numpy()), untiled_np)
    assert core.order(np.zeros((3, 4)), np.zeros((0, 4))).shape == (3, 0)
    assert core.order(np.zeros((0, 4)), np.zeros((2, 4))).shape == (0, 2)
    # a caption below its image in every coordinate has similarity 0, the maximum
    assert float(order_similarity(torch.ones(1, 3), torch.zeros(1, 3))) == 0.0


@pytest.mark.parametrize("abs", [False, True])
def test_order_similarity_gradient_is_the_derivative(abs, monkeypatch):
    import vsekit.similarity as core

    monkeypatch.setattr(core, "_ORDER_TILE", 24)  # two images a chunk: 2, 2, then 1
    g = torch.Generator().manual_seed(2)
    img = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    txt = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda i, t: order_similarity(i, t, abs=abs), (img, txt))


@pytest.mark.parametrize("abs", [False, True])
def test_order_training_path_matches_autograd_through_the_formula(abs):
    """The shipped training configuration: a batch of 128, 512-d, the image side in bf16
    (autocast) and the caption side in float32, under the order pipelines' sum hinge."""
    import vsekit.similarity as core

    g = torch.Generator().manual_seed(3)
    img0 = torch.randn(128, 512, generator=g).bfloat16()
    txt0 = torch.randn(128, 512, generator=g)
    weights = torch.randn(128, 128, generator=g)
    out = []
    for fn in (order_similarity, lambda i, t, abs: core.order(i, t, abs_=abs)):
        img, txt = img0.clone().requires_grad_(), txt0.clone().requires_grad_()
        s = fn(img, txt, abs=abs)
        (s * weights).sum().backward()
        out.append((s.detach(), img.grad, txt.grad, type(s.grad_fn).__name__))
    (s, gi, gt, fn), (s_ref, gi_ref, gt_ref, fn_ref) = out
    assert "_OrderWithGrad" in fn and "_OrderWithGrad" not in fn_ref  # the fused path ran
    assert torch.equal(s, s_ref)  # the values to the bit
    assert gi.dtype == torch.bfloat16 and gt.dtype == torch.float32
    torch.testing.assert_close(gt, gt_ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(gi, gi_ref)  # bf16: within its own rounding


def test_order_similarity_takes_the_fused_path_only_for_a_gradient(monkeypatch):
    """Evaluation (no_grad, inference_mode) keeps the core's tiled path even for inputs
    that require a gradient; one side requiring it is enough for the fused path, and a
    backward run inside autocast stays in float32."""
    import vsekit.lab.similarity as lab_sim
    import vsekit.similarity as core

    g = torch.Generator().manual_seed(5)
    img, txt = torch.randn(6, 8, generator=g), torch.randn(4, 8, generator=g)
    want = core.order(img, txt, True)
    fused = lab_sim._OrderWithGrad.apply

    def refuse(*a):
        raise AssertionError("the fused path ran without a gradient")

    monkeypatch.setattr(lab_sim._OrderWithGrad, "apply", refuse)
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            got = order_similarity(img.requires_grad_(), txt, abs=True)
            assert torch.equal(got, want)
    monkeypatch.setattr(lab_sim._OrderWithGrad, "apply", fused)
    img = img.detach().requires_grad_()
    s = order_similarity(img, txt, abs=True)  # the captions need no gradient
    assert "_OrderWithGrad" in type(s.grad_fn).__name__ and torch.equal(s.detach(), want)
    s.sum().backward()
    assert txt.grad is None and img.grad is not None
    grads = []
    for fn in (order_similarity, lambda i, t, abs: core.order(i, t, abs)):
        i, t = img.detach().clone().requires_grad_(), txt.clone().requires_grad_()
        s = fn(i, t, abs=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # matmuls here would be bf16
            s.sum().backward()
        grads.append((i.grad, t.grad))
    for got, ref in zip(*grads, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_order_similarity_does_not_depend_on_the_inputs_memory_layout():
    """Column-major inputs give, to the bit, what their row-major copies give."""
    g = torch.Generator().manual_seed(6)
    img = torch.randn(16, 9, generator=g).T.requires_grad_()  # [9, 16], column-major
    txt = torch.randn(16, 7, generator=g).T
    i, t = img.detach().contiguous(), txt.contiguous()
    want = -(((t[None] - i[:, None]).clip(min=0)) ** 2).sum(-1)
    assert torch.equal(order_similarity(img, txt).detach(), want)


def test_loss_gradients_and_registry():
    assert {"max_hinge", "sum_hinge", "mse"} <= set(list_losses())
    hinge = create_loss("max_hinge", margin=0.5, similarity="cosine", abs=False)
    assert hinge.margin == 0.5
    # an option the loss does not take is an error, not silently dropped
    with pytest.raises(ValueError, match=r"max_hinge: unknown option\(s\) \['k_top'\]"):
        create_loss("max_hinge", margin=0.5, k_top=3)
    with pytest.raises(ValueError, match="mse: unknown option"):
        create_loss("mse", margin=0.5)
    img = torch.randn(4, 3, requires_grad=True)
    txt = torch.randn(4, 3, requires_grad=True)
    create_loss("max_hinge")(img, txt).backward()
    assert img.grad is not None and torch.isfinite(img.grad).all()
    with pytest.raises(ValueError, match="unknown loss"):
        create_loss("nope")


@pytest.mark.parametrize("max_violation", [False, True])
def test_same_image_pairs_are_never_negatives(max_violation):
    """Vectorised masking against a naive per-pair loop: rows that share an image are
    neither each other's caption negatives nor image negatives."""
    torch.manual_seed(0)
    b = 9
    img = torch.nn.functional.normalize(torch.randn(b, 5), dim=1)
    txt = torch.nn.functional.normalize(torch.randn(b, 5), dim=1)
    ids = torch.tensor([0, 1, 0, 2, 3, 1, 4, 0, 5])
    margin = 0.2
    s = img @ txt.T
    total = torch.tensor(0.0)
    for i in range(b):
        c_terms = [max(0.0, margin - s[i, i] + s[i, k]) for k in range(b) if ids[k] != ids[i]]
        i_terms = [max(0.0, margin - s[i, i] + s[k, i]) for k in range(b) if ids[k] != ids[i]]
        for terms in (c_terms, i_terms):
            total = total + (max(terms, default=0.0) if max_violation else sum(terms))
    loss = create_loss("max_hinge" if max_violation else "sum_hinge", margin=margin)
    got = loss(img, txt, image_ids=ids)
    torch.testing.assert_close(got, torch.as_tensor(total, dtype=got.dtype), rtol=1e-5, atol=1e-6)
    # without ids, the duplicates count as negatives: the loss is larger
    assert float(loss(img, txt)) > float(got)


@pytest.mark.parametrize("name", ["cosine", "order", "euclidean"])
def test_one_similarity_for_numpy_and_torch(name):
    """The core (NumPy) and the lab (tensors, with gradients) run the same functions:
    equal scores, and the tensor path keeps its gradient."""
    from vsekit.similarity import similarity, unit

    g = torch.Generator().manual_seed(3)
    img, txt = torch.randn(5, 7, generator=g), torch.randn(4, 7, generator=g)
    img.requires_grad_(True)
    t = similarity(name, unit(img), unit(txt), abs_=True)
    n = similarity(name, unit(img.detach().numpy()), unit(txt.numpy()), abs_=True)
    assert isinstance(n, np.ndarray) and n.shape == (5, 4)
    np.testing.assert_allclose(t.detach().numpy(), n, rtol=1e-5, atol=1e-5)
    t.sum().backward()
    assert img.grad is not None and torch.isfinite(img.grad).all()
    want = unit(img.detach()).numpy()
    np.testing.assert_allclose(
        np.linalg.norm(want, axis=1), 1.0, rtol=1e-6
    )  # unit rows, as the naive x / ||x||
    np.testing.assert_allclose(
        want,
        img.detach().numpy() / np.linalg.norm(img.detach().numpy(), axis=1, keepdims=True),
        rtol=1e-6,
    )


def test_ensemble_weighting_is_the_weighted_mean_of_cosines():
    """The one ensemble weighting: dot products of the concatenations equal the weighted
    mean of the members' cosines (naive loop), for arrays and tensors; group shares."""
    from vsekit.similarity import ensemble_concat, group_weights, unit

    rng = np.random.default_rng(0)
    img = [unit(rng.normal(size=(4, d)).astype(np.float32)) for d in (3, 5, 2)]
    txt = [unit(rng.normal(size=(6, d)).astype(np.float32)) for d in (3, 5, 2)]
    w = group_weights(["gru", "minilm", "minilm"], 0.4)
    assert w == pytest.approx([0.4, 0.3, 0.3])
    assert group_weights(["minilm", "minilm"], 0.4) == [0.5, 0.5]
    got = ensemble_concat(img, w) @ ensemble_concat(txt, w).T
    want = sum(wk * (i @ t.T) for wk, i, t in zip(w, img, txt, strict=True))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    tens = ensemble_concat([torch.from_numpy(x) for x in img], w)
    np.testing.assert_allclose(tens.numpy(), ensemble_concat(img, w), rtol=1e-6)
    with pytest.raises(ValueError, match="positive"):
        ensemble_concat(img, [1.0, 0.0, 1.0])
