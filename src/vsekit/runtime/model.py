"""The public model: raw images and raw sentences into one joint space.

``vsekit.load_model()`` gives a :class:`VSEModel`. Everything that embeds, searches,
annotates or tags (the CLI, the index, the service, the benchmarks of shipped models)
goes through it::

    m = vsekit.load_model()                       # the shipped default
    t = m.encode_text(["a dog", "two people"])    # [2, D] float32, unit rows
    i = m.encode_image(["a.jpg", "b.jpg"])        # [2, D], streamed in batches
    m.similarity(i, t)                            # [2, 2]: images x texts
    m.annotate("a.jpg", k=5)                      # best captions of the model's pool
    m.tags("a.jpg", k=10)                         # ranked tags (bundles with a tagger)

A bundle is a directory:

* ``bundle.json``: the model config, the image side (backbone, its weights' sha256 and
  preprocessing, crops, feature kind, FNE thresholds), the run it came from, dev metrics;
* ``model.safetensors``: the joint-embedding weights (float16 when exported ``half``);
* ``vocab.json``: the text vocabulary;
* ``fne_stats.safetensors``: train-split FNE mean/std (FNE models only);
* ``captions.txt``: an optional caption pool for annotation, one caption per line;
* ``tagger.safetensors`` + ``tags.txt``: an optional bilinear tag ranker on the same
  image features, and its tag vocabulary.

``vse model export RUN OUT`` writes one from a training run (:mod:`vsekit.train.export`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from PIL import Image
from safetensors.numpy import load_file as load_np
from safetensors.numpy import save_file as save_np
from safetensors.torch import load_file, save_file

from ..config import ConfigError
from ..data.vocab import Vocabulary
from ..features.fne import FNEStats
from ..features.kinds import FEATURE_KINDS, features_of_kind
from ..fsio import atomic_dir
from ..models.factory import create_model, model_config, upgrade_model_section

BUNDLE_VERSION = 1
DEFAULT_MODEL = "default"

ImageInput = str | os.PathLike | Image.Image
Tensorish = np.ndarray | torch.Tensor


class ModelError(ValueError):
    """A model bundle could not be loaded; the message names the path."""


def default_model_dir() -> Path:
    return Path(str(resources.files("vsekit") / "assets" / "default"))


def list_models() -> list[str]:
    """Names :func:`load_model` accepts besides a path: the models shipped in the package."""
    return [DEFAULT_MODEL]


def load_model(name_or_path: str | os.PathLike = DEFAULT_MODEL, device: str | None = None):
    """A model by name (:func:`list_models`) or a bundle directory; ``device`` is a torch
    device (default: CUDA when present, else CPU)."""
    return VSEModel.load(name_or_path, device=device)


def _batches(items: Sequence, size: int) -> Iterator[Sequence]:
    if size < 1:
        raise ValueError(f"batch_size must be >= 1, got {size}")
    for a in range(0, len(items), size):
        yield items[a : a + size]


def _convert(x: np.ndarray, convert_to: str) -> Tensorish:
    if convert_to == "numpy":
        return x
    if convert_to == "torch":
        return torch.from_numpy(x)
    raise ValueError(f"convert_to: use numpy | torch, not {convert_to!r}")


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


class VSEModel:
    """Image and text encoders of one trained model, from raw inputs to the joint space."""

    def __init__(
        self,
        model: torch.nn.Module,
        info: dict,
        fne_stats: FNEStats | None = None,
        captions: list[str] | None = None,
        path: Path | None = None,
        tagger: tuple[torch.Tensor, list[str]] | None = None,
        device: str | None = None,
    ) -> None:
        kind = info["image"]["features"]
        if kind not in FEATURE_KINDS:
            raise ModelError(f"{path}: image features {kind!r} cannot be computed for new images")
        if kind == "fne" and fne_stats is None:
            raise ModelError(f"{path}: an FNE model needs its fne_stats")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.eval().to(self.device)
        self.info = info
        self.fne_stats = fne_stats
        self.captions = captions or []
        self.path = path
        self.tagger = tagger  # (W [F, word_dim], tag names)
        self._tag_vectors = None  # (vectors of the known tags, their names)
        self._tag_table = None  # ([T, D] word vectors of every tag, [T] known)
        self._backbone = None
        self._pool = None

    # -- loading and saving --------------------------------------------------------
    @classmethod
    def load(cls, name: str | os.PathLike = DEFAULT_MODEL, device: str | None = None) -> VSEModel:
        """``"default"`` (the shipped model) or a bundle directory."""
        path = default_model_dir() if str(name) == DEFAULT_MODEL else Path(name).expanduser()
        if not (path / "bundle.json").is_file():
            hint = (
                "; a training run: export it first with `vse model export RUN OUT`"
                if (path / "config.json").is_file()
                else ""
            )
            raise ModelError(f"{path}: not a model bundle (no bundle.json){hint}")
        try:
            info = json.loads((path / "bundle.json").read_text())
            mcfg = model_config(upgrade_model_section(info["config"]["model"]))
            if getattr(mcfg, "text", None) is not None:  # weights come from the bundle:
                mcfg.text.glove = False  # no GloVe initialisation (400k words) to load
            vocab = Vocabulary.load(path / "vocab.json")
            model = create_model(info["img_dim"], vocab, mcfg)
            state = load_file(path / "model.safetensors")
            model.load_state_dict({k: v.float() for k, v in state.items()})
        except (OSError, KeyError, ValueError, ConfigError, RuntimeError) as e:
            raise ModelError(f"{path}: broken model bundle ({e})") from e
        stats = None
        if (path / "fne_stats.safetensors").is_file():
            t = load_np(path / "fne_stats.safetensors")
            stats = FNEStats(t["mean"], t["std"], int(info["image"]["fne"]["n_fit"]))
        captions = None
        if (path / "captions.txt").is_file():
            captions = (path / "captions.txt").read_text(encoding="utf-8").splitlines()
        tagger = None
        if (path / "tagger.safetensors").is_file():
            t = load_file(path / "tagger.safetensors")
            tagger = (t["W"].float(), (path / "tags.txt").read_text(encoding="utf-8").splitlines())
        out = cls(model, info, stats, captions, path, tagger, device)
        if tagger is not None and "vectors" in t:  # the tags' word vectors, shipped
            out._tag_table = (t["vectors"].float(), t["known"].bool().tolist())
        return out

    def save(self, out: str | Path, half: bool = True, captions: Sequence[str] = ()) -> Path:
        """Write a bundle directory atomically (built beside, then swapped in)."""
        dtype = torch.float16 if half else torch.float32
        with atomic_dir(out) as tmp:
            state = {
                k: v.detach().to("cpu", dtype).contiguous()
                for k, v in self.model.state_dict().items()
            }
            save_file(state, tmp / "model.safetensors")
            self.model.text.vocab.save(tmp / "vocab.json")
            if self.fne_stats is not None:
                stats = {"mean": self.fne_stats.mean, "std": self.fne_stats.std}
                save_np({k: np.asarray(v) for k, v in stats.items()}, tmp / "fne_stats.safetensors")
            pool = list(captions) or self.captions
            if pool:
                text = "\n".join(c.replace("\n", " ").strip() for c in pool) + "\n"
                (tmp / "captions.txt").write_text(text, encoding="utf-8")
            if self.tagger is not None:
                w, names = self.tagger
                vecs, known = self._tag_word_vectors()
                tagger = {"W": w.to(dtype).contiguous(), "vectors": vecs.float().contiguous(),
                          "known": torch.tensor(known, dtype=torch.uint8)}  # fmt: skip
                save_file(tagger, tmp / "tagger.safetensors")
                (tmp / "tags.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
            info = dict(self.info, dtype=str(dtype).removeprefix("torch."))
            (tmp / "bundle.json").write_text(json.dumps(info, indent=2) + "\n")
        return Path(out)

    # -- identity ------------------------------------------------------------------
    @property
    def embed_dim(self) -> int:
        return self.model.embed_dim

    @property
    def similarity_name(self) -> str:
        return self.model.cfg.similarity

    @property
    def fingerprint(self) -> str:
        """Changes whenever the weights or the image side (backbone, its weights' sha256,
        preprocessing, crops, feature kind) change (16 hex digits)."""
        h = hashlib.sha256(json.dumps(self.info["image"], sort_keys=True).encode())
        for k, v in sorted(self.model.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().to(torch.float16).cpu().numpy().tobytes())
        return h.hexdigest()[:16]

    def describe(self, name: str | None = None) -> dict:
        """What an index records about the model its embeddings come from."""
        return {
            "name": name or (str(self.path) if self.path else "in-memory"),
            "fingerprint": self.fingerprint,
            "dim": self.embed_dim,
            "similarity": self.similarity_name,
            "backbone": self.info["image"]["backbone"],
            "weights_sha256": self.info["image"].get("weights_sha256"),
        }

    # -- the image side ------------------------------------------------------------
    @property
    def decode_size(self) -> int:
        """Short side to decode photos at (reduced-size JPEG decoding above it)."""
        from ..features.crops import decode_size

        return decode_size(int(self.info["image"].get("preprocessing", {}).get("input_size", 224)))

    def backbone(self):
        """The image backbone, created on first use from the installed weights, which
        must be the ones the model recorded (a WeightsError names both hashes)."""
        if self._backbone is None:
            from ..features.backbones import create_backbone
            from ..features.extract import prepare_model

            spec = self.info["image"]
            weights = spec.get("weights", "auto")
            sha = spec.get("weights_sha256")
            if weights != "random" and not sha:
                raise ModelError(
                    f"{self.path}: the bundle records no backbone weights sha256, so the "
                    "weights it needs cannot be verified; re-export it with `vse model export`"
                )
            net = create_backbone(spec["backbone"], weights=weights, sha256=sha)
            self._backbone = prepare_model(net, str(self.device))
        return self._backbone

    def image_features(self, images: Sequence[ImageInput]) -> np.ndarray:
        """PIL images or paths -> ``[N, F]`` features of the kind the model was trained on
        (one batch, decoded together). Raises :class:`~vsekit.images.ImageError` for an
        unreadable path."""
        from ..features.extract import embed_images

        spec = self.info["image"]
        net = self.backbone()
        pooled, _ = embed_images(net, images, spec["crops"], False)
        fne = spec.get("fne") or {}
        return features_of_kind(
            pooled,
            spec["features"],
            net.layer_slices()[spec["baseline_layer"]],
            self.fne_stats,
            *([fne["f_minus"], fne["f_plus"]] if fne else []),
        )

    # -- encoding ------------------------------------------------------------------
    @torch.inference_mode()
    def encode_image_features(self, features: np.ndarray, normalize: bool = True) -> np.ndarray:
        """``[N, F]`` image features -> ``[N, D]`` joint-space vectors."""
        x = torch.from_numpy(np.asarray(features)).to(self.device)
        out = self.model.encode_images(x).float().cpu().numpy()
        return _unit(out) if normalize else out

    def encode_image(
        self,
        images: ImageInput | Sequence[ImageInput],
        batch_size: int = 16,
        normalize: bool = True,
        convert_to: Literal["numpy", "torch"] = "numpy",
        show_progress: bool = False,
    ) -> Tensorish:
        """Paths or PIL images -> ``[N, D]`` float32 (one input -> ``[D]``).

        Images are decoded, cropped and run through the backbone ``batch_size`` at a time,
        so memory is bounded by the batch, not by ``len(images)``. ``normalize``: unit
        rows (the models' own outputs are already unit-norm for cosine similarity).
        """
        single = isinstance(images, str | os.PathLike | Image.Image)
        items = [images] if single else list(images)
        out = np.zeros((len(items), self.embed_dim), np.float32)
        bar = _progress(len(items), "images", show_progress)
        a = 0
        for batch in _batches(items, batch_size):
            out[a : a + len(batch)] = self.encode_image_features(
                self.image_features(batch), normalize
            )
            a += len(batch)
            bar.update(len(batch))
        bar.close()
        return _convert(out[0] if single else out, convert_to)

    @torch.inference_mode()
    def encode_text(
        self,
        texts: str | Sequence[str],
        batch_size: int = 256,
        normalize: bool = True,
        convert_to: Literal["numpy", "torch"] = "numpy",
        show_progress: bool = False,
    ) -> Tensorish:
        """Raw sentences -> ``[M, D]`` float32 (one string -> ``[D]``)."""
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        bad = [k for k, t in enumerate(items) if not isinstance(t, str)]
        if bad:
            raise TypeError(f"encode_text: item {bad[0]} is {type(items[bad[0]]).__name__}")
        chunks = []
        bar = _progress(len(items), "texts", show_progress)
        for batch in _batches(items, batch_size):
            chunks.append(self.model.encode_texts(list(batch)).float().cpu().numpy())
            bar.update(len(batch))
        bar.close()
        out = np.concatenate(chunks) if chunks else np.zeros((0, self.embed_dim), np.float32)
        out = _unit(out) if normalize else out
        return _convert(out[0] if single else out, convert_to)

    @torch.inference_mode()
    def similarity(self, image_emb: Tensorish, text_emb: Tensorish) -> np.ndarray:
        """``[N, D] x [M, D] -> [N, M]`` with the model's own similarity (cosine, order
        or euclidean; order is asymmetric, so images come first). 1-D inputs count as
        one row each."""
        a = torch.as_tensor(np.atleast_2d(np.asarray(image_emb, np.float32)))
        b = torch.as_tensor(np.atleast_2d(np.asarray(text_emb, np.float32)))
        return self.model.similarity(a.to(self.device), b.to(self.device)).cpu().numpy()

    # -- annotation and tags -------------------------------------------------------
    @property
    def caption_pool(self):
        """The model's captions with their embeddings (computed once, cached on disk)."""
        if self._pool is None:
            from .captions import CaptionPool

            self._pool = CaptionPool(self)
        return self._pool

    def annotate(
        self, images: ImageInput | Sequence[ImageInput], k: int = 5
    ) -> list[tuple[str, float]] | list[list[tuple[str, float]]]:
        """The ``k`` best captions of the model's pool for each image, with scores."""
        single = isinstance(images, str | os.PathLike | Image.Image)
        emb = self.encode_image([images] if single else images)
        best = self.caption_pool.best(emb, k)
        return best[0] if single else best

    def tags(
        self, images: ImageInput | Sequence[ImageInput], k: int = 10
    ) -> list[tuple[str, float]] | list[list[tuple[str, float]]]:
        """The ``k`` best tags of each image (empty without a tagger in the bundle)."""
        single = isinstance(images, str | os.PathLike | Image.Image)
        items = [images] if single else list(images)
        out = self.tags_from_features(self.image_features(items), k) if items else []
        return out[0] if single else out

    def _tag_word_vectors(self) -> tuple[torch.Tensor, list[bool]]:
        """``([T, D] word vectors, [T] known)`` of the tagger's tags: shipped in the bundle,
        else from GloVe (a compound noun is the mean of its words)."""
        if self._tag_table is None:
            from ..text.glove import tag_vectors

            vecs, known = tag_vectors(self.tagger[1])
            self._tag_table = (torch.from_numpy(vecs), known.tolist())
        return self._tag_table

    def tags_from_features(
        self, features: np.ndarray, k: int = 10
    ) -> list[list[tuple[str, float]]]:
        """Top-``k`` tags of each image from its ``[N, F]`` features."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if self.tagger is None:
            return [[] for _ in range(len(features))]
        w, names = self.tagger
        if self._tag_vectors is None:
            vecs, known = self._tag_word_vectors()
            kept = [n for n, ok in zip(names, known, strict=True) if ok]
            self._tag_vectors = (vecs[torch.tensor(known, dtype=torch.bool)], kept)
        vecs, known_names = self._tag_vectors
        s = (torch.from_numpy(np.asarray(features, np.float32)) @ w) @ vecs.T
        top = torch.topk(s, min(k, s.shape[1]), dim=1)
        return [
            [(known_names[j], float(v)) for v, j in zip(vals.tolist(), idx.tolist(), strict=True)]
            for vals, idx in zip(top.values, top.indices, strict=True)
        ]


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, unit: str, show: bool):
    if not show:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit=f" {unit}", dynamic_ncols=True)
