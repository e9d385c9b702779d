"""Duplicate groups: exact copies by content hash, near-duplicates by cosine, against a
naive all-pairs reference; the CLI and the service."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.test_index import INFO, CountingEmbedder
from vsekit.index import Collection
from vsekit.index.duplicates import find_duplicates, near_pairs


def naive_pairs(emb: np.ndarray, t: float) -> set[tuple[int, int]]:
    n = len(emb)
    return {(i, j) for i in range(n) for j in range(i + 1, n) if float(emb[i] @ emb[j]) >= t}


@pytest.mark.parametrize("block", [1, 3, 7, 100])
def test_near_pairs_equal_all_pairs(block):
    rng = np.random.default_rng(0)
    base = rng.normal(size=(12, 8))
    emb = np.concatenate([base, base[:5] + 0.05 * rng.normal(size=(5, 8))])
    emb = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    for t in (0.5, 0.9, 0.99):  # (near_pairs itself takes any threshold)
        got = {(i, j) for i, j, _ in near_pairs(emb, t, block)}
        assert got == naive_pairs(emb, t)


@pytest.fixture
def dup_index(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(1)
    for i in range(6):  # distinct photos: different colours
        Image.new("RGB", (32, 24), tuple(int(c) for c in rng.integers(0, 255, 3))).save(
            photos / f"p{i}.png"
        )
    shutil.copy(photos / "p0.png", photos / "copy_of_p0.png")  # exact
    (photos / "sub").mkdir()
    shutil.copy(photos / "p0.png", photos / "sub" / "p0.png")  # exact, another folder
    Image.open(photos / "p1.png").save(photos / "p1_again.jpg", quality=95)  # near
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(photos, CountingEmbedder(), progress=False)
    return coll


def test_exact_and_near_groups(dup_index):
    groups = find_duplicates(dup_index.snapshot, threshold=0.999)
    kinds = [(g.kind, sorted(p.rsplit("/", 1)[-1] for p in g.paths)) for g in groups]
    assert ("exact", ["copy_of_p0.png", "p0.png", "p0.png"]) in kinds
    assert ("near", ["p1.png", "p1_again.jpg"]) in kinds
    # the naive reference: every pair over the threshold joins the same group
    snap = dup_index.snapshot
    emb = np.asarray(snap.emb[snap.rows])
    sha = snap.photo_meta["sha256"]
    group_of = {p: k for k, g in enumerate(groups) for p in g.paths}
    for i, j in naive_pairs(emb, 0.999):
        if sha[i] == sha[j]:
            continue  # copies: the exact group, represented once among the near ones
        assert group_of.get(snap.paths[i]) == group_of.get(snap.paths[j]) is not None
    assert find_duplicates(snap, 0.999, "exact") == [g for g in groups if g.kind == "exact"]


def test_cli_and_service(dup_index, capsys):
    from tests.conftest import make_tiny_model
    from vsekit.cli import main
    from vsekit.serve.app import create_app

    assert main(["duplicates", "--index", str(dup_index.path), "--threshold", "0.999",
                 "--json"]) == 0  # fmt: skip
    groups = json.loads(capsys.readouterr().out)
    assert {g["kind"] for g in groups} == {"exact", "near"}
    assert main(["duplicates", "--index", str(dup_index.path), "--threshold", "2"]) == 2
    assert "threshold" in capsys.readouterr().err
    model = make_tiny_model()
    model.describe = lambda name: INFO  # the index's model identity, for the service
    client = TestClient(create_app(dup_index, model), base_url="http://127.0.0.1")
    r = client.get("/duplicates", params={"threshold": 0.999})
    assert r.status_code == 200
    got = [(g["kind"], len(g["files"])) for g in r.json()["groups"]]
    assert got == [(g["kind"], len(g["ids"])) for g in groups]
    assert all(not f["path"].startswith("/") for g in r.json()["groups"] for f in g["files"])
    assert client.get("/duplicates", params={"threshold": 0.1}).status_code == 422
