"""Consensus re-ranking of annotation captions: among a photo's nearest captions, prefer
those that agree with the others (the consensus caption of Devlin et al., 2015,
"Exploring Nearest Neighbor Approaches for Image Captioning").

A retrieved caption describes some other photo. What it shares with the photo's other
near captions is likely in this photo too; a person, animal or object that only one of
them names is likely that other photo's. For one photo, with its best ``candidates``
captions by the model's score ``s_j`` (best first) and their unit vectors ``t_j``, the
agreement of caption ``j`` with the ``m = neighbours`` best is

    a_j = mean_{l < m, l != j} t_j . t_l

and the caption's new score is ``s_j + weight * a_j``. Shapes: ``[N, n]`` scores and
``[N, n, D]`` vectors for ``N`` photos and ``n`` candidates.

A bundle turns it on in ``evidence.json`` (``consensus``: ``weight``, ``neighbours``,
``candidates``, ``enabled``, ``chosen_on``); ``benchmarks/annotate_consensus.py``
chooses the setting on the train slice and measures it on dev. The annotation veto
(:mod:`vsekit.evidence.veto`), when on, re-ranks the result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: ``evidence.json``'s key for the rule
CONFIG_KEY = "consensus"


@dataclass(frozen=True)
class ConsensusRule:
    """The re-ranking's parameters (``evidence.json``: ``consensus``)."""

    weight: float = 0.0  # times the agreement, added to the model's score
    neighbours: int = 10  # the best captions each candidate is compared with
    candidates: int = 50  # the model's best captions that are re-ranked
    enabled: bool = False

    @classmethod
    def from_config(cls, cfg: Mapping | None) -> ConsensusRule:
        """The rule from a ``consensus`` entry (absent: off). ValueError naming the
        field that is not a number or a flag, or out of range."""
        cfg = dict(cfg or {})
        out: dict = {}
        for name, kind, low in (("weight", float, 0), ("neighbours", int, 2),
                                ("candidates", int, 1)):  # fmt: skip
            if name not in cfg:
                continue
            v = cfg[name]
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            if not ok or (kind is int and v != int(v)):
                what = "an integer" if kind is int else "a number"
                raise ValueError(f"{CONFIG_KEY}.{name}: {what}, not {v!r}")
            if v < low:
                raise ValueError(f"{CONFIG_KEY}.{name}: must not be below {low}, got {v}")
            out[name] = kind(v)
        if "enabled" in cfg:
            if not isinstance(cfg["enabled"], bool):
                raise ValueError(f"{CONFIG_KEY}.enabled: true or false, not {cfg['enabled']!r}")
            out["enabled"] = cfg["enabled"]
        rule = cls(**out)
        if rule.neighbours > rule.candidates:
            raise ValueError(f"{CONFIG_KEY}.neighbours: at most candidates ({rule.candidates}), "
                             f"got {rule.neighbours}")  # fmt: skip
        return rule

    @classmethod
    def from_bundle(cls, bundle: Path, enabled_only: bool = True) -> ConsensusRule | None:
        """The rule the bundle's ``evidence.json`` declares, or None: no entry, or (with
        ``enabled_only``) switched off. ModelError naming the file and the field for a
        bad setting."""
        from vsekit.bundle import ModelError
        from vsekit.evidence import EVIDENCE_FILE, read_evidence_config

        cfg = read_evidence_config(bundle).get(CONFIG_KEY)
        if cfg is None:
            return None
        try:
            if not isinstance(cfg, dict):
                raise ValueError(f"{CONFIG_KEY}: an object, not {cfg!r}")
            rule = cls.from_config(cfg)
        except ValueError as e:
            raise ModelError(f"{Path(bundle) / EVIDENCE_FILE}: {e}") from e
        return rule if rule.enabled or not enabled_only else None


def agreement(vectors: np.ndarray, neighbours: int) -> np.ndarray:
    """``[N, n]``: each candidate's mean cosine with the first ``neighbours`` candidates
    other than itself (``vectors [N, n, D]``, best first; the module docstring's
    ``a_j``)."""
    v = np.asarray(vectors, np.float64)
    if v.ndim != 3 or v.shape[1] < 2:
        raise ValueError(f"vectors: [N, n >= 2, D], got shape {v.shape}")
    m = min(int(neighbours), v.shape[1])
    v = v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
    top = v[:, :m]
    total = np.einsum("bnd,bd->bn", v, top.sum(1))
    count = np.full(v.shape[1], float(m))
    total[:, :m] -= 1.0  # a caption among the first m: its cosine with itself
    count[:m] -= 1.0
    return total / count


def rescore(scores: np.ndarray, vectors: np.ndarray, rule: ConsensusRule) -> np.ndarray:
    """``[N, n]``: ``scores + rule.weight * agreement(vectors, rule.neighbours)``."""
    return np.asarray(scores, np.float64) + rule.weight * agreement(vectors, rule.neighbours)


def best_captions(
    pool, img_emb: np.ndarray, n: int, rule: ConsensusRule
) -> list[list[tuple[str, float]]]:
    """Each image's best ``n`` captions of ``pool`` (a
    :class:`~vsekit.runtime.captions.CaptionPool`) under ``rule``: the model's best
    ``max(n, rule.candidates)``, re-ranked by :func:`rescore` (ties keep the model's
    order), each with its new score."""
    if not pool.captions:
        return [[] for _ in range(len(np.atleast_2d(img_emb)))]
    scores, rows = pool.best_rows(img_emb, max(n, rule.candidates))
    if rows.shape[1] < 2:  # nothing to agree with
        new = np.asarray(scores, np.float64)
    else:
        new = rescore(scores, pool.vectors(rows), rule)
    order = np.argsort(-new, axis=1, kind="stable")[:, :n]
    return [[(pool.captions[rr[j]], float(nr[j])) for j in o]
            for o, rr, nr in zip(order, rows, new, strict=True)]  # fmt: skip
