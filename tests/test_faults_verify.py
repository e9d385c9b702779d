"""Every bundle file a backend reads is verified first: damaged, truncated or edited
files are one-line errors naming the file, never a model that computes something else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import vsekit
from tests.conftest import make_tiny_model
from vsekit.bundle import MANIFEST, ModelError, default_model_dir, verify_bundle, write_expansion


def _linked_copy(src: Path, dst: Path) -> Path:
    """A copy of a bundle whose files are hard links (damage a file by replacing it)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file():
            os.link(f, dst / f.name)
    return dst


def _replace(f: Path, data: bytes) -> None:
    f.unlink()  # never write through the hard link into the original
    f.write_bytes(data)


def _flip(data: bytes) -> bytes:
    b = bytearray(data)
    b[len(b) // 2] ^= 0x01
    return bytes(b)


DAMAGES = {
    "tagger.safetensors": [lambda d: d[: len(d) // 2], _flip],
    "captions.txt": [lambda d: d[: len(d) // 3], lambda d: d.replace(b"dog", b"cat", 1)],
    "model.safetensors": [lambda d: d[:-4096], _flip],
    "vocab.json": [lambda d: d.replace(b'"dog"', b'"god"', 1)],
    "hubness.json": [lambda d: d.replace(b'"beta": ', b'"beta": 1', 1)],
    "tags.txt": [lambda d: d + b"extra\n"],
}


@pytest.mark.parametrize(
    "name,damage",
    [(n, d) for n, ds in DAMAGES.items() for d in ds],
    ids=[f"{n}-{i}" for n, ds in DAMAGES.items() for i in range(len(ds))],
)
def test_a_damaged_default_bundle_file_is_named(tmp_path, name, damage):
    bundle = _linked_copy(default_model_dir(), tmp_path / "m")
    f = bundle / name
    _replace(f, damage(f.read_bytes()))
    with pytest.raises(ModelError, match=rf"{name}: damaged or edited"):
        verify_bundle(bundle)
    with pytest.raises(ModelError, match=rf"{name}: damaged or edited"):
        vsekit.load_model(str(bundle))


def test_the_shipped_bundle_verifies_and_lists_what_it_holds():
    verify_bundle(default_model_dir())
    listed = json.loads((default_model_dir() / MANIFEST).read_text())["sha256"]
    assert {"model.safetensors", "captions.txt", "tagger.safetensors", "bundle.json"} <= set(listed)


def test_missing_or_unrecorded_files_are_named(tmp_path):
    bundle = make_tiny_model().save(tmp_path / "m")
    verify_bundle(bundle)
    (bundle / "captions.txt").unlink()
    with pytest.raises(ModelError, match="captions.txt: missing"):
        verify_bundle(bundle)
    bundle = make_tiny_model().save(tmp_path / "m2")
    (bundle / "tags.txt").write_text("a tag dropped in later\n")  # not in the manifest
    with pytest.raises(ModelError, match="tags.txt: not recorded"):
        vsekit.load_model(str(bundle), backend="torch")


def test_torch_backend_names_a_truncated_weights_file_without_a_manifest(tmp_path):
    bundle = make_tiny_model().save(tmp_path / "m")
    (bundle / MANIFEST).unlink()  # a bundle from before manifests: read unverified
    f = bundle / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-64])
    with pytest.raises(ModelError, match="broken model bundle"):
        vsekit.load_model(str(bundle), backend="torch")


def test_a_damaged_expansion_is_named(tmp_path):
    bundle = make_tiny_model().save(tmp_path / "m")
    write_expansion(bundle, ["zebra"], np.zeros((1, 8), np.float32), {"method": "test"})
    vsekit.load_model(str(bundle), backend="torch")  # as written: fine
    f = bundle / "expansion.safetensors"
    f.write_bytes(_flip(f.read_bytes()))
    with pytest.raises(ModelError, match="expansion.safetensors: missing, damaged or edited"):
        vsekit.load_model(str(bundle), backend="torch")


def test_cli_names_the_damaged_file_in_one_line(tmp_path, capsys):
    from vsekit.cli import main

    bundle = _linked_copy(default_model_dir(), tmp_path / "m")
    f = bundle / "tagger.safetensors"
    _replace(f, f.read_bytes()[:1000])
    photo = tmp_path / "p.jpg"
    from tests.conftest import write_image

    write_image(photo)
    assert main(["annotate", str(photo), "--model", str(bundle)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tagger.safetensors: damaged or edited" in err[0]


@pytest.mark.parametrize("name", ["onnx.json", "expansion.json", MANIFEST])
def test_a_json_file_damaged_into_invalid_json_is_named_with_the_fix(tmp_path, name, capsys):
    """Files the manifest does not cover (written later, by setup) are parsed with a
    file-level message too, not the parser's text alone."""
    from vsekit.cli import main

    bundle = _linked_copy(default_model_dir(), tmp_path / "m")
    f = bundle / name
    _replace(f, f.read_bytes()[:-7])  # cut inside the object
    with pytest.raises(
        ModelError, match=rf"{name}: (damaged|unreadable).*(reinstall|rebuild|re-create)"
    ):
        vsekit.load_model(str(bundle))
    assert main(["model", "info", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err
