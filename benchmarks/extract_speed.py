"""Feature-extraction throughput on the same images and backbone, in one run:

1. vsekit: ``extract_to_store`` (decode in a worker, 10 crops, every FNE layer pooled,
   R-MAC, written to a FeatureStore) followed by ``fit_fne`` (standardise + ternarise);
2. the floor: a bare torchvision ``resnet50`` forward pass over the same crops, already
   decoded and cropped in memory, same batch size and memory format;
3. the ``fne`` package from PyPI (1.6.5, a peer implementation; ``pip install
   '.[bench]'``), hooking the same 17 layers, with its own ten-crop path.

Run: python benchmarks/extract_speed.py [--images 48] [--backbone resnet50]
Writes benchmarks/extract_speed.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

from vsekit.lab.data import load_dataset  # noqa: E402
from vsekit.lab.features.backbones import create_backbone  # noqa: E402
from vsekit.lab.features.crops import crop_views, resize_size  # noqa: E402
from vsekit.lab.features.extract import (  # noqa: E402
    FORWARD_CHUNK,
    ExtractItem,
    extract_to_store,
    prepare_model,
)
from vsekit.media.images import load_image  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def time_vsekit(items, model, batch: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        store = extract_to_store(items, Path(tmp) / "s", model, crops=10, batch_size=batch,
                                 workers=1, progress=False)  # fmt: skip
        store.fit_fne(fit_split="all")
        return time.perf_counter() - t0


@torch.inference_mode()
def time_bare(items, model, batch: int) -> float:
    """Plain torchvision forward over pre-decoded crops, in the same micro-batches of
    FORWARD_CHUNK crops (the fastest size here): the floor for any extractor."""
    net = model.net.eval().to(memory_format=torch.channels_last)
    views = torch.cat([crop_views(load_image(i.path), 10, 224) for i in items])
    t0 = time.perf_counter()
    for a in range(0, len(views), FORWARD_CHUNK):
        x = views[a : a + FORWARD_CHUNK].contiguous(memory_format=torch.channels_last)
        net(model.normalize(x))
    return time.perf_counter() - t0


def time_fne_package(items, model, batch: int) -> float | None:
    try:
        from fne.fne_torch import FullNetworkEmbedding
    except ImportError:
        print("fne not installed (pip install '.[bench]'): skipping the peer", file=sys.stderr)
        return None
    from torch.utils.data import DataLoader, TensorDataset

    net = model.net.eval()
    layers = ["conv1"] + [
        f"layer{s}.{j}.conv3" for s in range(1, 5) for j in range(len(getattr(net, f"layer{s}")))
    ]
    fne = FullNetworkEmbedding(net, layers, classifier=None)
    big = resize_size(224)
    t0 = time.perf_counter()
    imgs = torch.stack([
        model.normalize(torchvision.transforms.v2.functional.resize(
            torchvision.transforms.v2.functional.pil_to_tensor(load_image(i.path)),
            [big, big], antialias=True)[None])[0]
        for i in items
    ])  # fmt: skip
    loader = DataLoader(TensorDataset(imgs, torch.zeros(len(imgs))), batch_size=batch)
    with torch.no_grad():
        feats, _ = fne._extract_features(loader, train=True, with_crops=True, crop_size=224)
        fne._postprocess(feats, train=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=48)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--backbone", default="resnet50")
    args = ap.parse_args()

    ds = load_dataset(FLICKR8K).split("dev")
    items = [ExtractItem(im.id, im.path, "all") for im in ds.images[: args.images]]
    model = prepare_model(create_backbone(args.backbone), "cpu")
    time_bare(items[:2], model, args.batch)  # warm-up

    t_bare = time_bare(items, model, args.batch)
    t_vse = time_vsekit(items, model, args.batch)
    t_fne = time_fne_package(items, model, args.batch)
    n = len(items)
    res = {
        "benchmark": f"feature extraction, {args.backbone}, 10 crops, {n} Flickr8k dev images",
        "images": n,
        "batch_images": args.batch,
        "torch_threads": torch.get_num_threads(),
        "bare_forward_img_per_s": round(n / t_bare, 3),
        "vsekit_fne_img_per_s": round(n / t_vse, 3),
        "fne_pkg_img_per_s": round(n / t_fne, 3) if t_fne else None,
        "vsekit_overhead_vs_bare": round(t_vse / t_bare - 1, 4),
        "vsekit_speedup_vs_fne_pkg": round(t_fne / t_vse, 2) if t_fne else None,
    }
    out = record(Path(__file__).with_suffix(".json"), res)
    print({k: v for k, v in out.items() if k != "machine"})


if __name__ == "__main__":
    main()
