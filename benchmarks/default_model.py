"""The shipped default model, end to end on Flickr8k dev: every dev JPEG goes through
the same path as `vse index` (decode, EXIF, ResNet-50 x 2 crops, projection, float16
weights), every dev caption through the text encoder, then the retrieval metrics of
what search and annotation rank by: the cosine less the CSLS hubness penalties when the
bundle ships them (``model.retrieval_scores``; ``metrics_without_hubness_reduction``: the
plain cosine).
Compares with the dev metrics its training run recorded (on the FeatureStore's float32
features), so the packaging (float16, re-extraction) is checked too.

Run: python benchmarks/default_model.py [--backend torch|onnx] [--model BUNDLE]
[--precision fp32|int8] (each backend's figures are kept under its name in the JSON, a
bundle given by path under BACKEND:MODEL_NAME).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, record  # noqa: E402

import vsekit  # noqa: E402
from vsekit.lab.data import load_dataset  # noqa: E402
from vsekit.lab.eval import retrieval_metrics, retrieval_metrics_from_embeddings  # noqa: E402
from vsekit.runtime.precision import cpu_info  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=("torch", "onnx"), default="torch")
    ap.add_argument("--model", default="default")
    ap.add_argument("--precision", choices=("fp32", "int8"), help="ONNX image graph")
    args = ap.parse_args()
    model = vsekit.load_model(args.model, backend=args.backend, precision=args.precision)
    dev = load_dataset(FLICKR8K).split("dev")
    t0 = time.perf_counter()
    paths = [im.path for im in dev.images]
    img = torch.cat(
        [torch.from_numpy(model.encode_image(paths[a : a + 16])) for a in range(0, len(paths), 16)]
    )
    t_img = time.perf_counter() - t0
    txt = torch.from_numpy(model.encode_text(list(dev.texts)))
    # what search and annotation rank by: cosine less the CSLS penalties when the bundle
    # ships hubness reduction (the caption bank from its pool, the image bank it ships)
    m = retrieval_metrics(model.retrieval_scores(img.numpy(), txt.numpy()), dev.caption_to_image)
    plain = retrieval_metrics_from_embeddings(img, txt, dev.caption_to_image)
    hub = model.hubness
    path = Path(__file__).with_suffix(".json")
    runs = json.loads(path.read_text()).get("backends", {}) if path.is_file() else {}
    # the default's figures of another model (it was re-exported since) are dropped; a
    # bundle named by path keeps its own key, so versions can be compared in one file
    source = model.info.get("source")
    if args.model == "default":
        mine = {k: v for k, v in runs.items() if v.get("bundle", "default") == "default"}
        runs = {k: v for k, v in runs.items() if k not in mine or v.get("model_source") == source}
        if args.backend == "onnx":  # ONNX rows of graphs the bundle no longer has go too
            from vsekit.bundle import bundle_dir, int8_fingerprint, read_onnx_meta

            meta = read_onnx_meta(bundle_dir("default"))
            fp = meta["model_fingerprint"]
            now = {fp, int8_fingerprint(fp, meta["sha256"]["image.int8.onnx"])}
            runs = {k: v for k, v in runs.items()
                    if not k.startswith("onnx") or v.get("bundle", "default") != "default"
                    or v.get("model_fingerprint") in now}  # fmt: skip
    # another bundle's rows are keyed by its model name (its folder's name when it has none)
    other = model.info.get("name") or Path(args.model).name
    key = args.backend if args.model == "default" else f"{args.backend}:{other}"
    key += f":{args.precision}" if args.precision else ""
    choice = getattr(model, "precision_choice", None)
    if args.backend == "onnx":  # int8's accuracy depends on the CPU class: one row each
        key += f"@{cpu_info().int8_class}"
    runs[key] = {
        "machine": machine(),
        "precision": None if choice is None else vars(choice),
        "command": "python benchmarks/default_model.py " + " ".join(sys.argv[1:]),
        "bundle": args.model,
        "images": len(paths),
        "image_seconds": round(t_img, 1),
        "metrics": m,
        "hubness": None
        if hub is None
        else {
            **vars(hub.config),
            "image_bank": len(hub.image_bank),
            "caption_bank": len(hub.caption_bank),
        },
        "metrics_without_hubness_reduction": plain,
        "model_name": model.info.get("name"),
        "model_fingerprint": model.fingerprint,
        "model_source": source,
    }
    out = record(
        path,
        {
            "captions": len(dev.texts),
            "training_run_dev_metrics": model.info.get("dev_metrics"),
            "backends": runs,
        },
    )
    print(args.backend, {k: round(v, 1) for k, v in m.items()}, f"{t_img:.1f} s",
          "without hubness reduction:", round(plain["rsum"], 1))  # fmt: skip
    return out


if __name__ == "__main__":
    main()
