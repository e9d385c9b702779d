"""The shipped default model, end to end on Flickr8k dev: every dev JPEG goes through
the same path as `vse index` (decode, EXIF, ResNet-50 x 2 crops, projection, float16
weights), every dev caption through the text encoder, then the retrieval metrics.
Compares with the dev metrics its training run recorded (on the FeatureStore's float32
features), so the packaging (float16, re-extraction) is checked too.

Run: python benchmarks/default_model.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

from vsekit.data import load_dataset  # noqa: E402
from vsekit.eval import retrieval_metrics_from_embeddings  # noqa: E402
from vsekit.runtime import VSEModel  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def main() -> None:
    model = VSEModel.load("default")
    dev = load_dataset(FLICKR8K).split("dev")
    t0 = time.perf_counter()
    paths = [im.path for im in dev.images]
    img = torch.cat(
        [torch.from_numpy(model.encode_image(paths[a : a + 16])) for a in range(0, len(paths), 16)]
    )
    t_img = time.perf_counter() - t0
    txt = torch.from_numpy(model.encode_text(list(dev.texts)))
    m = retrieval_metrics_from_embeddings(img, txt, dev.caption_to_image)
    out = record(
        Path(__file__).with_suffix(".json"),
        {
            "images": len(paths),
            "captions": len(dev.texts),
            "image_seconds": round(t_img, 1),
            "metrics": m,
            "training_run_dev_metrics": model.info.get("dev_metrics"),
            "model_fingerprint": model.fingerprint,
        },
    )
    print({k: round(v, 1) for k, v in out["metrics"].items()})


if __name__ == "__main__":
    main()
