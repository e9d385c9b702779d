"""Losses over a batch of matching image and caption embeddings (row k of each is a
pair; every other row is a negative). Losses never call the model.

Contrastive hinge (journal paper eq. 1 and 4; Kiros et al. UVS, Faghri et al. VSE++),
with ``s = S(i, c)`` for the positive pair and margin ``alpha``::

    L_S = sum_i sum_k [alpha - S(i, c) + S(i, c_k)]_+ + sum_c sum_k [alpha - S(i, c) + S(i_k, c)]_+
    L_M = sum_i max_k [alpha - S(i, c) + S(i, c_k)]_+ + sum_c max_k [alpha - S(i, c) + S(i_k, c)]_+

``L_S`` sums over all in-batch negatives ("sum"), ``L_M`` keeps only the hardest ("max").
Created by name: ``create_loss("max_hinge", margin=0.2, similarity="order", abs=True)``.
"""

from __future__ import annotations

import torch
from torch import nn

from vsekit.lab.similarity import create_similarity
from vsekit.registry import Registry

LOSSES: Registry[type[nn.Module]] = Registry("loss")
register_loss = LOSSES.register
list_losses = LOSSES.names


def loss_options(name: str) -> set[str]:
    """The keyword arguments the loss ``name`` takes."""
    import inspect

    params = inspect.signature(LOSSES.get(name).__init__).parameters
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {k for k, p in params.items() if p.kind in kinds} - {"self"}


def create_loss(name: str, **options) -> nn.Module:
    """The loss ``name`` with ``options``; one it does not take is a ValueError."""
    unknown = set(options) - loss_options(name)
    if unknown:
        raise ValueError(
            f"loss {name}: unknown option(s) {sorted(unknown)}; takes {sorted(loss_options(name))}"
        )
    return LOSSES.get(name)(**options)


class ContrastiveHinge(nn.Module):
    """Bidirectional hinge over in-batch negatives; ``max_violation`` picks L_M over L_S.

    Args:
        margin: alpha.
        max_violation: hardest negative only (VSE++) instead of the sum (UVS).
        similarity: a registered similarity name (``cosine``, ``order``, ``euclidean``).
        abs: for ``order``, compare absolute values.
    """

    def __init__(
        self,
        margin: float = 0.2,
        max_violation: bool = False,
        similarity: str = "cosine",
        abs: bool = False,
    ) -> None:
        super().__init__()
        self.margin, self.max_violation = margin, max_violation
        self.sim = create_similarity(similarity, **({"abs": abs} if similarity == "order" else {}))

    masks_same_image = True  # the trainer passes each row's image id

    def forward(
        self, img_emb: torch.Tensor, txt_emb: torch.Tensor, image_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``image_ids`` ``[B]``: rows that share an image are never each other's
        negatives (with every caption in an epoch, a batch often holds two captions of
        one image, and the max-of-hinges would pick that false negative first)."""
        scores = self.sim(img_emb, txt_emb)  # (B, B): [image, caption]
        pos = scores.diagonal()
        cost_txt = (self.margin + scores - pos.unsqueeze(1)).clamp(min=0)  # negatives c_k of i
        cost_img = (self.margin + scores - pos.unsqueeze(0)).clamp(min=0)  # negatives i_k of c
        if image_ids is None:
            same = torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
        else:
            ids = image_ids.to(scores.device)
            same = ids.unsqueeze(1) == ids.unsqueeze(0)  # (B, B), the diagonal included
        cost_txt, cost_img = cost_txt.masked_fill(same, 0), cost_img.masked_fill(same, 0)
        if self.max_violation:
            return cost_txt.amax(dim=1).sum() + cost_img.amax(dim=0).sum()
        return cost_txt.sum() + cost_img.sum()


@register_loss("sum_hinge")
class SumHinge(ContrastiveHinge):
    """L_S (eq. 1): sum over all in-batch negatives."""

    def __init__(self, margin: float = 0.2, similarity: str = "cosine", abs: bool = False):
        super().__init__(margin, False, similarity, abs)


@register_loss("max_hinge")
class MaxHinge(ContrastiveHinge):
    """L_M (eq. 4): hardest in-batch negative only."""

    def __init__(self, margin: float = 0.2, similarity: str = "cosine", abs: bool = False):
        super().__init__(margin, True, similarity, abs)


@register_loss("mse")
class MSE(nn.Module):
    """Word2VisualVec's objective (Dong et al., eq. 6-7): the squared error between the
    predicted visual feature ``r(q)`` and the image's ``phi(x)``, averaged over the batch
    and the feature dimensions (Keras' ``mse``, as the paper's implementation)::

        L = 1/(B F) sum_k ||r(q_k) - phi(x_k)||^2

    ``forward(target [B, F], pred [B, F])``; no negatives are involved.
    """

    def forward(self, target: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        return ((pred - target) ** 2).mean()


# ---- tag-ranking losses (tag-ranking paper, section 3.1) over (scores [B, L], mask [B, L]):
# column k is the image's k-th ranked tag; mask marks real (not padding) entries.


def delta_matrix(n: int, kind: str, device=None) -> torch.Tensor:
    """``[n, n]``: ``Delta(k, i)`` for 0-based ranks (used where ``i > k``)."""
    k = torch.arange(n, device=device)[:, None]
    i = torch.arange(n, device=device)[None, :]
    if kind == "I":
        return (k != i).float()
    if kind == "II":
        return 1.0 - 1.0 / (i - k + 1).clamp(min=1).float()
    raise ValueError(f"delta: use I | II, not {kind!r}")


@register_loss("sje")
class SJELoss(nn.Module):
    """Structured joint embedding loss (eq. 3) with Delta^(I) or Delta^(II)."""

    def __init__(self, delta: str = "II") -> None:
        super().__init__()
        delta_matrix(1, delta)  # validates
        self.delta = delta

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        d = delta_matrix(scores.shape[1], self.delta, scores.device)[0]  # Delta(1, i)
        viol = (d[None, :] + scores - scores[:, :1]).clamp(min=0)
        viol = viol.masked_fill(~mask, 0.0)  # i = 1 gives 0, so the max is at least 0
        return viol.max(dim=1).values.mean()


@register_loss("tag_bce")
class TagBCELoss(nn.Module):
    """Beyond the paper: multi-label sigmoid cross-entropy of ``scores [B, T]`` against
    ``targets [B, T]`` (an image's tags 1, every other training tag 0), so the ranker
    learns to reject absent tags and ``sigmoid(score)`` is a probability. It scores every
    training tag (``all_tags``), not the image's own list."""

    all_tags = True

    def forward(self, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits(scores, targets.to(scores.dtype))


@register_loss("listsje")
class ListSJELoss(nn.Module):
    """Listwise SJE (eq. 6): hinge of every pair (k, i), k < i, k among the first
    ``k_top``, with Delta^(II)."""

    def __init__(self, k_top: int = 5) -> None:
        super().__init__()
        if k_top < 1:
            raise ValueError(f"k_top: must be >= 1, got {k_top}")
        self.k_top = k_top

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        n = scores.shape[1]
        d = delta_matrix(n, "II", scores.device)  # [k, i]
        k = torch.arange(n, device=scores.device)
        pair = (k[:, None] < k[None, :]) & (k[:, None] < self.k_top)  # [k, i]
        valid = pair[None] & mask[:, :, None] & mask[:, None, :]
        viol = (d[None] + scores[:, None, :] - scores[:, :, None]).clamp(min=0)
        return (viol * valid).sum(dim=(1, 2)).mean()
