"""Colour names as evidence: how much of each basic colour a photo shows, and where.

**Index time.** Each photo is reduced to ``SIDE x SIDE`` pixels (area averaging) and each
pixel is named with one of the eleven basic colour terms (:data:`COLOURS`: Berlin and
Kay's black, white, grey, red, orange, yellow, green, blue, purple, pink, brown) by fixed
rules in HSV (:func:`name_pixels`, hue ``h`` in degrees, saturation ``s`` and value
``v`` in [0, 1]):

========================  ==========================================================
pixels                    name
========================  ==========================================================
``v < 0.22``              black
``s < 0.18``              white (``v >= 0.78``), else grey
``h < 12`` or ``>= 345``  pink when light and pale (``s < 0.5``, ``v >= 0.7``); brown
                          when dark and dull (``v < 0.4``, ``s < 0.6``); else red
``12 <= h < 40``          orange when bright and vivid (``v >= 0.65``, ``s >= 0.45``),
                          else brown (tan, beige, wood, most skin)
``40 <= h < 68``          yellow; brown when dark (``v < 0.5``)
``68 <= h < 165``         green
``165 <= h < 255``        blue (cyan and turquoise too)
``255 <= h < 290``        purple
``290 <= h < 345``        purple when dark violet (``h < 315``, ``v < 0.7``), else pink
========================  ==========================================================

The shares of each term are kept for :data:`REGIONS` regions: the whole photo, a
centre-weighted one (a Gaussian of ``CENTRE_SIGMA`` of each side around the centre, where
the subject of a photo usually is) and the four quadrants (so that a red car in one part
of the frame counts): ``[6, 11]`` float16, 132 bytes a photo. On a 2-core CPU this costs
about a millisecond a photo on top of its decoding, which the model's embedding shares.

**Query time.** The query's colour words (:func:`colour_terms`) name terms, with their
synonyms and ``-ish`` forms ("gray", "navy", "tan", "reddish"); the words around them
decide which count:

- a colour word before a person word ("a black man", "white woman") speaks of people,
  not of pixels: skipped;
- a colour word before "hair", "haired", "beard" ("red-haired", "a white-haired man"):
  hair is a few pixels whose tones are not the basic term's: skipped ("blonde" is not a
  colour word either);
- "black and white" before photo, picture, image, shot (and "monochrome", "grayscale")
  names the *monochrome* pseudo-term: the least achromatic share of the four quadrants;
- "colorful", "colourful", "multicolored" name the *colourful* pseudo-term: the photo's
  chromatic share (everything but black, white and grey).

A photo's value for a term is its share in the region ``region`` selects (``whole``,
``centre``, ``cell``: the largest quadrant share, or ``mix``: the mean of those three),
normalised over the collection the bonus is for (``norm``): ``raw`` (the share itself),
``z`` (standardised over the collection, clipped to [-3, 3]: white is common in
backgrounds, so a "white dog" photo must have more white than most, not merely some) or
``rank`` (the share's percentile in the collection, centred). With several terms the
values are averaged ("black and white dog"). The bonus is ``weight`` times that, times
the share of the query's words (articles aside) that are colour words when
``by_length``: a caption of twelve words that says "red" once has other words to rank by.
A query with no colour word gets no bonus (None), so its ranking is exactly the model's.

The settings live in the bundle's ``evidence.json`` (``"colour"``: no files, only
``fusion``), chosen on the train slice by ``benchmarks/colour_evidence.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

#: the eleven basic colour terms, in the order of the stored shares' last axis
COLOURS = ("black", "white", "grey", "red", "orange", "yellow", "green", "blue", "purple",
           "pink", "brown")  # fmt: skip
_IDX = {c: i for i, c in enumerate(COLOURS)}
ACHROMATIC = (_IDX["black"], _IDX["white"], _IDX["grey"])
#: the pseudo-terms read from the eleven shares
MONOCHROME, COLOURFUL = "monochrome", "colourful"
#: the regions of the stored shares' middle axis
REGIONS = ("whole", "centre", "top_left", "top_right", "bottom_left", "bottom_right")
SIDE = 64  # the photo is named at SIDE x SIDE pixels
#: the version of the pixel rules and regions (shares made under another are not comparable)
RULES = 1
CENTRE_SIGMA = 0.25  # of each side
#: the ways to read a term's value from the regions, and to normalise it (see the docstring)
REGION_MODES = ("whole", "centre", "cell", "mix")
NORMS = ("raw", "z", "rank")

#: word -> term; synonyms and -ish forms of the basic terms
WORDS: dict[str, str] = {
    **{c: c for c in COLOURS},
    "blackish": "black", "whitish": "white", "gray": "grey", "grayish": "grey",
    "greyish": "grey", "silver": "grey", "reddish": "red", "crimson": "red",
    "scarlet": "red", "maroon": "red", "orangey": "orange", "orangish": "orange",
    "yellowish": "yellow", "greenish": "green", "bluish": "blue", "blueish": "blue",
    "navy": "blue", "turquoise": "blue", "purplish": "purple", "violet": "purple",
    "lavender": "purple", "lilac": "purple", "pinkish": "pink", "magenta": "pink",
    "fuchsia": "pink", "brownish": "brown", "tan": "brown", "beige": "brown",
    "khaki": "brown",
    "colorful": COLOURFUL, "colourful": COLOURFUL, "multicolored": COLOURFUL,
    "multicoloured": COLOURFUL, "monochrome": MONOCHROME, "grayscale": MONOCHROME,
    "greyscale": MONOCHROME,
}  # fmt: skip
#: a colour word before one of these describes a person, not pixels
PERSON_WORDS = frozenset({
    "man", "men", "woman", "women", "person", "people", "guy", "guys", "boy", "boys",
    "girl", "girls", "child", "children", "kid", "kids", "lady", "ladies", "gentleman",
    "baby", "babies", "teen", "teenager", "teenagers", "male", "female", "family",
    "couple", "player", "players",
})  # fmt: skip
#: a colour word before one of these describes hair
HAIR_WORDS = frozenset({"hair", "haired", "hairs", "beard", "bearded"})
#: "black and white" before one of these names a monochrome photo
PHOTO_WORDS = frozenset({"photo", "photos", "photograph", "picture", "pictures", "image",
                         "images", "shot", "pic"})  # fmt: skip
_WORD = re.compile(r"[a-z]+")
_ARTICLES = frozenset({"a", "an", "the"})


# -- index time ---------------------------------------------------------------------------
def name_pixels(rgb: np.ndarray) -> np.ndarray:
    """``[..., 3]`` uint8 RGB -> ``[...]`` int indices into :data:`COLOURS` (the rules of
    the module docstring)."""
    x = np.asarray(rgb, np.float32) / 255.0
    mx, mn = x.max(-1), x.min(-1)
    c = mx - mn
    v = mx
    s = np.where(v > 0, c / np.maximum(v, 1e-6), 0.0)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    cc = np.maximum(c, 1e-6)
    h = np.where(mx == r, ((g - b) / cc) % 6, np.where(mx == g, (b - r) / cc + 2, (r - g) / cc + 4))
    h = h * 60.0  # degrees, [0, 360)
    out = np.full(v.shape, _IDX["blue"], np.int8)
    red = (h < 12) | (h >= 345)
    out[red] = _IDX["red"]
    out[red & (s < 0.5) & (v >= 0.7)] = _IDX["pink"]
    out[red & (v < 0.4) & (s < 0.6)] = _IDX["brown"]
    orange = (h >= 12) & (h < 40)
    out[orange] = np.where((v >= 0.65) & (s >= 0.45), _IDX["orange"], _IDX["brown"])[orange]
    yellow = (h >= 40) & (h < 68)
    out[yellow] = np.where(v >= 0.5, _IDX["yellow"], _IDX["brown"])[yellow]
    out[(h >= 68) & (h < 165)] = _IDX["green"]
    out[(h >= 255) & (h < 290)] = _IDX["purple"]
    magenta = (h >= 290) & (h < 345)
    out[magenta] = np.where((h < 315) & (v < 0.7), _IDX["purple"], _IDX["pink"])[magenta]
    grey = s < 0.18
    out[grey] = np.where(v >= 0.78, _IDX["white"], _IDX["grey"])[grey]
    out[v < 0.22] = _IDX["black"]
    return out


def _region_weights() -> np.ndarray:
    """``[len(REGIONS), SIDE * SIDE]`` pixel weights, each row summing to 1."""
    t = (np.arange(SIDE) + 0.5) / SIDE
    gy, gx = np.meshgrid(t, t, indexing="ij")
    centre = np.exp(-((gx - 0.5) ** 2 + (gy - 0.5) ** 2) / (2 * CENTRE_SIGMA**2))
    top, left = gy < 0.5, gx < 0.5
    rows = [np.ones_like(gx), centre, top & left, top & ~left, ~top & left, ~top & ~left]
    w = np.stack([np.asarray(r, np.float64).ravel() for r in rows])
    return w / w.sum(1, keepdims=True)


_WEIGHTS = _region_weights()


def colour_shares(image) -> np.ndarray:
    """A PIL image -> ``[len(REGIONS), len(COLOURS)]`` float32: each region's share of
    pixels of each colour term (rows sum to 1)."""
    from PIL import Image

    im = image.convert("RGB").resize((SIDE, SIDE), Image.Resampling.BOX)
    names = name_pixels(np.asarray(im)).ravel()
    onehot = np.zeros((names.size, len(COLOURS)), np.float64)
    onehot[np.arange(names.size), names] = 1.0
    return (_WEIGHTS @ onehot).astype(np.float32)


# -- query time ----------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("-", " ").replace("&", " and "))


def _parse(words: list[str]) -> tuple[list[str], int]:
    """``(terms named, in order without repeats; how many words name them)``."""
    out: list[str] = []
    used = 0
    i = 0
    while i < len(words):
        w = words[i]
        if (w == "black" and words[i + 1 : i + 3] == ["and", "white"]
                and i + 3 < len(words) and words[i + 3] in PHOTO_WORDS):  # fmt: skip
            out.append(MONOCHROME)
            used += 3
            i += 4
            continue
        term = WORDS.get(w)
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if term is not None and nxt not in PERSON_WORDS and nxt not in HAIR_WORDS:
            out.append(term)
            used += 1
        i += 1
    return list(dict.fromkeys(out)), used


def colour_terms(text: str) -> list[str]:
    """The colour terms ``text`` names, in order, without repeats (the rules of the module
    docstring): ``"a man in a blue shirt"`` -> blue; ``"a black and white photo"`` ->
    monochrome; ``"a black and white dog"`` -> black, white; ``"a red-haired girl"`` ->
    nothing."""
    return _parse(_words(text))[0]


def word_share(text: str) -> float:
    """The share of the query's words (articles aside) that name its colour terms:
    "a red car" 1/2, "a man in a blue shirt" 1/4."""
    words = [w for w in _words(text) if w not in _ARTICLES]
    return min(1.0, _parse(words)[1] / max(len(words), 1))


def term_values(shares: np.ndarray, term: str, region: str) -> np.ndarray:
    """``shares [N, regions, colours]`` -> ``[N]``: each photo's share of ``term`` read
    as ``region`` says."""
    s = np.asarray(shares, np.float32)
    if term == MONOCHROME:
        achro = s[:, :, list(ACHROMATIC)].sum(-1)  # (N, regions)
        return achro[:, 2:].min(1)  # every quadrant grey: a black-and-white photo
    col = (1.0 - s[:, :, list(ACHROMATIC)].sum(-1)) if term == COLOURFUL else s[:, :, _IDX[term]]
    whole, centre, cell = col[:, 0], col[:, 1], col[:, 2:].max(1)
    if region == "whole":
        return whole
    if region == "centre":
        return centre
    if region == "cell":
        return cell
    if region == "mix":
        return (whole + centre + cell) / 3
    raise ValueError(f"region: use one of {', '.join(REGION_MODES)}, not {region!r}")


def normalise(values: np.ndarray, norm: str) -> np.ndarray:
    """``[N]`` values -> ``[N]``, normalised over the ``N`` photos of the collection."""
    v = np.asarray(values, np.float32)
    if norm == "raw":
        return v
    if norm == "z":
        sd = max(float(v.std()), 0.01)  # a collection of one colour: nobody stands out
        return np.clip((v - v.mean()) / sd, -3.0, 3.0)
    if norm == "rank":
        if len(v) < 2:
            return np.zeros_like(v)
        order = np.argsort(v, kind="stable")
        ranks = np.empty(len(v), np.float64)
        ranks[order] = np.arange(len(v))
        # ties share their mean rank
        _, inv, counts = np.unique(v, return_inverse=True, return_counts=True)
        sums = np.bincount(inv, ranks)
        ranks = sums[inv] / counts[inv]
        return (ranks / (len(v) - 1) - 0.5).astype(np.float32)
    raise ValueError(f"norm: use one of {', '.join(NORMS)}, not {norm!r}")


class ColourNames:
    """The ``colour`` evidence source (:class:`vsekit.evidence.EvidenceScorer`)."""

    name = "colour"
    version = RULES

    def __init__(self, fusion: Mapping | None = None):
        """``fusion``: ``weight`` (the bonus scale), ``region``, ``norm``, ``by_length``
        and ``enabled`` (see the module docstring)."""
        f = dict(fusion or {})
        self.fusion_weight = float(f.get("weight", 0.0))
        self.region = str(f.get("region", "whole"))
        self.norm = str(f.get("norm", "raw"))
        self.by_length = bool(f.get("by_length", False))
        self.enabled = bool(f.get("enabled", False))
        if self.region not in REGION_MODES or self.norm not in NORMS:
            raise ValueError(f"colour fusion: region {self.region!r} / norm {self.norm!r} "
                             f"unknown (regions {REGION_MODES}, norms {NORMS})")  # fmt: skip

    @classmethod
    def from_bundle(cls, bundle: Path, cfg: dict) -> ColourNames:
        """The source from a bundle's ``evidence.json`` entry (it has no files)."""
        return cls(cfg.get("fusion"))

    def index(self, photos) -> dict[str, np.ndarray]:
        """``{"shares": [N, 6, 11] float16}`` from the batch's decoded pixels
        (:class:`vsekit.evidence.PhotoBatch`; the backbone is not run)."""
        rows = [colour_shares(im) for im in photos.images]
        shares = np.stack(rows) if rows else np.zeros((0, len(REGIONS), len(COLOURS)))
        return {"shares": shares.astype(np.float16)}

    def score(self, text: str, evidence) -> np.ndarray | None:
        """``weight`` x the mean normalised value of the terms ``text`` names (x the
        colour words' share of the query with ``by_length``); None when it names none or
        the weight is 0."""
        terms = colour_terms(text)
        if not terms or self.fusion_weight == 0:
            return None
        shares = np.asarray(evidence["shares"], np.float32)
        vals = [normalise(term_values(shares, t, self.region), self.norm) for t in terms]
        scale = self.fusion_weight * (word_share(text) if self.by_length else 1.0)
        return (scale * np.mean(vals, axis=0)).astype(np.float32)
