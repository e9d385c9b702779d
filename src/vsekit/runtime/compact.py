"""The caption pool's embeddings shipped in the bundle, in a compact form, so that the
first ``vse index`` and the first ``vse annotate`` never run 30,000 captions through
the text towers.

The form (``captions.emb.npz``, described and sha256-recorded by ``captions.emb.json``,
which the bundle's manifest covers):

* a PCA of the pool's unit embeddings ``E [N, D]``: ``E ~= Z @ basis + mean`` with
  ``basis [d, D]`` (orthonormal rows, stored as float16) and ``Z [N, d]``;
* ``Z``'s first ``head`` coordinates (the principal ones, which carry most of every
  score) as float16, the other ``d - head`` as int8 with one float32 scale per row;
* ``penalty [N]``: each caption's CSLS text penalty (:mod:`vsekit.runtime.hubness`)
  computed from the exact float32 embeddings, valid for the hubness settings and image
  bank whose key is recorded (else recomputed from the compact rows).

A score is then ``img @ E.T ~= (img @ basis.T) @ Z.T + img @ mean``: captions are
ranked in ``d`` dimensions without rebuilding ``E``. ``benchmarks/caption_compact.py``
measures how often the top-5 captions agree with the float32 pool's.

Shapes: ``N`` captions, ``D`` the model's embedding size, ``d`` the kept dimensions.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsekit.fsio import atomic_write, file_sha256

COMPACT_FILE = "captions.emb.npz"
COMPACT_INFO = "captions.emb.json"
#: the kept PCA dimensions and how many of them stay float16 (the rest int8):
#: ``benchmarks/caption_compact.py`` chose them under the bundle's size budget
DIMS, HEAD = 896, 64


def captions_key(captions: list[str]) -> str:
    """The sha256 of the de-duplicated pool's text, as the compact file records it."""
    return hashlib.sha256("\n".join(captions).encode()).hexdigest()


@dataclass
class CompactPool:
    """The decoded compact pool: ``z [N, d]`` float16, ``basis [d, D]`` float32,
    ``mean [D]``, ``penalty [N]`` or None, ``penalty_key`` (the hubness key it is for)."""

    z: np.ndarray
    basis: np.ndarray
    mean: np.ndarray
    penalty: np.ndarray | None
    penalty_key: str | None
    sha256: str

    def __len__(self) -> int:
        return len(self.z)

    def project(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``([Q, d] coordinates, [Q] offsets)`` of queries ``q [Q, D]``: a query's
        score against row ``i`` is ``coords @ z[i] + offset``."""
        q = np.atleast_2d(np.asarray(q, np.float32))
        return q @ self.basis.T, q @ self.mean

    def rows(self, idx) -> np.ndarray:
        """``[len(idx), D]`` float32: the rebuilt embeddings of rows ``idx``."""
        return np.asarray(self.z[idx], np.float32) @ self.basis + self.mean


def encode(emb: np.ndarray, dims: int = DIMS, head: int = HEAD) -> dict[str, np.ndarray]:
    """The compact arrays of ``emb [N, D]``: ``mean``, ``basis`` (the top ``dims``
    principal directions, each signed so that its largest entry is positive: the same
    file from the same embeddings), ``head`` (float16), ``tail`` (int8) and ``scale``."""
    x = np.asarray(emb, np.float64)
    mean = x.mean(0)
    xc = x - mean
    dims = min(dims, x.shape[1])
    w, v = np.linalg.eigh(xc.T @ xc)  # ascending eigenvalues
    basis = v[:, ::-1][:, :dims].T  # [dims, D]
    sign = np.sign(basis[np.arange(dims), np.abs(basis).argmax(1)])
    basis = (basis * sign[:, None]).astype(np.float16)
    z = xc @ basis.astype(np.float64).T  # projected on the basis as stored
    head = min(head, dims)
    tail = z[:, head:]
    scale = np.maximum(np.abs(tail).max(1), 1e-12) / 127.0 if tail.size else np.ones(len(z))
    return {
        "mean": mean.astype(np.float32),
        "basis": basis,
        "head": z[:, :head].astype(np.float16),
        "tail": np.round(tail / scale[:, None]).astype(np.int8),
        "scale": scale.astype(np.float32),
    }


def decode_z(arrays) -> np.ndarray:
    """``[N, d]`` float16 coordinates from the stored ``head``, ``tail`` and ``scale``
    (in blocks of rows: no float32 copy of the whole pool)."""
    head, tail, scale = arrays["head"], arrays["tail"], arrays["scale"]
    h = head.shape[1]
    out = np.empty((len(head), h + tail.shape[1]), np.float16)
    out[:, :h] = head
    for a in range(0, len(tail), 4096):
        b = a + 4096
        out[a:b, h:] = tail[a:b].astype(np.float32) * scale[a:b, None].astype(np.float32)
    return out


def write_compact(
    bundle: Path,
    captions: list[str],
    emb: np.ndarray,
    fingerprint: str,
    penalty: np.ndarray | None = None,
    penalty_key: str | None = None,
    info: dict | None = None,
) -> dict:
    """Write ``captions.emb.npz`` (the compact arrays of the pool's embeddings ``emb``
    ``[N, D]``, in the order of the de-duplicated ``captions``, and ``penalty``) and
    ``captions.emb.json`` (what they are for: the weights' ``fingerprint``, the
    captions' sha256, the penalty's hubness key, the file's sha256, ``info``); then the
    bundle's manifest. Returns the JSON written."""
    from vsekit.bundle import write_manifest

    if len(captions) != len(emb):
        raise ValueError(f"{len(captions)} captions for {len(emb)} embeddings")
    arrays = encode(emb)
    if penalty is not None:
        arrays["penalty"] = np.asarray(penalty, np.float32)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write(bundle / COMPACT_FILE, buf.getvalue())
    d = arrays["basis"].shape[0]
    meta = {
        "rows": len(emb),
        "embed_dim": int(emb.shape[1]),
        "dims": d,
        "head": int(arrays["head"].shape[1]),
        "model_fingerprint": fingerprint,
        "captions_sha256": captions_key(captions),
        "penalty_key": penalty_key if penalty is not None else None,
        "sha256": file_sha256(bundle / COMPACT_FILE),
        **(info or {}),
    }
    atomic_write(bundle / COMPACT_INFO, json.dumps(meta, indent=2) + "\n")
    write_manifest(bundle)
    return meta


def read_compact_info(bundle: Path) -> dict | None:
    """``captions.emb.json`` (the manifest verified it with the bundle), or None."""
    path = bundle / COMPACT_INFO
    if not path.is_file():
        return None
    from vsekit.bundle import read_json

    return read_json(path)


def read_compact(bundle: Path, meta: dict) -> CompactPool:
    """The compact pool of ``bundle``, its file checked against the sha256 in ``meta``
    (``captions.emb.json``); ModelError naming the file when it does not match."""
    from vsekit.bundle import ModelError

    path = bundle / COMPACT_FILE
    fix = "reinstall vsekit or rebuild the bundle"
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModelError(f"{path}: cannot be read ({e.strerror}); {fix}") from e
    sha = hashlib.sha256(data).hexdigest()
    if sha != meta.get("sha256"):
        raise ModelError(f"{path}: damaged or edited (its sha256 is not the one in "
                         f"{COMPACT_INFO}); {fix}")  # fmt: skip
    try:
        with np.load(io.BytesIO(data)) as z:
            arrays = {k: z[k] for k in z.files}
        coords = decode_z(arrays)
        basis = arrays["basis"].astype(np.float32)
        mean = arrays["mean"].astype(np.float32)
        penalty = arrays.get("penalty")
    except (OSError, ValueError, KeyError) as e:
        raise ModelError(f"{path}: unreadable ({e}); {fix}") from e
    want = (meta["rows"], meta["dims"]), (meta["dims"], meta["embed_dim"])
    if (coords.shape, basis.shape) != want:
        raise ModelError(f"{path}: shapes {coords.shape} and {basis.shape} are not the "
                         f"recorded ones; {fix}")  # fmt: skip
    return CompactPool(coords, basis, mean, penalty, meta.get("penalty_key"), sha)
