"""No silent waits: progress lines on stderr when it is not a terminal."""

from __future__ import annotations

import time

from vsekit.progress import progress_bar


def test_lines_start_report_and_end(capsys):
    with progress_bar(100, "caption pool", "caption") as bar:
        bar.every = 0.02
        bar.next = time.perf_counter()
        for _ in range(5):
            time.sleep(0.03)
            bar.update(20)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "caption pool: 100 captions ..."
    assert any(e.startswith("caption pool: 20 of 100 captions") for e in err[1:-1])
    assert err[-1].startswith("caption pool: done in ")


def test_nothing_when_not_shown(capsys):
    with progress_bar(10, "x", show=False) as bar:
        bar.update(10)
    assert capsys.readouterr().err == ""


def test_piped_vse_index_prints_lines_not_carriage_returns(tmp_path):
    """Piped or logged, `vse index` wrote one long line of carriage returns (a tqdm bar)."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import make_tiny_model, write_image

    root = Path(__file__).resolve().parents[1]
    bundle = make_tiny_model().save(tmp_path / "m")
    for i in range(5):
        write_image(tmp_path / "p" / f"{i}.png", seed=i)
    script = (f"import sys\nsys.path.insert(0, {str(root)!r})\nimport tests.conftest\n"
              "from vsekit.cli import main\nsys.exit(main())\n")  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", script, "index", str(tmp_path / "p"), "--index",
         str(tmp_path / "idx"), "--model", str(bundle), "--no-caption-pool"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stderr
    assert "index: 5 files ..." in out.stderr.splitlines()
