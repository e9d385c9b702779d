"""FNE variants for research: the Full-Network Embedding of a subset of a backbone's
blocks, or with other ternarisation thresholds, computed from a FeatureStore's pooled
activations and its train-split statistics (:mod:`vsekit.fne`, steps 1-2). Named by a
feature kind (``data.features``), e.g. ``fne[layers=layer3+layer4;t=-0.5/0.5]``; a
training-time kind only (the core computes the plain ``fne`` for new images)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vsekit.fne import F_MINUS, F_PLUS, FNEStats, full_network_embedding
from vsekit.lab.features.store import FeatureStore


@dataclass(frozen=True)
class FNEVariant:
    """A research variant of the FNE, named by a feature kind such as
    ``fne[layers=layer3+layer4]``, ``fne[t=-0.5/0.5]`` or ``fne[shift=1]`` (several:
    ``;``-separated).

    ``layers`` keeps the blocks whose names start with one of the ``+``-separated
    prefixes (``layer3`` keeps ``layer3.0`` .. ``layer3.5``); ``t`` gives the ternarisation
    thresholds ``f-/f+`` in place of (-0.25, 0.15), or ``t=none`` keeps the standardised
    activations as float32 (steps 1-2 without step 3, to see what ternarising costs).
    ``shift`` adds a constant to every value: the same information, moved off the origin
    (``shift=1`` makes the ternary values {0, 1, 2}, so every image's vector shares a
    direction; a whole-number shift that keeps the ternary values in int8's range keeps
    them int8, any other is float32).
    Computed from the store's pooled activations and its train-split statistics."""

    layers: tuple[str, ...] = ()  # empty: every block
    f_minus: float = F_MINUS
    f_plus: float = F_PLUS
    ternarise: bool = True  # False: standardised float32 columns (``t=none``)
    shift: float = 0.0  # added to every value

    @classmethod
    def parse(cls, kind: str) -> FNEVariant:
        """The variant a ``fne[...]`` kind names; ValueError saying what is wrong."""
        if not (kind.startswith("fne[") and kind.endswith("]")):
            raise ValueError(
                f"{kind!r} is not an FNE variant (fne[layers=A+B;t=F-/F+|none;shift=F])"
            )
        out: dict = {}
        for part in filter(None, kind[4:-1].split(";")):
            key, _, val = part.partition("=")
            if key == "layers" and val:
                out["layers"] = tuple(val.split("+"))
            elif key == "t" and val == "none":
                out["ternarise"] = False
            elif key == "t" and val.count("/") == 1:
                lo, hi = (float(x) for x in val.split("/"))
                if lo > hi:
                    raise ValueError(f"{kind!r}: thresholds need f- <= f+")
                out["f_minus"], out["f_plus"] = lo, hi
            elif key == "shift":
                try:
                    out["shift"] = float(val)
                except ValueError:
                    raise ValueError(f"{kind!r}: shift={val!r} is not a number") from None
                if not np.isfinite(out["shift"]):
                    raise ValueError(f"{kind!r}: shift={val!r} is not a finite number")
            else:
                raise ValueError(
                    f"{kind!r}: {part!r} is not layers=A+B, t=F-/F+, t=none or shift=F"
                )
        if not out.get("ternarise", True) and "f_minus" in out:
            raise ValueError(f"{kind!r}: t=none keeps no thresholds; give t=none or t=F-/F+")
        return cls(**out)

    def columns(self, store: FeatureStore) -> np.ndarray:
        """The pooled-activation columns of the kept blocks, in store order."""
        sl = store.layer_slices()
        keep = [s for name, s in sl.items() if not self.layers or name.startswith(self.layers)]
        if not keep:
            raise ValueError(f"no block of {store.path} starts with {'/'.join(self.layers)} "
                             f"(blocks: {', '.join(sl)})")  # fmt: skip
        return np.concatenate([np.arange(s.start, s.stop) for s in keep])

    def features(self, store: FeatureStore, rows: np.ndarray) -> np.ndarray:
        cols = self.columns(store)
        st = store.fne_stats()
        stats = FNEStats(st.mean[cols], st.std[cols], st.n)
        pooled = np.asarray(store.pooled[rows])[:, cols]
        if not self.ternarise:
            return (stats.standardise(pooled) + self.shift).astype(np.float32)
        out = full_network_embedding(pooled, stats, self.f_minus, self.f_plus)
        if not self.shift:
            return out
        if float(self.shift).is_integer() and -127 <= self.shift <= 126:  # -1+s, 1+s fit
            return (out.astype(np.int16) + int(self.shift)).astype(np.int8)
        return out.astype(np.float32) + np.float32(self.shift)
