"""Fine-tuning the MiniLM text tower's top layers, alone and paired with the GRU model.

Protocol (issue: retrieval quality, "fine-tune the pretrained tower"):

1. Variants of ``configs/flickr8k-minilm.yaml``, each trained by ``vse train`` with that
   recipe and budget, epochs chosen on the 500 carved train images (``data.val_seed`` 0,
   the same slice as ``benchmarks/ensembles.py``); dev is not looked at:
   * ``ft0``: frozen transformer (the recipe as shipped in the default);
   * ``ftK``: its top K of 6 layers trained, at 0.1 x the lr of the rest
     (``model.text.finetune_layers: K``, ``model.text.finetune_lr_scale: 0.1``);
   * ``ft2-x0.3``: top 2 layers at 0.3 x the lr.
   Seeds: 0 for every variant; ``--seeds 0 1 2`` for the variants named by ``--three``.
2. Each is scored alone, and paired with the GRU member ``runs/ensemble/gru-s0`` (the
   default's partner), the GRU share chosen on the selection slice from a grid, like
   ``benchmarks/ensembles.py``; dev is reported at that choice.

Every variant reads the 2-crop pool5 rows of the FeatureStore; the tuned layers only
change the text side, so an index is unchanged in cost.

Run: python benchmarks/minilm_finetune.py --train [--seeds 0 1 2 --three ft2]
     [--store STORE --root FLICKR8K --partner-npz FILE]   (defaults: the standard paths)
Training the tuned variants needs the word-piece path (2-3 s a batch on the 2-core CPU);
the recorded run trained them on a GPU machine (see ``machine`` in the JSON).
Writes benchmarks/minilm_finetune.json and .md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record, train_run  # noqa: E402
from ensembles import GRID, combine, metrics  # noqa: E402

from vsekit.lab.data import load_dataset  # noqa: E402
from vsekit.lab.features.store import FeatureStore  # noqa: E402
from vsekit.lab.train.export import model_from_run  # noqa: E402
from vsekit.lab.train.features import image_features  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs" / "finetune"
PARTNER = ROOT / "runs" / "ensemble" / "gru-s0"
CONFIG = "configs/flickr8k-minilm.yaml"
VARIANTS = {  # name -> overrides of CONFIG
    "ft0": [],
    "ft1": ["model.text.finetune_layers=1"],
    "ft2": ["model.text.finetune_layers=2"],
    "ft3": ["model.text.finetune_layers=3"],
    "ft6": ["model.text.finetune_layers=6"],
    "ft2-x0.3": ["model.text.finetune_layers=2", "model.text.finetune_lr_scale=0.3"],
}


def train(name: str, seed: int, store: str, root: str) -> None:
    """Train variant ``name`` with ``seed`` (resuming a killed run); ``done.json`` marks it."""
    sets = [*VARIANTS[name], f"train.seed={seed}", f"data.store={store}", f"data.root={root}"]
    train_run(RUNS / f"{name}-s{seed}", CONFIG, sets, ROOT)


def embed(run: Path, store: FeatureStore, splits: dict) -> dict[str, tuple]:
    model = model_from_run(run)
    kind = model.info["image"]["features"]
    out = {}
    for s, split in splits.items():
        feats = image_features(store, kind, [im.id for im in split.images])
        out[s] = (model.encode_image_features(feats), model.encode_text(split.texts))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", action="store_true", help="train the variants that are missing")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--three", nargs="*", default=[], help="variants trained with every seed")
    ap.add_argument("--store", default="~/.cache/vsekit/stores/flickr8k-resnet50-c2")
    ap.add_argument("--root", default=str(ROOT.parent / "shared" / "data" / "flickr8k"))
    ap.add_argument("--partner-npz", help="the GRU partner's embeddings (--write-partner)")
    ap.add_argument("--write-partner", help="write the GRU partner's embeddings here and stop")
    args = ap.parse_args()
    store = FeatureStore(Path(args.store).expanduser())
    ds = load_dataset(args.root)
    splits = {"selection": ds.carve("train", 500, "train-val", 0).split("train-val"),
              "dev": ds.split("dev")}  # fmt: skip
    c2i = {s: [c.image for c in split.captions] for s, split in splits.items()}
    if args.write_partner:
        e = embed(PARTNER, store, splits)
        np.savez(args.write_partner, **{f"{s}_{k}": v.astype(np.float16)
                                        for s, (i, t) in e.items()
                                        for k, v in (("img", i), ("txt", t))})  # fmt: skip
        return
    if args.partner_npz:
        z = np.load(args.partner_npz)
        partner = {s: (z[f"{s}_img"].astype(np.float32), z[f"{s}_txt"].astype(np.float32))
                   for s in splits}  # fmt: skip
    else:
        partner = embed(PARTNER, store, splits)
    jobs = [(n, s) for n in VARIANTS for s in (args.seeds if n in args.three else [0])]
    if args.train:
        for n, s in jobs:
            train(n, s, args.store, args.root)
    rows = {}
    for n, s in jobs:
        run = RUNS / f"{n}-s{s}"
        if not (run / "done.json").is_file():
            print(f"{run.name}: not trained, skipped", flush=True)
            continue
        e = embed(run, store, splits)
        row = {"variant": n, "seed": s, "overrides": VARIANTS[n],
               "alone": {k: metrics(*e[k], c2i[k]) for k in splits},
               "train_seconds": json.loads((run / "done.json").read_text())["seconds"],
               "best_epoch": json.loads((run / "best.json").read_text()).get("epoch")
               if (run / "best.json").is_file() else None}  # fmt: skip
        scored = []
        for share in GRID:
            res = {}
            for k in splits:
                img = combine([(partner[k][0], "gru"), (e[k][0], "minilm")], share)
                txt = combine([(partner[k][1], "gru"), (e[k][1], "minilm")], share)
                res[k] = metrics(img, txt, c2i[k])
            scored.append((res["selection"]["rsum"], share, res))
        _, share, res = max(scored, key=lambda x: x[0])
        row["with_gru"] = {"gru_share": share, **res}
        rows[run.name] = row
        print(run.name, row["alone"]["dev"]["rsum"], res["dev"]["rsum"], flush=True)
    three = {}
    for n in args.three:
        r = [rows[f"{n}-s{s}"] for s in args.seeds if f"{n}-s{s}" in rows]
        if len(r) > 1:
            a = np.array([x["alone"]["dev"]["rsum"] for x in r])
            p = np.array([x["with_gru"]["dev"]["rsum"] for x in r])
            three[n] = {"seeds": len(r), "alone_mean": round(float(a.mean()), 2),
                        "alone_std": round(float(a.std(ddof=1)), 2),
                        "with_gru_mean": round(float(p.mean()), 2),
                        "with_gru_std": round(float(p.std(ddof=1)), 2)}  # fmt: skip
    out = Path(__file__).with_suffix(".json")
    cmd = "python " + " ".join(["benchmarks/minilm_finetune.py", *sys.argv[1:]])
    record(out, {"command": cmd, "config": CONFIG, "partner": "runs/ensemble/gru-s0",
                 "runs": rows, "seeds": three})  # fmt: skip
    write_table(json.loads(out.read_text()))


def write_table(res: dict) -> None:
    rows = ["| variant | seed | best epoch | train s | dev R@1 i2t / t2i | dev rsum | "
            "+ GRU: share | + GRU: dev R@1 i2t / t2i | + GRU: dev rsum |",
            "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in res["runs"].values():
        a, p = r["alone"]["dev"], r["with_gru"]["dev"]
        rows.append(f"| {r['variant']} | {r['seed']} | {r['best_epoch']} | "
                    f"{r['train_seconds']:.0f} | {a['i2t_r1']:.1f} / {a['t2i_r1']:.1f} | "
                    f"{a['rsum']:.1f} | {r['with_gru']['gru_share']} | "
                    f"{p['i2t_r1']:.1f} / {p['t2i_r1']:.1f} | {p['rsum']:.1f} |")  # fmt: skip
    # the paths of the machine that ran it (in the JSON) shown as what they held
    cmd = re.sub(
        r"--(store|root|partner-npz) \S+",
        lambda m: f"--{m[1]} {m[1].upper().replace('-', '_')}",
        res["command"],
    )
    head = (f"Flickr8k dev (1,000 images, 5,000 captions), {res['date']}, "
            f"{res['machine'].get('gpu') or res['machine']['cpu']}, `{cmd}` (STORE: a copy "
            "of the 2-crop pool5 rows, ROOT: the Flickr8k caption files, PARTNER_NPZ: the "
            "GRU partner's embeddings); epochs and the GRU share chosen on the selection "
            "slice.\n\n")  # fmt: skip
    tail = "".join(f"\n{n} over {v['seeds']} seeds: alone {v['alone_mean']:.1f} ± "
                   f"{v['alone_std']:.1f}, with the GRU {v['with_gru_mean']:.1f} ± "
                   f"{v['with_gru_std']:.1f}.\n" for n, v in res["seeds"].items())  # fmt: skip
    Path(__file__).with_suffix(".md").write_text(head + "\n".join(rows) + "\n" + tail)


if __name__ == "__main__":
    main()
