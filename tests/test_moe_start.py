"""benchmarks/research/moe_start.py's plateau is the loss the trainer reports for an
embedding whose scores are all equal, under the real max-of-hinges order loss."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from research.moe_start import plateau  # noqa: E402

from vsekit.lab.losses import create_loss  # noqa: E402
from vsekit.lab.train.trainer import Trainer  # noqa: E402


def _epoch_loss_of_a_constant_embedding(margin: float, batch: int, rows: int) -> float:
    """The epoch loss the trainer's own epoch loop (``Trainer._train_epoch``: batch losses
    weighted by size, lone pairs skipped) reports when every image and every caption
    embeds to the same vector. Only the batches' loss is stood in for; the loop, its
    skipping and its averaging are the trainer's."""
    loss_fn = create_loss("max_hinge", margin=margin, similarity="order", abs=True)
    weight = torch.nn.Parameter(torch.zeros(()))  # something for the optimiser to step

    def batch_loss(model, loss, b):
        n = len(b)
        img = torch.full((n, 8), 0.3) + weight
        txt = torch.full((n, 8), 0.3) + weight
        ids = torch.arange(n) // 2  # two captions of each image: masked, not negatives
        return loss(img, txt, ids)

    trainer = SimpleNamespace(
        cfg=SimpleNamespace(train=SimpleNamespace(precision="fp32", grad_clip=0.0)),
        progress=False,
        dist=SimpleNamespace(world=1),
        device=torch.device("cpu"),
        data=SimpleNamespace(batch_loss=batch_loss),
    )
    model = torch.nn.Module()
    opt = torch.optim.SGD([weight], lr=0.0)
    batches = [list(range(a, min(a + batch, rows))) for a in range(0, rows, batch)]
    return Trainer._train_epoch(trainer, model, opt, loss_fn, batches, 0)


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
