"""File formats and names: non-UTF-8 names indexed losslessly and searchable, formats
this installation cannot read reported once with the extra that reads them, and RAW
files read through their embedded preview."""

from __future__ import annotations

import io
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import make_tiny_model, write_image
from tests.test_index import INFO, CountingEmbedder
from vsekit.cli import main
from vsekit.index import Collection, model_info

LATIN1 = os.fsdecode(b"caf\xe9 \xff.png")  # not UTF-8: undecodable bytes as surrogates


@pytest.fixture
def odd_names(tmp_path):
    photos = tmp_path / "photos"
    write_image(photos / LATIN1, seed=1)
    write_image(photos / "plain.png", seed=2)
    return photos


def test_a_name_that_is_not_utf8_is_indexed_and_kept(odd_names, tmp_path):
    coll = Collection(tmp_path / "idx", INFO)
    rep = coll.update(odd_names, CountingEmbedder(), progress=False)
    assert rep.added == 2 and not rep.failed
    assert {Path(p).name for p in coll.paths} == {LATIN1, "plain.png"}
    emb = CountingEmbedder()
    rep = coll.update(odd_names, emb, progress=False)  # found again: the same bytes
    assert rep.unchanged == 2 and emb.seen == 0
    (odd_names / os.fsdecode(b"sub \xe9")).mkdir()
    os.rename(odd_names / LATIN1, odd_names / os.fsdecode(b"sub \xe9") / LATIN1)
    rep = coll.update(odd_names, emb, progress=False)
    assert rep.moved == 1 and emb.seen == 0
    with coll.open_file(int(coll.ids[0])) as fh:
        assert fh.read(4) == b"\x89PNG"


def test_it_is_searchable_shown_escaped_and_piped_as_bytes(odd_names, tmp_path, capsysbinary):
    model = make_tiny_model()
    bundle = model.save(tmp_path / "m")
    idx = tmp_path / "idx"
    assert main(["index", str(odd_names), "--index", str(idx), "--model", str(bundle),
                 "--quiet"]) == 0  # fmt: skip
    capsysbinary.readouterr()
    # --no-stack: the tiny random model embeds every photo alike (all would be one stack)
    assert main(["search", "a dog", "--index", str(idx), "--k", "2", "--no-stack"]) == 0
    out = capsysbinary.readouterr().out
    assert b"caf\\xe9 \\xff.png" in out  # escaped for reading
    assert main(["search", "a dog", "--index", str(idx), "--k", "2", "-f"]) == 0
    raw = capsysbinary.readouterr().out.splitlines()
    assert os.fsencode(odd_names / LATIN1) in raw  # the bytes, for xargs
    coll = Collection(idx, model_info(model, "tiny"))
    client = TestClient(create_app_for(coll, model), base_url="http://127.0.0.1")
    r = client.get("/search", params={"q": "a dog", "k": 2})
    assert r.status_code == 200
    hit = next(h for h in r.json()["results"] if "caf" in h["name"])
    assert hit["name"] == "caf\\xe9 \\xff.png"
    assert client.get(hit["image"]).status_code == 200


def create_app_for(coll, model):
    from vsekit.serve.app import create_app

    return create_app(coll, model)


def test_unreadable_formats_are_reported_once_with_their_extra(tmp_path, monkeypatch, capsys):
    import vsekit.index.scan as scan

    monkeypatch.setattr(scan, "UNREADABLE", {".heic": "heic", ".cr2": "raw", ".nef": "raw"})
    photos = tmp_path / "p"
    write_image(photos / "ok.png")
    for n in ("a.heic", "b.HEIC", "c.cr2", "d.nef", "sub/e.heic"):
        (photos / n).parent.mkdir(parents=True, exist_ok=True)
        (photos / n).write_bytes(b"x")
    skipped: list = []
    found = list(scan.scan_media(photos, skipped))
    assert [Path(p).name for p, _, _ in found] == ["ok.png"]
    assert skipped == [
        (f"3 HEIC/HEIF photos under {photos}", "install vsekit[heic] to read them"),
        (f"2 camera RAW files under {photos}", "install vsekit[raw] to read them"),
    ]


def test_raw_files_are_read_through_their_preview(tmp_path, monkeypatch):
    """No RAW sample ships with the tests: a stand-in for rawpy hands over an embedded
    JPEG preview, which then goes through the ordinary decode (pixel budget included)."""
    from vsekit.media import images

    preview = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 200, 30)).save(preview, "JPEG")
    fake = types.ModuleType("rawpy")

    class Raw:
        def __init__(self, fh):
            assert fh.read(4) == b"RAW!"

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def extract_thumb(self):
            return types.SimpleNamespace(format="jpeg", data=preview.getvalue())

    fake.imread = Raw
    fake.ThumbFormat = types.SimpleNamespace(JPEG="jpeg")
    fake.LibRawError = fake.LibRawNoThumbnailError = type("E", (Exception,), {})
    fake.LibRawUnsupportedThumbnailError = fake.LibRawError
    monkeypatch.setitem(sys.modules, "rawpy", fake)
    (tmp_path / "x.nef").write_bytes(b"RAW!rest")
    im = images.load_image(tmp_path / "x.nef")
    assert im.size == (64, 48)
    assert np.asarray(im)[20, 20, 1] > 150  # the preview's green
    monkeypatch.setitem(sys.modules, "rawpy", None)  # the extra not installed
    with pytest.raises(images.ImageError, match=r"install vsekit\[raw\]"):
        images.load_image(tmp_path / "x.nef")


def test_duplicates_of_names_that_are_not_utf8_are_json(odd_names, tmp_path):
    import shutil

    shutil.copy(odd_names / LATIN1, odd_names / os.fsdecode(b"copy \xe9.png"))
    model = make_tiny_model()
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    coll.update(odd_names, model.encode_image, progress=False)
    client = TestClient(create_app_for(coll, model), base_url="http://127.0.0.1")
    r = client.get("/duplicates", params={"kind": "exact"})
    assert r.status_code == 200
    (group,) = r.json()["groups"]
    assert sorted(f["path"].rsplit("/", 1)[-1] for f in group["files"]) == [
        "caf\\xe9 \\xff.png",
        "copy \\xe9.png",
    ]
