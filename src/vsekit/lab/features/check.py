"""``vse weights check``: classify two bundled scikit-image photos and verify the labels.

A correctly loaded ImageNet backbone puts Egyptian cat, tabby or tiger cat in the top 3
for ``data.chelsea()`` and espresso first for ``data.coffee()``.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torchvision.models import ResNet50_Weights

from vsekit.lab.features.backbones import Backbone
from vsekit.lab.features.crops import crop_views

CAT_LABELS = {"Egyptian cat", "tabby", "tiger cat"}


def imagenet_labels() -> list[str]:
    """The 1,000 ImageNet class names (bundled with torchvision, no download)."""
    return list(ResNet50_Weights.IMAGENET1K_V1.meta["categories"])


@torch.inference_mode()
def top_labels(model: Backbone, image: np.ndarray, k: int = 5) -> list[tuple[str, float]]:
    """Top-k (label, probability) of an ``[H, W, 3]`` uint8 image, centre crop."""
    views = crop_views(Image.fromarray(image), 1, model.input_size)
    probs = model.classify(views).softmax(dim=1)[0]
    top = probs.topk(k)
    labels = imagenet_labels()
    return [(labels[i], float(p)) for p, i in zip(top.values, top.indices, strict=True)]


def check_backbone(model: Backbone) -> tuple[bool, dict[str, list[tuple[str, float]]]]:
    from skimage import data

    res = {"chelsea": top_labels(model, data.chelsea()), "coffee": top_labels(model, data.coffee())}
    ok = bool(CAT_LABELS & {lab for lab, _ in res["chelsea"][:3]}) and (
        res["coffee"][0][0] == "espresso"
    )
    return ok, res
