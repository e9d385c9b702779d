"""Which precision runs on this CPU: the int8 graphs only where they compute what the
fp32 ones do.

ONNX Runtime's int8 kernels multiply uint8 activations by int8 weights. x86 CPUs with
VNNI (AVX512-VNNI, AVX-VNNI, AMX) accumulate those products straight into int32. Those
without it (AVX2 or AVX-512 alone: older Intel, many AMD EPYC) use ``vpmaddubsw``, which
adds *pairs* of products into int16 with saturation: with full 8-bit weights a pair can
reach 2 x 255 x 127 = 64,770 > 32,767, and the result is silently clipped. That is the
case ONNX Runtime's quantisation guide names, with ``reduce_range`` (7-bit weights:
2 x 255 x 64 = 32,640, which always fits) among its remedies. ARM CPUs widen before
they add, and saturate nothing.

So an int8 graph is safe on this CPU when either holds:

* the CPU adds int8 products without saturation (:attr:`CpuInfo.exact_int8`);
* the bundle's int8 graphs were quantised with weights no kernel saturates
  (``onnx.json``'s ``int8_weights``: ``7bit``, or ``u8`` for uint8 weights, which ONNX
  Runtime's u8u8 kernels widen before adding).

Otherwise :func:`choose_precision` picks the fp32 graph where the bundle has one, and
says why. The CPU's features come from its own report (CPUID, read by NumPy at import:
``numpy``'s ``__cpu_features__``), not from a list of CPU models. ``vse doctor`` and the
test suite then measure the parity of what was chosen, on the CPU that runs them.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

#: x86 features (NumPy's names) with which ONNX Runtime's int8 kernels add products
#: without saturation. NumPy does not report AVX-VNNI (the VEX form on CPUs without
#: AVX-512), so such CPUs count as without VNNI: conservative, never wrong.
EXACT_INT8_X86 = ("AVX512VNNI", "AVX512_CLX")
#: x86 features with bf16 arithmetic in hardware (the dot products of AVX512_BF16; CPUs with
#: AMX report it too). Without them PyTorch's CPU kernels emulate bf16: converting each
#: operand to float32 and back costs more than the narrower type saves (a bf16 training
#: step ran 13x slower than fp32 on an AVX2-only AMD EPYC; ``benchmarks/bf16_train.json``),
#: so training runs bf16's GEMMs in fp32 kernels there (``vsekit.lab.train.bf16``).
NATIVE_BF16_X86 = ("AVX512BF16",)
#: the features ``vse doctor`` and the benchmarks report
REPORTED = ("AVX2", "FMA3", "AVX512F", "AVX512BW", "AVX512VNNI", "AVX512BF16", "AVX512FP16",
            "ASIMD", "ASIMDDP", "ASIMDHP", "SVE")  # fmt: skip


@dataclass(frozen=True)
class CpuInfo:
    """This CPU, as its own capability report gives it."""

    machine: str  # platform.machine(): x86_64, aarch64, arm64, ...
    features: frozenset[str]  # NumPy's names for the CPU features present

    @property
    def is_x86(self) -> bool:
        return self.machine.lower() in ("x86_64", "amd64", "i386", "i686", "x86")

    @property
    def exact_int8(self) -> bool:
        """Whether ONNX Runtime's int8 kernels run here without the u8s8 saturation of
        x86 CPUs that lack VNNI (any non-x86 CPU: its kernels widen before adding)."""
        return not self.is_x86 or any(f in self.features for f in EXACT_INT8_X86)

    @property
    def emulated_bf16(self) -> bool:
        """Whether this is an x86 CPU without bf16 arithmetic in hardware, where bf16
        autocast emulates the type (slower than fp32). Other architectures are not
        judged: none was measured."""
        return self.is_x86 and not any(f in self.features for f in NATIVE_BF16_X86)

    @property
    def int8_class(self) -> str:
        """The class that decides int8's accuracy here: ``x86-vnni``, ``x86-no-vnni``
        or ``<machine>`` for other architectures."""
        if not self.is_x86:
            return self.machine.lower()
        return "x86-vnni" if self.exact_int8 else "x86-no-vnni"

    def reported(self) -> dict[str, bool]:
        """The features that matter for speed and int8 accuracy, present or not."""
        keys = [k for k in REPORTED if self.is_x86 != k.startswith(("ASIMD", "SVE"))]
        return {k: k in self.features for k in keys}


def _numpy_features() -> frozenset[str]:
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # NumPy < 2
        from numpy.core._multiarray_umath import __cpu_features__
    return frozenset(k for k, v in __cpu_features__.items() if v)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what the platform says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def cpu_info() -> CpuInfo:
    """This machine's CPU (cached: it does not change while the process runs)."""
    return CpuInfo(platform.machine(), _numpy_features())


@dataclass(frozen=True)
class PrecisionChoice:
    """The image graph's precision, whether the text graph runs its int8 products, and
    why (one line, shown by ``vse model info``, ``vse doctor`` and ``/health``)."""

    image: str  # "int8" | "fp32"
    text: str  # "int8" | "fp32": the text graph as stored (its transformer's products)
    reason: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


#: int8 weight forms that no CPU's kernels saturate, and why (``onnx.json``'s
#: ``int8_weights``: one form for every int8 graph, or one per graph by side)
SATURATION_FREE = {
    "7bit": "7-bit int8 weights, which no CPU's int8 kernels saturate",
    "u8": "uint8 weights (u8u8 kernels widen before adding), which no CPU saturates",
}


def int8_safe(meta: dict, cpu: CpuInfo) -> tuple[bool, str]:
    """Whether the int8 graphs that ``meta`` (a bundle's ``onnx.json``) describes compute
    on ``cpu`` what their fp32 graphs do, and why."""
    forms = meta.get("int8_weights", "8bit")
    if isinstance(forms, dict):  # one form a side; a side not named is 8-bit
        forms = {forms.get(side, "8bit") for side in ("image", "text")}
    else:
        forms = {forms}
    if forms <= set(SATURATION_FREE):
        return True, " and ".join(SATURATION_FREE[f] for f in sorted(forms))
    if cpu.exact_int8:
        why = "VNNI" if cpu.is_x86 else f"{cpu.machine} int8 kernels"
        return True, f"this CPU adds int8 products without saturation ({why})"
    return False, (
        "8-bit int8 weights on an x86 CPU without VNNI, whose int8 kernels saturate (vpmaddubsw)"
    )


def choose_precision(
    meta: dict, cpu: CpuInfo, asked: str | None = None, image: str | None = None
) -> PrecisionChoice:
    """The precision of the image and text graphs to run for the bundle whose
    ``onnx.json`` is ``meta``.

    ``asked`` (``fp32`` / ``int8``, from the caller or ``$VSEKIT_PRECISION``) is what runs
    for the image, never a quiet substitute (an unsafe int8 says so in the reason), and
    for the text where the bundle has that text graph. Otherwise int8 runs where the
    bundle's default is int8 and :func:`int8_safe` says yes; where it says no, the fp32
    graphs where the bundle has them, else int8 with a reason that says it is unsafe here
    (``vse doctor`` measures by how much).

    ``image``: the image graph's precision alone, fixed by what built an index (its rows
    must stay comparable); the text graph is then chosen as if nothing were asked."""
    from vsekit.bundle import IMAGE_FILES, text_files

    has_image = {p for p, f in IMAGE_FILES.items() if f in meta.get("sha256", {})}
    has_text = set(text_files(meta))
    safe, why = int8_safe(meta, cpu)

    def pick(have: set[str], want: str) -> str:
        return want if want in have or not have else next(iter(have))

    if image is not None and asked is None:
        auto = choose_precision(meta, cpu)
        if image == auto.image:
            return auto
        note = "" if image == "fp32" or safe else f" (unsafe here: {why})"
        return PrecisionChoice(image, auto.text, f"{image} image graph, the one that built "
                               f"the index{note}; text: {auto.reason}")  # fmt: skip
    if asked is not None:
        text = pick(has_text, asked)
        notes = [] if asked == "fp32" or safe else [f"unsafe here: {why}"]
        if text != asked:
            notes.append(f"the text graph is {text}, the only one the bundle has")
        return PrecisionChoice(asked, text, "; ".join([f"{asked} as asked", *notes]))
    if meta.get("default_precision", "fp32") != "int8":
        return PrecisionChoice("fp32", pick(has_text, "fp32"), "the bundle's default precision")
    if safe:
        return PrecisionChoice("int8", pick(has_text, "int8"), why)
    image, text = pick(has_image, "fp32"), pick(has_text, "fp32")
    if (image, text) == ("fp32", "fp32"):
        return PrecisionChoice(image, text, f"int8 would be unsafe here: {why}")
    return PrecisionChoice(
        image, text, f"the only graphs the bundle has, though int8 is unsafe here: {why}; "
        "re-export with 7-bit weights "
        "(`vse model onnx --int8 --reduce-range`)"
    )  # fmt: skip
