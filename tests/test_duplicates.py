"""Duplicate groups: exact copies by content hash, then the two stages (perceptual hash,
embedding) against naive all-pairs references; the hash recorded at index time and
backfilled; the CLI and the service."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.test_index import CountingEmbedder
from vsekit.index import Collection
from vsekit.index.duplicates import (
    CANDIDATE_DISTANCE,
    CONFIRM_COSINE,
    COPY_FLOOR,
    CROP_DISTANCE,
    HASH_DISTANCE,
    find_duplicates,
    near_pairs,
    pairs_of,
)
from vsekit.index.phash import (
    CROP_KEEP,
    CROPS,
    crop_distances,
    crop_hashes,
    crops_array,
    hash_array,
    hash_distances,
    hash_pairs,
    image_hash,
)
from vsekit.media.images import load_image


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


def _hex(v: int) -> str:
    return f"{v:016x}"


@pytest.mark.parametrize("block", [1, 4, 1000])
def test_hash_pairs_equal_all_pairs(block):
    rng = np.random.default_rng(3)
    base = [int(x) for x in rng.integers(0, 2**63, 10, dtype=np.int64)]
    vals = base + [b ^ (1 << int(k)) ^ (1 << 40) for b, k in zip(base[:6], range(6), strict=True)]
    hashes = [_hex(v) for v in vals] + [None, ""]  # unknown hashes pair with nothing
    for t in (0, 2, 20, 40):
        want = {(i, j, bin(vals[i] ^ vals[j]).count("1")) for i in range(len(vals))
                for j in range(i + 1, len(vals))
                if bin(vals[i] ^ vals[j]).count("1") <= t}  # fmt: skip
        assert set(zip(*(x.tolist() for x in hash_pairs(hashes, t, block)), strict=True)) == want
    d = hash_distances(hashes, hashes)
    assert d[0, 10] == 2 and d[0, 0] == 0 and d[0, -1] == 65 and d[-2, -2] == 65


def _photo(seed: int, size=(96, 72)) -> Image.Image:
    """A smooth random "photo": low-frequency noise upsampled (hashes see structure)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)
    return Image.fromarray(small).resize(size, Image.BICUBIC)


def test_image_hash_sees_copies_and_tells_photos_apart(tmp_path):
    im = _photo(0)
    h = image_hash(im)
    assert len(h) == 16 and int(h, 16) >= 0
    im.resize((48, 36), Image.LANCZOS).save(tmp_path / "half.jpg", quality=40)
    copy = image_hash(load_image(tmp_path / "half.jpg"))
    others = [image_hash(_photo(s)) for s in range(1, 8)]
    assert hash_distances([h], [copy])[0, 0] <= HASH_DISTANCE
    assert hash_distances([h], others).min() > HASH_DISTANCE


def test_pairs_of_applies_both_stages_as_documented():
    """Every rule against a naive reference, on hand-made hashes and embeddings."""
    rng = np.random.default_rng(5)
    n = 40
    vals = [int(x) for x in rng.integers(0, 2**63, n, dtype=np.int64)]
    # hashes near one another: flip k bits of the first photo's
    flips = (0, 2, HASH_DISTANCE, HASH_DISTANCE + 1, CANDIDATE_DISTANCE, CANDIDATE_DISTANCE + 1,
             3, 5, 7, 15, 30)  # fmt: skip
    for j, k in zip(range(1, 12), flips, strict=True):
        vals[j] = vals[0] ^ sum(1 << int(b) for b in rng.choice(64, k, replace=False))
    hashes = [_hex(v) for v in vals]
    hashes[7] = None  # no hash: the embedding alone
    emb = rng.normal(size=(n, 16))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    lo = COPY_FLOOR + 0.05  # over the floor, under the confirming cosine
    target = {1: COPY_FLOOR - 0.1, 2: lo, 3: lo, 4: lo, 5: CONFIRM_COSINE + 0.01, 6: 0.95,
              7: 0.97, 8: CONFIRM_COSINE - 0.05, 9: 0.99, 10: CONFIRM_COSINE - 0.02,
              11: 0.2}  # fmt: skip
    for j, c in target.items():  # emb[j] at cosine c to emb[0]
        o = emb[j] - (emb[j] @ emb[0]) * emb[0]
        emb[j] = c * emb[0] + np.sqrt(1 - c * c) * o / np.linalg.norm(o)
    emb = emb.astype(np.float32)
    t = 0.96
    assert COPY_FLOOR + 0.05 < CONFIRM_COSINE < 0.95 < t  # the cases below need it
    got = {(i, j): d for i, j, _, d in pairs_of(hashes, emb, threshold=t)}
    want = set()
    d = hash_distances(hashes, hashes)
    for i in range(n):
        for j in range(i + 1, n):
            c = float(emb[i] @ emb[j])
            hd = int(d[i, j])
            if ((hd <= HASH_DISTANCE and c >= COPY_FLOOR)
                    or (hd <= CANDIDATE_DISTANCE and c >= CONFIRM_COSINE) or c >= t):  # fmt: skip
                want.add((i, j))
    assert set(got) == want
    # the cases the stages exist for
    assert (0, 1) not in got  # hash alone, but the embeddings disagree: a collision
    assert got[(0, 2)] == 2 and got[(0, 3)] == HASH_DISTANCE  # copies by the hash
    assert (0, 4) not in got  # a hash candidate the embedding does not confirm
    assert (0, 5) in got  # a candidate confirmed
    assert (0, 6) not in got  # past the candidate distance, under the cosine
    assert got[(0, 7)] is None  # no hash: the embedding alone
    assert (0, 9) in got and (0, 11) not in got


def test_crop_distances_equal_the_naive_minimum():
    rng = np.random.default_rng(3)
    k = len(CROPS)
    full = [int(x) for x in rng.integers(0, 2**63, 9, dtype=np.int64)]
    crops = [[int(x) for x in rng.integers(0, 2**63, k, dtype=np.int64)] for _ in full]
    crops[2][3] = full[5] ^ 0b1011  # photo 5 is photo 2's fourth crop, 3 bits off
    texts = ["".join(_hex(v) for v in c) for c in crops]
    texts[7] = None  # no crop hashes: compared through the other's crops only
    fa, _ = hash_array([_hex(v) for v in full])
    ca, has = crops_array(texts)
    assert not has[7] and has.sum() == 8
    d = crop_distances(fa, ca, fa, ca, has, has)
    for i in range(9):
        for j in range(9):
            ways = [bin(full[i] ^ c).count("1") for c in crops[j]] if has[j] else []
            ways += [bin(c ^ full[j]).count("1") for c in crops[i]] if has[i] else []
            assert d[i, j] == (min(ways) if ways else 255), (i, j)
    assert d[2, 5] == d[5, 2] == 3


def test_pairs_of_crop_stage_against_the_reference():
    """The crop stage: one photo's whole hash within CROP_DISTANCE of a crop hash of
    the other, over the floor; nothing else changes."""
    rng = np.random.default_rng(8)
    n = 8
    full = [int(x) for x in rng.integers(0, 2**63, n, dtype=np.int64)]
    crops = [[int(x) for x in rng.integers(0, 2**63, len(CROPS), dtype=np.int64)] for _ in full]

    def near(v: int, k: int) -> int:
        return v ^ sum(1 << int(b) for b in rng.choice(64, k, replace=False))

    full[1] = near(crops[0][1], CROP_DISTANCE)  # 1: a corner crop of 0
    full[2] = near(crops[0][4], CROP_DISTANCE + 1)  # 2: just past it
    crops[3][0] = near(full[0], 1)  # 0 is the centre crop of 3
    full[4] = near(crops[0][2], 0)  # 4: exact crop hash, but the embeddings disagree
    hashes = [_hex(v) for v in full]
    texts = ["".join(_hex(v) for v in c) for c in crops]
    emb = rng.normal(size=(n, 16))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    for j, c in {1: 0.5, 2: 0.5, 3: 0.5, 4: COPY_FLOOR - 0.1}.items():
        o = emb[j] - (emb[j] @ emb[0]) * emb[0]
        emb[j] = c * emb[0] + np.sqrt(1 - c * c) * o / np.linalg.norm(o)
    emb = emb.astype(np.float32)
    got = {(i, j): d for i, j, _, d in pairs_of(hashes, emb, crops=texts)}
    assert got[(0, 1)] == CROP_DISTANCE and got[(0, 3)] == 1
    assert (0, 2) not in got and (0, 4) not in got
    # without crop hashes the crop stage is off; with them, whole-hash pairs stay
    assert (0, 1) not in {(i, j) for i, j, _, _ in pairs_of(hashes, emb)}
    base = {(i, j) for i, j, _, _ in pairs_of(hashes, emb)}
    assert base <= set(got)


def test_real_photos_crop_hashes_find_90pc_crops(flickr8k_root):
    """16 Flickr8k photos cropped to 90% of each side from the centre and from each
    corner, written as JPEG and decoded as `vse index` decodes them: each is within
    CROP_DISTANCE of its photo's crop hashes; different photos are not."""
    import io

    paths = sorted((flickr8k_root / "images").glob("*.jpg"))[:16]
    full = [image_hash(load_image(p, 512)) for p in paths]
    crops = [crop_hashes(load_image(p, 512)) for p in paths]
    fa, _ = hash_array(full)
    ca, _ = crops_array(crops)
    worst = 0
    for i, p in enumerate(paths):
        im = Image.open(p).convert("RGB")
        w, h = im.size
        cw, ch = round(w * CROP_KEEP), round(h * CROP_KEEP)
        for fx, fy in CROPS.values():
            left, top = round((w - cw) * fx), round((h - ch) * fy)
            buf = io.BytesIO()
            im.crop((left, top, left + cw, top + ch)).save(buf, "JPEG", quality=90)
            buf.seek(0)
            cut = load_image(buf, 512)
            fb, _ = hash_array([image_hash(cut)])
            cb, _ = crops_array([crop_hashes(cut)])
            worst = max(worst, int(crop_distances(fa[i : i + 1], ca[i : i + 1], fb, cb)[0, 0]))
    assert worst <= CROP_DISTANCE
    between = crop_distances(fa, ca, fa, ca)[np.triu_indices(len(paths), 1)]
    assert between.min() > CROP_DISTANCE


class ThumbEmbedder(CountingEmbedder):
    """Unit vectors of a photo's centred 8x6 colour thumbnail: copies of one photo land
    close together, different random photos far apart (unlike mean colours)."""

    def __call__(self, images) -> np.ndarray:
        self.seen += len(images)
        out = []
        for im in images:
            v = np.asarray(im.convert("RGB").resize((8, 6), Image.BOX), np.float32).ravel()
            v -= v.mean()
            out.append(v / np.linalg.norm(v))
        return np.asarray(out, np.float32)


INFO = {"name": "thumbs", "fingerprint": "7b0b5", "dim": 144, "similarity": "cosine"}


@pytest.fixture
def dup_index(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(6):  # distinct photos
        _photo(10 + i).save(photos / f"p{i}.png")
    shutil.copy(photos / "p0.png", photos / "copy_of_p0.png")  # exact
    (photos / "sub").mkdir()
    shutil.copy(photos / "p0.png", photos / "sub" / "p0.png")  # exact, another folder
    # a half-size re-encoded copy: the hash stage
    _photo(11).resize((48, 36), Image.LANCZOS).save(photos / "sub" / "p1_small.jpg", quality=60)
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(photos, ThumbEmbedder(), progress=False)
    return coll


def test_hash_recorded_at_index_time(dup_index):
    snap = dup_index.snapshot
    meta = snap.photo_meta
    for p, h, c in zip(snap.paths, meta["phash"], meta["phash_crops"], strict=True):
        assert h == image_hash(load_image(p)) and c == crop_hashes(load_image(p))


def test_exact_and_near_groups(dup_index):
    snap = dup_index.snapshot
    groups = find_duplicates(snap)
    kinds = [(g.kind, sorted(p.rsplit("/", 1)[-1] for p in g.paths)) for g in groups]
    assert ("exact", ["copy_of_p0.png", "p0.png", "p0.png"]) in kinds
    assert ("near", ["p1.png", "p1_small.jpg"]) in kinds
    assert len(groups) == 2  # the distinct photos stay apart
    near = next(g for g in groups if g.kind == "near")
    assert near.hash_distance is not None and near.hash_distance <= HASH_DISTANCE
    # the reference: every pair the two stages accept joins the same group
    emb = np.asarray(snap.emb[snap.rows])
    sha = snap.photo_meta["sha256"]
    group_of = {p: k for k, g in enumerate(groups) for p in g.paths}
    for i, j, _, _ in pairs_of(snap.photo_meta["phash"], emb):
        if sha[i] == sha[j]:
            continue  # copies: the exact group, represented once among the near ones
        assert group_of.get(snap.paths[i]) == group_of.get(snap.paths[j]) is not None
    assert find_duplicates(snap, kinds="exact") == [g for g in groups if g.kind == "exact"]
    with pytest.raises(ValueError, match="hash distance"):
        find_duplicates(snap, hash_distance=40)


@pytest.mark.parametrize("column", ["phash", "phash_crops"])
def test_hashes_backfilled_for_an_index_from_before_them(dup_index, tmp_path, column):
    """An index whose photo_meta has no phash column: the writer adds it, and the next
    update hashes every file (no file re-embedded)."""
    meta = dup_index.snapshot.photo_meta
    want = {c: dict(zip(dup_index.snapshot.paths, meta[c], strict=True))
            for c in ("phash", "phash_crops")}  # fmt: skip
    path = dup_index.path
    dup_index.close()
    db = sqlite3.connect(path / "index.sqlite")
    db.execute("ALTER TABLE photo_meta DROP COLUMN phash_crops")
    if column == "phash":
        db.execute("ALTER TABLE photo_meta DROP COLUMN phash")
    db.commit()
    db.close()
    old = Collection(path)  # read before the migration: no hashes, no error
    assert set(old.snapshot.photo_meta[column]) == {None}
    old.close()
    coll = Collection(path, INFO)
    emb = ThumbEmbedder()
    coll.update(tmp_path / "photos", emb, progress=False)
    assert emb.seen == 0
    snap = coll.snapshot
    for c in ("phash", "phash_crops"):
        assert dict(zip(snap.paths, snap.photo_meta[c], strict=True)) == want[c]


def test_backfill_keeps_recorded_hashes_and_retries_missing_files(dup_index, tmp_path):
    """An index from before crop hashes whose photos are partly away (a drive unplugged)
    at the upgrade: the whole-photo hashes it has are kept, the photos that are there get
    their crop hashes, the absent ones keep NULL and get them once they are back."""
    from vsekit.index.phash import backfill_hashes

    snap = dup_index.snapshot
    want = dict(zip(snap.paths, snap.photo_meta["phash"], strict=True))
    away = next(p for p in snap.paths if p.endswith("p3.png"))
    db = sqlite3.connect(dup_index.path / "index.sqlite")
    db.execute("UPDATE photo_meta SET phash_crops = NULL")
    db.commit()
    moved = tmp_path / "away.png"
    shutil.move(away, moved)
    assert backfill_hashes(db, load_image) == len(snap.paths) - 1
    rows = dict(db.execute("SELECT f.path, m.phash FROM files f JOIN photo_meta m "
                           "ON m.file_id = f.id").fetchall())  # fmt: skip
    assert rows == want  # no recorded hash rewritten, none blanked
    crops = dict(db.execute("SELECT f.path, m.phash_crops FROM files f JOIN photo_meta m "
                            "ON m.file_id = f.id").fetchall())  # fmt: skip
    assert crops[away] is None and all(c for p, c in crops.items() if p != away)
    shutil.move(moved, away)
    assert backfill_hashes(db, load_image) == 1
    left = db.execute("SELECT COUNT(*) FROM photo_meta WHERE phash_crops IS NULL").fetchone()
    assert left == (0,)
    db.close()


# -- actions ---------------------------------------------------------------------------


def _files(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_keep_rules():
    from vsekit.index.dedupe import Member, choose_keep

    a = Member(1, "/r/a.jpg", pixels=100, bytes=50, taken="2020-01-01T00:00:00")
    b = Member(2, "/r/b.jpg", pixels=400, bytes=40, taken="2021-01-01T00:00:00")
    c = Member(3, "/r/c.jpg", pixels=400, bytes=60, taken=None)
    d = Member(4, "/r/d.jpg", pixels=400, bytes=60, taken="2022-01-01T00:00:00")
    assert choose_keep([a, b, c, d], "best").id == 4  # pixels, bytes, then dated first
    assert choose_keep([a, b], "best").id == 2
    assert choose_keep([a, b], "largest").id == 1
    assert choose_keep([a, b, c, d], "oldest").id == 1
    with pytest.raises(ValueError, match="keep"):
        choose_keep([a], "newest")


def test_dry_run_apply_and_undo(dup_index, tmp_path):
    from vsekit.index.dedupe import apply_plan, plan_moves, undo

    photos, out = tmp_path / "photos", tmp_path / "out"
    out.mkdir()
    (out / "sub").mkdir()
    (out / "sub" / "p1.png").write_bytes(b"someone else's file")  # never overwritten
    before = _files(photos)
    snap = dup_index.snapshot
    plan = plan_moves(snap, find_duplicates(snap), "best", out, dup_index.roots())
    assert _files(photos) == before and _files(out) == {"sub/p1.png"}  # a dry run
    assert len(plan.groups) == 2 and plan.n_moves == 3
    kept = {next(m.path for m in g.members if m.id == g.keep) for g in plan.groups}
    # the larger of p1 and its half-size copy; among identical copies, the oldest file
    assert str(photos / "p1.png") in kept
    moved = {s: d for g in plan.groups for _, s, d in g.moves}
    assert str(photos / "sub" / "p1_small.jpg") in moved
    apply_plan(plan, dup_index)
    assert plan.moved == 3 and not plan.failed
    for src, dst in moved.items():  # moved under their relative paths, nothing lost
        assert not (tmp_path / src).exists()
        assert dst.startswith(str(out) + "/")
    assert _files(out) >= {"sub/p1.png", "sub/p1_small.jpg"}
    assert (out / "sub" / "p1.png").read_bytes() == b"someone else's file"
    assert len(_files(photos)) == len(before) - 3
    # the index no longer has them, and has no duplicates left
    snap = dup_index.snapshot
    assert set(snap.paths).isdisjoint(moved) and len(snap) == len(before) - 3
    assert find_duplicates(snap) == []
    # the undo list, then undo
    text = Path(plan.undo_file).read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines(keepends=True) if not ln.startswith("#")]
    assert {tuple(ln.rstrip("\n").split("\t")) for ln in lines} == {(d, s) for s, d in
                                                                    moved.items()}  # fmt: skip
    rep = undo(plan.undo_file)
    assert rep.restored == 3 and not rep.skipped
    assert _files(photos) == before
    assert undo(plan.undo_file).skipped  # twice: nothing there to move back
    dup_index.update(photos, ThumbEmbedder(), progress=False)  # back in the index
    assert len(dup_index.snapshot) == len(before)


def test_plan_refuses_bad_destinations(dup_index, tmp_path):
    from vsekit.index.dedupe import DedupeError, plan_moves

    snap = dup_index.snapshot
    groups = find_duplicates(snap)
    roots = dup_index.roots()
    for bad, msg in ((tmp_path / "photos" / "sub", "inside the indexed folder"),
                     (tmp_path / "missing", "no such folder"), (None, "give the folder"),
                     (tmp_path / "photos" / "p0.png", "not a folder")):  # fmt: skip
        with pytest.raises(DedupeError, match=msg) as e:
            plan_moves(snap, groups, "best", bad, roots)
        assert "\n" not in str(e.value) and str(e.value).startswith("move_to")


def test_cli(dup_index, tmp_path, capsys):
    from vsekit.cli import main

    idx, photos, out = str(dup_index.path), tmp_path / "photos", tmp_path / "out"
    out.mkdir()
    before = _files(photos)
    assert main(["duplicates", "--index", idx, "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)
    assert {g["kind"] for g in groups} == {"exact", "near"}
    assert main(["duplicates", "--index", idx, "--threshold", "2"]) == 2
    assert "threshold" in capsys.readouterr().err
    assert main(["duplicates", "--index", idx, "--move-to", str(out)]) == 0
    text = capsys.readouterr().out
    assert "would move" in text and "dry run: 3 files would be moved" in text
    assert _files(photos) == before and _files(out) == set()
    for argv, msg in (
        (["--move-to", str(photos)], "inside the indexed folder"),
        (["--move-to", str(tmp_path / "nope")], "no such folder"),
        (["--apply"], "--move-to"),
    ):
        assert main(["duplicates", "--index", idx, *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and "\n" not in err
    assert main(["duplicates", "--index", idx, "--keep", "largest", "--move-to", str(out),
                 "--apply", "--json"]) == 0  # fmt: skip
    plan = json.loads(capsys.readouterr().out)
    assert plan["applied"] and plan["moved"] == 3 and plan["keep"] == "largest"
    assert len(_files(photos)) == len(before) - 3
    assert main(["duplicates", "--undo", plan["undo_file"]]) == 0
    assert "3 files moved back" in capsys.readouterr().out
    assert _files(photos) == before
    assert main(["duplicates", "--undo", str(tmp_path / "no-such-list.tsv")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.fixture
def client_for(dup_index):
    from tests.conftest import make_tiny_model
    from vsekit.serve.app import create_app
    from vsekit.serve.guard import GuardConfig

    model = make_tiny_model()
    model.describe = lambda name: INFO  # the index's model identity, for the service

    def make(token=None):
        guard = GuardConfig(token=token)
        return TestClient(create_app(dup_index, model, guard=guard), base_url="http://127.0.0.1")

    return make


def test_service_lists_groups_with_keep(dup_index, client_for):
    client = client_for()
    groups = find_duplicates(dup_index.snapshot)
    r = client.get("/duplicates")
    assert r.status_code == 200
    body = r.json()
    got = [(g["kind"], len(g["files"])) for g in body["groups"]]
    assert got == [(g.kind, len(g.ids)) for g in groups]
    assert all(not f["path"].startswith("/") for g in body["groups"] for f in g["files"])
    for g in body["groups"]:
        assert g["keep"] in [f["id"] for f in g["files"]]
    near = next(g for g in body["groups"] if g["kind"] == "near")
    kept = next(f for f in near["files"] if f["id"] == near["keep"])
    assert kept["path"].endswith("p1.png")  # the larger photo, not its half-size copy
    assert client.get("/duplicates", params={"threshold": 0.1}).status_code == 422


def test_service_move(dup_index, client_for, tmp_path):
    photos, out = tmp_path / "photos", tmp_path / "out"
    out.mkdir()
    before = _files(photos)
    client = client_for(token="s3cret")
    auth = {"Authorization": "Bearer s3cret"}
    body = {"keep": "best", "move_to": str(out), "apply": False}
    assert client.post("/duplicates/move", json=body).status_code == 401  # no token
    r = client.post("/duplicates/move", json=body, headers=auth)
    assert r.status_code == 200, r.text
    plan = r.json()
    assert not plan["applied"] and plan["undo_file"] is None and plan["moves"] == 3
    assert _files(photos) == before  # a dry run
    listed = client.get("/duplicates", headers=auth).json()["groups"]
    assert sorted(g["keep"] for g in plan["groups"]) == sorted(g["keep"] for g in listed)
    for g in plan["groups"]:
        assert g["keep"] not in [m["id"] for m in g["move"]]
        assert len(g["move"]) == len(g["files"]) - 1
    # bad input: one-line errors naming the field
    for bad, status in (({"move_to": str(photos / "sub")}, 400), ({"move_to": "out"}, 400),
                        ({"move_to": str(tmp_path / "missing")}, 400), ({}, 422),
                        ({"move_to": str(out), "keep": "newest"}, 422),
                        ({"move_to": str(out), "delete": True}, 422)):  # fmt: skip
        r = client.post("/duplicates/move", json=bad, headers=auth)
        assert r.status_code == status, (bad, r.text)
        assert "\n" not in r.json()["error"]
    r = client.post("/duplicates/move", content=json.dumps({**body, "apply": True}),
                    headers={**auth, "Content-Type": "text/plain"})  # fmt: skip
    assert r.status_code in (415, 422) and _files(photos) == before
    r = client.post("/duplicates/move", json={**body, "apply": True}, headers=auth)
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["applied"] and done["moved"] == 3 and done["undo_file"].startswith(str(out))
    assert len(_files(photos)) == len(before) - 3
    assert client.get("/duplicates", headers=auth).json()["groups"] == []


def test_real_photos_hash_their_copies_close_and_each_other_far(flickr8k_root, tmp_path):
    """A small real-data slice: 16 Flickr8k photos, their half-size and JPEG quality-30
    copies (decoded from files, as `vse index` decodes them) are within the copy
    distance; the photos themselves are not."""
    import io

    paths = sorted((flickr8k_root / "images").glob("*.jpg"))[:16]
    hashes, copies = [], []
    for p in paths:
        im = Image.open(p).convert("RGB")
        hashes.append(image_hash(load_image(p)))
        for f in (lambda x: x.resize((x.width // 2, x.height // 2), Image.LANCZOS), lambda x: x):
            buf = io.BytesIO()
            f(im).save(buf, "JPEG", quality=30)
            buf.seek(0)
            copies.append(image_hash(load_image(buf)))
    d = hash_distances(hashes, copies)
    own = np.repeat(np.arange(len(paths)), 2)
    assert (d[own, np.arange(len(copies))] <= HASH_DISTANCE).all()
    between = hash_distances(hashes, hashes)[np.triu_indices(len(paths), 1)]
    assert between.min() > HASH_DISTANCE


def test_undo_never_overwrites_and_a_busy_index_moves_nothing(dup_index, tmp_path):
    from vsekit.fsio import exclusive_lock
    from vsekit.index.dedupe import apply_plan, plan_moves, undo
    from vsekit.index.files import LOCK_NAME
    from vsekit.index.schema import CollectionError

    photos, out = tmp_path / "photos", tmp_path / "out"
    out.mkdir()
    before = _files(photos)
    snap = dup_index.snapshot
    plan = plan_moves(snap, find_duplicates(snap), "best", out, dup_index.roots())
    busy = exclusive_lock(dup_index.path / LOCK_NAME)  # another writer holds the index
    with busy, pytest.raises(CollectionError, match="another process"):
        apply_plan(plan, dup_index, wait=False)
    assert _files(photos) == before and _files(out) == set()
    apply_plan(plan, dup_index)
    src, dst = next((s, d) for g in plan.groups for _, s, d in g.moves)
    Path(src).write_bytes(b"a new file where the moved one was")
    rep = undo(plan.undo_file)
    assert rep.restored == 2 and [o for o, _ in rep.skipped] == [src]
    assert Path(src).read_bytes() == b"a new file where the moved one was"
    assert Path(dst).is_file()  # the moved file is still where it was moved to


def test_move_across_file_systems_copies_then_removes(tmp_path, monkeypatch):
    """Where a hard link cannot be made (another file system), the file is copied with
    its times, then removed; an existing destination is never overwritten."""
    import errno
    import os

    from vsekit.index.dedupe import move_no_overwrite

    def no_link(*a, **k):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    src = tmp_path / "a" / "p.jpg"
    src.parent.mkdir()
    src.write_bytes(b"photo")
    os.utime(src, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    monkeypatch.setattr(os, "link", no_link)
    dst = tmp_path / "out" / "a" / "p.jpg"
    move_no_overwrite(str(src), str(dst))
    assert not src.exists() and dst.read_bytes() == b"photo"
    assert dst.stat().st_mtime_ns == 1_600_000_000_000_000_000
    src.write_bytes(b"another")
    with pytest.raises(FileExistsError):
        move_no_overwrite(str(src), str(dst))
    assert src.read_bytes() == b"another" and dst.read_bytes() == b"photo"
