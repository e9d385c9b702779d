"""Evaluate any model that follows the encoder contract on a split."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .retrieval import evaluate_protocol, retrieval_metrics_from_embeddings


@torch.inference_mode()
def encode_all(
    model, features, texts: Sequence[str], batch: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(img_emb[N, D], txt_emb[M, D])`` in eval mode, batched."""
    was_training = model.training
    model.eval()
    try:
        img = torch.cat(
            [
                model.encode_images(torch.as_tensor(np.asarray(features[a : a + batch])))
                for a in range(0, len(features), batch)
            ]
        )
        txt = torch.cat(
            [model.encode_texts(list(texts[a : a + batch])) for a in range(0, len(texts), batch)]
        )
    finally:
        model.train(was_training)
    return img, txt


def evaluate_model(
    model,
    features,
    texts: Sequence[str],
    caption_to_image,
    protocol: str = "full",
    batch: int = 1024,
) -> dict[str, float]:
    """Retrieval metrics of ``model`` (``encode_images``/``encode_texts``/``similarity``)
    on image ``features[N, F]`` and their captions."""
    img, txt = encode_all(model, features, texts, batch)
    if protocol == "full":
        return retrieval_metrics_from_embeddings(img, txt, caption_to_image, model.similarity)
    with torch.inference_mode():
        sims = torch.cat([model.similarity(img[a : a + 256], txt) for a in range(0, len(img), 256)])
    return evaluate_protocol(sims.cpu().numpy(), caption_to_image, protocol)
