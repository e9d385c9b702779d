from __future__ import annotations

import json

import pytest

import vsekit
from vsekit.cli import main


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("    ")}
    assert listed == {
        "data", "weights", "features", "train", "eval", "model", "index", "search",
        "annotate", "serve", "tags", "tag",
    }  # fmt: skip
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"vse {vsekit.__version__}".replace("vse", "vsekit")


def test_data_stats_json_on_real_flickr8k(flickr8k_root, capsys):
    assert main(["data", "stats", str(flickr8k_root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["splits"]["train"]["images"] == 6000
    assert out["splits"]["train"]["captions"] == 30000
    assert out["splits"]["dev"] == {**out["splits"]["dev"], "images": 1000, "captions": 5000}
    assert out["splits"]["train"]["vocab_size"] > 5000


def test_data_stats_text_and_error(tmp_path, capsys):
    (tmp_path / "captions.jsonl").write_text('{"image": "missing.jpg", "caption": "c"}\n')
    assert main(["data", "stats", str(tmp_path), "--format", "folder"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vse: error:") and "missing.jpg" in err and err.count("\n") == 1
