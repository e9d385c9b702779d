"""Text-tower ensembles on Flickr8k: GRU and MiniLM models on one image feature, their
similarities averaged (``kind: ensemble``).

Protocol (issue: retrieval quality):

1. Members, each trained by ``vse train`` with its config's recipe and budget, epochs
   chosen on 500 train images carved out (``data.val_from_train``, ``data.val_seed`` 0:
   the same slice for every member); dev is not looked at:
   * ``gru-sN``: ``configs/flickr8k-recommended.yaml`` (GRU over GloVe-initialised words);
   * ``minilm-sN``: ``configs/flickr8k-minilm.yaml`` (frozen all-MiniLM-L6-v2 + MLPs);
   seeds N = 0, 1, 2.
2. Every member and ensemble is scored on the selection slice and on the 1,000 dev
   images (their 2-crop FeatureStore rows; 5,000 captions), the full protocol.
3. An ensemble's one free number, the GRU models' share of the similarity, is chosen on
   the selection slice from a grid; dev is reported at that choice.

Every model reads the same image features, so an ensemble costs one backbone pass per
photo at indexing time, like a single model; the index stores the concatenated
embedding (its dimension is the memory cost per photo) and a query runs every text
tower.

Run: python benchmarks/ensembles.py [--train]   (--train: train members that are missing)
Writes benchmarks/ensembles.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record, train_run  # noqa: E402

from vsekit.lab.data import load_dataset  # noqa: E402
from vsekit.lab.eval import retrieval_metrics, retrieval_metrics_from_embeddings  # noqa: E402
from vsekit.lab.features.store import FeatureStore  # noqa: E402
from vsekit.lab.train.export import model_from_run  # noqa: E402
from vsekit.lab.train.features import image_features  # noqa: E402
from vsekit.similarity import ensemble_concat, group_weights  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
F8K = ROOT.parent / "shared" / "data" / "flickr8k"
RUNS = ROOT / "runs" / "ensemble"
CONFIGS = {"gru": ("configs/flickr8k-recommended.yaml", ["data.val_from_train=500"]),
           "minilm": ("configs/flickr8k-minilm.yaml", [])}  # fmt: skip
SEEDS = (0, 1, 2)
ENSEMBLES = {  # name -> members
    "GRU + MiniLM": ["gru-s0", "minilm-s0"],
    "GRU + MiniLM (seeds 1)": ["gru-s1", "minilm-s1"],
    "GRU + MiniLM (seeds 2)": ["gru-s2", "minilm-s2"],
    "2 GRU": ["gru-s0", "gru-s1"],
    "2 MiniLM": ["minilm-s0", "minilm-s1"],
    "2 GRU + 2 MiniLM": ["gru-s0", "gru-s1", "minilm-s0", "minilm-s1"],
    "3 GRU + 3 MiniLM": [f"{k}-s{s}" for k in ("gru", "minilm") for s in SEEDS],
    "GRU + MiniLM-ft6": ["gru-s0", "ft6-s0"],
    "3 GRU + 3 MiniLM-ft3": [f"{k}-s{s}" for k in ("gru", "ft3") for s in SEEDS],
    "3 GRU + 3 MiniLM-ft6": [f"{k}-s{s}" for k in ("gru", "ft6") for s in SEEDS],
    "3 GRU + 3 MiniLM-ft6 + 3 MiniLM": [
        f"{k}-s{s}" for k in ("gru", "ft6", "minilm") for s in SEEDS
    ],
}
#: MiniLM members with tuned transformer layers (benchmarks/minilm_finetune.py), trained
#: and embedded on a GPU machine: their slice and dev embeddings (float16) are read from
#: runs/finetune/NAME/embeddings.npz
FINETUNED = [f"ft{k}-s{s}" for k in (3, 6) for s in SEEDS]
FT_RUNS = ROOT / "runs" / "finetune"


def kind_of(name: str) -> str:
    """The share group of a member: GRU, or MiniLM (frozen or tuned)."""
    return "gru" if name.startswith("gru") else "minilm"


GRID = (0.3, 0.4, 0.5, 0.6, 0.7)  # the GRU models' share of the similarity


def train(name: str) -> None:
    """Train member ``name`` (resuming a killed run); ``done.json`` marks it finished."""
    kind, seed = name.split("-s")
    config, sets = CONFIGS[kind]
    train_run(RUNS / name, config, [*sets, f"train.seed={seed}"], ROOT)


def metrics(img: np.ndarray, txt: np.ndarray, c2i: list[int]) -> dict:
    m = retrieval_metrics_from_embeddings(torch.from_numpy(img), torch.from_numpy(txt), c2i)
    return {k: round(float(v), 2) for k, v in m.items()}


def metrics_sims(sims: np.ndarray, c2i: list[int]) -> dict:
    """As :func:`metrics`, from a ``[n_images, n_captions]`` score matrix."""
    return {k: round(float(v), 2) for k, v in retrieval_metrics(sims, c2i).items()}


def combine(parts: list[tuple[np.ndarray, str]], share: float) -> np.ndarray:
    """The ensemble of ``(unit embeddings, kind)`` members with ``share`` of the weight on
    the GRU members (:func:`vsekit.similarity.group_weights`, then the same weighting as
    the shipped ensemble model)."""
    weights = group_weights([k for _, k in parts], share)
    return ensemble_concat([e for e, _ in parts], weights)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", action="store_true", help="train the members that are missing")
    args = ap.parse_args()
    names = [f"{k}-s{s}" for k in CONFIGS for s in SEEDS]
    if args.train:
        for name in names:
            train(name)
    missing = [n for n in names if not (RUNS / n / "done.json").is_file()]
    if missing:
        raise SystemExit(f"members not trained: {', '.join(missing)} (run with --train)")
    ds = load_dataset(F8K)
    splits = {"selection": ds.carve("train", 500, "train-val", 0).split("train-val"),
              "dev": ds.split("dev")}  # fmt: skip
    store = FeatureStore(Path("~/.cache/vsekit/stores/flickr8k-resnet50-c2").expanduser())
    emb: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {s: {} for s in splits}
    members = {}
    for name in FINETUNED:
        z = np.load(FT_RUNS / name / "embeddings.npz")
        for s in splits:
            emb[s][name] = (z[f"{s}_img"].astype(np.float32), z[f"{s}_txt"].astype(np.float32))
        members[name] = {s: metrics(*emb[s][name], [c.image for c in split.captions])
                         for s, split in splits.items()}  # fmt: skip
        members[name]["embed_dim"] = emb["dev"][name][0].shape[1]
        members[name]["train_seconds"] = (
            json.loads((FT_RUNS / name / "done.json").read_text())["seconds"]
            if (FT_RUNS / name / "done.json").is_file()
            else None
        )
        members[name]["embeddings"] = "GPU machine, benchmarks/minilm_finetune.py (float16)"
    for name in names:
        model = model_from_run(RUNS / name)
        kind = model.info["image"]["features"]
        for s, split in splits.items():
            feats = image_features(store, kind, [im.id for im in split.images])
            emb[s][name] = (model.encode_image_features(feats), model.encode_text(split.texts))
        members[name] = {
            s: metrics(*emb[s][name], [c.image for c in split.captions])
            for s, split in splits.items()
        }
        members[name]["embed_dim"] = model.embed_dim
        members[name]["train_seconds"] = json.loads((RUNS / name / "done.json").read_text()).get(
            "seconds"
        )
        print(name, members[name]["dev"]["rsum"], flush=True)
    ensembles = {}
    for label, group in ENSEMBLES.items():
        kinds = [kind_of(n) for n in group]
        grid = GRID if {"gru", "minilm"} <= set(kinds) else (None,)
        scored = []
        for share in grid:
            res = {}
            for s, split in splits.items():
                img = combine([(emb[s][n][0], k) for n, k in zip(group, kinds, strict=True)],
                              share or 0.0)  # fmt: skip
                txt = combine([(emb[s][n][1], k) for n, k in zip(group, kinds, strict=True)],
                              share or 0.0)  # fmt: skip
                res[s] = metrics(img, txt, [c.image for c in split.captions])
            scored.append((res["selection"]["rsum"], share, res))
        _, share, res = max(scored, key=lambda x: x[0])  # chosen on the selection slice
        ensembles[label] = {"members": group, "gru_share": share, **res,
                            "embed_dim": sum(members[n]["embed_dim"] for n in group),
                            "selection_grid": {str(s): r["selection"]["rsum"]
                                               for _, s, r in scored}}  # fmt: skip
        print(label, share, res["dev"]["rsum"], flush=True)

    def spread(rows: list[dict]) -> dict:
        r = np.array([x["dev"]["rsum"] for x in rows])
        return {
            "dev_rsum_mean": round(float(r.mean()), 2),
            "dev_rsum_std": round(float(r.std(ddof=1)), 2),
        }

    seeds = {  # the rows above over 3 seeds (mean, sample std)
        "GRU": spread([members[f"gru-s{s}"] for s in SEEDS]),
        "MiniLM": spread([members[f"minilm-s{s}"] for s in SEEDS]),
        "GRU + MiniLM": spread(
            [ensembles[k] for k in ENSEMBLES if k.startswith("GRU + MiniLM") and "ft" not in k]
        ),
        "MiniLM-ft6 (GPU)": spread([members[f"ft6-s{s}"] for s in SEEDS]),
    }
    print(seeds, flush=True)
    out = Path(__file__).with_suffix(".json")
    record(out, {"command": "python benchmarks/ensembles.py", "members": members,
                 "ensembles": ensembles, "three_seeds": seeds,
                 "store": str(store.path)})  # fmt: skip
    write_table(json.loads(out.read_text()))


def write_table(res: dict) -> None:
    rows = ["| model | GRU share | dim | selection rsum | dev R@1 i2t | dev R@1 t2i | "
            "dev R@10 t2i | dev rsum |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    items = [(n, None, m) for n, m in res["members"].items()]
    items += [(n, e["gru_share"], e) for n, e in res["ensembles"].items()]
    for name, share, m in items:
        d = m["dev"]
        rows.append(f"| {name} | {'' if share is None else share} | {m['embed_dim']} | "
                    f"{m['selection']['rsum']:.1f} | {d['i2t_r1']:.1f} | {d['t2i_r1']:.1f} | "
                    f"{d['t2i_r10']:.1f} | {d['rsum']:.1f} |")  # fmt: skip
    head = (f"Flickr8k dev (1,000 images, 5,000 captions), {res['date']}, `{res['command']}`;"
            " ensembles' GRU share chosen on the selection slice.\n\n")  # fmt: skip
    seeds = "; ".join(f"{k} {v['dev_rsum_mean']:.1f} ± {v['dev_rsum_std']:.1f}"
                      for k, v in res["three_seeds"].items())  # fmt: skip
    tail = f"\nOver 3 seeds (dev rsum, mean ± sample std): {seeds}.\n"
    Path(__file__).with_suffix(".md").write_text(head + "\n".join(rows) + "\n" + tail)


if __name__ == "__main__":
    main()
