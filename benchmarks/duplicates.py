"""Duplicate detection's two stages on a labelled set: thresholds chosen on the train
slice, precision and recall per kind of copy reported on dev.

The labelled set. Photos of one split, each with transformed copies written as JPEG
files, as a user's copies would be: resized to 50% and to 25% of its sides, re-encoded
at JPEG quality 30, centre-cropped to 90% and to 75% of its sides, cropped to 90% from
one corner, cropped to 90% and to 80% at a place drawn for each photo (not one of the
boxes whose hashes are kept), rotated by 90 degrees, and a colour edit (saturation,
brightness, contrast, a warm tint). Every photo and copy is decoded and hashed as ``vse
index`` does (:func:`vsekit.media.images.load_image` at the model's decode size, then
:func:`vsekit.index.phash.image_hash` and :func:`~vsekit.index.phash.crop_hashes`) and
embedded with the shipped model. Positive pairs: a photo and one of its copies.
Negative pairs: two different photos (all pairs among the split's originals; the most
alike of them are the "distinct photos that look alike"), and a copy against every
other original.

Choosing (the train slice: the 500 photos carved from train with ``data.val_from_train``
500, seed 0, 250 of them with all copies): the rules of :func:`choose`, which reads
nothing of dev. :data:`TARGET_KINDS` are the copies the targets name (recall >= 0.98).

Reporting (dev, never a choice): the 1,000 dev photos' originals grouped together as an
index would group them (false groups: every group among them), and precision and recall
per kind of copy on ``--dev-copies`` of them (seeded sample), with both stages as
:func:`vsekit.index.duplicates.pairs_of` applies them.

Copies and embeddings are cached under ``~/.cache/vsekit/duplicates-bench`` (the
embeddings by the model's fingerprint), so a rerun only recounts.

Run: python benchmarks/duplicates.py [--dev-copies 250] [--precision fp32]
"""

from __future__ import annotations

import argparse
import io
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

import vsekit  # noqa: E402
from vsekit.index import duplicates as dup  # noqa: E402
from vsekit.index.phash import (  # noqa: E402
    CROP_KEEP,
    CROPS,
    HASH_KIND,
    crop_distances,
    crop_hashes,
    crops_array,
    hash_array,
    hash_distances,
    image_hash,
)
from vsekit.lab.data import load_dataset  # noqa: E402
from vsekit.media.images import load_image  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"
CACHE = Path.home() / ".cache" / "vsekit" / "duplicates-bench"
LIBRARY = 10_000  # photos: the hash distance keeps expected false pairs under one here
#: the cosines hold for a library this many doublings past the slice (2: 2,000 photos)
DOUBLINGS = 2


def _jpeg(im: Image.Image, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _centre(im: Image.Image, keep: float) -> Image.Image:
    w, h = im.size
    cw, ch = round(w * keep), round(h * keep)
    left, top = (w - cw) // 2, (h - ch) // 2
    return im.crop((left, top, left + cw, top + ch))


def _colour(im: Image.Image) -> Image.Image:
    im = ImageEnhance.Color(im).enhance(1.4)
    im = ImageEnhance.Brightness(im).enhance(1.1)
    im = ImageEnhance.Contrast(im).enhance(1.15)
    r, g, b = im.split()  # a warm tint
    return Image.merge("RGB", (r.point(lambda v: min(255, v + 12)), g,
                               b.point(lambda v: max(0, v - 12))))  # fmt: skip


def _anywhere(im: Image.Image, keep: float) -> Image.Image:
    """A crop of ``keep`` of each side at a place drawn for this photo (seeded by its
    pixels): not one of the boxes :data:`vsekit.index.phash.CROPS` hashes."""
    seed = int(np.asarray(im.resize((4, 4), Image.BOX), np.uint8).sum()) + im.width * im.height
    fx, fy = np.random.default_rng(seed).uniform(0, 1, 2)
    w, h = im.size
    cw, ch = round(w * keep), round(h * keep)
    left, top = round((w - cw) * fx), round((h - ch) * fy)
    return im.crop((left, top, left + cw, top + ch))


def _half(im: Image.Image, f: float) -> Image.Image:
    return im.resize((max(1, round(im.width * f)), max(1, round(im.height * f))), Image.LANCZOS)


#: kind of copy -> (transform to JPEG bytes, the stage meant to find it)
COPIES = {
    "resize 50%": lambda im: _jpeg(_half(im, 0.5)),
    "resize 25%": lambda im: _jpeg(_half(im, 0.25)),
    "jpeg q30": lambda im: _jpeg(im, 30),
    "crop 90%": lambda im: _jpeg(_centre(im, 0.9)),
    "crop 90% corner": lambda im: _jpeg(
        im.crop((0, 0, round(im.width * 0.9), round(im.height * 0.9)))
    ),  # fmt: skip
    "crop 90% anywhere": lambda im: _jpeg(_anywhere(im, 0.9)),
    "crop 80% anywhere": lambda im: _jpeg(_anywhere(im, 0.8)),
    "crop 75%": lambda im: _jpeg(_centre(im, 0.75)),
    "rotate 90": lambda im: _jpeg(im.transpose(Image.Transpose.ROTATE_90)),
    "colour edit": lambda im: _jpeg(_colour(im)),
}
#: the kinds the targets name: recall >= 0.98
TARGET_KINDS = (
    "resize 50%", "resize 25%", "jpeg q30", "crop 90%", "crop 90% corner", "crop 90% anywhere"
)  # fmt: skip


def copy_files(split: str, paths: list[str]) -> dict[str, list[Path]]:
    """Write (once) each kind of copy of ``paths`` under the cache; their paths."""
    out = {}
    for kind, f in COPIES.items():
        folder = CACHE / split / kind.replace(" ", "_").replace("%", "pc")
        folder.mkdir(parents=True, exist_ok=True)
        files = []
        for p in paths:
            dst = folder / Path(p).name
            if not dst.is_file():
                tmp = dst.with_suffix(".tmp")
                tmp.write_bytes(f(Image.open(p).convert("RGB")))
                tmp.replace(dst)
            files.append(dst)
        out[kind] = files
    return out


def decode_and_hash(model, paths) -> tuple[list, list[str], list[str]]:
    ims = [load_image(p, model.decode_size) for p in paths]
    return ims, [image_hash(im) for im in ims], [crop_hashes(im) for im in ims]


def crop_dist(a: dict, b: dict, rows_a=None, rows_b=None) -> np.ndarray:
    """:func:`vsekit.index.phash.crop_distances` of the photos of ``a`` against those of
    ``b`` (each a dict with ``hash`` and ``crops``), optionally of some rows only."""
    fa, _ = hash_array(a["hash"])
    fb, _ = hash_array(b["hash"])
    ca, _ = crops_array(a["crops"])
    cb, _ = crops_array(b["crops"])
    ra = slice(None) if rows_a is None else rows_a
    rb = slice(None) if rows_b is None else rows_b
    return crop_distances(fa[ra], ca[ra], fb[rb], cb[rb]).astype(np.int16)


def embed_cached(model, name: str, paths: list, ims: list) -> np.ndarray:
    CACHE.mkdir(parents=True, exist_ok=True)
    f = CACHE / f"emb-{model.fingerprint}-{name}-{len(paths)}.npy"
    if f.is_file():
        return np.load(f)
    t0 = time.perf_counter()
    emb = np.asarray(model.encode_image(ims, batch_size=16), np.float32)
    print(f"  embedded {name}: {len(paths)} in {time.perf_counter() - t0:.0f} s", flush=True)
    np.save(f, emb)
    return emb


def labelled_set(model, split: str, originals: list[str], n_copies: int, seed: int) -> dict:
    """Hashes and embeddings of ``originals`` and of the copies of ``n_copies`` of them
    (a seeded sample); ``copied``: the originals' positions that have copies."""
    rng = np.random.default_rng(seed)
    copied = np.sort(rng.choice(len(originals), min(n_copies, len(originals)), replace=False))
    ims, hashes, crops = decode_and_hash(model, originals)
    out = {"orig": {"hash": hashes, "crops": crops,
                    "emb": embed_cached(model, f"{split}-orig", originals, ims)},
           "copied": copied, "copies": {}}  # fmt: skip
    files = copy_files(split, [originals[i] for i in copied])
    for kind, paths in files.items():
        ims, hashes, crops = decode_and_hash(model, paths)
        emb = embed_cached(model, f"{split}-{kind.replace(' ', '_')}", paths, ims)
        out["copies"][kind] = {"hash": hashes, "crops": crops, "emb": emb}
    return out


def negatives(s: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Hash distances (whole photos, and whole against crops) and cosines of every
    negative pair (originals among themselves, then each copy against every other
    original), and which are original pairs."""
    o = s["orig"]
    n = len(o["hash"])
    iu = np.triu_indices(n, 1)
    d = [hash_distances(o["hash"], o["hash"])[iu]]
    dc = [crop_dist(o, o)[iu]]
    c = [(o["emb"] @ o["emb"].T)[iu]]
    for cp in s["copies"].values():
        other = np.ones((len(s["copied"]), n), bool)
        other[np.arange(len(s["copied"])), s["copied"]] = False
        d.append(hash_distances(cp["hash"], o["hash"])[other])
        dc.append(crop_dist(cp, o)[other])
        c.append((cp["emb"] @ o["emb"].T)[other])
    is_orig = np.zeros(sum(len(x) for x in d), bool)
    is_orig[: len(d[0])] = True
    return np.concatenate(d), np.concatenate(dc), np.concatenate(c), is_orig


def positives(s: dict) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per kind of copy: the hash distances (whole, whole against crops) and cosines
    of each copy to its original."""
    o, k = s["orig"], s["copied"]
    out = {}
    for kind, cp in s["copies"].items():
        d = hash_distances(cp["hash"], [o["hash"][i] for i in k]).diagonal()
        dc = np.array([crop_dist(cp, o, [i], [j])[0, 0] for i, j in enumerate(k)], np.int16)
        c = np.einsum("ij,ij->i", cp["emb"], o["emb"][k])
        out[kind] = (d, dc, c)
    return out


def _max_growth(c: np.ndarray, pair_i: np.ndarray, pair_j: np.ndarray, n: int) -> float:
    """How much the largest of ``c`` (scores of pairs ``(pair_i, pair_j)`` among ``n``
    photos) grows from half the photos to all of them: the mean over 20 seeded halves."""
    if not len(c):
        return 0.0
    rng = np.random.default_rng(0)
    halves = []
    for _ in range(20):
        keep = np.zeros(n, bool)
        keep[rng.choice(n, n // 2, replace=False)] = True
        m = keep[pair_i] & keep[pair_j]
        halves.append(c[m].max() if m.any() else c.min())
    return float(c.max() - np.mean(halves))


def _fit_distance(d: np.ndarray, c: np.ndarray, floor: float, n_pairs: int) -> tuple:
    """Collisions between different photos grow about geometrically with the hash
    distance: a log-linear fit of the number of pairs within each distance (10..20
    bits, cosine >= ``floor``) among ``n_pairs``; the largest distance at which a
    library of :data:`LIBRARY` photos expects less than one false pair, and the
    expected counts."""
    hs = np.arange(10, 21)
    counts = np.array([int(((d <= h) & (c >= floor)).sum()) for h in hs])
    slope, icpt = np.polyfit(hs[counts > 0], np.log(counts[counts > 0]), 1)
    scale = LIBRARY * (LIBRARY - 1) / 2 / n_pairs
    expected = {int(h): float(np.exp(icpt + slope * h) * scale) for h in range(0, 13)}
    return max(h for h, e in expected.items() if e < 1), expected


def choose(s: dict) -> dict:
    """The thresholds, from the train slice's photos and copies alone.

    * ``floor``: the lowest cosine of a copy the hash finds (resizes, re-encodes, colour
      edits: distance <= 8), less 0.1, to one decimal;
    * ``hash_distance`` (whole photos) and ``crop_distance`` (one photo's whole hash
      against the other's crop hashes): by :func:`_fit_distance` on the pairs of
      originals, each alone;
    * ``cosine`` (the embedding alone): the largest cosine of two different originals,
      plus :data:`DOUBLINGS` times its growth from 250 to 500 photos
      (:func:`_max_growth`): so as to hold for a library of 2,000 photos, twice dev;
    * ``candidate_distance`` and ``confirm``: for each hash distance H (12..30 bits),
      the confirming cosine is the largest cosine of two different originals within H
      bits plus the same margin; the H kept is the one whose rule (with the others
      above) finds the most crops of the slice (ties: the smaller H).
    """
    o = s["orig"]
    n = len(o["hash"])
    ii, jj = np.triu_indices(n, 1)
    d = hash_distances(o["hash"], o["hash"])[ii, jj].astype(int)
    dc = crop_dist(o, o)[ii, jj].astype(int)
    c = (o["emb"] @ o["emb"].T)[ii, jj]
    pos = positives(s)
    hashed = ("resize 50%", "resize 25%", "jpeg q30", "colour edit")
    copy_cos = np.concatenate([cc[dd <= 8] for k, (dd, _, cc) in pos.items() if k in hashed])
    floor = round(float(np.floor((copy_cos.min() - 0.1) * 10) / 10), 2)
    hash_distance, expected = _fit_distance(d, c, floor, len(d))
    crop_distance, expected_crop = _fit_distance(dc, c, floor, len(d))
    growth = _max_growth(c, ii, jj, n)
    margin = DOUBLINGS * growth
    cosine = round(float(np.ceil((c.max() + margin) * 100) / 100), 2)
    crops = [k for k in pos if k.startswith("crop")]
    grid = []
    for h in range(12, 31, 2):
        m = d <= h
        conf = round(float(np.ceil((c[m].max() + margin) * 100) / 100), 2)
        t = {"floor": floor, "hash_distance": hash_distance, "crop_distance": crop_distance,
             "candidate_distance": h, "confirm": conf, "cosine": cosine}  # fmt: skip
        found = [_rule(*pos[k], t) for k in crops]
        grid.append({"candidate_distance": h, "confirm": conf,
                     "crop_recall": round(float(np.mean(np.concatenate(found))), 4)})  # fmt: skip
    best = max(grid, key=lambda g: (g["crop_recall"], -g["candidate_distance"]))
    return {
        "floor": floor,
        "hash_distance": hash_distance,
        "expected_false_hash_pairs_in_a_library": {
            "photos": LIBRARY,
            **{str(h): round(e, 3) for h, e in expected.items()},
        },
        "crop_distance": crop_distance,
        "expected_false_crop_hash_pairs_in_a_library": {
            "photos": LIBRARY,
            **{str(h): round(e, 3) for h, e in expected_crop.items()},
        },
        "cosine": cosine,
        "largest_cosine_of_different_originals": round(float(c.max()), 4),
        "growth_of_the_largest_cosine_per_doubling": round(growth, 4),
        "doublings": DOUBLINGS,
        "candidate_distance": best["candidate_distance"],
        "confirm": best["confirm"],
        "candidate_grid": grid,
        "original_pairs": int(len(d)),
    }


def _rule(d, dc, c, t: dict) -> np.ndarray:
    """Which pairs (hash distances ``d``, whole-against-crop distances ``dc``, cosines
    ``c``) the two stages accept under the thresholds ``t`` (as
    :func:`vsekit.index.duplicates.pairs_of` applies them)."""
    by_hash = ((d <= t["hash_distance"]) | (dc <= t["crop_distance"])) & (c >= t["floor"])
    by_candidate = (d <= t["candidate_distance"]) & (c >= t["confirm"])
    return by_hash | by_candidate | (c >= t["cosine"])


def report(s: dict, t: dict) -> dict:
    """Precision and recall per kind of copy under the thresholds ``t`` (both stages;
    and what each finds alone), the false pairs, and the most alike distinct photos."""
    nd, ndc, nc, is_orig = negatives(s)
    false = _rule(nd, ndc, nc, t)
    o = s["orig"]
    n = len(o["hash"])
    per_kind = {}
    for kind, (d, dc, c) in positives(s).items():
        found = _rule(d, dc, c, t)
        cp = s["copies"][kind]
        other = np.ones((len(s["copied"]), n), bool)
        other[np.arange(len(s["copied"])), s["copied"]] = False
        all_d = hash_distances(cp["hash"], o["hash"])
        fp = int(_rule(all_d, crop_dist(cp, o), cp["emb"] @ o["emb"].T, t)[other].sum())
        tp = int(found.sum())
        by_whole = (d <= t["hash_distance"]) & (c >= t["floor"])
        by_crop = (dc <= t["crop_distance"]) & (c >= t["floor"])
        by_candidate = (d <= t["candidate_distance"]) & (c >= t["confirm"])
        per_kind[kind] = {
            "pairs": len(d),
            "recall": round(tp / len(d), 4),
            # a copy against every other original: the false pairs this kind makes
            "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
            "false_pairs": fp,
            "recall_hash_alone": round(float(by_whole.mean()), 4),
            "recall_crop_hash_alone": round(float(by_crop.mean()), 4),
            "recall_hash_candidate_confirmed": round(float(by_candidate.mean()), 4),
            "recall_embedding_alone": round(float((c >= t["cosine"]).mean()), 4),
            "hash_distance_median_p95_max": [
                int(np.median(d)),
                int(np.quantile(d, 0.95)),
                int(d.max()),
            ],
            "crop_hash_distance_median_p95_max": [
                int(np.median(dc)),
                int(np.quantile(dc, 0.95)),
                int(dc.max()),
            ],
            "cosine_min_p5_median": [
                round(float(c.min()), 3),
                round(float(np.quantile(c, 0.05)), 3),
                round(float(np.median(c)), 3),
            ],
        }
    iu = np.triu_indices(n, 1)
    sims = (o["emb"] @ o["emb"].T)[iu]
    dist = hash_distances(o["hash"], o["hash"])[iu]
    cdist = crop_dist(o, o)[iu]
    top = np.argsort(-sims)[:10]
    alike = [{"cosine": round(float(sims[k]), 3), "hash_distance": int(dist[k]),
              "crop_hash_distance": int(cdist[k]),
              "a": Path(s["paths"][iu[0][k]]).name, "b": Path(s["paths"][iu[1][k]]).name}
             for k in top]  # fmt: skip
    return {
        "per_kind": per_kind,
        "negative_pairs": int(len(nd)),
        "false_pairs": int(false.sum()),
        "false_pairs_among_originals": int(false[is_orig].sum()),
        "hash_distance_of_different_photos_min_p001": [
            int(dist.min()),
            float(np.quantile(dist, 0.001)),
        ],  # fmt: skip
        "crop_hash_distance_of_different_photos_min_p001": [
            int(cdist.min()),
            float(np.quantile(cdist, 0.001)),
        ],  # fmt: skip
        "most_alike_different_photos": alike,
    }


def originals_groups(s: dict, t: dict) -> list[list[str]]:
    """The groups :func:`vsekit.index.duplicates.pairs_of` and ``components`` make of
    the originals alone, as an index of them would show them (their names)."""
    o = s["orig"]
    pairs = dup.pairs_of(o["hash"], o["emb"], t["hash_distance"], t["cosine"],
                         t["candidate_distance"], t["confirm"], t["floor"],
                         o["crops"], t["crop_distance"])  # fmt: skip
    comps = dup.components(len(o["hash"]), [(i, j) for i, j, _, _ in pairs])
    return [[Path(s["paths"][k]).name for k in c] for c in comps if len(c) > 1]


IN_CODE = {"floor": dup.COPY_FLOOR, "hash_distance": dup.HASH_DISTANCE,
           "crop_distance": dup.CROP_DISTANCE, "cosine": dup.NEAR_THRESHOLD,
           "candidate_distance": dup.CANDIDATE_DISTANCE,
           "confirm": dup.CONFIRM_COSINE}  # fmt: skip
FORMER = {
    "floor": 2.0,
    "hash_distance": -1,
    "crop_distance": -1,
    "cosine": 0.88,
    "candidate_distance": -1,
    "confirm": 2.0,
}  # fmt: skip  (the embedding alone at 0.88)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev-copies", type=int, default=250, help="dev photos given copies")
    ap.add_argument("--train-copies", type=int, default=250, help="train-slice photos given copies")
    ap.add_argument(
        "--precision",
        default=None,
        help="the image encoder's precision (default: the model's default on this CPU); "
        "another than the default writes duplicates_<precision>.json",
    )
    ap.add_argument(
        "--cpu-shared",
        default="",
        help="what else ran on the CPU, recorded in the JSON (the seconds are then not a "
        "speed figure)",
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    model = vsekit.load_model(precision=args.precision)
    ds = load_dataset(FLICKR8K)
    slice_ = ds.carve("train", 500, "train-val", 0).split("train-val")
    sets = {}
    for split, d, n in (("train-slice", slice_, args.train_copies),
                        ("dev", ds.split("dev"), args.dev_copies)):  # fmt: skip
        paths = sorted(str(im.path) for im in d.images)
        print(f"{split}: {len(paths)} photos, copies of {n}", flush=True)
        sets[split] = labelled_set(model, split, paths, n, seed=0)
        sets[split]["paths"] = paths
    chosen = choose(sets["train-slice"])
    t = {k: chosen[k] for k in IN_CODE}
    if t != IN_CODE:
        print(f"note: the code's thresholds {IN_CODE} differ from the chosen {t}")
    groups = originals_groups(sets["dev"], IN_CODE)
    old = report(sets["dev"], FORMER)
    suffix = f"_{args.precision}" if args.precision else ""
    out = record(
        Path(__file__).with_name(f"duplicates{suffix}.json"),
        {
            "command": shlex.join(["python", "benchmarks/duplicates.py", *sys.argv[1:]]),
            "cpu_shared": args.cpu_shared or "no (nothing else was declared running)",
            "seconds": round(time.perf_counter() - t0, 1),
            "model": model.info.get("name", "default"),
            "model_fingerprint": model.fingerprint,
            "model_backend": type(model).__name__,
            "model_precision": getattr(model, "precision", None),
            "hash": HASH_KIND,
            "crop_hashes": {"keep_of_each_side": CROP_KEEP, "boxes": list(CROPS)},
            "copies": list(COPIES),
            "target_kinds": list(TARGET_KINDS),
            "chosen_on_train_slice": chosen,
            "in_code": IN_CODE,
            "train_slice": {
                "photos": len(sets["train-slice"]["paths"]),
                "photos_with_copies": len(sets["train-slice"]["copied"]),
                **report(sets["train-slice"], IN_CODE),
            },  # fmt: skip
            "dev": {
                "photos": len(sets["dev"]["paths"]),
                "photos_with_copies": len(sets["dev"]["copied"]),
                "false_groups_among_originals": len(groups),
                "groups_among_originals": groups,
                **report(sets["dev"], IN_CODE),
            },  # fmt: skip
            "dev_former_rule_cosine_0.88": {
                "per_kind_recall": {k: v["recall"] for k, v in old["per_kind"].items()},
                "false_pairs_among_originals": old["false_pairs_among_originals"],
                "false_groups_among_originals": len(originals_groups(sets["dev"], FORMER)),
            },
        },
    )
    print({k: out[k] for k in ("chosen_on_train_slice", "in_code")})
    for k, v in out["dev"]["per_kind"].items():
        print(f"  dev {k:16s} recall {v['recall']:.4f}  precision {v['precision']:.4f}")
    print("  dev false groups among the originals:", out["dev"]["false_groups_among_originals"])


if __name__ == "__main__":
    main()
