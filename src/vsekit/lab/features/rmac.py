"""Simplified multi-scale R-MAC (Tolias et al., 2016) as used by the tag-ranking paper
(section 4.2): no PCA whitening.

Over the last convolutional map ``[B, C, H, W]``, regions form ``s x s`` grids for each
scale ``s`` in (1, 2, 4) (21 regions; a region's bounds follow adaptive pooling,
``[floor(i H / s), ceil((i + 1) H / s))``). Each region is max-pooled to a C-vector and
L2-normalised; the region vectors are summed and the sum L2-normalised.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SCALES = (1, 2, 4)


def rmac(fmap: torch.Tensor, scales: tuple[int, ...] = SCALES) -> torch.Tensor:
    """``[B, C]`` R-MAC descriptors of a ``[B, C, H, W]`` map."""
    total = fmap.new_zeros(fmap.shape[:2])
    for s in scales:
        regions = F.adaptive_max_pool2d(fmap, s).flatten(2)  # (B, C, s*s)
        total += F.normalize(regions, dim=1).sum(dim=2)
    return F.normalize(total, dim=1)
