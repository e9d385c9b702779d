"""Which of a pretrained text transformer's products the int8 text graph keeps in float
(:data:`vsekit.graphs.quantize.TEXT_INT8_KEEP_FLOAT`), for all-mpnet-base-v2.

The candidate default with three MPNet towers (``benchmarks/mpnet_default.py``) lost 8.4
dev rsum between its fp32 graphs (361.8) and its int8 ones (353.4) with MiniLM's choice
(the first three layers' feed-forward outputs in float), where MiniLM's own int8 graph
costs nothing. This measures, for each choice of float layers, how close the int8 text
embeddings stay to fp32's: the cosine between the two, per caption, of the MPNet
members' part of the embedding (the GRU's is never quantised), on 1,000 captions of the
500 train photos carved out (label-free: no relevance is read, and dev is untouched), and
the graph's size.

Rule (written after the first five variants were seen, so the choice is not blind): the
fewest float layers whose median cosine is at least 0.99.

Run: python benchmarks/text_int8.py [--bundle ~/.cache/vsekit/runs/candidate-mpnet/bundle]
Writes benchmarks/text_int8.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import record  # noqa: E402

BUNDLE = Path("~/.cache/vsekit/runs/candidate-mpnet/bundle").expanduser()
CAPTIONS = 1000
BAR = 0.99


def _ffn(layers) -> tuple[str, ...]:
    return tuple(f"/encoder/layer.{k}/output/dense/" for k in layers)


#: the float products of each variant: the feed-forward output products of these layers
VARIANTS = {
    "none": (),
    "0-2 (MiniLM's choice)": _ffn(range(3)),
    "0-5": _ffn(range(6)),
    "6": _ffn([6]),
    "7": _ffn([7]),
    "8": _ffn([8]),
    "11": _ffn([11]),
    "9-11": _ffn(range(9, 12)),
    "6-11": _ffn(range(6, 12)),
    "0-11": _ffn(range(12)),
}


def main() -> dict:
    import onnxruntime as ort

    from vsekit.graphs import quantize, write_fp32_graphs
    from vsekit.graphs.model import read_model
    from vsekit.lab.data import load_dataset
    from vsekit.text.tokenizer import tokenize
    from vsekit.text.vocab import Vocabulary
    from vsekit.text.wordpiece import WordPieceTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, default=BUNDLE)
    args = ap.parse_args()
    bundle = args.bundle.expanduser()
    model = read_model(bundle)
    gru = sum(
        model.state[f"{m.text_prefix}rnn.weight_hh_l0"].shape[1]
        for m in model.members if m.text_kind == "gru"
    )  # fmt: skip
    ds = load_dataset(ROOT / ".." / "shared" / "data" / "flickr8k")
    texts = list(ds.carve("train", 500, "train-val", 0).split("train-val").texts)[:CAPTIONS]
    pieces = WordPieceTokenizer(bundle / "tokenizer.json")
    vocab = Vocabulary.load(bundle / "vocab.json")
    if (bundle / "expansion.txt").is_file():
        vocab = vocab.extended((bundle / "expansion.txt").read_text().splitlines())

    def feeds(batch: list[str]) -> dict[str, np.ndarray]:
        seqs = [vocab.encode(tokenize(t)) or [vocab.unk_id] for t in batch]
        lengths = np.asarray([len(s) for s in seqs], np.int64)
        ids = np.zeros((len(batch), int(lengths.max())), np.int64)
        for k, s in enumerate(seqs):
            ids[k, : len(s)] = s
        return {"ids": ids, "lengths": lengths, **pieces(batch)}

    def encode(path: Path) -> np.ndarray:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        out = [sess.run(None, feeds(texts[a : a + 64]))[0] for a in range(0, len(texts), 64)]
        return np.concatenate(out)[:, gru:]

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "text.fp32.onnx"
        meta = write_fp32_graphs(bundle, None, fp32, lambda s: None, fp16_storage=False)
        kind = meta["text_pretrained"]
        ref = encode(fp32)
        for name, keep in VARIANTS.items():
            out = Path(tmp) / "text.int8.onnx"
            shutil.copyfile(fp32, out)
            quantize.quantize_pretrained_int8(out, kind=kind, keep_float=keep)
            got = encode(out)
            cos = (ref * got).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)
            rows[name] = {"float_layers": len(keep), "mb": round(out.stat().st_size / 2**20, 1),
                          "median": round(float(np.median(cos)), 5),
                          "p1": round(float(np.percentile(cos, 1)), 5),
                          "min": round(float(cos.min()), 5)}  # fmt: skip
            print(name, rows[name], flush=True)
    passing = [n for n, r in rows.items() if r["median"] >= BAR]
    chosen = min(passing, key=lambda n: (rows[n]["float_layers"], -rows[n]["median"]), default=None)
    print("chosen:", chosen)
    return record(Path(__file__).with_suffix(".json"), {
        "command": "python benchmarks/text_int8.py", "bundle": bundle.name,
        "model_name": model.info.get("name"), "pretrained": kind, "captions": len(texts),
        "bar_median_cosine": BAR, "variants": rows, "chosen": chosen,
        "shipped_choice": list(quantize.TEXT_INT8_KEEP_FLOAT[kind]),
    })  # fmt: skip


if __name__ == "__main__":
    main()
