"""bf16 GEMMs in fp32 kernels (``vsekit.lab.train.bf16``) against PyTorch's own bf16
kernels, on the CPU that runs the test: AVX512_BF16 hardware where it has it, PyTorch's
emulation elsewhere."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vsekit.lab.train import bf16
from vsekit.lab.train.bf16 import Fp32Gemms, gemm_context, gemm_kernels
from vsekit.runtime.precision import CpuInfo

B16 = torch.bfloat16


def operands(*shapes: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).to(B16) for s in shapes]


def half_ulp(x: torch.Tensor) -> torch.Tensor:
    """Half a bf16 unit in the last place at ``|x|`` (8-bit significand)."""
    return torch.ldexp(torch.ones_like(x), torch.frexp(x.abs())[1] - 9)


@pytest.mark.parametrize(
    "op,shapes",
    [
        (torch.mm, [(128, 2048), (2048, 512)]),
        (torch.addmm, [(256,), (128, 15168), (15168, 256)]),
        (torch.bmm, [(4, 64, 512), (4, 512, 96)]),
        (torch.baddbmm, [(4, 64, 96), (4, 64, 512), (4, 512, 96)]),
        (torch.mv, [(512, 2048), (2048,)]),
        (torch.addmv, [(512,), (512, 2048), (2048,)]),
    ],
)
def test_each_gemm_gives_what_pytorchs_bf16_kernel_gives(op, shapes) -> None:
    args = operands(*shapes)
    ref = op(*args)
    with Kernels() as kernels, Fp32Gemms():
        fast = op(*args)
    assert kernels.dtypes == [torch.float32]  # the fp32 kernel ran, on the bf16 values
    assert fast.dtype == ref.dtype == B16 and fast.shape == ref.shape
    same = (ref == fast).float().mean().item()
    assert same >= 0.99, same  # the rest: where the fp32 sums' order tips the rounding
    # each within a bf16 GEMM's error bound: the rounding to bf16, plus fp32 sums of K
    # exact products (at most K * 2^-24 of the sum of their magnitudes)
    exact = op(*(a.double() for a in args))
    k = args[-2].shape[-1]  # the summed dimension
    bound = half_ulp(exact) + k * 2.0**-24 * op(*(a.double().abs() for a in args))
    for out in (ref, fast):
        assert bool(((out.double() - exact).abs() <= bound).all())
    # and not fp32's answer
    fp32 = op(*(a.float() for a in args)).double()
    assert (fast.double() - exact).abs().max() > 10 * (fp32 - exact).abs().max()


def test_other_dtypes_and_ops_pass_through_untouched() -> None:
    a, b = (t.float() for t in operands((64, 256), (256, 32)))
    with Kernels() as kernels, Fp32Gemms():
        same = a @ b
        act = torch.tanh(a.to(B16))
    assert torch.equal(same, a @ b) and same.dtype == torch.float32
    assert torch.equal(act, torch.tanh(a.to(B16))) and act.dtype == B16
    assert kernels.dtypes == [torch.float32]
    # a mix of bf16 and fp32 is PyTorch's to refuse, with the mode as without it
    for mode in (contextlib.nullcontext(), Fp32Gemms()):
        with mode, pytest.raises(RuntimeError, match="dtype"):
            torch.mm(a.to(B16), b)


def test_out_forms_write_their_tensor_and_dot_runs_in_fp32() -> None:
    a, b = operands((64, 512), (512, 32))
    ref = torch.mm(a, b)
    out = torch.empty(0, dtype=B16)
    with Kernels() as kernels, Fp32Gemms():
        got = torch.mm(a, b, out=out)
        dot = torch.dot(a[0], b[:, 0])
    assert got is out and out.shape == ref.shape and (out == ref).float().mean() >= 0.99
    assert dot.dtype == B16 and kernels.dtypes == [torch.float32, torch.float32]


def test_a_convolution_is_pytorchs_bf16_one_and_its_backward_one_fp32_sum_rounded() -> None:
    """A ResNet block's 3x3 convolution (the tuned backbone's layers train in bf16). The
    forward is PyTorch's bf16 kernel's to the bit but for a few outputs. The backward is
    the exact gradient of the bf16 values summed in fp32 and rounded once, as a kernel
    that accumulates in fp32 gives it; PyTorch's kernel on a CPU that emulates bf16 may
    round partial sums too (im2col), so it is held to being no closer to the exact one."""
    x, w, bias, go = operands((4, 64, 14, 14), (64, 64, 3, 3), (64,), (4, 64, 14, 14))
    conv = (bias.shape, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    with Kernels() as kernels, Fp32Gemms():
        y = torch.ops.aten.convolution(x, w, bias, *conv[1:])
        grads = torch.ops.aten.convolution_backward(go, x, w, *conv, [True, True, True])
    assert kernels.dtypes == [torch.float32, torch.float32]
    ref = torch.ops.aten.convolution(x, w, bias, *conv[1:])
    assert y.dtype == B16 and (y == ref).float().mean() >= 0.99
    ref_grads = torch.ops.aten.convolution_backward(go, x, w, *conv, [True, True, True])
    exact = torch.ops.aten.convolution_backward(
        go.double(), x.double(), w.double(), *conv, [True, True, True]
    )
    size = torch.ops.aten.convolution_backward(
        go.double().abs(), x.double().abs(), w.double().abs(), *conv, [True, True, True]
    )
    k = 4 * 14 * 14  # the longest sum (the weights' and the bias's: batch x positions)
    for got, theirs, e, m in zip(grads, ref_grads, exact, size, strict=True):
        assert got.dtype == B16 and got.shape == e.shape
        assert bool(((got.double() - e).abs() <= half_ulp(e) + k * 2.0**-24 * m).all())
        off, off_ref = ((t.double() - e).abs().mean() for t in (got, theirs))
        assert off <= 1.05 * off_ref, (off, off_ref)


class Kernels(TorchDispatchMode):
    """Below :class:`Fp32Gemms` on the mode stack: the dtype of each GEMM's operands as
    they reach PyTorch's kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in bf16.GEMMS:
            self.dtypes.append(next(a.dtype for a in args if isinstance(a, torch.Tensor)))
        return func(*args, **(kwargs or {}))


def _step(fp32_gemms: bool, precision: str = "bf16") -> tuple[float, list, list]:
    """One training step of a GRU text tower and a linear image projection."""
    torch.manual_seed(0)
    gru, proj = torch.nn.GRU(50, 128, batch_first=True), torch.nn.Linear(2048, 128)
    g = torch.Generator().manual_seed(1)
    words, img = torch.randn(16, 12, 50, generator=g), torch.randn(16, 2048, generator=g)
    with Kernels() as kernels, gemm_context("fp32" if fp32_gemms else "native"):
        with torch.autocast("cpu", dtype=B16, enabled=precision == "bf16"):
            txt = gru(words)[1][0]
            sim = (
                torch.nn.functional.normalize(proj(img).float())
                @ torch.nn.functional.normalize(txt.float()).T
            )
            loss = (sim.diag().neg() + sim.logsumexp(1)).mean()
        loss.backward()
    grads = [p.grad.clone() for m in (gru, proj) for p in m.parameters()]
    return float(loss.detach()), grads, kernels.dtypes


def test_a_training_step_is_pytorchs_bf16_step_not_fp32s() -> None:
    loss_ref, g_ref, ref_kernels = _step(False)
    assert B16 in ref_kernels  # the reference ran PyTorch's bf16 kernels
    loss_fast, g_fast, kernels = _step(True)
    loss_32, g_32, _ = _step(False, "fp32")
    # the forward's GEMMs and the backward's (12 GRU steps and the projection), in fp32
    assert len(kernels) >= 2 * 13 and set(kernels) == {torch.float32}
    assert abs(loss_fast - loss_ref) <= 1e-3 * abs(loss_ref) < abs(loss_32 - loss_ref)
    flat = [torch.cat([g.flatten() for g in gs]) for gs in (g_ref, g_fast, g_32)]
    off_fast, off_32 = (flat[0] - flat[1]).norm(), (flat[0] - flat[2]).norm()
    assert off_fast <= 0.1 * off_32, (off_fast, off_32)


def test_only_bf16_on_an_emulating_cpu_uses_fp32_kernels() -> None:
    avx2 = CpuInfo("x86_64", frozenset({"AVX2", "FMA3"}))
    native = CpuInfo("x86_64", frozenset({"AVX2", "AVX512F", "AVX512BF16"}))
    arm = CpuInfo("aarch64", frozenset({"ASIMD"}))
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert gemm_kernels("bf16", cpu, avx2) == "fp32"
    for args in [("fp32", cpu, avx2), ("bf16", cpu, native), ("bf16", gpu, avx2),
                 ("bf16", cpu, arm)]:  # fmt: skip
        assert gemm_kernels(*args) == "native", args
    assert isinstance(gemm_context("fp32"), Fp32Gemms)
    assert not isinstance(gemm_context("native"), Fp32Gemms)
