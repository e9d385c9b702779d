"""benchmarks/research, the claims grid: the declared verdict test, the run order, and
that the report's claims follow from the recorded cells (synthetic cells here; nothing is
trained)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from research import fair_report, families, protocol, report, runner, scoring  # noqa: E402


@pytest.mark.parametrize(
    "diffs, want",
    [
        ([3.0, 4.0, 5.0], "confirmed"),
        ([-3.0, -4.0, -5.0], "refuted"),
        ([3.0, -2.0, 0.5], "inconclusive"),
        ([3.0, 4.0], "not yet run"),  # no verdict below 3 seeds
        ([1.0, 1.0, 1.0], "one model: holds"),  # a deterministic model: nothing to test
        ([-1.0, -1.0, -1.0], "one model: fails"),
    ],
)
def test_verdict_is_the_declared_paired_test(diffs, want):
    assert protocol.verdict(diffs)[0] == want


def test_verdict_boundary_is_two_standard_errors():
    # mean 1, sample std 1, n 3: se = 1/sqrt(3) = 0.577; 2 se = 1.155 > 1
    assert protocol.verdict([0.0, 1.0, 2.0])[0] == "inconclusive"
    assert protocol.verdict([1.0, 2.0, 3.0])[0] == "confirmed"  # mean 2 > 1.155


def test_run_order_cheap_families_then_table2_then_fne_targets():
    order = [c.name for c in protocol.pending({})]
    first_t2 = next(i for i, n in enumerate(order) if n.startswith("t2-"))
    assert all(not n.startswith("t2-") for n in order[:first_t2])
    assert order[0].startswith("reg-") and order[-1].startswith("w2vv-bow-fne")
    assert len(order) == len(set(order))
    # a recorded cell is never scheduled again
    done = {order[0]: {}}
    assert order[0] not in [c.name for c in protocol.pending(done)]


def _tag_cell(variant: str, seed: int, p1: float, p5: float) -> tuple[str, dict]:
    name = families.Job("tags", variant, seed, "").name
    m = {"p1": p1, "p5": p5}
    return name, {"cell": name, "family": "tags", "slice": m, "dev": m, "best_epoch": 3,
                  "train_seconds": 40.0, "git_commit": "0" * 40}  # fmt: skip


def test_family_claims_follow_from_the_cells():
    done = dict(
        [_tag_cell("sje2-a0.75", s, 70.0 + s, 72.0) for s in families.SEEDS]
        + [_tag_cell("sje1-a0.75", s, 66.0, 71.0 + s) for s in families.SEEDS]
    )
    rows = {r.title: r.diffs for r in report.claim_diffs(done)}
    assert rows["SJE with Delta(II) beats Delta(I) at p@1"] == [4.0, 5.0, 6.0]
    assert protocol.verdict(rows["SJE with Delta(II) beats Delta(I) at p@1"])[0] == "confirmed"
    # ListSJE has no cells: no pairs, no verdict
    assert rows["ListSJE beats SJE Delta(I) at p@5"] == []
    # the alpha claim needs every alpha of a seed; one missing alpha drops that seed
    for a in (0.0, 0.25, 0.5, 0.75, 1.0):
        for s in families.SEEDS:
            n, c = _tag_cell(f"listsje-a{a:g}", s, 60.0 + (5 if a in (0.5, 0.75) else 0), 70.0)
            done[n] = c
    del done[families.Job("tags", "listsje-a1", 2, "").name]
    rows = {r.title: r.diffs for r in report.claim_diffs(done)}
    alpha = next(d for t, d in rows.items() if t.startswith("alpha in"))
    assert alpha == [5.0, 5.0]


def test_the_alpha_claim_lets_the_slice_choose_and_reports_dev():
    done = {}
    for a, sl, dv in ((0.0, 50, 90), (0.25, 60, 40), (1.0, 55, 95), (0.5, 70, 41), (0.75, 65, 99)):
        for s in families.SEEDS:
            name = families.Job("tags", f"listsje-a{a:g}", s, "").name
            done[name] = {
                "slice": {"p1": float(sl), "p5": 0.0},
                "dev": {"p1": float(dv), "p5": 0.0},
            }
    rows = {r.title: r.diffs for r in report.claim_diffs(done)}
    alpha = next(d for t, d in rows.items() if t.startswith("alpha in"))
    assert alpha == [41.0 - 40.0] * 3  # slice picks 0.5 and 0.25; dev's best would be 99 - 95


def test_report_names_a_refutation_and_its_explanation(monkeypatch):
    done = dict(
        [_tag_cell("sje2-a0.75", s, 60.0 - s, 72.0) for s in families.SEEDS]
        + [_tag_cell("sje1-a0.75", s, 66.0, 71.0) for s in families.SEEDS]
    )
    text = report.report(done)
    line = next(x for x in text.splitlines() if x.startswith("| SJE with Delta(II)"))
    assert line.endswith("| 3 | refuted | untested |")  # its explanation names no test
    assert "**SJE with Delta(II) beats Delta(I) at p@1: refuted.**" in text
    assert "*Explanation: untested.*" in text


def test_an_explanation_is_marked_by_the_verdicts_of_the_claims_that_test_it(monkeypatch):
    """The explanation column: tested when every testing claim has a verdict, partly
    when some have, pending when none has, untested without tests; "—" when it holds."""
    from research import explanations

    title, tests = (
        "FNE targets beat pool5 targets (bag-of-words input, equal epochs)",
        (
            explanations.TESTED_BY[
                "FNE targets beat pool5 targets (bag-of-words input, equal epochs)"
            ]
        ),
    )
    assert len(tests) >= 2
    status = report.explanation_status
    run = {t: ("confirmed", "refuted", "inconclusive")[i % 3] for i, t in enumerate(tests)}
    assert status(title, "refuted", "text", run) == "tested"
    assert status(title, "refuted", "text", {tests[0]: "confirmed"}) == "partly tested"
    assert status(title, "refuted", "text", {t: "not yet run" for t in tests}) == "test pending"
    assert status(title, "confirmed", "text", run) == "—"
    bigru = "GRU + GloVe beats the stacked bidirectional GRU + GloVe"  # no claim tests it
    assert bigru not in explanations.TESTED_BY
    assert status(bigru, "refuted", "text", run) == "untested"
    assert status(bigru, "refuted", "", run) == "not yet examined"
    assert status("POE starts where MOE fails to", "refuted", "text", run) == "from its runs"
    assert "; ".join(f"{t} ({run[t]})" for t in tests) == report.tested_by(title, run)
    assert f"{tests[0]} (confirmed); {tests[1]} (refuted)" in report.tested_by(title, run)
    # an explanation whose own text says part of it is untested is partly tested at best
    assert status(title, "refuted", "... the width is untested.", run) == "partly tested"
    fne = "FNE beats the one-layer embedding (MH)"  # in PARTLY: pool5's block's ternarisation
    fne_run = {t: "confirmed" for t in explanations.TESTED_BY[fne]}
    assert fne in explanations.PARTLY
    assert status(fne, "refuted", "text", fne_run) == "partly tested"
    # FNE-MOE: the POE runs bear on its mechanism but cannot single it out, so it stays
    # partly tested whatever their verdicts
    moe = "FNE beats the one-layer embedding (MOE)"
    moe_run = {t: "confirmed" for t in explanations.TESTED_BY[moe]}
    assert {"POE starts where MOE fails to", "POE starts where MOE fails to, fair protocol"} <= set(
        moe_run
    )
    # the amendment of 2026-12-06 tests its narrower form: the centred input, not the start
    shift = "MOE starts on the FNE's inputs plus one, where it fails on the centred inputs"
    assert {f"{shift} (FNE-MOE-{k}), fair protocol" for k in ("bl", "bl-abs")} <= set(moe_run)
    assert moe in explanations.PARTLY
    assert status(moe, "refuted", "text", moe_run) == "partly tested"
    # the amendment of 2026-12-05: MH and SOE are tested by pool5's standardised block too
    for p in ("MH", "SOE"):
        tests = explanations.TESTED_BY[f"FNE beats the one-layer embedding ({p})"]
        assert f"Ternary FNE beats float FNE ({p}), fair protocol" in tests
        for t in ("L2-normalised pool5 beats pool5's block as standardised floats",
                  "Float FNE beats pool5's block as standardised floats"):  # fmt: skip
            assert f"{t} ({p}), fair protocol" in tests
    assert "pool5's block" not in " ".join(
        explanations.TESTED_BY["FNE beats the one-layer embedding (PH)"]
    )


def test_every_tested_by_entry_names_claims_of_the_report():
    """TESTED_BY is keyed and filled by claim titles: a renamed claim would leave its
    explanation silently untested, so every title must be one the report has."""
    from research import explanations

    titles = {r.title for r in report.claim_diffs({})}
    titles |= {t for t, *_ in families.moe_verdicts({})}
    titles |= set(fair_report.verdicts({}))  # the fair protocol's claims
    for claim, tests in explanations.TESTED_BY.items():
        assert claim in titles, claim
        assert tests and set(tests) <= titles, (claim, set(tests) - titles)
    assert set(explanations.FROM_RUNS) <= titles
    assert set(explanations.PARTLY) <= set(explanations.TESTED_BY)


def _moe_cells(family: str, starts: dict[str, int]) -> dict[str, dict]:
    """Recorded MOE/POE cells: ``starts[setting]`` of the five seeds end at dev rsum 50, the
    others at 4 (every run's best epoch reached 50: what counts is the model it ends with)."""
    out = {}
    for setting, n in starts.items():
        for s in families.MOE_SEEDS:
            name = families.Job(family, setting, s, "").name
            rsum = 50.0 if s < n else 4.0
            out[name] = {"cell": name, "family": family, "variant": setting, "seed": s,
                         "slice": {"rsum": 60.0}, "dev": {"rsum": 50.0},
                         "dev_last": {"rsum": rsum}, "best_epoch": 1, "train_seconds": 60.0,
                         "git_commit": "0" * 40}  # fmt: skip
            if family == "poe":
                out[name]["phases"] = {"sum": 2, "max": 2}
    return out


def test_a_poe_run_starts_only_if_the_model_its_max_loss_phase_ends_with_did():
    cell = {"family": "poe", "dev": {"rsum": 120.0}, "dev_last": {"rsum": 5.0},
            "phases": {"sum": 2, "max": 2}}  # fmt: skip
    assert not families.started(cell)  # L_S started, then L_M collapsed
    assert families.started(cell | {"dev_last": {"rsum": 80.0}})
    assert not families.started(cell | {"dev_last": {"rsum": 80.0}, "phases": {"sum": 4}})
    # MOE's instability runs alike, on their last epoch; Table 2 cells at the slice's epoch
    moe = {"family": "moe", "dev": {"rsum": 120.0}, "dev_last": {"rsum": 5.0}}
    assert not families.started(moe)
    assert families.started(moe | {"dev_last": {"rsum": 12.0}})
    assert not families.started({"row": "fne-moe", "dev": {"rsum": 8.0}})
    assert families.started({"row": "fc7-moe", "dev": {"rsum": 12.0}})
    # POE keeps L_M at the setting's own learning rate, not its Table 2 config's 1e-4
    late = families.late_jobs({}, protocol.table2_view({}))
    poe = [j for j in late if j.family == "poe"]
    moe = [j for j in late if j.family == "moe"]
    assert poe and all("train.lr_max_phase=null" in j.overrides() for j in poe)
    assert moe and all("train.lr_max_phase=null" not in j.overrides() for j in moe)


def test_moe_instability_verdicts_follow_the_declared_rules():
    settings = [f"{f}-{n}" for f in ("fc7", "fne") for n in families.MOE_SETTINGS]
    v = {t: (fig, verdict) for t, _, _, fig, verdict in families.moe_verdicts({})}
    assert v["MOE's starts depend on its settings"][1] == "not yet run"
    # every setting starts every time: the instability does not reproduce
    done = _moe_cells("moe", dict.fromkeys(settings, 5))
    v = {t: verdict for t, _, _, _, verdict in families.moe_verdicts(done)}
    assert v["MOE's starts depend on its settings"] == "refuted"
    assert v["POE starts where MOE fails to"] == "not testable here"
    # no setting ever starts: alike too
    done = _moe_cells("moe", dict.fromkeys(settings, 0))
    v = {t: verdict for t, _, _, _, verdict in families.moe_verdicts(done)}
    assert v["MOE's starts depend on its settings"] == "refuted"
    assert "**MOE's starts depend on its settings: refuted.**" in report.report(done)
    # one setting never starts, another always: confirmed
    done = _moe_cells("moe", {**dict.fromkeys(settings, 5), "fc7-abs": 0})
    v = {t: verdict for t, _, _, _, verdict in families.moe_verdicts(done)}
    assert v["MOE's starts depend on its settings"] == "confirmed"
    assert v["POE starts where MOE fails to"] == "not yet run"
    # POE runs at every setting whatever MOE did (scheduling reads no dev figure)
    poe = {j.name for j in families.late_jobs({}, protocol.table2_view({})) if j.family == "poe"}
    assert poe == {families.Job("poe", k, s, "").name for k in settings for s in families.MOE_SEEDS}
    for n, want in ((5, "confirmed"), (0, "refuted"), (3, "inconclusive")):
        both = {**done, **_moe_cells("poe", {"fc7-abs": n})}
        v = {t: verdict for t, _, _, _, verdict in families.moe_verdicts(both)}
        assert v["POE starts where MOE fails to"] == want


def test_the_second_backbone_runs_its_chosen_recipe_seeds():
    grid = tuple(protocol.GRID)
    done = {}
    for k, (lr, m) in enumerate(grid):
        name = families.Job("lite0", f"fc7-sh-lr{lr:g}-m{m:g}", 0, "").name
        done[name] = {"cell": name, "family": "lite0", "slice": {"rsum": 100.0 + k}}
    lr, m = grid[-1]
    assert families.lite0_variant("fc7", done, grid) == f"fc7-sh-lr{lr:g}-m{m:g}"
    late = [j.name for j in families.late_jobs(done, protocol.table2_view(done))]
    for s in (1, 2):
        assert families.Job("lite0", f"fc7-sh-lr{lr:g}-m{m:g}", s, "").name in late
    assert not any(n.startswith("lite0-fne-sh") and not n.endswith("-s0") for n in late)


def test_runners_share_the_grid_through_cell_locks(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setattr(runner, "RUNS", tmp_path)
    assert runner.claim("t2-x-s0")
    assert not runner.claim("t2-x-s0")  # held (a second descriptor cannot lock it)
    other = [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
             "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"]  # fmt: skip
    assert subprocess.run([*other, str(tmp_path / "t2-x-s0.lock")]).returncode != 0
    runner.release("t2-x-s0")
    assert subprocess.run([*other, str(tmp_path / "t2-x-s0.lock")]).returncode == 0
    # an empty or stale lock file from a runner that died is no obstacle
    (tmp_path / "t2-y-s0.lock").write_text("")
    assert runner.claim("t2-y-s0")
    runner.release("t2-y-s0")


@pytest.mark.parametrize(
    ("rc", "ok", "finished"),
    [(0, False, True), (3, True, True), (3, False, False), (1, True, False)],
)
def test_a_run_that_did_not_start_is_a_finished_cell_only_where_asked(
    tmp_path, monkeypatch, rc, ok, finished
):
    """`vse train` exits 3 for a run that did not start learning: for the claims grid that
    is an outcome (MOE's failed starts), recorded, not an error that blocks the cell."""
    import subprocess

    import _common

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, rc))
    run = tmp_path / "run"
    run.mkdir()
    if finished:
        _common.train_run(run, "c.yaml", [], tmp_path, collapsed_ok=ok)
        assert json.loads((run / "done.json").read_text())["collapsed"] == (rc == 3)
    else:
        with pytest.raises(subprocess.CalledProcessError):
            _common.train_run(run, "c.yaml", [], tmp_path, collapsed_ok=ok)
        assert not (run / "done.json").exists()


def test_claims_show_the_papers_difference_and_the_stricter_t_test():
    assert protocol.paper_difference("fc7-mh", "fc7-sh") == "+5.9"  # 253.1 - 247.2
    assert protocol.paper_difference("fne-soe", "fne-sh") == "-0.7"
    assert protocol.paper_difference("fc7-soe", "reg-lstm-glove") == "+1.6 t2i R@1"
    # paired differences 1, 2, 3: t = 3.46 passes 2 SE but not the 95% t-test at 2 df
    done = dict(
        [_tag_cell("sje2-a0.75", s, 66.0 + s + 1, 72.0) for s in families.SEEDS]
        + [_tag_cell("sje1-a0.75", s, 66.0, 71.0) for s in families.SEEDS]
    )
    text = report.report(done)
    line = next(x for x in text.splitlines() if x.startswith("| SJE with Delta(II)"))
    assert "| +0.7 |" in line and "+2.0 ± 0.6, t +3.5" in line
    assert line.endswith("| confirmed | — |")
    lenient = next(x for x in text.splitlines() if x.startswith("Verdicts the declared 2-SE"))
    assert "SJE with Delta(II) beats Delta(I) at p@1 (confirmed, t +3.5)" in lenient
    # a wide margin is not listed
    done = dict(
        [_tag_cell("sje2-a0.75", s, 76.0 + s, 72.0) for s in families.SEEDS]
        + [_tag_cell("sje1-a0.75", s, 66.0, 71.0) for s in families.SEEDS]
    )
    assert "Verdicts the declared 2-SE" not in report.report(done)


def _probe(cells: dict[str, dict], flat: bool, ratio: float) -> None:
    """Give recorded instability cells ``order_stats``: in the flat state or not."""
    for c in cells.values():
        c["order_stats"] = {
            "zero_violation_pairs": 0.985 if flat else 0.0,
            "image_coords_nonneg": 0.85 if flat else 1.0,
            "caption_coords_nonpos": 0.84 if flat else 0.0,
            "loss_over_margin_total": [{"epoch": 0, "phase": "sum", "ratio": 20.0},
                                       {"epoch": 1, "phase": "max", "ratio": ratio}],
        }  # fmt: skip


def test_the_moe_caveat_names_the_flat_state_from_the_recorded_order_stats():
    settings = [f"{f}-{n}" for f in ("fc7", "fne") for n in families.MOE_SETTINGS]
    starts = {**dict.fromkeys(settings, 5), "fc7-bl": 0, "fne-bl": 0}
    done = _moe_cells("moe", starts)
    assert report.moe_note({}) == ""  # nothing until every MOE run is recorded
    # without order_stats: where the starts differ from the paper's, and what is unprobed
    note = report.moe_note(done)
    assert note.startswith("Which settings start is not the paper's: fc7-bl 0/5 (paper 5/5)")
    assert "fc7-bl-abs 5/5 (paper 0/5)" in note and "fne-bl 0/5" not in note  # paper 0/5
    assert "end in the order loss's flat state" not in note
    assert note.endswith("10 runs not yet probed for the flat state (python "
                         "benchmarks/research/claims.py --add-order-stats).")  # fmt: skip
    failed = {k: c for k, c in done.items() if c["dev_last"]["rsum"] < families.STARTED}
    _probe(done, flat=False, ratio=1.07)
    _probe(failed, flat=True, ratio=0.9994)
    note = report.moe_note(done)
    assert "10 of the 10 runs that did not start (fc7-bl, fne-bl) end in the order" in note
    assert "98.5% of dev's image-caption pairs are free of order violation" in note
    assert "Every run without abs (10, FC7 and FNE) ended there, and none with abs did." in note
    assert "not in a flat state" not in note and "not yet probed" not in note
    assert f"**MOE's starts depend on its settings.** {note}" in report.report(done)
    # one run with abs that did not start but is not in the flat state is told apart
    slow = done[families.Job("moe", "fne-abs", 0, "").name]
    slow["dev_last"]["rsum"] = 8.2
    note = report.moe_note(done)
    assert "10 of the 11 runs that did not start" in note
    assert (
        "The other run that did not start (fne-abs) is not in a flat state (no dev "
        "pair free of violation): it ends at dev rsum 8.2 after 4 epochs, under the "
        "criterion's 10, with the loss still falling at the last epoch: slow rather than "
        "stuck."
    ) in note
    slow["order_stats"]["loss_over_margin_total"][-1]["ratio"] = 25.0  # rose: not said
    assert "after 4 epochs, under the criterion's 10. The paper" in report.moe_note(done)
    # a run not yet probed is named, not counted either way
    del done[families.Job("moe", "fc7-bl", 0, "").name]["order_stats"]
    note = report.moe_note(done)
    assert "9 of the 11 runs that did not start" in note
    assert "Every run without abs" not in note
    assert note.endswith("1 run not yet probed for the flat state (python "
                         "benchmarks/research/claims.py --add-order-stats).")  # fmt: skip


def test_the_readme_states_the_headline_findings_in_three_lines(monkeypatch):
    def cd(title: str, diffs: list[float]) -> protocol.ClaimDiffs:
        return protocol.ClaimDiffs(title, "001", "dev rsum", diffs, "", "", "")

    got = [
        cd("MH beats SH (FC7)", [13.0, 14.0, 13.5]),
        cd("MH beats SH (FNE)", [-1.0, 2.0, 0.5]),
        cd("SOE beats SH (FC7)", [-4.0, -5.0, -3.5]),
        cd("SOE beats SH (FNE)", [-1.0, -8.0, -5.0]),  # beyond 2 SE, not a 95% t-test
        cd("FNE beats the one-layer embedding (SH)", [-28.0, -30.0, -29.0]),
        cd("FNE beats the one-layer embedding (MH)", [-25.0, -27.0, -26.0]),
        cd("FNE beats the one-layer embedding (SH, EfficientNet-Lite0)", [-16.0, -17.0, -15.0]),
        cd("Baseline + weight beats the baseline", [0.5, 0.5, 0.5]),
        cd("ListSJE beats SJE Delta(II) at p@5", [3.0]),  # not yet at 3 seeds
    ]
    monkeypatch.setattr(report, "claim_diffs", lambda done: got)
    monkeypatch.setattr(
        families,
        "moe_verdicts",
        lambda done: [("MOE's starts depend on its settings", "", "", "fc7-bl 0/5", "confirmed")],
    )
    lines = report.readme_lines({})
    assert len(lines) == 3
    assert lines[1].startswith(
        "* 9 claims with a verdict: 2 confirmed, 5 refuted, "
        "1 inconclusive, 1 without a test (one deterministic model); 1 not yet run."
    )
    assert (
        "MH beats SH confirmed on FC7 (+13.5), inconclusive on FNE (+0.5); "
        "SOE beats SH refuted on FC7 and FNE (FC7 -4.2, FNE -4.7; not at a 95% t-test)"
    ) in lines[1]
    assert lines[2] == (
        "* FNE beats the one-layer embedding: refuted in 2 of 6 Table 2 "
        "pipelines (-26.0 rsum in MH to -29.0 in SH; see the caveats); on "
        "EfficientNet-Lite0 refuted "
        "(-16.0 ± 0.6)."
    )


def test_the_poe_refutation_is_explained_from_the_recorded_order_stats():
    settings = [f"{f}-{n}" for f in ("fc7", "fne") for n in families.MOE_SETTINGS]
    done = _moe_cells("moe", {**dict.fromkeys(settings, 5), "fc7-bl": 0, "fne-abs": 1})
    assert report.poe_explanation(done) == ""  # POE not yet run
    poe = _moe_cells("poe", {"fc7-bl": 0, "fne-abs": 3})
    _probe({k: c for k, c in poe.items() if c["variant"] == "fne-abs"}, flat=False, ratio=1.1)
    _probe({k: c for k, c in poe.items() if c["variant"] == "fc7-bl"}, flat=True, ratio=0.9994)
    done |= poe
    v = {t: verdict for t, _, _, _, verdict in families.moe_verdicts(done)}
    assert v["POE starts where MOE fails to"] == "refuted"
    why = report.poe_explanation(done)
    assert why.startswith("Where MOE failed, POE started fc7-bl 0/5 (MOE 0/5), fne-abs 3/5")
    assert "5 runs of POE that did not start (fc7-bl) had learned before it ended" in why
    assert "(0 of 5 in the L_S phase), reached dev rsum 50.0" in why
    assert "98.5% of dev's pairs free of order violation" in why
    assert "2 runs of POE that did not start (fne-abs) are not in that state" in why
    assert "A model L_S has trained did not keep L_M out of it." in why
    kept = done | _moe_cells("moe", {"fne-bl": 0}) | _moe_cells("poe", {"fne-bl": 5})
    why_kept = report.poe_explanation(kept)
    assert "Without abs at fne-bl, POE's runs all started" in why_kept
    assert "did not keep L_M out of it" not in why_kept
    assert f"**POE starts where MOE fails to: refuted.** {why}" in report.report(done)
    # unprobed runs are named, not counted as outside the flat state; a run that never
    # reached L_M is said so
    del done[families.Job("poe", "fc7-bl", 0, "").name]["order_stats"]
    done[families.Job("poe", "fc7-bl", 1, "").name]["phases"] = {"sum": 4}
    why = report.poe_explanation(done)
    assert "3 runs of POE that did not start (fc7-bl)" in why
    assert "1 run never reached L_M (counted as not started)." in why
    assert why.endswith("1 run not yet probed for the flat state (python "
                        "benchmarks/research/claims.py --add-order-stats).")  # fmt: skip


def test_violation_shares_match_a_pair_by_pair_count():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    img, txt = torch.randn(7, 5, generator=g), torch.randn(11, 5, generator=g)
    img[:3], txt[:4] = img[:3].abs(), -txt[:4].abs()  # some pairs free of violation
    for use_abs in (False, True):
        i, t = (img.abs(), txt.abs()) if use_abs else (img, txt)
        zero = sum(
            sum(max(0.0, float(t[m, d] - i[n, d])) ** 2 for d in range(5)) < 1e-6
            for n in range(7)
            for m in range(11)
        )
        got = scoring.violation_shares(img, txt, use_abs, chunk=2)
        assert got["zero_violation_pairs"] == round(zero / 77, 4)
        assert got["image_coords_nonneg"] == round(float((i >= 0).float().mean()), 4)
        assert got["caption_coords_nonpos"] == round(float((t <= 0).float().mean()), 4)
    assert scoring.violation_shares(img, txt, False)["zero_violation_pairs"] >= 12 / 77
    # images in the non-negative orthant, captions in the non-positive one: all flat
    flat = scoring.violation_shares(img.abs(), -txt.abs(), False)
    assert flat["zero_violation_pairs"] == 1.0
