"""Tag predictability on Flickr8k dev: the analogue of the tag-ranking paper's Tables 2-4.

Grid: tag scheme {nouns, compound, syntactic (nouns ranked by dependency depth)} x
alpha {0, .25, .5, .75, 1} x loss {SJE Delta(I), SJE Delta(II), ListSJE K_top=5}: 45
bilinear rankers trained with configs/flickr8k-tags.yaml (ResNet-50 pool5, GloVe 50-d,
Adam 1e-4, batch 16, 10 epochs) and the shared trainer, each scored by precision@1 and
@5 of the dev images' own mined tags (no distractors; the best epoch on dev p@1 is kept,
so these are dev figures in every sense). The best model is then evaluated with 0, 5, 10
and 20 distractors per image for k = 1..10, beside the random ranker, plotted to
tags_precision_vs_distractors.png, and by MAP/MiAP over the training tags.

The paper's figures are COCO validation with VGG-19 and word2vec-300 features.

Run: python benchmarks/research/tags_flickr8k.py [--epochs 10] [--threads 2]
Writes benchmarks/research/tags_flickr8k.json, .md and tags_precision_vs_distractors.png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from _common import record  # noqa: E402

from research.papers import TAGS  # noqa: E402
from vsekit.lab.tags.evaluate import evaluate_tags  # noqa: E402
from vsekit.lab.tags.metrics import shown_tags  # noqa: E402
from vsekit.lab.train import load_config  # noqa: E402
from vsekit.lab.train.config import apply_overrides  # noqa: E402
from vsekit.lab.train.export import calibrate_tagger  # noqa: E402
from vsekit.lab.train.tags import load_tag_data  # noqa: E402
from vsekit.lab.train.trainer import Trainer, load_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "runs" / "bench-tags"
SCHEMES = {
    "nouns": ("nouns", ""),
    "compound": ("compound", ""),
    "syntactic": ("nouns", "syntactic:"),
}
ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
LOSSES = {
    "SJE D(I)": ["loss.name=sje", "loss.delta=I", "loss.k_top=null"],
    "SJE D(II)": ["loss.name=sje", "loss.delta=II", "loss.k_top=null"],
    "ListSJE K=5": ["loss.name=listsje", "loss.k_top=5"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int)
    args = ap.parse_args()
    base = load_config(ROOT / "configs" / "flickr8k-tags.yaml")
    out_json = Path(__file__).with_suffix(".json")
    old = json.loads(out_json.read_text()) if out_json.is_file() else {}
    grid = old.get("grid", {})
    t0 = time.perf_counter()
    for scheme, (sch, prefix) in SCHEMES.items():
        for alpha in ALPHAS:
            rel = f"{prefix}alpha={alpha}"
            data = None
            for lname, sets in LOSSES.items():
                key = f"{scheme}|{alpha}|{lname}"
                if key in grid:
                    continue
                cfg = apply_overrides(base, [f"tags.scheme={sch}", f"tags.relevance={rel}",
                                             f"train.epochs={args.epochs}", *sets])  # fmt: skip
                cfg.train.threads = args.threads
                data = data or load_tag_data(cfg, progress=False)
                run = RUNS / key.replace("|", "_").replace(" ", "").replace("=", "")
                shutil.rmtree(run, ignore_errors=True)
                res = Trainer(cfg, data, run, progress=False).fit()
                m = res["best_metrics"]
                grid[key] = {"p1": m["p1"], "p5": m["p5"], "random_p1": m["random_p1"],
                             "random_p5": m["random_p5"], "best_epoch": res["best_epoch"],
                             "run": str(run.relative_to(ROOT))}  # fmt: skip
                print(key, {k: round(v, 1) for k, v in m.items()}, flush=True)
    best_key = max(grid, key=lambda k: grid[k]["p1"])
    scheme, alpha, lname = best_key.split("|")
    sch, prefix = SCHEMES[scheme]
    cfg = apply_overrides(base, [f"tags.scheme={sch}", f"tags.relevance={prefix}alpha={alpha}",
                                 *LOSSES[lname]])  # fmt: skip
    data = load_tag_data(cfg, progress=False)
    best_run = ROOT / grid[best_key]["run"]
    if not (best_run / "best.json").is_file():  # the grid is recorded; its runs may be gone
        best_cfg = apply_overrides(cfg, [f"train.epochs={args.epochs}"])
        best_cfg.train.threads = args.threads
        shutil.rmtree(best_run, ignore_errors=True)
        Trainer(best_cfg, data, best_run, progress=False).fit()
    model, _ = load_run(best_run)
    curves = {}
    for d in (0, 5, 10, 20):
        data.eval_k = tuple(range(1, 11))
        curves[str(d)] = data.evaluate(model, distractors=d)
    full = evaluate_tags(model, data)
    plot(curves, Path(__file__).with_name("tags_precision_vs_distractors.png"), best_key)
    # beyond the paper: the best setting again, with 20 tags of other images appended to
    # each training list as negatives (tags.negatives), so that absent tags rank last
    neg_cfg = apply_overrides(cfg, ["tags.negatives=20", f"train.epochs={args.epochs}"])
    neg_cfg.train.threads = args.threads
    neg_data = load_tag_data(neg_cfg, progress=False)
    run = RUNS / "best-negatives20"
    shutil.rmtree(run, ignore_errors=True)
    Trainer(neg_cfg, neg_data, run, progress=False).fit()
    neg_model, _ = load_run(run)
    neg_eval = evaluate_tags(neg_model, neg_data)
    calibrated = calibrated_tagger(neg_model, neg_data)
    out = record(out_json, {"epochs": args.epochs, "seconds": round(time.perf_counter() - t0),
                            "grid": grid, "best": best_key, "best_curves": curves,
                            "best_eval": full, "best_negatives20_eval": neg_eval,
                            "calibrated": calibrated})  # fmt: skip
    Path(__file__).with_suffix(".md").write_text(markdown(out))
    print(markdown(out))


def calibrated_tagger(neg_model, neg_data) -> dict:
    """Beyond the paper, the tagger shipped since default-2026.11-b: configs/flickr8k-tags-
    calibrated.yaml (learned tag offsets and biases, sigmoid cross-entropy over every
    training tag; epochs chosen on 500 carved train images by MiAP), its display threshold
    calibrated on that slice to a precision of 0.8 (vsekit.lab.train.export.calibrate_tagger);
    then dev, untouched: MAP/MiAP as above, and the tags a user is shown (at most 10 per
    image, over every training tag) against the tags mined from the image's captions. The
    negatives-20 ranker above is scored the same way, showing its top 10 as it did."""
    cfg = load_config(ROOT / "configs" / "flickr8k-tags-calibrated.yaml")
    run = ROOT / "runs" / "tags-calibrated"
    shutil.rmtree(run, ignore_errors=True)
    t0 = time.perf_counter()
    Trainer(cfg, load_tag_data(cfg, progress=False), run, progress=False).fit()
    seconds = time.perf_counter() - t0
    model, _ = load_run(run)
    cal = calibrate_tagger(model, run)
    dev_cfg = apply_overrides(cfg, ["data.val_from_train=0"])  # dev images, not the slice
    dev = load_tag_data(dev_cfg, progress=False)
    ev = evaluate_tags(model, dev)
    s, rel = dev.vocab_scores(model, min_count=1, model_tags_only=True)
    shown = shown_tags(1 / (1 + np.exp(-s)), rel, cal["threshold"])
    s_old, rel_old = neg_data.vocab_scores(neg_model, min_count=1, model_tags_only=True)
    old_top10 = shown_tags(s_old, rel_old, -np.inf)
    return {"config": "configs/flickr8k-tags-calibrated.yaml", "train_seconds": round(seconds, 1),
            "best_epoch": json.loads((run / "best.json").read_text())["epoch"],
            "threshold": cal["threshold"], "selection_slice": cal["calibration"],
            "dev_eval": ev, "dev_shown": shown, "dev_tags": rel.shape[1],
            "negatives20_top10_shown": old_top10}  # fmt: skip


def plot(curves: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ks = list(range(1, 11))
    for n, (d, c) in enumerate(curves.items()):
        ax.plot(ks, [c[f"p{k}"] for k in ks], marker="o", color=f"C{n}", label=f"{d} distractors")
        ax.plot(ks, [c[f"random_p{k}"] for k in ks], ls="--", color=f"C{n}")
    ax.set_xlabel("k")
    ax.set_ylabel("precision@k (%)")
    ax.set_title(f"Flickr8k dev, {title} (dashed: random)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(out: dict) -> str:
    grid = out["grid"]
    head = "| loss | tags | metric | " + " | ".join(f"a={a}" for a in ALPHAS) + " |"
    lines = [head, "|---|---|---|" + "---|" * len(ALPHAS)]
    for lname in LOSSES:
        for scheme in SCHEMES:
            for mi, metric in enumerate(("p1", "p5")):
                paper = TAGS[(lname, scheme)][mi]
                cells = []
                for a, p in zip(ALPHAS, paper, strict=True):
                    r = grid.get(f"{scheme}|{a}|{lname}")
                    cells.append(f"{r[metric]:.1f} ({p})" if r else f"- ({p})")
                name = "p@1" if metric == "p1" else "p@5"
                lines.append(f"| {lname} | {scheme} | {name} | " + " | ".join(cells) + " |")
    rnd = np.mean([r["random_p1"] for r in grid.values()]) if grid else float("nan")
    b = out["best_eval"]
    pred = b["predictability"]
    lines += [
        "",
        f"Random ranker, mean over the grid: p@1 {rnd:.1f}. Best model ({out['best']}): "
        + ", ".join(
            f"{d} distractors p@1 {v['p1']:.1f} / p@5 {v['p5']:.1f} "
            f"(random {v['random_p1']:.1f} / {v['random_p5']:.1f})"
            for d, v in pred.items()
        )
        + f"; MAP {b['map']:.1f}, MiAP {b['miap']:.1f} over {b['vocab_tags']} tags.",
    ]
    n = out.get("best_negatives20_eval")
    if n:
        lines.append(
            "\nThe same setting trained with 20 negative tags per image (tags.negatives=20, "
            "beyond the paper): "
            + ", ".join(
                f"{d} distractors p@1 {v['p1']:.1f} / p@5 {v['p5']:.1f}"
                for d, v in n["predictability"].items()
            )
            + f"; MAP {n['map']:.1f}, MiAP {n['miap']:.1f}."
        )
    c = out.get("calibrated")
    if c:
        d, s, o = c["dev_eval"], c["dev_shown"], c["negatives20_top10_shown"]
        lines.append(
            f"\nCalibrated tagger (`{c['config']}`, shipped; beyond the paper), dev: MAP "
            f"{d['map']:.1f}, MiAP {d['miap']:.1f}; p@1 {d['predictability']['0']['p1']:.1f} "
            f"(0 distractors). Tags shown (probability >= {c['threshold']}, chosen on the "
            f"carved train slice for precision 0.8, at most 10, over {c['dev_tags']} tags): "
            f"precision {s['precision']:.3f}, recall {s['recall']:.3f}, "
            f"{s['tags_per_image']:.2f} tags per image, {100 * s['images_with_tags']:.1f}% "
            f"of images show any. The negatives-20 ranker's top 10, as shown before: "
            f"precision {o['precision']:.3f}, recall {o['recall']:.3f}."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
