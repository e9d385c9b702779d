"""Reliability round 3: one file's odd metadata costs only that file, a changed file is
never served from its old embedding, and every CLI failure is one readable line."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import write_image
from tests.test_faults import photos_in
from tests.test_index import INFO, CountingEmbedder
from vsekit.fsio import stored_ns
from vsekit.index import Collection
from vsekit.index.scan import shown

YEAR_2400 = 13_569_465_600  # 2400-01-01 in seconds since 1970: past SQLite's INTEGER in ns
YEAR_2500 = 16_725_225_600


def test_a_file_dated_after_2262_is_indexed_with_the_rest(tmp_path):
    folder = photos_in(tmp_path / "p", 5)
    odd = folder / "002.png"
    os.utime(odd, ns=(YEAR_2400 * 10**9, YEAR_2400 * 10**9))
    coll = Collection(tmp_path / "idx", INFO)
    rep = coll.update(folder, CountingEmbedder(), batch_size=5, progress=False)
    assert rep.added == 5 and not rep.failed
    pos = coll.paths.index(str(odd))
    assert coll.snapshot.stamps[pos][1] == stored_ns(YEAR_2400 * 10**9)
    assert coll.snapshot.photo_meta["taken"][pos].startswith("2400-")  # its real date
    again = coll.update(folder, CountingEmbedder(), progress=False)
    assert again.unchanged == 5  # the stored time compares equal: nothing re-embedded
    with coll.open_file(int(coll.ids[pos])) as fh:  # and the file is still served
        assert fh.read() == odd.read_bytes()
    # the same size with another far-future time: a change, not "unchanged" (clamped to
    # SQLite's end, both times were one)
    os.utime(odd, ns=(YEAR_2500 * 10**9,) * 2)
    rep = coll.update(folder, CountingEmbedder(), progress=False)
    assert rep.unchanged == 4 and rep.updated == 1


def _tiny(tmp_path) -> str:
    from tests.conftest import make_tiny_model

    return str(make_tiny_model(["a photo of a dog", "a red car"]).save(tmp_path / "bundle"))


def test_a_far_future_file_through_the_cli_is_indexed(tmp_path, capsys):
    from vsekit.cli import main

    folder = photos_in(tmp_path / "p", 3)
    os.utime(folder / "001.png", ns=(YEAR_2400 * 10**9,) * 2)
    idx = str(tmp_path / "idx")
    assert main(["index", str(folder), "--index", idx, "--model", _tiny(tmp_path)]) == 0
    assert "3 added" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["truncated", "random"])
def test_a_file_that_changed_and_became_unreadable_loses_its_old_row(tmp_path, damage):
    folder = photos_in(tmp_path / "p", 4)
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(folder, CountingEmbedder(), progress=False)
    victim = folder / "001.png"
    data = victim.read_bytes()
    victim.write_bytes(data[:40] if damage == "truncated" else os.urandom(len(data)))
    rep = coll.update(folder, CountingEmbedder(), progress=False)
    assert rep.dropped == 1 and len(rep.failed) == 1
    assert "dropped from the index" in rep.summary()
    assert str(victim) not in coll.paths and len(coll) == 3
    db = coll.db
    assert db.execute("SELECT COUNT(*) FROM photo_meta").fetchone()[0] == 3  # no old hash
    assert all(h.path != str(victim) for h in coll.search(coll.snapshot.emb[:3], 4)[0])
    again = coll.update(folder, CountingEmbedder(), progress=False)
    assert again.failed == [(str(victim), "unchanged since it failed")]
    write_image(victim, seed=77)  # readable again: indexed as new
    assert coll.update(folder, CountingEmbedder(), progress=False).added == 1


def test_duplicates_never_report_a_changed_file_by_its_old_hash(tmp_path):
    folder = photos_in(tmp_path / "p", 3)
    (folder / "copy.png").write_bytes((folder / "000.png").read_bytes())
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(folder, CountingEmbedder(), progress=False)
    hashes = [h for (h,) in coll.db.execute("SELECT sha256 FROM photo_meta")]
    assert len(hashes) - len(set(hashes)) == 1
    (folder / "copy.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(64))
    coll.update(folder, CountingEmbedder(), progress=False)
    hashes = [h for (h,) in coll.db.execute("SELECT sha256 FROM photo_meta")]
    assert len(hashes) == len(set(hashes)) == 3


def test_shown_keeps_one_name_on_one_line():
    assert shown("a\nb.jpg") == "a\\nb.jpg"
    assert shown("tab\there\r.jpg") == "tab\\there\\r.jpg"
    assert shown("esc\x1b[31m.jpg") == "esc\\x1b[31m.jpg"  # no terminal escapes either
    assert shown(os.fsdecode(b"caf\xe9.jpg")) == "caf\\xe9.jpg"
    assert shown("été.jpg") == "été.jpg"


def test_search_output_one_line_per_hit_and_json_paths_that_round_trip(tmp_path, capsys):
    import base64

    from vsekit.cli import main

    folder = tmp_path / "p"
    names = ["new\nline.png", os.fsdecode(b"caf\xe9.png"), "plain.png"]
    for i, n in enumerate(names):
        write_image(folder / n, seed=i)
    idx, model = str(tmp_path / "idx"), _tiny(tmp_path)
    assert main(["index", str(folder), "--index", idx, "--model", model]) == 0
    capsys.readouterr()

    # --no-stack: the tiny random model embeds every photo alike (all would be one stack)
    assert main(["search", "a photo", "--index", idx, "--model", model, "--k", "3",
                 "--no-stack"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and any(line.endswith("new\\nline.png") for line in lines)
    assert main(["search", "a photo", "--index", idx, "--model", model, "--k", "3",
                 "--json"]) == 0  # fmt: skip
    hits = json.loads(capsys.readouterr().out)
    got = {os.fsdecode(base64.b64decode(h["path_b64"])) if "path_b64" in h else h["path"]
           for h in hits}  # fmt: skip
    assert got == {str(folder / n) for n in names}
    assert sum("path_b64" in h for h in hits) == 1  # only the name that is not UTF-8


def test_an_unexpected_exception_is_one_line_without_a_traceback(tmp_path, capsys, monkeypatch):
    from vsekit import cli

    def boom(args):
        raise OverflowError("Python int too large to convert to SQLite INTEGER")

    args = cli.build_parser().parse_args(["index", str(tmp_path)])
    monkeypatch.setattr(cli, "build_parser", lambda plugins=True: _Fixed(args, boom))
    assert cli.main(["index", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("vse: internal error: OverflowError: Python int too large")


class _Fixed:
    def __init__(self, args, handler):
        args.handler = handler
        self.args = args

    def parse_args(self, argv):
        return self.args


def test_a_damaged_database_names_the_rebuild_and_what_is_kept(tmp_path, capsys):
    from vsekit.cli import main

    folder = photos_in(tmp_path / "p", 3)
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(folder, CountingEmbedder(), progress=False)
    coll.close()
    db = tmp_path / "idx" / "index.sqlite"
    raw = bytearray(db.read_bytes())
    raw[100:4096] = os.urandom(3996)  # the schema page: unreadable as a database
    db.write_bytes(bytes(raw))
    assert main(["search", "x", "--index", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--rebuild" in err and "photos are untouched" in err


def test_undecodable_bytes_in_an_error_are_shown_as_hex(tmp_path, capsys):
    from vsekit.cli import main

    missing = os.fsdecode(str(tmp_path).encode() + b"/no\xff-such")
    assert main(["index", missing, "--index", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert "\\xff" in err and "\\udcff" not in err


def test_malformed_exif_of_every_kind_costs_only_the_fields(tmp_path):
    from PIL import Image

    from vsekit.media.exif import mtime_text, read_meta

    cases = {
        "date-garbage": {306: "2019:13:45 99:99:99"},
        "date-bytes": {306: b"\xff\xfe\x00"},
        "make-surrogate": {271: "Cam\udcff"},
        "gps-short": {0x8825: {2: (1.0,), 1: "N"}},
    }
    for name, tags in cases.items():
        im = Image.new("RGB", (8, 8))
        exif = Image.Exif()
        for k, v in tags.items():
            exif[k] = v
        p = tmp_path / f"{name}.jpg"
        try:
            im.save(p, exif=exif)
        except (ValueError, TypeError, UnicodeEncodeError):
            continue  # Pillow will not even write it
        m = read_meta(p, stored_ns(p.stat().st_mtime_ns))
        assert m.sha256 is not None
        assert m.make is None or "\udcff" not in m.make
    assert mtime_text(253_402_300_800 * 10**9) is None  # past year 9999: no date
    p = tmp_path / "date-garbage.jpg"
    os.utime(p, ns=(10**18, 10**18))  # changed since "scanned": no hash for it
    assert read_meta(p, stored_ns(10**18 + 1)).sha256 is None


def test_a_southern_latitude_is_a_value_not_an_option(tmp_path, capsys):
    from vsekit.cli import main

    folder = photos_in(tmp_path / "p", 2)
    idx, model = str(tmp_path / "idx"), _tiny(tmp_path)
    assert main(["index", str(folder), "--index", idx, "--model", model]) == 0
    capsys.readouterr()
    assert main(["search", "a dog", "--index", idx, "--model", model,
                 "--near", "-33.86,151.21,20"]) == 0  # fmt: skip
    assert "no photo of the 2 indexed matches the filters" in capsys.readouterr().err
