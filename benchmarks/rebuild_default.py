"""The shipped model rebuilt from its recipe: does `vse model build` give back the bundle
that ships?

Run `vse model build configs/default-model.yaml OUT --train` first (it extracts the
10-crop store and trains every member and the tagger that is missing; on the 2-core
machine about 50 minutes). This script then records, from what that left on disk:

* each trained run's weights sha256 against the recipe's pin, and its wall time (from
  the ``recipe-started.json`` / ``recipe-done.json`` markers ``--train`` writes);
* the 10-crop store's extraction time (its ``progress.json``; the first run trained
  extracted it, so its wall time includes it), and the whole ``--train``'s wall time;
* the 2-crop store the tagger and the hubness bank read (``--train`` extracts it too when
  it is missing), and whether each store was there before ``--train`` began;
* a fresh `build` of the recipe (nothing is trained) against the shipped bundle: the
  fingerprint, and whether the weights, tagger and hubness files are byte-identical.

Run: python benchmarks/rebuild_default.py [--recipe configs/default-model.yaml]
Writes benchmarks/rebuild_default.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import filecmp
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

import vsekit  # noqa: E402
from vsekit.lab.build import DONE, STARTED, build, load_recipe, weights_sha256  # noqa: E402
from vsekit.lab.torch_model import VSEModel  # noqa: E402
from vsekit.lab.train.export import model_from_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_FILES = ("model.safetensors", "tagger.safetensors", "hubness.npz", "captions.txt")


def _wall(run: Path) -> float | None:
    """Seconds between the markers ``--train`` wrote before and after training ``run``."""
    if not ((run / STARTED).is_file() and (run / DONE).is_file()):
        return None
    return round((run / DONE).stat().st_mtime - (run / STARTED).stat().st_mtime, 1)


def _when(path: Path) -> str | None:
    if not path.is_file():
        return None
    return dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).isoformat(timespec="seconds")


def _store(path: Path, first_start: float) -> dict:
    """A store's extraction time, and whether it was there before ``--train`` began."""
    progress = json.loads((path / "progress.json").read_text())
    began = dt.datetime.fromisoformat(progress["runs"][0]["started"]).timestamp()
    return {"path": str(path), "images": progress["images"],
            "extract_seconds": round(progress["seconds"], 1),
            "started": progress["runs"][0]["started"],
            "before_train": began < first_start}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default=str(ROOT / "configs" / "default-model.yaml"))
    args = ap.parse_args()
    recipe = load_recipe(args.recipe)
    runs = []
    for m in recipe.members:
        run = Path(m.run).expanduser()
        sha = weights_sha256(model_from_run(run))
        twin = run.with_name(f"{run.name}-slice")
        runs.append({"member": m.name, "run": m.run, "weights_sha256": sha,
                     "pinned": m.weights_sha256, "matches_pin": sha == m.weights_sha256,
                     "train_seconds": _wall(run), "slice_train_seconds": _wall(twin),
                     "trained_at": _when(run / DONE)})  # fmt: skip
    tagger = Path(recipe.tagger.run).expanduser() if recipe.tagger else None
    done = [Path(m.run).expanduser() for m in recipe.members]
    done += [r.with_name(f"{r.name}-slice") for r in done] + ([tagger] if tagger else [])
    done = [r for r in done if (r / DONE).is_file()]
    cfg = json.loads((Path(recipe.members[0].run).expanduser() / "config.json").read_text())
    store = Path(cfg["config"]["data"]["store"]).expanduser()  # the members' 10-crop store
    first = min((r / STARTED).stat().st_mtime for r in done)
    shipped = vsekit.load_model("default", backend="torch")
    with tempfile.TemporaryDirectory() as tmp:
        out = build(recipe, Path(tmp) / "rebuilt", ROOT)
        rebuilt = VSEModel.load(out)
        same = {f: filecmp.cmp(out / f, Path(shipped.path) / f, shallow=False)
                for f in SHIPPED_FILES}  # fmt: skip
        result = {
            "command": " ".join(["python benchmarks/rebuild_default.py", *sys.argv[1:]]),
            "recipe": recipe.name,
            "members": runs,
            "tagger": None
            if tagger is None
            else {"run": recipe.tagger.run, "train_seconds": _wall(tagger)},  # fmt: skip
            "store": _store(store, first),
            "hubness_store": _store(Path(recipe.hubness.store).expanduser(), first),
            "train_wall_seconds": round(max((r / DONE).stat().st_mtime for r in done) - first, 1),
            "rebuilt_fingerprint": rebuilt.fingerprint,
            "shipped_fingerprint": shipped.fingerprint,
            "shipped_name": shipped.info.get("name"),
            "fingerprints_match": rebuilt.fingerprint == shipped.fingerprint,
            "byte_identical": same,
        }
    record(Path(__file__).with_suffix(".json"), result)
    print(json.dumps({k: result[k] for k in ("fingerprints_match", "byte_identical")}))
    print([(r["member"], r["matches_pin"], r["train_seconds"]) for r in runs])


if __name__ == "__main__":
    main()
