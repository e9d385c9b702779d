"""The papers' figures in ``benchmarks/research/papers.py`` are the seeds' own: each table
is read back from the seed text it quotes (``../shared/seeds/``), row by row under the
row's own label."""

from __future__ import annotations

import re
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from research import families, papers  # noqa: E402

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


def check_table2(table: dict) -> None:
    text = _seed("fne-multimodal-pipelines-journal.txt")
    for row, values in table.items():
        assert f" {row.upper()} {_row(values)} " in text, row


# Dong et al.'s labels for our names: Table 3's input layers, Table 5's ResNet-152 rows
W2VV_LABELS = {"bow": "bag-of-words", "trigram": "word hashing", "glove": "word2vec"}
VIDEO_LABELS = {"bow": "Word2VideoVec(bow)⇒ ResNet-152", "glove": "Word2VideoVec(w2v)⇒ ResNet-152"}
MAP_ORDER = ("bow", "bow-nostop", "glove", "glove-nostop", "w2vv-bow", "w2vv-glove")


def check_word2visualvec(i2t: dict, video: dict, maps: dict) -> None:
    text = _seed("word2visualvec.txt")
    table3 = text[text.index("Input layer R@1") :]
    for name, values in i2t.items():  # the first block of each row is Flickr8k
        assert f" {W2VV_LABELS[name]} {_row(values)} " in table3, name
    table5 = text[text.index("Table 5. Video-to-sentence") :]
    for name, values in video.items():
        assert f" {VIDEO_LABELS[name]} {_row(values)} " in table5, name
    # Table 4 lists the six text representations in this order, Flickr8k then Flickr30k
    found = re.findall(r"(\d+\.\d) \d+\.\d", text[text.index("Text representation Flickr8k") :])
    assert tuple(float(v) for v in found[:6]) == tuple(maps[k] for k in MAP_ORDER)


def check_report(regression: dict, table1: dict) -> None:
    """The report prints Table 1 by columns: R@1, R@10 and mean rank of Baseline,
    Baseline + Weight, GRU (Vendrov et al.), GRU + GloVe, LSTM + GloVe."""
    text = _seed("caption-image-retrieval-gru-regression.txt")
    assert "Baseline Baseline + Weight GRU (Vendrov et al., 2015) GRU + GloVe LSTM + GloVe" in text
    rows = (regression["plain"], regression["weight"], table1["reg-gru-random"],
            table1["fc7-soe"], table1["reg-lstm-glove"])  # fmt: skip
    for i, label in enumerate(("R@1", "R@10", "Mean r")):
        assert f" {label} {_row(tuple(r[i] for r in rows))} " in text, label


TAG_TABLES = {"SJE D(I)": 2, "SJE D(II)": 3, "ListSJE K=5": 4}
TAG_LABELS = {"nouns": "Nouns", "syntactic": r"Nouns \(syntactic\)", "compound": "Compound-nouns"}


def _percent(fraction: str) -> float:
    # half up, in decimal: 0.6395 is 64.0 (a float's round gives 63.9)
    return float(Decimal(fraction).scaleb(2).quantize(Decimal("0.1"), ROUND_HALF_UP))


def check_tags(tags: dict) -> None:
    """Tables 2-4 give p@1 and p@5 as fractions to four places; ours are percentages to
    one place, for the rows "Nouns", "Nouns (syntactic)" and "Compound-nouns"."""
    text = _seed("tag-ranking-bilinear-listwise.txt")
    for loss, table in TAG_TABLES.items():
        body = text[text.index(f"Table {table}. Tag predictability") :]
        body = body[: body.index("p@5") + 600]
        for scheme, label in TAG_LABELS.items():
            for k, ours in zip((1, 5), tags[(loss, scheme)], strict=True):
                part = body[body.index(f"p@{k}") :]
                m = re.search(rf"(?<![\w(-]){label} ((?:0\.\d{{4}} ?){{5}})", part)
                assert m, (loss, scheme, k)
                assert tuple(_percent(v) for v in m.group(1).split()) == ours, (loss, scheme, k)


def check_moe_starts(starts: dict, settings: dict) -> None:
    """Table 5: each setting's learning rate, margin and absolute value, and how many of
    five seeds started, for FC7 and the FNE."""
    text = _seed("fne-multimodal-pipelines-journal.txt")
    for key, n in starts.items():
        feature, setting = key.split("-", 1)
        m = re.search(rf" {feature.upper()}-MOE-{setting} (\S+) (\S+) (\S+) (\d)/5 ", text)
        assert m, key
        lr, margin, _ = settings[setting]
        assert (float(m.group(1)), float(m.group(2)), int(m.group(4))) == (lr, margin, n), key


CHECKS = {
    "table2": (check_table2, lambda: (papers.TABLE2,)),
    "word2visualvec": (check_word2visualvec,
                       lambda: (papers.W2VV_I2T, papers.W2VV_VIDEO, papers.W2VV_MAP)),
    "report": (check_report, lambda: (papers.REPORT_REGRESSION, papers.REPORT_TABLE1)),
    "tags": (check_tags, lambda: (papers.TAGS,)),
    "moe_starts": (check_moe_starts, lambda: (papers.MOE_STARTS, families.MOE_SETTINGS)),
}  # fmt: skip


@pytest.mark.parametrize("name", CHECKS)
def test_the_papers_figures_are_the_seeds(name: str):
    check, tables = CHECKS[name]
    check(*tables())


def _nudged(value):
    """A figure changed by the least step its table prints."""
    if isinstance(value, tuple):
        return (_nudged(value[0]), *value[1:])
    return round(value + 0.1, 1) if isinstance(value, float) else value + 1


def _swapped(table: dict) -> dict:
    """The first two rows' figures exchanged: each figure is the seed's, under the wrong
    label."""
    (a, va), (b, vb), *rest = table.items()
    return {a: vb, b: va, **dict(rest)}


@pytest.mark.parametrize("name", CHECKS)
def test_each_check_fails_on_a_changed_figure(name: str):
    check, tables = CHECKS[name]
    args = tables()
    for i, table in enumerate(args):
        first = next(iter(table))
        changed = list(args)
        changed[i] = {**table, first: _nudged(table[first])}
        with pytest.raises(AssertionError):
            check(*changed)


@pytest.mark.parametrize("name", ["table2", "word2visualvec", "moe_starts"])
def test_each_check_fails_on_figures_under_the_wrong_label(name: str):
    check, tables = CHECKS[name]
    args = tables()
    for i in range(len(args) if name != "moe_starts" else 1):
        if len(args[i]) < 2 or (name == "word2visualvec" and i == 2):
            continue  # Table 4 is checked in its printed order
        changed = list(args)
        changed[i] = _swapped(args[i])
        with pytest.raises(AssertionError):
            check(*changed)
