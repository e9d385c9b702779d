"""The fair protocol's part of docs/claims.md, from its recorded cells alone: each row's
search so far, its chosen recipe and seeds, whether the chosen learning rate is inside
what was tried, the claims under this protocol (the FNE's, and the first protocol's
pipeline claims re-tested), and MOE's instability counted at its budget. Empty until its
first cell."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from . import fair_protocol as fair
from . import families, papers
from .explanations import FAIR
from .protocol import PAPER, T975, verdict


def _mean_std(xs: list[float]) -> str:
    """Mean ± sample std; one seed has no spread to show, so it prints the value alone."""
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return f"{m:.1f}"
    sd = (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5
    return f"{m:.1f} ± {sd:.1f}"


def lr_inside(row: str, pick: fair.Recipe, done: dict[str, dict]) -> str:
    """Whether both half-decade neighbours of the chosen learning rate ran (at the chosen
    recipe's other settings) and lost: "yes", or which edge it sits at; for a row where no
    rate left its start, down to the bound, that instead."""
    score = fair.slice_score(done, row)
    own = score(pick)
    if own is not None and not fair.left_start(own):
        return "none left its start"
    below, above = (score(replace(pick, k=pick.k + d)) for d in (-1, 1))
    if below is not None and above is not None:
        return "yes"
    lo, hi = fair.LR_BOUNDS
    return "at the bound" if pick.k in (lo, hi) else "no (edge)"


def row_cells(row: str, pick: fair.Recipe, done: dict[str, dict]) -> list[dict]:
    """The recorded seeds of ``row`` at ``pick``, but a seed the cap stopped, which is to
    run on (``fair.runs_on``): not yet a result."""
    names = [fair.FairCell(row, pick, s).name for s in fair.seeds(row)]
    return [done[n] for n in names if n in done and not fair.runs_on(done[n])]


def seed_rsums(row: str, done: dict[str, dict]) -> dict[int, float]:
    pick = fair.chosen(row, done)
    if pick is None:
        return {}
    return {c["seed"]: c["dev"]["rsum"] for c in row_cells(row, pick, done)}


def split(done: dict[str, dict]) -> tuple[dict[str, dict], dict[str, dict]]:
    """``(Table 2 cells, instability runs)``: the latter record their ``family``."""
    t2 = {n: c for n, c in done.items() if "family" not in c}
    return t2, {n: c for n, c in done.items() if n not in t2}


# a feature's name in the report, and what its input is
ROW_NAMES = {"fc7": ("FC7", "pool5, L2"), "fne": ("FNE", "ternary"),
             "fnef": ("float FNE", "standardised"),
             "p5f": ("pool5 float", "pool5's block, standardised")}  # fmt: skip

CLAIMS = [
    *((f"FNE beats the one-layer embedding ({p.upper()}){FAIR}", f"fne-{p}", f"fc7-{p}")
      for p in fair.PIPELINES),
    *((f"Float FNE beats the one-layer embedding ({p.upper()}){FAIR}", f"fnef-{p}",
       f"fc7-{p}") for p in fair.PIPELINES),
    *((f"Ternary FNE beats float FNE ({p.upper()}){FAIR}", f"fne-{p}",
       f"fnef-{p}") for p in fair.PIPELINES),
    # the first protocol's pipeline claims, each row now tuned and trained to convergence
    *((f"{a.upper()} beats {b.upper()} ({f.upper()}){FAIR}", f"{f}-{a}", f"{f}-{b}")
      for f in ("fc7", "fne") for a, b in (("mh", "sh"), ("soe", "sh"), ("mh", "ph"),
                                           ("poe", "moe"))),
    # the amendment of 2026-12-05: what standardising costs and what the other blocks add
    *((f"L2-normalised pool5 beats pool5's block as standardised floats ({p.upper()}){FAIR}",
       f"fc7-{p}", f"p5f-{p}") for p in fair.STANDARDISED_POOL5),
    *((f"Float FNE beats pool5's block as standardised floats ({p.upper()}){FAIR}",
       f"fnef-{p}", f"p5f-{p}") for p in fair.STANDARDISED_POOL5),
]  # fmt: skip


def claim_rows(done: dict[str, dict]) -> list[tuple[str, str, str, str]]:
    """``(title, ours, seeds or runs, verdict)`` of every claim under this protocol: the
    rows' comparisons seed by seed (the first protocol's test), then the instability
    claims (the first protocol's rules)."""
    t2, inst = split(done)
    out = []
    for title, better, worse in CLAIMS:
        a, b = seed_rsums(better, t2), seed_rsums(worse, t2)
        diffs = [a[s] - b[s] for s in sorted(set(a) & set(b) & set(fair.SEEDS))]
        v, m, se = verdict(diffs)
        fig = "—" if v == "not yet run" else f"{m:+.1f} ± {se:.1f}"
        if v == "not yet run" and diffs:  # some seeds paired, not yet the three it needs
            v += f" (needs {len(fair.SEEDS)} seeds)"
        fig += f", t {m / se:+.1f}" if fig != "—" and se > 0 else ""
        if v in ("confirmed", "refuted") and abs(m) <= T975[len(diffs) - 1] * se:
            v += " (not at a 95% t-test)"
        out.append((title, fig, str(len(diffs)), v))
    shifted = {c.name for c in fair.shift_cells()}  # by name, as every count reads them
    plain = {n: c for n, c in inst.items() if n not in shifted}
    for title, _, _, fig, v in families.moe_verdicts(plain, inst_name):
        runs = sum(c["family"] == ("moe" if title.startswith("MOE") else "poe")
                   for c in plain.values())  # fmt: skip
        out.append((f"{title}{FAIR}", fig, n_runs(runs), v))
    return out + shift_claims(inst)


def shift_name(family: str, variant: str, seed: int) -> str:
    return fair.InstCell(family, variant, seed, shift=True).name


def shift_claims(inst: dict[str, dict]) -> list[tuple[str, str, str, str]]:
    """The amendment of 2026-12-06: MOE on the FNE's inputs plus one against the centred
    runs of the same setting and seeds, by the rule of "POE starts where MOE fails to"."""
    out = []
    for v in fair.SHIFT_INST:
        title = (f"MOE starts on the FNE's inputs plus one, where it fails on the centred "
                 f"inputs ({inst_label(v, 'moe')}){FAIR}")  # fmt: skip
        runs = sum(shift_name("moe", v, s) in inst for s in fair.MOE_SEEDS)
        centred = families.moe_starts(inst, "moe", v, inst_name)
        shifted = families.moe_starts(inst, "moe", v, shift_name)
        n = len(fair.MOE_SEEDS)
        if centred is None or shifted is None:
            fig, verdict_ = "—", "not yet run"
        elif centred == n:
            fig, verdict_ = f"centred {centred}/{n}", "not testable here"
        else:
            fig = f"{v}+1 {shifted}/{n} (centred {centred}/{n})"
            verdict_ = ("confirmed" if shifted == n else "refuted" if shifted <= centred
                        else "inconclusive")  # fmt: skip
        out.append((title, fig, n_runs(runs), verdict_))
    return out


def verdicts(done: dict[str, dict]) -> dict[str, str]:
    """Each claim's verdict under this protocol, by title (for the explanations that
    these claims test, :data:`explanations.TESTED_BY`)."""
    return {title: v.split(" (")[0] for title, _, _, v in claim_rows(done)}


def readme_line(done: dict[str, dict]) -> str | None:
    """The README's line on this protocol (None until its first cell): the rows whose
    search is over, each against the paper's rsum, and the FNE claims with a verdict."""
    t2, _ = split(done)
    if not t2:
        return None
    picked = {}
    for row in fair.rows():
        pick = fair.chosen(row, t2)
        if pick is not None and (cells := row_cells(row, pick, t2)):
            picked[row] = cells

    def fig(row: str) -> str:
        xs = [c["dev"]["rsum"] for c in picked[row]]
        feature, pipeline = row.split("-")
        name = f"{ROW_NAMES[feature][0]}-{pipeline.upper()}"
        paper = f" (paper {sum(PAPER[row]):.1f})" if row in PAPER else ""
        seeds = f"{len(xs)} of {len(fair.seeds(row))} seeds"
        return f"{name} {sum(xs) / len(xs):.1f}{paper}, {seeds}"

    rows = "; ".join(fig(r) for r in picked) or "none yet"
    by_claim: dict[str, list[str]] = {}  # "FNE beats ... (SH)" -> "FNE beats ...": ["SH ..."]
    for t, _, _, v in claim_rows(done):
        base, _, where = t.removesuffix(FAIR).rpartition(" (")
        ran = not v.startswith("not yet run")
        if ran and base and not t.startswith(("MOE", "POE starts")):
            by_claim.setdefault(base, []).append(f"{where.rstrip(')')} {v}")
    said = [f"{base}: {', '.join(vs)}" for base, vs in by_claim.items()]
    return (f"* Under the fair protocol (each row's learning rate, input normalisation, "
            f"dropout and margin chosen on the slice, trained to convergence): "
            f"{len(picked)} of {len(fair.rows())} rows searched, dev rsum {rows}. Claims with "
            f"a verdict: {'; '.join(said) or 'none yet (they need three seeds)'}.")  # fmt: skip


def n_runs(n: int) -> str:
    """``"1 run"``, ``"n runs"``."""
    return f"{n} run" if n == 1 else f"{n} runs"


def inst_name(family: str, variant: str, seed: int) -> str:
    return fair.InstCell(family, variant, seed).name


def inst_section(inst: dict[str, dict], first: dict[str, dict]) -> list[str]:
    """MOE's instability at this protocol's budget: per setting, the runs that started,
    beside the first protocol's 4-epoch count (from ``first``, its cells) and the
    paper's (the two claims are in :func:`claim_rows`)."""
    lines = ["", "### MOE's instability at this budget", "",
             "The first protocol's six settings and five seeds, each run stopped by the slice "
             f"(patience {fair.PATIENCE_ORDER_MAX}, one decay, cap {fair.EPOCH_CAP} epochs) "
             "instead of after 4 epochs; POE runs L_S until the slice stops improving, then "
             f"L_M at the same rate. A run started if its last model reaches dev rsum "
             f"{families.STARTED:g}.", "",
             "| setting | lr | margin | abs | MOE started | MOE epochs run | in 4 epochs | "
             "paper | POE started |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for feat in ("fc7", "fne"):
        for k, (lr, margin, use_abs) in families.MOE_SETTINGS.items():
            v = f"{feat}-{k}"
            runs = [inst[n] for s in fair.MOE_SEEDS if (n := inst_name("moe", v, s)) in inst]
            moe = families.moe_starts(inst, "moe", v, inst_name)
            poe = families.moe_starts(inst, "poe", v, inst_name)
            old = families.moe_starts(first, "moe", v)
            spans = sorted(c["epochs_run"] for c in runs)
            span = "—" if not spans else f"{spans[0]}-{spans[-1]}"
            lines.append(
                f"| {inst_label(v, 'moe')} | {lr:g} | {margin:g} | {'yes' if use_abs else 'no'}"
                f" | {f'{moe}/5' if moe is not None else f'— ({len(runs)} of 5 run)'} | {span} | "
                f"{'—' if old is None else f'{old}/5'} | {papers.MOE_STARTS[v]}/5 | "
                f"{'—' if poe is None else f'{poe}/5'} |"
            )
    return lines + shift_lines(inst) + inst_comparison(inst, first)


def shift_lines(inst: dict[str, dict]) -> list[str]:
    """The runs on the FNE's inputs plus one (the amendment of 2026-12-06), per setting."""
    parts = []
    for v in fair.SHIFT_INST:
        runs = [inst[n] for s in fair.MOE_SEEDS if (n := shift_name("moe", v, s)) in inst]
        n = families.moe_starts(inst, "moe", v, shift_name)
        up = sum(families.started(c) for c in runs)
        spans = sorted(c["epochs_run"] for c in runs)
        of = len(fair.MOE_SEEDS)
        count = (f"{n} of {of} started" if n is not None
                 else f"{len(runs)} of {of} run so far" + (f", {up} of them started"
                                                            if runs else ""))  # fmt: skip
        span = ("" if not spans else f", {spans[0]} epochs run" if spans[0] == spans[-1]
                else f", {spans[0]} to {spans[-1]} epochs run")  # fmt: skip
        parts.append(f"at {inst_label(v, 'moe')}'s setting and seeds, {count}{span}")
    return ["", f"On the FNE's inputs plus one (`{fair.SHIFTED['fne']}`, the amendment of "
            f"2026-12-06): {'; '.join(parts)}."]  # fmt: skip


def inst_label(variant: str, family: str) -> str:
    """A setting as the instability table's rows name it: ``fc7-bl``, MOE: FC7-MOE-bl."""
    feature, setting = variant.split("-", 1)
    return f"{feature.upper()}-{family.upper()}-{setting}"


def inst_comparison(inst: dict[str, dict], first: dict[str, dict]) -> list[str]:
    """Once a family's 30 runs are in: the settings whose start count differs from the
    paper's Table 5 by ``families.PAPER_GAP`` runs or more (MOE only: the paper counts
    MOE's; the threshold :func:`report.moe_note` uses) and those whose start count differs
    from the first protocol's 4-epoch count (from ``first``, its cells), so that a verdict
    on the claims does not hide which settings start."""
    out: list[str] = []
    for family in ("moe", "poe"):
        here = {v: families.moe_starts(inst, family, v, inst_name) for v in papers.MOE_STARTS}
        if any(n is None for n in here.values()):
            continue
        name = family.upper()
        if family == "moe":
            paper = papers.MOE_STARTS
            gap = families.PAPER_GAP
            differ = [f"{inst_label(v, family)} {n}/5 (paper {paper[v]}/5)" for v, n in here.items()
                      if abs(n - paper[v]) >= gap]  # fmt: skip
            out.append(
                f"{name}'s start counts differ from the paper's Table 5 by {gap} runs or "
                f"more at {', '.join(differ)}." if differ
                else f"No setting's {name} start count differs from the paper's Table 5 by "
                f"{gap} runs or more."
            )  # fmt: skip
        old = {v: families.moe_starts(first, family, v) for v in papers.MOE_STARTS}
        if any(n is None for n in old.values()):
            continue
        moved = [f"{inst_label(v, family)} {n}/5 (4 epochs: {old[v]}/5)" for v, n in here.items()
                 if n != old[v]]  # fmt: skip
        out.append(
            f"{name}'s start counts differ from the first protocol's 4-epoch counts at "
            f"{', '.join(moved)}." if moved
            else f"{name}'s start counts equal the first protocol's 4-epoch counts at every "
            "setting."
        )  # fmt: skip
    return ["", " ".join(out)] if out else []


def gpu_of(cell: dict) -> str | None:
    """The GPU a cell trained on, if any."""
    return cell.get("machine", {}).get("gpu")


def gpu_mark(cell: dict) -> str:
    """`` (GPU name)`` for a cell trained on a GPU, else nothing."""
    gpu = gpu_of(cell)
    return f" ({gpu})" if gpu else ""


def kernel_mark(cell: dict) -> str:
    """`` (bf16 in fp32 GEMMs)`` for a cell whose bf16 GEMMs ran in fp32 kernels, on a
    CPU without AVX512_BF16 (``vsekit.lab.train.bf16``), `` (bf16 partly in fp32
    GEMMs)`` for one resumed across such CPUs and others, else nothing."""
    marks = {"fp32": " (bf16 in fp32 GEMMs)", "mixed": " (bf16 partly in fp32 GEMMs)"}
    return marks.get(cell.get("bf16_gemms", ""), "")


def cpu_name(cell: dict) -> str:
    """The CPU model a cell trained on, without trademark marks ("" if not recorded)."""
    return cell.get("machine", {}).get("cpu", "").replace("(R)", "").replace("(TM)", "")


def cpu_of(cell: dict) -> str:
    """:func:`cpu_name` and the cell's :func:`kernel_mark` (one model name covers CPUs with
    and without AVX512_BF16)."""
    return cpu_name(cell) + kernel_mark(cell)


def cpu_column(cell: dict) -> str:
    """The cells table's CPU: :func:`cpu_name`, and ", no AVX512_BF16" where the cell's
    recorded flags lack it (the same model name covers both kinds); — if not recorded."""
    flags = cell.get("machine", {}).get("cpu_flags")
    lacks = flags is not None and "AVX512BF16" not in flags
    return (cpu_name(cell) + (", no AVX512_BF16" if lacks else "")) or "—"


def cpu_times(cell: dict) -> list[float]:
    """A CPU cell's epoch times (none for a GPU cell); a null epoch time was not one
    trainer's (the cell's ``amended`` says why) and is left out."""
    if gpu_of(cell):
        return []
    return [t for t in cell.get("epoch_seconds", []) if t is not None]


def fastest_epochs(cells: list[dict], label: bool) -> str:
    """The fastest epoch of ``cells`` trained on a CPU, per CPU model (named when
    ``label``: CPUs differ from machine to machine, so times compare within one model)."""
    by_cpu: dict[str, list[float]] = {}
    for c in cells:
        by_cpu.setdefault(cpu_of(c), []).extend(cpu_times(c))
    times = {cpu: min(ts) for cpu, ts in sorted(by_cpu.items()) if ts}
    if not times:
        return "—"
    if not label:
        return f"{min(times.values()):.0f} s"
    return "; ".join(f"{t:.0f} s ({cpu or 'CPU not recorded'})" for cpu, t in times.items())


# the store's files each feature reads (``runner.store_digest``'s keys)
READS = {"fc7": ("pooled.f32",), "fne": ("fne.i8",),
         "fnef": ("pooled.f32", "fne_stats.safetensors")}  # fmt: skip
READS["p5f"] = READS["fnef"]  # a block of the same standardised activations


def store_id(cell: dict) -> str:
    """A short name for the store files a cell read: the ones its feature reads (so that a
    copy of the FNE's bytes on another machine, ``portable.py``, names the same store);
    — where the cell predates the record."""
    digests = cell.get("store_sha256") or {}
    read = {k: digests[k] for k in READS[cell["row"].split("-")[0]] if k in digests}
    if not read:
        return "—"
    return hashlib.sha256(json.dumps(read, sort_keys=True).encode()).hexdigest()[:7]


BENCHMARKS_BEGIN = "<!-- fair table: begin -->"
BENCHMARKS_END = "<!-- fair table: end -->"


def _lr(lr: float) -> str:
    """3.16e-3 -> "3.2e-3", 1e-3 -> "1e-3"."""
    mantissa, exponent = f"{lr:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


def recipe_words(pick: fair.Recipe) -> str:
    """A chosen recipe in words, e.g. "lr 3.2e-3, LayerNorm, dropout 0.5" (the margin
    only when it is not the paper's)."""
    words = [f"lr {_lr(pick.lr)}"]
    words += ["LayerNorm"] if pick.norm == "layernorm" else []
    words += ["shifted +1"] if pick.norm == "shift" else []
    words += [f"dropout {pick.dropout:g}" if pick.dropout else "no dropout"]
    words += [f"margin x{pick.margin:g}"] if pick.margin != 1 else []
    return ", ".join(words)


def finished(done: dict[str, dict]) -> list[tuple[str, fair.Recipe, list[dict]]]:
    """``(row, chosen recipe, its seeds' cells)`` of every row whose search is over and
    whose seeds have all run, in the grid's order."""
    t2, _ = split(done)
    out = []
    for row in fair.rows():
        pick = fair.chosen(row, t2)
        cells = row_cells(row, pick, t2) if pick is not None else []
        if cells and len(cells) == len(fair.seeds(row)):
            out.append((row, pick, cells))
    return out


def benchmarks_table(done: dict[str, dict]) -> list[str]:
    """docs/benchmarks.md's table of the fair protocol (between its markers): every
    :func:`finished` row with its chosen recipe and dev rsum (mean ± std over the seeds)."""
    lines = ["| row | recipe chosen on the slice | seeds | dev rsum | paper |",
             "|---|---|---|---|---|"]  # fmt: skip
    for row, pick, cells in finished(done):
        feature, pipeline = row.split("-")
        name, what = ROW_NAMES[feature]
        paper = f"{sum(PAPER[row]):.1f}" if row in PAPER else "—"
        lines.append(f"| {name}-{pipeline.upper()} ({what}) | {recipe_words(pick)} | "
                     f"{len(cells)} | {_mean_std([c['dev']['rsum'] for c in cells])} | "
                     f"{paper} |")  # fmt: skip
    return lines


SUPERSEDED = fair.CELLS / "superseded"


def superseded_lines(done: dict[str, dict]) -> list[str]:
    """A line on this protocol's cells recorded under a rule an amendment replaced
    (``cells_fair/superseded/``), if any, and whether each has run again (a cell of
    its name in ``done``)."""
    names = sorted(p.stem for p in SUPERSEDED.glob("*.json"))
    if not names:
        return []
    again = [n for n in names if n in done]
    if len(names) > 1:
        rerun = f"{len(again)} of them {'has' if len(again) == 1 else 'have'} run again"
    else:
        rerun = "it has run again" if again else "it runs again"
    return ["", f"Superseded: {len(names)} cell{'s' if len(names) > 1 else ''} of this "
            f"protocol (`benchmarks/research/cells_fair/superseded/`: "
            f"{', '.join(names)}), recorded under a rule that an amendment in the "
            f"protocol's docstring replaced; {rerun} under the new one. No verdict uses "
            f"{'them' if len(names) > 1 else 'it'}."]  # fmt: skip


def _rest_words(r: fair.Recipe) -> str:
    """A recipe in words without its learning rate (a column of :func:`grid_tables`)."""
    return recipe_words(r).split(", ", 1)[1]


def _grid_marks(c: dict) -> str:
    """What :func:`grid_tables` notes after a cell's figures: the cap, and no start."""
    marks = ["runs on"] if fair.runs_on(c) else ["cap"] if c["hit_cap"] else []
    marks += [] if fair.left_start(c["slice"]["rsum"]) else ["not started"]
    return f" ({', '.join(marks)})" if marks else ""


def grid_tables(done: dict[str, dict]) -> list[str]:
    """For each row, every seed-0 cell's slice rsum, dev rsum after it, by learning rate
    (lines, ascending) and the rest of its recipe (columns: input, then dropout, then
    margin, each in the protocol's order). In each line the best slice rsum of the cells
    that left their start (``fair.left_start``) is in bold where more than one cell ran at
    that rate, so which input, dropout or margin leads at each rate reads off the table.
    Marks: "runs on" (``fair.runs_on``: the first cap stopped it after its start, its
    figures still to change), "cap" (the cap stopped it for good), "not started"."""
    t2, _ = split(done)
    out: list[str] = []
    for row in fair.rows():
        feature, pipeline = row.split("-")
        mine = [c for c in t2.values() if c["row"] == row and c["seed"] == 0]
        if not mine:
            continue
        by: dict[tuple[int, tuple[str, float, float]], dict] = {}  # (lr exponent, rest) -> cell
        for c in mine:
            r = fair.Recipe.from_dict(c["recipe"])
            by[r.k, (r.norm, r.dropout, r.margin)] = c
        order = (*fair.NORMS[feature], "shift")
        cols = sorted({rest for _, rest in by},
                      key=lambda x: (order.index(x[0]), x[1], -x[2]))  # fmt: skip
        words = [_rest_words(fair.Recipe(0, *rest)) for rest in cols]
        out += ["", f"**{ROW_NAMES[feature][0]}-{pipeline.upper()}**", "",
                "| lr | " + " | ".join(words) + " |", "|---" * (len(cols) + 1) + "|"]  # fmt: skip
        for k in sorted({k for k, _ in by}):
            here = {col: by[k, col] for col in cols if (k, col) in by}
            started = [c["slice"]["rsum"] for c in here.values()
                       if fair.left_start(c["slice"]["rsum"])]  # fmt: skip
            top = max(started) if started and len(here) > 1 else None
            cells = []
            for col in cols:
                c = here.get(col)
                if c is None:
                    cells.append("")
                    continue
                figure = f"{c['slice']['rsum']:.1f}"
                figure = f"**{figure}**" if c["slice"]["rsum"] == top else figure
                cells.append(f"{figure} / {c['dev']['rsum']:.1f}{_grid_marks(c)}")
            out.append(f"| {_lr(fair.Recipe(k).lr)} | " + " | ".join(cells) + " |")
    if not out:
        return []
    return ["", "### Every row's seed-0 cells by learning rate", "",
            "Slice rsum / dev rsum of each seed-0 cell, by learning rate and the rest of "
            "its recipe; the slice selects, dev is scored once per cell and chooses nothing. "
            "Each figure is one seed's: a difference of a few points between two cells is "
            "within what the seeds of one recipe spread (the rows' ± above). In each line "
            "the best slice rsum, where more than one cell ran at that rate, is in bold, "
            "among the cells that left their start. Marks: *runs on*, stopped by the first "
            f"cap ({fair.EPOCH_CAP} epochs) after it left its start, so it runs on to "
            f"{fair.EXTENDED_CAP} and its figures will change; *cap*, stopped by a cap for "
            f"good; *not started*, its slice rsum never reached {fair.STARTED_SLICE:g} (the "
            "bar for a run that left its start; below it the figure is noise near chance). "
            "The *shifted +1* columns (MOE and POE on the FNE) are the input the amendment of "
            "2026-11-28 added; the MOE-start section of docs/benchmarks.md counts them apart "
            "from the unshifted runs. Where a PH cell's best epoch fell in its L_S phase its "
            "figures equal the SH cell's of the same recipe.", *out]  # fmt: skip


def section(done: dict[str, dict], first: dict[str, dict] | None = None) -> list[str]:
    """Markdown lines for docs/claims.md (none while no fair cell is recorded);
    ``first``: the first protocol's cells, for the instability counts' comparison."""
    if not done:
        return []
    t2, inst = split(done)
    lines = ["", "## Table 2 under the fair protocol (issue 41)", "",
             "Declared in the docstring of `benchmarks/research/fair_protocol.py` before its "
             "first cell, its cells in `benchmarks/research/cells_fair/`: each row searches "
             "its learning rate until the best is inside the grid (for the FNE rows per input "
             "normalisation), then dropout and margin, then the learning rate again, on the "
             "slice at seed 0; every run stops early on the slice (reduce on plateau, then "
             f"stop; cap {fair.EPOCH_CAP} epochs, and a run the cap stopped after it left "
             f"its start runs on to {fair.EXTENDED_CAP}). Rows appear in the order the grid runs "
             "them; a row's figures are its chosen recipe's, once its search is over.", "",
             "A row's cost is read from its fastest epoch over all its cells (one core; "
             "each epoch is timed, but two runners share the machine's two cores and other "
             "work shared them at times, so a run's total time says more about the machine "
             "than about the row), per CPU model where the grid ran on more than one (CPUs "
             "differ from machine to machine, so epoch times compare within one model); its "
             "chosen recipe's epochs run, over the seeds, give the rest. Cells that trained "
             "on a borrowed GPU machine (`portable.py`; the cells table marks them, and a "
             "GPU's bf16 arithmetic is not a CPU's) count for the search and the seeds, not "
             "for the fastest epoch.", *superseded_lines(done), "",
             "| row | seed-0 cells | best on the slice so far | chosen recipe | lr inside "
             "the grid | seeds | dev rsum, mean ± std | paper rsum | fastest epoch | epochs "
             "run |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    top = []  # rows whose best recipe so far has the most dropout the grid offers
    label = len({cpu_of(c) for c in t2.values() if cpu_times(c)}) > 1
    for row in fair.rows():
        score = fair.slice_score(done, row)
        mine = [c for c in t2.values() if c["row"] == row and c["seed"] == 0]
        if not mine:
            continue
        best = max(mine, key=lambda c: c["slice"]["rsum"])
        r = best["recipe"]
        if r["img_dropout"] == max(fair.DROPOUTS):
            top.append(row.upper())
        so_far = (f"lr {r['lr']:g}, {r['img_norm']}, dropout {r['img_dropout']:g}, margin "
                  f"x{r['margin_scale']:g}: {best['slice']['rsum']:.1f}")  # fmt: skip
        pick = fair.chosen(row, done)
        paper = f"{sum(PAPER[row]):.1f}" if row in PAPER else "—"
        fastest = fastest_epochs([c for c in t2.values() if c["row"] == row], label)
        if pick is None:
            todo = len(fair.search(row, score)[0])
            lines.append(f"| {row.upper()} | {len(mine)} ({todo} next) | {so_far} | searching "
                         f"| | | | {paper} | {fastest} | |")  # fmt: skip
            continue
        cells = row_cells(row, pick, done)
        epochs = sorted(c["epochs_run"] for c in cells)
        lines.append(f"| {row.upper()} | {len(mine)} | {so_far} | {pick.tag} | "
                     f"{lr_inside(row, pick, done)} | {len(cells)} | "
                     f"{_mean_std([c['dev']['rsum'] for c in cells])} | {paper} | {fastest} | "
                     f"{epochs[0]}-{epochs[-1]} |")  # fmt: skip
    if top:
        lines += ["", f"Input dropout is chosen from a fixed grid "
                  f"({', '.join(f'{d:g}' for d in fair.DROPOUTS)}), which the protocol does not "
                  f"grow as it grows the learning rate's: {', '.join(top)} sit at its top, so "
                  "more dropout is untried for them."]  # fmt: skip
    lines += ["", "| claim (fair protocol) | ours: better - worse (mean ± se, t) | seeds | "
              "verdict |", "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {t} | {fig} | {n} | {v} |" for t, fig, n, v in claim_rows(done)]
    lines += grid_tables(done)
    if inst:
        lines += inst_section(inst, first or {})
    lines += ["", "### The fair protocol's cells", "",
              "An instability run's dev rsum is its last model's, which it is judged on.", "",
              "The store column names the store files a cell read: the first characters of "
              "a sha256 over the ones its feature reads (`store_sha256`, recorded from "
              "2026-11-27 on: pool5 and the float FNE read the extracted activations, the "
              "ternary FNE its `fne.i8`, which `portable.py` copies byte for byte). A new "
              "machine otherwise rebuilds the store, and its float rounding may differ from "
              "one CPU to the next. Earlier cells show —.", "",
              "A train time marked (bf16 in fp32 GEMMs) is a cell trained on a CPU without "
              "AVX512_BF16, where its bf16 GEMMs ran in fp32 kernels on the same bf16 values "
              "(`vsekit.lab.train.bf16`, from 2026-11-29). Train times compare within one "
              "kind of CPU (the CPU column, which names the model and whether its flags "
              "lack AVX512_BF16): the grid ran on several, some about three times as fast "
              "as others at this work.", "",
              "| cell | slice rsum (selects) | dev rsum (reported) | best epoch / epochs run "
              "| lr decays | ended by | train time | CPU | commit | store |",
              "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, c in sorted(done.items()):
        events = [e["event"] for e in c["events"]]
        ended = ("the cap" if c["hit_cap"] else "early stop" if "early stop" in events
                 else "—")  # fmt: skip
        if "extended_from" in c:  # it ran on from the first cap, or again from its start
            ext = c["extended_from"]
            ended += (f" (ran on from {ext['epochs_run']})" if ext["resumed"]
                      else f" (ran again, cap {fair.EXTENDED_CAP})")  # fmt: skip
        elif fair.runs_on(c):
            ended += f" (runs on to {fair.EXTENDED_CAP})"
        dev = c["dev_last" if "family" in c else "dev"]["rsum"]
        lines.append(f"| {name} | {c['slice']['rsum']:.1f} | {dev:.1f} | "
                     f"{c['best_epoch']} / {c['epochs_run']} | "
                     f"{events.count('lr decay on plateau')} | {ended} | "
                     f"{c['train_seconds'] / 60:.0f} min{gpu_mark(c)}{kernel_mark(c)} | "
                     f"{cpu_column(c)} | "
                     f"{c['git_commit'][:7]} | {store_id(c)} |")  # fmt: skip
    return lines
