"""The PyTorch backend of the public model (:class:`VSEModel`), and :func:`load_model`.

``vsekit.load_model()`` gives a model with one API whatever runs it (see
:class:`~vsekit.runtime.base.BaseModel`)::

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
  image features, its tag vocabulary and the tags' word vectors;
* ``image.onnx``, ``text.onnx``, ``onnx.json``: the encoders for ONNX Runtime
  (``vse model onnx``), used by :class:`~vsekit.runtime.onnx_model.OnnxModel`.

``vse model export RUN OUT`` writes one from a training run (:mod:`vsekit.lab.train.export`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.numpy import save_file as save_np
from safetensors.torch import load_file, save_file

from vsekit.bundle import (
    BUNDLE_VERSION,
    DEFAULT_MODEL,
    TOKENIZER_FILE,
    ExpansionVectors,
    ModelError,
    bundle_dir,
    default_model_dir,
    read_bundle_extras,
    verify_bundle,
    write_expansion,
    write_manifest,
)
from vsekit.config import ConfigError
from vsekit.fne import FNEStats
from vsekit.fsio import atomic_dir
from vsekit.lab.models.factory import (
    create_model,
    model_config,
    text_encoders,
    upgrade_model_section,
    word_encoder,
    word_encoders,
)
from vsekit.runtime.base import (
    BaseModel,
    ImageInput,
    unit,
)
from vsekit.runtime.kinds import features_of_kind
from vsekit.text.vocab import Vocabulary

__all__ = ["BUNDLE_VERSION", "ModelError", "VSEModel", "default_model_dir"]


class VSEModel(BaseModel):
    """The PyTorch backend: the trainable modules, on CPU or GPU."""

    backend = "torch"

    def _tag_word_vectors(self) -> tuple[np.ndarray, list[bool]]:
        """The bundle's tag vectors, else GloVe's (a compound noun is the mean of its
        words): a tagger exported before the vectors were shipped still works here."""
        if self._tag_table is None:
            from vsekit.lab.text.glove import tag_vectors

            vecs, known = tag_vectors(self.tagger[1])
            self._tag_table = (np.asarray(vecs, np.float32), known.tolist())
        return self._tag_table

    def __init__(
        self,
        model: torch.nn.Module,
        info: dict,
        fne_stats: FNEStats | None = None,
        captions: list[str] | None = None,
        path: Path | None = None,
        tagger: tuple | None = None,
        device: str | None = None,
    ) -> None:
        if tagger is not None:
            tagger = (np.asarray(tagger[0], np.float32), list(tagger[1]))
        super().__init__(info, fne_stats, captions, path, tagger)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.eval().to(self.device)
        for m in self.model.modules():  # training's per-caption cache (finetune_cache) would
            if getattr(m, "cache_lower", False):  # grow with every query a server answers
                m.cache_lower = False
        self._backbone = None
        self.expansion: tuple[list[str], ExpansionVectors] | None = None
        self._base_vocab = getattr(self._word_encoder(), "vocab", None)

    def _word_encoder(self):
        """The word-level text encoder (a vocabulary and a word table), or None."""
        found = word_encoder(self.model)
        return found[1] if found else None

    def expand_vocabulary(
        self, words: Sequence[str], vectors: ExpansionVectors, info: dict
    ) -> None:
        """Append ``words`` with their ``vectors`` (in the word-embedding space; see
        :mod:`vsekit.text.expansion`) to the text encoder's vocabulary and table; an
        ensemble's word encoders (one learned space each) get one array each, keyed by
        their state-dict prefix (``members.0.text.``; a single array is the first's).
        Every existing word keeps its id and vector, and the model its fingerprint."""
        if self.expansion is not None:
            raise ModelError(f"{self.path}: the vocabulary is already expanded")
        encs = word_encoders(self.model)
        if not encs:
            raise ModelError("vocabulary expansion needs a recurrent text encoder (word table)")
        by_prefix = dict(vectors) if isinstance(vectors, dict) else {"vectors": vectors}
        if "vectors" in by_prefix:
            by_prefix[encs[0][0]] = by_prefix.pop("vectors")
        if set(by_prefix) != {p for p, _ in encs}:
            raise ModelError(f"expansion vectors for {sorted(by_prefix)}; the model's word "
                             f"encoders are {[p for p, _ in encs]}")  # fmt: skip
        self._base_vocab = encs[0][1].vocab
        for prefix, enc in encs:
            vec = np.asarray(by_prefix[prefix], np.float32)
            if vec.shape != (len(words), enc.embed.weight.shape[1]):
                raise ModelError(f"expansion vectors {vec.shape}, want ({len(words)}, "
                                 f"{enc.embed.weight.shape[1]})")  # fmt: skip
            enc.vocab = enc.vocab.extended(list(words))
            w = torch.cat([enc.embed.weight.data, torch.from_numpy(vec).to(enc.embed.weight)])
            enc.embed = torch.nn.Embedding.from_pretrained(w, freeze=False, padding_idx=0)
            by_prefix[prefix] = vec
        single = len(encs) == 1
        self.expansion = (list(words), by_prefix[encs[0][0]] if single else by_prefix)
        self.info = dict(self.info, vocab_expansion=info)

    # -- loading and saving --------------------------------------------------------
    @classmethod
    def load(
        cls, name: str | os.PathLike = DEFAULT_MODEL, device: str | None = None, expand: bool = True
    ) -> VSEModel:
        """``"default"`` (the shipped model) or a bundle directory. ``expand=False``
        leaves out the bundle's vocabulary expansion (the closed vocabulary it trained
        with; for comparisons)."""
        path = bundle_dir(name)
        if os.environ.get("VSEKIT_THREADS", "").isdigit():  # set by `vse ... --threads`
            torch.set_num_threads(max(1, int(os.environ["VSEKIT_THREADS"])))
        verify_bundle(path)
        try:
            info = json.loads((path / "bundle.json").read_text())
            mcfg = model_config(upgrade_model_section(info["config"]["model"]))
            # weights come from the bundle: no GloVe initialisation (400k words) to load
            for text in [getattr(mcfg, "text", None)] + [
                m.get("text") for m in getattr(mcfg, "members", [])
            ]:  # fmt: skip
                if isinstance(text, dict):
                    text["glove"] = False
                elif text is not None:
                    text.glove = False
            vocab = Vocabulary.load(path / "vocab.json")
            model = create_model(info["img_dim"], vocab, mcfg)
            state = load_file(path / "model.safetensors")
            model.load_state_dict({k: v.float() for k, v in state.items()})
            extras = read_bundle_extras(path, info)
        except (OSError, KeyError, ValueError, ConfigError, RuntimeError, SafetensorError) as e:
            raise ModelError(f"{path}: broken model bundle ({e})") from e
        out = cls(model, info, extras["fne_stats"], extras["captions"], path, extras["tagger"],
                  device)  # fmt: skip
        out._tag_table = extras["tag_table"]
        out._tag_bias = extras["tag_bias"]
        if extras["expansion"] is not None and expand:
            out.expand_vocabulary(*extras["expansion"])
        return out

    def save(self, out: str | Path, half: bool = True, captions: Sequence[str] = ()) -> Path:
        """Write a bundle directory atomically (built beside, then swapped in)."""
        dtype = torch.float16 if half else torch.float32
        with atomic_dir(out) as tmp:
            state = {k: v.to(dtype).contiguous() for k, v in self._base_state().items()}
            save_file(state, tmp / "model.safetensors")
            (self._base_vocab or text_encoders(self.model)[0][1].vocab).save(tmp / "vocab.json")
            for _, enc in text_encoders(self.model):  # word pieces: the ONNX backend reads it
                if hasattr(enc, "tokenizer"):
                    shutil.copyfile(enc.tokenizer.path, tmp / TOKENIZER_FILE)
            if self.expansion is not None:
                write_expansion(tmp, *self.expansion, self.info.get("vocab_expansion", {}), half)
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
                np_dtype = np.float16 if half else np.float32
                tagger = {"W": np.ascontiguousarray(w, np_dtype),
                          "vectors": np.ascontiguousarray(vecs, np.float32),
                          "known": np.asarray(known, np.uint8)}  # fmt: skip
                if self._tag_bias is not None:
                    tagger["bias"] = np.ascontiguousarray(self._tag_bias, np.float32)
                save_np(tagger, tmp / "tagger.safetensors")
                (tmp / "tags.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
            info = dict(self.info, dtype=str(dtype).removeprefix("torch."))
            info.pop("vocab_expansion", None)  # in expansion.json, beside its vectors
            (tmp / "bundle.json").write_text(json.dumps(info, indent=2) + "\n")
            write_manifest(tmp)
        return Path(out)

    # -- identity ------------------------------------------------------------------
    @property
    def embed_dim(self) -> int:
        return self.model.embed_dim

    @property
    def similarity_name(self) -> str:
        return self.model.cfg.similarity

    @property
    def text_vocabulary(self):
        """The word vocabulary of a word-level text encoder (in an ensemble with a
        word-piece tower too: a word outside it is read only as word pieces, and a query
        of such words alone is refused, as nonsense would be); None without one."""
        return getattr(self._word_encoder(), "vocab", None)

    def _base_state(self) -> dict[str, torch.Tensor]:
        """The weights without a vocabulary expansion's rows (what the bundle stores in
        ``model.safetensors``, and what identifies the model)."""
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        if self.expansion is not None:
            for prefix, _ in word_encoders(self.model):
                key = prefix + "embed.weight"
                state[key] = state[key][: len(self._base_vocab)]
        return state

    def _weights_fp16(self) -> Iterator[tuple[str, np.ndarray]]:
        for k, v in self._base_state().items():
            yield k, v.to(torch.float16).numpy()

    # -- the image side ------------------------------------------------------------
    def backbone(self):
        """The image backbone, created on first use from the installed weights, which
        must be the ones the model recorded (a WeightsError names both hashes)."""
        if self._backbone is None:
            from vsekit.lab.features.backbones import create_backbone
            from vsekit.lab.features.extract import prepare_model

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
        (one batch, decoded together). Raises :class:`~vsekit.media.images.ImageError` for an
        unreadable path."""
        from vsekit.lab.features.extract import embed_images

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
        return unit(out) if normalize else out

    @torch.inference_mode()
    def _encode_text_batch(self, texts: list[str]) -> np.ndarray:
        return self.model.encode_texts(texts).float().cpu().numpy()

    @torch.inference_mode()
    def similarity(self, image_emb, text_emb) -> np.ndarray:
        """``[N, D] x [M, D] -> [N, M]`` with the model's own similarity module."""
        a = torch.as_tensor(np.atleast_2d(np.asarray(image_emb, np.float32)))
        b = torch.as_tensor(np.atleast_2d(np.asarray(text_emb, np.float32)))
        return self.model.similarity(a.to(self.device), b.to(self.device)).cpu().numpy()
