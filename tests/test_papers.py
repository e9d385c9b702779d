"""The papers' figures in ``benchmarks/research/papers.py`` are the seeds' own: each table
is read back from the seed text it quotes (``../shared/seeds/``)."""

from __future__ import annotations

import re
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from research import papers  # noqa: E402

SEEDS = ROOT.parent / "shared" / "seeds"


def _seed(name: str) -> str:
    """A seed's text with underlines dropped and all whitespace one space."""
    path = SEEDS / name
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    text = path.read_text(encoding="utf-8").replace("<u>", "").replace("</u>", "")
    return re.sub(r"\s+", " ", text)


def _row(values: tuple) -> str:
    return " ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in values)


def test_table2_rows_are_the_journal_papers():
    text = _seed("fne-multimodal-pipelines-journal.txt")
    for row, values in papers.TABLE2.items():
        assert f"{row.upper()} {_row(values)} " in text, row


def test_word2visualvec_tables_are_dong_et_al():
    text = _seed("word2visualvec.txt")
    for table in (papers.W2VV_I2T, papers.W2VV_VIDEO):
        for name, values in table.items():
            assert _row(values) in text, name
    # Table 4 lists the six text representations in this order, Flickr8k then Flickr30k
    order = ("bow", "bow-nostop", "glove", "glove-nostop", "w2vv-bow", "w2vv-glove")
    found = re.findall(r"(\d+\.\d) \d+\.\d", text[text.index("Text representation Flickr8k") :])
    assert tuple(float(v) for v in found[:6]) == tuple(papers.W2VV_MAP[k] for k in order)


def test_report_table1_columns_are_the_reports():
    """The report prints Table 1 by columns: R@1, R@10 and mean rank of Baseline,
    Baseline + Weight, GRU (Vendrov et al.), GRU + GloVe, LSTM + GloVe."""
    text = _seed("caption-image-retrieval-gru-regression.txt")
    rows = (papers.REPORT_REGRESSION["plain"], papers.REPORT_REGRESSION["weight"],
            papers.REPORT_TABLE1["reg-gru-random"], papers.REPORT_TABLE1["fc7-soe"],
            papers.REPORT_TABLE1["reg-lstm-glove"])  # fmt: skip
    for i, label in enumerate(("R@1", "R@10", "Mean r")):
        assert f"{label} {_row(tuple(r[i] for r in rows))} " in text, label


@pytest.mark.parametrize(("loss", "table"), [("SJE D(I)", 2), ("SJE D(II)", 3), ("ListSJE K=5", 4)])
def test_tag_tables_are_the_tag_papers_rounded(loss: str, table: int):
    """Tables 2-4 give p@1 and p@5 as fractions to four places; ours are percentages to
    one place, for the rows "Nouns", "Nouns (syntactic)" and "Compound-nouns"."""
    text = _seed("tag-ranking-bilinear-listwise.txt")
    body = text[text.index(f"Table {table}. Tag predictability") :]
    body = body[: body.index("p@5") + 600]
    labels = {"nouns": "Nouns", "syntactic": r"Nouns \(syntactic\)", "compound": "Compound-nouns"}
    for scheme, label in labels.items():
        p1, p5 = papers.TAGS[(loss, scheme)]
        for k, ours in ((1, p1), (5, p5)):
            part = body[body.index(f"p@{k}") :]
            m = re.search(rf"(?<![\w(-]){label} ((?:0\.\d{{4}} ?){{5}})", part)
            assert m, (loss, scheme, k)
            # half up, in decimal: 0.6395 is 64.0 (a float's round gives 63.9)
            pct = (
                Decimal(v).scaleb(2).quantize(Decimal("0.1"), ROUND_HALF_UP)
                for v in m.group(1).split()
            )
            theirs = tuple(float(v) for v in pct)
            assert theirs == ours, (loss, scheme, k, theirs, ours)


def test_a_changed_figure_is_caught():
    """The checks can fail: one figure off by 0.1 is no longer in the seed's row."""
    text = _seed("fne-multimodal-pipelines-journal.txt")
    values = list(papers.TABLE2["fne-moe"])
    values[0] = round(values[0] + 0.1, 1)
    assert f"FNE-MOE {_row(tuple(values))} " not in text
