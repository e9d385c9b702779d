"""The seeds' claims, re-tested: a resumable grid of recorded cells, and the report
generated from them alone.

**Cells.** A cell is one training run: a row (a pipeline on a feature kind), a recipe
from the row's declared grid, and a seed. ``--run`` trains the cells that are missing, in
a fixed order, and records each one as ``benchmarks/research/cells_first/CELL.json`` (config,
overrides, seed, wall time, machine, git commit, and the metrics on the selection slice and on
dev). A finished cell is never re-run; a killed run resumes from its last epoch.

**Protocol (Table 2 of the journal paper, FC7/FNE x SH, MH, SOE, MOE, PH, POE).**

- Every row trains under one equal budget: ``EPOCHS`` epochs over every caption, the
  learning rate divided by 10 after ``DECAY`` epochs, a 512-d GRU over GloVe-initialised
  50-d word vectors (the paper's Flickr8k embeddings are 1,024- or 1,536-d over 1,024- or
  1,536-d word vectors, out of a 2-core CPU's reach; every row gets the same one), bf16
  autocast (measured at parity with fp32 in ``bf16_train.json``), the 2-crop ResNet-50
  store. On ResNet-50 the FC7 row is the one-layer pool5 embedding.
- Each row's recipe is chosen from ``GRID`` (learning rate x margin) on the 500 train
  images carved off as the selection slice (``data.val_from_train``), by the slice rsum
  of seed 0. Dev chooses nothing: it is scored once per cell, at the epoch the slice
  chose, and reported.
- The chosen recipe then runs with seeds 1 and 2 (and 3, 4 for the MOE stability claim).
- Collapse restarts are off: a run that never leaves the start is recorded as such.
- PH and POE (the sum-then-max curriculum) train with L_S until the slice rsum stops
  improving, and at the latest after ``SWITCH_BY`` epochs (half the budget), then reload
  the best L_S epoch and go on with L_M. Their first cells had no such bound and never
  switched in 12 epochs (the slice rsum was still rising), so they measured SH twice;
  those are kept in ``benchmarks/research/cells_first/superseded/`` and no verdict uses
  them. Each cell records the epochs it ran under each loss (``phases``). POE's L_M phase runs at a
  learning rate of 1e-4, as in the paper's Table 1 ("0.001 - 0.0001"); the grid's rate is
  its L_S phase's. PH keeps one rate, as the paper's does.

**The regression report (002).** Its text encoders on the order-embedding pipeline of
Vendrov et al., which the report starts from (its own similarity is the negative squared
euclidean distance, which it found no worse), at FC7-SOE's chosen recipe, 3 seeds each:
LSTM + GloVe, a stacked bidirectional GRU + GloVe, and a GRU with random word vectors;
GRU + GloVe is FC7-SOE. They run after the FC7 rows. The report trained on MSCOCO (VGG-19
fc7, 300-d word vectors) and tested on 1,000 COCO images, so only its directions compare.

**The other claims** are families of cells (``families.py``): tag ranking (003),
Word2VisualVec (004), the regression baseline and "baseline + weight" (002), FNE variants
(stage subsets, thresholds), the second backbone (EfficientNet-Lite0) and MOE's
instability (001 section 6). The runner takes the families' quick jobs first (minutes in
all), then Table 2, then the FNE variants, the second backbone, MOE's starts, and last the
Word2VisualVec runs with FNE targets (the slowest).

**Verdicts.** Each claim compares two series seed by seed (the same seeds): the mean
difference ``d`` (dev rsum, or the metric the claim names) and its standard error ``se``
(sample std / sqrt(n)). *Confirmed* if ``d > 2 se`` in the claimed direction, *refuted*
if ``d < -2 se``, else *inconclusive*; no verdict below 3 seeds. With 3 seeds that is a
lenient test (a two-sided t-test at 95% needs ``|d| > 4.30 se``), so the report shows
``t = d / se`` and names the verdicts that would not pass the stricter one. Each claim
shows the paper's own difference beside ours, so a claim the paper's numbers do not
support either is visible as such. A deterministic model
(the closed-form regression) gives the same figure at every seed: it gets no test, only
"one model: holds" or "one model: fails", which the README does not count as confirmed.

MOE's instability counts starts over 5 seeds at each of the paper's six settings: a run
started if the model it ends with (its last epoch) reaches dev rsum 10, the paper's
criterion. "MOE's starts depend on its settings" is
*confirmed* if one setting starts 5/5 and another at most 2/5, *refuted* if every setting
starts alike (within one run of five), else *inconclusive*. POE runs at the same six
settings, with L_M at the setting's learning rate (not Table 2's 1e-4); its last epoch
is an L_M one, so its L_S epochs, which start almost by construction, cannot stand in
for an L_M phase that collapsed. "POE starts where MOE fails to" looks at the settings where
MOE failed at least once: *confirmed* if POE starts 5/5 at each, *refuted* if at one of
them POE starts no more often than MOE, else *inconclusive*. Runs are 4 epochs (POE: 2
of each loss): a run that would start later counts as a failure here (the paper's runs
had up to 200 epochs).

Run:   python benchmarks/research/claims.py --run first [--max-cells N] [--only PREFIX]
Report: python benchmarks/research/claims.py   (writes docs/claims.md, docs/claims.png, README)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from . import families, papers
from .explanations import EXPLAIN, EXPLAIN_BIGRU, NOTE_PH, NOTE_POE

ROOT = Path(__file__).resolve().parents[2]
CELLS = Path(__file__).resolve().parent / "cells_first"  # this protocol's recorded cells
RUNS = Path("~/.cache/vsekit/claims/runs").expanduser()  # the cells' run folders
STORE = "~/.cache/vsekit/stores/flickr8k-resnet50-c2"

EPOCHS, DECAY = 12, 8
SWITCH_BY = EPOCHS // 2  # PH / POE: L_S for at most this many epochs, then L_M
PIPELINES = ("sh", "mh", "soe", "moe", "ph", "poe")
FEATURES = ("fc7", "fne")
# learning rate x margin (as a multiple of the paper's margin for the row's similarity)
GRID = [(lr, m) for lr in (2e-4, 1e-3) for m in (1.0, 0.5)]
SEEDS = (0, 1, 2)
MOE_SEEDS = (0, 1, 2, 3, 4)  # the instability claim counts failed starts over 5 seeds

# The regression report (002): its recurrent text encoders, compared on the order-embedding
# pipeline it builds on (Vendrov et al.), at FC7-SOE's chosen recipe, 3 seeds each.
# GRU + GloVe is FC7-SOE itself (the same cells); these rows change the text side only.
REG_TEXT = {
    "reg-lstm-glove": "{kind: lstm, word_dim: 50, embed_dim: 512, glove: true}",
    "reg-bigru-glove": "{kind: gru, word_dim: 50, embed_dim: 512, glove: true, num_layers: 2, "
    "bidirectional: true}",
    "reg-gru-random": "{kind: gru, word_dim: 50, embed_dim: 512, glove: false}",
}
REG_BASE = "fc7-soe"
PAPER = papers.TABLE2_RECALLS  # the rows' targets: rsum is the sum


@dataclass(frozen=True)
class Cell:
    """One training run of the grid."""

    row: str  # e.g. "fne-mh"
    lr: float
    margin_scale: float
    seed: int

    @property
    def curriculum(self) -> bool:
        return self.row.endswith(("-ph", "-poe"))

    @property
    def recipe(self) -> str:
        # the curriculum rows switch by half the budget at the latest (their cells before
        # that rule never switched: benchmarks/research/cells_first/superseded/)
        sw = f"-sw{SWITCH_BY}" if self.curriculum else ""
        return f"lr{self.lr:g}-m{self.margin_scale:g}{sw}"

    @property
    def name(self) -> str:
        return f"t2-{self.row}-{self.recipe}-s{self.seed}"

    @property
    def config(self) -> str:
        return f"configs/flickr8k-{REG_BASE if self.row in REG_TEXT else self.row}.yaml"

    def overrides(self) -> list[str]:
        base = paper_margin(REG_BASE if self.row in REG_TEXT else self.row)
        text = REG_TEXT.get(self.row, "{kind: gru, word_dim: 50, embed_dim: 512, glove: true}")
        return [
            f"data.store={STORE}",
            "data.crops=2",
            "data.val_from_train=500",
            f"model.text={text}",
            f"loss.margin={base * self.margin_scale:g}",
            f"train.lr={self.lr:g}",
            f"train.epochs={EPOCHS}",
            f"train.lr_decay_epochs={DECAY}",
            "train.captions=all",
            "train.max_minutes=null",
            "train.collapse_restart=false",
            "train.precision=bf16",
            "train.threads=1",
            f"train.seed={self.seed}",
            *([f"train.curriculum_sum_epochs={SWITCH_BY}"] if self.curriculum else []),
        ]


def paper_margin(row: str) -> float:
    """The paper's margin for the row (0.05 for order embeddings, else 0.2), from its
    config file."""
    import yaml

    return float(
        yaml.safe_load((ROOT / f"configs/flickr8k-{row}.yaml").read_text())["loss"]["margin"]
    )


def rows() -> list[str]:
    return [f"{f}-{p}" for f in FEATURES for p in PIPELINES]


def load_cells(folder: Path = CELLS) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def chosen_recipe(row: str, done: dict[str, dict]) -> tuple[float, float] | None:
    """The row's recipe by slice rsum of seed 0, once every recipe of the grid has run."""
    scored = []
    for lr, m in GRID:
        c = done.get(Cell(row, lr, m, 0).name)
        if c is None:
            return None
        scored.append((c["slice"]["rsum"], -GRID.index((lr, m)), (lr, m)))
    return max(scored)[2]


def pending(done: dict[str, dict]) -> list[Cell | families.Job]:
    """Everything still to run, in order: the families' cheap jobs (minutes each), the
    Table 2 cells, then the families' FNE-target jobs (the slowest)."""
    late = [j for j in families.jobs() if j.variant.endswith("-fne")]
    early = [j for j in families.jobs() if j not in late]
    return [
        *(j for j in early if j.name not in done),
        *pending_cells(done),
        *(j for j in families.late_jobs(done, table2_view(done)) if j.name not in done),
        *(j for j in late if j.name not in done),
    ]


def table2_view(done: dict[str, dict]) -> families.Table2:
    """What the families borrow from Table 2: chosen recipes and cell overrides."""
    return families.Table2(
        recipe=lambda row: chosen_recipe(row, done),
        overrides=lambda row, lr, m, seed: Cell(row, lr, m, seed).overrides(),
        grid=tuple(GRID),
    )


def pending_cells(done: dict[str, dict]) -> list[Cell]:
    """Table 2 cells still to run, in order, row by row: a row's grid at seed 0, then at
    once its chosen recipe's other seeds, so that the rows of the first claims reach 3
    seeds (and a verdict) before later rows start."""
    out: list[Cell] = []
    for r in rows():
        out += [Cell(r, lr, m, 0) for lr, m in GRID]
        pick = chosen_recipe(r, done)
        if pick is not None:
            seeds = MOE_SEEDS if r.endswith("-moe") else SEEDS
            out += [Cell(r, *pick, s) for s in seeds if s]
        if r == "fc7-poe":  # after the FC7 rows: the regression report's encoders
            base = chosen_recipe(REG_BASE, done)
            if base is not None:
                out += [Cell(reg, *base, s) for reg in REG_TEXT for s in SEEDS]
    return [c for c in out if c.name not in done]


@dataclass
class Claim:
    """``better`` beats ``worse`` in dev rsum, seed by seed (the claim's direction)."""

    title: str
    source: str
    better: str
    worse: str
    explain: str = ""
    note: str = ""  # a caveat shown whatever the verdict
    diffs: list[float] = field(default_factory=list)


def seed_rsums(row: str, done: dict[str, dict]) -> dict[int, float]:
    pick = chosen_recipe(REG_BASE if row in REG_TEXT else row, done)
    if pick is None:
        return {}
    out = {}
    for s in MOE_SEEDS:
        c = done.get(Cell(row, *pick, s).name)
        if c is not None:
            out[s] = c["dev"]["rsum"]
    return out


def verdict(diffs: list[float]) -> tuple[str, float, float]:
    """(verdict, mean, standard error) of paired differences (declared test above)."""
    n = len(diffs)
    if n < 3:
        return "not yet run", float("nan"), float("nan")
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) / math.sqrt(n)
    if max(diffs) == min(diffs):  # one model whatever the seed: no variance to test
        return ("one model: holds" if mean > 0 else "one model: fails"), mean, se
    if mean > 2 * se:
        return "confirmed", mean, se
    if mean < -2 * se:
        return "refuted", mean, se
    return "inconclusive", mean, se


def claims() -> list[Claim]:
    out = []
    for p in PIPELINES:
        out.append(Claim(f"FNE beats the one-layer embedding ({p.upper()})", "000, 001",
                         f"fne-{p}", f"fc7-{p}",
                         EXPLAIN["fne-moe" if p == "moe" else "fne"]))  # fmt: skip
    for f in FEATURES:
        out += [
            Claim(f"MH beats SH ({f.upper()})", "001 (VSE++)", f"{f}-mh", f"{f}-sh"),
            Claim(f"SOE beats SH ({f.upper()})", "001 (order embeddings)", f"{f}-soe",
                  f"{f}-sh", EXPLAIN["soe"]),
            # 001 section 5: "Final results of FC7-PH and FNE-PH are in general inferior to
            # those achieved by single training using max loss (FC7-MH, FNE-MH)"
            Claim(f"MH beats PH ({f.upper()})", "001 section 5", f"{f}-mh", f"{f}-ph",
                  note=NOTE_PH),
            Claim(f"POE beats MOE ({f.upper()})", "001 section 5 (MSCOCO)", f"{f}-poe", f"{f}-moe",
                  note=NOTE_POE[f]),
        ]  # fmt: skip
    out += [
        Claim("GRU + GloVe beats LSTM + GloVe", "002 Table 1", REG_BASE, "reg-lstm-glove"),
        Claim(
            "GRU + GloVe beats the stacked bidirectional GRU + GloVe",
            "002 section 3",
            REG_BASE,
            "reg-bigru-glove",
            EXPLAIN_BIGRU,
        ),
        Claim(
            "GloVe initialisation beats random word vectors (GRU)",
            "002 Table 1",
            REG_BASE,
            "reg-gru-random",
        ),  # fmt: skip
    ]
    return out


def row_cells(row: str, pick: tuple[float, float], done: dict[str, dict]) -> list[dict]:
    """The recorded cells of ``row`` at its chosen recipe ``pick``, by seed."""
    names = [Cell(row, *pick, s).name for s in MOE_SEEDS]
    return [done[n] for n in names if n in done]


def table2_cell(row: str, done: dict[str, dict], seed: int) -> dict | None:
    """The cell of ``row`` (a Table 2 row or a regression-report encoder) at its chosen
    recipe and ``seed``, or None."""
    pick = chosen_recipe(REG_BASE if row in REG_TEXT else row, done)
    return None if pick is None else done.get(Cell(row, *pick, seed).name)


class ClaimDiffs(NamedTuple):
    """A claim and its paired differences over SEEDS (``better - worse``)."""

    title: str
    source: str
    metric: str  # what is compared
    diffs: list[float]
    explain: str  # shown if it does not hold
    note: str  # a caveat shown whatever the verdict
    paper: str = "—"  # the paper's own difference (its metric named if it is not ours)


def paper_difference(better: str, worse: str) -> str:
    """The paper's ``better - worse``: Table 2's rsums, or the regression report's t2i R@1."""
    if better in PAPER and worse in PAPER and better not in REG_TEXT and worse not in REG_TEXT:
        return f"{sum(PAPER[better]) - sum(PAPER[worse]):+.1f}"
    b, w = papers.REPORT_TABLE1.get(better), papers.REPORT_TABLE1.get(worse)
    if not (b and w):
        return "—"
    note = " (random vectors: Vendrov et al.'s GRU)" if "reg-gru-random" in (better, worse) else ""
    return f"{b[0] - w[0]:+.1f} t2i R@1{note}"


# Student's t, 0.975 quantile, by degrees of freedom: the stricter test the report names
T975 = {2: 4.303, 3: 3.182, 4: 2.776}


def claim_diffs(done: dict[str, dict]) -> list[ClaimDiffs]:
    """Every claim, Table 2's and the families', with its paired differences."""
    out = []
    for c in claims():
        a, b = seed_rsums(c.better, done), seed_rsums(c.worse, done)
        diffs = [a[s] - b[s] for s in sorted(set(a) & set(b) & set(SEEDS))]
        paper = paper_difference(c.better, c.worse)
        out.append(ClaimDiffs(c.title, c.source, "dev rsum", diffs, c.explain, c.note, paper))
    paper = {row: sum(v) for row, v in PAPER.items()}
    for c in families.family_claims(table2_cell, tuple(GRID), paper):
        pairs = [(c.better(done, s), c.worse(done, s)) for s in SEEDS]
        diffs = [x - y for x, y in pairs if x is not None and y is not None]
        out.append(ClaimDiffs(c.title, c.source, c.metric, diffs, c.explain, c.note, c.paper))
    return out
