"""A runner's trainer dies with the runner and holds the runner's lock on its cell while it
runs (``benchmarks/_common.py``: ``run_child``), so a killed runner never leaves a trainer
behind to train the cell beside the next runner's."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

# a runner: takes the lock, starts a trainer that writes its pid and ignores SIGTERM when
# asked to (so that the test can see who holds the lock), then waits on it
RUNNER = textwrap.dedent(
    """
    import fcntl, os, sys
    sys.path.insert(0, {bench!r})
    from _common import run_child
    fd = os.open({lock!r}, os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    child = ("import os, signal, time\\n"
             + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n" if {ignore} else "")
             + "open({pid!r}, 'w').write(str(os.getpid()))\\n"
             + "time.sleep(120)\\n")
    run_child([sys.executable, "-c", child], cwd=".", pass_fds=(fd,))
    """
)


def _start(tmp_path: Path, ignore: bool) -> tuple[subprocess.Popen, int]:
    lock, pid = tmp_path / "cell.lock", tmp_path / "trainer.pid"
    code = RUNNER.format(bench=str(BENCH), lock=str(lock), pid=str(pid), ignore=ignore)
    runner = subprocess.Popen([sys.executable, "-c", code])
    if not wait_for(lambda: pid.is_file() and pid.read_text() != "", timeout=30):
        runner.kill()
        runner.wait()
        raise AssertionError("the trainer never started")
    return runner, int(pid.read_text())


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has exited: it only waits for init to reap it)."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, OSError):
        return False
    return state != "Z"


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _locked(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_trainer_dies_when_its_runner_is_killed(tmp_path):
    runner, trainer = _start(tmp_path, ignore=False)
    try:
        assert _alive(trainer) and _locked(tmp_path / "cell.lock")
        runner.send_signal(signal.SIGKILL)  # no handler of the runner's can run
        runner.wait()
        assert wait_for(lambda: not _alive(trainer), 10), "the trainer outlived its runner"
        assert wait_for(lambda: not _locked(tmp_path / "cell.lock"), 10)
    finally:
        _kill(trainer)


def test_the_cell_stays_locked_until_the_trainer_has_exited(tmp_path):
    runner, trainer = _start(tmp_path, ignore=True)  # this trainer outlives SIGTERM
    try:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        time.sleep(0.3)
        assert _alive(trainer) and _locked(tmp_path / "cell.lock")  # no second runner yet
    finally:
        _kill(trainer)
    assert wait_for(lambda: not _locked(tmp_path / "cell.lock"), 10)
