"""bf16 autocast's matrix products in fp32 kernels, for CPUs without bf16 arithmetic.

Under ``torch.autocast("cpu", dtype=torch.bfloat16)`` every linear layer and convolution,
in the forward and in the backward, becomes a product on bf16 operands (``aten.mm``,
``addmm``, ``bmm``, ``baddbmm``, ``convolution``, ...: :data:`GEMMS`). An x86 CPU with
AVX512_BF16 runs those in hardware. One without it runs PyTorch's emulating kernels, and
a whole GRU training step took 17.3 times fp32's on an AVX2-only AMD EPYC (3076.3 against
177.5 ms, ``benchmarks/bf16_train.json``, ``step_speed_by_cpu``).

:class:`Fp32Gemms` computes the same products from the same bf16 operands with fp32's
kernels. The arithmetic is the one a bf16 kernel does:

* each product of two bf16 numbers (8-bit significands) is exact in fp32 (24 bits);
* the products are summed in fp32, as bf16 kernels accumulate;
* the result is rounded to bf16, as theirs is, and returned as a bf16 tensor, so every op
  downstream sees what autocast would have given it.

Only the order of the fp32 sums differs, which moves an output by a bf16 unit in the last
place now and then (``tests/test_bf16.py`` bounds it against PyTorch's own bf16 kernels
on the CPU that runs the test). Everything else (which ops autocast casts, the
elementwise ops on bf16 tensors, the fp32 weights and optimizer) is left to PyTorch, so
the speed-up is as large as the products' share of the step.
"""

from __future__ import annotations

import contextlib
from typing import Literal

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from vsekit.runtime.precision import CpuInfo

_aten = torch.ops.aten
_PRODUCTS = (_aten.mm, _aten.addmm, _aten.bmm, _aten.baddbmm, _aten.mv, _aten.addmv,
             _aten.dot, _aten.convolution)  # fmt: skip
#: the products autocast sends to bf16 kernels, forward and backward (their plain and
#: ``out=`` forms; a form with its own output dtype is left alone), and the convolutions'
#: backward. Not ``addbmm``: PyTorch's bf16 kernel rounds each batch's product before the
#: sum, so it is not one fp32 sum rounded once; it is left to PyTorch.
GEMMS = frozenset(
    [getattr(p, form) for p in _PRODUCTS for form in ("default", "out")]
    + [_aten.convolution_backward.default]
)


def _up(x: object) -> object:
    return x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 else x


def _down(x: object) -> object:
    return x.to(torch.bfloat16) if isinstance(x, torch.Tensor) else x


def _all_bf16(args: tuple, kwargs: dict) -> bool:
    """Whether every floating-point tensor among the arguments is bf16 (a mix of dtypes is
    PyTorch's to refuse, as it would without the mode)."""
    floats = [a for a in (*args, *kwargs.values())
              if isinstance(a, torch.Tensor) and a.is_floating_point()]  # fmt: skip
    return bool(floats) and all(a.dtype == torch.bfloat16 for a in floats)


class Fp32Gemms(TorchDispatchMode):
    """Within it, a matrix product or convolution (:data:`GEMMS`) whose floating-point
    operands are all bf16 runs as its fp32 kernel on the same values, its results
    rounded back to bf16 (see the module). Every other op, and every product on other
    dtypes, runs as it would without it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in GEMMS or not _all_bf16(args, kwargs):
            return func(*args, **kwargs)
        out = kwargs.get("out")
        rest = {k: _up(v) for k, v in kwargs.items() if k != "out"}
        result = pytree.tree_map(_down, func.overloadpacket.default(*map(_up, args), **rest))
        if out is None:
            return result
        out.resize_(result.shape).copy_(result)  # an out= form writes into its tensor
        return out


def gemm_kernels(precision: str, device: torch.device, cpu: CpuInfo) -> Literal["fp32", "native"]:
    """Which kernels a run's bf16 GEMMs use: ``"fp32"`` (:class:`Fp32Gemms`) for bf16 on
    a CPU that would emulate it, else ``"native"`` (PyTorch's own for the dtype)."""
    on_cpu = device.type == "cpu"
    return "fp32" if precision == "bf16" and on_cpu and cpu.emulated_bf16 else "native"


def gemm_context(kernels: str) -> contextlib.AbstractContextManager[object]:
    """The context a training step's forward and backward run in, for
    :func:`gemm_kernels`'s answer."""
    return Fp32Gemms() if kernels == "fp32" else contextlib.nullcontext()
