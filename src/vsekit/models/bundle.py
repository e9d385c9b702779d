"""A trained model packaged to embed raw images and raw text, with no FeatureStore.

Search, annotation and serving see only this: ``EmbeddingModel.embed_images(images)``
and ``embed_texts(texts)``, both ``[N, D]`` float32 unit vectors in the joint space,
and ``scores(img, txt)`` for the model's own similarity.

A bundle is a directory:

* ``bundle.json``: the model config, the image side (backbone, crops, feature kind,
  FNE thresholds), the run it came from and its dev metrics;
* ``model.safetensors``: the joint-embedding weights (float16 when exported ``half``);
* ``vocab.json``: the text vocabulary;
* ``fne_stats.safetensors``: train-split FNE mean/std (FNE models only);
* ``captions.txt``: an optional caption pool for annotation, one caption per line;
* ``tagger.safetensors`` + ``tags.txt``: an optional bilinear tag ranker on the same
  image features, and its tag vocabulary (``vse model export --tagger RUN``).

``vse model export RUN OUT`` writes one from a training run; the package ships one
(``EmbeddingModel.load("default")``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file as load_np
from safetensors.numpy import save_file as save_np
from safetensors.torch import load_file, save_file

from ..data.vocab import Vocabulary
from ..features.fne import FNEStats, full_network_embedding
from .factory import create_model

BUNDLE_VERSION = 1
DEFAULT_MODEL = "default"
FEATURE_KINDS = ("baseline", "baseline_raw", "fne", "pooled")


class ModelError(ValueError):
    """A model bundle or run could not be loaded; the message names the path."""


def default_model_dir() -> Path:
    return Path(str(resources.files("vsekit") / "assets" / "default"))


class EmbeddingModel:
    """Image and text encoders of one trained model, from raw inputs to the joint space."""

    def __init__(
        self,
        model: torch.nn.Module,
        info: dict,
        fne_stats: FNEStats | None = None,
        captions: list[str] | None = None,
        path: Path | None = None,
        tagger: tuple[torch.Tensor, list[str]] | None = None,
    ) -> None:
        kind = info["image"]["features"]
        if kind not in FEATURE_KINDS:
            raise ModelError(f"{path}: image features {kind!r} cannot be computed for new images")
        if kind == "fne" and fne_stats is None:
            raise ModelError(f"{path}: an FNE model needs its fne_stats")
        self.model = model.eval()
        self.info = info
        self.fne_stats = fne_stats
        self.captions = captions or []
        self.path = path
        self.tagger = tagger  # (W [F, word_dim], tag names)
        self._tag_vectors = None
        self._backbone = None

    # -- loading -------------------------------------------------------------------
    @classmethod
    def load(cls, name: str | Path = DEFAULT_MODEL) -> EmbeddingModel:
        """``"default"`` (the shipped model), a bundle directory, or a training run."""
        path = default_model_dir() if str(name) == DEFAULT_MODEL else Path(name).expanduser()
        if (path / "bundle.json").is_file():
            return cls._from_bundle(path)
        if (path / "config.json").is_file() and (path / "best.json").is_file():
            return cls.from_run(path)
        raise ModelError(f"{path}: not a model bundle (bundle.json) nor a training run")

    @classmethod
    def _from_bundle(cls, path: Path) -> EmbeddingModel:
        from ..train.config import ExperimentConfig, from_dict

        try:
            info = json.loads((path / "bundle.json").read_text())
            cfg = from_dict(ExperimentConfig, info["config"])
            vocab = Vocabulary.load(path / "vocab.json")
            model = create_model(info["img_dim"], vocab, cfg.model)
            state = load_file(path / "model.safetensors")
        except (OSError, KeyError, ValueError) as e:
            raise ModelError(f"{path}: broken model bundle ({e})") from e
        model.load_state_dict({k: v.float() for k, v in state.items()})
        stats = None
        if (path / "fne_stats.safetensors").is_file():
            t = load_np(path / "fne_stats.safetensors")
            stats = FNEStats(t["mean"], t["std"], int(info["image"]["fne"]["n_fit"]))
        captions = None
        if (path / "captions.txt").is_file():
            captions = (path / "captions.txt").read_text(encoding="utf-8").splitlines()
        tagger = None
        if (path / "tagger.safetensors").is_file():
            w = load_file(path / "tagger.safetensors")["W"].float()
            tagger = (w, (path / "tags.txt").read_text(encoding="utf-8").splitlines())
        return cls(model, info, stats, captions, path, tagger)

    @classmethod
    def from_run(cls, run: str | Path, which: str = "best") -> EmbeddingModel:
        """A training run, with the image side read from the FeatureStore it trained on."""
        from ..features.store import FeatureStore
        from ..train.trainer import load_run

        run = Path(run)
        model, meta = load_run(run, which)
        data = meta["config"]["data"]
        store = FeatureStore(Path(data["store"]).expanduser())
        info = {
            "version": BUNDLE_VERSION,
            "config": meta["config"],
            "img_dim": meta["img_dim"],
            "image": {
                "backbone": store.meta["backbone"],
                "crops": int(store.meta["crops"]),
                "features": data["features"],
                "baseline_layer": store.meta["baseline_layer"],
                "fne": store.meta.get("fne") if data["features"] == "fne" else None,
            },
            "source": {"run": run.name, "checkpoint": which},
            "dev_metrics": _run_metrics(run, which),
        }
        stats = store.fne_stats() if data["features"] == "fne" else None
        return cls(model, info, stats, None, run)

    def attach_tagger(self, run: str | Path) -> None:
        """Add a trained tag ranker (a ``task: tags`` run) that reads the same image
        features as this model (ValueError if it does not)."""
        from ..train.trainer import load_run

        tagger, meta = load_run(run)
        data = meta["config"]["data"]
        spec = self.info["image"]
        if meta["config"].get("task") != "tags":
            raise ValueError(f"{run}: not a tag-ranking run")
        if (data["backbone"], int(data["crops"]), data["features"]) != (
            spec["backbone"],
            int(spec["crops"]),
            spec["features"],
        ):
            raise ValueError(f"{run}: its image features differ from the model's ({spec})")
        self.tagger = (tagger.W.detach().float().cpu(), list(tagger.vocab.itos))
        self.info["tagger"] = {
            "run": Path(run).name,
            "dev_metrics": _run_metrics(Path(run), "best"),
        }

    def tags(self, features: np.ndarray, k: int = 10) -> list[list[tuple[str, float]]]:
        """Top-``k`` tags of each image from its ``[N, F]`` features (needs a tagger)."""
        if self.tagger is None:
            return [[] for _ in range(len(features))]
        w, names = self.tagger
        if self._tag_vectors is None:
            from ..tags.data import tag_vectors

            vecs, known = tag_vectors(names)
            self._tag_vectors = (
                torch.from_numpy(vecs[known]),
                [n for n, ok in zip(names, known, strict=True) if ok],
            )
        vecs, known_names = self._tag_vectors
        s = (torch.from_numpy(np.asarray(features, np.float32)) @ w) @ vecs.T
        top = torch.topk(s, min(k, s.shape[1]), dim=1)
        return [
            [(known_names[j], float(v)) for v, j in zip(vals.tolist(), idx.tolist(), strict=True)]
            for vals, idx in zip(top.values, top.indices, strict=True)
        ]

    def save(self, out: str | Path, half: bool = True, captions: Sequence[str] = ()) -> Path:
        """Write a bundle directory atomically (written beside, then renamed)."""
        out = Path(out)
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        dtype = torch.float16 if half else torch.float32
        state = {k: v.detach().to(dtype).contiguous() for k, v in self.model.state_dict().items()}
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
            save_file({"W": w.to(dtype).contiguous()}, tmp / "tagger.safetensors")
            (tmp / "tags.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
        info = dict(self.info, dtype=str(dtype).removeprefix("torch."))
        (tmp / "bundle.json").write_text(json.dumps(info, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
        return out

    # -- encoding ------------------------------------------------------------------
    @property
    def embed_dim(self) -> int:
        return self.model.embed_dim

    @property
    def similarity_name(self) -> str:
        return self.model.cfg.similarity

    @property
    def fingerprint(self) -> str:
        """Changes whenever the weights or the image side change (16 hex digits)."""
        h = hashlib.sha256(json.dumps(self.info["image"], sort_keys=True).encode())
        for k, v in sorted(self.model.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().to(torch.float16).cpu().numpy().tobytes())
        return h.hexdigest()[:16]

    def backbone(self):
        """The image backbone, created on first use (installed weights)."""
        if self._backbone is None:
            from ..features.backbones import create_backbone
            from ..features.extract import prepare_model

            spec = self.info["image"]
            net = create_backbone(spec["backbone"], weights=spec.get("weights", "auto"))
            self._backbone = prepare_model(net, None)
        return self._backbone

    def image_features(self, images: Sequence) -> np.ndarray:
        """PIL images or paths -> ``[N, F]`` features of the kind the model was trained on.
        Raises :class:`~vsekit.images.ImageError` for an unreadable path."""
        from ..features.extract import embed_images

        spec = self.info["image"]
        net = self.backbone()
        pooled, _ = embed_images(net, images, spec["crops"], False)
        if spec["features"] == "pooled":
            return pooled
        if spec["features"] in ("baseline", "baseline_raw"):
            sl = net.layer_slices()[spec["baseline_layer"]]
            x = torch.from_numpy(np.ascontiguousarray(pooled[:, sl]))
            if spec["features"] == "baseline_raw":
                return x.numpy()
            return torch.nn.functional.normalize(x, dim=1).numpy()
        fne = spec["fne"]
        return full_network_embedding(pooled, self.fne_stats, fne["f_minus"], fne["f_plus"])

    @torch.inference_mode()
    def embed_features(self, features: np.ndarray) -> np.ndarray:
        """``[N, F]`` image features -> ``[N, D]`` unit vectors."""
        return self.model.encode_images(torch.from_numpy(np.asarray(features))).cpu().numpy()

    def embed_images(self, images: Sequence) -> np.ndarray:
        """PIL images or paths -> ``[N, D]`` float32 unit vectors."""
        return self.embed_features(self.image_features(images))

    @torch.inference_mode()
    def embed_texts(self, texts: Sequence[str], batch_size: int = 512) -> np.ndarray:
        """Raw sentences -> ``[M, D]`` float32 unit vectors."""
        out = [
            self.model.encode_texts(list(texts[i : i + batch_size])).cpu().numpy()
            for i in range(0, len(texts), batch_size)
        ]
        return np.concatenate(out) if out else np.zeros((0, self.embed_dim), np.float32)

    @torch.inference_mode()
    def scores(self, img: np.ndarray, txt: np.ndarray) -> np.ndarray:
        """``[N, D] x [M, D] -> [N, M]`` with the model's own similarity."""
        s = self.model.similarity(torch.from_numpy(img), torch.from_numpy(txt))
        return s.cpu().numpy()


def _run_metrics(run: Path, which: str) -> dict | None:
    p = run / f"{which}.json"
    return json.loads(p.read_text()).get("metrics") if p.is_file() else None
