"""The remedies for int8's saturation on x86 CPUs without VNNI, compared on the selection
slice (the 500 train images carved out, never dev), as the shipped build makes its graphs
(``vsekit.graphs``: fp32 graph written from NumPy, image ranges calibrated on views of the
shipped photos, the 7-bit text graph shipped):

* ``8bit``: int8 weights (what shipped before; saturates without VNNI);
* ``7bit``: ``reduce_range`` (7-bit weights: cannot saturate);
* ``7bit+head``: the same, with the projection heads' products left in float;
* ``7bit+stem``: the same, with the first convolution left in float;
* ``u8u8``: 8-bit uint8 weights with zero points (ONNX Runtime's u8u8 kernels: no
  saturation, 8-bit precision; speed is the question).

For each: image parity with fp32 on 48 slice photos, the slice's rsum (500 images, their
2,500 captions) with int8 against fp32 image embeddings, and images/s of the image graph
on this CPU (2 crops, variants alternated). Run alone on the CPU:

    python benchmarks/int8_remedies.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import record  # noqa: E402

FLICKR8K = HERE.parents[1] / "shared" / "data" / "flickr8k"
VARIANTS = {  # name -> (keep_float, reduce_range, weights)
    "8bit": ("none", False, "s8"), "7bit": ("none", True, "s8"),
    "7bit+head": ("head", True, "s8"), "7bit+stem": ("stem", True, "s8"),
    "u8u8": ("none", False, "u8"),
}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import vsekit
    from vsekit.bundle import bundle_dir
    from vsekit.graphs import write_fp32_graphs
    from vsekit.graphs.default import CALIBRATION_VIEWS
    from vsekit.graphs.quantize import quantize_image_int8
    from vsekit.lab.data import load_dataset
    from vsekit.lab.eval.retrieval import retrieval_metrics
    from vsekit.media.images import load_image
    from vsekit.media.views import crop_views_array, decode_size
    from vsekit.runtime.onnx_model import _session
    from vsekit.runtime.parity import sample_views

    default = bundle_dir("default")
    model = vsekit.load_model(default, precision="fp32")
    held = load_dataset(FLICKR8K).carve("train", 500, "train-val", 0).split("train-val")
    paths = [str(im.path) for im in held.images]
    views = np.stack([crop_views_array(load_image(p, decode_size(224)), 2, 224) for p in paths])
    txt = model.encode_text(list(held.texts))
    c2i = np.asarray(held.caption_to_image)

    def embed(sess) -> np.ndarray:
        out = np.concatenate([sess.run(None, {"views": views[a : a + 16]})[0]
                              for a in range(0, len(views), 16)])  # fmt: skip
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def rsum(img: np.ndarray) -> float:
        return float(retrieval_metrics(img @ txt.T, c2i)["rsum"])

    ref = embed(_session(default / "image.onnx", None))
    rows, graphs = {"fp32": {"rsum": round(rsum(ref), 2)}}, {}
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "image.fp32.onnx"
        write_fp32_graphs(default, fp32, None, progress=lambda s: None, fp16_storage=False)
        cal = sample_views(n=CALIBRATION_VIEWS)
        for name, (keep, rr, w) in VARIANTS.items():
            out = Path(tmp) / f"{name}.onnx"
            t = time.perf_counter()
            quantize_image_int8(fp32, out, cal, 2, 224, method="percentile", keep_float=keep,
                                reduce_range=rr, weights=w)  # fmt: skip
            graphs[name] = _session(out, None)
            emb = embed(graphs[name])
            cos = (emb * ref).sum(1)[:: len(paths) // 48][:48]
            rows[name] = {"rsum": round(rsum(emb), 2),
                          "parity_median": round(float(np.median(cos)), 5),
                          "parity_min": round(float(cos.min()), 5),
                          "quantise_s": round(time.perf_counter() - t, 1)}  # fmt: skip
            print(name, rows[name], flush=True)
        graphs["fp32"] = _session(default / "image.onnx", None)
        batch = views[:32]
        times: dict[str, list[float]] = {n: [] for n in graphs}
        for s in graphs.values():
            s.run(None, {"views": batch[:2]})
        for _ in range(args.rounds):
            for n, s in graphs.items():
                t = time.perf_counter()
                for a in range(0, len(batch), 16):
                    s.run(None, {"views": batch[a : a + 16]})
                times[n].append(time.perf_counter() - t)
        for n, ts in times.items():
            rows[n]["images_per_s"] = round(len(batch) / float(np.median(ts)), 2)
        shutil.rmtree(tmp, ignore_errors=True)
    for n in VARIANTS:
        rows[n]["rsum_cost"] = round(rows["fp32"]["rsum"] - rows[n]["rsum"], 2)
    record(HERE / "int8_remedies.json", {
        "command": "python benchmarks/int8_remedies.py " + " ".join(sys.argv[1:]),
        "held_out": "the 500 carved train images (train-val, seed 0) and their 2,500 "
                    "captions; text embeddings from the fp32 text graph",
        "calibration": f"{CALIBRATION_VIEWS} views of the shipped photos, percentile",
        "variants": {n: dict(zip(("keep_float", "reduce_range", "weights"), v, strict=True))
                     for n, v in VARIANTS.items()},
        "results": rows,
    })  # fmt: skip
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
