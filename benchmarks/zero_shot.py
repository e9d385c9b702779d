"""Zero-shot words: 20 nouns held out of training, then searched for on dev.

Protocol (issue: open vocabulary):

1. Hold out 20 concrete nouns and their plurals (the list below, fixed before any
   result): every train caption that uses one is dropped (``data.hold_out_words``), so
   the model never reads them; images left without captions leave training too.
2. Train ``configs/flickr8k-recommended.yaml`` on what is left, with epochs chosen on 500
   train images carved out (``data.val_from_train``); dev is not looked at.
3. Query the 1,000 dev images (their 2-crop FeatureStore rows) with the dev captions
   that use a held-out noun, and with all dev captions: text-to-image R@1/5/10.

Rows: the held-out model with its closed vocabulary (the nouns are ``<unk>``); the same
model with the vocabulary expansion (a GloVe map fitted on the words it did learn); the
pretrained sentence-encoder tower (``configs/flickr8k-minilm.yaml``, frozen
all-MiniLM-L6-v2, trained on the same reduced captions: the transformer read the nouns
in pre-training, the projection never did); the expanded GRU and MiniLM as an ensemble
(equal weights, fixed before any result); and, as the ceiling, the shipped default
model, which trained with the held-out nouns, on the same features.

The concept channel (ConSE, ``kind: conse``: the backbone's own ImageNet classifier, its
top 10 classes' names embedded by GloVe, nothing trained) is scored alone, and fused with
a model by the weighted mean of the two cosines; its weight is chosen from a grid on the
captions of the 500 train images carved out (``ds.carve``, seed 0; dev not looked at).

Run: python benchmarks/zero_shot.py
Writes benchmarks/zero_shot.json and .md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

import vsekit  # noqa: E402
from vsekit.lab.data import load_dataset, tokenize  # noqa: E402
from vsekit.lab.features.store import FeatureStore  # noqa: E402
from vsekit.lab.models.factory import create_model, model_config  # noqa: E402
from vsekit.lab.text.glove import load_glove  # noqa: E402
from vsekit.lab.train import load_config  # noqa: E402
from vsekit.lab.train.config import apply_overrides  # noqa: E402
from vsekit.lab.train.export import ensemble_from_models, model_from_run  # noqa: E402
from vsekit.lab.train.features import image_features  # noqa: E402
from vsekit.lab.train.retrieval_data import load_train_data  # noqa: E402
from vsekit.lab.train.trainer import Trainer  # noqa: E402
from vsekit.text.expansion import expand_vocabulary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
F8K = ROOT.parent / "shared" / "data" / "flickr8k"
RUN = ROOT / "runs" / "bench-zero-shot"
RUN_MINILM = ROOT / "runs" / "bench-zero-shot-minilm"
NOUNS = ["horse", "bicycle", "guitar", "skateboard", "surfboard", "kayak", "camera",
         "umbrella", "motorcycle", "sheep", "cow", "bird", "duck", "fountain", "bridge",
         "tent", "boat", "truck", "bus", "train"]  # fmt: skip
HELD_OUT = sorted({*NOUNS, *(n + "s" for n in NOUNS)})


def t2i(img: np.ndarray, txt: np.ndarray, c2i: np.ndarray) -> dict:
    """Text-to-image R@1/5/10 (%) of each caption's image among all images."""
    s = txt @ img.T
    own = s[np.arange(len(c2i)), c2i]
    ranks = 1 + (s > own[:, None]).sum(1)
    return {f"r{k}": round(100 * float((ranks <= k).mean()), 2) for k in (1, 5, 10)}


CONSE_GRID = (0.05, 0.1, 0.15, 0.2, 0.3)  # the concept channel's share of the similarity


def fuse(a: np.ndarray, b: np.ndarray, w: float) -> np.ndarray:
    """Unit embeddings ``[a * sqrt(1 - w); b * sqrt(w)]``: their dot product is the
    weighted mean of the two cosines (as in ``kind: ensemble``)."""
    return np.concatenate([np.sqrt(1 - w) * a, np.sqrt(w) * b], 1)


def conse_channel(store: FeatureStore):
    """The ConSE model on this store's unit pool5 rows (its pool5 norm from train rows)."""
    sl = store.layer_slices()[store.meta["baseline_layer"]]
    raw = np.asarray(store.pooled[store.rows("train"), sl])
    norm = float(np.linalg.norm(raw, axis=1).mean())
    cfg = model_config({"kind": "conse", "pool5_norm": norm})
    return create_model(raw.shape[1], None, cfg), norm


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    cfg = load_config(ROOT / "configs" / "flickr8k-recommended.yaml")
    held = "[" + ", ".join(HELD_OUT) + "]"
    cfg = apply_overrides(cfg, [f"data.hold_out_words={held}", "data.val_from_train=500"])
    lm_cfg = apply_overrides(load_config(ROOT / "configs" / "flickr8k-minilm.yaml"),
                             [f"data.hold_out_words={held}"])  # fmt: skip
    for c, run in ((cfg, RUN), (lm_cfg, RUN_MINILM)):
        if not (run / "done.json").is_file():
            Trainer(c, load_train_data(c), run).fit()
            (run / "done.json").write_text("{}\n")
    ds = load_dataset(F8K)
    train, dev = ds.split("train"), ds.split("dev")
    kept = train.without_words(HELD_OUT)
    closed = model_from_run(RUN)
    vocab = closed.text_vocabulary
    assert not set(HELD_OUT) & set(vocab.stoi), "a held-out word reached the vocabulary"
    expanded = model_from_run(RUN)
    enc = expanded.model.text
    index, vectors = load_glove()
    exp = expand_vocabulary(enc.vocab, enc.embed.weight.detach().numpy(), index, vectors)
    expanded.expand_vocabulary(exp.words, exp.vectors, exp.info)
    minilm = model_from_run(RUN_MINILM)
    both = ensemble_from_models([model_from_run(RUN), minilm])  # then expanded, as shipped
    both.expand_vocabulary(exp.words, exp.vectors, exp.info)
    ceiling = vsekit.load_model("default", backend="torch", device="cpu")
    store = FeatureStore(Path(cfg.data.store).expanduser())
    feats = image_features(store, cfg.data.features, [im.id for im in dev.images])
    banned = set(HELD_OUT)
    zs = np.array([bool(banned & set(tokenize(t))) for t in dev.texts])
    c2i = dev.caption_to_image
    texts = list(dev.texts)
    rows = {}
    models = {
        "closed vocabulary": closed,
        "vocabulary expansion": expanded,
        "MiniLM tower (frozen all-MiniLM-L6-v2)": minilm,
        "ensemble: expanded GRU + MiniLM (equal weights)": both,
        "ceiling: default model (trained with the held-out nouns)": ceiling,
    }
    conse, pool5_norm = conse_channel(store)  # the features are pool5 (baseline)
    sel = ds.carve("train", 500, "train-val", 0).split("train-val")
    sel_feats = image_features(store, cfg.data.features, [im.id for im in sel.images])
    sel_c2i = sel.caption_to_image

    def conse_emb(f: np.ndarray, t: list[str]) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            i, x = conse.encode_images(torch.from_numpy(f)), conse.encode_texts(t)
        return i.numpy(), x.numpy()

    ci, ct = conse_emb(feats, texts)
    si, st = conse_emb(sel_feats, list(sel.texts))
    emb, shares = {}, {}
    for name, model in models.items():
        emb[name] = (model.encode_image_features(feats), model.encode_text(texts))
    emb["ConSE concept channel alone (nothing trained)"] = (ci, ct)
    for base in ("closed vocabulary", "ensemble: expanded GRU + MiniLM (equal weights)",
                 "ceiling: default model (trained with the held-out nouns)"):  # fmt: skip
        model = models[base]
        bi, bt = model.encode_image_features(sel_feats), model.encode_text(list(sel.texts))
        score = {w: sum(t2i(fuse(bi, si, w), fuse(bt, st, w), sel_c2i).values())
                 for w in CONSE_GRID}  # fmt: skip
        w = max(score, key=score.get)
        label = f"{base.split(':')[0]} + ConSE (share {w})"
        emb[label] = (fuse(emb[base][0], ci, w), fuse(emb[base][1], ct, w))
        shares[label] = {"share": w, "selection_t2i_r_sum": score}
    for name, (img, txt) in emb.items():
        rows[name] = {
            "held_out_noun_captions": t2i(img, txt[zs], c2i[zs]),
            "all_dev_captions": t2i(img, txt, c2i),
        }
        print(name, rows[name], flush=True)
    res = record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/zero_shot.py",
            "held_out_words": HELD_OUT,
            "train_captions": {"all": len(train.captions), "kept": len(kept.captions)},
            "train_images_kept": len(kept.images),
            "dev_captions_with_held_out_nouns": int(zs.sum()),
            "expansion": exp.info,
            "conse": {"top_k": conse.cfg.top_k, "pool5_norm": pool5_norm, "shares": shares},
            "t2i": rows,
        },
    )
    lines = [
        "| model | held-out-noun captions R@1 / R@5 / R@10 | all dev captions R@1 / R@5 / R@10 |",
        "|---|---|---|",
    ]
    for name, r in res["t2i"].items():
        a, b = r["held_out_noun_captions"], r["all_dev_captions"]
        lines.append(f"| {name} | {a['r1']:.1f} / {a['r5']:.1f} / {a['r10']:.1f} | "
                     f"{b['r1']:.1f} / {b['r5']:.1f} / {b['r10']:.1f} |")  # fmt: skip
    Path(__file__).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
