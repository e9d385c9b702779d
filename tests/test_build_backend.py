"""The build backend refuses to build a wheel without the default model's generated ONNX
encoders (a clean clone), with a message that says what to do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build_backend"))

import vsekit_build  # noqa: E402


def test_missing_encoders_are_named_with_the_fix(tmp_path):
    with pytest.raises(vsekit_build.MissingEncoders, match=r"onnx.json missing.*scripts/setup"):
        vsekit_build.check_encoders(tmp_path)
    (tmp_path / "onnx.json").write_text('{"sha256": {"text.onnx": "x", "image.int8.onnx": "y"}}')
    (tmp_path / "text.onnx").write_bytes(b"")
    with pytest.raises(vsekit_build.MissingEncoders, match=r"\(image.int8.onnx missing"):
        vsekit_build.check_encoders(tmp_path)


def test_this_checkout_has_them():
    vsekit_build.check_encoders()  # scripts/setup made them


@pytest.mark.slow
def test_a_clean_clone_fails_to_build_a_wheel_and_says_why(tmp_path):
    """The tracked files alone (what `pip install git+URL` gets): the build stops."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.split(b"\0")  # fmt: skip
    src = tmp_path / "clone"
    for f in filter(None, files):
        rel = Path(f.decode())
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
         str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode != 0
    assert "the default model's ONNX encoders are not in this checkout" in r.stdout + r.stderr
    assert not list((tmp_path / "dist").glob("*.whl")) if (tmp_path / "dist").exists() else True
