"""Record what the Flickr8k FeatureStores in the cache cost to extract on this machine.

The stores themselves are produced by the CLI (see the README), e.g.
    vse features extract --root ../shared/data/flickr8k --backbone resnet50 --crops 10 \\
        --out ~/.cache/vsekit/stores/flickr8k-resnet50-c10
This script reads each finished store's meta.json (rows, crops, extraction seconds, as
timed by the extraction itself, resumes included, and the seconds of each invocation when
the store recorded them) and writes benchmarks/feature_stores.json.

Run: python benchmarks/feature_stores.py [STORE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

from vsekit.lab.features.store import FeatureStore, StoreError  # noqa: E402

CACHE = Path.home() / ".cache" / "vsekit" / "stores"


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted(CACHE.glob("flickr8k-*"))
    stores = {}
    for p in paths:
        try:
            d = FeatureStore(p).describe()
        except StoreError as e:
            print(f"skipping {p}: {e}", file=sys.stderr)
            continue
        secs = d["extract_seconds"]
        stores[p.name] = {
            "backbone": d["backbone"],
            "crops": d["crops"],
            "rows": d["rows"],
            "splits": d["splits"],
            "fne_dim": d["fne_dim"],
            "extract_seconds": secs,
            "images_per_s": round(d["rows"] / secs, 2) if secs else None,
            # one entry per `vse features extract` invocation (resumes), when recorded
            "runs": [
                {**r, "images_per_s": round(r["images"] / r["seconds"], 2)}
                for r in d["runs"]
                if r["seconds"]
            ],
        }
    out = record(Path(__file__).with_suffix(".json"), {"stores": stores})
    print("| store | images | crops | FNE dim | extraction, all runs | images/s | last run |")
    print("|---|---|---|---|---|---|---|")
    for name, s in out["stores"].items():
        split = " + ".join(f"{k} {v:,}" for k, v in s["splits"].items())
        last = s["runs"][-1] if s["runs"] else None
        last_txt = (
            f"{last['images']:,} images, {last['images_per_s']} img/s" if last else "not recorded"
        )
        print(
            f"| `{name}` | {s['rows']:,} ({split}) | {s['crops']} | {s['fne_dim']:,} "
            f"| {s['extract_seconds']:,.0f} s | {s['images_per_s']} | {last_txt} |"
        )


if __name__ == "__main__":
    main()
