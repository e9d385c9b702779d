"""benchmarks/research/portable.py: the ternary FNE's packing and the dist-info it writes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from research import portable  # noqa: E402


def test_ternary_rows_pack_five_a_byte_and_unpack_to_the_same_bytes():
    rng = np.random.default_rng(0)
    for d in (1, 5, 7, 15168):  # padded and unpadded row widths
        a = rng.integers(-1, 2, size=(9, d)).astype(np.int8)
        packed = portable.pack_ternary(a)
        assert len(packed) == 9 * -(-d // 5)
        back = portable.unpack_ternary(packed, 9, d)
        assert back.dtype == np.int8 and np.array_equal(back, a)


def test_the_dist_info_lists_the_projects_entry_points(tmp_path):
    from importlib.metadata import PathDistribution

    portable.write_dist_info(tmp_path)
    dist = PathDistribution(tmp_path / "vsekit-0.dist-info")
    eps = {(e.group, e.name): e.value for e in dist.entry_points}
    assert dist.metadata["Name"] == "vsekit"
    assert eps[("vsekit.commands", "train")] == "vsekit.lab.cli.train"
    assert eps[("console_scripts", "vse")] == "vsekit.cli:main"
