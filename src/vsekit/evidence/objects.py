"""Object counts as evidence: a COCO detector's boxes, tied to the counts a query names.

At index time each photo is run through the bundle's detector (``objects.onnx``,
CenterNet on MobileNetV3 over COCO's 80 classes; :mod:`vsekit.graphs.centernet` writes
it) and keeps its ``keep`` strongest detections after per-class non-maximum suppression:
``classes`` ``[N, keep]`` uint8 (255: none) and ``scores`` ``[N, keep]`` float16 (48
bytes a photo at keep = 16).

At query time :func:`count_phrases` finds a count and the COCO class it counts ("three
children": 3 persons; "two black dogs": 2 dogs; "a group of people": 3 or more
persons). A photo's count of a class is the number of its detections of that class
scoring at least ``threshold``; its bonus is ``weight * 0.5 ** d``, where ``d`` is how
far the count lies outside the query's range (0 inside it), summed over the query's
counts. A query without a count gets nothing from this source.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsekit.bundle import ModelError

#: COCO's 80 classes in the detector's order
COCO = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat",
    "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack",
    "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball",
    "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket",
    "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair",
    "couch", "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse",
    "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier",
    "toothbrush",
)  # fmt: skip
NONE = 255

#: words for a COCO class besides its own name (singular; plurals are derived)
SYNONYMS = {
    "person": ("people", "man", "men", "woman", "women", "boy", "girl", "child",
               "children", "kid", "guy", "lady", "ladies", "baby", "babies", "adult",
               "toddler", "teenager", "teen", "player", "friend", "persons", "worker",
               "skier", "surfer", "biker", "cyclist", "rider", "runner", "swimmer",
               "dancer", "climber", "hiker", "footballer", "athlete", "tourist",
               "youngster", "individual", "gentleman", "gentlemen", "student",
               "brother", "sister", "daughter", "son", "mother", "father"),
    "dog": ("puppy", "puppies", "pup"),
    "cat": ("kitten", "kitty"),
    "bicycle": ("bike",),
    "motorcycle": ("motorbike", "scooter", "dirtbike"),
    "airplane": ("plane", "aeroplane", "airliner"),
    "sports ball": ("ball", "football", "soccer ball", "basketball", "volleyball"),
    "couch": ("sofa",),
    "dining table": ("table",),
    "tv": ("television",),
    "cell phone": ("phone", "cellphone"),
    "cow": ("cattle", "calf", "calves", "bull"),
    "sheep": ("lamb", "ram"),
    "horse": ("pony", "ponies"),
    "boat": ("canoe", "kayak", "sailboat"),
    "bird": ("duck", "goose", "geese", "seagull", "gull", "pigeon", "swan"),
}  # fmt: skip

_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "single": 1, "lone": 1, "pair": 2,
            "couple": 2, "both": 2}  # fmt: skip
#: words for "three or more"
_MANY = frozenset({"group", "groups", "crowd", "several", "many", "lots", "bunch", "team",
                   "herd", "flock", "pack"})  # fmt: skip
_WORD = re.compile(r"[a-z0-9]+")
#: words allowed between a count and its noun ("three young children", "two of the dogs")
MAX_GAP = 3
_GAP_OK = frozenset({"of", "the", "a", "an", "little", "small", "young", "old", "big",
                     "large", "white", "black", "brown", "red", "blue", "green", "yellow",
                     "pink", "orange", "purple", "gray", "grey", "tan", "spotted", "other",
                     "different", "asian", "african", "american", "older", "younger",
                     "and", "very",
                     "smiling", "happy"})  # fmt: skip


_IRREGULAR = {"knife": "knives", "mouse": "mice", "person": "people", "man": "men",
              "woman": "women", "child": "children", "goose": "geese",
              "calf": "calves"}  # fmt: skip


def _plural(word: str) -> str:
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


#: plural nouns and nouns with no singular among the class words
_IRREGULAR_PLURALS = frozenset({"people", "men", "women", "children", "ladies", "babies",
                                "puppies", "geese", "calves", "ponies", "persons",
                                "gentlemen", "cattle", "sheep", "skis", "scissors"})  # fmt: skip


def _nouns() -> tuple[dict[tuple[str, ...], int], frozenset[tuple[str, ...]]]:
    """Class words and their plurals -> class; and which of those words are plural."""
    out: dict[tuple[str, ...], int] = {}
    plural: set[tuple[str, ...]] = set()
    for cls, name in enumerate(COCO):
        for w in (name, *SYNONYMS.get(name, ())):
            words = tuple(w.split())
            many = (*words[:-1], _plural(words[-1]))
            out.setdefault(words, cls)
            out.setdefault(many, cls)
            plural.add(many)
            if words[-1] in _IRREGULAR_PLURALS:
                plural.add(words)
    return out, frozenset(plural)


NOUNS, PLURAL_NOUNS = _nouns()
_LONGEST = max(len(k) for k in NOUNS)


@dataclass(frozen=True)
class Count:
    """A count a query names: ``lo`` to ``hi`` (inclusive; ``hi`` may be infinite)
    objects of COCO class ``cls``."""

    cls: int
    lo: float
    hi: float

    @property
    def label(self) -> str:
        return COCO[self.cls]


def _noun_at(words: list[str], i: int) -> tuple[int, int, bool] | None:
    """``(class, length, plural)`` of the longest class noun starting at word ``i``."""
    for n in range(min(_LONGEST, len(words) - i), 0, -1):
        key = tuple(words[i : i + n])
        cls = NOUNS.get(key)
        if cls is not None:
            return cls, n, key in PLURAL_NOUNS
    return None


#: count words that take "of" before their noun ("a pair of dogs"); after any other
#: number "of" picks some out of more ("one of the dogs", "two of them"): no count
_TAKES_OF = frozenset({"pair", "couple"}) | _MANY
_PERSON = 0


#: what may follow "a couple" that is two people ("a couple walks on the beach", "a
#: young couple sitting on a bench", "the couple"); anything else ("a couple hours", "a
#: couple beers") is not read as people
_COUPLE_NEXT = frozenset({"", "on", "in", "at", "with", "and", "by", "near", "under",
                          "is", "are", "who", "of", "walks", "walk", "sits", "sit", "stands",
                          "stand", "kisses", "kiss", "holds", "hold", "poses", "pose",
                          "dances", "dance", "hugs", "hug", "looks", "look", "smiles",
                          "smile", "rides", "ride", "eats", "eat", "enjoys", "enjoy",
                          "relaxes", "relax", "watches", "watch", "lies", "lie", "lays",
                          "takes", "take", "share", "shares", "together", "outside",
                          "inside", "having", "posing"})  # fmt: skip
#: things a "pair of" is one of
_ONE_PAIR = frozenset({"scissors", "skis", "glasses", "jeans", "shorts", "pants"})


def _number(word: str) -> float | None:
    if word in _NUMBERS:
        return float(_NUMBERS[word])
    if word.isdigit() and 1 <= int(word) <= 10:
        return float(int(word))
    return None


def count_phrases(text: str) -> list[Count]:
    """The counts ``text`` names: a number word or digit (1 to 10; "pair", "couple" and
    "both" are 2), a range ("two or three", "2 to 4"), or a word for three or more ("a
    group of", "several"), followed within :data:`MAX_GAP` words (adjectives, "of the")
    by a COCO class noun, plural after a number above one: in "two dog toys" and "2 x 4
    truck" nothing is counted, in "two orange cats" the cats are. Mentions of one class
    add up, "a" or "an" counting one, once the class has a number: "two men and a woman"
    is 3 persons; "a dog on a couch" names no count. Neither does "one of the dogs" or
    "number one"; "a couple" with no noun after it is two people, but not "a couple
    hours later"."""
    words = _WORD.findall(text.lower())
    sums: dict[int, list[float]] = {}
    counted: set[int] = set()

    def add(cls: int, lo: float, hi: float, explicit: bool) -> None:
        s = sums.setdefault(cls, [0.0, 0.0])
        s[0], s[1] = s[0] + lo, s[1] + hi
        if explicit:
            counted.add(cls)

    skip_to = 0
    for i, w in enumerate(words):
        if i < skip_to:
            continue
        explicit, start = True, i + 1
        nxt = words[i + 1] if i + 1 < len(words) else ""
        first = _number(w)
        if first is not None:
            if i and words[i - 1] in ("number", "no"):
                continue  # "number one": a rank
            lo = hi = first
            after = words[i + 2] if i + 2 < len(words) else ""
            second = _number(after) if nxt in ("or", "to", "and") else None
            if nxt == "and" and (not i or words[i - 1] != "between"):
                second = None  # "two and ...": only "between two and four" is a range
            if second is not None:  # "two or three dogs", "between two and four people"
                lo, hi = min(first, second), max(first, second)
                start = skip_to = i + 3
            elif nxt == "or" and after == "more":  # "two or more dogs"
                hi, start = math.inf, i + 3
                skip_to = start
        elif w in _MANY:
            lo, hi = 3.0, math.inf
        elif w in ("a", "an"):
            lo = hi = 1.0
            explicit = False
        else:
            continue
        if nxt == "of" and w not in _TAKES_OF:
            continue
        j, found = start, None
        while j < len(words) and j - start <= MAX_GAP:
            at = _noun_at(words, j)
            if at is not None:
                later = _noun_at(words, j + at[1])
                if later is not None:  # "orange cats", "horse riders": the head is last
                    j += at[1]
                    continue
                if hi >= 2 and not at[2]:  # "two dog toys": a modifier, not the noun
                    break
                found = at
                break
            if words[j] not in _GAP_OK or words[j] in ("a", "an"):
                break
            j += 1
        if found is not None:
            one = w == "pair" and words[j + found[1] - 1] in _ONE_PAIR  # "a pair of skis"
            add(found[0], 1.0 if one else lo, 1.0 if one else hi, explicit)
        elif w == "couple" and nxt in _COUPLE_NEXT and nxt != "of":
            add(_PERSON, 2.0, 2.0, True)  # "a couple walks on the beach"
        elif w == "couple" and nxt.endswith("ing"):
            add(_PERSON, 2.0, 2.0, True)  # "a couple sitting on a bench"
    return [Count(c, lo, hi) for c, (lo, hi) in sums.items() if c in counted]


# ------------------------------------------------------------------ the detector
def _maxpool3(x: np.ndarray) -> np.ndarray:
    """3 x 3 max pooling with stride 1 and SAME padding over the last two axes."""
    p = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(1, 1), (1, 1)], constant_values=-np.inf)
    h, w = x.shape[-2:]
    out = p[..., 0:h, 0:w].copy()
    for dy in range(3):
        for dx in range(3):
            np.maximum(out, p[..., dy : dy + h, dx : dx + w], out=out)
    return out


def decode(keypoints: np.ndarray, wh: np.ndarray, top: int = 100, stride: int = 4) -> np.ndarray:
    """One photo's ``keypoints [C, H, W]`` and ``wh [4, H, W]`` -> ``[top, 6]`` detections
    ``(x1, y1, x2, y2, score, class)`` in input pixels, strongest first: the heatmap's
    local maxima (3 x 3), as the TF.js graph's own ``detections`` output decodes them
    (its order over ``H, W, C`` breaks ties)."""
    c, h, w = keypoints.shape
    peaks = np.where(keypoints == _maxpool3(keypoints), keypoints, 0).transpose(1, 2, 0)
    flat = peaks.reshape(-1)
    idx = np.argsort(-flat, kind="stable")[:top]
    cls, cell = idx % c, idx // c
    y, x = cell // w, cell % w
    d = wh[:, y, x]  # [4, top]
    cx, cy = x * float(stride), y * float(stride)
    return np.stack([cx - d[0], cy - d[1], cx + d[2], cy + d[3], flat[idx], cls], 1).astype(
        np.float32
    )


def _area(b: np.ndarray) -> np.ndarray:
    return np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1, y1 = np.maximum(box[0], boxes[:, 0]), np.maximum(box[1], boxes[:, 1])
    x2, y2 = np.minimum(box[2], boxes[:, 2]), np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    return inter / np.maximum(_area(box) + _area(boxes) - inter, 1e-9)


def suppress(det: np.ndarray, iou: float, min_score: float, keep: int) -> np.ndarray:
    """Greedy non-maximum suppression within each class: of two boxes of one class
    overlapping by more than ``iou``, the weaker goes; detections under ``min_score``
    go. Returns at most ``keep`` rows of ``det`` (strongest first)."""
    det = det[det[:, 4] >= min_score]
    det = det[np.argsort(-det[:, 4], kind="stable")]
    kept: list[int] = []
    for i in range(len(det)):
        same = [k for k in kept if det[k, 5] == det[i, 5]]
        if same and (_iou(det[i], det[same]) > iou).any():
            continue
        kept.append(i)
        if len(kept) == keep:
            break
    return det[kept]


class Detector:
    """The ONNX detector: photos -> per-photo detections (:func:`decode`, then
    :func:`suppress`)."""

    def __init__(self, graph: Path, iou: float = 0.5, min_score: float = 0.05, keep: int = 16,
                 threads: int | None = None):  # fmt: skip
        import onnxruntime as ort

        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = int(threads)
        self.session = ort.InferenceSession(str(graph), opts, providers=["CPUExecutionProvider"])
        self.size = int(self.session.get_inputs()[0].shape[1])
        self.iou, self.min_score, self.keep = float(iou), float(min_score), int(keep)

    def pixels(self, image) -> np.ndarray:
        """An RGB PIL image -> ``[size, size, 3]`` float32 in 0..255 (aspect not kept)."""
        from PIL import Image

        im = image.convert("RGB").resize((self.size, self.size), Image.BILINEAR)
        return np.asarray(im, np.float32)

    def raw(self, images: list) -> tuple[np.ndarray, np.ndarray]:
        """``(keypoints [N, 80, H, W], wh [N, 4, H, W])`` for RGB PIL images."""
        x = np.stack([self.pixels(im) for im in images])
        kp, wh = self.session.run(["keypoints", "wh"], {"images": x})
        return kp, wh

    def detect(self, images: list) -> list[np.ndarray]:
        """One ``[n, 6]`` array per image: ``(x1, y1, x2, y2, score, class)``, boxes in
        the detector's input pixels."""
        kp, wh = self.raw(images)
        return [suppress(decode(k, w), self.iou, self.min_score, self.keep)
                for k, w in zip(kp, wh, strict=True)]  # fmt: skip


# ------------------------------------------------------------------ the source
class ObjectCounts:
    """The ``objects`` evidence source (:class:`vsekit.evidence.EvidenceScorer`)."""

    name = "objects"
    version = 1

    def __init__(
        self,
        detector: Detector | Callable[[], Detector] | None,
        fusion: Mapping | None = None,
    ):
        """``detector``: the detector, or a function that makes it on first use (a
        bundle's source loads its ONNX session only when a photo is indexed, so a
        service that only searches never holds it); ``fusion``: ``weight`` (the bonus of
        a photo whose count is the query's), ``threshold`` (the score a detection needs
        to be counted) and ``enabled``."""
        self._detector = detector
        f = dict(fusion or {})
        self.weight = float(f.get("weight", 0.0))
        self.threshold = float(f.get("threshold", 0.3))
        self.enabled = bool(f.get("enabled", False))

    @property
    def detector(self) -> Detector | None:
        """The detector, made on first use; a ModelError naming the graph when it cannot
        be loaded (remembered: it is not tried again)."""
        d = self._detector
        if isinstance(d, ModelError):
            raise d
        if callable(d):  # the factory a bundle gives (a Detector is not callable)
            try:
                d = d()
            except ModelError as e:
                self._detector = e
                raise
            self._detector = d
        return d

    @classmethod
    def from_bundle(cls, bundle: Path, cfg: dict) -> ObjectCounts | None:
        """The source from a bundle's ``evidence.json`` entry ``cfg``; None when its
        graph (written at build time, not in git) is absent."""
        graph = Path(bundle) / cfg.get("graph", "objects.onnx")
        if not graph.is_file():
            return None
        d = cfg.get("detector") or {}
        settings = (d.get("iou", 0.5), d.get("min_score", 0.05), d.get("keep", 16))

        def make() -> Detector:
            try:
                return Detector(graph, *settings)
            except Exception as e:  # noqa: BLE001 - ONNX Runtime's own errors, one line
                raise ModelError(
                    f"{graph}: the object detector cannot be loaded ({e}); "
                    "rebuild it (python -m vsekit.graphs.centernet)"
                ) from e

        return cls(make, cfg.get("fusion"))

    def index(self, photos) -> dict[str, np.ndarray]:
        """``{"classes": [N, keep] uint8, "scores": [N, keep] float16}`` from the batch's
        pixels (:class:`vsekit.evidence.PhotoBatch`), strongest first, padded with
        class 255 and score 0."""
        if self.detector is None:
            raise ValueError("the objects source has no detector")
        dets = self.detector.detect(photos.images)
        k = self.detector.keep
        classes = np.full((len(dets), k), NONE, np.uint8)
        scores = np.zeros((len(dets), k), np.float16)
        for i, d in enumerate(dets):
            classes[i, : len(d)] = d[:, 5].astype(np.uint8)
            scores[i, : len(d)] = d[:, 4]
        return {"classes": classes, "scores": scores}

    def counts(self, evidence: Mapping[str, np.ndarray], cls: int) -> np.ndarray:
        """``[N]`` how many detections of ``cls`` each photo has at :attr:`threshold`."""
        hit = (evidence["classes"] == cls) & (
            evidence["scores"].astype(np.float32) >= self.threshold
        )
        return hit.sum(axis=1)

    def score(self, text: str, evidence: Mapping[str, np.ndarray]) -> np.ndarray | None:
        wanted = count_phrases(text)
        if not wanted or self.weight == 0.0:
            return None
        bonus = np.zeros(len(evidence["classes"]), np.float32)
        for c in wanted:
            n = self.counts(evidence, c.cls).astype(np.float64)
            d = np.maximum(np.maximum(c.lo - n, n - c.hi), 0.0)
            bonus += (self.weight * 0.5**d).astype(np.float32)
        return bonus
