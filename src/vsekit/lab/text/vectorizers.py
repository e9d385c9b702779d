"""Sentence vectorisers of Word2VisualVec (Dong et al., section 3.1), as registered text
encoders: ``enc(**enc.prepare(texts)) -> [B, enc.dim]`` float vectors, not normalised.

* ``bow``: word counts over the training vocabulary, every train word kept (eq. 1);
* ``trigram``: letter-trigram counts ("word hashing"): ``cat`` -> ``#ca, cat, at#``;
  the trigram list is every trigram of the training words;
* ``mean_glove``: the mean of the words' GloVe vectors (eq. 2; 6B-50d, offline).

Words the vocabulary (or GloVe) does not know are dropped. With ``stopwords: true`` in
the text config, English stop words (spaCy's list) are removed first.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
from torch import nn

from vsekit.lab.text.encoders import TextEncoderConfig, register_text_encoder
from vsekit.text.tokenizer import tokenize
from vsekit.text.vocab import Vocabulary


@lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(STOP_WORDS)


def words_of(text: str, drop_stop_words: bool = False) -> list[str]:
    """Lower-cased tokens without punctuation (and without stop words if asked)."""
    toks = [t for t in tokenize(text) if any(ch.isalnum() for ch in t)]
    if drop_stop_words:
        sw = stop_words()
        toks = [t for t in toks if t not in sw]
    return toks


def letter_trigrams(word: str) -> list[str]:
    """``"cat"`` -> ``["#ca", "cat", "at#"]`` (the word padded with ``#`` both sides)."""
    w = f"#{word}#"
    return [w[i : i + 3] for i in range(len(w) - 2)]


class CountVectorizer(nn.Module):
    """Counts of items (words or trigrams) from a fixed list: ``[B, len(items)]``."""

    def __init__(self, items: Sequence[str], cfg: TextEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.index = {w: i for i, w in enumerate(items)}
        self.dim = len(items)
        self.register_buffer("_dev", torch.zeros(0), persistent=False)

    def items_of(self, text: str) -> list[str]:
        raise NotImplementedError

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """``{"rows": [n], "cols": [n], "batch": [1]}``: one entry per counted item."""
        rows, cols = [], []
        for r, t in enumerate(texts):
            for it in self.items_of(t):
                c = self.index.get(it)
                if c is not None:
                    rows.append(r)
                    cols.append(c)
        return {
            "rows": torch.tensor(rows, dtype=torch.long),
            "cols": torch.tensor(cols, dtype=torch.long),
            "batch": torch.tensor([len(texts)]),
        }

    def forward(self, rows: torch.Tensor, cols: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(int(batch[0]), self.dim, device=self._dev.device)
        out.index_put_((rows, cols), torch.ones(len(rows), device=out.device), accumulate=True)
        return out


@register_text_encoder("bow")
class BagOfWords(CountVectorizer):
    def __init__(self, vocab: Vocabulary, cfg: TextEncoderConfig) -> None:
        specials = set(vocab.specials)
        words = [w for w in vocab.itos if w not in specials and any(ch.isalnum() for ch in w)]
        if cfg.stopwords:
            words = [w for w in words if w not in stop_words()]
        super().__init__(words, cfg)

    def items_of(self, text: str) -> list[str]:
        return words_of(text, self.cfg.stopwords)


@register_text_encoder("trigram")
class LetterTrigrams(CountVectorizer):
    def __init__(self, vocab: Vocabulary, cfg: TextEncoderConfig) -> None:
        specials = set(vocab.specials)
        grams: dict[str, None] = {}
        for w in vocab.itos:
            if w not in specials and any(ch.isalnum() for ch in w):
                if cfg.stopwords and w in stop_words():
                    continue
                grams.update(dict.fromkeys(letter_trigrams(w)))
        super().__init__(sorted(grams), cfg)

    def items_of(self, text: str) -> list[str]:
        return [g for w in words_of(text, self.cfg.stopwords) for g in letter_trigrams(w)]


@register_text_encoder("mean_glove")
class MeanWordVectors(nn.Module):
    """Mean GloVe vector of the words GloVe knows (zeros if none): ``[B, 50]``."""

    def __init__(self, vocab: Vocabulary | None, cfg: TextEncoderConfig) -> None:
        super().__init__()
        from vsekit.lab.text.glove import load_glove

        self.cfg = cfg
        self._index, self._vectors = load_glove()
        self.dim = int(self._vectors.shape[1])
        self.register_buffer("_dev", torch.zeros(0), persistent=False)

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        out = np.zeros((len(texts), self.dim), np.float32)
        for r, t in enumerate(texts):
            rows = [self._index[w] for w in words_of(t, self.cfg.stopwords) if w in self._index]
            if rows:
                out[r] = np.asarray(self._vectors[sorted(rows)]).mean(axis=0)
        return {"x": torch.from_numpy(out)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self._dev.device)
