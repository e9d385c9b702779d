"""ImageNet classes as evidence: the backbone's own 1000-way head, tied to words by WordNet.

At index time each photo keeps its ``top_k`` ImageNet-1k classes and their softmax
probabilities (``k`` uint16 ids and ``k`` float16 probabilities: 20 bytes a photo at
k = 5), computed in NumPy from the image features the bundle's image graph already
outputs: the classifier is one ``[2048, 1000]`` matmul on pool5. The bundle's features
are unit vectors, so they are scaled back by ``feature_scale`` (the median pool5 norm)
before the head; class rankings barely move (see ``scripts/build_imagenet_evidence.py``).

At query time the query's noun phrases (longest first, plurals to their lemma) are looked
up in ``imagenet_wordnet.json``: a noun names a WordNet synset that is an ImageNet class,
lies under one ("jeep", "Labrador retriever") or lies above some ("corgi": the Pembroke
and Cardigan classes; "dog": 118 classes). A sense *fires* when it is the word's
common sense (:attr:`Sense.common`: not "blue" the butterfly), spans at most
``max_classes`` classes and its classes cover at least ``min_coverage`` of its WordNet
leaves, so general words ("dog", "bird", "person") stay with the text model while
specific ones ("corgi", "greyhound", "violin") bring the classifier in. The bonus of a photo is
``weight`` times the probability mass its stored classes put on the fired classes: the
classifier's own estimate that the photo shows what the query names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from vsekit.bundle import ModelError
from vsekit.fsio import file_sha256

#: the longest noun phrase looked up, in words ("bernese mountain dog", "great white shark")
MAX_PHRASE = 4
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_ARTICLES = frozenset({"a", "an", "the"})
#: WordNet's regular noun endings (the ``morphy`` detachment rules), longest first
_SUFFIXES = (("ches", "ch"), ("shes", "sh"), ("ses", "s"), ("xes", "x"), ("zes", "z"),
             ("ies", "y"), ("men", "man"), ("s", ""))  # fmt: skip


@dataclass(frozen=True)
class Sense:
    """One sense of a noun: a WordNet synset with ImageNet classes. ``classes``
    (indices), ``coverage`` (the share of its WordNet leaves some class covers; 1 at or
    below a class), ``below`` (it is a class or lies under one), ``rank`` (WordNet's
    sense number for this word, 1: the most frequent) and ``tagged`` (how often SemCor
    tagged this word with this sense)."""

    synset: str
    classes: tuple[int, ...]
    coverage: float
    below: bool
    rank: int = 1
    tagged: int = 0

    #: the highest tagged count among all the word's noun senses
    word_top: int = 0

    @property
    def common(self) -> bool:
        """The word's first sense, or one tagged text uses as often as its most used
        sense: "blue" the colour, not the butterfly; "tiger" the cat (sense 2, tagged as
        often as the person); "ball" the game's, not the musket's or the globe."""
        return self.rank == 1 or self.tagged >= max(self.word_top, 1)


@dataclass
class WordNetMap:
    """``imagenet_wordnet.json`` in memory: nouns -> senses -> ImageNet classes."""

    classes: list[tuple[str, str]]  # (wnid, name), in the classifier's order
    #: lemma -> its senses with classes, most frequent first; [] for a compound that
    #: names no class but whose last word would ("swimming pool", "hot dog")
    senses: dict[str, list[Sense]]
    irregular: dict[str, str] = field(default_factory=dict)  # plural -> lemma

    @classmethod
    def from_json(cls, data: dict) -> WordNetMap:
        syn = {o: (tuple(int(c) for c in v[2]), float(v[0]), bool(v[1]))
               for o, v in data["synsets"].items()}  # fmt: skip
        senses = {w: [Sense(o, *syn[o], int(rank), int(tagged), int(top))
                      for o, rank, tagged in offs]
                  for w, (top, *offs) in data["words"].items()}  # fmt: skip
        for c in data.get("compounds", []):
            senses.setdefault(c, [])
        return cls([tuple(c) for c in data["classes"]], senses, dict(data.get("irregular", {})))

    def lemmas(self, word: str) -> list[str]:
        """The lemmas ``word`` (lower case) may be an inflection of, itself first."""
        out = [word] if word in self.senses else []
        base = self.irregular.get(word)
        if base and base not in out:
            out.append(base)
        for end, repl in _SUFFIXES:
            if word.endswith(end) and len(word) > len(end) + 1:
                b = word[: -len(end)] + repl
                if b in self.senses and b not in out:
                    out.append(b)
        return out

    def phrases(self, text: str) -> list[tuple[str, list[Sense]]]:
        """The query's nouns and noun compounds that name classes, longest match first
        and left to right, each with its senses (those of every lemma the last word may
        be an inflection of): ``"two corgis on a couch"`` -> corgis, couch. A compound
        that names none consumes its words: ``"a hot dog"`` -> nothing."""
        words = _WORD.findall(text.lower().replace("-", " "))
        out, i = [], 0
        while i < len(words):
            for n in range(min(MAX_PHRASE, len(words) - i), 0, -1):
                head, last = " ".join(words[i : i + n - 1]), words[i + n - 1]
                lemmas = self.lemmas(last) if n == 1 else _compound(self, head, last)
                if lemmas:
                    found = []
                    for lemma in lemmas:
                        found += [s for s in self.senses[lemma] if s not in found]
                    if found:
                        out.append((" ".join(words[i : i + n]), found))
                    i += n
                    break
            else:
                i += 1
        return out


def _compound(m: WordNetMap, head: str, last: str) -> list[str]:
    return [f"{head} {w}" for w in [last, *_inflections(m, last)] if f"{head} {w}" in m.senses]


def _inflections(m: WordNetMap, word: str) -> list[str]:
    out = [m.irregular[word]] if word in m.irregular else []
    return out + [word[: -len(e)] + r for e, r in _SUFFIXES
                  if word.endswith(e) and len(word) > len(e) + 1]  # fmt: skip


def _vocab_counts(bundle: Path) -> dict[str, int]:
    """``{word: count}`` of the bundle's ``vocab.json`` (``{}`` without one or counts)."""
    path = Path(bundle) / "vocab.json"
    try:
        v = json.loads(path.read_text())
        return {str(w): int(c) for w, c in (v.get("counts") or {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


@lru_cache(maxsize=4)
def _load_map(path: str, sha: str) -> WordNetMap:
    return WordNetMap.from_json(json.loads(Path(path).read_text()))


class ImageNetClasses:
    """The ``imagenet`` evidence source (:class:`vsekit.evidence.EvidenceScorer`)."""

    name = "imagenet"
    version = 1

    def __init__(
        self,
        weight: np.ndarray,
        bias: np.ndarray,
        wordnet: WordNetMap,
        feature_scale: float = 1.0,
        top_k: int = 5,
        fusion: dict | None = None,
        word_counts: dict[str, int] | None = None,
    ):
        """``weight [1000, F]``, ``bias [1000]``: the classifier on raw pool5;
        ``feature_scale``: the factor that turns the features :meth:`index` receives into
        raw pool5 (the median norm, for unit features); ``fusion``: ``weight`` (the bonus
        scale), ``max_classes``, ``min_coverage``, ``max_word_count``, ``by_length`` and
        ``enabled``;
        ``word_counts``: how often the text model's training captions used each word
        (the bundle's ``vocab.json``), for ``max_word_count``."""
        self.weight = np.asarray(weight, np.float32)
        self.bias = np.asarray(bias, np.float32)
        if self.weight.shape[0] != len(wordnet.classes) or self.bias.shape != (
            self.weight.shape[0],
        ):
            raise ValueError(
                f"head {self.weight.shape} / {self.bias.shape} does not match "
                f"{len(wordnet.classes)} classes"
            )
        self.wordnet = wordnet
        self.feature_scale = float(feature_scale)
        self.top_k = int(top_k)
        f = dict(fusion or {})
        self.fusion_weight = float(f.get("weight", 0.0))
        self.max_classes = int(f.get("max_classes", 1000))
        self.min_coverage = float(f.get("min_coverage", 0.0))
        mwc = f.get("max_word_count")
        self.max_word_count = None if mwc is None else int(mwc)
        self.word_counts = dict(word_counts or {})
        self.by_length = bool(f.get("by_length", False))
        self.enabled = bool(f.get("enabled", False))

    @classmethod
    def from_bundle(cls, bundle: Path, cfg: dict) -> ImageNetClasses | None:
        """The source from a bundle's ``evidence.json`` entry ``cfg``; None when its files
        are absent; ModelError when one is not the file recorded."""
        files = {"mapping": cfg.get("mapping"), "head": cfg.get("head")}
        paths = {k: Path(bundle) / v for k, v in files.items() if v}
        if len(paths) != 2 or not all(p.is_file() for p in paths.values()):
            return None
        shas = cfg.get("sha256") or {}
        for p in paths.values():
            got = file_sha256(p)
            if shas.get(p.name) != got:
                raise ModelError(f"{p}: sha256 {got[:12]}… is not the one recorded in "
                                 f"evidence.json; reinstall vsekit or rebuild it")  # fmt: skip
        from safetensors.numpy import load_file

        head = load_file(str(paths["head"]))
        wn = _load_map(str(paths["mapping"]), shas[paths["mapping"].name])
        return cls(head["weight"], head["bias"], wn, cfg.get("feature_scale", 1.0),
                   cfg.get("top_k", 5), cfg.get("fusion"), _vocab_counts(bundle))  # fmt: skip

    # -- index time ---------------------------------------------------------------
    def class_probs(self, features: np.ndarray) -> np.ndarray:
        """``[N, F]`` features -> ``[N, 1000]`` softmax probabilities."""
        x = np.asarray(features, np.float32) * self.feature_scale
        logits = x @ self.weight.T + self.bias  # (N, 1000)
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)

    def index(self, photos) -> dict[str, np.ndarray]:
        """``{"classes": [N, k] uint16, "probs": [N, k] float16}``: each photo's top-k
        classes, most probable first, from the batch's image features
        (:class:`vsekit.evidence.PhotoBatch`; its pixels are not read)."""
        p = self.class_probs(photos.features)
        k = min(self.top_k, p.shape[1])
        top = np.argpartition(-p, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(p, top, 1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, 1)
        return {"classes": top.astype(np.uint16),
                "probs": np.take_along_axis(p, top, 1).astype(np.float16)}  # fmt: skip

    # -- query time -----------------------------------------------------------------
    def fires(self, sense: Sense) -> bool:
        """Whether ``sense`` is specific enough to bring the classifier in."""
        return (sense.common and len(sense.classes) <= self.max_classes
                and sense.coverage >= self.min_coverage)  # fmt: skip

    def word_count(self, phrase: str) -> int:
        """How often the text model's training captions used the phrase's last word (as
        written or as its lemma; 0 for a word it never saw)."""
        last = phrase.split()[-1]
        return max(self.word_counts.get(w, 0) for w in [last, *self.wordnet.lemmas(last)])

    def query_classes(self, text: str) -> list[int]:
        """The ImageNet classes ``text`` names (sorted; empty when it names none). With
        ``max_word_count``, only nouns the text model saw at most that often: those it
        knows well keep its own reading."""
        return self._named(text)[0]

    def _named(self, text: str) -> tuple[list[int], int]:
        """``(classes text names, how many of its words the firing nouns span)``."""
        out: set[int] = set()
        span = 0
        for phrase, senses in self.wordnet.phrases(text):
            if self.max_word_count is not None and self.word_count(phrase) > self.max_word_count:
                continue
            fired = [s for s in senses if self.fires(s)]
            for s in fired:
                out.update(s.classes)
            span += len(phrase.split()) if fired else 0
        return sorted(out), span

    def share(self, text: str, span: int) -> float:
        """With ``by_length``, the share of the query's words (articles aside) that the
        firing nouns span: "a corgi" rests on its noun alone (1), a twelve-word caption
        that mentions a poodle has eleven other words to rank by (1/12); else 1."""
        if not self.by_length:
            return 1.0
        words = [w for w in _WORD.findall(text.lower().replace("-", " ")) if w not in _ARTICLES]
        return min(1.0, span / max(len(words), 1))

    def score(self, text: str, evidence) -> np.ndarray | None:
        """``weight`` x :meth:`share` x the probability each photo's stored top-k puts on
        the classes ``text`` names; None when it names none or the weight is 0."""
        named, span = self._named(text)
        if not named or self.fusion_weight == 0:
            return None
        cls = np.asarray(evidence["classes"])
        hit = np.isin(cls, np.asarray(named, cls.dtype))
        mass = (np.asarray(evidence["probs"], np.float32) * hit).sum(axis=1)
        return self.fusion_weight * self.share(text, span) * mass
