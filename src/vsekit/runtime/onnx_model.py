"""The ONNX Runtime backend of the public model: no PyTorch at inference.

Reads a bundle's ``image.onnx`` and ``text.onnx`` (written by ``vse model onnx``), checks
them against the sha256 in ``onnx.json``, and runs them on the CPU. ``precision="int8"``
runs ``image.int8.onnx`` instead, the image graph quantised statically (VNNI on x86): a
different image encoder, so it has its own fingerprint and an index records which one
built it. A bundle may hold only the int8 image graph (``vse model onnx --int8-only``,
as the shipped default does); fp32 is then still loadable for text (an fp32 index is
searched with it), and encoding an image says which graph is missing. Text is tokenised and
looked up in the bundle's vocabulary in Python; images are decoded and cropped with PIL
and NumPy (:mod:`vsekit.media.views`), exactly as the PyTorch path does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from vsekit.bundle import (
    IMAGE_FILES,
    INT8_FILE,
    PRECISIONS,
    TOKENIZER_FILE,
    ModelError,
    bundle_dir,
    int8_fingerprint,
    missing_onnx,
    read_bundle_extras,
    read_json,
    read_onnx_meta,
    text_files,
    verify_bundle,
    verify_onnx,
)
from vsekit.media.images import load_image
from vsekit.media.views import crop_views_array
from vsekit.runtime.base import (
    BaseModel,
    ImageInput,
    unit,
)
from vsekit.runtime.precision import choose_precision, cpu_info
from vsekit.text.tokenizer import tokenize
from vsekit.text.vocab import Vocabulary

#: The text graph runs on one thread unless told otherwise: a query is a GRU over a few
#: words, where a thread pool's hand-offs cost more than they save, and a service's
#: concurrent requests then share the cores instead of oversubscribing them
#: (measured by benchmarks/http_load.py; see docs/benchmarks.md).
TEXT_THREADS = 1


def providers() -> list[str]:
    """ONNX Runtime's execution providers: the CPU's, or with ``VSEKIT_ONNX_DEVICE=cuda``
    (``vse index --ray --gpus-per-worker``'s replicas) CUDA's first, where ONNX Runtime
    places each node it can, the rest staying on the CPU. Asking for CUDA where this
    ONNX Runtime has no CUDA provider (``pip install onnxruntime-gpu``) is an error, not
    a quiet run on the CPU."""
    import onnxruntime as ort

    device = os.environ.get("VSEKIT_ONNX_DEVICE", "cpu")
    if device == "cpu":
        return ["CPUExecutionProvider"]
    if device != "cuda":
        raise RuntimeError(f"VSEKIT_ONNX_DEVICE: 'cpu' or 'cuda', not {device!r}")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeError(
            "a GPU was asked for, but this ONNX Runtime has no CUDA provider "
            f"(it has {', '.join(ort.get_available_providers())}): pip install onnxruntime-gpu"
        )
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _session(path: Path, threads: int | None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    threads = threads or (TEXT_THREADS if path.name.startswith("text.") else None)
    if threads:
        opts.intra_op_num_threads = threads
    chosen = providers()
    sess = ort.InferenceSession(str(path), opts, providers=chosen)
    if chosen[0] != "CPUExecutionProvider":  # ONNX Runtime falls back to the CPU quietly
        if chosen[0] not in sess.get_providers():
            raise RuntimeError(
                f"{path.name}: a GPU was asked for, but ONNX Runtime could not start its "
                "CUDA provider (no GPU visible, or CUDA/cuDNN libraries missing)"
            )
        sess.disable_fallback()
    return sess


class OnnxModel(BaseModel):
    """A bundle run by ONNX Runtime on the CPU."""

    backend = "onnx"

    def __init__(
        self,
        path: Path,
        info: dict,
        threads: int | None = None,
        precision: str | None = None,
        image_precision: str | None = None,
    ) -> None:
        if precision not in (*PRECISIONS, None) or image_precision not in (*PRECISIONS, None):
            raise ModelError(f"precision: use {' | '.join(PRECISIONS)}, not {precision!r}")
        extras = read_bundle_extras(path, info)
        super().__init__(info, extras["fne_stats"], extras["captions"], path, extras["tagger"])
        self._tag_table = extras["tag_table"]
        self._tag_bias = extras["tag_bias"]
        meta = read_onnx_meta(path)
        #: what runs on this CPU and why (:mod:`vsekit.runtime.precision`)
        self.precision_choice = choose_precision(meta, cpu_info(), precision, image_precision)
        precision = self.precision_choice.image
        if precision == "int8" and INT8_FILE not in meta["sha256"]:
            raise ModelError(
                f"{path}: no int8 image graph; create it with "
                f"`vse model onnx {path} --int8 --calibrate DATASET`"
            )
        self.precision = precision
        if not text_files(meta):
            raise ModelError(
                f"{path / 'onnx.json'}: lists no text graph (text.onnx or text.int8.onnx); "
                f"re-create the ONNX files with `vse model onnx {path}`"
            )
        self._text_file = text_files(meta)[self.precision_choice.text]
        verify_onnx(path, meta, precision, self.precision_choice.text)
        self._image_file = IMAGE_FILES[precision]
        self._has_image = self._image_file in meta["sha256"]  # see _session
        self._fingerprint = meta.get("model_fingerprint")  # of the weights; see fingerprint
        self._int8_sha256 = meta["sha256"][INT8_FILE] if precision == "int8" else None
        self.vocab = Vocabulary.load(path / "vocab.json")
        if extras["expansion"] is not None:  # text.onnx holds the expanded table
            self.vocab = self.vocab.extended(extras["expansion"][0])
            self.info = dict(self.info, vocab_expansion=extras["expansion"][2])
        if meta.get("text_vocab") not in (None, len(self.vocab)):
            raise ModelError(
                f"{path / self._text_file}: made for {meta['text_vocab']:,} words, the bundle has "
                f"{len(self.vocab):,} (expanded since?); re-create it with `vse model onnx`"
            )
        # the text graph's inputs: word ids (gru/lstm), word pieces (minilm), or both
        self._text_inputs = list(meta.get("text_inputs", ["ids", "lengths"]))
        self._pieces = None
        if "input_ids" in self._text_inputs:
            from vsekit.text.wordpiece import WordPieceTokenizer

            self._pieces = WordPieceTokenizer(path / TOKENIZER_FILE)
        self._threads = threads
        self._sessions: dict[str, object] = {}  # created on first use: a text search
        # never pays for the image graph (49 MB of weights to fold into float32)
        self._dim = int(meta["embed_dim"])
        self.crops = int(info["image"]["crops"])
        self.size = int(info["image"].get("preprocessing", {}).get("input_size", 224))

    @classmethod
    def load(
        cls,
        name: str | os.PathLike,
        threads: int | None = None,
        precision: str | None = None,
        image_precision: str | None = None,
    ) -> OnnxModel:
        """``precision``: ``fp32`` (the image graph as trained), ``int8`` or None: the
        bundle's default where it is safe on this CPU
        (:func:`vsekit.runtime.precision.choose_precision`; ``precision_choice`` says
        what was chosen and why). ``image_precision``: the image graph's alone (an
        index's), the text graph's chosen for this CPU."""
        path = bundle_dir(name)
        if threads is None and os.environ.get("VSEKIT_THREADS", "").isdigit():
            threads = int(os.environ["VSEKIT_THREADS"]) or None  # set by `vse ... --threads`
        missing = missing_onnx(path)
        if missing:
            raise ModelError(
                f"{path}: no {', '.join(missing)}; create them with `vse model onnx {path}`"
            )
        verify_bundle(path)
        info = read_json(path / "bundle.json")
        try:
            return cls(path, info, threads, precision, image_precision)
        except ModelError:
            raise
        except (OSError, KeyError, ValueError) as e:
            raise ModelError(f"{path}: broken model bundle ({e})") from e

    def _session(self, name: str):
        if name not in self._sessions:
            file = self._image_file if name == "image" else self._text_file
            if name == "image" and not self._has_image:
                raise ModelError(
                    f"{self.path}: no fp32 image graph ({file}), only the int8 one: load it "
                    "with precision='int8' (its default), or backend='torch', or write "
                    f"{file} with `vse model onnx {self.path}` (vsekit[train])"
                )
            self._sessions[name] = _session(self.path / file, self._threads)
        return self._sessions[name]

    # -- identity ------------------------------------------------------------------
    @property
    def embed_dim(self) -> int:
        return self._dim

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the weights the ONNX files were made from (``onnx.json``),
        checked against the bundle's weights when those are readable."""
        if self._fingerprint is None:
            self._fingerprint = super().fingerprint
        if self._int8_sha256 is not None:  # the quantised image encoder is another one
            return int8_fingerprint(self._fingerprint, self._int8_sha256)
        return self._fingerprint

    @property
    def weights_fingerprint(self) -> str:
        """The weights' fingerprint, the same whether the int8 or fp32 image graph runs."""
        if self._fingerprint is None:
            self._fingerprint = super().fingerprint
        return self._fingerprint

    @property
    def text_vocabulary(self):
        """The word vocabulary when a word-level encoder reads the text (see
        :attr:`VSEModel.text_vocabulary`); None for word pieces alone."""
        return self.vocab if "ids" in self._text_inputs else None

    def _weights_fp16(self) -> Iterator[tuple[str, np.ndarray]]:
        from safetensors.numpy import load_file

        yield from load_file(self.path / "model.safetensors").items()

    # -- backend hooks -------------------------------------------------------------
    def image_features(self, images: Sequence[ImageInput]) -> np.ndarray:
        return self._run_image(images)[1]

    def _run_image(self, images: Sequence[ImageInput]) -> tuple[np.ndarray, np.ndarray]:
        decoded = [
            load_image(im, self.decode_size) if isinstance(im, str | os.PathLike) else im
            for im in images
        ]
        views = np.stack([crop_views_array(im, self.crops, self.size) for im in decoded])
        emb, feats = self._session("image").run(None, {"views": views})
        return emb, feats

    def embed_with_features(self, images: Sequence[ImageInput]) -> tuple[np.ndarray, np.ndarray]:
        emb, feats = self._run_image(images)
        return unit(emb), feats

    def encode_image_features(self, features: np.ndarray, normalize: bool = True) -> np.ndarray:
        raise NotImplementedError(
            "the ONNX image graph goes from pixels to the embedding; use encode_image"
        )

    def _embed_batch(self, batch: Sequence[ImageInput], normalize: bool) -> np.ndarray:
        emb = self._run_image(batch)[0]  # the graph embeds in the same pass
        return unit(emb) if normalize else emb

    def _encode_text_batch(self, texts: list[str]) -> np.ndarray:
        feeds: dict[str, np.ndarray] = {}
        if "ids" in self._text_inputs:
            seqs = [self.vocab.encode(tokenize(t)) or [self.vocab.unk_id] for t in texts]
            lengths = np.asarray([len(s) for s in seqs], np.int64)
            ids = np.zeros((len(seqs), int(lengths.max())), np.int64)
            for k, s in enumerate(seqs):
                ids[k, : len(s)] = s
            feeds.update(ids=ids, lengths=lengths)
        if self._pieces is not None:
            feeds.update(self._pieces(texts))
        return self._session("text").run(None, feeds)[0]
