"""The precision each CPU runs, and int8's parity with fp32 on the CPU running the suite."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vsekit
from vsekit.bundle import bundle_dir, read_onnx_meta, text_files
from vsekit.runtime.parity import MEDIAN_MIN, WORST_MIN, int8_parity, sample_views
from vsekit.runtime.precision import (
    CpuInfo,
    choose_precision,
    cpu_info,
)

ROOT = Path(__file__).resolve().parents[1]
VNNI = CpuInfo("x86_64", frozenset({"AVX2", "AVX512F", "AVX512VNNI"}))
AVX2 = CpuInfo("x86_64", frozenset({"AVX2", "FMA3"}))
AVX512_NO_VNNI = CpuInfo("x86_64", frozenset({"AVX2", "AVX512F", "AVX512BW"}))
ARM = CpuInfo("aarch64", frozenset({"ASIMD", "ASIMDDP"}))

BOTH = {"sha256": {"image.onnx": "a", "image.int8.onnx": "b", "text.onnx": "c",
                   "text.int8.onnx": "d"}, "default_precision": "int8"}  # fmt: skip
INT8_ONLY = {"sha256": {"image.int8.onnx": "b", "text.onnx": "c"}, "text_storage": "int8",
             "default_precision": "int8"}  # fmt: skip


def test_cpu_classes() -> None:
    assert VNNI.int8_class == "x86-vnni" and VNNI.exact_int8
    assert AVX2.int8_class == "x86-no-vnni" and not AVX2.exact_int8
    assert AVX512_NO_VNNI.int8_class == "x86-no-vnni"  # AVX-512 alone still saturates
    assert ARM.int8_class == "aarch64" and ARM.exact_int8
    assert "AVX512VNNI" in VNNI.reported() and "ASIMDDP" not in VNNI.reported()
    assert set(ARM.reported()) == {"ASIMD", "ASIMDDP", "ASIMDHP", "SVE"}


def test_bf16_counts_as_emulated_on_x86_without_avx512_bf16_only() -> None:
    bf16 = CpuInfo("x86_64", frozenset({"AVX2", "AVX512F", "AVX512VNNI", "AVX512BF16"}))
    assert not bf16.emulated_bf16
    assert AVX2.emulated_bf16 and VNNI.emulated_bf16 and AVX512_NO_VNNI.emulated_bf16
    assert not ARM.emulated_bf16  # not judged: no other architecture was measured


def test_this_cpu_is_read_from_its_own_report() -> None:
    from numpy._core._multiarray_umath import __cpu_features__

    info = cpu_info()
    assert info.features == {k for k, v in __cpu_features__.items() if v}
    lscpu = Path("/proc/cpuinfo").read_text() if info.is_x86 else ""
    if info.is_x86:  # NumPy's CPUID reading agrees with the kernel's
        assert ("avx512_vnni" in lscpu) == ("AVX512VNNI" in info.features)


@pytest.mark.parametrize(
    ("meta", "cpu", "image", "text", "why"),
    [
        (BOTH, VNNI, "int8", "int8", "VNNI"),
        (BOTH, ARM, "int8", "int8", "aarch64"),
        (BOTH, AVX2, "fp32", "fp32", "unsafe"),
        (BOTH, AVX512_NO_VNNI, "fp32", "fp32", "vpmaddubsw"),
        ({**BOTH, "int8_weights": "7bit"}, AVX2, "int8", "int8", "7-bit"),
        (INT8_ONLY, AVX2, "int8", "int8", "re-export"),  # nothing else to run: said so
        (INT8_ONLY, VNNI, "int8", "int8", "VNNI"),
        ({**BOTH, "default_precision": "fp32"}, VNNI, "fp32", "fp32", "default"),
    ],
)
def test_choose_precision(meta, cpu, image, text, why) -> None:
    c = choose_precision(meta, cpu)
    assert (c.image, c.text) == (image, text)
    assert why in c.reason


def test_asked_precision_always_runs_and_unsafe_is_said() -> None:
    c = choose_precision(BOTH, AVX2, "int8")
    assert (c.image, c.text) == ("int8", "int8") and "unsafe here" in c.reason
    c = choose_precision(BOTH, VNNI, "fp32")
    assert (c.image, c.text) == ("fp32", "fp32") and c.reason == "fp32 as asked"
    c = choose_precision(INT8_ONLY, VNNI, "fp32")  # no fp32 text graph: said, not hidden
    assert (c.image, c.text) == ("fp32", "int8") and "only one" in c.reason


def test_legacy_int8_text_graph_is_read_as_int8() -> None:
    assert text_files(INT8_ONLY) == {"int8": "text.onnx"}
    assert text_files(BOTH) == {"fp32": "text.onnx", "int8": "text.int8.onnx"}


def test_shipped_default_runs_int8_only_where_it_is_exact() -> None:
    """The shipped int8 graphs have 8-bit weights: int8 on VNNI and ARM CPUs, the shipped
    fp32 graphs on x86 CPUs without VNNI, and this machine runs what its class should."""
    meta = read_onnx_meta(bundle_dir("default"))
    want = {VNNI: "int8", ARM: "int8", AVX2: "fp32", AVX512_NO_VNNI: "fp32"}
    for cpu, precision in want.items():
        c = choose_precision(meta, cpu)
        assert (c.image, c.text) == (precision, precision), (cpu, c)
    m = vsekit.load_model()
    here = "int8" if cpu_info().exact_int8 else "fp32"
    assert (m.precision, m.precision_choice.text) == (here, here)


def test_sample_views_are_48_distinct_images() -> None:
    views = sample_views()
    assert len(views) == 48
    arrays = {np.asarray(v.resize((32, 32))).tobytes() for v in views}
    assert len(arrays) == 48


@pytest.mark.slow
def test_int8_parity_on_this_cpu_as_shipped(flickr8k_slice_photos) -> None:
    """The graphs that ship (default bundle, as setup and the wheel build make them),
    int8 against fp32, on 48 held-out photos and 48 captions, on whatever CPU runs this."""
    got = int8_parity("default", flickr8k_slice_photos)
    assert set(got) == {"image", "text"} and all(p.n == 48 for p in got.values())
    if cpu_info().exact_int8:  # int8 runs here: it must match fp32
        for p in got.values():
            assert p.median >= MEDIAN_MIN and p.worst >= WORST_MIN, (p, cpu_info().int8_class)
    else:  # 8-bit int8 may saturate here: it must not be what runs
        assert vsekit.load_model().precision == "fp32"


@pytest.mark.slow
def test_doctor_reports_cpu_precision_parity_and_cache(tmp_path, monkeypatch, capsys) -> None:
    from vsekit.cli import main

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "w.bin").write_bytes(b"x" * 1000)
    assert main(["doctor", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    here = "int8" if cpu_info().exact_int8 else "fp32"
    assert r["cpu"]["int8_class"] == cpu_info().int8_class
    assert r["precision"]["image"] == here and r["precision"]["reason"]
    for side in ("image", "text"):  # what runs here matches fp32; unused int8 may not
        p = r["parity"][side]
        assert p["n"] == 48 and p["used"] == (here == "int8")
        assert p["ok"] or not p["used"]
    assert r["cache"]["sizes_mb"] == {"weights": 0.0}
    assert len(r["bundle"]["verified"]) == 5
    monkeypatch.setenv("VSEKIT_PRECISION", "fp32")  # doctor reports what load_model runs
    assert main(["doctor", "--json", "--no-parity"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"]["image"] == "fp32"
    monkeypatch.delenv("VSEKIT_PRECISION")
    assert main(["doctor", "--no-parity"]) == 0
    text = capsys.readouterr().out
    assert "int8 class" in text and f"precision:  image {here}, text {here}" in text


EMULATED = """
import json
from vsekit.runtime.precision import cpu_info
import vsekit
m = vsekit.load_model()
print(json.dumps({"cpu": cpu_info().int8_class, "image": m.precision,
                  "text": m.precision_choice.text, "reason": m.precision_choice.reason,
                  "dim": int(m.encode_text("a dog on the beach").shape[0])}))
"""


@pytest.mark.slow
@pytest.mark.skipif(
    cpu_info().machine != "x86_64" or not shutil.which("qemu-x86_64"),
    reason="needs x86_64 and QEMU's user mode (qemu-user; scripts/setup installs it)",
)
def test_an_emulated_cpu_without_vnni_runs_fp32() -> None:
    """On an AVX2-only CPU (Haswell, emulated: NumPy and ONNX Runtime read the emulated
    CPUID), the default loads its fp32 graphs, says why, and encodes. The parity of the
    8-bit int8 graphs there is measured by ``benchmarks/int8_cpu_classes.py`` (an
    emulated ResNet-50 takes minutes, too long for the suite)."""
    python = os.path.realpath(sys.executable)  # the interpreter itself, not the venv's link
    site = [p for p in sys.path if p.endswith("site-packages")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *site]))
    cmd = ["qemu-x86_64", "-cpu", "Haswell", python, "-c", EMULATED]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["cpu"] == "x86-no-vnni"
    assert (r["image"], r["text"]) == ("fp32", "fp32") and "without VNNI" in r["reason"]
    assert r["dim"] == 2048


def test_an_index_fixes_the_image_graph_only() -> None:
    """An index built with the int8 image graph keeps it (its rows must stay comparable);
    the text graph is chosen for this CPU, and the reason says both."""
    c = choose_precision(BOTH, AVX2, image="int8")
    assert (c.image, c.text) == ("int8", "fp32")
    assert "built the index" in c.reason and "unsafe here" in c.reason
    assert choose_precision(BOTH, VNNI, image="int8") == choose_precision(BOTH, VNNI)
    c = choose_precision(BOTH, VNNI, image="fp32")
    assert (c.image, c.text) == ("fp32", "int8")
