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
(:mod:`vsekit.evidence.veto`), when on, re-ranks the result. A caption's score is then
its new score, the model's plus the agreement term, wherever annotation shows one (the
veto's ``vetoed`` entries included).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from vsekit.runtime.captions import CaptionPool

#: ``evidence.json``'s key for the rule
CONFIG_KEY = "consensus"
#: photos re-ranked per block (their ``[block, n, D]`` candidate vectors are in memory)
BLOCK = 64


@dataclass(frozen=True)
class ConsensusRule:
    """The re-ranking's parameters (``evidence.json``: ``consensus``). ValueError, naming
    the field, for a value out of range."""

    weight: float = 0.0  # times the agreement, added to the model's score
    neighbours: int = 10  # the best captions each candidate is compared with (>= 2)
    candidates: int = 50  # at least this many of the model's best captions are re-ranked
    enabled: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(f"{CONFIG_KEY}.weight: a number >= 0, got {self.weight}")
        if self.neighbours < 2:
            raise ValueError(f"{CONFIG_KEY}.neighbours: must not be below 2, got {self.neighbours}")
        if self.candidates < self.neighbours:
            raise ValueError(f"{CONFIG_KEY}.candidates: at least neighbours ({self.neighbours}), "
                             f"got {self.candidates}")  # fmt: skip

    @classmethod
    def from_config(cls, cfg: Mapping | None) -> ConsensusRule:
        """The rule from a ``consensus`` entry (absent: off). ValueError naming the field
        that is unknown, not a number or a flag, or out of range."""
        cfg = dict(cfg or {})
        unknown = sorted(set(cfg) - {"weight", "neighbours", "candidates", "enabled", "chosen_on"})
        if unknown:
            raise ValueError(f"{CONFIG_KEY}: unknown field(s) {unknown}; known: weight, "
                             "neighbours, candidates, enabled, chosen_on")  # fmt: skip
        out: dict = {}
        for name, kind in (("weight", float), ("neighbours", int), ("candidates", int)):
            if name not in cfg:
                continue
            v = cfg[name]
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            if not ok or (kind is int and v != int(v)):
                what = "an integer" if kind is int else "a number"
                raise ValueError(f"{CONFIG_KEY}.{name}: {what}, not {v!r}")
            out[name] = kind(v)
        if "enabled" in cfg:
            if not isinstance(cfg["enabled"], bool):
                raise ValueError(f"{CONFIG_KEY}.enabled: true or false, not {cfg['enabled']!r}")
            out["enabled"] = cfg["enabled"]
        return cls(**out)

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
    """``[N, n]`` float32: each candidate's mean cosine with the first ``neighbours``
    candidates other than itself (``vectors [N, n, D]``, best first, ``n >= 2``,
    ``neighbours >= 2``; the module docstring's ``a_j``)."""
    v = np.asarray(vectors, np.float32)
    if v.ndim != 3 or v.shape[1] < 2:
        raise ValueError(f"vectors: [N, n >= 2, D], got shape {v.shape}")
    if neighbours < 2:
        raise ValueError(f"neighbours: at least 2, got {neighbours}")
    m = min(int(neighbours), v.shape[1])
    v = v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
    total = np.einsum("bnd,bd->bn", v, v[:, :m].sum(1))
    count = np.full(v.shape[1], float(m), np.float32)
    total[:, :m] -= 1.0  # a caption among the first m: its cosine with itself
    count[:m] -= 1.0
    return total / count


def rescore(scores: np.ndarray, vectors: np.ndarray, rule: ConsensusRule) -> np.ndarray:
    """``[N, n]`` float64: ``scores + rule.weight * agreement(vectors, rule.neighbours)``."""
    return np.asarray(scores, np.float64) + rule.weight * agreement(vectors, rule.neighbours)


def best_captions(
    pool: CaptionPool, img_emb: np.ndarray, n: int, rule: ConsensusRule
) -> list[list[tuple[str, float]]]:
    """Each image's best ``n`` captions of ``pool`` under ``rule``: the model's best
    ``max(n, rule.candidates)`` (all of a smaller pool), re-ranked by :func:`rescore`
    (ties keep the model's order), each with its new score. Images are re-ranked
    :data:`BLOCK` at a time."""
    q = np.atleast_2d(np.asarray(img_emb, np.float32))
    if not pool.captions:
        return [[] for _ in range(len(q))]
    out: list[list[tuple[str, float]]] = []
    for a in range(0, len(q), BLOCK):
        scores, rows = pool.best_rows(q[a : a + BLOCK], max(n, rule.candidates))
        if rows.shape[1] < 2:  # nothing to agree with
            new = np.asarray(scores, np.float64)
        else:
            new = rescore(scores, pool.vectors(rows), rule)
        order = np.argsort(-new, axis=1, kind="stable")[:, :n]
        out += [[(pool.captions[rr[j]], float(nr[j])) for j in o]
                for o, rr, nr in zip(order, rows, new, strict=True)]  # fmt: skip
    return out
