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
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ") and
              not line.startswith("   ") and not line.startswith("  -")} - {"COMMAND"}  # fmt: skip
    assert listed == {
        "data", "weights", "features", "train", "eval", "model", "index", "search",
        "annotate", "serve", "tags", "tag", "completion", "duplicates", "doctor",
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


def test_index_json_exclude_and_search_paths_only(tmp_path, capsys):
    from tests.conftest import make_tiny_model, write_image

    bundle = make_tiny_model(["a dog runs on grass", "a red car"]).save(tmp_path / "bundle")
    photos = tmp_path / "photos"
    for i in range(4):
        write_image(photos / f"{i}.jpg", seed=i)
    write_image(photos / "raw" / "skip.jpg", seed=9)
    idx = str(tmp_path / "idx")
    argv = ["index", str(photos), "--model", str(bundle), "--index", idx, "--json"]
    assert main([*argv, "--exclude", "raw/*"]) == 0
    out, err = capsys.readouterr()
    rep = json.loads(out)  # stdout is the report alone
    assert rep["added"] == 4 and rep["images"] == 4 and rep["failed"] == []
    assert main(["search", "a red car", "--index", idx, "--k", "3", "--paths-only"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(line.startswith(str(photos)) for line in lines)
    # words the model never saw are named on stderr; a query of none is an error
    assert main(["search", "a red giraffe", "--index", idx, "--k", "1"]) == 0
    out, err = capsys.readouterr()
    assert "does not know giraffe" in err and "does not know" not in out
    assert main(["search", "giraffe selfie", "--index", idx]) == 2
    assert "knows none of its words (giraffe, selfie)" in capsys.readouterr().err


def test_help_has_defaults_and_an_example_and_completion(capsys):
    with pytest.raises(SystemExit):
        main(["index", "--help"])
    out = capsys.readouterr().out
    assert "(default: 16)" in out and "example:\n  vse index" in out
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert "complete -o filenames -F _vse vse" in script and "--paths-only" in script


def test_research_commands_without_pytorch_say_so_in_one_line(monkeypatch, capsys):
    """Where PyTorch is not installed, the lab's commands (and vse model's building
    sub-commands) are listed and answer with one line naming the extra, exit code 2."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))  # fmt: skip
    for argv in (["train", "configs/flickr8k-recommended.yaml"], ["model", "build", "r", "o"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "pip install 'vsekit[train]'" in err[0], err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "train" in capsys.readouterr().out
