"""Hubness reduction (CSLS, :mod:`vsekit.runtime.hubness`) on the ensembles of
``benchmarks/large_ensembles.py``: its settings chosen on the slice, then dev.

Protocol (issue: retrieval quality):

1. Banks, as a bundle holds them: the caption bank is every 6th de-duplicated training
   caption (the caption pool's ``caption_stride``), the image bank 1,000 training images
   drawn with seed 0, embedded from the index's crop rows. For members trained without
   the slice the banks come from the 5,500 train images left after carving it; for the
   refitted members, from all 6,000.
2. For each ensemble, at the GRU share ``large_ensembles.py`` chose for it on the slice,
   ``beta``, ``k_text`` and ``k_image`` are chosen on the slice (the members trained
   without it) from :data:`GRID`; the refitted twins are then scored on dev with those
   settings. Dev is never used to choose anything.
   Seeds 3 and 4 of the 10-crop members (and their refits) join two larger candidates.
3. Rows: no correction, the image penalty only (what ``vse search`` applies: a text query
   ranking images), the caption penalty only, and both (``model.retrieval_scores``).
   The default-sized recipe is scored over its 3 seed combinations (mean ± sample std).

Run: python benchmarks/hubness.py [--fine]  (after large_ensembles.py; bank embeddings are
cached in ~/.cache/vsekit/bench/hubness.npz)
Writes benchmarks/hubness.json and .md (``--fine``: hubness_fine.json).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record, spread_rows  # noqa: E402
from ensembles import RUNS, combine, kind_of, metrics_sims  # noqa: E402
from large_ensembles import LOCAL, SEEDS, member_embeddings, refit_twin, score, three  # noqa: E402
from ten_crop import F8K, STORES  # noqa: E402

from vsekit.lab.data import load_dataset  # noqa: E402
from vsekit.lab.features.store import FeatureStore  # noqa: E402
from vsekit.lab.train.export import model_from_run  # noqa: E402
from vsekit.lab.train.features import image_features  # noqa: E402
from vsekit.runtime.hubness import caption_bank_texts, mean_topk, mean_topks  # noqa: E402

CACHE = Path("~/.cache/vsekit/bench/hubness.npz").expanduser()
FULL_CACHE = Path("~/.cache/vsekit/bench/hubness-full").expanduser()
STRIDE, IMAGE_BANK = 6, 1000
GRID = {"beta": (0.25, 0.5, 0.75), "k_text": (5, 10, 30), "k_image": (2, 5, 10)}
ENSEMBLES = {
    **{f"GRU10 + 3 MiniLM10, seed {s}": [f"gru10-s{s}", *(f"minilm10-s{(s + j) % 3}"
                                                          for j in range(3))]
       for s in SEEDS},
    "3 GRU10 + 3 MiniLM10": three("gru10", "minilm10"),
    # larger candidates of CPU members (every bank can be embedded here; the GPU-tuned
    # MiniLM members of large_ensembles.py left only their slice and dev embeddings)
    "3 GRU10 + 3 MiniLM10 + MiniLM10-ft1": [*three("gru10", "minilm10"), "minilm10ft1-s0"],
    "3 GRU10 + 3 MiniLM10 + 3 GRU + 3 MiniLM": three("gru10", "minilm10", "gru", "minilm"),
    "every CPU member (13)": [*three("gru10", "minilm10", "gru", "minilm"), "minilm10ft1-s0"],
    # seeds 3 and 4 of the 10-crop members (trained on 2026-11-23 by ten_crop.train)
    "5 GRU10 + 5 MiniLM10": [f"{k}-s{s}" for k in ("gru10", "minilm10") for s in range(5)],
    "every CPU member (17)": [*(f"{k}-s{s}" for k in ("gru10", "minilm10") for s in range(5)),
                              *three("gru", "minilm"), "minilm10ft1-s0"],
}  # fmt: skip
#: members beyond large_ensembles.LOCAL, with their refitted twins
MORE_SEEDS = [f"{k}-s{s}" for s in (3, 4) for k in ("gru10", "minilm10", "gru10r", "minilm10r")]
#: the rows among which the slice chooses the best configuration (any inference cost)
LARGE = [k for k in ENSEMBLES if "seed" not in k]


def banks_of(name: str) -> tuple[str, ...]:
    """The banks a member needs: ``minus`` (train without the slice) to be scored on the
    slice, ``all`` (every train image) to be scored on dev; a member with a refitted twin
    is scored on dev through the twin, a refitted one only on dev."""
    if refit_twin(name) is not None:
        return ("minus",)
    return ("all",) if name.split("-s")[0].endswith("r") else ("minus", "all")


def bank_embeddings(ds, carved, ensembles: dict, full: bool = False) -> dict[str, np.ndarray]:
    """``"{member}|{bank}|txt"`` and ``"{member}|{bank}|{crops}|img"``; bank ``minus``
    (train without the slice) for slice-trained members, ``all`` for refitted ones.
    ``full``: every caption and every image of the bank split (cached per member in
    ``FULL_CACHE``, float16)."""
    emb = dict(np.load(CACHE)) if CACHE.is_file() and not full else {}
    banks = {"minus": carved.split("train"), "all": ds.split("train")}
    rng = np.random.default_rng(0)
    picks = {b: np.sort(rng.choice(len(sp.images), IMAGE_BANK, replace=False))
             for b, sp in banks.items()}  # fmt: skip
    if full:
        picks = {b: np.arange(len(sp.images)) for b, sp in banks.items()}
    stores = {c: FeatureStore(p) for c, p in STORES.items()}
    names = sorted({m for g in ensembles.values() for n in g for m in (n, refit_twin(n) or n)})
    for name in names:
        part = FULL_CACHE / f"{name}.npz"
        if full and part.is_file():
            emb.update({k: v.astype(np.float32) for k, v in np.load(part).items()})
        todo = [b for b in banks_of(name) if f"{name}|{b}|txt" not in emb]
        if not todo:
            continue
        model = model_from_run(RUNS / name)
        mine = {}
        for bank in todo:
            sp = banks[bank]
            texts = caption_bank_texts(sp.texts, 1 if full else STRIDE)
            mine[f"{name}|{bank}|txt"] = model.encode_text(texts)
            ids = [sp.images[i].id for i in picks[bank]]
            for c, store in stores.items():
                feats = image_features(store, model.info["image"]["features"], ids)
                mine[f"{name}|{bank}|{c}|img"] = model.encode_image_features(feats)
        emb.update(mine)
        print("bank embedded", name, todo, flush=True)
        target = part if full else CACHE
        target.parent.mkdir(parents=True, exist_ok=True)
        kept = {**{k: v.astype(np.float16) for k, v in mine.items()},
                **(dict(np.load(part)) if part.is_file() else {})} if full else emb  # fmt: skip
        np.savez(target.with_suffix(".tmp.npz"), **kept)
        target.with_suffix(".tmp.npz").replace(target)
    return emb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fine", action="store_true",
                    help="beta also 0.4 and 0.6 (tried after the declared grid; writes "
                    "hubness_fine.json, no table)")  # fmt: skip
    ap.add_argument("--full-banks", action="store_true",
                    help="the large ensembles with every train caption and image as banks "
                    "(the best configuration at any cost; writes hubness_full.json)")  # fmt: skip
    args = ap.parse_args()
    if args.fine:
        GRID["beta"] = (0.25, 0.4, 0.5, 0.6, 0.75)
    ensembles = {k: ENSEMBLES[k] for k in LARGE} if args.full_banks else ENSEMBLES
    ds = load_dataset(F8K)
    carved = ds.carve("train", 500, "train-val", 0)
    splits = {"selection": carved.split("train-val"), "dev": ds.split("dev")}
    c2i = {s: [c.image for c in sp.captions] for s, sp in splits.items()}
    # slice and dev embeddings, cached by large_ensembles.py (computed here for MORE_SEEDS)
    members = member_embeddings(splits, [*LOCAL, *MORE_SEEDS])
    banks = bank_embeddings(ds, carved, ensembles, args.full_banks)
    shares = json.loads((Path(__file__).parent / "large_ensembles.json").read_text())
    rows, spread = {}, {}
    for label, group in ensembles.items():
        for c in STORES:
            known = shares["ensembles"].get(f"{label}, {c}-crop index")
            # the GRU share large_ensembles.py chose on the slice, else chosen here alike
            share = (known or score(members, group, c, splits, c2i))["gru_share"]

            def joint(names, split, bank, c=c, share=share):
                kinds = [kind_of(n) for n in names]
                img = combine([(members[f"{n}|{split}|{c}|img"], k)
                               for n, k in zip(names, kinds, strict=True)], share)  # fmt: skip
                txt = combine([(members[f"{n}|{split}|txt"], k)
                               for n, k in zip(names, kinds, strict=True)], share)  # fmt: skip
                bimg = combine([(banks[f"{n}|{bank}|{c}|img"], k)
                                for n, k in zip(names, kinds, strict=True)], share)  # fmt: skip
                btxt = combine([(banks[f"{n}|{bank}|txt"], k)
                                for n, k in zip(names, kinds, strict=True)], share)  # fmt: skip
                return img, txt, bimg, btxt

            def scored(img, txt, bimg, btxt, split, beta, kt, ki):
                s = img @ txt.T
                pi = beta * mean_topk(img, btxt, kt)
                pt = beta * mean_topk(txt, bimg, ki)
                c = c2i[split]
                return {"none": metrics_sims(s, c),
                        "image penalty (search)": metrics_sims(s - pi[:, None], c),
                        "caption penalty": metrics_sims(s - pt[None, :], c),
                        "both": metrics_sims(s - pi[:, None] - pt[None, :], c)}  # fmt: skip

            sel = joint(group, "selection", "minus")
            s0 = sel[0] @ sel[1].T
            best = None
            r_img = mean_topks(sel[0], sel[3], GRID["k_text"])
            r_txt = mean_topks(sel[1], sel[2], GRID["k_image"])
            for beta, kt, ki in itertools.product(*GRID.values()):
                pi, pt = beta * r_img[kt], beta * r_txt[ki]
                r = metrics_sims(s0 - pi[:, None] - pt[None, :], c2i["selection"])["rsum"]
                if best is None or r > best[0]:
                    best = (r, beta, kt, ki)
            _, beta, kt, ki = best
            twins = [refit_twin(n) or n for n in group]
            dev = scored(*joint(twins, "dev", "all"), "dev", beta, kt, ki)
            rows[f"{label}, refitted, {c}-crop index"] = {
                "members": twins, "gru_share": share,
                "chosen_on_selection": {"beta": beta, "k_text": kt, "k_image": ki},
                "selection_rsum": {"none": metrics_sims(s0, c2i["selection"])["rsum"],
                                   "both": round(best[0], 2)},
                "dev": dev}  # fmt: skip
            print(label, c, (beta, kt, ki), {k: v["rsum"] for k, v in dev.items()}, flush=True)
    chosen = {
        f"{c}-crop index": max(
            LARGE,
            key=lambda k, c=c: rows[f"{k}, refitted, {c}-crop index"]["selection_rsum"]["both"],
        )
        for c in STORES
    }
    print("chosen on the slice:", chosen, flush=True)
    for c in STORES if not args.full_banks else ():
        for how in ("none", "image penalty (search)", "both"):
            xs = {key: np.array([rows[f"GRU10 + 3 MiniLM10, seed {s}, refitted, {c}-crop index"]
                                 ["dev"][how][key] for s in SEEDS])
                  for key in ("rsum", "i2t_r1", "t2i_r1")}  # fmt: skip
            spread[f"{how}, {c}-crop index"] = {
                k: {"mean": round(float(x.mean()), 2), "std": round(float(x.std(ddof=1)), 2),
                    "each": x.tolist()} for k, x in xs.items()}  # fmt: skip
    print(json.dumps(spread, indent=1), flush=True)
    name = "hubness_fine" if args.fine else "hubness_full" if args.full_banks else "hubness"
    out = Path(__file__).with_name(f"{name}.json")
    cmd = "python benchmarks/hubness.py " + " ".join(sys.argv[1:])
    record(out, {"command": cmd.strip(), "grid": GRID,
                 "caption_stride": 1 if args.full_banks else STRIDE,
                 "image_bank": "every image of the bank split" if args.full_banks else IMAGE_BANK,
                 "ensembles": rows,
                 "chosen_on_selection": chosen,
                 "default_recipe_over_seeds": spread})  # fmt: skip
    if name == "hubness":
        write_table(json.loads(out.read_text()))


def write_table(res: dict) -> None:
    hows = ("none", "image penalty (search)", "caption penalty", "both")
    lines = ["| ensemble (refitted) | index | beta, k_text, k_image (slice) | "
             + " | ".join(f"dev rsum: {h}" for h in hows) + " | dev R@1 i2t / t2i, both |",
             "|---|---|---|" + "---|" * len(hows) + "---|"]  # fmt: skip
    chosen = {f"{v}, refitted, {k}" for k, v in res["chosen_on_selection"].items()}
    for label, r in res["ensembles"].items():
        name, index = label.rsplit(", ", 1)
        ch = r["chosen_on_selection"]
        d = r["dev"]
        mark = "**" if label in chosen else ""
        lines.append(f"| {mark}{name.removesuffix(', refitted')}{mark} | {index.split()[0]} | "
                     f"{ch['beta']}, {ch['k_text']}, {ch['k_image']} | "
                     + " | ".join(f"{d[h]['rsum']:.1f}" for h in hows)
                     + f" | {d['both']['i2t_r1']:.1f} / {d['both']['t2i_r1']:.1f} |")  # fmt: skip
    lines += ["", "| GRU10 + 3 MiniLM10 refitted, 3 seed combinations | index | dev rsum | "
              "i2t R@1 | t2i R@1 |", "|---|---|---|---|---|"]  # fmt: skip
    lines += spread_rows(res["default_recipe_over_seeds"])
    head = (f"Flickr8k dev (1,000 images, 5,000 captions), {res['date']}, "
            f"`{res['command']}`; CSLS settings chosen on the 500-image slice with the "
            "members trained without it, then applied to their refitted twins (members "
            "without one are their own twin); bold: the large ensemble chosen on the slice "
            "(its rsum with both penalties) for each index.\n\n")  # fmt: skip
    Path(__file__).with_suffix(".md").write_text(head + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
