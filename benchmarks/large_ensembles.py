"""Every trained member together (the best configuration at any inference cost), the
default-sized candidates, and members refitted on every train image.

Protocol (issue: retrieval quality, "the best configuration, at any inference cost"):

1. Members, each trained with its recipe and budget, epochs chosen on the 500 carved
   train images (the same slice for all); dev is never used to choose anything:
   * 10-crop trained (``benchmarks/ten_crop.py``): ``gru10-sN``, ``minilm10-sN`` (frozen
     MiniLM) and ``minilm10ft1-s0`` (its top transformer layer tuned, on this CPU with the
     frozen layers' states cached: ``model.text.finetune_cache``; one seed);
   * their twins ``gru10r-sN``, ``minilm10r-sN``: the same recipe and seed refitted on all
     6,000 train images, slice included (``train.refit_from``: the twin's epoch count and
     curriculum switch);
   * 2-crop trained (``benchmarks/ensembles.py``): ``gru-sN``, ``minilm-sN``;
   * ``ft3-sN``, ``ft6-sN``: MiniLM with its top 3 / all 6 layers tuned on a GPU machine
     (``benchmarks/minilm_finetune.py``), of which only the 2-crop slice and dev
     embeddings exist (float16, ``runs/finetune/*/embeddings.npz``).
2. Two indexes: every member reading 2-crop rows (what ``vse index`` computes today) and
   reading 10-crop rows (five times the backbone cost; the GPU members still read their
   2-crop embeddings, which a 10-crop pass also yields).
3. An ensemble averages its members' cosines; its GRU share is chosen on the slice from
   ``ensembles.GRID``. Among the large candidates the one with the best slice rsum is
   "chosen" per index. A refitted ensemble has seen the slice, so it takes the share of
   its twin (the same members before refitting) and is scored on dev only.
4. Default-sized candidates (one GRU, so one word table for the vocabulary expansion):
   GRU10 with one, two or three MiniLM10 members, each over three seed combinations
   (GRU seed N with MiniLM seeds N, N+1, ...), mean ± sample std.

Run: python benchmarks/large_ensembles.py      (members must be trained; member
embeddings are cached in ~/.cache/vsekit/bench/large_ensembles.npz)
Writes benchmarks/large_ensembles.json and .md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record, spread_rows  # noqa: E402
from ensembles import FT_RUNS, GRID, RUNS, combine, kind_of, metrics  # noqa: E402
from ten_crop import F8K, STORES  # noqa: E402

from vsekit.lab.data import load_dataset  # noqa: E402
from vsekit.lab.features.store import FeatureStore  # noqa: E402
from vsekit.lab.train.export import model_from_run  # noqa: E402
from vsekit.lab.train.features import image_features  # noqa: E402

SEEDS = (0, 1, 2)
CACHE = Path("~/.cache/vsekit/bench/large_ensembles.npz").expanduser()


def three(*kinds: str) -> list[str]:
    return [f"{k}-s{s}" for k in kinds for s in SEEDS]


#: runs/ensemble/NAME
LOCAL = [*three("gru10", "minilm10", "gru10r", "minilm10r", "gru", "minilm"), "minilm10ft1-s0"]
GPU = three("ft3", "ft6")  # runs/finetune/NAME/embeddings.npz (2-crop rows only)
CANDIDATES = {
    "3 GRU10 + 3 MiniLM10": three("gru10", "minilm10"),
    "3 GRU10 + 3 MiniLM-ft6": three("gru10", "ft6"),
    "3 GRU10 + 3 MiniLM10 + 3 MiniLM-ft6": three("gru10", "minilm10", "ft6"),
    "3 GRU10 + 3 GRU + 3 MiniLM10 + 3 MiniLM-ft6": three("gru10", "gru", "minilm10", "ft6"),
    "every member before refitting (22)": [n for n in LOCAL + GPU if "10r-" not in n],
}


def default_sized(k: int, seed: int) -> list[str]:
    """GRU10 seed ``seed`` with ``k`` MiniLM10 members, seeds ``seed``, ``seed + 1``, ..."""
    return [f"gru10-s{seed}", *(f"minilm10-s{(seed + j) % 3}" for j in range(k))]


DEFAULT_SIZED = {f"GRU10 + {k} MiniLM10": k for k in (1, 2, 3)}
PAIRS = {f"{label}, seed {s}": default_sized(k, s) for label, k in DEFAULT_SIZED.items()
         for s in SEEDS}  # fmt: skip
PAIRS["GRU10 + MiniLM10-ft1, seed 0"] = ["gru10-s0", "minilm10ft1-s0"]


def refit_twin(name: str) -> str | None:
    """``gru10-s1`` -> ``gru10r-s1``; None for members without a refitted twin."""
    kind, seed = name.split("-s")
    return f"{kind}r-s{seed}" if kind in ("gru10", "minilm10") else None


def member_embeddings(splits: dict, local: list[str] | None = None) -> dict[str, np.ndarray]:
    """``"{member}|{split}|{crops}|img"`` and ``"{member}|{split}|txt"`` arrays of the
    ``local`` members (default :data:`LOCAL`) and the GPU ones."""
    emb = dict(np.load(CACHE)) if CACHE.is_file() else {}
    stores = {c: FeatureStore(p) for c, p in STORES.items()}
    for name in LOCAL if local is None else local:
        run = RUNS / name
        done = run / "done.json"
        stamp = emb.get(f"{name}|mtime", [0])[0]  # the run's done.json when embedded
        if done.is_file() and stamp == done.stat().st_mtime:
            continue
        model = model_from_run(run)
        kind = model.info["image"]["features"]
        for s, sp in splits.items():
            emb[f"{name}|{s}|txt"] = model.encode_text(sp.texts)
            for c, store in stores.items():
                feats = image_features(store, kind, [im.id for im in sp.images])
                emb[f"{name}|{s}|{c}|img"] = model.encode_image_features(feats)
        emb[f"{name}|mtime"] = np.array([done.stat().st_mtime])
        print("embedded", name, flush=True)
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        np.savez(CACHE.with_suffix(".tmp.npz"), **emb)
        CACHE.with_suffix(".tmp.npz").replace(CACHE)
    for name in GPU:
        z = np.load(FT_RUNS / name / "embeddings.npz")
        for s in splits:
            emb[f"{name}|{s}|txt"] = z[f"{s}_txt"].astype(np.float32)
            for c in STORES:  # only 2-crop rows exist for the GPU members
                emb[f"{name}|{s}|{c}|img"] = z[f"{s}_img"].astype(np.float32)
    return emb


def score(
    emb: dict, group: list[str], crops: int, splits: dict, c2i: dict, share: float | None = None
) -> dict:
    """The group's ensemble at the GRU share with the best slice rsum (or at ``share``,
    on dev only: a refitted ensemble, which trained on the slice)."""
    kinds = [kind_of(n) for n in group]
    grid = GRID if {"gru", "minilm"} <= set(kinds) else (0.0,)
    on = list(splits) if share is None else ["dev"]
    scored = []
    for w in grid if share is None else (share,):
        res = {}
        for s in on:
            pairs = list(zip(group, kinds, strict=True))
            img = combine([(emb[f"{n}|{s}|{crops}|img"], k) for n, k in pairs], w)
            txt = combine([(emb[f"{n}|{s}|txt"], k) for n, k in pairs], w)
            res[s] = metrics(img, txt, c2i[s])
        scored.append((res.get("selection", res["dev"])["rsum"], w, res))
    _, share, res = max(scored, key=lambda x: x[0]) if len(on) > 1 else scored[0]
    return {"members": group, "gru_share": share, **res}


def main() -> None:
    ds = load_dataset(F8K)
    splits = {"selection": ds.carve("train", 500, "train-val", 0).split("train-val"),
              "dev": ds.split("dev")}  # fmt: skip
    c2i = {s: [c.image for c in sp.captions] for s, sp in splits.items()}
    emb = member_embeddings(splits)
    members = {n: {f"dev_c{c}": metrics(emb[f"{n}|dev|{c}|img"], emb[f"{n}|dev|txt"], c2i["dev"])
                   for c in STORES} for n in LOCAL + GPU}  # fmt: skip
    rows, chosen = {}, {}
    for c in STORES:
        for label, group in {**CANDIDATES, **PAIRS}.items():
            r = rows[f"{label}, {c}-crop index"] = score(emb, group, c, splits, c2i)
            twins = [refit_twin(n) or n for n in group]
            if twins != group:  # the same members refitted, at the twin's share
                rows[f"{label}, refitted, {c}-crop index"] = score(
                    emb, twins, c, splits, c2i, share=r["gru_share"]
                )
            print(f"{label}, c{c}: share {r['gru_share']} slice {r['selection']['rsum']:.1f} "
                  f"dev {r['dev']['rsum']:.1f}", flush=True)  # fmt: skip
        best = max(CANDIDATES, key=lambda k: rows[f"{k}, {c}-crop index"]["selection"]["rsum"])
        chosen[f"{c}-crop index"] = best
    spread = {}
    for label in DEFAULT_SIZED:
        for refit in ("", ", refitted"):
            for c in STORES:
                out = {}
                for key in ("rsum", "i2t_r1", "t2i_r1"):
                    xs = np.array([rows[f"{label}, seed {s}{refit}, {c}-crop index"]["dev"][key]
                                   for s in SEEDS])  # fmt: skip
                    mean, std = round(float(xs.mean()), 2), round(float(xs.std(ddof=1)), 2)
                    out[key] = {"mean": mean, "std": std, "each": xs.tolist()}
                spread[f"{label}{refit}, {c}-crop index"] = out
    print("chosen on the slice:", chosen, flush=True)
    print(json.dumps(spread, indent=1), flush=True)
    out = Path(__file__).with_suffix(".json")
    record(out, {"command": "python benchmarks/large_ensembles.py", "members": members,
                 "ensembles": rows, "chosen_on_selection": chosen, "over_seeds": spread,
                 "stores": {c: str(p) for c, p in STORES.items()}})  # fmt: skip
    write_table(json.loads(out.read_text()))


def write_table(res: dict) -> None:
    rows = ["| ensemble | index | GRU share | selection rsum | dev R@1 i2t / t2i | dev rsum |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    chosen = {f"{v}, {k}" for k, v in res["chosen_on_selection"].items()}
    for label, r in res["ensembles"].items():
        if ", seed " in label and "seed 0" not in label:
            continue
        name, index = label.rsplit(", ", 1)
        d = r["dev"]
        sel = f"{r['selection']['rsum']:.1f}" if "selection" in r else "(trained on it)"
        mark = "**" if label in chosen else ""
        rows.append(f"| {mark}{name}{mark} | {index.split()[0]} | {r['gru_share']} | {sel} | "
                    f"{d['i2t_r1']:.1f} / {d['t2i_r1']:.1f} | "
                    f"{mark}{d['rsum']:.1f}{mark} |")  # fmt: skip
    rows += ["", "| default-sized, 3 seed combinations (mean ± sample std) | index | dev rsum "
             "| i2t R@1 | t2i R@1 |", "|---|---|---|---|---|"]  # fmt: skip
    rows += spread_rows(res["over_seeds"])
    head = (
        f"Flickr8k dev (1,000 images, 5,000 captions), {res['date']}, `{res['command']}`; "
        "bold: the composition chosen on the selection slice for each index; a refitted "
        "row takes its twin's GRU share.\n\n"
    )
    Path(__file__).with_suffix(".md").write_text(head + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
