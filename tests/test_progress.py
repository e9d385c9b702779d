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
