"""benchmarks/research/fair_protocol.py: the search ends with a learning rate inside what
it tried, its stages come in the declared order, the grid runs the most informative cells
first, and the report's section reads the cells (synthetic cells; nothing is trained)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from research import fair_protocol as fair  # noqa: E402
from research import fair_report, families, papers  # noqa: E402


def _cell(c: fair.FairCell, slice_rsum: float, dev_rsum: float) -> dict:
    return {"cell": c.name, "protocol": "fair", "row": c.row, "recipe": c.recipe.as_dict(),
            "seed": c.seed, "slice": {"rsum": slice_rsum}, "dev": {"rsum": dev_rsum},
            "best_epoch": 9, "epochs_run": 13, "hit_cap": False, "train_seconds": 600.0,
            "config": {"train": {"epochs": fair.EPOCH_CAP}},
            "epoch_seconds": [40.0 + c.seed] * 12 + [90.0],
            "events": [{"event": "lr decay on plateau"}, {"event": "early stop"}],
            "git_commit": "0" * 40}  # fmt: skip


def _run_grid(slice_of, rows: tuple[str, ...], dev_of=None) -> tuple[dict, list[str]]:
    """Run the grid's pending cells of ``rows`` one at a time, as one runner does."""
    done: dict[str, dict] = {}
    order = []
    while todo := [c for c in fair.pending(done) if c.row in rows and isinstance(c, fair.FairCell)]:
        c = todo[0]
        s = slice_of(c)
        done[c.name] = _cell(c, s, (dev_of or slice_of)(c) - c.seed)
        order.append(c.name)
        assert len(order) < 200, "the search does not end"
    return done, order


def _peaked(k_best: int, norm_bonus: float = 0.0, dropout_best: float = 0.2):
    """A slice rsum with its best learning rate at ``k_best``."""

    def f(c: fair.FairCell) -> float:
        r = c.recipe
        return (300 - 5 * (r.k - k_best) ** 2 + (norm_bonus if r.norm == "layernorm" else 0)
                - 10 * abs(r.dropout - dropout_best) - (1 if r.margin == 0.5 else 0))  # fmt: skip

    return f


def test_the_grid_grows_past_an_edge_until_the_best_is_inside():
    # the best learning rate, 1e-4 (k = -8), is below the starting grid (k = -7..-5)
    done, _ = _run_grid(_peaked(-8), ("fc7-sh",))
    pick = fair.chosen("fc7-sh", done)
    assert pick == fair.Recipe(-8, "none", 0.2, 1.0)
    assert fair_report.lr_inside("fc7-sh", pick, done) == "yes"
    tried = {c["recipe"]["lr"] for c in done.values() if c["recipe"]["img_dropout"] == 0.0}
    assert tried == {3.16e-5, 1e-4, 3.16e-4, 1e-3, 3.16e-3}  # grew by two, then stopped
    # then dropout, margin, and the learning rate re-checked at the final recipe
    seeds = sorted(c["seed"] for c in fair_report.row_cells("fc7-sh", pick, done))
    assert seeds == [0, 1, 2]


def test_the_fne_rows_search_each_normalisation_and_moe_runs_five_seeds():
    done, _ = _run_grid(_peaked(-6, norm_bonus=3.0), ("fne-moe",))
    pick = fair.chosen("fne-moe", done)
    assert pick.norm == "layernorm" and pick.k == -6
    norms = {c["recipe"]["img_norm"] for c in done.values()}
    assert norms == {"none", "layernorm", "shift"}  # MOE's FNE rows: the shifted input too
    assert len(fair_report.row_cells("fne-moe", pick, done)) == 5


def test_the_shifted_input_is_searched_by_the_fne_rows_of_moe_and_poe_only():
    for row in ("fne-moe", "fne-poe", "fnef-moe", "fnef-poe"):
        assert fair.norms(row) == ("none", "layernorm", "shift")
    for row in ("fne-sh", "fne-mh", "fne-soe", "fne-ph", "fnef-soe", "fc7-moe", "fc7-poe"):
        assert "shift" not in fair.norms(row)
    s = fair.FairCell("fne-moe", fair.Recipe(-6, "shift"), 0).settings("STORE", 0.05)
    assert s["data.features"] == "fne[shift=1]" and s["model.img_norm"] == "none"
    f = fair.FairCell("fnef-poe", fair.Recipe(-6, "shift", 0.2), 1).settings("STORE", 0.05)
    assert f["data.features"] == "fne[t=none;shift=1]" and f["model.img_norm"] == "none"

    # a shifted grid that starts where the other two sit at chance is the row's choice
    def slice_of(c: fair.FairCell) -> float:
        r = c.recipe
        if r.norm != "shift":
            return 10.0
        return 300 - 5 * (r.k + 6) ** 2 - 10 * abs(r.dropout - 0.2)

    done, _ = _run_grid(slice_of, ("fne-moe",))
    pick = fair.chosen("fne-moe", done)
    assert pick == fair.Recipe(-6, "shift", 0.2, 1.0)
    assert fair_report.recipe_words(pick) == "lr 1e-3, shifted +1, dropout 0.2"
    assert fair_report.lr_inside("fne-moe", pick, done) == "yes"
    unshifted = {c["recipe"]["lr"] for c in done.values() if c["recipe"]["img_norm"] == "none"}
    assert min(unshifted) == 1e-5  # the unstarted grids still grew down to the bound


def test_a_dropout_at_the_top_of_its_grid_is_named():
    done, _ = _run_grid(_peaked(-6, dropout_best=0.9), ("fc7-sh",))
    assert fair.chosen("fc7-sh", done).dropout == 0.5
    text = "\n".join(fair_report.section(done))
    assert "(0, 0.2, 0.5), which the protocol does not grow" in text
    assert "learning rate's: FC7-SH sit at its top" in text


def test_a_learning_rate_at_the_bound_is_reported_as_such():
    done, _ = _run_grid(lambda c: 300.0 - c.recipe.k, ("fc7-sh",))  # slower is better
    pick = fair.chosen("fc7-sh", done)
    assert pick.k == fair.LR_BOUNDS[0]
    assert fair_report.lr_inside("fc7-sh", pick, done) == "at the bound"


def _starts_below(k_start: int, k_best: int):
    """MOE-like: at rates above ``k_start`` the run never leaves chance, and the slice's
    noise favours the fastest of them; below, a peak at ``k_best``."""

    def f(c: fair.FairCell) -> float:
        k = c.recipe.k
        if k > k_start:
            return 8.0 + k  # chance: 2.0 at 1e-3, 3.0 at 3.2e-3, the noise favouring the fastest
        return 100 - 5 * (k - k_best) ** 2

    return f


def test_a_grid_where_nothing_started_grows_to_slower_rates():
    # the starting grid (k = -7..-5) sits at chance with its noise at the upper edge; the
    # grid must not follow that noise upward but try slower rates, where the start is
    done, _ = _run_grid(_starts_below(-8, -9), ("fc7-moe",))
    tried = {c["recipe"]["lr"] for c in done.values() if c["recipe"]["img_dropout"] == 0.0}
    assert tried == {1e-5, 3.16e-5, 1e-4, 3.16e-4, 1e-3, 3.16e-3}
    pick = fair.chosen("fc7-moe", done)
    assert pick.k == -9 and fair_report.lr_inside("fc7-moe", pick, done) == "yes"
    # one candidate that started is enough for the usual edge rule: 1e-4 scores exactly the
    # bar (20.0), so it counts as started; the grid checks 3.2e-5 below it (19.0) and stops
    # there, not at the bound
    lift = _starts_below(-8, -20)
    done, _ = _run_grid(lambda c: lift(c) if c.recipe.k > -8 else 20.0 + c.recipe.k + 8,
                        ("fc7-moe",))  # fmt: skip
    assert fair.chosen("fc7-moe", done).k == -8
    tried = {c["recipe"]["lr"] for c in done.values() if c["seed"] == 0}
    assert tried == {3.16e-5, 1e-4, 3.16e-4, 1e-3, 3.16e-3}
    # nothing ever starts: the grid stops at the bound, not back up past its start, and
    # the search ends there (the row is reported at chance, with its seeds)
    done, _ = _run_grid(_starts_below(-20, -20), ("fc7-moe",))
    seed0 = [c["recipe"] for c in done.values() if c["seed"] == 0]
    assert sorted(r["lr"] for r in seed0) == [1e-5, 3.16e-5, 1e-4, 3.16e-4, 1e-3, 3.16e-3]
    assert all(r["img_dropout"] == 0.0 and r["margin_scale"] == 1.0 for r in seed0)
    pick = fair.chosen("fc7-moe", done)
    assert pick.k == -5 and len(fair_report.row_cells("fc7-moe", pick, done)) == 5
    assert fair_report.lr_inside("fc7-moe", pick, done) == "none left its start"


def test_the_first_cells_compare_the_three_features_at_the_middle_rate():
    first = [c.name for c in fair.pending({})[:5]]
    assert first == [
        "fair-fne-sh-lr0.001-nnone-d0-m1-s0",
        "fair-fne-sh-lr0.001-nlayernorm-d0-m1-s0",
        "fair-fc7-sh-lr0.001-nnone-d0-m1-s0",
        "fair-fnef-sh-lr0.001-nnone-d0-m1-s0",
        "fair-fnef-sh-lr0.001-nlayernorm-d0-m1-s0",
    ]
    # FIRST's searches and seeds all come before any other row's cell
    _, order = _run_grid(_peaked(-6), ("fne-sh", "fc7-sh", "fnef-sh", "fne-mh"))
    last_first = max(i for i, n in enumerate(order) if not n.startswith("fair-fne-mh"))
    assert all(n.startswith("fair-fne-mh") for n in order[last_first + 1 :])
    assert any(n.startswith("fair-fne-mh") for n in order)


def test_each_setting_is_set_once_and_the_curriculum_rows_get_their_rates():
    poe = fair.FairCell("fnef-poe", fair.Recipe(-6, "layernorm", 0.2, 0.5), 1)
    s = poe.settings("STORE", 0.05)
    assert s["data.features"] == "fne[t=none]" and s["model.img_norm"] == "layernorm"
    assert s["loss.margin"] == 0.025 and s["train.lr"] == 1e-3
    assert s["train.lr_max_phase"] == 1e-4 and s["train.patience"] == fair.PATIENCE_ORDER_MAX
    assert poe.config == "configs/flickr8k-fne-poe.yaml"
    ph = fair.FairCell("fc7-ph", fair.Recipe(-6), 0).settings("STORE", 0.2)
    assert ph["train.lr_max_phase"] is None and ph["train.patience"] == fair.PATIENCE


def test_pool5s_standardised_block_runs_on_mh_and_soe_after_table_2_and_its_claims_read_it():
    """The amendment of 2026-12-05: a row of pool5's block as standardised floats for MH
    and SOE, searched like the float FNE's rows, after every Table 2 row's cells and
    before the instability runs; two claims per pipeline compare it seed by seed."""
    assert fair.rows()[-2:] == ["p5f-mh", "p5f-soe"] and len(fair.rows()) == 20
    assert fair.norms("p5f-mh") == fair.norms("p5f-soe") == ("none", "layernorm")
    cell = fair.FairCell("p5f-soe", fair.Recipe(-6, "layernorm", 0.5), 1)
    s = cell.settings("STORE", 0.05)
    assert (
        s["data.features"] == "fne[layers=layer4.2;t=none]" and s["model.img_norm"] == "layernorm"
    )
    assert cell.config == "configs/flickr8k-fne-soe.yaml"
    todo = fair.pending({})
    kinds = [("p5f" if c.row.startswith("p5f") else "inst" if isinstance(c, fair.InstCell)
              else "t2") for c in todo]  # fmt: skip
    first_p5f = kinds.index("p5f")
    assert "t2" not in kinds[first_p5f:] and "inst" not in kinds[:first_p5f]
    # the claims: better and worse rows, seed by seed (dev: a feature's bonus and noise)
    peaked = _peaked(-6)
    bonus = {"fc7": (30, 31, 29), "fnef": (11, 10, 9), "p5f": (20, 19, 21)}
    done, _ = _run_grid(peaked, ("fc7-mh", "fnef-mh", "p5f-mh"),
                        dev_of=lambda c: peaked(c) + c.seed + bonus[c.feature][c.seed])  # fmt: skip
    v = fair_report.verdicts(done)
    std, blocks = (f"{t} (MH), fair protocol" for t in (
        "L2-normalised pool5 beats pool5's block as standardised floats",
        "Float FNE beats pool5's block as standardised floats"))  # fmt: skip
    assert v[std] == "confirmed" and v[blocks] == "refuted"
    assert v[std.replace("(MH)", "(SOE)")] == "not yet run"
    text = "\n".join(fair_report.section(done))
    assert f"| {std} | +10.0 ± 1.2, t +8.7 | 3 | confirmed |" in text
    assert "| P5F-MH | " in text


def test_the_report_section_reads_the_cells():
    assert fair_report.section({}) == [] and fair_report.readme_line({}) is None
    peaked = _peaked(-6)
    done, _ = _run_grid(lambda c: peaked(c) + (20 if c.feature == "fc7" else 0),
                        ("fne-sh", "fc7-sh", "fnef-sh"))  # fmt: skip
    text = "\n".join(fair_report.section(done))
    assert "| FC7-SH | " in text and "lr0.001-nnone-d0.2-m1 | yes | 3 |" in text
    assert "| 40 s | 13-13 |" in text  # the row's fastest epoch; its seeds' epochs run
    assert "sit at its top" not in text  # the synthetic rows chose dropout 0.2
    line = fair_report.readme_line(done)
    assert "3 of 20 rows searched, dev rsum FNE-SH 299.0 (paper 261.6), 3 of 3 seeds;" in line
    assert "FNE beats the one-layer embedding: SH one model: fails;" in line
    sh = "| FNE beats the one-layer embedding (SH), fair protocol |"
    assert f"{sh} -20.0 ± 0.0 | 3 | one model: fails |" in text
    assert "| FNE beats the one-layer embedding (MH), fair protocol | — | 0 | not yet run |" in text
    # 300 at the best rate, less 10 x |dropout - 0.2|, plus 20 for FC7; dev: less the seed
    name = fair.FairCell("fc7-sh", fair.Recipe(-6), 0).name
    assert (
        f"| {name} | 318.0 | 318.0 | 9 / 13 | 1 | early stop | 10 min | — | 0000000 | — |" in text
    )


def test_the_benchmarks_table_holds_the_rows_whose_seeds_have_all_run():
    peaked = _peaked(-5)  # 3.16e-3
    done, _ = _run_grid(lambda c: peaked(c) + (20 if c.feature == "fc7" else 0),
                        ("fc7-sh", "fne-sh"))  # fmt: skip
    # FNE-SH's seed 2 has not run: its row waits, FC7-SH's is in
    done = {
        k: v for k, v in done.items() if not (k.startswith("fair-fne-sh") and k.endswith("-s2"))
    }
    table = fair_report.benchmarks_table(done)
    assert table[2:] == [
        "| FC7-SH (pool5, L2) | lr 3.2e-3, dropout 0.2 | 3 | 319.0 ± 1.0 | 247.2 |"
    ]
    assert fair_report.benchmarks_table({}) == table[:2]  # the header alone


def test_a_recipe_in_words_names_what_differs_from_the_defaults():
    words = fair_report.recipe_words
    assert words(fair.Recipe(-6)) == "lr 1e-3, no dropout"
    assert words(fair.Recipe(-7, "layernorm", 0.5)) == "lr 3.2e-4, LayerNorm, dropout 0.5"
    assert words(fair.Recipe(-4, "none", 0.2, 0.5)) == "lr 1e-2, dropout 0.2, margin x0.5"


def test_a_row_with_one_seed_shows_its_rsum_without_a_spread():
    peaked = _peaked(-6)
    done, _ = _run_grid(lambda c: peaked(c) + 20, ("fc7-sh",))
    done = {k: v for k, v in done.items() if not k.endswith(("-s1", "-s2"))}
    text = "\n".join(fair_report.section(done))
    assert "lr0.001-nnone-d0.2-m1 | yes | 1 | 320.0 | 247.2 |" in text
    assert "± 0.0" not in text


def test_the_instability_count_runs_last_at_this_budget_with_the_first_settings():
    inst = fair.inst_cells()
    assert len(inst) == 60 and len({c.name for c in inst}) == 60  # 2 x 6 settings x 5 seeds
    todo = fair.pending({})
    first_inst = next(i for i, c in enumerate(todo) if isinstance(c, fair.InstCell))
    assert all(isinstance(c, fair.InstCell) for c in todo[first_inst:])  # after Table 2
    assert todo[first_inst].name == "fair-inst-moe-fc7-bl-s0"
    moe = fair.InstCell("moe", "fne-abs", 3).settings("STORE", 0.2)
    assert (moe["train.lr"], moe["loss.margin"], moe["model.abs"]) == (1e-4, 0.05, True)
    assert (
        moe["train.epochs"] == fair.EPOCH_CAP and moe["train.patience"] == fair.PATIENCE_ORDER_MAX
    )
    assert moe["model.img_norm"] == "none" and moe["model.img_dropout"] == 0.0
    assert moe["data.features"] == "fne" and moe["train.seed"] == 3
    assert "train.curriculum_sum_epochs" not in moe
    poe = fair.InstCell("poe", "fc7-bl", 0)
    s = poe.settings("STORE", 0.05)
    assert s["train.lr_max_phase"] is None and s["train.lr"] == 2e-4 and s["model.abs"] is False
    assert s["train.curriculum_sum_epochs"] == fair.EPOCH_CAP // 2
    assert poe.config == "configs/flickr8k-fc7-poe.yaml" and poe.row == "fc7-poe"
    # a recorded run leaves the list
    done = {todo[first_inst].name: {}}
    assert todo[first_inst].name not in {c.name for c in fair.pending(done)}


def _inst(c: fair.InstCell, dev_last: float, reached_max: bool = True) -> dict:
    return {"cell": c.name, "protocol": "fair", "row": c.row, "family": c.family,
            "variant": c.variant, "setting": c.as_dict(), "seed": c.seed,
            "slice": {"rsum": 66.0}, "dev": {"rsum": 77.0},  # the best epoch's
            "dev_last": {"rsum": dev_last}, "phases": {"max": 5 if reached_max else 0},
            "best_epoch": 3, "epochs_run": 10 + c.seed, "hit_cap": False,
            "train_seconds": 60.0, "events": [{"event": "early stop"}],
            "git_commit": "0" * 40}  # fmt: skip


def test_the_report_counts_the_instability_runs_by_the_first_rules():
    # FC7 starts at every setting; the FNE at none: settings matter (confirmed); POE
    # starts wherever MOE failed, except one run that never reached L_M
    done = {}
    for c in fair.inst_cells():
        ok = c.feature == "fc7" or c.family == "poe"
        reached = not (c.family == "poe" and c.variant == "fne-abs" and c.seed == 4)
        done[c.name] = _inst(c, 50.0 if ok else 3.0, reached)
    text = "\n".join(fair_report.section(done, {}))
    assert "| MOE's starts depend on its settings, fair protocol | fc7-bl 5/5, " in text
    assert "fne-abs 0/5 | 30 runs | confirmed |" in text
    assert "fne-abs 4/5 (MOE 0/5) | 30 runs | inconclusive |" in text
    assert "| FNE-MOE-abs | 0.0001 | 0.05 | yes | 0/5 | 10-14 | — | 4/5 | 4/5 |" in text
    assert "| FC7-MOE-bl | 0.0002 | 0.2 | no | 5/5 | 10-14 | — | 5/5 | 5/5 |" in text
    # the cells table shows the last model's dev rsum, which the run is judged on
    assert "| fair-inst-moe-fne-bl-s0 | 66.0 | 3.0 | 3 / 10 |" in text
    # the Table 2 rows are not read from the instability runs
    assert "| FC7-MOE |" not in text
    # partly run: counted as run, no verdict
    part = {n: c for n, c in done.items() if c["seed"] < 2}
    text = "\n".join(fair_report.section(part, {}))
    assert "| FNE-MOE-bl | 0.0002 | 0.2 | no | — (2 of 5 run) | 10-11 |" in text
    assert (
        "| MOE's starts depend on its settings, fair protocol | — | 12 runs | not yet run |" in text
    )
    # once a family's 30 runs are in, the settings that differ from the paper (MOE) and
    # from the first protocol's 4 epochs are named, beside the table
    text = "\n".join(fair_report.section(done, {}))
    paper = "MOE's start counts differ from the paper's Table 5 by 3 runs or more at "
    assert (
        f"{paper}FC7-MOE-bl-abs 5/5 (paper 0/5), FC7-MOE-abs 5/5 (paper 0/5), FNE-MOE-abs" in text
    )
    assert "4-epoch counts" not in text  # no first-protocol runs given
    assert "start counts" not in "\n".join(fair_report.section(part, {}))

    # the first protocol: MOE started at FC7 only, POE everywhere but FC7-bl
    def started_first(c: fair.InstCell) -> bool:
        return c.feature == "fc7" if c.family == "moe" else c.variant != "fc7-bl"

    old = {families.first_name(c.family, c.variant, c.seed):
           _inst(c, 50.0 if started_first(c) else 3.0) for c in fair.inst_cells()}  # fmt: skip
    text = "\n".join(fair_report.section(done, old))
    assert "MOE's start counts equal the first protocol's 4-epoch counts at every setting." in text
    moved = "POE's start counts differ from the first protocol's 4-epoch counts at "
    assert f"{moved}FC7-POE-bl 5/5 (4 epochs: 0/5), FNE-POE-abs 4/5 (4 epochs: 5/5)." in text
    assert "POE's start counts differ from the paper" not in text  # the paper gives MOE's only
    # one run in
    first = fair.inst_cells()[0].name
    text = "\n".join(fair_report.section({first: done[first]}, {}))
    assert "| FC7-MOE-bl | 0.0002 | 0.2 | no | — (1 of 5 run) | 10-10 |" in text
    assert "| MOE's starts depend on its settings, fair protocol | — | 1 run | not yet run |" in (
        text
    )


def test_moe_reruns_fne_bl_on_the_inputs_plus_one_after_every_other_cell_and_is_judged():
    """The amendment of 2026-12-06: the same setting and seeds as the centred FNE-MOE-bl
    runs, on the FNE plus one, listed last; its claim takes POE's rule."""
    shifted = fair.shift_cells()
    assert [c.name for c in shifted] == [f"fair-inst-moe-fne-{k}-shift-s{s}"
                                         for k in ("bl", "bl-abs") for s in range(5)]  # fmt: skip
    todo = fair.pending({})
    assert [c.name for c in todo[-10:]] == [c.name for c in shifted]
    assert not any(getattr(c, "shift", False) for c in todo[:-10])
    abs_ = shifted[7].settings("STORE", 0.2)
    assert abs_["model.abs"] is True and abs_["data.features"] == "fne[shift=1]"
    centred = fair.InstCell("moe", "fne-bl", 3).settings("STORE", 0.2)
    s = shifted[3].settings("STORE", 0.2)
    assert s.pop("data.features") == "fne[shift=1]" and centred.pop("data.features") == "fne"
    assert s == centred  # nothing else differs
    # judged against the centred runs, which the plain claims alone count
    done = {c.name: _inst(c, 50.0 if c.feature == "fc7" else 3.0) for c in fair.inst_cells()}
    title = ("MOE starts on the FNE's inputs plus one, where it fails on the centred inputs "
             "(FNE-MOE-bl), fair protocol")  # fmt: skip

    def claim(starts: int, runs: int = 5) -> tuple[str, str, str]:
        cells = {c.name: {**_inst(c, 50.0 if c.seed < starts else 3.0), "shift": True}
                 for c in shifted[:runs]}  # fmt: skip
        rows = {t: (fig, n, v) for t, fig, n, v in fair_report.claim_rows(done | cells)}
        assert rows["MOE's starts depend on its settings, fair protocol"][1] == "30 runs"
        return rows[title]

    assert claim(5) == ("fne-bl+1 5/5 (centred 0/5)", "5 runs", "confirmed")
    assert claim(2)[2] == "inconclusive" and claim(0)[2] == "refuted"
    assert claim(5, runs=4) == ("—", "4 runs", "not yet run")
    every = {c.name: _inst(c, 50.0) for c in fair.inst_cells()}  # the centred runs start
    shift_all = {c.name: {**_inst(c, 50.0), "shift": True} for c in shifted}
    rows = {t: v for t, _, _, v in fair_report.claim_rows(every | shift_all)}
    assert rows[title] == "not testable here"
    cells = {c.name: {**_inst(c, 50.0), "shift": True} for c in shifted[:2]}
    text = "\n".join(fair_report.section(done | cells, {}))
    assert (
        "at FNE-MOE-bl's setting and seeds, 2 of 5 run so far, 2 of them started, 10 to 11 "
        "epochs run; at FNE-MOE-bl-abs's setting and seeds, 0 of 5 run so far" in text
    )
    assert "| fair-inst-moe-fne-bl-shift-s1 | 66.0 | 50.0 |" in text
    # the centred runs' table is unchanged by the runs on the shifted input
    assert "| FNE-MOE-bl | 0.0002 | 0.2 | no | 0/5 | 10-14 |" in text


def test_a_setting_is_named_against_the_paper_from_a_gap_of_three_runs():
    # the paper: fc7-bl 5/5, fc7-bl-abs 0/5, fc7-abs 0/5, fne-bl 0/5, fne-bl-abs 0/5, fne-abs 4/5
    def count(paper_or_here: dict[str, int]) -> dict[str, dict]:
        return {c.name: _inst(c, 50.0 if c.seed < paper_or_here[c.variant] else 3.0)
                for c in fair.inst_cells() if c.family == "moe"}  # fmt: skip

    here = {"fc7-bl": 2, "fc7-bl-abs": 2, "fc7-abs": 0, "fne-bl": 0, "fne-bl-abs": 0, "fne-abs": 1}
    text = fair_report.inst_comparison(count(here), {})[-1]
    # 3 runs from the paper's count is named, 2 is not
    assert text == ("MOE's start counts differ from the paper's Table 5 by 3 runs or more at "
                    "FC7-MOE-bl 2/5 (paper 5/5), FNE-MOE-abs 1/5 (paper 4/5).")  # fmt: skip
    text = fair_report.inst_comparison(count(papers.MOE_STARTS), {})[-1]
    assert (
        text == "No setting's MOE start count differs from the paper's Table 5 by 3 runs or more."
    )


def test_a_claim_with_some_of_its_seeds_says_how_many_it_needs():
    done, _ = _run_grid(_peaked(-6), ("fne-mh", "fc7-mh"))
    done = {k: c for k, c in done.items() if not k.startswith("fair-fne-mh-") or k.endswith("-s0")}
    rows = {r[0]: r for r in fair_report.claim_rows(done)}
    title = "FNE beats the one-layer embedding (MH), fair protocol"
    assert rows[title] == (title, "—", "1", "not yet run (needs 3 seeds)")
    none = "FNE beats the one-layer embedding (SOE), fair protocol"  # no seed paired
    assert rows[none][2:] == ("0", "not yet run")
    assert fair_report.verdicts(done)[title] == "not yet run"
    assert "Claims with a verdict: none yet" in fair_report.readme_line(done)


def test_the_fair_claims_test_the_first_protocols_explanations():
    from research import explanations, report

    peaked = _peaked(-6)
    done, _ = _run_grid(lambda c: peaked(c) + (20 if c.feature == "fc7" else 0),
                        ("fne-mh", "fc7-mh", "fnef-mh"))  # fmt: skip
    verdicts = fair_report.verdicts(done)
    assert verdicts["FNE beats the one-layer embedding (MH), fair protocol"] == "one model: fails"
    assert verdicts["FNE beats the one-layer embedding (SOE), fair protocol"] == "not yet run"
    title, text = "FNE beats the one-layer embedding (MH)", explanations.EXPLAIN["fne"]
    # its tests have all run, but the text's standardisation cost has no test
    assert report.explanation_status(title, "refuted", text, verdicts) == "partly tested"
    assert report.explanation_status(title, "refuted", text, {}) == "test pending"


def test_epoch_seconds_come_from_the_trainers_clock_and_a_resume_repeats_an_epoch():
    from research import runner

    # killed in epoch 2 (recorded, not checkpointed), resumed from epoch 1's clock
    log = [{"epoch": 0, "seconds": 50.0}, {"epoch": 1, "seconds": 95.0},
           {"epoch": 2, "seconds": 300.0}, {"epoch": 2, "seconds": 141.0},
           {"epoch": 3, "seconds": 190.5}]  # fmt: skip
    assert runner.epoch_seconds(log) == [50.0, 45.0, 46.0, 49.5]


def test_run_log_keeps_one_record_per_epoch(tmp_path):
    import json

    from research import runner

    recs = [{"epoch": 0, "seconds": 50.0, "rsum": 1.0}, {"epoch": 1, "seconds": 99.0, "rsum": 2.0},
            {"epoch": 1, "seconds": 97.0, "rsum": 3.0}, {"event": "lr decay on plateau"},
            {"epoch": 2, "seconds": 150.0, "rsum": 4.0}]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / "last.json").write_text(json.dumps({"path": "epoch2"}))
    (tmp_path / "epoch2").mkdir()
    events = [{"epoch": 2, "event": "early stop"}]
    (tmp_path / "epoch2" / "state.json").write_text(json.dumps({"events": events}))
    (tmp_path / "done.json").write_text(json.dumps({"seconds": 60.0}))  # this part's only
    epochs, got, seconds = runner.run_log(tmp_path)
    assert [e["rsum"] for e in epochs] == [1.0, 3.0, 4.0] and got == events
    assert seconds == 150.0 and runner.epoch_seconds(epochs) == [50.0, 47.0, 53.0]


def test_an_instability_run_is_recorded_with_its_family_and_judged_on_its_last_model(
    tmp_path, monkeypatch
):
    """run_fair_cell's record for an InstCell (training and scoring stubbed): the keys
    the report and families.started read, and the settings the run was given."""
    import json

    from research import runner

    cell = fair.InstCell("poe", "fne-bl-abs", 3)
    run = tmp_path / cell.name
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"config": {"resolved": True}}))
    (run / "best.json").write_text(json.dumps({"epoch": 4}))
    given, written = {}, {}
    monkeypatch.setattr(runner, "RUNS", tmp_path)
    head = {"now": "a" * 40}

    def train_run(r, cfg, sets, root, collapsed_ok, pass_fds=()):
        given.update(run=r, config=cfg, sets=sets, pass_fds=pass_fds)
        head["now"] = "b" * 40  # a commit lands while the run trains

    monkeypatch.setattr(runner, "train_run", train_run)
    epochs = [{"epoch": e, "seconds": 30.0 * (e + 1), "phase": "sum" if e < 3 else "max",
               "loss": 20.0 - e / 3, "rsum": 4.0 * e + 0.001}
              for e in range(9)]  # fmt: skip
    monkeypatch.setattr(runner, "run_log", lambda r: (epochs, [{"event": "early stop"}], 270.0))
    scores = {"slice": {"rsum": 40.0}, "dev": {"rsum": 35.0}, "dev_last": {"rsum": 4.0}}
    monkeypatch.setattr(runner.scoring, "score", lambda c, r: scores)
    monkeypatch.setattr(runner, "write_cell", lambda folder, name, rec: written.update(rec))
    monkeypatch.setattr(runner, "git_commit", lambda: head["now"])
    monkeypatch.setattr(runner, "machine", lambda: {"cpu": "test"})
    monkeypatch.setattr(runner, "store_digest", lambda: {"fne.i8": "c" * 64})
    monkeypatch.setitem(runner._HELD, cell.name, 97)  # the runner's lock on the cell
    rec = runner.run_fair_cell(cell)
    assert given["pass_fds"] == (97,)  # the trainer holds it too
    assert given["run"] == run and given["config"] == "configs/flickr8k-fne-poe.yaml"
    assert "model.abs=true" in given["sets"] and "train.lr_max_phase=null" in given["sets"]
    assert written == rec and rec["cell"] == cell.name and "recipe" not in rec
    assert (rec["family"], rec["variant"], rec["row"]) == ("poe", "fne-bl-abs", "fne-poe")
    assert rec["setting"] == {"lr": 2e-4, "margin": 0.2, "abs": True}
    assert rec["phases"] == {"sum": 3, "max": 6} and rec["epoch_seconds"] == [30.0] * 9
    assert rec["config"] == {"resolved": True} and rec["best_epoch"] == 4
    assert rec["curve"] == {"epoch": list(range(9)), "phase": ["sum"] * 3 + ["max"] * 6,
                            "loss": [round(20.0 - e / 3, 4) for e in range(9)],
                            "rsum": [4.0 * e for e in range(9)]}  # fmt: skip
    assert rec["git_commit"] == "a" * 40  # the code the training ran, not HEAD at its end
    assert rec["store_sha256"] == {"fne.i8": "c" * 64}
    # judged on the last model (dev rsum 4), not the best epoch's 35: it did not start
    assert rec["started"] is False and not rec["hit_cap"]
    assert rec["shift"] is False  # on the FNE as it is (the amendment of 2026-12-06)


def test_a_gpu_cell_counts_for_the_search_and_is_marked_but_not_timed():
    peaked = _peaked(-6)
    done, _ = _run_grid(peaked, ("fc7-sh",))
    name = fair.FairCell("fc7-sh", fair.Recipe(-6), 0).name
    done[name] = done[name] | {"machine": {"gpu": "NVIDIA H100 80GB HBM3"},
                               "epoch_seconds": [3.0] * 13}  # fmt: skip
    text = "\n".join(fair_report.section(done))
    assert f"| {name} | 298.0 | 298.0 | 9 / 13 | 1 | early stop | 10 min (NVIDIA H100 80GB" in text
    assert "| 40 s | 13-13 |" in text  # the fastest epoch is still a CPU cell's 40 s
    assert "lr0.001-nnone-d0.2-m1 | yes | 3 |" in text  # chosen, with the GPU cell's score


def test_run_grid_takes_any_of_several_prefixes_and_starts_nothing_after_its_time(monkeypatch):
    from types import SimpleNamespace

    from research import runner

    names = ("fair-fne-soe-a", "fair-fc7-soe-a", "fair-inst-moe-fne-bl-s0", "fair-fne-ph-a")
    cells = [SimpleNamespace(name=n) for n in names]
    ran: list[str] = []
    done: dict[str, dict] = {}
    monkeypatch.setattr(runner, "load_cells", lambda folder: dict(done))
    monkeypatch.setattr(runner, "claim", lambda name: True)
    monkeypatch.setattr(runner, "release", lambda name: None)

    def run_one(c):
        ran.append(c.name)
        done[c.name] = {}
        return {"cell": c.name, "slice": {"rsum": 1.0}, "dev": {"rsum": 1.0}, "wall_seconds": 1.0}

    def pending(d):
        return [c for c in cells if c.name not in d]

    folder = Path("/nonexistent")
    runner.run_grid(pending, run_one, folder, only="fair-fne-, fair-inst-moe-fne,")
    assert ran == ["fair-fne-soe-a", "fair-inst-moe-fne-bl-s0", "fair-fne-ph-a"]
    ran.clear()
    done.clear()
    clock = iter([0.0, 10.0, 200.0])  # the start, then before each cell
    monkeypatch.setattr(runner, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    runner.run_grid(pending, run_one, folder, stop_after=2)  # 2 minutes: one cell starts
    assert ran == ["fair-fne-soe-a"]


def test_a_cell_made_in_a_copy_of_the_tree_takes_its_commit_from_the_environment(
    tmp_path, monkeypatch
):
    from research import runner

    monkeypatch.setattr(runner, "ROOT", tmp_path)  # not a git work tree
    monkeypatch.delenv("VSEKIT_GIT_COMMIT", raising=False)
    assert runner.git_commit() == ""
    monkeypatch.setenv("VSEKIT_GIT_COMMIT", "a" * 40)  # set: it wins, over an older .git too
    assert runner.git_commit() == "a" * 40


def test_the_store_digest_names_the_bytes_a_cell_trained_on(tmp_path):
    import hashlib
    import json

    from research import runner

    (tmp_path / "pooled.f32").write_bytes(b"\x00\x01" * 1000)
    (tmp_path / "fne.i8").write_bytes(b"\x01\xff\x00" * 7)
    (tmp_path / "fne_stats.safetensors").write_bytes(b"stats")
    (tmp_path / "meta.json").write_text(json.dumps({"fne": {"fit_split": "train"}}))
    got = runner.store_digest.__wrapped__(str(tmp_path))
    assert got["pooled.f32"] == hashlib.sha256(b"\x00\x01" * 1000).hexdigest()
    assert got["fne.i8"] == hashlib.sha256(b"\x01\xff\x00" * 7).hexdigest()
    (tmp_path / "fne.i8").write_bytes(b"\x01\xff\x00" * 6 + b"\x01\x00\x00")  # one value flips
    (tmp_path / "meta.json").write_text(json.dumps({"fne": {"fit_split": "val"}}))
    again = runner.store_digest.__wrapped__(str(tmp_path))
    assert again["fne.i8"] != got["fne.i8"] and again["fne_fit"] != got["fne_fit"]
    assert again["pooled.f32"] == got["pooled.f32"]
    assert got["fne_stats.safetensors"] == hashlib.sha256(b"stats").hexdigest()


def test_the_fastest_epoch_is_read_per_cpu_model_once_the_grid_ran_on_two():
    peaked = _peaked(-6)
    done, _ = _run_grid(peaked, ("fc7-sh",))
    text = "\n".join(fair_report.section(done))
    assert "| 40 s | 13-13 |" in text  # one CPU model: no label
    names = sorted(done)
    done[names[0]] = done[names[0]] | {"machine": {"cpu": "AMD EPYC"}}
    for n in names[1:]:
        done[n] = done[n] | {"machine": {"cpu": "Intel(R) Xeon(R) Processor"},
                             "epoch_seconds": [31.0] * 13}  # fmt: skip
    text = "\n".join(fair_report.section(done))
    assert "| 40 s (AMD EPYC); 31 s (Intel Xeon Processor) | 13-13 |" in text
    # an epoch whose time was not one trainer's is null, and is not read
    done[names[1]] = done[names[1]] | {"epoch_seconds": [None] * 12 + [33.0]}
    done[names[2]] = done[names[2]] | {"epoch_seconds": [None] * 12 + [29.0]}
    text = "\n".join(fair_report.section(done))
    assert "| 40 s (AMD EPYC); 29 s (Intel Xeon Processor) | 13-13 |" in text
    # the same model name without AVX512_BF16 (bf16 GEMMs in fp32 kernels) is timed apart
    for n in names[1:]:
        done[n] = done[n] | {"machine": {"cpu": "AMD EPYC"}, "bf16_gemms": "fp32",
                             "epoch_seconds": [95.0] * 13}  # fmt: skip
    text = "\n".join(fair_report.section(done))
    assert "| 40 s (AMD EPYC); 95 s (AMD EPYC (bf16 in fp32 GEMMs)) | 13-13 |" in text
    assert f"| {names[1]} |" in text and "min (bf16 in fp32 GEMMs) |" in text


def test_the_cells_table_names_the_store_each_cell_read():
    done, _ = _run_grid(_peaked(-6), ("fc7-sh",))
    a, b, c = sorted(done)[:3]
    done[a] = done[a] | {"store_sha256": {"pooled.f32": "1" * 64, "fne_fit": "2" * 64}}
    done[b] = done[b] | {"store_sha256": {"pooled.f32": "1" * 64, "fne_fit": "2" * 64}}
    done[c] = done[c] | {"store_sha256": {"pooled.f32": "3" * 64, "fne_fit": "2" * 64}}
    table = [x for x in fair_report.section(done) if x.startswith("| fair-")]
    lines = [x.strip("| ").split(" | ") for x in table]
    rows = {x[0]: x[-1] for x in lines}
    assert rows[a] == rows[b] != rows[c] and len(rows[a]) == 7
    assert all(rows[n] == "—" for n in done if n not in (a, b, c))
    # a ternary-FNE cell names its fne.i8 only: a copy of it (portable.py, no pooled.f32)
    # names the same store
    fne = {n: c for n, c in done.items() if n in (a, b)}
    fne[a] = fne[a] | {"row": "fne-sh", "store_sha256": {"fne.i8": "4" * 64}}
    fne[b] = fne[b] | {"row": "fne-sh", "store_sha256": {"fne.i8": "4" * 64, "pooled.f32": "5"}}
    assert fair_report.store_id(fne[a]) == fair_report.store_id(fne[b]) != rows[a]


def test_the_cells_table_names_each_cells_cpu_apart_from_its_kernels():
    done, _ = _run_grid(_peaked(-6), ("fc7-sh",))
    a, b = sorted(done)[:2]
    done[a] = done[a] | {"machine": {"cpu": "AMD EPYC", "cpu_flags": ["AVX2"]},
                         "bf16_gemms": "fp32"}  # fmt: skip
    done[b] = done[b] | {"machine": {"cpu": "Intel(R) Xeon(R) Processor",
                                     "cpu_flags": ["AVX2", "AVX512BF16"]}}  # fmt: skip
    table = [x for x in fair_report.section(done) if x.startswith("| fair-")]
    cells = {x.strip("| ").split(" | ")[0]: x.strip("| ").split(" | ")[6:8] for x in table}
    assert cells[a] == ["10 min (bf16 in fp32 GEMMs)", "AMD EPYC, no AVX512_BF16"]
    assert cells[b] == ["10 min", "Intel Xeon Processor"]


def test_only_order_max_cells_run_on_until_they_leave_their_start():
    """MOE's and POE's cells, Table 2's and the instability runs, count plateaus only
    from a slice rsum of ``STARTED_SLICE``; no other pipeline's cells set it."""
    for p in fair.PIPELINES:
        got = fair.FairCell(f"fne-{p}", fair.Recipe(-6), 0).settings("S", 0.2)
        want = fair.STARTED_SLICE if p in ("moe", "poe") else None
        assert got.get("train.patience_from") == want
    inst = {c.family: c.settings("S", 0.2).get("train.patience_from") for c in fair.inst_cells()}
    assert inst == {"moe": fair.STARTED_SLICE, "poe": fair.STARTED_SLICE}


def test_the_report_names_the_superseded_cells(tmp_path, monkeypatch):
    monkeypatch.setattr(fair_report, "SUPERSEDED", tmp_path)
    assert fair_report.superseded_lines({}) == []
    name = "fair-fne-moe-lr0.001-nnone-d0-m1-s0"
    (tmp_path / f"{name}.json").write_text("{}")
    line = fair_report.superseded_lines({})[-1]
    folder = "`benchmarks/research/cells_fair/superseded/`"
    assert f"Superseded: 1 cell of this protocol ({folder}: {name})" in line
    assert "it runs again under the new one. No verdict uses it." in line
    assert "it has run again" in fair_report.superseded_lines({name: {}})[-1]


def _capped(rec: dict, slice_rsum: float, cap: int = fair.EPOCH_CAP) -> dict:
    """``rec`` as if the cap ``cap`` had ended it at ``slice_rsum``."""
    return rec | {"hit_cap": True, "epochs_run": cap, "best_epoch": cap - 1,
                  "slice": {"rsum": slice_rsum}, "config": {"train": {"epochs": cap}},
                  "events": [{"event": "lr decay on plateau"}]}  # fmt: skip


def test_a_run_the_cap_stopped_after_its_start_is_listed_again_and_not_yet_read():
    done, _ = _run_grid(_peaked(-6), ("fc7-mh",))
    pick = fair.chosen("fc7-mh", done)
    assert pick is not None
    name = fair.FairCell("fc7-mh", pick, 0).name
    # the row's chosen cell, had the cap ended it: the search waits for it to run on
    capped = done | {name: _capped(done[name], 400.0)}
    assert fair.runs_on(capped[name])
    assert fair.chosen("fc7-mh", capped) is None
    assert [c.name for c in fair.pending(capped) if c.row == "fc7-mh"] == [name]
    # once it has run on to the higher cap, it is read, whatever ended it
    extended = done | {name: _capped(done[name], 400.0, fair.EXTENDED_CAP)}
    assert not fair.runs_on(extended[name])
    assert fair.chosen("fc7-mh", extended) == pick
    assert not [c for c in fair.pending(extended) if c.row == "fc7-mh"]
    # a run still at its start keeps the first cap (its grid grows below it instead)
    still = done | {name: _capped(done[name], fair.STARTED_SLICE - 1)}
    assert not fair.runs_on(still[name])
    assert name not in {c.name for c in fair.pending(still)}
    # and so do the instability runs, which count starts within the first cap
    inst = {"cell": "fair-inst-moe-fc7-bl-s0", "family": "moe", "hit_cap": True,
            "slice": {"rsum": 300.0}, "config": {"train": {"epochs": fair.EPOCH_CAP}}}  # fmt: skip
    assert not fair.runs_on(inst)


def test_the_runner_resumes_a_run_the_cap_stopped_with_the_higher_cap(tmp_path, monkeypatch):
    import json

    from research import runner

    cell = fair.FairCell("fne-moe", fair.Recipe(-7, "shift", 0.5), 0)
    run = tmp_path / cell.name
    run.mkdir()
    before = _capped(_cell(cell, 0.0, 270.8), 349.6) | {
        "git_commit": "a" * 40, "machine": {"cpu": "first"}}  # fmt: skip
    log = {"epochs": [], "events": []}  # what the run folder holds
    given, written = {}, {}

    def epoch(e: int) -> dict:  # one line of the trainer's metrics.jsonl
        return {"epoch": e, "seconds": 60.0 * (e + 1), "phase": "max", "loss": 9.0, "rsum": 1.0,
                "gemm_kernels": "native" if e < fair.EPOCH_CAP else "fp32"}  # fmt: skip

    def first_run(cap: int = fair.EPOCH_CAP) -> None:
        """The run folder as the first cap left it (a resumed run's config.json keeps it)."""
        (run / "config.json").write_text(json.dumps({"config": {"train": {"epochs": cap}}}))
        (run / "best.json").write_text(json.dumps({"epoch": 59}))
        (run / "done.json").write_text("{}")
        log.update(epochs=[epoch(e) for e in range(fair.EPOCH_CAP)], events=[])

    def trains_to(n: int, early_stop: bool):
        def train_run(r, cfg, sets, root, collapsed_ok, pass_fds=()):
            given.update(sets=sets, done=(r / "done.json").is_file())
            log["epochs"] = [epoch(e) for e in range(n)]
            log["events"] = [{"event": "early stop"}] if early_stop else []
            (r / "done.json").write_text("{}")

        return train_run

    monkeypatch.setattr(runner, "RUNS", tmp_path)
    monkeypatch.setattr(runner, "load_cells", lambda folder: {cell.name: before})
    monkeypatch.setattr(runner, "run_log", lambda r: (log["epochs"], log["events"], 4620.0))
    scores = {"slice": {"rsum": 352.0}, "dev": {"rsum": 272.0}}
    monkeypatch.setattr(runner.scoring, "score", lambda c, r: scores)
    monkeypatch.setattr(runner, "write_cell", lambda folder, name, rec: written.update(rec))
    monkeypatch.setattr(runner, "git_commit", lambda: "b" * 40)
    monkeypatch.setattr(runner, "machine", lambda: {"cpu": "test"})
    monkeypatch.setattr(runner, "store_digest", lambda: {"fne.i8": "c" * 64})

    # resumed, then stopped by its rule at 77 epochs
    first_run()
    monkeypatch.setattr(runner, "train_run", trains_to(77, early_stop=True))
    rec = runner.run_fair_cell(cell)
    assert f"train.epochs={fair.EXTENDED_CAP}" in given["sets"]
    assert f"train.epochs={fair.EPOCH_CAP}" not in given["sets"]
    assert given["done"] is False  # its finished mark is gone, so the trainer resumes it
    assert written == rec and rec["epochs_run"] == 77 and not rec["hit_cap"]
    assert rec["config"]["train"]["epochs"] == fair.EXTENDED_CAP  # the cap it ran under
    assert rec["extended_from"] == {"epochs_run": fair.EPOCH_CAP, "best_epoch": 59,
                                    "git_commit": "a" * 40, "train_seconds": 600.0,
                                    "machine": {"cpu": "first"}, "slice_rsum": 349.6,
                                    "dev_rsum": 270.8, "resumed": True}  # fmt: skip
    assert not fair.runs_on(rec)
    assert rec["bf16_gemms"] == "mixed"  # from its log: resumed on another kind of CPU
    # resumed, and the higher cap ended it too: kept as hit_cap, not run on again
    first_run()
    monkeypatch.setattr(runner, "train_run", trains_to(fair.EXTENDED_CAP, early_stop=False))
    rec = runner.run_fair_cell(cell)
    assert rec["hit_cap"] and not fair.runs_on(rec)
    # a kill after the longer run finished but before its record: it is not resumed again
    first_run()
    log["epochs"] = log["epochs"] + [{"epoch": 60, "seconds": 3660.0, "phase": "max"}]
    monkeypatch.setattr(runner, "train_run", trains_to(61, early_stop=True))
    runner.run_fair_cell(cell)
    assert given["done"] is True
    # its run folder was on another machine: it trained again from its start, cap 120
    for f in ("config.json", "best.json", "done.json"):
        (run / f).unlink()

    def fresh(r, cfg, sets, root, collapsed_ok, pass_fds=()):
        trains_to(48, early_stop=True)(r, cfg, sets, root, collapsed_ok)
        (r / "config.json").write_text(json.dumps({"config": {"train": {"epochs": 120}}}))
        (r / "best.json").write_text(json.dumps({"epoch": 41}))

    monkeypatch.setattr(runner, "train_run", fresh)
    rec = runner.run_fair_cell(cell)
    assert rec["extended_from"]["resumed"] is False and rec["best_epoch"] == 41
    assert f"train.epochs={fair.EXTENDED_CAP}" in given["sets"]
    # a recorded cell that does not run on is trained as listed, with the first cap
    monkeypatch.setattr(runner, "load_cells", lambda f: {cell.name: before | {"hit_cap": False}})
    first_run()
    monkeypatch.setattr(runner, "train_run", trains_to(13, early_stop=True))
    rec = runner.run_fair_cell(cell)
    assert f"train.epochs={fair.EPOCH_CAP}" in given["sets"] and given["done"] is True
    assert "extended_from" not in rec and rec["config"]["train"]["epochs"] == fair.EPOCH_CAP


def test_run_grid_runs_a_recorded_cell_its_protocol_lists_again(monkeypatch):
    from types import SimpleNamespace

    from research import runner

    done = {"fair-fc7-mh-a": {"runs_on": True}}  # recorded, and listed again
    cells = [SimpleNamespace(name="fair-fc7-mh-a")]
    ran: list[str] = []
    monkeypatch.setattr(runner, "load_cells", lambda folder: dict(done))
    monkeypatch.setattr(runner, "claim", lambda name: True)
    monkeypatch.setattr(runner, "release", lambda name: None)

    def run_one(c):
        ran.append(c.name)
        done[c.name] = {"runs_on": False}
        return {"cell": c.name, "slice": {"rsum": 1.0}, "dev": {"rsum": 1.0}, "wall_seconds": 1.0}

    def pending(d):
        return [c for c in cells if c.name not in d or d[c.name]["runs_on"]]

    ticks = iter(range(10_000))  # a second a look, so that a runner that skips it ends
    monkeypatch.setattr(runner, "time", SimpleNamespace(monotonic=lambda: float(next(ticks))))
    runner.run_grid(pending, run_one, Path("/nonexistent"), stop_after=1)
    assert ran == ["fair-fc7-mh-a"]


def test_a_seed_the_cap_stopped_is_not_yet_a_result_and_the_report_names_each_case():
    done, _ = _run_grid(_peaked(-6), ("fc7-sh",))
    pick = fair.chosen("fc7-sh", done)
    seed1 = fair.FairCell("fc7-sh", pick, 1).name
    capped = done | {seed1: _capped(done[seed1], 300.0)}
    assert [c["seed"] for c in fair_report.row_cells("fc7-sh", pick, capped)] == [0, 2]
    assert seed1 in {c.name for c in fair.pending(capped)}
    text = "\n".join(fair_report.section(capped))
    assert (
        f"| {seed1} | 300.0 |" in text and f"| the cap (runs on to {fair.EXTENDED_CAP}) |" in text
    )
    ext = {"epochs_run": fair.EPOCH_CAP, "resumed": True}
    ran_on = done | {seed1: done[seed1] | {"extended_from": ext}}
    assert f"| early stop (ran on from {fair.EPOCH_CAP}) |" in "\n".join(
        fair_report.section(ran_on)
    )
    again = done | {seed1: done[seed1] | {"extended_from": ext | {"resumed": False}}}
    text = "\n".join(fair_report.section(again))
    assert f"| early stop (ran again, cap {fair.EXTENDED_CAP}) |" in text


def test_a_cell_without_a_curve_gets_one_from_its_run_or_the_recorded_starts(tmp_path, monkeypatch):
    """``claims.py --add-curves``: from the run folder where its epochs are the record's,
    else from moe_start.json's curve where it holds all of them; otherwise left alone."""
    import json

    from research import runner

    runs, written = tmp_path / "runs", {}
    monkeypatch.setattr(runner, "RUNS", runs)
    monkeypatch.setattr(runner, "write_cell", lambda folder, name, rec: written.update({name: rec}))
    here = runs / "here"
    (here / "epoch1").mkdir(parents=True)
    (here / "metrics.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "epoch": e,
                    "phase": "max",
                    "loss": 13.0 - e,
                    "rsum": 7.123 * e,
                    "seconds": 9.0 * (e + 1),
                }
            )
            + "\n"
            for e in range(2)
        )  # fmt: skip
    )
    (here / "last.json").write_text(json.dumps({"path": "epoch1"}))
    (here / "epoch1" / "state.json").write_text("{}")
    (here / "done.json").write_text(json.dumps({"seconds": 18.0}))
    previous = tmp_path / "moe_start.json"
    previous.write_text(json.dumps({"runs": [
        {"cell": "kept", "slice_rsum": 30.2, "curve": [[0, 12.9, 20.1], [1, 12.5, 30.2]]},
        {"cell": "short", "slice_rsum": 30.2, "curve": [[0, 12.9, 20.1]]},
        {"cell": "has", "slice_rsum": 1.0, "curve": [[0, 1.0, 1.0]]},
        {"cell": "rerun", "slice_rsum": 30.2, "curve": [[0, 12.9, 20.1], [1, 12.5, 30.2]]},
    ]}))  # fmt: skip
    done = {
        "here": {"epochs_run": 2, "slice": {"rsum": 7.12}},
        "kept": {"epochs_run": 2, "slice": {"rsum": 30.2}},
        "short": {"epochs_run": 2, "slice": {"rsum": 30.2}},
        "has": {"epochs_run": 1, "curve": {"epoch": [0]}, "slice": {"rsum": 1.0}},
        "rerun": {"epochs_run": 2, "slice": {"rsum": 41.0}},  # recorded again since
        "none": {"epochs_run": 3, "slice": {"rsum": 9.0}},
    }
    runner.add_curves(done, previous)
    assert set(written) == {"here", "kept"}  # "short" holds one of two epochs
    assert written["here"]["curve"] == {"epoch": [0, 1], "phase": ["max", "max"],
                                        "loss": [13.0, 12.0], "rsum": [0.0, 7.12]}  # fmt: skip
    assert written["kept"]["curve"] == {"epoch": [0, 1], "phase": ["max", "max"],
                                        "loss": [12.9, 12.5], "rsum": [20.1, 30.2]}  # fmt: skip
    assert written["here"]["added"][0]["from"] == "its run folder"
    assert written["kept"]["added"][0]["from"].startswith("moe_start.json")


def test_a_fair_cell_records_the_kernels_its_bf16_gemms_ran_in(monkeypatch):
    """On a CPU that would emulate bf16 the cells' GEMMs run in fp32 kernels
    (``vsekit.lab.train.bf16``); the record says so, and says ``native`` elsewhere."""
    import torch
    from research import runner

    from vsekit.runtime.precision import CpuInfo

    avx2 = CpuInfo("x86_64", frozenset({"AVX2", "FMA3"}))
    bf16 = CpuInfo("x86_64", frozenset({"AVX2", "AVX512F", "AVX512BF16"}))
    cfg = {"train.precision": "bf16"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("vsekit.runtime.precision.cpu_info", lambda: avx2)
    assert runner.bf16_gemms(cfg) == "fp32"
    assert runner.bf16_gemms({"train.precision": "fp32"}) == "native"
    assert runner.bf16_gemms(cfg | {"train.device": "cuda"}) == "native"
    monkeypatch.setattr("vsekit.runtime.precision.cpu_info", lambda: bf16)
    assert runner.bf16_gemms(cfg) == "native"
    # the run's own log wins over this machine; a run resumed on another kind is mixed
    fp32, native = {"gemm_kernels": "fp32"}, {"gemm_kernels": "native"}
    assert runner.bf16_gemms(cfg, [fp32, fp32]) == "fp32"
    assert runner.bf16_gemms(cfg, [fp32, native]) == "mixed"
    assert runner.bf16_gemms(cfg, [{}, native]) == "native"  # an epoch logged before
    assert runner.bf16_gemms(cfg, [{}, fp32]) == "mixed"  # (this machine stands in)
    assert runner.bf16_gemms(cfg, []) == "native"
    assert fair_report.kernel_mark({"bf16_gemms": "mixed"}) == " (bf16 partly in fp32 GEMMs)"
    assert fair_report.kernel_mark({"bf16_gemms": "fp32"}) == " (bf16 in fp32 GEMMs)"
    assert fair_report.kernel_mark({"bf16_gemms": "native"}) == ""


@pytest.mark.parametrize("index", [0, 3, 4])  # fc7-sh, fne-ph (a curriculum row), fne-mh
def test_a_precision_pair_trains_the_recorded_cell_with_only_its_precision_changed(
    index, tmp_path, monkeypatch
):
    import json

    from research import precision_pairs as pp
    from research import runner
    from research.protocol import load_cells

    from vsekit.lab.train import load_config
    from vsekit.lab.train.config import apply_overrides

    done = load_cells(fair.CELLS)
    name = pp.PAIRS[index]
    rec = done[name]
    seen = {}
    monkeypatch.setattr(pp, "RUNS", tmp_path)
    monkeypatch.setattr(pp, "train_run", lambda run, cfg, sets, root, **kw: seen.update(
        cfg=cfg, sets=sets))  # fmt: skip
    monkeypatch.setattr(runner, "run_log", lambda r: ([{"epoch": 0, "seconds": 60.0}], [], 60.0))
    dev = rec["dev"]["rsum"] + 3.5
    monkeypatch.setattr(pp.scoring, "score", lambda c, r: {"slice": {"rsum": 349.0},
                                                            "dev": {"rsum": dev}})  # fmt: skip
    monkeypatch.setattr(runner, "store_digest", lambda: {"fne.i8": "b"})
    pair = pp.run_pair(name, done)
    # the fp32 run's effective config is the recorded cell's, its precision aside
    cfg = apply_overrides(load_config(runner.ROOT / seen["cfg"]), seen["sets"]).to_dict()
    assert cfg["train"].pop("precision") == "fp32" and rec["config"]["train"]["precision"] == "bf16"
    want = json.loads(json.dumps(rec["config"]))
    del want["train"]["precision"]
    want["train"]["patience_from"] = want["train"].get("patience_from")  # (older records lack it)
    assert json.loads(json.dumps(cfg)) == want
    assert pair["dev_difference"] == 3.5 and not pair["same_store"]
    seeds = [r["dev"]["rsum"] for r in done.values() if r.get("row") == rec["row"]
             and r.get("recipe") == rec["recipe"]]  # fmt: skip
    assert pair["row_seeds_dev"] == seeds and len(seeds) == 3


def test_the_precision_pairs_summary_counts_differences_against_the_seed_spread():
    from research import precision_pairs as pp

    pairs = [{"dev_difference": 3.5, "row_seed_std": 2.0, "same_store": False},
             {"dev_difference": -10.0, "row_seed_std": 3.0, "same_store": True}]  # fmt: skip
    s = pp.summary(pairs)
    assert s == {"pairs": 2, "dev_difference_mean": -3.25, "same_store": 1,
                 "dev_difference_std": 9.55, "row_seed_std_mean": 2.5,
                 "within_2_seed_std": 1, "bf16_here_pairs": 0}  # fmt: skip
    runs = [(p | {"bf16": {"dev": 280.0}, "fp32": {"dev": 280.0 + p["dev_difference"]}},
             {"dev": 281.0 + i}) for i, p in enumerate(pairs)]  # fmt: skip
    here = [pp.with_bf16_here(pair, run) for pair, run in runs]
    assert [(p["machine_difference"], p["precision_difference"]) for p in here] == [
        (1.0, 2.5), (2.0, -12.0)]  # fmt: skip
    s = pp.summary(here)
    assert s["bf16_here_pairs"] == 2 and s["machine_difference_mean"] == 1.5
    assert s["precision_difference_mean"] == -4.75 and s["precision_difference_std"] == 10.25


def test_a_bf16_run_here_trains_the_recorded_cells_own_config(tmp_path, monkeypatch):
    import json

    from research import precision_pairs as pp
    from research import runner
    from research.protocol import load_cells

    from vsekit.lab.train import load_config
    from vsekit.lab.train.config import apply_overrides

    done = load_cells(fair.CELLS)
    name = pp.PAIRS[3]  # fne-ph: a curriculum row
    rec, seen = done[name], {}
    monkeypatch.setattr(pp, "RUNS", tmp_path)
    monkeypatch.setattr(pp, "train_run", lambda run, cfg, sets, root, **kw: seen.update(
        run=run, cfg=cfg, sets=sets))  # fmt: skip
    logged = [{"epoch": 0, "seconds": 60.0, "gemm_kernels": "fp32"}]
    monkeypatch.setattr(runner, "run_log", lambda r: (logged, [], 60.0))
    monkeypatch.setattr(runner, "this_machine_gemms", lambda settings: "native")
    monkeypatch.setattr(pp.scoring, "score", lambda c, r: {"slice": {"rsum": 349.0},
                                                            "dev": {"rsum": 281.0}})  # fmt: skip
    monkeypatch.setattr(runner, "store_digest", lambda: {"fne.i8": "b"})
    here = pp.train_here(name, done, "bf16")
    assert seen["run"] == tmp_path / f"bf16here-{name}" and here["dev"] == 281.0
    cfg = apply_overrides(load_config(runner.ROOT / seen["cfg"]), seen["sets"]).to_dict()
    want = json.loads(json.dumps(rec["config"]))
    want["train"]["patience_from"] = want["train"].get("patience_from")  # (older records lack it)
    assert json.loads(json.dumps(cfg)) == want  # precision bf16 included
    assert here["bf16_gemms"] == "fp32"  # from the run's log, whatever this machine is


def test_a_precision_pair_recorded_again_keeps_its_bf16_run_here(tmp_path, monkeypatch):
    import json

    from research import precision_pairs as pp

    monkeypatch.setattr(pp, "RUNS", tmp_path)
    monkeypatch.setattr(pp, "OUT", tmp_path / "pairs.json")
    monkeypatch.setattr(pp, "machine", lambda: {"cpu": "test"})
    name = pp.PAIRS[0]
    pair = {"cell": name, "dev_difference": -1.0, "row_seed_std": 1.0, "same_store": False,
            "bf16": {"dev": 290.0}, "fp32": {"dev": 289.0}}  # fmt: skip
    pp.record(name, lambda old: pp.keep_bf16_here(old, pair))
    pp.record(name, lambda old: pp.with_bf16_here(old, {"dev": 291.0}))
    assert pp.recorded("bf16") == {name} == pp.recorded("fp32")
    pp.record(name, lambda old: pp.keep_bf16_here(old, pair | {"dev_difference": -2.0}))
    (got,) = json.loads((tmp_path / "pairs.json").read_text())["pairs"]
    assert got["dev_difference"] == -2.0 and got["bf16_here"] == {"dev": 291.0}


def test_the_grid_tables_show_every_seed0_cell_once_with_each_rates_best_in_bold():
    """Each row's seed-0 cells by learning rate and the rest of the recipe: every cell in
    exactly one place with its slice and dev rsum, the lines in ascending rate, the columns
    in the protocol's order (input, then dropout, then margin x1 before x0.5), the best
    slice rsum of a line in bold only among started cells and where more than one cell ran
    at that rate, the cap and a missed start marked, and a row without a seed-0 cell left
    out."""
    done, _ = _run_grid(_peaked(-5, norm_bonus=3.0), ("fne-sh",), dev_of=lambda c: 200.0)

    def like(name: str, new: str, **changes) -> None:
        done[new] = done[name] | {"cell": new} | changes

    lone = "fair-fne-sh-lr0.01-nnone-d0-m1-s0"
    like(lone, "lone", recipe=done[lone]["recipe"] | {"lr": 3.16e-2}, slice={"rsum": 99.0})
    like(lone, "slow", recipe=done[lone]["recipe"] | {"lr": 1e-5}, slice={"rsum": 9.0},
         hit_cap=True)  # fmt: skip
    like(lone, "still", recipe=done[lone]["recipe"] | {"lr": 1e-5, "img_norm": "layernorm"},
         slice={"rsum": 8.0})  # fmt: skip
    capped = "fair-fne-sh-lr0.001-nnone-d0-m1-s0"
    done[capped] |= {"hit_cap": True}  # stopped by the first cap after its start
    fc7 = "fair-fc7-sh-lr0.001-nnone-d0-m1-s1"
    done[fc7] = done[capped] | {"cell": fc7, "row": "fc7-sh", "seed": 1}
    lines = fair_report.grid_tables(done)
    assert lines[1] == "### Every row's seed-0 cells by learning rate"
    assert "**FNE-SH**" in lines and "**FC7-SH**" not in lines
    header = next(x for x in lines if x.startswith("| lr |"))
    cols = header.strip("| ").split(" | ")[1:]
    assert cols == ["no dropout", "LayerNorm, no dropout", "LayerNorm, dropout 0.2",
                    "LayerNorm, dropout 0.2, margin x0.5", "LayerNorm, dropout 0.5"]  # fmt: skip
    body = [x for x in lines if x.startswith("| ") and not x.startswith(("| lr", "|---"))]
    rates = [x.split(" | ")[0].strip("| ") for x in body]
    assert rates == ["1e-5", "3.2e-4", "1e-3", "3.2e-3", "1e-2", "3.2e-2"]
    assert sum(x.count(" / 200.0") for x in body) == sum(1 for c in done.values() if c["seed"] == 0)
    # at 3.2e-3 the LayerNorm with dropout 0.2 leads (300 + 3); at 3.2e-2 only one ran
    line = next(x for x in body if x.startswith("| 3.2e-3 |"))
    assert line.count("**") == 2 and "**303.0** / 200.0" in line
    assert body[-1] == "| 3.2e-2 | 99.0 / 200.0 |" + "  |" * (len(cols) - 1)
    # two cells at 1e-5, neither started: none in bold, each marked
    assert body[0] == (
        "| 1e-5 | 9.0 / 200.0 (cap, not started) | 8.0 / 200.0 (not started) |"
        + "  |" * (len(cols) - 2)
    )
    assert "293.0 / 200.0 (runs on) |" in body[2]
    assert fair_report.grid_tables({}) == []
