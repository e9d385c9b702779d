"""What models whose embeddings are unit vectors compared by dot product share."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class UnitDotModel:
    """Mixin: ``similarity`` is the dot product of unit embeddings (their cosine), and
    training sees the two embeddings as they are. The class defines ``encode_images``
    and ``encode_texts``."""

    def similarity(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        return img @ txt.t()

    def training_outputs(
        self, features: torch.Tensor, texts: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encode_images(features), self.encode_texts(texts)
