"""Training on several processes: the global batch's negatives on every rank.

VSE++ and Order++ take their hardest negative from the batch, so a data-parallel run
must compare each pair with the *global* batch, not its rank's shard. As open_clip's
``gather_features`` does, each rank all-gathers the image and caption embeddings of
every shard (and their image ids, so that same-image masking works across ranks); its
own shard stays in the graph, the others are constants. Every rank then computes the
same loss ``L`` over the global batch, and the gradient it back-propagates is the part
of ``dL/dtheta`` that flows through its own shard. DistributedDataParallel averages the
ranks' gradients, so each rank's loss is scaled by the world size::

    grad = 1/N sum_r N dL/dtheta|_shard r = dL/dtheta

which is the single-process gradient of the same global batch (tested to float
tolerance with 2 gloo processes).

The process group comes from the environment torchrun sets (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``...): gloo on CPU, NCCL on GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    """This process's place: ``rank`` of ``world`` (``world == 1``: not distributed)."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        """The rank that writes logs and checkpoints."""
        return self.rank == 0


SINGLE = Dist()  # one process


def from_env(device: torch.device) -> Dist:
    """Join the process group torchrun describes in the environment (once); a single
    process when it describes none."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size())


def shard(n: int, d: Dist) -> slice:
    """The rows of a global batch of ``n`` that rank ``d.rank`` computes: contiguous,
    sizes differing by at most one."""
    base, extra = divmod(n, d.world)
    start = d.rank * base + min(d.rank, extra)
    return slice(start, start + base + (d.rank < extra))


def gather(x: torch.Tensor, d: Dist) -> torch.Tensor:
    """``[sum of shards, ...]``: every rank's ``x`` concatenated in rank order; this
    rank's rows keep their gradient, the others' are constants. Shards may differ in
    length (the last batch of an epoch)."""
    if d.world == 1:
        return x
    n = torch.tensor([x.shape[0]], device=x.device)
    sizes = [torch.zeros_like(n) for _ in range(d.world)]
    dist.all_gather(sizes, n)
    sizes = [int(s) for s in sizes]
    top = max(sizes)
    pad = x.detach()
    if x.shape[0] < top:
        pad = torch.cat([pad, pad.new_zeros((top - x.shape[0], *x.shape[1:]))])
    parts = [torch.empty_like(pad) for _ in range(d.world)]
    dist.all_gather(parts, pad.contiguous())
    parts = [p[:s] for p, s in zip(parts, sizes, strict=True)]
    parts[d.rank] = x
    return torch.cat(parts)


def global_loss(loss_fn, img: torch.Tensor, txt: torch.Tensor, ids: torch.Tensor | None,
                d: Dist) -> torch.Tensor:  # fmt: skip
    """The loss over the global batch from this rank's shard of embeddings, scaled by
    the world size for DDP's gradient averaging (see the module docstring). Returns
    ``(scaled loss to back-propagate)``; divide by ``d.world`` to report it."""
    img_all, txt_all = gather(img, d), gather(txt, d)
    if ids is not None and getattr(loss_fn, "masks_same_image", False):
        loss = loss_fn(img_all, txt_all, image_ids=gather(ids.to(img.device), d))
    else:
        loss = loss_fn(img_all, txt_all)
    return loss * d.world
