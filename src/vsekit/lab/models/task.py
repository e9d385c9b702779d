"""What every training task shares: image features as rows of ``train_feats`` and a
model built by kind from the config (see :class:`vsekit.lab.train.retrieval_data.TrainData` and
:class:`vsekit.lab.tags.data.TagData` for the rest of the task interface)."""

from __future__ import annotations

import torch

from vsekit.lab.models.factory import create_model


class FeatureTask:
    """Mixin for task data classes with ``train_feats [N, F]`` and a ``vocab``."""

    train_feats: torch.Tensor

    @property
    def img_dim(self) -> int:
        return int(self.train_feats.shape[1])

    def new_model(self, cfg) -> torch.nn.Module:
        return create_model(self.img_dim, self.vocab, cfg)
