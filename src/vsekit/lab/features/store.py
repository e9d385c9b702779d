"""FeatureStore: a directory of per-image features that knows what produced it.

Layout::

    meta.json            what made it: backbone, weights, layers, crops, preprocessing,
                         row count, FNE settings once fitted; "complete" once finished
    ids.txt  splits.txt  one line per row
    pooled.f32           [n, fne_dim] float32, raw pooled activations of every layer
    rmac.f32             [n, rmac_dim] float32, R-MAC descriptors (optional)
    fne.i8               [n, fne_dim] int8 in {-1, 0, 1}, after ``fit_fne``
    fne_stats.safetensors  train-split mean and std used for the FNE
    audio.f32 audio_flags.u8 audio_codebook.safetensors
                         videos: bag-of-MFCC histograms, after ``vse features audio``
                         (:mod:`vsekit.lab.features.audio_store`)
    progress.json        extraction progress (resume point); failed.jsonl: unreadable images

Arrays are raw little-endian binaries memory-mapped with the shape from ``meta.json``.
Every file that a reader trusts is replaced atomically (write, fsync, rename); while an
extraction runs, only the rows counted in ``progress.json`` are valid.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from vsekit.fne import F_MINUS, F_PLUS, FNEStats
from vsekit.fsio import atomic_write
from vsekit.runtime.kinds import features_of_kind

STORE_VERSION = 1


class StoreError(ValueError):
    """A store is missing, incomplete or does not match what it is used with."""


def ids_digest(ids: Iterable[str]) -> str:
    h = hashlib.sha1()
    for i in ids:
        h.update(i.encode())
        h.update(b"\n")
    return h.hexdigest()


class FeatureStore:
    """Read access to a finished store (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        meta_file = self.path / "meta.json"
        if not meta_file.is_file():
            raise StoreError(f"{self.path}: not a feature store (no meta.json)")
        self.meta = json.loads(meta_file.read_text())
        if not self.meta.get("complete"):
            raise StoreError(
                f"{self.path}: extraction not finished; rerun the same `vse features extract` "
                "to resume it"
            )
        self.n = int(self.meta["n"])
        self.ids = (self.path / "ids.txt").read_text(encoding="utf-8").splitlines()[: self.n]
        self.splits = (self.path / "splits.txt").read_text(encoding="utf-8").splitlines()[: self.n]
        if len(self.ids) != self.n or len(self.splits) != self.n:
            raise StoreError(f"{self.path}: ids.txt/splits.txt do not have {self.n} lines")

    # ---------------------------------------------------------------- arrays
    def _array(self, name: str, dtype, dim: int) -> np.ndarray:
        f = self.path / name
        if self.n == 0:
            return np.zeros((0, dim), dtype)
        return np.memmap(f, dtype=dtype, mode="r", shape=(self.n, dim))

    @property
    def fne_dim(self) -> int:
        return int(self.meta["fne_dim"])

    @property
    def pooled(self) -> np.ndarray:
        """``[n, fne_dim]`` raw pooled activations (float32 memmap)."""
        return self._array("pooled.f32", np.float32, self.fne_dim)

    @property
    def rmac(self) -> np.ndarray:
        if not self.meta.get("rmac_dim"):
            raise StoreError(f"{self.path}: extracted without R-MAC (use --rmac)")
        return self._array("rmac.f32", np.float32, int(self.meta["rmac_dim"]))

    @property
    def fne(self) -> np.ndarray:
        """``[n, fne_dim]`` int8 FNE; needs :meth:`fit_fne` first."""
        if "fne" not in self.meta:
            raise StoreError(f"{self.path}: no FNE yet; run `vse features fne --store {self.path}`")
        return self._array("fne.i8", np.int8, self.fne_dim)

    @property
    def audio(self) -> np.ndarray:
        """``[n, k]`` bag-of-MFCC histograms (zeros for clips without sound)."""
        if "audio" not in self.meta:
            raise StoreError(
                f"{self.path}: no audio features; run `vse features audio --store {self.path}`"
            )
        return self._array("audio.f32", np.float32, int(self.meta["audio"]["k"]))

    @property
    def audio_flags(self) -> np.ndarray:
        """``[n]`` uint8 per clip: 0 audio, 1 no audio track, 2 silent."""
        self.audio  # noqa: B018 - the same check
        return np.fromfile(self.path / "audio_flags.u8", np.uint8)[: self.n]

    def layer_slices(self) -> dict[str, slice]:
        out, a = {}, 0
        for lay in self.meta["layers"]:
            out[lay["name"]] = slice(a, a + lay["channels"])
            a += lay["channels"]
        return out

    def baseline(self, layer: str | None = None) -> np.ndarray:
        """``[n, d]`` one-layer baseline: the pooled ``layer`` (default: the backbone's
        baseline layer, e.g. pool5 or fc7), L2-normalised."""
        sl = self.layer_slices()[layer or self.meta["baseline_layer"]]
        return features_of_kind(self.pooled, "baseline", sl)

    def rows(self, split: str | None = None) -> np.ndarray:
        """Row indices of one split (all rows if None)."""
        if split is None:
            return np.arange(self.n)
        return np.flatnonzero(np.asarray(self.splits) == split)

    def fne_stats(self) -> FNEStats:
        d = load_file(str(self.path / "fne_stats.safetensors"))
        return FNEStats(d["mean"], d["std"], int(self.meta["fne"]["n_fit"]))

    # ---------------------------------------------------------------- FNE
    def fit_fne(
        self, fit_split: str = "train", f_minus: float = F_MINUS, f_plus: float = F_PLUS
    ) -> FNEStats:
        """Fit standardisation statistics on ``fit_split`` rows only, write the int8 FNE
        of every row, and record the settings in ``meta.json``."""
        rows = self.rows(fit_split)
        if len(rows) == 0:
            raise StoreError(f"{self.path}: no rows in split {fit_split!r} to fit the FNE on")
        stats = FNEStats.fit(self.pooled, rows)
        tmp = self.path / ".fne.i8.tmp"
        fne = np.memmap(tmp, dtype=np.int8, mode="w+", shape=(self.n, self.fne_dim))
        sl = self.layer_slices()[self.meta["baseline_layer"]]
        features_of_kind(self.pooled, "fne", sl, stats, f_minus, f_plus, out=fne)
        fne.flush()
        del fne
        atomic_write(self.path / "fne.i8", lambda t: os.replace(tmp, t))
        atomic_write(
            self.path / "fne_stats.safetensors",
            lambda t: save_file({"mean": stats.mean, "std": stats.std}, str(t)),
        )
        self.meta["fne"] = {
            "fit_split": fit_split,
            "n_fit": int(len(rows)),
            "f_minus": f_minus,
            "f_plus": f_plus,
        }
        atomic_write(self.path / "meta.json", json.dumps(self.meta, indent=2))
        return stats

    # ---------------------------------------------------------------- checks
    def identity(self) -> dict:
        """The image side these features come from: backbone, its weights' sha256 and
        the preprocessing (as :meth:`~vsekit.lab.features.backbones.Backbone.identity`)."""
        m = self.meta
        return {
            "backbone": m["backbone"],
            "weights_sha256": m.get("weights_sha256"),
            "preprocessing": {
                "mean": m["preprocess"]["mean"],
                "std": m["preprocess"]["std"],
                "input_size": m["input_size"],
                "crops": int(m["crops"]),
            },
        }

    def fingerprint(self) -> str:
        """Identifies the features: what produced them and for which images."""
        # the weights by their sha256 (stores from before weight hashes: by their source)
        weights = "weights_sha256" if self.meta.get("weights_sha256") else "weights"
        keys = ("backbone", weights, "crops", "input_size", "layers", "ids_sha1")
        return hashlib.sha1(
            json.dumps({k: self.meta.get(k) for k in keys}, sort_keys=True).encode()
        ).hexdigest()[:16]

    def rows_for(self, ids: Iterable[str]) -> np.ndarray:
        """Row index of each id; a clear error names ids this store lacks."""
        index = {i: k for k, i in enumerate(self.ids)}
        ids = list(ids)
        missing = [i for i in ids if i not in index]
        if missing:
            raise StoreError(
                f"{self.path}: {len(missing)} image(s) not in this store, e.g. "
                f"{', '.join(missing[:3])} (was it extracted from another dataset?)"
            )
        return np.fromiter((index[i] for i in ids), dtype=np.int64, count=len(ids))

    def describe(self) -> dict:
        m = self.meta
        by_split: dict[str, int] = {}
        for s in self.splits:
            by_split[s] = by_split.get(s, 0) + 1
        return {
            "path": str(self.path),
            "rows": self.n,
            "splits": by_split,
            "backbone": m["backbone"],
            "weights": m["weights"],
            "crops": m["crops"],
            "input_size": m["input_size"],
            "fne_dim": m["fne_dim"],
            "baseline_layer": m["baseline_layer"],
            "baseline_dim": m["baseline_dim"],
            "rmac_dim": m.get("rmac_dim"),
            "fne": m.get("fne"),
            "video": m.get("video"),
            "audio": m.get("audio"),
            "failed": m.get("failed", 0),
            "extract_seconds": m.get("extract_seconds"),
            "runs": m.get("runs", []),
            "fingerprint": self.fingerprint(),
        }
