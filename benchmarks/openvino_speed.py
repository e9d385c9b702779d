"""The image graph on ONNX Runtime against OpenVINO, fp32 and int8, on this CPU.

The packaging issue asks to measure OpenVINO too and use it if it is faster here. Both
runtimes run the same ONNX files of one bundle (``--model``: one exported with both
image graphs, ``vse model onnx BUNDLE --int8 --calibrate DATASET``): ``image.onnx``
(fp32 compute, fp16-stored weights) and ``image.int8.onnx`` (static QDQ, which OpenVINO
turns into its own int8 kernels). Inputs are the crop views of real Flickr8k photos
(int8 ranges depend on real activations), ``--batch`` photos per call. Each engine runs
``--rounds`` alternating rounds over the same batches; the figure is the median time per
photo. OpenVINO's fp32 row pins ``INFERENCE_PRECISION_HINT=f32`` (on a CPU with
AVX-512 BF16 it would otherwise compute in bf16); a third OpenVINO row lets it choose
(bf16 here). Fidelity: the cosine of each engine's embeddings to ONNX Runtime fp32.

Needs ``pip install openvino`` (not a vsekit dependency).

Run: python benchmarks/openvino_speed.py --model BUNDLE [--images 64] [--batch 16]
[--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

from vsekit.bundle import bundle_dir  # noqa: E402
from vsekit.index import scan_media  # noqa: E402
from vsekit.media.images import load_image  # noqa: E402
from vsekit.media.views import crop_views_array  # noqa: E402

IMAGES = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k" / "images"


def ort_engine(path: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()  # as vsekit.runtime.onnx_model builds the image session
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return lambda views: s.run(["embedding"], {"views": views})[0]


def ov_engine(path: Path, precision: str | None):
    import openvino as ov

    config = {"PERFORMANCE_HINT": "LATENCY"}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    out = compiled.output("embedding")
    return lambda views: compiled({"views": views})[out]


def main() -> None:
    import onnxruntime
    import openvino

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="bundle with image.onnx and image.int8.onnx")
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    bundle = bundle_dir(args.model)
    info = json.loads((bundle / "bundle.json").read_text())["image"]
    crops = int(info["crops"])
    files = [p for p, _, _ in scan_media(IMAGES)][: args.images]
    views = np.stack([crop_views_array(load_image(f, 512), crops) for f in files])
    batches = [views[a : a + args.batch] for a in range(0, len(views), args.batch)]
    engines = {
        "onnxruntime fp32": ort_engine(bundle / "image.onnx"),
        "onnxruntime int8": ort_engine(bundle / "image.int8.onnx"),
        "openvino fp32": ov_engine(bundle / "image.onnx", "f32"),
        "openvino fp32 graph, its default precision": ov_engine(bundle / "image.onnx", None),
        "openvino int8": ov_engine(bundle / "image.int8.onnx", None),
    }
    outs = {}
    for name, run in engines.items():  # warm-up, and the embeddings for fidelity
        outs[name] = np.concatenate([run(b) for b in batches])
    ref = outs["onnxruntime fp32"]
    ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    ms: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(args.rounds):  # alternating: every engine sees the same machine
        for name, run in engines.items():
            t0 = time.perf_counter()
            for b in batches:
                run(b)
            ms[name].append(1000 * (time.perf_counter() - t0) / len(views))
    base = statistics.median(ms["onnxruntime fp32"])
    rows = {}
    for name, xs in ms.items():
        e = outs[name] / np.linalg.norm(outs[name], axis=1, keepdims=True)
        cos = (e * ref).sum(1)
        rows[name] = {
            "ms_per_photo_each": [round(x, 2) for x in xs],
            "ms_per_photo": round(statistics.median(xs), 2),
            "speedup_vs_onnxruntime_fp32": round(base / statistics.median(xs), 2),
            "cosine_to_onnxruntime_fp32_mean": round(float(cos.mean()), 5),
            "cosine_to_onnxruntime_fp32_min": round(float(cos.min()), 5),
        }
        print(name, rows[name], flush=True)
    record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/openvino_speed.py " + " ".join(sys.argv[1:]),
            "setup": {
                "model": str(args.model),
                "photos": len(views),
                "crops": crops,
                "batch": args.batch,
                "rounds": args.rounds,
                "cores": os.cpu_count(),
                "onnxruntime": onnxruntime.__version__,
                "openvino": openvino.__version__,
            },  # fmt: skip
            "engines": rows,
        },
    )


if __name__ == "__main__":
    main()
