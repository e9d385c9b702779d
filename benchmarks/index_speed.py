"""Indexing throughput of `vse index` on this CPU, end to end, per backend.

On the first N images of a folder (default: 256 of ../shared/data/flickr8k/images,
linked into a temporary folder), with the shipped default model (ResNet-50, 2 crops),
``Collection.update`` on a fresh index (scan, decode, crops, backbone, projection,
fsync'ed appends, SQLite commits) for: the PyTorch backend (the path every index took
before), and ONNX Runtime with each image graph the bundle holds (fp32 ``image.onnx``,
int8 ``image.int8.onnx``; ``--model``: a bundle exported with both, e.g. by
``vse model onnx BUNDLE --int8 --calibrate DATASET``). Then a re-index of
the unchanged folder (images that went through the model: must be 0), and the physical
bound: the backbone's operations per image against this CPU's fp32 and int8 peaks.

``--baseline BUNDLE``: that bundle's int8 graph too (a previous default), so a new
model's throughput is compared with the old one's in the same run.

Backends run in ``--rounds`` alternating rounds (default 3); medians are compared.

Run: python benchmarks/index_speed.py [--model BUNDLE] [--baseline BUNDLE] [--n 256]
[--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

import vsekit  # noqa: E402
from vsekit.bundle import bundle_dir  # noqa: E402
from vsekit.index import Collection, model_info, scan_media  # noqa: E402
from vsekit.index.collection import UpdateReport  # noqa: E402
from vsekit.runtime.onnx_model import IMAGE_FILES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT.parent / "shared" / "data" / "flickr8k" / "images"


RESNET50_GMAC_PER_VIEW = 4.09  # multiply-accumulates of one 224x224 ResNet-50 forward


def physical_bound(crops: int) -> dict:
    """Images/s this CPU could reach if ResNet-50 ran at the cores' peak: Zen 4 executes
    AVX-512 on two 256-bit FMA pipes, 16 fp32 FMAs (32 FLOP) per cycle per core; VNNI
    int8 (vpdpbusd) does four times as many operations per cycle. The clock is the one
    /proc/cpuinfo reports; in a VM that is the nominal clock, and boost runs above it."""
    mhz = 0.0
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            mhz = max(mhz, float(line.split(":")[1]))
    cores = os.cpu_count() or 1
    flop_per_image = 2 * RESNET50_GMAC_PER_VIEW * 1e9 * crops
    fp32_peak = cores * mhz * 1e6 * 32
    return {
        "gflop_per_image": round(flop_per_image / 1e9, 1),
        "cpu_mhz": mhz,
        "fp32_peak_gflops": round(fp32_peak / 1e9),
        "int8_peak_gops": round(4 * fp32_peak / 1e9),
        "fp32_bound_images_per_s": round(fp32_peak / flop_per_image, 1),
        "int8_bound_images_per_s": round(4 * fp32_peak / flop_per_image, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=Path, default=IMAGES)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default="default", help="bundle (default: the shipped one)")
    ap.add_argument("--baseline", help="another bundle whose int8 graph is timed alongside")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    files = [Path(p) for p, _, _ in scan_media(args.images)][: args.n]
    models = {"torch (the path before)": vsekit.load_model(args.model, backend="torch")}
    graphs = json.loads((bundle_dir(args.model) / "onnx.json").read_text())["sha256"]
    for precision, file in IMAGE_FILES.items():
        if file in graphs:
            models[f"onnx {precision}"] = vsekit.load_model(
                args.model, backend="onnx", precision=precision
            )
    if args.baseline:
        label = f"onnx int8, baseline {Path(args.baseline).name}"
        models[label] = vsekit.load_model(args.baseline, backend="onnx", precision="int8")
    for m in models.values():
        m.encode_image(files[:2])  # warm-up: weights loaded, kernels chosen

    def time_index(model) -> tuple[float, UpdateReport]:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "photos"
            folder.mkdir()
            for f in files:  # copies: links to files outside the folder are not indexed
                shutil.copy2(f, folder / f.name)
            coll = Collection(Path(tmp) / "index", model_info(model, str(model.path)))
            kw = {"progress": False, "reduce_to": model.decode_size}
            first = coll.update(folder, model.encode_image, args.batch_size, **kw)
            again = coll.update(folder, model.encode_image, args.batch_size, **kw)
        return first.seconds, again

    secs: dict[str, list[float]] = {k: [] for k in models}
    again = None
    for _ in range(args.rounds):  # alternating, so every backend sees the same machine
        for name, m in models.items():
            s, again = time_index(m)
            secs[name].append(s)
    base = statistics.median(secs["torch (the path before)"])
    rows = {
        name: {
            "index_s_each": [round(x, 2) for x in xs],
            "index_s": round(statistics.median(xs), 2),
            "images_per_s": round(len(files) / statistics.median(xs), 2),
            "speedup_vs_torch": round(base / statistics.median(xs), 2),
        }
        for name, xs in secs.items()
    }
    crops = int(models["torch (the path before)"].info["image"]["crops"])
    result = {
        "images": len(files),
        "rounds": args.rounds,
        "backends": rows,
        "reindex_unchanged_s": round(again.seconds, 3),
        "reindex_images_embedded": again.embedded,
        "physical_bound": physical_bound(crops),
    }
    print(json.dumps(result, indent=1))
    setup = {"model": f"{args.model} (resnet50, {crops} crops)", "folder": str(args.images.name),
             "threads": args.threads, "batch_size": args.batch_size,
             "command": "python benchmarks/index_speed.py " + " ".join(sys.argv[1:])}  # fmt: skip
    record(Path(__file__).with_suffix(".json"), {"setup": setup, "result": result})


if __name__ == "__main__":
    main()
