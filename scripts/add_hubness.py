"""Give a bundle hubness reduction (CSLS, :mod:`vsekit.runtime.hubness`) with the settings
``benchmarks/hubness.py`` chose on the train slice for one of its rows.

The image bank is built as the benchmark builds its own: 1,000 Flickr8k train images
drawn with ``numpy.random.default_rng(0)`` from all 6,000 (not the same draw), embedded
by the bundle's own model from the FeatureStore rows of the bundle's crop count. The
weights, and so the fingerprint and the ONNX graphs, are unchanged.

Run: python scripts/add_hubness.py [--bundle default] \
         [--row "GRU10 + 3 MiniLM10, seed 0, refitted, 2-crop index"]
Then benchmarks/default_model.py for its dev figure end to end.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from hubness import IMAGE_BANK, STRIDE  # noqa: E402
from ten_crop import F8K, STORES  # noqa: E402

import vsekit  # noqa: E402
from vsekit.lab.data import load_dataset  # noqa: E402
from vsekit.lab.features import FeatureStore  # noqa: E402
from vsekit.lab.train.features import image_features  # noqa: E402
from vsekit.runtime.base import bundle_dir  # noqa: E402
from vsekit.runtime.hubness import HubnessConfig, write_hubness  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="default")
    ap.add_argument("--row", default="GRU10 + 3 MiniLM10, seed 0, refitted, 2-crop index")
    args = ap.parse_args()
    res = json.loads((ROOT / "benchmarks" / "hubness.json").read_text())
    row = res["ensembles"][args.row]
    cfg = HubnessConfig(**row["chosen_on_selection"], caption_stride=STRIDE)
    path = bundle_dir(args.bundle)
    model = vsekit.load_model(args.bundle, backend="torch")
    crops = int(model.info["image"]["crops"])
    train = load_dataset(F8K).split("train")
    pick = np.sort(np.random.default_rng(0).choice(len(train.images), IMAGE_BANK, replace=False))
    ids = [train.images[i].id for i in pick]
    feats = image_features(FeatureStore(STORES[crops]), model.info["image"]["features"], ids)
    bank = model.encode_image_features(feats)
    info = {
        "method": "CSLS (Conneau et al. 2018): cos - beta r_img - beta r_txt",
        "chosen_on": f"benchmarks/hubness.py row {args.row!r}: beta, k_text, k_image chosen "
        "on the 500 train images carved out (val_seed 0) with the members trained without "
        "them; dev untouched",
        "image_bank_from": f"Flickr8k train, {IMAGE_BANK} of the 6,000 images drawn with "
        f"numpy default_rng(0), {crops}-crop FeatureStore rows",
        "caption_bank_from": f"every {STRIDE}th de-duplicated caption of captions.txt",
        "model_fingerprint": model.fingerprint,
    }
    write_hubness(path, cfg, bank, info)
    print(f"{path}: hubness {cfg} with a {len(bank)}-image bank")


if __name__ == "__main__":
    main()
