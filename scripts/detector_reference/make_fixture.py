"""Write tests/data/centernet_tfjs.npz: the object detector's own runtime (TF.js 4.22.0,
CPU backend, run by Node) on three dev photos, the reference ``tests/test_detector.py``
holds the ONNX translation (:mod:`vsekit.graphs.tfjs_graph`) to.

Run once, with Node 18 or later: ``npm i`` in this folder (TF.js 4.22.0, pinned in
``package.json``), then
``python scripts/detector_reference/make_fixture.py``. The package's files come from
the cache (:func:`vsekit.graphs.centernet.package_dir`, fetched once).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FLICKR8K = ROOT.parent / "shared" / "data" / "flickr8k" / "images"
#: dev photos whose captions count dogs (3, 2) and people (3)
PHOTOS = ("1032122270_ea6f0beedb.jpg", "107582366_d86f2d3347.jpg", "1164131282_b30926f332.jpg")


def main() -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from vsekit.evidence.objects import Detector
    from vsekit.graphs.centernet import package_dir
    from vsekit.media.images import load_image

    pkg = package_dir()
    det = Detector.__new__(Detector)  # only its pixels(): the ONNX graph is not needed
    det.size = 512
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, name in enumerate(PHOTOS):
            x = det.pixels(load_image(FLICKR8K / name))[None]
            x.tofile(Path(tmp) / f"in{k}.f32")
            subprocess.run(["node", str(HERE / "run.js"), str(pkg / "models"),
                            str(Path(tmp) / f"in{k}.f32"), str(Path(tmp) / f"out{k}")],
                           check=True, cwd=HERE)  # fmt: skip
            out[f"detections_{k}"] = np.fromfile(Path(tmp) / f"out{k}.detections.f32",
                                                 np.float32).reshape(100, 6)  # fmt: skip
    out["photos"] = np.asarray(PHOTOS)
    path = ROOT / "tests" / "data" / "centernet_tfjs.npz"
    path.parent.mkdir(exist_ok=True)
    np.savez_compressed(path, **out)
    print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
