from __future__ import annotations

import pytest

from vsekit.lab.data import DatasetError, Vocabulary, load_dataset, tokenize
from vsekit.text.vocab import PAD, UNK


def test_tokenize_lowercases_and_keeps_punctuation():
    assert tokenize("A Dog's ball, in the snow.") == [
        "a",
        "dog",
        "'s",
        "ball",
        ",",
        "in",
        "the",
        "snow",
        ".",
    ]
    assert tokenize("Two men play football .  ") == ["two", "men", "play", "football", "."]
    assert tokenize("") == []


def test_vocab_build_order_min_count_and_max_size():
    toks = [["b", "a", "c"], ["a", "b"], ["a", "d"]]
    v = Vocabulary.build(toks)
    assert v.itos[:4] == [PAD, UNK, "<start>", "<end>"]
    assert v.itos[4:] == ["a", "b", "c", "d"]  # count desc, then alphabetical
    assert Vocabulary.build(toks, min_count=2).itos[4:] == ["a", "b"]
    assert Vocabulary.build(toks, max_size=1).itos[4:] == ["a"]
    assert v.encode(["a", "zzz"]) == [4, 1]
    assert v.encode(["c"], add_bounds=True) == [2, 6, 3]
    assert v.decode([4, 5]) == ["a", "b"]


def test_vocab_json_roundtrip(tmp_path):
    v = Vocabulary.build([["x", "y", "y"]])
    v.save(tmp_path / "v.json")
    w = Vocabulary.load(tmp_path / "v.json")
    assert w.itos == v.itos and w.counts == {"y": 2, "x": 1}
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DatasetError, match="bad.json:1: invalid vocabulary JSON"):
        Vocabulary.load(tmp_path / "bad.json")


def test_vocab_from_train_only(flickr8k_root):
    ds = load_dataset(flickr8k_root)
    train_words = {w for c in ds.split("train").captions for w in tokenize(c.text)}
    v = Vocabulary.build(tokenize(c.text) for c in ds.split("train").captions)
    assert set(v.itos[4:]) == train_words
    dev_only = {w for c in ds.split("dev").captions for w in tokenize(c.text)} - train_words
    assert dev_only and not dev_only & set(v.itos)
