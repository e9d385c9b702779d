"""benchmarks/research/moe_start.py's plateau is the loss the trainer reports for an
embedding whose scores are all equal, under the real max-of-hinges order loss."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from research import moe_start  # noqa: E402
from research.moe_start import plateau  # noqa: E402

from vsekit.lab.losses import create_loss  # noqa: E402
from vsekit.lab.train.trainer import Trainer  # noqa: E402


def _epoch_loss_of_a_constant_embedding(margin: float, batch: int, rows: int) -> float:
    """The epoch loss the trainer's own epoch loop (``Trainer._train_epoch``: batch losses
    weighted by size, lone pairs skipped) reports when every image and every caption
    embeds to the same vector. Only the batches' loss is stood in for; the loop, its
    skipping and its averaging are the trainer's."""
    loss_fn = create_loss("max_hinge", margin=margin, similarity="order", abs=True)
    weight = torch.nn.Parameter(torch.zeros(()))  # something for the optimiser to step

    def batch_loss(model, loss, b):
        n = len(b)
        img = torch.full((n, 8), 0.3) + weight
        txt = torch.full((n, 8), 0.3) + weight
        ids = torch.arange(n) // 2  # two captions of each image: masked, not negatives
        return loss(img, txt, ids)

    trainer = SimpleNamespace(
        cfg=SimpleNamespace(train=SimpleNamespace(precision="fp32", grad_clip=0.0)),
        progress=False,
        dist=SimpleNamespace(world=1),
        device=torch.device("cpu"),
        gemm_kernels="native",
        data=SimpleNamespace(batch_loss=batch_loss),
    )
    model = torch.nn.Module()
    opt = torch.optim.SGD([weight], lr=0.0)
    batches = [list(range(a, min(a + batch, rows))) for a in range(0, rows, batch)]
    return Trainer._train_epoch(trainer, model, opt, loss_fn, batches, 0)


@pytest.mark.parametrize(("margin", "batch", "rows"),
                         [(0.05, 128, 27_500), (0.025, 128, 27_500), (0.2, 16, 97),
                          (0.05, 10, 41)])  # fmt: skip
def test_the_plateau_is_the_loss_of_a_constant_embedding(margin, batch, rows):
    assert plateau(margin, batch, rows) == pytest.approx(
        _epoch_loss_of_a_constant_embedding(margin, batch, rows), rel=1e-6
    )


def test_the_plateau_moves_with_what_it_depends_on():
    """Full batches cost 2aB a batch; a short last batch pulls the weighted mean down."""
    assert plateau(0.05, 128, 128 * 10) == pytest.approx(12.8)
    assert plateau(0.05, 128, 27_500) < 12.8
    assert plateau(0.025, 128, 128 * 10) == pytest.approx(6.4)


def _cell(**extra) -> dict:
    recipe = {"lr": 1e-3, "img_norm": "none", "img_dropout": 0.0, "margin_scale": 1.0}
    config = {"loss": {"margin": 0.05}, "train": {"batch_size": 128}}
    return {"cell": "c", "row": "fne-moe", "seed": 0, "slice": {"rsum": 40.0},
            "recipe": recipe, "config": config, **extra}  # fmt: skip


def test_a_cells_start_is_read_from_its_record_and_not_its_run_folder(tmp_path, monkeypatch):
    """The record's curve is the log: a fresh machine, with no run folders, reads the same
    start; a run folder is read only for a cell recorded without one."""
    monkeypatch.setattr(moe_start, "RUNS", tmp_path)
    floor = plateau(0.05, 128, 27_500)
    loss = [15.0, floor, floor * 0.95, floor * 0.5]
    cell = _cell(curve={"epoch": [0, 1, 2, 3], "phase": ["max"] * 4, "loss": loss,
                        "rsum": [6.0, 10.0, 25.0, 40.0]})  # fmt: skip
    got = moe_start.run_start(cell, 27_500)
    assert (got["epochs"], got["reached"], got["left"]) == (4, 1, 3)
    assert got["curve"][3] == [3, round(floor * 0.5, 4), 40.0]
    assert moe_start.run_start(_cell(), 27_500)["run_folder"] == "missing"
    (tmp_path / "c").mkdir()  # a folder whose log disagrees is not read over the record
    line = '{"epoch": 0, "phase": "max", "loss": 1, "rsum": 9}\n'
    (tmp_path / "c" / "metrics.jsonl").write_text(line)
    assert moe_start.run_start(cell, 27_500)["epochs"] == 4
    assert moe_start.run_start(_cell(), 27_500)["epochs"] == 1  # no curve: the folder


def test_a_probe_trained_elsewhere_keeps_its_recorded_start(tmp_path, monkeypatch):
    """A probe is no cell: where its run folder is gone, its start as moe_start.json
    recorded it stays in the tables (a probe still training then is dropped)."""
    out = tmp_path / "moe_start.json"
    kept = {"cell": "probe-fnef-moe-pooled-s0", "probe": "fnef-moe-pooled", "epochs": 3,
            "row": "fnef-moe on pooled", "training": False}  # fmt: skip
    floor = 12.79
    kept |= {"plateau": floor, "reached": 0, "left": 0,  # stale: re-read from the curve
             "curve": [[0, 15.0, 6.0], [1, 12.8, 90.0], [2, 11.0, 150.0]]}  # fmt: skip
    out.write_text(json.dumps({"runs": [kept], "input_cosines": {"pooled": {"none": 0.66}}}))
    monkeypatch.setattr(moe_start, "OUT", out)
    monkeypatch.setattr(moe_start, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(moe_start.protocol, "load_cells", lambda folder: {})
    runs, cosines = moe_start.starts()
    assert cosines == {"pooled": {"none": 0.66}}
    assert runs == [kept | {"epochs": 3, "reached": 1, "left": 2, "lowest_loss": 11.0}]
    out.write_text(json.dumps({"runs": [kept | {"training": True}], "input_cosines": {}}))
    assert moe_start.starts() == ([], {})


def test_the_instability_runs_are_not_read_as_the_searchs_cells(tmp_path, monkeypatch):
    """An instability run (a ``variant`` at a fixed setting, no recipe) is the claims
    report's to count: the starts list the search's cells only, and do not fail on it."""
    floor = plateau(0.05, 128, 27_500)
    curve = {"epoch": [0, 1], "phase": ["max"] * 2, "loss": [floor, floor * 0.5],
             "rsum": [10.0, 40.0]}  # fmt: skip
    config = {"data": {"features": "fne"}, "train": {"captions": "all", "batch_size": 128},
              "loss": {"margin": 0.05}}  # fmt: skip
    search = _cell(curve=curve, config=config)
    inst = {k: v for k, v in search.items() if k != "recipe"}
    inst |= {"cell": "fair-inst-moe-fne-bl-s0", "family": "moe", "variant": "fne-bl"}
    monkeypatch.setattr(moe_start, "OUT", tmp_path / "moe_start.json")
    monkeypatch.setattr(moe_start.protocol, "load_cells", lambda folder: {"c": search, "i": inst})
    monkeypatch.setattr(moe_start, "epoch_rows", lambda config: 27_500)
    monkeypatch.setattr(moe_start, "input_cosines", lambda data: {"none": 0.0})
    runs, _ = moe_start.starts()
    assert [r["cell"] for r in runs] == ["c"]
    assert (runs[0]["reached"], runs[0]["left"]) == (0, 1)


def test_moes_instability_runs_are_summed_per_setting_with_the_shifted_ones_apart(monkeypatch):
    """Each MOE instability run (POE's are not read: their L_M starts from L_S's model) is
    read against the plateau of its own margin and batch; the settings come in Table 5's
    order, and the runs on the FNE plus one form a row of their own after the centred one."""
    wide, narrow = plateau(0.2, 128, 27_500), plateau(0.05, 64, 27_500)

    def inst(variant: str, seed: int, loss: list[float], dev: float, shift: bool = False,
             margin: float = 0.2, batch: int = 128) -> dict:  # fmt: skip
        feats = {"fc7": "baseline", "fne": "fne[shift=1]" if shift else "fne"}
        return {"cell": f"{variant}-{seed}-{shift}", "family": "moe", "variant": variant,
                "seed": seed, "dev_last": {"rsum": dev}, "shift": shift,
                "curve": {"epoch": list(range(len(loss))), "phase": ["max"] * len(loss),
                          "loss": loss, "rsum": [0.0] * len(loss)},
                "config": {"data": {"features": feats[variant.split("-")[0]]},
                           "train": {"captions": "all", "batch_size": batch},
                           "loss": {"margin": margin}}}  # fmt: skip

    cells = [inst("fne-bl", 0, [60.0, wide, wide], 0.1),
             inst("fne-bl", 0, [60.0, 55.0, wide * 0.5], 30.0, shift=True),
             # read against its own (narrow) plateau: against the wide one it would have
             # left it at epoch 0
             inst("fc7-abs", 1, [narrow * 1.2, narrow * 1.005, narrow * 0.8], 20.0,
                  margin=0.05, batch=64),
             inst("fc7-bl", 2, [wide * 1.2, wide * 1.2], 0.0),
             {**inst("fc7-bl", 0, [wide], 0.0), "family": "poe"}]  # fmt: skip
    monkeypatch.setattr(moe_start.protocol, "load_cells",
                        lambda folder: {c["cell"]: c for c in cells})  # fmt: skip
    monkeypatch.setattr(moe_start, "epoch_rows", lambda config: 27_500)
    runs = moe_start.inst_starts()
    assert len(runs) == 4  # not the POE run
    assert moe_start.inst_summary(runs)[2:] == [
        "| FC7-MOE-bl | 1 | none | none | 0 |",  # bl before abs: Table 5's order
        "| FC7-MOE-abs | 1 | 1 (epoch 1) | 1 (epoch 2) | 1 |",
        "| FNE-MOE-bl | 1 | 1 (epoch 1) | none | 0 |",
        "| FNE-MOE-bl on fne[shift=1] | 1 | 1 (epoch 2) | 1 (epoch 2) | 1 |",
    ]


def test_only_the_l_m_epochs_of_a_curve_count_and_keep_their_numbers(tmp_path, monkeypatch):
    """A POE cell's curve holds its L_S epochs first: the start is read from its L_M
    epochs, numbered as the run numbers them, and a curve whose L_M epochs are not the
    record's count is not read."""
    monkeypatch.setattr(moe_start, "RUNS", tmp_path)
    floor = plateau(0.05, 128, 27_500)
    curve = {"epoch": [0, 1, 2, 3, 4], "phase": ["sum", "sum", "max", "max", "max"],
             "loss": [30.0, 5.0, floor, floor * 0.8, floor * 0.7],
             "rsum": [100.0, 200.0, 210.0, 220.0, 230.0]}  # fmt: skip
    got = moe_start.run_start(_cell(curve=curve, phases={"sum": 2, "max": 3}), 27_500)
    assert (got["epochs"], got["reached"], got["left"]) == (3, 2, 3)
    assert [e for e, _, _ in got["curve"]] == [2, 3, 4]
    wrong = moe_start.run_start(_cell(curve=curve, phases={"sum": 1, "max": 4}), 27_500)
    assert wrong["run_folder"] == "3 L_M epochs logged, 4 recorded"


def test_regenerating_the_report_with_nothing_new_leaves_its_file_as_it_was(tmp_path, monkeypatch):
    """moe_start.json is regenerated from the recorded cells after every cell: the same
    figures (tuples among them, as JSON gives them back as lists) on another machine leave
    the file byte for byte, its date and machine those of the run that last changed it; a
    changed figure rewrites it with this run's; a measurement is always written."""
    import _common

    out = tmp_path / "moe_start.json"
    monkeypatch.setattr(_common, "machine", lambda: {"cpu": "first"})
    _common.record(out, {"runs": [{"curve": [(0, 15.0, 6.0)]}]}, if_changed=True)
    before = out.read_bytes()
    monkeypatch.setattr(_common, "machine", lambda: {"cpu": "second"})
    _common.record(out, {"runs": [{"curve": [(0, 15.0, 6.0)]}]}, if_changed=True)
    assert out.read_bytes() == before
    _common.record(out, {"runs": [{"curve": [(0, 15.0, 6.5)]}]}, if_changed=True)
    after = json.loads(out.read_text())
    assert after["machine"] == {"cpu": "second"} and after["runs"] == [{"curve": [[0, 15.0, 6.5]]}]
    monkeypatch.setattr(_common, "machine", lambda: {"cpu": "third"})
    _common.record(out, {"runs": [{"curve": [(0, 15.0, 6.5)]}]})
    assert json.loads(out.read_text())["machine"] == {"cpu": "third"}


# a figure with decimals (one that ends a sentence too)
_DECIMAL = re.compile(r"(?<![\d.])(\d+\.\d+)(?!\d|\.\d)")
# where a run's loss went: two of its epoch losses, "from 12.38 to 9.50"
_LOSS_PAIR = re.compile(r"(?<![\d.])(\d+\.\d\d) to (\d+\.\d\d)(?!\d|\.\d)")
# settings, not results: a learning rate ("3.2e-3"), input-dropout rates ("dropout 0.2
# and 0.5") and a margin scale ("x0.5")
_SETTING = re.compile(r"\d+(?:\.\d+)?e-\d+|[Dd]ropout \d+\.\d+(?: and \d+\.\d+)?|x\d+\.\d+")


def _moe_start_prose(text: str) -> str:
    """The typed paragraphs after the generated MOE-start tables, up to the next section,
    with line breaks and runs of spaces made single spaces."""
    after = text.split(moe_start.END, 1)[1]
    return _SETTING.sub("", " ".join(after.split("\n## ", 1)[0].split()))


def _recorded(cells: list[dict], report: dict) -> set[str]:
    """The figures the records give, as the prose writes them: each cell's slice and dev
    rsum (one decimal, and the ones it had at its first cap), each MOE-start run's
    plateau, lowest loss and slice rsum (its log's, for a probe), the input cosines (two
    decimals, unsigned) and the two thresholds. The curves' epoch figures are left out
    (their losses alone cover most two-decimal values from 12 to 16): a loss quoted from
    a curve is checked as a pair, below."""
    out = {f"{report[k]:.2f}".rstrip("0").rstrip(".") for k in ("reached", "left")}
    for c in cells:
        ext = c.get("extended_from") or {}
        rsums = (c["slice"]["rsum"], c["dev"]["rsum"], ext.get("slice_rsum"), ext.get("dev_rsum"))
        out |= {f"{v:.1f}" for v in rsums if v is not None}
    for r in report["runs"]:
        out |= {f"{r['plateau']:.2f}", f"{r['lowest_loss']:.2f}", f"{r['slice_rsum']:.1f}"}
    out |= {f"{abs(v):.2f}" for kinds in report["input_cosines"].values() for v in kinds.values()}
    return out


def _loss_pairs(report: dict) -> set[tuple[str, str]]:
    """Each run's epoch losses two at a time, the earlier first (two decimals)."""
    out = set()
    for r in report["runs"]:
        losses = [f"{loss:.2f}" for _, loss, _ in r["curve"]]
        out |= {(a, b) for i, a in enumerate(losses) for b in losses[i + 1 :]}
    return out


def _unsourced(prose: str, recorded: set[str], pairs: set[tuple[str, str]]) -> list[str]:
    """The figures of ``prose`` no record gives: an "A to B" of two losses must be two
    epochs of one run's curve in that order; every other figure must be in ``recorded``."""
    out = [f"{a} to {b}" for a, b in _LOSS_PAIR.findall(prose) if (a, b) not in pairs]
    return out + [f for f in _DECIMAL.findall(_LOSS_PAIR.sub(" ", prose)) if f not in recorded]


def test_the_moe_start_prose_quotes_figures_the_records_give():
    """Every figure with decimals typed under the MOE-start tables of docs/benchmarks.md
    (slice and dev rsums, losses, cosines) is one the fair cells or moe_start.json give
    today. It is a membership check: a figure is not tied to the run its sentence names,
    so a typed figure that happens to equal another run's passes."""
    from research import fair_protocol, protocol

    prose = _moe_start_prose(moe_start.DOC.read_text())
    assert len(_DECIMAL.findall(prose)) > 50, "the MOE-start prose quotes few figures"
    cells = list(protocol.load_cells(fair_protocol.CELLS).values())
    report = json.loads(moe_start.OUT.read_text())
    missing = _unsourced(prose, _recorded(cells, report), _loss_pairs(report))
    assert not missing, (
        "docs/benchmarks.md's MOE-start prose quotes figures no record gives today: "
        + ", ".join(missing)
    )


def test_the_moe_start_figure_check_can_fail():
    """A moved rsum, a moved loss, an rsum or loss found only in an epoch of a curve, a
    pair of losses in the wrong order or from two runs, and a moved figure that ends a
    sentence are reported; recorded figures, settings and learning rates are not."""
    prose = _moe_start_prose(
        f"table\n{moe_start.END}\nslice rsum 355.0, dev 262.2 (first cap 344.7), lowest\n"
        "14.66 against 12.79, from 12.38 to\n9.50, mean cosine 0.47, lr 3.2e-3, dropout 0.2"
        " and\n0.5, margin\nx0.5; but 355.1, 14.67, 208.7, 12.38, 9.50 to 12.38, 12.38 to"
        " 11.00 and 10.8.\n## next 1.5"
    )
    cells = [
        {"slice": {"rsum": 355.0}, "dev": {"rsum": 262.2}},
        {"slice": {"rsum": 10.7}, "dev": {"rsum": 4.6}, "extended_from": {"slice_rsum": 344.7}},
    ]
    report = {"reached": 1.01, "left": 0.9, "input_cosines": {"fne[shift=1]": {"none": 0.4733}},
              "runs": [{"plateau": 12.7921, "lowest_loss": 14.6612, "slice_rsum": 10.7,
                        "curve": [[0, 15.1, 21.4], [1, 12.3803, 208.7], [2, 9.4991, 230.0]]},
                       {"plateau": 12.7921, "lowest_loss": 11.0, "slice_rsum": 10.7,
                        "curve": [[0, 11.0, 1.0]]}]}  # fmt: skip
    got = _unsourced(prose, _recorded(cells, report), _loss_pairs(report))
    assert got == ["9.50 to 12.38", "12.38 to 11.00", "355.1", "14.67", "208.7", "12.38", "10.8"]
