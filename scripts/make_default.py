"""Build the shipped default model from the ensemble benchmark's runs.

Reads ``benchmarks/ensembles.json`` (members and the GRU share chosen on the train
slice), joins the member runs into one ensemble bundle, keeps the current default's tag
ranker and caption pool (they read the same image features), records the provenance
(each member's config, seed, best epoch and weights sha256; the data; the selection)
and writes it over ``src/vsekit/assets/default`` atomically. Then run
``vse model expand-vocab default`` and ``vse model onnx default --text-int8`` (what
``scripts/setup`` does) and ``benchmarks/default_model.py`` for its dev figure end to end.

Run: python scripts/make_default.py "GRU + MiniLM"
     python scripts/make_default.py "10-crop training, 2-crop index" --bench ten_crop \
         --crops 2 --tagger runs/tags-calibrated

``--bench``: the benchmark whose JSON holds the row (``ensembles`` and
``large_ensembles``: its ``ensembles``; ``ten_crop``: its ``pairs``); ``--crops``: the
crops the bundle indexes with, when its members trained on features of another crop
count (recorded as ``trained_on_crops``); ``--tagger``: a tag-ranking run to ship instead of the old
default's tagger (a probability tagger is calibrated on its selection slice).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from vsekit.lab.torch_model import VSEModel, default_model_dir
from vsekit.lab.train.export import attach_tagger, ensemble_from_models, model_from_run
from vsekit.similarity import group_weights

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ensemble", help="a row of benchmarks/ensembles.json")
    ap.add_argument("--out", default=str(default_model_dir()))
    ap.add_argument("--bench", choices=("ensembles", "ten_crop", "large_ensembles"),
                    default="ensembles")  # fmt: skip
    ap.add_argument("--crops", type=int, help="index with this many crops")
    ap.add_argument("--tagger", help="a tag-ranking run to ship (default: keep the old one)")
    args = ap.parse_args()
    bench = json.loads((ROOT / "benchmarks" / f"{args.bench}.json").read_text())
    row = bench["pairs" if args.bench == "ten_crop" else "ensembles"][args.ensemble]
    runs = [ROOT / "runs" / "ensemble" / m for m in row["members"]]
    kinds = ["gru" if m.startswith("gru") else "minilm" for m in row["members"]]
    weights = group_weights(kinds, row["gru_share"])
    models = [model_from_run(r) for r in runs]
    ens = ensemble_from_models(models, weights)
    trained_crops = int(ens.info["image"]["crops"])
    if args.crops and args.crops != trained_crops:
        ens.info["image"]["crops"] = args.crops
        if "preprocessing" in ens.info["image"]:
            ens.info["image"]["preprocessing"]["crops"] = args.crops
        ens.info["image"]["trained_on_crops"] = trained_crops
    old = VSEModel.load("default", device="cpu")
    if args.tagger:
        attach_tagger(ens, ROOT / args.tagger)
    elif old.tagger is not None:  # the tag ranker reads the same pool5 features
        if old.info["image"]["weights_sha256"] != ens.info["image"]["weights_sha256"]:
            sys.exit("the old default's tagger reads other image features")
        ens.tagger = old.tagger
        ens.info["tagger"] = old.info.get("tagger")
    members = []
    for name, run, m in zip(row["members"], runs, models, strict=True):
        best = json.loads((run / "best.json").read_text())
        state = b"".join(v.numpy().tobytes() for v in m.model.state_dict().values())
        refit = m.info["config"]["train"].get("refit_from")
        sel = best["metrics"].get("rsum")  # none for a refit: it trained on the slice
        members.append({"name": name, "config": m.info["config"]["name"],
                        "seed": m.info["config"]["train"]["seed"], "best_epoch": best["epoch"],
                        "selection_rsum": None if sel is None else round(sel, 2),
                        **({"refit_from": Path(refit).name} if refit else {}),
                        "weights_sha256": hashlib.sha256(state).hexdigest()})  # fmt: skip
    ens.info["dev_metrics"] = row["dev"]
    ens.info["source"] = {
        "benchmark": f"benchmarks/{args.bench}.py",
        "ensemble": args.ensemble,
        "weights": weights,
        "members": members,
        "data": (
            "Flickr8k train, all 6,000 images (train.refit_from: each member refitted with "
            "the epoch count and curriculum switch its twin chose on 500 train images carved "
            "out, data.val_from_train, val_seed 0, where the twins also chose the GRU share); "
            "dev untouched"
            if all("refit_from" in m for m in members)
            else "Flickr8k train less 500 images carved out (data.val_from_train, val_seed 0) "
            "that chose each member's epoch and the GRU share; dev untouched"
        ),
    }
    out = ens.save(args.out, captions=old.captions or ())
    fingerprint = VSEModel.load(out, device="cpu").fingerprint
    print(f"wrote {out}: {args.ensemble}, weights {weights}, dev rsum {row['dev']['rsum']} "
          f"(store features); fingerprint {fingerprint}")  # fmt: skip


if __name__ == "__main__":
    main()
