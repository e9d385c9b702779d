"""Query normalisation: informal forms and misspellings rewritten to words the model
learnt, so that "kid on skatebord" searches for "kid on skateboard" and "ppl at the
beach" for "people at the beach".

A word-level text encoder reads a word it never saw as ``<unk>``, and a pretrained word
piece tower reads it as fragments; either way the query loses what the word meant. Each
word of a query goes through three steps, the first that applies winning:

1. **Informal forms** (:func:`informal_table`, the data file ``informal.tsv``): common
   chat forms (``ppl``, ``w/``, ``lil``, ``bball``, ``grl``), endings (``dogz`` ->
   ``dogs``, ``jumpin`` -> ``jumping``) and fillers that are left out (``lol``).
2. **Spelling**: the nearest word, by Damerau-Levenshtein distance (SymSpell, the
   ``symspellpy`` package), among the training words seen at least
   :attr:`SpellingRule.min_count` times; the most frequent of the nearest ones.
3. Otherwise the word stays as typed (search names it as unknown, as before).

Only words the model does not know, or knows weakly, are candidates: a word it saw in
:attr:`SpellingRule.well_known` training captions or more is never rewritten (step 1
takes words below that; step 2 unknown words, and those :attr:`SpellingRule.analogy` and
:attr:`SpellingRule.rare_below` admit). Words of
fewer than :data:`MIN_LETTERS` letters, with digits, or with an apostrophe are never
spelling-corrected (too many near neighbours; ``dog's`` is two tokens). The
thresholds were chosen on the train slice by ``benchmarks/query_spelling.py``
(:data:`DEFAULT_RULE`).

Every change is reported (:class:`Change`): ``vse search`` prints what it searched for,
``--json`` and ``GET /search`` carry it, and ``--exact`` / ``exact=true`` search the
words as typed.
"""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from vsekit.text.vocab import Vocabulary

#: words shorter than this are never spelling-corrected ("ok" is one edit from "on")
MIN_LETTERS = 3
KINDS = ("word", "ending", "filler")

# a word of a query: letters (digits after the first: "sk8"), inner hyphens and
# apostrophes, a chat slash ("w/", "w/o") or a trailing apostrophe ("jumpin'"). Never a
# piece of a path or a file name ("./beach.jpg"), an #ID or a longer token.
_WORD = re.compile(
    r"(?<![\w/.~#-])(?<!\w')[A-Za-z][A-Za-z0-9]*(?:[-'][A-Za-z0-9]+)*(?:/o|/)?'?(?![\w/]|\.\w)"
)
_LETTERS = re.compile(r"^[a-z]+(?:-[a-z]+)*$")


@dataclass(frozen=True)
class Change:
    """One word rewritten: ``word`` as typed, ``to`` what replaced it ("" when a filler
    was left out), ``why`` ``"informal"`` or ``"spelling"``."""

    word: str
    to: str
    why: str

    def as_dict(self) -> dict:
        return {"from": self.word, "to": self.to, "why": self.why}


@dataclass(frozen=True)
class Normalised:
    """A query's ``text`` after normalisation and the ``changes`` that made it."""

    text: str
    changes: tuple[Change, ...] = ()


@dataclass(frozen=True)
class SpellingRule:
    """When a word is rewritten (see the module docstring)."""

    #: the largest edit distance of a spelling correction: "0" (none: informal forms
    #: only), "1", "2", or "len" (1 for words of 3 to 5 letters, 2 from 6)
    max_distance: str = "1"
    #: a correction's target is a training word seen in at least this many captions
    min_count: int = 10
    #: spelling may also rewrite words known only by analogy (the vocabulary
    #: expansion's: real words, such as "lass", but also misspellings, such as "beech")
    analogy: bool = False
    #: spelling may also rewrite training words seen in fewer than this many captions
    #: (often the captions' own typos, such as "mountian"); 0: none
    rare_below: int = 0
    #: a word seen in at least this many training captions is never rewritten; the
    #: threshold below which search notes a word as weak (runtime.base.WEAK_COUNT)
    well_known: int = 10

    def distance(self, word: str) -> int:
        """The largest edit distance allowed for ``word`` (0: not corrected)."""
        if len(word) < MIN_LETTERS or not _LETTERS.match(word):
            return 0
        if self.max_distance == "len":
            return 1 if len(word) < 6 else 2
        return int(self.max_distance)

    def describe(self) -> str:
        also = ["analogy-only words"] if self.analogy else []
        if self.rare_below:
            also.append(f"training words seen < {self.rare_below}")
        words = "".join(f" and {a}" for a in also)
        return f"distance {self.max_distance}, targets seen >= {self.min_count}, unknown{words}"


#: the rule search uses, chosen on the train slice by benchmarks/query_spelling.py's
#: declared rule (one edit, to words seen in 10 or more training captions, of unknown
#: words only: typo'd slice captions' R@1+5+10 245.2 -> 282.1, clean ones' 290.0 kept)
DEFAULT_RULE = SpellingRule(max_distance="1", min_count=10)


@dataclass(frozen=True)
class InformalTable:
    """The informal forms (``informal.tsv``): whole words, endings and fillers."""

    words: dict[str, str]  # form -> replacement
    endings: tuple[tuple[str, str], ...]  # (ending as typed, ending meant), longest first
    fillers: frozenset[str]


def read_informal(path: str | Path) -> InformalTable:
    """The table in ``path``; ValueError naming the line that is malformed."""
    words, endings, fillers = {}, [], set()
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) != 3 or cells[2] not in KINDS or not cells[0]:
            raise ValueError(f"{path}:{n}: expected FORM<TAB>REPLACEMENT<TAB>{'|'.join(KINDS)}")
        form, to, kind = cells[0].lower(), cells[1].lower(), cells[2]
        if (kind == "filler") != (not to):
            raise ValueError(f"{path}:{n}: a filler, and only a filler, has no replacement")
        if kind == "word":
            words[form] = to
        elif kind == "ending":
            endings.append((form, to))
        else:
            fillers.add(form)
    endings.sort(key=lambda e: -len(e[0]))
    return InformalTable(words, tuple(endings), frozenset(fillers))


@cache
def informal_table() -> InformalTable:
    """The table shipped with vsekit (``vsekit/text/informal.tsv``)."""
    return read_informal(Path(str(resources.files("vsekit.text") / "informal.tsv")))


def _cased(to: str, typed: str) -> str:
    """``to`` in the case ``typed`` was written in (``GRL`` -> ``GIRL``, ``Ppl`` ->
    ``People``)."""
    if len(typed) > 1 and typed.isupper():
        return to.upper()
    return to[:1].upper() + to[1:] if typed[:1].isupper() else to


class Speller:
    """Rewrites the words of queries for one vocabulary (its training-caption counts
    tell which words are known well) with one :class:`SpellingRule`."""

    def __init__(
        self,
        vocab: Vocabulary,
        rule: SpellingRule = DEFAULT_RULE,
        table: InformalTable | None = None,
    ) -> None:
        self.vocab = vocab
        self.rule = rule
        self.table = table if table is not None else informal_table()
        self._symspell = None
        self._lock = threading.Lock()

    def count(self, word: str) -> int | None:
        """Training captions with ``word`` (0: known only by analogy; None: unknown)."""
        if word not in self.vocab:
            return None
        return 0 if self.vocab.by_analogy(word) else int(self.vocab.counts.get(word, 0))

    def _frequent(self, word: str) -> bool:
        n = self.count(word)
        return n is not None and n >= self.rule.min_count

    def _lookup(self, word: str, distance: int) -> str | None:
        from symspellpy import Verbosity

        if self._symspell is None:
            with self._lock:
                if self._symspell is None:
                    self._symspell = self._build()
        found = self._symspell.lookup(word, Verbosity.CLOSEST, max_edit_distance=distance)
        return next((s.term for s in found if s.term != word), None)

    def _build(self):
        from symspellpy import SymSpell

        sym = SymSpell(max_dictionary_edit_distance=2, prefix_length=7)
        for w, n in self.vocab.counts.items():
            if n >= self.rule.min_count and _LETTERS.match(w) and not self.vocab.by_analogy(w):
                sym.create_dictionary_entry(w, int(n))
        return sym

    def rewrite(self, word: str) -> Change | None:
        """The change for one word as typed, or None when it stays."""
        key = word.lower()
        n = self.count(key)
        if n is not None and n >= self.rule.well_known:
            return None
        t = self.table
        if key in t.words:
            return Change(word, t.words[key], "informal")
        if key in t.fillers:
            return Change(word, "", "informal")
        if n == 0 and not self.rule.analogy or n and n >= self.rule.rare_below:
            return None  # a known word that neither endings nor spelling may rewrite
        for end, to in t.endings:
            stem = key[: -len(end)]
            if key.endswith(end) and len(stem) >= 2 and self._frequent(stem + to):
                return Change(word, stem + to, "informal")
        d = self.rule.distance(key)
        to = self._lookup(key, d) if d else None
        return Change(word, to, "spelling") if to else None

    def normalise(self, text: str) -> Normalised:
        """``text`` with its words rewritten; fillers are left out unless nothing else
        would be left."""
        found = [(m, self.rewrite(m.group(0))) for m in _WORD.finditer(text)]
        found = [(m, c) for m, c in found if c is not None]
        out = _apply(text, found)
        if any(not c.to for _, c in found):
            if any(ch.isalnum() for ch in out):
                out = re.sub(r"\s{2,}", " ", out).strip()
            else:  # the query was all fillers: they are what it says
                found = [(m, c) for m, c in found if c.to]
                out = _apply(text, found)
        changes = [c for _, c in found]
        return Normalised(out, tuple(changes))


def _apply(text: str, found: list[tuple[re.Match, Change]]) -> str:
    parts, at = [], 0
    for m, c in found:
        parts += [text[at : m.start()], _cased(c.to, c.word)]
        at = m.end()
    return "".join([*parts, text[at:]])


_SPELLERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SPELLERS_LOCK = threading.Lock()


def speller_for(vocab: Vocabulary, rule: SpellingRule = DEFAULT_RULE) -> Speller:
    """One :class:`Speller` per vocabulary and rule, kept while the vocabulary lives (a
    loaded model's), so its dictionary is built once."""
    with _SPELLERS_LOCK:
        per = _SPELLERS.setdefault(vocab, {})
        if rule not in per:
            per[rule] = Speller(vocab, rule)
        return per[rule]
