"""docs/claims.md, the README's claims block and the fair protocol's table in
docs/benchmarks.md are what the recorded cells give today: each is made anew, in memory,
from the cells in the repository (``benchmarks/research/cells_first/``,
``benchmarks/research/cells_fair/``), and compared with the committed files. Nothing is
trained and nothing under ~/.cache is read. The prose under that table is typed, so only
its figures are checked: each margin must be one the claims give today, each gap to the
paper's figure one the table gives, each epoch span one a finished row's seeds ran, and
every other figure a mean docs/claims.md gives or a gap between two of the paper's rows.

If this fails, a cell was added or changed without regenerating the report, or the
report's code changed: run ``python benchmarks/research/claims.py`` and commit the
result."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from research import fair_protocol, fair_report, protocol, report  # noqa: E402


@pytest.fixture(scope="module")
def done() -> dict[str, dict]:
    return protocol.load_cells()


@pytest.fixture(scope="module")
def fair_done() -> dict[str, dict]:
    return protocol.load_cells(fair_protocol.CELLS)


def _first_difference(a: str, b: str) -> str:
    for k, (x, y) in enumerate(zip(a.splitlines(), b.splitlines(), strict=False), 1):
        if x != y:
            return f"line {k}:\n  committed: {x[:200]}\n  from cells: {y[:200]}"
    return f"lengths differ: {len(a.splitlines())} against {len(b.splitlines())} lines"


def test_claims_md_is_what_the_cells_give(done, fair_done):
    committed = (ROOT / "docs" / "claims.md").read_text()
    made = report.claims_text(done, fair_done)
    assert made == committed, "docs/claims.md is stale; " + _first_difference(committed, made)


def test_readme_block_is_what_the_cells_give(done, fair_done):
    committed = (ROOT / "README.md").read_text()
    made = report.with_readme_block(committed, done, fair_done)
    assert made is not None, "README.md has lost its claims markers"
    assert made == committed, "the README's claims block is stale; " + _first_difference(
        committed, made
    )


def test_a_changed_cell_shows_in_both(done):
    """The comparison can fail: one Table 2 cell's dev rsum moved by 10 changes the
    report and the README's headline (the row's mean moves)."""
    pick = protocol.chosen_recipe("fc7-sh", done)
    assert pick is not None, "the recorded cells no longer hold FC7-SH's chosen recipe"
    name = protocol.Cell("fc7-sh", *pick, 0).name
    changed = copy.deepcopy(done)
    changed[name]["dev"]["rsum"] += 10.0
    assert report.claims_text(changed) != report.claims_text(done)
    readme = (ROOT / "README.md").read_text()
    assert report.with_readme_block(readme, changed) != report.with_readme_block(readme, done)


def test_benchmarks_table_is_what_the_cells_give(fair_done):
    committed = (ROOT / "docs" / "benchmarks.md").read_text()
    made = report.with_benchmarks_block(committed, fair_done)
    assert made is not None, "docs/benchmarks.md has lost its fair-table markers"
    assert made == committed, "docs/benchmarks.md's fair table is stale; " + _first_difference(
        committed, made
    )


def test_a_changed_fair_cell_shows_in_the_benchmarks_table(fair_done):
    """The comparison can fail: one seed of FC7-SH's chosen recipe moved by 10 changes
    the row's mean in docs/benchmarks.md's table."""
    pick = fair_protocol.chosen("fc7-sh", fair_done)
    assert pick is not None, "the recorded cells no longer hold FC7-SH's chosen recipe"
    name = fair_protocol.FairCell("fc7-sh", pick, 0).name
    changed = copy.deepcopy(fair_done)
    changed[name]["dev"]["rsum"] += 10.0
    assert fair_report.benchmarks_table(changed) != fair_report.benchmarks_table(fair_done)
    committed = (ROOT / "docs" / "benchmarks.md").read_text()
    assert report.with_benchmarks_block(committed, changed) != committed


_FIGURE = re.compile(r"(?<![\d.])([-+]?)(\d+\.\d) ± (\d+\.\d)")


def _fair_prose(text: str) -> str:
    """The paragraphs that follow the fair table in docs/benchmarks.md, up to the next
    section: they are typed, not generated. Line breaks and runs of spaces become single
    spaces, so every check below holds wherever the hard wrap falls."""
    after = text.split(fair_report.BENCHMARKS_END, 1)[1]
    return " ".join(after.split("\n## ", 1)[0].split())


def _unquoted(prose: str, claims: str) -> list[str]:
    """The 'a ± b' margins of ``prose`` that no figure in ``claims`` matches (the sign
    too, where the prose gives one)."""
    quoted = _FIGURE.findall(claims)
    return [
        f"{s}{a} ± {b}"
        for s, a, b in _FIGURE.findall(prose)
        if not any(a == qa and b == qb and (not s or s == qs) for qs, qa, qb in quoted)
    ]


def test_the_fair_prose_quotes_figures_the_cells_give(done, fair_done):
    """Every 'a ± b' margin typed in the prose under the fair table is a claim's figure in
    docs/claims.md as made from the cells today, so a re-run cell that moves a margin
    cannot leave the prose quoting the old one."""
    prose = _fair_prose((ROOT / "docs" / "benchmarks.md").read_text())
    assert _FIGURE.findall(prose), (
        "the prose under docs/benchmarks.md's fair table quotes no margin"
    )
    missing = _unquoted(prose, report.claims_text(done, fair_done))
    assert not missing, (
        "docs/benchmarks.md's fair prose quotes margins no claim gives today: "
        + ", ".join(missing)
        + "; update the prose from docs/claims.md"
    )


def test_the_prose_check_can_fail():
    """A margin that moved, a flipped sign and a figure that only ends like a quoted one
    are each reported; the quoted ones are not."""
    prose = _fair_prose(
        f"x\n{fair_report.BENCHMARKS_END}\nby 4.6 ± 1.9, (-9.4 ± 3.3), 5.0 ± 1.6, (+9.4 ± 3.3)"
        " and 4.6 ± 1.8, 5.0 ±\n1.7\n## next 7.0 ± 1.0"
    )
    claims = "| -4.6 ± 1.9, t -2.4 | -9.4 ± 3.3 | +5.0 ± 1.5 | 14.6 ± 1.8 |"
    assert _unquoted(prose, claims) == ["5.0 ± 1.6", "+9.4 ± 3.3", "4.6 ± 1.8", "5.0 ± 1.7"]


_GAP = re.compile(r"(?<![\d.])(\d+(?:\.\d)?)\s+(above|below)\s+the\s+paper's\s+figure")
_TABLE_ROW = re.compile(r"^\|.*\| (\d+\.\d) ± \d+\.\d \| (\d+\.\d) \|$", re.M)


def _unsourced_gaps(prose: str, table: str) -> list[str]:
    """The "N above/below the paper's figure" of ``prose`` that no row of ``table`` gives
    (its dev mean less its paper figure, to the prose's precision and with its sign)."""
    gaps = [round(float(m) - float(p), 1) for m, p in _TABLE_ROW.findall(table)]
    out = []
    for n, side in _GAP.findall(prose):
        digits = 1 if "." in n else 0
        shown = {f"{abs(g):.{digits}f}" for g in gaps if (g > 0) == (side == "above")}
        if n not in shown:
            out.append(f"{n} {side}")
    return out


def test_the_fair_prose_gaps_to_the_paper_are_the_tables(fair_done):
    """Every "N above/below the paper's figure" under the fair table is some row's dev
    mean less its paper figure in the table as the cells give it today."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    prose = _fair_prose(text)
    table = "\n".join(fair_report.benchmarks_table(fair_done))
    assert _GAP.findall(prose), "the prose under the fair table gives no gap to the paper"
    missing = _unsourced_gaps(prose, table)
    assert not missing, (
        "docs/benchmarks.md's fair prose gives gaps to the paper no row gives today: "
        + ", ".join(missing)
    )


def test_the_gap_check_can_fail():
    """A gap that moved and one on the wrong side are reported; the same gap at either
    precision, and one that wraps onto the next line, are not."""
    table = "| a | r | 3 | 291.3 ± 2.1 | 248.9 |\n| b | r | 3 | 252.2 ± 5.1 | 260.9 |"
    prose = (
        "ends 42\nabove the paper's figure, 8.7 below the paper's figure, 42.4 above the"
        " paper's figure, 8.7 above the paper's figure, 43 above the\npaper's figure"
    )
    assert _unsourced_gaps(prose, table) == ["8.7 above", "43 above"]


_EPOCHS = re.compile(r"(?<![\d.])(\d+)\s+to\s+(\d+)\s+epochs(,\s+none\s+at\s+the\s+cap)?")


def _unsourced_epochs(prose: str, rows: list[list[dict]]) -> list[str]:
    """The "N to M epochs" of ``prose`` that are not the fewest and most epochs run by
    the seeds of one of ``rows`` (each a finished row's seed cells); one that adds "none
    at the cap" must also be a row none of whose seeds hit the epoch cap."""
    spans = {
        (
            min(c["epochs_run"] for c in cells),
            max(c["epochs_run"] for c in cells),
            any(c["hit_cap"] for c in cells),
        )
        for cells in rows
    }
    out = []
    for lo, hi, none_capped in _EPOCHS.findall(prose):
        if not any(
            (a, b) == (int(lo), int(hi)) and not (none_capped and capped) for a, b, capped in spans
        ):
            out.append(f"{lo} to {hi} epochs{none_capped}")
    return out


def test_the_fair_prose_epoch_spans_are_the_cells(fair_done):
    """Every "N to M epochs" under the fair table is the span of epochs that a finished
    row's seeds ran, and "none at the cap" holds where the prose says it."""
    prose = _fair_prose((ROOT / "docs" / "benchmarks.md").read_text())
    assert _EPOCHS.findall(prose), "the prose under the fair table gives no epoch span"
    missing = _unsourced_epochs(prose, [cells for *_, cells in fair_report.finished(fair_done)])
    assert not missing, (
        "docs/benchmarks.md's fair prose gives epoch spans no finished row ran: "
        + ", ".join(missing)
    )


def test_the_epoch_check_can_fail():
    """A span that moved, and "none at the cap" for a row that hit it, are reported; a
    span that wraps onto the next line is not."""

    def row(*runs: tuple[int, bool]) -> list[dict]:
        return [{"epochs_run": e, "hit_cap": c} for e, c in runs]

    rows = [
        row((37, False), (43, False), (40, False)),
        row((20, False), (60, True)),
        row((37, False), (43, True)),  # the same span, one seed capped: the first still holds
    ]
    prose = (
        "went on (37 to\n43 epochs, none at the cap), 37 to 44 epochs, 20 to 60 epochs"
        " and 20 to 60 epochs, none at the cap"
    )
    assert _unsourced_epochs(prose, rows) == [
        "37 to 44 epochs",
        "20 to 60 epochs, none at the cap",
    ]


# a setting ("dropout 0.2", "margin x0.5", either word capitalised) is a recipe's, not a
# result: not checked
_BARE = re.compile(
    r"(?<![\d.±])(?<!± )(?<![Dd]ropout )(?<![Mm]argin x)"
    r"([-+]?\d+\.\d)(?![\d.e]| ±| (?:above|below) the paper's figure)"
)


def _unsourced_figures(prose: str, claims: str, paper: dict[str, tuple]) -> list[str]:
    """The one-decimal figures of ``prose`` that are neither a margin nor a gap to the
    paper and that ``claims`` does not give as the mean of an 'a ± b' figure, nor is
    a difference of two of ``paper``'s rsums (the paper's own gaps between rows). It is a
    membership check: a figure is not tied to the claim or rows its sentence names, so a
    typed figure that happens to equal another claim's passes."""
    means = {a for _, a, _ in _FIGURE.findall(claims)}
    sums = [sum(p) for p in paper.values()]
    gaps = {f"{abs(a - b):.1f}" for a in sums for b in sums}
    return [f for f in _BARE.findall(prose) if f.lstrip("+-") not in means | gaps]


def test_the_fair_prose_other_figures_are_the_claims(done, fair_done):
    """The other figures typed under the fair table, such as the first protocol's results
    it compares with, are figures docs/claims.md gives today or the paper's own gaps."""
    prose = _fair_prose((ROOT / "docs" / "benchmarks.md").read_text())
    assert _BARE.findall(prose), "the prose under the fair table gives no other figure"
    missing = _unsourced_figures(prose, report.claims_text(done, fair_done), protocol.PAPER)
    assert not missing, (
        "docs/benchmarks.md's fair prose gives figures no claim gives today: " + ", ".join(missing)
    )


def test_the_figure_check_can_fail():
    """A moved figure is reported; margins, gaps, quoted means, the paper's own gaps
    between rows and a recipe's settings are not."""
    paper = {"a": (10.0, 20.0), "b": (10.0, 21.7)}
    claims = "| -28.7 ± 1.9, t -14.8 | 103.8 ± 11.5 |"
    prose = _fair_prose(
        f"{fair_report.BENCHMARKS_END}\n"
        "from 28.7 to 4.6 ± 1.9, started late (103.8), 45.9 above the paper's figure,"
        " 1.7 above SH, at lr 3.2e-3, dropout 0.2 and margin x0.5, and 28.8 or 103.9, 5.1"
        " above the first protocol's. Dropout\n0.5, margin\nx2.0, 12.0 above the\npaper's"
        " figure"
    )
    assert _unsourced_figures(prose, claims, paper) == ["28.8", "103.9", "5.1"]
