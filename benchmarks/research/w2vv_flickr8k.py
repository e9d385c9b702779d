"""Word2VisualVec and the regression baseline on Flickr8k dev, beside the papers.

* W2VV with the three vectorisers (bag-of-words, letter trigrams, mean GloVe) predicting
  ResNet-50 pool5 and FNE features: configs/flickr8k-w2vv-{bow,trigram,glove}-{pool5,fne};
  image-to-sentence R@1/5/10, Med r (Dong et al., Table 3, Flickr8k test, ResNet-152);
* text-to-text mAP (their Table 4): bag-of-words and mean GloVe, with and without stop
  words, and W2VV's visual space;
* the regression baseline (configs/flickr8k-regression.yaml), plain and "+ weight"
  (each image's captions averaged into one query): caption->image R@1, R@10, mean rank
  (the caption-retrieval report, Table 1, VGG fc7);
* caption->image R@10 against caption length, for the regression, W2VV and the joint
  GRU model of the default config if its run exists, plotted to w2vv_recall_vs_length.png.

Every model trains with the shared trainer under ``--minutes`` of wall clock at most
(the best dev epoch is kept). Runs live in runs/bench-w2vv/ and are resumed or reused.

Run: python benchmarks/research/w2vv_flickr8k.py --minutes 6 [--only bow-pool5,regression]
Writes benchmarks/research/w2vv_flickr8k.json, .md and w2vv_recall_vs_length.png.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from _common import record  # noqa: E402

from research.papers import REPORT_REGRESSION, W2VV_I2T, W2VV_MAP  # noqa: E402
from vsekit.lab.data import load_dataset, tokenize  # noqa: E402
from vsekit.lab.eval.model_eval import caption_ranks, encode_all, evaluate_model  # noqa: E402
from vsekit.lab.eval.text_retrieval import recall_by_length, text_to_text_map  # noqa: E402
from vsekit.lab.text.encoders import TextEncoderConfig, create_text_encoder  # noqa: E402
from vsekit.lab.train import load_config  # noqa: E402
from vsekit.lab.train.retrieval_data import load_train_data  # noqa: E402
from vsekit.lab.train.trainer import Trainer, load_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "runs" / "bench-w2vv"
W2VV = [f"{t}-{f}" for f in ("pool5", "fne") for t in ("bow", "trigram", "glove")]
MODELS = [*W2VV, "regression"]
LENGTH_EDGES = [8, 10, 12, 14, 17]


def config_path(name: str) -> Path:
    stem = "flickr8k-regression" if name == "regression" else f"flickr8k-w2vv-{name}"
    return ROOT / "configs" / f"{stem}.yaml"


def train_or_load(name: str, minutes: float, threads: int | None):
    cfg = load_config(config_path(name))
    cfg.train.max_minutes = minutes
    cfg.train.threads = threads
    run = RUNS / name
    if not (run / "done").is_file():
        data = load_train_data(cfg, progress=False)
        resume = (run / "last.json").is_file()
        res = Trainer(cfg, data, run, progress=True).fit(resume=resume)
        (run / "done").write_text(json.dumps(res, indent=2))
    model, _ = load_run(run)
    return model, cfg, json.loads((run / "done").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--only", help="comma-separated subset of " + ",".join(MODELS))
    args = ap.parse_args()
    out_json = Path(__file__).with_suffix(".json")
    old = json.loads(out_json.read_text()) if out_json.is_file() else {}
    results: dict = old.get("models", {})
    todo = args.only.split(",") if args.only else MODELS

    ds = load_dataset(ROOT.parent / "shared" / "data" / "flickr8k")
    dev = ds.split("dev")
    lengths = np.array([len(tokenize(t)) for t in dev.texts])
    curves = old.get("recall_vs_length", {})
    for name in todo:
        model, cfg, res = train_or_load(name, args.minutes, args.threads)
        data = load_train_data(cfg, progress=False)
        m = evaluate_model(model, data.dev_feats, data.dev_texts, data.dev_c2i)
        row = {"metrics": m, "epochs_run": res["epochs_run"], "seconds": res["seconds"],
               "best_epoch": res["best_epoch"], "events": res["events"]}  # fmt: skip
        if name == "regression":
            row["weighted"] = evaluate_model(
                model, data.dev_feats, data.dev_texts, data.dev_c2i, queries="image"
            )
        if name in ("regression", "bow-pool5", "glove-pool5"):
            ranks = caption_ranks(model, data.dev_feats, data.dev_texts, data.dev_c2i)
            curves[name] = recall_by_length(ranks, lengths, LENGTH_EDGES)
        if name in ("bow-pool5", "glove-pool5"):
            _, txt = encode_all(model, data.dev_feats, data.dev_texts)
            row["text_map"] = text_to_text_map(txt.numpy(), data.dev_c2i)
        results[name] = row
        print(name, {k: round(v, 1) for k, v in m.items()}, flush=True)

    joint = ROOT / "runs" / "flickr8k-pool5-fast"
    if (joint / "best.json").is_file() and "joint-gru" not in curves:
        cfg = load_config(ROOT / "configs" / "flickr8k-pool5-fast.yaml")
        model, _ = load_run(joint)
        data = load_train_data(cfg, progress=False)
        ranks = caption_ranks(model, data.dev_feats, data.dev_texts, data.dev_c2i)
        curves["joint-gru"] = recall_by_length(ranks, lengths, LENGTH_EDGES)

    maps = old.get("text_map", {})
    for kind, key in (("bow", "bow"), ("mean_glove", "glove")):
        for stop in (False, True):
            from vsekit.lab.data import Vocabulary

            vocab = Vocabulary.build(tokenize(c.text) for c in ds.split("train").captions)
            enc = create_text_encoder(vocab, TextEncoderConfig(kind=kind, stopwords=stop))
            vec = enc(**enc.prepare(dev.texts)).numpy()
            maps[key + ("-nostop" if stop else "")] = text_to_text_map(vec, dev.caption_to_image)
    for name in ("bow-pool5", "glove-pool5"):
        if "text_map" in results.get(name, {}):
            maps["w2vv-" + name.split("-")[0]] = results[name]["text_map"]

    plot(curves, Path(__file__).with_name("w2vv_recall_vs_length.png"))
    out = record(out_json, {"minutes": args.minutes, "threads": args.threads,
                            "models": results, "text_map": maps,
                            "recall_vs_length": curves})  # fmt: skip
    Path(__file__).with_suffix(".md").write_text(markdown(out))
    print(markdown(out))


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, bins in curves.items():
        ax.plot([b["bin"] for b in bins], [b["r10"] for b in bins], marker="o", label=name)
    ax.set_xlabel("caption length (tokens)")
    ax.set_ylabel("caption->image R@10 (%)")
    ax.set_title("Flickr8k dev: recall against caption length")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(out: dict) -> str:
    res, maps = out["models"], out["text_map"]
    lines = [
        "| W2VV input | target | ours (dev) i2t R@1 / R@5 / R@10 / Med r | t2i R@1 / R@10 | "
        "epochs | paper (test, ResNet-152 pool5) i2t |",
        "|---|---|---|---|---|---|",
    ]
    for name in W2VV:
        t, f = name.split("-")
        r = res.get(name)
        p = W2VV_I2T[t] if f == "pool5" else None
        paper = f"{p[0]} / {p[1]} / {p[2]} / {p[3]}" if p else "-"
        if r is None:
            lines.append(f"| {t} | {f} | not run | | | {paper} |")
            continue
        m = r["metrics"]
        lines.append(
            f"| {t} | {f} | {m['i2t_r1']:.1f} / {m['i2t_r5']:.1f} / {m['i2t_r10']:.1f} / "
            f"{m['i2t_medr']:.0f} | {m['t2i_r1']:.1f} / {m['t2i_r10']:.1f} | "
            f"{r['epochs_run']} | {paper} |"
        )
    lines += ["", "| text representation | ours (dev) mAP | paper (test) mAP |", "|---|---|---|"]
    names = {
        "bow": "bag-of-words",
        "bow-nostop": "bag-of-words, no stop words",
        "glove": "mean GloVe",
        "glove-nostop": "mean GloVe, no stop words",
        "w2vv-bow": "Word2VisualVec (bow)",
        "w2vv-glove": "Word2VisualVec (GloVe)",
    }
    for k, label in names.items():
        v = maps.get(k)
        lines.append(f"| {label} | {'-' if v is None else f'{v:.1f}'} | {W2VV_MAP[k]} |")
    reg = res.get("regression")
    if reg:
        lines += ["", "| regression baseline | ours (dev) t2i R@1 / R@10 / mean r | "
                  "paper (test) |", "|---|---|---|"]  # fmt: skip
        for key, m in (("plain", reg["metrics"]), ("weight", reg["weighted"])):
            p = REPORT_REGRESSION[key]
            lines.append(
                f"| {key} | {m['t2i_r1']:.1f} / {m['t2i_r10']:.1f} / {m['t2i_meanr']:.1f} | "
                f"{p[0]} / {p[1]} / {p[2]} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
