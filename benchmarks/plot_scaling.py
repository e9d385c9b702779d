"""The scale-out benchmarks' plots, from their recorded JSON (nothing is re-measured):
DDP step time (``ddp_train.json``), Ray indexing throughput (``ray_index.json``) and
search beyond RAM, recall against latency (``big_index_1m.json``, and the 10M file when
it exists). Writes ``benchmarks/scaling.png``.

Run: python benchmarks/plot_scaling.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    ddp = json.loads((HERE / "ddp_train.json").read_text())
    ray = json.loads((HERE / "ray_index.json").read_text())
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))

    ax = axes[0]
    procs = sorted(ddp["step_ms_median"], key=int)
    ax.bar([f"{p} process{'es' if p != '1' else ''}" for p in procs],
           [ddp["step_ms_median"][p] for p in procs], color=["#888", "#4a7"])  # fmt: skip
    ax.set_ylabel("ms per step (median)")
    ax.set_title(f"DDP training, global batch {ddp['global_batch']}, 2-core CPU")

    ax = axes[1]
    modes = [m for m in ray["modes"] if not m.startswith("the writer")]  # embedding paths
    ax.bar(modes, [ray["modes"][m]["photos_per_s"] for m in modes], color=["#888", "#47a", "#4a7"])
    writer = [r for m, r in ray["modes"].items() if m.startswith("the writer")]
    if writer:
        ax.text(0.5, 0.95, f"the one writer alone: {writer[0]['photos_per_s']:,.0f} photos/s",
                transform=ax.transAxes, ha="center", va="top", fontsize=9)  # fmt: skip
    ax.set_ylabel("photos / s")
    ax.set_title(f"vse index, {ray['photos']:,} photos, one 2-core machine")

    ax = axes[2]
    for name, marker in (("big_index_1m.json", "o"), ("big_index_10m.json", "s")):
        f = HERE / name
        if not f.is_file():
            continue
        big = json.loads(f.read_text())
        if "ivfpq" not in big:
            continue
        label = name.removeprefix("big_index_").removesuffix(".json").upper()
        key = f"{big['chosen_spec']['spec']} | cold page cache, prefetched re-ranking"
        pts = big["ivfpq"][key]["sweep"]  # the index --max-ram 4G chooses, cold page cache
        ax.plot([p["p50_ms"] for p in pts.values()], [p["recall_at_10"] for p in pts.values()],
                marker, label=f"IVF-PQ + int8 re-rank, {label}, cold")  # fmt: skip
        if "ivf_flat" in big:
            s = big["ivf_flat"]["search"]
            ax.plot([s["p50_ms"]], [s["recall_at_10"]], "x", ms=10,
                    label=f"in-RAM IVF-Flat, {label}")  # fmt: skip
    ax.axvline(10, color="grey", lw=0.8, ls=":")
    ax.axhline(0.95, color="grey", lw=0.8, ls=":", label="10M goal: 10 ms, 0.95")
    ax.set_xlabel("p50 latency, ms (one query)")
    ax.set_ylabel("recall@10 vs exact")
    ax.set_title("search beyond RAM (nprobe x re-ranked)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "scaling.png", dpi=110)


if __name__ == "__main__":
    main()
