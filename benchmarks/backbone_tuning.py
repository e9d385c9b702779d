"""Does tuning ResNet-50's last stage with the joint model pay? (issue: a backbone tuned
to the task.)

The protocol and the rule, fixed before anything was measured:

1. Phase 1, ``head`` (configs/flickr8k-tuned-head.yaml): the GRU model of the
   recommended recipe trained on the frozen backbone, reading random 224-pixel windows
   (and mirrors) of each photo's cached layer3 map through the pretrained layer4; train
   less the 500 images carved out, which select the epoch.
2. Phase 2, from phase 1's best weights (configs/flickr8k-tuned-layer4.yaml), two arms
   that differ only in ``tune.lr_scale``:

   - ``layer4``: layer4 trains with the head, at a tenth of the head's learning rate,
     batch-norm statistics frozen;
   - ``control``: layer4 stays frozen (``lr_scale 0``): the same start, windows and
     schedule, so any gain of ``layer4`` over it is the tuned stage's, not more epochs'.

   Each arm keeps its best slice epoch (early stopping, patience 3).
3. **Rule**: tuning is worth carrying into the default recipe when ``layer4``'s slice
   rsum exceeds ``control``'s by at least :data:`BAR` (3.0, about the spread of one seed
   against another on the slice). Dev is then scored once for both arms, as a report.

4. Added after the first result (layer4 at 2e-5 peaked after one epoch and fell below the
   control): ``layer4-slow``, the same arm at a fifth of that rate (``lr_scale 0.02``,
   4e-6), under the same rule against the same control. Picking the better of two tuned
   arms on the slice favours tuning slightly; dev stays a report.

One seed: a first measurement of the lever, not a grid. Both arms
run in bf16 autocast (``train.precision``), on the CPU that runs the script; other jobs
may share the CPU (``machine.load_average``), so the wall times are indicative.

Run: python benchmarks/backbone_tuning.py  (resumes: finished runs are kept)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import record, run_best, train_run  # noqa: E402

RUNS = Path("~/.cache/vsekit/runs/tuned").expanduser()
HEAD, TUNED = "configs/flickr8k-tuned-head.yaml", "configs/flickr8k-tuned-layer4.yaml"
BAR = 3.0
TUNED_ARMS = ("layer4", "layer4-slow")
OUT = ROOT / "benchmarks" / "backbone_tuning.json"


def arms() -> dict[str, tuple[str, list[str]]]:
    init = f"tune.init_from={RUNS / 'head'}"
    return {
        "head": (HEAD, []),
        "layer4": (TUNED, [init]),
        "control": (TUNED, [init, "tune.lr_scale=0.0"]),
        "layer4-slow": (TUNED, [init, "tune.lr_scale=0.02"]),
    }


def scoreboard(model, data, split: str) -> dict:
    """The query scoreboard (``benchmarks/queries``) of one arm's model alone: its
    cosine between each query's text embedding and each photo's (the two views
    averaged); ``slice`` is the twin the arms' epochs were chosen on, ``dev`` a report."""
    import numpy as np
    import query_scoreboard as qs
    import torch

    views = data.dev_rows.cache
    names = qs.split_images(split)
    rows = views.rows_for(names)
    queries = qs.load_queries(qs.SPLIT_FILES[split])
    with torch.no_grad():
        img = torch.cat(
            [
                model.encode_images(
                    torch.from_numpy(np.asarray(views.acts[rows[a : a + 100]], np.float32))
                )
                for a in range(0, len(rows), 100)
            ]
        )
        txt = model.encode_texts([q["text"] for q in queries])
        scores = model.similarity(img, txt).T.numpy()
    return qs.evaluate(queries, names, scores)["summary"]


def report(run: Path) -> dict:
    """Dev retrieval (5,000 captions) and the scoreboard on both splits, for one arm."""
    import torch

    from vsekit.lab.train.config import config_from_json
    from vsekit.lab.train.trainer import load_run
    from vsekit.lab.train.tuned import load_tuned_data

    model, meta = load_run(run)
    cfg = config_from_json(json.dumps(meta["config"]))
    data = load_tuned_data(cfg, progress=False)
    with torch.no_grad():
        m = data.evaluate_dev(model)
    return {
        "dev": {k: round(float(v), 2) for k, v in m.items()},
        "scoreboard": {split: scoreboard(model, data, split) for split in ("slice", "dev")},
    }


def main() -> None:
    t0 = time.time()
    results: dict = {"command": "python benchmarks/backbone_tuning.py", "bar": BAR, "arms": {}}
    for name, (config, sets) in arms().items():
        run = RUNS / name
        train_run(run, config, sets, ROOT)
        results["arms"][name] = {"config": config, "set": sets, **run_best(run)}
    control = results["arms"]["control"]["slice_rsum"]
    gains = {n: round(results["arms"][n]["slice_rsum"] - control, 2) for n in TUNED_ARMS}
    results["slice_gain"] = gains
    results["carry_into_default"] = max(gains.values()) >= BAR
    for name in ("control", *TUNED_ARMS):  # the report, once every arm is final
        results["arms"][name].update(report(RUNS / name))
    results["wall_seconds"] = round(time.time() - t0, 1)
    record(OUT, results)
    print(json.dumps({k: v for k, v in results.items() if k != "arms"}, indent=1))
    for name, a in results["arms"].items():
        dev = a.get("dev", {}).get("rsum")
        print(
            f"{name:8s} slice rsum {a['slice_rsum']:6.1f}  dev rsum {dev}  epochs {a['epochs_run']}"
        )


if __name__ == "__main__":
    main()
