"""Progress on stderr for anything that can take more than a couple of seconds.

On a terminal, a tqdm bar; otherwise (logs, pipes, a service) one line when the work
starts and one when it ends, with its wall time, so that no wait is silent.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Protocol


class Bar(Protocol):
    def update(self, n: int) -> None: ...


class _Lines:
    def update(self, n: int) -> None:
        pass


@contextlib.contextmanager
def progress_bar(total: int, desc: str, unit: str = "item", show: bool = True) -> Iterator[Bar]:
    """``with progress_bar(n, "caption pool") as bar: ... bar.update(k)``."""
    if not show:
        yield _Lines()
        return
    if sys.stderr.isatty():
        from tqdm import tqdm

        with tqdm(total=total, desc=desc, unit=f" {unit}", dynamic_ncols=True) as bar:
            yield bar
        return
    t0 = time.perf_counter()
    print(f"{desc}: {total:,} {unit}s ...", file=sys.stderr, flush=True)
    yield _Lines()
    print(f"{desc}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
