"""int8 on both x86 CPU classes: which quantisation computes what fp32 does everywhere.

x86 CPUs without VNNI add pairs of uint8 x int8 products in int16 with saturation
(:mod:`vsekit.runtime.precision`). This script quantises the default model's image and
text graphs several ways (``VARIANTS``: 8-bit or 7-bit weights, the first convolution in
float or not), through the PyTorch export, calibrated on 48 Flickr8k train images
(percentile ranges), and measures each against the fp32 graphs of the same weights, on
held-out photos and their first captions (spread over the 500 train images carved out as
the selection slice, never dev):

* on this machine's CPU, natively;
* on an AVX2-only CPU without VNNI, emulated by QEMU (``qemu-x86_64 -cpu Haswell``,
  Debian's ``qemu-user``): ONNX Runtime reads the emulated CPUID and picks its AVX2 int8
  kernels, the ones that saturate. Emulated speed means nothing; only accuracy is read.
  The int8 graphs alone run emulated, against the native fp32 embeddings (fp32 differs
  between CPUs only in rounding, and an emulated fp32 ResNet-50 takes many minutes).

Speed (images/s through the image graph, variants alternated round by round) is measured
natively only. Run (alone on the CPU):

    python benchmarks/int8_cpu_classes.py [--images 48] [--rounds 3] [--no-qemu]
        [--variants 8bit 7bit]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FLICKR8K = HERE.parents[1] / "shared" / "data" / "flickr8k"
WORK = Path(os.environ.get("VSEKIT_CACHE", "~/.cache/vsekit")).expanduser() / "int8-cpu-classes"
#: name -> (nodes kept in float, 7-bit weights)
VARIANTS = {"8bit": ("none", False), "8bit+stem": ("stem", False),
            "7bit": ("none", True), "7bit+stem": ("stem", True)}  # fmt: skip


def embed(bundle: Path, precision: str, photos: list[str], texts: list[str]) -> dict:
    """Image and text embeddings of ``bundle`` at ``precision`` (core only: no torch)."""
    import vsekit

    m = vsekit.load_model(bundle, backend="onnx", precision=precision)
    return {"image": m.encode_image(photos), "text": m.encode_text(texts)}


def worker(args: argparse.Namespace) -> None:
    """Embed with every variant (and fp32) here; write them to ``args.worker``."""
    spec = json.loads(Path(args.spec).read_text())
    out = {}
    for name, bundle in spec["bundles"].items():
        if name == "fp32" and args.int8_only:  # fp32 is the same on every CPU: not emulated
            continue
        print(f"worker: {name}", file=sys.stderr, flush=True)
        e = embed(Path(bundle), "fp32" if name == "fp32" else "int8", spec["photos"], spec["texts"])
        out[f"{name}/image"], out[f"{name}/text"] = e["image"], e["text"]
    np.savez(args.worker, **out)


def make_bundles(photos_cal: list[str]) -> dict[str, str]:
    """The default bundle exported once per variant (and with its fp32 graphs)."""
    from vsekit.bundle import DEFAULT_MODEL, bundle_dir
    from vsekit.lab.torch_model import VSEModel
    from vsekit.lab.train.onnx_export import export_onnx

    src = bundle_dir(DEFAULT_MODEL)
    out = {}
    for name, (keep, rr) in {"fp32": ("none", False), **VARIANTS}.items():
        b = WORK / name
        done = b / "onnx.json"
        if not done.is_file():
            shutil.rmtree(b, ignore_errors=True)
            shutil.copytree(src, b, ignore=shutil.ignore_patterns("*.onnx", "onnx.json"))
            cal = None if name == "fp32" else photos_cal
            export_onnx(VSEModel.load(b, device="cpu"), b, calibration=cal,
                        calibration_method="percentile", keep_float=keep,
                        text_int8=name != "fp32", reduce_range=rr,
                        calibration_source="flickr8k" if cal else None)  # fmt: skip
            print(f"exported {name}", flush=True)
        out[name] = str(b)
    return out


def parity(emb: dict, variant: str) -> dict:
    r = {}
    for side in ("image", "text"):
        cos = (emb[f"{variant}/{side}"] * emb[f"fp32/{side}"]).sum(1)
        r[side] = {"median": round(float(np.median(cos)), 5), "min": round(float(cos.min()), 5)}
    return r


def speed(bundles: dict, photos: list[str], rounds: int) -> dict:
    """Images/s of each int8 variant's image graph (and fp32's), alternating."""
    import vsekit
    from vsekit.media.images import load_image
    from vsekit.media.views import crop_views_array, decode_size

    models = {n: vsekit.load_model(b, backend="onnx", precision="fp32" if n == "fp32" else "int8")
              for n, b in bundles.items()}  # fmt: skip
    views = np.stack([crop_views_array(load_image(p, decode_size(224)), 2, 224) for p in photos])
    times: dict[str, list[float]] = {n: [] for n in models}
    for m in models.values():  # warm up: graphs loaded, weights folded
        m._session("image").run(None, {"views": views[:2]})
    for _ in range(rounds):
        for n, m in models.items():
            t = time.perf_counter()
            for a in range(0, len(views), 16):
                m._session("image").run(None, {"views": views[a : a + 16]})
            times[n].append(time.perf_counter() - t)
    return {n: round(len(views) / float(np.median(t)), 2) for n, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-qemu", action="store_true")
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--int8-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    sys.path.insert(0, str(HERE))
    from _common import record

    from vsekit.lab.data import load_dataset
    from vsekit.lab.train.calibration import calibration_images
    from vsekit.runtime.precision import cpu_info

    ds = load_dataset(FLICKR8K)
    held = ds.carve("train", 500, "train-val", 0).split("train-val")
    step = len(held.images) // args.images
    rows = list(range(0, len(held.images), step))[: args.images]
    photos = [str(held.images[k].path) for k in rows]
    first = {}
    for t, i in zip(held.texts, held.caption_to_image, strict=True):
        first.setdefault(int(i), t)
    texts = [first[k] for k in rows]
    cal = [str(p) for p in calibration_images(str(FLICKR8K), 48)]
    WORK.mkdir(parents=True, exist_ok=True)
    bundles = {n: b for n, b in make_bundles(cal).items() if n == "fp32" or n in args.variants}
    spec = WORK / "spec.json"
    spec.write_text(json.dumps({"bundles": bundles, "photos": photos, "texts": texts}))
    py = str(Path(sys.executable).resolve())
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"), VIRTUAL_ENV=str(Path(sys.prefix)))
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    env["PYTHONPATH"] += os.pathsep + str(site)
    classes = {cpu_info().int8_class + " (native)": [py]}
    if not args.no_qemu:
        classes["x86-no-vnni (qemu-x86_64 -cpu Haswell)"] = ["qemu-x86_64", "-cpu", "Haswell", py]
    results = {}
    for label, cmd in classes.items():
        out = WORK / f"emb-{label.split()[0]}.npz"
        t = time.time()
        emulated = ["--int8-only"] if "qemu" in cmd[0] else []  # fp32: the native run's
        subprocess.run([*cmd, __file__, "--worker", str(out), "--spec", str(spec), *emulated],
                       env=env, check=True)  # fmt: skip
        emb = dict(np.load(out))
        if emulated:
            native_fp32 = np.load(WORK / f"emb-{cpu_info().int8_class}.npz")
            emb.update({k: native_fp32[k] for k in native_fp32.files if k.startswith("fp32/")})
        results[label] = {v: parity(emb, v) for v in args.variants}
        results[label]["_wall_s"] = round(time.time() - t, 1)
        print(label, json.dumps(results[label], indent=1), flush=True)
    native = dict(np.load(WORK / f"emb-{cpu_info().int8_class}.npz"))
    if not args.no_qemu:  # the same graph on both CPU classes: the same embeddings?
        emu = dict(np.load(WORK / "emb-x86-no-vnni.npz"))
        results["across CPU classes (int8 here vs emulated, cosine min)"] = {
            v: {s: round(float((native[f"{v}/{s}"] * emu[f"{v}/{s}"]).sum(1).min()), 5)
                for s in ("image", "text")} for v in args.variants}  # fmt: skip
    sp = speed(bundles, photos[:32], args.rounds)
    record(HERE / "int8_cpu_classes.json", {
        "command": "python benchmarks/int8_cpu_classes.py " + " ".join(sys.argv[1:]),
        "variants": {v: {"keep_float": k, "weights": "7bit" if rr else "8bit"}
                     for v, (k, rr) in VARIANTS.items()},
        "held_out": f"{len(photos)} of the 500 carved train images (train-val, seed 0) and "
                    "their first captions; calibration: 48 train images, percentile",
        "parity_vs_fp32": results,
        "image_graph_images_per_s_native_2crop": sp,
    })  # fmt: skip
    print(json.dumps(sp))


if __name__ == "__main__":
    main()
