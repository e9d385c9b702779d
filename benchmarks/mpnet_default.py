"""A default with all-mpnet-base-v2 towers (issue 38, the text lever): its share chosen
on the slice, the candidate bundle assembled as the default is, and the rule that decides
whether it ships.

The protocol and the rule, fixed before anything was measured:

1. **Members**: the runs of ``configs/candidate-mpnet.yaml``: default-2026.11's GRU recipe
   and three frozen all-mpnet-base-v2 towers (``configs/flickr8k-mpnet.yaml``, seeds
   0-2), on 2-crop ResNet-50 pool5. ``vse model build --train`` trains each on train less
   the 500 images carved out (the ``-slice`` twin, whose slice score chose its epoch) and
   then refits it on all 6,000 train images with that schedule.
2. **Share** (``--choose``): the GRU's share of the similarity is chosen on the slice
   from ``ensembles.GRID`` with the twins, the three towers sharing the rest equally, on
   plain cosines (as ``benchmarks/large_ensembles.py`` chose default-2026.11's 0.4). The
   refitted members take the twins' share, which is written into the recipe by hand.
3. **The candidate bundle** (``--assemble OUT``): ``vse model build`` of the recipe, the
   vocabulary expansion (``vse model expand-vocab --top 60000``, as the default's), the
   shipped default's evidence files and settings (the recipe's ``evidence``: they depend
   on the backbone, which is the same), and the ONNX graphs as a wheel build writes them
   (:func:`vsekit.graphs.default.write_default_encoders`). No relevance cue: it ranks
   nothing.
4. **Rule** (the issue's): the candidate replaces the default only when both its dev rsum
   end to end (``benchmarks/default_model.py --backend onnx --model OUT``) and its dev
   scoreboard P@5 (``benchmarks/query_scoreboard.py --model OUT --split dev``) exceed
   the shipped default's, measured on the same CPU (``--verdict`` checks this much, and
   records both bundles' ONNX file sizes); a candidate that passes must then hold the
   budgets before it ships (serve RSS 700 MB, a warm HTTP search 100 ms, model files
   in git 80 MB, the clean install's 1.5 GB peak), which ``--verdict`` does not run.

Run: python benchmarks/mpnet_default.py --choose
     python benchmarks/mpnet_default.py --assemble ~/.cache/vsekit/runs/candidate-mpnet/bundle
     (then the two scripts of the rule, with ``--model`` that bundle, and without it)
     python benchmarks/mpnet_default.py --verdict [--bundle THAT_BUNDLE]
Writes benchmarks/mpnet_default.json (``--recipe`` another candidate:
mpnet_default.<its stem>.json): the choice, and the rule applied to the figures the two
scripts recorded in their own JSON (read, never copied by hand).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import record  # noqa: E402
from ensembles import GRID, combine, metrics  # noqa: E402

RECIPE = ROOT / "configs" / "candidate-mpnet.yaml"
CANDIDATE = Path("~/.cache/vsekit/runs/candidate-mpnet/bundle")


def _json(recipe_path: Path) -> Path:
    """The record of a candidate: ``mpnet_default.json`` for :data:`RECIPE`, else
    ``mpnet_default.<recipe stem>.json``."""
    here = Path(__file__)
    if recipe_path.resolve() == RECIPE.resolve():
        return here.with_suffix(".json")
    return here.with_name(f"{here.stem}.{recipe_path.stem}.json")


def _recipe(path: Path = RECIPE):
    from vsekit.lab.build import load_recipe

    return load_recipe(path)


def choose(recipe_path: Path = RECIPE) -> dict:
    """Step 2: the slice rsum of the twins' ensemble at each GRU share, and the best."""
    from vsekit.lab.data import load_dataset
    from vsekit.lab.features.store import FeatureStore
    from vsekit.lab.train.export import model_from_run
    from vsekit.lab.train.features import image_features

    recipe = _recipe(recipe_path)
    ds = load_dataset(ROOT / recipe.captions.dataset)
    sl = ds.carve("train", 500, "train-val", 0).split("train-val")
    c2i = [c.image for c in sl.captions]
    parts, members = [], {}
    for m in recipe.members:
        run = Path(m.run).expanduser()
        twin = run.with_name(f"{run.name}-slice")
        model = model_from_run(twin)
        cfg = json.loads((twin / "config.json").read_text())
        store = FeatureStore(Path(cfg["config"]["data"]["store"]).expanduser())
        feats = image_features(store, model.info["image"]["features"], [im.id for im in sl.images])
        img, txt = model.encode_image_features(feats), model.encode_text(sl.texts)
        kind = "gru" if m.train.config.endswith("recommended.yaml") else "tower"
        parts.append((img, txt, kind))
        members[twin.name] = metrics(img, txt, c2i)
        print(twin.name, members[twin.name]["rsum"], flush=True)
    rows = {}
    for share in GRID:
        img = combine([(p[0], p[2]) for p in parts], share)
        txt = combine([(p[1], p[2]) for p in parts], share)
        rows[str(share)] = metrics(img, txt, c2i)
        print(f"GRU share {share}: slice rsum {rows[str(share)]['rsum']:.1f}", flush=True)
    best = max(GRID, key=lambda s: rows[str(s)]["rsum"])
    return record(_json(recipe_path), {
        "command": " ".join(["python benchmarks/mpnet_default.py", *sys.argv[1:]]),
        "recipe": str(recipe_path.resolve().relative_to(ROOT)),
        "slice_members": members, "slice_by_gru_share": rows, "chosen_gru_share": best,
    })  # fmt: skip


def assemble(out: Path, recipe_path: Path = RECIPE) -> None:
    """Step 3: the candidate bundle at ``out``."""
    from vsekit.bundle import write_manifest
    from vsekit.graphs.default import write_default_encoders
    from vsekit.lab.build import build

    chosen = json.loads(_json(recipe_path).read_text())["chosen_gru_share"]
    recipe = _recipe(recipe_path)
    if recipe.evidence is None:
        sys.exit(f"{recipe_path}: no evidence section (the shipped default's evidence)")
    gru = [m.weight for m in recipe.members if m.name.startswith("gru")]
    share = sum(gru) / sum(m.weight for m in recipe.members)
    if abs(share - chosen) > 1e-6:
        sys.exit(f"{recipe_path}: the GRU's share is {share:.3f}; the slice chose {chosen}")
    build(recipe, out, ROOT)
    vse = str(Path(sys.executable).with_name("vse"))
    subprocess.run([vse, "model", "expand-vocab", str(out), "--top", "60000"], check=True)
    write_manifest(out)
    write_default_encoders(out)
    print("assembled", out, flush=True)


def verdict(bundle: Path, recipe_path: Path = RECIPE) -> dict:
    """Step 4: the rule, on what ``default_model.py`` and ``query_scoreboard.py`` recorded
    for the candidate (keyed by its model name) and the shipped default on this CPU's
    int8 class, both measured on the same CPU; with the two bundles' ONNX file sizes."""
    from vsekit.bundle import default_model_dir
    from vsekit.runtime.precision import cpu_info

    path = _json(recipe_path)
    res = json.loads(path.read_text())
    cls = cpu_info().int8_class
    rows = json.loads((ROOT / "benchmarks" / "default_model.json").read_text())["backends"]
    board = json.loads((ROOT / "benchmarks" / "query_scoreboard.json").read_text())["scorers"]

    def figures(rsum_key: str, board_key: str) -> dict:
        row, dev = rows[rsum_key], board[board_key]["dev"]
        return {"model_name": row["model_name"], "dev_rsum": row["metrics"]["rsum"],
                "dev_rsum_without_hubness": row["metrics_without_hubness_reduction"]["rsum"],
                "precision": (row.get("precision") or {}).get("image"),
                "scoreboard": {c: dev["summary"][c]["p@5"] for c in dev["summary"]},
                "scoreboard_ndcg10": dev["summary"]["all"]["ndcg@10"]}  # fmt: skip

    name = _recipe(recipe_path).name
    cand = figures(f"onnx:{name}@{cls}", f"default:{name}")
    shipped = figures(f"onnx@{cls}", "default")
    cpus = {rows[f"onnx:{name}@{cls}"]["machine"]["cpu"], rows[f"onnx@{cls}"]["machine"]["cpu"]}
    if len(cpus) != 1:
        sys.exit(f"the two dev rsum rows were measured on different CPUs: {sorted(cpus)}")
    fp32 = rows.get(f"onnx:{name}:fp32@{cls}")

    def sizes(folder: Path) -> dict:
        return {f.name: round(f.stat().st_size / 2**20, 1) for f in sorted(folder.glob("*.onnx"))}

    ships = (cand["dev_rsum"] > shipped["dev_rsum"]
             and cand["scoreboard"]["all"] > shipped["scoreboard"]["all"])  # fmt: skip
    res["rule"] = {"int8_class": cls, "candidate": cand, "shipped": shipped,
                   "candidate_fp32_dev_rsum": None if fp32 is None else fp32["metrics"]["rsum"],
                   "cpu": cpus.pop(), "onnx_mib": {"candidate": sizes(bundle),
                                                  "shipped": sizes(default_model_dir())},
                   "ships": ships}  # fmt: skip
    return record(path, {k: v for k, v in res.items() if k not in ("date", "machine")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", type=Path, default=RECIPE, help="the candidate's recipe")
    ap.add_argument("--choose", action="store_true", help="choose the GRU share on the slice")
    ap.add_argument("--assemble", type=Path, help="write the candidate bundle here")
    ap.add_argument("--verdict", action="store_true", help="apply the rule to the recorded rows")
    ap.add_argument("--bundle", type=Path, default=CANDIDATE, help="the candidate (--verdict)")
    args = ap.parse_args()
    if args.choose:
        res = choose(args.recipe)
        print("chosen GRU share:", res["chosen_gru_share"])
    if args.assemble:
        assemble(args.assemble.expanduser(), args.recipe)
    if args.verdict:
        rule = verdict(args.bundle.expanduser(), args.recipe)["rule"]
        print(json.dumps(rule, indent=1))
    if not (args.choose or args.assemble or args.verdict):
        ap.error("--choose, --assemble OUT and/or --verdict")


if __name__ == "__main__":
    main()
