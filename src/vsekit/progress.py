"""Progress on stderr for anything that can take more than a couple of seconds.

On a terminal, a tqdm bar; otherwise (logs, pipes, a service) a line when the work
starts, one every 10 seconds with how far it is, and one when it ends with its wall
time, so that no wait is silent.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Protocol


class Bar(Protocol):
    def update(self, n: int) -> None: ...


class _Quiet:
    def update(self, n: int) -> None:
        pass


class _Lines:
    """Not a terminal: a line every ``every`` seconds with how far the work is."""

    def __init__(self, total: int, desc: str, unit: str, every: float = 10.0) -> None:
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.done, self.t0 = 0, time.perf_counter()
        self.next = self.t0 + every

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if now >= self.next and self.done < self.total:
            self.next = now + self.every
            print(f"{self.desc}: {self.done:,} of {self.total:,} {self.unit}s "
                  f"({now - self.t0:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip


@contextlib.contextmanager
def progress_bar(total: int, desc: str, unit: str = "item", show: bool = True) -> Iterator[Bar]:
    """``with progress_bar(n, "caption pool") as bar: ... bar.update(k)``."""
    if not show:
        yield _Quiet()
        return
    if sys.stderr.isatty():
        from tqdm import tqdm

        with tqdm(total=total, desc=desc, unit=f" {unit}", dynamic_ncols=True) as bar:
            yield bar
        return
    t0 = time.perf_counter()
    print(f"{desc}: {total:,} {unit}s ...", file=sys.stderr, flush=True)
    yield _Lines(total, desc, unit)
    print(f"{desc}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
