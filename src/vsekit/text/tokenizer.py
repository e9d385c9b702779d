"""Word tokenisation as in the journal paper (section 4.3.1): NLTK word tokens,
lower-cased, punctuation kept as tokens.

NLTK's ``TreebankWordTokenizer`` needs no downloaded data (``nltk.word_tokenize`` does,
for its sentence splitter). Captions are single sentences, so it is the same here except
that a final period is split off regardless of sentence boundaries.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=1)
def _treebank():
    """NLTK's Treebank tokenizer, imported on first use: importing NLTK takes about a
    second (its package imports SciPy), which commands that tokenise nothing (``vse
    index``, ``vse duplicates``, ``vse serve`` until a query) need not pay."""
    from nltk.tokenize import TreebankWordTokenizer

    return TreebankWordTokenizer()


# Treebank only splits a period at the very end of the string; a caption's trailing
# "." may be followed by spaces or quotes.
_FINAL_PERIOD = re.compile(r"([^.])\.(\s*['\"]?\s*)$")


@lru_cache(maxsize=1 << 16)
def _tokenize(text: str) -> tuple[str, ...]:
    text = _FINAL_PERIOD.sub(r"\1 .\2", text.strip().lower())
    return tuple(_treebank().tokenize(text))


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens of ``text`` with punctuation as separate tokens.

    >>> tokenize("A dog's ball, in the snow.")
    ['a', 'dog', "'s", 'ball', ',', 'in', 'the', 'snow', '.']
    """
    return list(_tokenize(text))
