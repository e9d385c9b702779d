"""Evaluate any model that follows the encoder contract on a split."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from vsekit.lab.eval.retrieval import evaluate_protocol, retrieval_metrics_from_embeddings


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


@torch.inference_mode()
def similarity_matrix(
    model, img: torch.Tensor, txt: torch.Tensor, chunk: int = 256
) -> torch.Tensor:
    """``[N, M]`` model similarities on the CPU, computed ``chunk`` image rows at a time."""
    return torch.cat(
        [model.similarity(img[a : a + chunk], txt) for a in range(0, len(img), chunk)]
    ).cpu()


def pool_per_image(txt: torch.Tensor, caption_to_image, normalize: bool) -> torch.Tensor:
    """``[n_images, D]``: the mean of each image's caption embeddings (the caption
    report's "baseline + weight" query), re-normalised for cosine models."""
    c2i = torch.as_tensor(np.asarray(caption_to_image), dtype=torch.long, device=txt.device)
    n = int(c2i.max()) + 1
    sums = torch.zeros(n, txt.shape[1], device=txt.device).index_add_(0, c2i, txt.float())
    mean = sums / torch.bincount(c2i, minlength=n).clamp(min=1)[:, None]
    return torch.nn.functional.normalize(mean, dim=1) if normalize else mean


def evaluate_model(
    model,
    features,
    texts: Sequence[str],
    caption_to_image,
    protocol: str = "full",
    batch: int = 1024,
    queries: str = "caption",
) -> dict[str, float]:
    """Retrieval metrics of ``model`` (``encode_images``/``encode_texts``/``similarity``)
    on image ``features[N, F]`` and their captions.

    ``queries="image"`` pools each image's captions into one text query first (see
    :func:`pool_per_image`); the metrics then have one caption per image.
    """
    img, txt = encode_all(model, features, texts, batch)
    if queries == "image":
        normalize = getattr(model.cfg, "similarity", "cosine") == "cosine"
        txt = pool_per_image(txt, caption_to_image, normalize)
        caption_to_image = np.arange(len(txt))
    elif queries != "caption":
        raise ValueError(f"queries: use caption | image, not {queries!r}")
    if protocol == "full":
        return retrieval_metrics_from_embeddings(img, txt, caption_to_image, model.similarity)
    return evaluate_protocol(similarity_matrix(model, img, txt).numpy(), caption_to_image, protocol)


def caption_ranks(model, features, texts: Sequence[str], caption_to_image) -> np.ndarray:
    """``[n_captions]`` 1-based rank of each caption's image among all images."""
    from vsekit.lab.eval.retrieval import retrieval_ranks

    img, txt = encode_all(model, features, texts)
    return retrieval_ranks(similarity_matrix(model, img, txt), caption_to_image)[1]
