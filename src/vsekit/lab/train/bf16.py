"""bf16 autocast's matrix products in fp32 kernels, for CPUs without bf16 arithmetic.

Under ``torch.autocast("cpu", dtype=torch.bfloat16)`` every linear layer, in the forward
and in the backward, becomes a GEMM on bf16 operands (``aten.mm``, ``addmm``, ``bmm``,
``baddbmm``). An x86 CPU with AVX512_BF16 runs those in hardware. One without it runs
PyTorch's emulating kernel instead, which costs 12 times fp32's whole GRU training step on
an AVX2-only AMD EPYC (``benchmarks/bf16_train.json``, ``step_speed_by_cpu``).

:class:`Fp32Gemms` computes the same products from the same bf16 operands with fp32's
kernels. The arithmetic is the one a bf16 GEMM does:

* each product of two bf16 numbers (8-bit significands) is exact in fp32 (24 bits);
* the products are summed in fp32, as bf16 GEMM kernels accumulate;
* the result is rounded to bf16, as theirs is, and returned as a bf16 tensor, so every op
  downstream sees what autocast would have given it.

Only the order of the fp32 sums differs, which moves an output by one bf16 unit in the
last place now and then (``tests/test_bf16.py`` bounds it against PyTorch's own bf16
kernels on the CPU that runs the test). Everything else (which ops autocast casts, the
elementwise ops on bf16 tensors, the fp32 weights and optimizer) is left to PyTorch.
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vsekit.runtime.precision import CpuInfo

_aten = torch.ops.aten
#: the products autocast sends to bf16 GEMM kernels, forward and backward
GEMMS = frozenset({_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default})


def _up(x: object) -> object:
    return x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 else x


class Fp32Gemms(TorchDispatchMode):
    """Within it, a GEMM on bf16 operands runs as fp32 GEMM on the same values, rounded
    back to bf16 (see the module). Every other op, and every GEMM on other dtypes, runs
    as it would without it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if func in GEMMS and any(
            isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 for a in args
        ):
            out = func(*(_up(a) for a in args), **{k: _up(v) for k, v in kwargs.items()})
            return out.to(torch.bfloat16)
        return func(*args, **kwargs)


def gemm_kernels(precision: str, device: torch.device, cpu: CpuInfo) -> str:
    """Which kernels a run's bf16 GEMMs use: ``"fp32"`` (:class:`Fp32Gemms`) for bf16 on
    a CPU that would emulate it, else ``"native"`` (PyTorch's own for the dtype)."""
    on_cpu = device.type == "cpu"
    return "fp32" if precision == "bf16" and on_cpu and cpu.emulated_bf16 else "native"


def gemm_context(kernels: str) -> contextlib.AbstractContextManager:
    """The context a training step's forward and backward run in, for
    :func:`gemm_kernels`'s answer."""
    return Fp32Gemms() if kernels == "fp32" else contextlib.nullcontext()
