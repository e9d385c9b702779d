"""How the fair protocol's MOE runs leave their start: each epoch's training loss against
the loss of an embedding that carries nothing.

With the max of hinges (VSE++; the journal's L_M), a batch of B (image, caption) rows
costs

    sum_i [a - s(i, c_i) + max_k s(i, c_k)]_+  +  sum_c [a - s(i_c, c) + max_k s(i_k, c)]_+

for margin ``a``. When every score is equal (a constant embedding, or one whose scores
carry nothing), each of the 2B hinges is ``a``, so the batch costs 2aB: the *plateau*. The
trainer's epoch loss is the batches' losses weighted by their size, so the plateau of an
epoch is ``2a * sum |b|^2 / sum |b|`` (12.79 for 27,500 rows in batches of 128 at a =
0.05). A loss above it means the hardest negatives outscore the positives: the model does
worse on its own training batches than one that says nothing.

For every MOE cell of the search (and the L_M phase of every POE cell) recorded in
``benchmarks/research/cells_fair/`` (the instability runs, ``fair-inst-*``, are not the
search's: the claims report counts them), this reads the run's per-epoch losses and slice rsums
from the cell's record (``curve``; for a cell recorded before the runner kept it, its run
folder's ``~/.cache/vsekit/claims/runs/<cell>/metrics.jsonl``, or the curve this script
recorded then, added to the cell by ``claims.py --add-curves``) and records: the first
epoch whose loss is at most 1% above the plateau (*reached*), the first whose loss is 10%
below it (*left*), the lowest loss, and the slice's best rsum. It trains nothing::

    python benchmarks/research/moe_start.py           # writes moe_start.json, the docs block
    python benchmarks/research/moe_start.py --probe fne-moe-shift1   # first trains a probe

Cells with no log of their epochs (no curve, and no run folder here) are listed as such,
not dropped.

**Probes** (``PROBES``; declared before they ran, and not cells of the protocol). The
float FNE is the pooled activations standardised per dimension over the train split; its
inputs are close to orthogonal between images, and its MOE runs do not reach the plateau.
A probe trains the float FNE-MOE cell at lr 1e-3 (no normalisation, no dropout, the
paper's margin, seed 0: FC7-MOE's rate) on the raw pooled activations instead: the same
information under a per-dimension affine map, but non-negative, so its inputs share a
direction as pool5's do. If the probe reaches the plateau within FC7-MOE's first epochs
and the float cell does not, the inputs' geometry, not their content, decides the stage
at which FNE-MOE fails. (The per-dimension scales change too; this probe does not part
the two.) A second probe parts them: the ternary FNE-MOE cell at lr 1e-3 on
``fne[shift=1]``, the ternary values plus one ({0, 1, 2}). A constant added to every
input dimension adds ``W 1`` to the projection's output ``W x``, the same vector for every
image: the information and the per-dimension scales are the FNE's, and the shared
direction is new (mean cosine between images 0.47, against 0.04); during training the
shift also changes the gradient. Under the protocol's amendment of 2026-11-28 this probe
became the cell ``fair-fne-moe-lr0.001-nshift-d0-m1-s0`` (``BECAME``): the same settings
to the key, its run folder renamed, resumed by a runner. Until that cell is recorded, its
run is read here as the probe's.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from _common import record, train_run  # noqa: E402

from research import fair_protocol as fair  # noqa: E402
from research import families, protocol, report  # noqa: E402
from research.fair_report import inst_label, recipe_words  # noqa: E402

RUNS = Path("~/.cache/vsekit/claims/runs").expanduser()
OUT = Path(__file__).with_suffix(".json")
DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
BEGIN, END = "<!-- moe start: begin -->", "<!-- moe start: end -->"
REACHED, LEFT = 1.01, 0.90  # at most 1% above the plateau; 10% below it
# probe name -> (the fair cell it copies, the data.features it trains on instead)
PROBES = {
    "fnef-moe-pooled": (fair.FairCell("fnef-moe", fair.Recipe(-6), 0), "pooled"),
    "fne-moe-shift1": (fair.FairCell("fne-moe", fair.Recipe(-6), 0), "fne[shift=1]"),
}
# a probe whose settings became a protocol cell's: its run is that cell's
BECAME = {"fne-moe-shift1": fair.FairCell("fne-moe", fair.Recipe(-6, "shift"), 0)}


def plateau(margin: float, batch: int, rows: int) -> float:
    """The epoch loss of an embedding whose scores are all equal: ``2a`` per row of each
    batch, the batches weighted by their size as the trainer weights them."""
    sizes = [min(batch, rows - a) for a in range(0, rows, batch)]
    sizes = [b for b in sizes if b >= 2]  # the trainer skips a lone pair: no negatives
    return 2 * margin * sum(b * b for b in sizes) / sum(sizes)


def train_split(data: dict):
    """The split a run with this ``data`` config trains on (the selection images carved
    out); loaded once per distinct config."""
    return _train_split(json.dumps(data, sort_keys=True))


@functools.cache
def _train_split(data_json: str):
    from vsekit.lab.data import load_dataset
    from vsekit.lab.train.config import DataConfig
    from vsekit.lab.train.features import train_and_selection

    cfg = DataConfig(**json.loads(data_json))
    train, _ = train_and_selection(load_dataset(cfg.root, cfg.format), cfg)
    return train


def epoch_rows(config: dict) -> int:
    """The (image, caption) rows of one epoch of a run with this effective ``config``:
    every caption of the train split with ``captions: all``, one per captioned image
    otherwise (:func:`vsekit.lab.train.retrieval_data.epoch_pairs`)."""
    train = train_split(config["data"])
    if config["train"]["captions"] == "all":
        return len(train.captions)
    return len({c.image for c in train.captions})


def input_cosines(data: dict, n: int = 500, seed: int = 0) -> dict[str, float]:
    """The mean cosine between the input vectors of ``n`` distinct train images, as the
    run feeds them (``none``) and centred and scaled per image as the LayerNorm does
    before its learned affine (``layernorm``). A random linear map roughly keeps angles,
    so at initialisation the image embeddings are about as far apart as their inputs."""
    import numpy as np

    from vsekit.lab.features.store import FeatureStore
    from vsekit.lab.train.features import image_features

    images = train_split(data).images
    pick = np.random.default_rng(seed).choice(len(images), n, replace=False)
    store = FeatureStore(Path(data["store"]).expanduser())
    x = image_features(store, data["features"], [images[i].id for i in sorted(pick)])
    x = np.asarray(x, dtype=np.float64)
    out = {}
    for norm, v in (("none", x), ("layernorm", (x - x.mean(1, keepdims=True)))):
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
        c = v @ v.T
        out[norm] = round(float((c.sum() - np.trace(c)) / (n * (n - 1))), 4)
    return out


def first(epochs: list[dict], test) -> int | None:
    return next((e["epoch"] for e in epochs if test(e["loss"])), None)


def logged_epochs(cell: dict, run: Path | None = None) -> list[dict] | None:
    """A cell's epochs (``epoch``, ``phase``, ``loss``, ``rsum``): its record's ``curve``
    (the runner keeps it), else its run folder's ``metrics.jsonl`` (a probe, or a cell
    recorded before the curve, on the machine that trained it); None without either."""
    if "curve" in cell:
        cols = cell["curve"]
        return [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]
    log = (run or RUNS / cell["cell"]) / "metrics.jsonl"
    if not log.exists():
        return None
    lines = [json.loads(s) for s in log.read_text().splitlines() if s.strip()]
    by_epoch = {e["epoch"]: e for e in lines if "event" not in e}  # one record an epoch
    return [by_epoch[k] for k in sorted(by_epoch)]


def run_start(cell: dict, rows: int, run: Path | None = None) -> dict:
    """One cell's start, from its per-epoch log (:func:`logged_epochs`; its L_M epochs
    only). A run folder's log whose L_M epochs are not as many as the cell records is not
    the cell's run, and is not read."""
    cfg = cell["config"]
    margin, batch = cfg["loss"]["margin"], cfg["train"]["batch_size"]
    floor = plateau(margin, batch, rows)
    out = {"cell": cell["cell"], "row": cell["row"], "recipe": cell["recipe"],
           "seed": cell["seed"], "plateau": round(floor, 4),
           "slice_rsum": cell["slice"]["rsum"]}  # fmt: skip
    logged = logged_epochs(cell, run)
    if logged is None:
        return {**out, "run_folder": "missing"}
    epochs = [e for e in logged if (e.get("phase") or "max") == "max"]
    recorded = cell.get("phases", {}).get("max")
    if recorded is not None and recorded != len(epochs):
        return {**out, "run_folder": f"{len(epochs)} L_M epochs logged, {recorded} recorded"}
    return {**out, **_start(epochs, floor)}


def _start(epochs: list[dict], floor: float) -> dict:
    """Where L_M ``epochs`` (``epoch``, ``loss``, ``rsum``) meet the plateau ``floor``."""
    return {
        "epochs": len(epochs),
        "reached": first(epochs, lambda x: x <= REACHED * floor),
        "left": first(epochs, lambda x: x <= LEFT * floor),
        "lowest_loss": round(min(e["loss"] for e in epochs), 4),
        "curve": [[e["epoch"], round(e["loss"], 4), round(e["rsum"], 2)] for e in epochs],
    }


def _group(cell: dict) -> str:
    """A cell's row, or for a cell on its row's shifted input, the row "on" that input (a
    group of its own, as a probe's is)."""
    if cell["recipe"]["img_norm"] == "shift":
        return f"{cell['row']} on {cell['config']['data']['features']}"
    return cell["row"]


def starts() -> tuple[list[dict], dict[str, dict[str, float]]]:
    """Every MOE and POE cell's start, and each feature's input cosines."""
    done = protocol.load_cells(fair.CELLS)
    cells = [c for c in done.values() if fair.searched(c) and c["row"].endswith(("-moe", "-poe"))]
    rows: dict[str, int] = {}
    cosines: dict[str, dict[str, float]] = {}
    out = []
    for group, c in sorted(((_group(c), c) for c in cells),
                           key=lambda gc: (gc[0], fair.Recipe.from_dict(gc[1]["recipe"]).k,
                                           gc[1]["cell"])):  # fmt: skip
        key = json.dumps([c["config"]["data"], c["config"]["train"]["captions"]])
        if key not in rows:
            rows[key] = epoch_rows(c["config"])
        feature = group.split(" on ")[1] if " on " in group else c["row"].split("-")[0]
        if feature not in cosines:
            cosines[feature] = input_cosines(c["config"]["data"])
        out.append({**run_start(c, rows[key]), "row": group})
    kept = json.loads(OUT.read_text()) if OUT.is_file() else {"runs": []}
    for name, (_, features) in PROBES.items():
        if name in BECAME and BECAME[name].name in done:
            continue  # recorded: the cell's row shows it
        if not (probe_run(name) / "metrics.jsonl").is_file():
            # trained on another machine: its start as this script recorded it then
            # (a probe is no cell, and its run folder stays where it ran); else not yet
            # trained (--probe)
            before = next((r for r in kept["runs"] if r.get("probe") == name), None)
            known = kept.get("input_cosines", {}).get(features)
            if before is not None and "curve" in before and known and not before["training"]:
                cosines[features] = known
                # re-read from its curve, so that the thresholds in force apply
                logged = [{"epoch": e, "loss": x, "rsum": r} for e, x, r in before["curve"]]
                out.append({**before, **_start(logged, before["plateau"])})
            continue
        config = json.loads((probe_run(name) / "config.json").read_text())["config"]
        cosines[features] = input_cosines(config["data"])
        out.append(probe_start(name, epoch_rows(config)))
    return out, cosines


def inst_starts() -> list[dict]:
    """Each of MOE's instability runs (``fair-inst-moe-*``: the first protocol's Table 5
    settings at this protocol's budget, and the runs on the FNE plus one of the amendment
    of 2026-12-06): where its loss meets the plateau, and whether it started."""
    done = protocol.load_cells(fair.CELLS)
    out = []
    for name, c in sorted(done.items()):
        if c.get("family") != "moe":
            continue
        cfg = c["config"]  # epoch_rows loads each split once (train_split is cached)
        floor = plateau(cfg["loss"]["margin"], cfg["train"]["batch_size"], epoch_rows(cfg))
        shifted = f" on {cfg['data']['features']}" if c.get("shift") else ""
        group = inst_label(c["variant"], "moe") + shifted
        epochs = logged_epochs(c)
        out.append({"cell": name, "group": group, "seed": c["seed"],
                    "plateau": round(floor, 4), "started": families.started(c),
                    **({"run_folder": "missing"} if epochs is None
                       else _start(epochs, floor))})  # fmt: skip
    return out


def inst_summary(runs: list[dict]) -> list[str]:
    """Per instability setting: MOE's runs that reached the plateau, left it, started."""
    lines = ["| MOE instability setting | runs with a log | reached the plateau | left it | "
             "started |", "|---|---|---|---|---|"]  # fmt: skip

    settings = list(families.MOE_SETTINGS)

    def key(group: str) -> tuple[str, int, str]:  # per feature, Table 5's settings in order
        feature, _, setting = group.split(" on ")[0].partition("-MOE-")
        at = settings.index(setting) if setting in settings else len(settings)
        return feature, at, group  # the centred run's row before its shifted one

    for group in sorted({r["group"] for r in runs}, key=key):
        logged = [r for r in runs if r["group"] == group and "epochs" in r]
        lines.append(
            f"| {group} | {len(logged)} | "
            f"{_span([r['reached'] for r in logged if r['reached'] is not None])} | "
            f"{_span([r['left'] for r in logged if r['left'] is not None])} | "
            f"{sum(r['started'] for r in logged)} |"
        )
    return lines


def table(runs: list[dict]) -> list[str]:
    lines = ["| row | recipe | seed | plateau | epochs | reached | left | lowest loss "
             "| slice rsum |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in runs:
        rec = fair.Recipe.from_dict(r["recipe"])
        if "epochs" not in r:
            lines.append(f"| {_name(r)} | {recipe_words(rec)} | {r['seed']} | "
                         f"{r['plateau']:.2f} | run folder: {r['run_folder']} | | | | "
                         f"{r['slice_rsum']:.1f} |")  # fmt: skip
            continue
        reached, left = (("—" if x is None else str(x)) for x in (r["reached"], r["left"]))
        lines.append(
            f"| {_name(r)} | {recipe_words(rec)} | {r['seed']} | {r['plateau']:.2f} | "
            f"{r['epochs']} | {reached} | {left} | {r['lowest_loss']:.2f} | "
            f"{r['slice_rsum']:.1f}{' (log)' if r.get('probe') else ''} |"
        )
    return lines


def probe_run(name: str) -> Path:
    return RUNS / (BECAME[name].name if name in BECAME else f"probe-{name}-s0")


def train_probe(name: str) -> None:
    """Train probe ``name`` (resuming a killed run) with its cell's settings, its features
    swapped."""
    import yaml

    from research.runner import ROOT, STORE, yaml_value

    if name in BECAME:
        sys.exit(f"probe {name} is the cell {BECAME[name].name} now: a runner trains it")
    cell, features = PROBES[name]
    margin = yaml.safe_load((ROOT / cell.config).read_text())["loss"]["margin"]
    sets = cell.settings(STORE, float(margin)) | {"data.features": features}
    train_run(probe_run(name), cell.config, [f"{k}={yaml_value(v)}" for k, v in sets.items()],
              ROOT, collapsed_ok=True)  # fmt: skip


def probe_start(name: str, rows: int) -> dict:
    """A probe's start, as :func:`run_start` gives a cell's (its slice rsum is its log's
    best); one still training says so, and its epochs are those it has run."""
    run = probe_run(name)
    config = json.loads((run / "config.json").read_text())["config"]
    lines = logged_epochs({"cell": run.name}, run) or []  # epochs, not events
    cell, features = PROBES[name]
    fake = {"cell": run.name, "row": f"{cell.row} on {features}", "seed": cell.seed,
            "recipe": cell.recipe.as_dict(), "config": config,
            "slice": {"rsum": round(max(e["rsum"] for e in lines), 2)}}  # fmt: skip
    training = not (run / "done.json").is_file()
    return {**run_start(fake, rows, run), "probe": name, "training": training,
            "slice_rsum_from": "the log's best epoch (a cell's is re-scored)"}  # fmt: skip


def _name(r: dict) -> str:
    """A run's row, and "still training" for a probe that is."""
    return r["row"] + (" (still training)" if r.get("training") else "")


def _span(xs: list[int]) -> str:
    if not xs:
        return "none"
    lo, hi = min(xs), max(xs)
    return f"{len(xs)} (epoch {lo})" if lo == hi else f"{len(xs)} (epochs {lo} to {hi})"


def _cos(x: float) -> str:
    return f"{x:.2f}".replace("-0.00", "0.00")


def summary(runs: list[dict], cosines: dict[str, dict[str, float]]) -> list[str]:
    """Per row: how many runs reached the plateau and how many left it, and when; the
    best slice rsum of a run that never left it; its input's mean cosine between images
    (as fed, and centred per image as the LayerNorm does)."""
    lines = ["| row | runs with a log | reached the plateau | left it "
             "| best slice rsum without leaving | input cosine (as fed / centred) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for row in sorted({r["row"] for r in runs}):
        logged = [r for r in runs if r["row"] == row and "epochs" in r]
        stayed = [r["slice_rsum"] for r in logged if r["left"] is None]
        best = f"{max(stayed):.1f}" if stayed else "—"
        cos = cosines[row.split(" on ")[1] if " on " in row else row.split("-")[0]]
        name = row + (" (still training)" if any(r.get("training") for r in logged) else "")
        lines.append(
            f"| {name} | {len(logged)} | "
            f"{_span([r['reached'] for r in logged if r['reached'] is not None])} | "
            f"{_span([r['left'] for r in logged if r['left'] is not None])} | {best} | "
            f"{_cos(cos['none'])} / {_cos(cos['layernorm'])} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", choices=PROBES, action="append", default=[],
                    help="train this probe first (resuming it); may repeat")  # fmt: skip
    args = ap.parse_args()
    for name in args.probe:
        train_probe(name)
    runs, cosines = starts()
    inst = inst_starts()
    record(OUT, {"command": " ".join(["python", "benchmarks/research/moe_start.py",
                                      *sys.argv[1:]]),
                 "reached": REACHED, "left": LEFT, "input_cosines": cosines,
                 "runs": runs, "instability": inst}, if_changed=True)  # fmt: skip
    lines = [*summary(runs, cosines), "", *table(runs), "",
             "MOE's instability runs (`fair-inst-moe-*`: the first protocol's Table 5 "
             "settings at this protocol's budget, and the FNE plus one at "
             f"{', '.join(inst_label(v, 'moe') for v in fair.SHIFT_INST)}), each "
             "over its whole run; a run started if its last model reaches dev rsum "
             f"{families.STARTED:g}:", "", *inst_summary(inst)]  # fmt: skip
    text = report.with_block(DOC.read_text(), BEGIN, END, lines)
    if text is None:
        sys.exit(f"{DOC}: no '{BEGIN}' block to write the table into")
    report.update_file(DOC, text)
    print("\n".join(summary(runs, cosines)))


if __name__ == "__main__":
    main()
