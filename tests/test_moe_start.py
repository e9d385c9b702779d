"""benchmarks/research/moe_start.py's plateau is the loss the trainer reports for an
embedding whose scores are all equal, under the real max-of-hinges order loss."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from research.moe_start import plateau  # noqa: E402

from vsekit.lab.losses import create_loss  # noqa: E402


def _epoch_loss_of_a_constant_embedding(margin: float, batch: int, rows: int) -> float:
    """The trainer's epoch loss (batch losses weighted by size, lone pairs skipped) when
    every image and every caption embeds to the same vector."""
    loss = create_loss("max_hinge", margin=margin, similarity="order", abs=True)
    total, n = 0.0, 0
    for a in range(0, rows, batch):
        b = min(batch, rows - a)
        if b < 2:
            continue
        img = torch.full((b, 8), 0.3)
        txt = torch.full((b, 8), 0.3)
        ids = torch.arange(b) // 2  # two captions of each image: masked, not negatives
        total += float(loss(img, txt, ids)) * b
        n += b
    return total / n


@pytest.mark.parametrize(("margin", "batch", "rows"),
                         [(0.05, 128, 27_500), (0.025, 128, 27_500), (0.2, 16, 97),
                          (0.05, 10, 41)])  # fmt: skip
def test_the_plateau_is_the_loss_of_a_constant_embedding(margin, batch, rows):
    assert plateau(margin, batch, rows) == pytest.approx(
        _epoch_loss_of_a_constant_embedding(margin, batch, rows), rel=1e-6
    )


def test_the_plateau_moves_with_what_it_depends_on():
    """Full batches cost 2aB a batch; a short last batch pulls the weighted mean down."""
    assert plateau(0.05, 128, 128 * 10) == pytest.approx(12.8)
    assert plateau(0.05, 128, 27_500) < 12.8
    assert plateau(0.025, 128, 128 * 10) == pytest.approx(6.4)
