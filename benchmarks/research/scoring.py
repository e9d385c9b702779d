"""Scoring a finished run: its best checkpoint (chosen on the selection slice) on the
slice and on dev, and the instability runs' probes. Used by ``runner.py``; nothing
here chooses anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .families import LENGTH_EDGES, Job

F8K = Path(__file__).resolve().parents[3] / "shared" / "data" / "flickr8k"


def score_table2(run: Path, store: str) -> dict:
    """The run's best checkpoint (chosen on the slice) scored on the slice and on dev."""
    from vsekit.lab.data import load_dataset
    from vsekit.lab.eval import retrieval_metrics
    from vsekit.lab.eval.retrieval import retrieval_ranks
    from vsekit.lab.eval.text_retrieval import recall_by_length
    from vsekit.lab.features.store import FeatureStore
    from vsekit.lab.train.export import model_from_run
    from vsekit.lab.train.features import image_features
    from vsekit.text.tokenizer import tokenize

    ds = load_dataset(F8K)
    splits = {
        "slice": ds.carve("train", 500, "train-val", 0).split("train-val"),
        "dev": ds.split("dev"),
    }
    model = model_from_run(run)
    kind = model.info["image"]["features"]
    store = FeatureStore(Path(store).expanduser())
    out = {}
    for name, sp in splits.items():
        img = model.encode_image_features(image_features(store, kind, [i.id for i in sp.images]))
        txt = model.encode_text(sp.texts)
        sims = model.similarity(img, txt)
        c2i = [c.image for c in sp.captions]
        m = retrieval_metrics(sims, c2i)
        out[name] = {k: round(float(v), 2) for k, v in m.items()}
        if name == "dev":  # t2i R@10 by caption length (the regression report's Figure 3)
            lengths = np.array([len(tokenize(t)) for t in sp.texts])
            ranks = retrieval_ranks(sims, c2i)[1]
            out[name]["by_length"] = recall_by_length(ranks, lengths, LENGTH_EDGES)
    return out


def score(job: Job, run: Path) -> dict:
    """``{"slice": {...}, "dev": {...}}``: the run's best checkpoint (chosen on the slice)
    scored on the slice and on dev; for the instability runs (MOE, POE) also ``dev_last``,
    the last checkpoint on dev (see :func:`started`), and its ``order_stats``."""
    import json

    from vsekit.lab.data import Vocabulary
    from vsekit.lab.train.config import apply_overrides, config_from_json
    from vsekit.lab.train.trainer import load_run

    model, meta = load_run(run)
    cfg = config_from_json(json.dumps(meta["config"]))
    vocab = Vocabulary.load(run / "vocab.json")
    out = {}
    for split, sets in (("slice", []), ("dev", ["data.val_from_train=0"])):
        c = apply_overrides(cfg, sets)
        out[split] = (
            _score_tags(model, c)
            if job.family == "tags"
            else _score_retrieval(model, c, vocab, job.family == "reg", lengths=split == "dev")
        )
    if job.family in ("moe", "poe"):  # c is the dev config, from the loop's last pass
        last, _ = load_run(run, "last")
        out["dev_last"] = _score_retrieval(last, c, vocab, False, lengths=False)
        out["order_stats"] = order_stats(run)
    return out


def violation_shares(img, txt, use_abs: bool, chunk: int = 50) -> dict[str, float]:
    """For ``img`` ``[N, D]`` and ``txt`` ``[M, D]`` tensors (after ``abs`` when
    ``use_abs``): the share of the ``N x M`` pairs whose order violation
    ``sum_d max(0, t_d - i_d)^2`` is under 1e-6, in chunks of ``chunk`` images (a
    ``[chunk, M, D]`` difference), and the shares of image coordinates that are
    non-negative and of caption coordinates that are non-positive."""
    if use_abs:
        img, txt = img.abs(), txt.abs()
    zero = sum(
        int(((txt[None] - img[a : a + chunk, None]).clamp(min=0).square().sum(-1) < 1e-6).sum())
        for a in range(0, len(img), chunk)
    )
    return {
        "zero_violation_pairs": round(zero / (len(img) * len(txt)), 4),
        "image_coords_nonneg": round(float((img >= 0).float().mean()), 4),
        "caption_coords_nonpos": round(float((txt <= 0).float().mean()), 4),
    }


def order_stats(run: Path) -> dict:
    """How near an instability run's last model is to the order loss's flat state.

    With ``E(i, t) = sum_d max(0, t_d - i_d)^2`` (the order violation, after ``abs``
    where the model takes it), every hinge of L_M is ``margin + E(pos) - E(neg)``, so a
    model under which no pair violates the order has loss ``2 * batch * margin`` per
    batch and zero gradient (``max(0, x)^2`` is flat at 0). On dev (1,000 images x
    5,000 captions): the share of pairs with ``E < 1e-6``, of image coordinates that are
    non-negative and of caption coordinates that are non-positive; and each epoch's mean
    training loss per batch over ``2 * batch * margin`` (from the run's metrics.jsonl;
    1 when every hinge sits at the margin, meaningful for L_M epochs only)."""
    import json

    from vsekit.lab.data import Vocabulary
    from vsekit.lab.eval.model_eval import encode_all
    from vsekit.lab.train.config import apply_overrides, config_from_json
    from vsekit.lab.train.retrieval_data import load_train_data
    from vsekit.lab.train.trainer import load_run

    model, meta = load_run(run, "last")
    cfg = apply_overrides(config_from_json(json.dumps(meta["config"])), ["data.val_from_train=0"])
    data = load_train_data(cfg, vocab=Vocabulary.load(run / "vocab.json"), progress=False)
    img, txt = (x.float() for x in encode_all(model, data.dev_feats, data.dev_texts))
    per_epoch = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        if line.strip():  # a resumed run repeats an epoch: the last record is the run's
            r = json.loads(line)
            per_epoch[r["epoch"]] = r
    at_margin = 2 * cfg.train.batch_size * cfg.loss.margin
    return {
        **violation_shares(img, txt, cfg.model.abs),
        "loss_over_margin_total": [
            {"epoch": e, "phase": r["phase"], "ratio": round(r["loss"] / at_margin, 4)}
            for e, r in sorted(per_epoch.items())
        ],
    }


def _score_tags(model, cfg) -> dict:
    from vsekit.lab.train.tags import load_tag_data

    m = load_tag_data(cfg, progress=False).evaluate(model)
    return {k: round(float(v), 2) for k, v in m.items()}


def _score_retrieval(model, cfg, vocab, weighted: bool, lengths: bool) -> dict:
    import numpy as np

    from vsekit.lab.eval import evaluate_model
    from vsekit.lab.eval.model_eval import caption_ranks
    from vsekit.lab.eval.text_retrieval import recall_by_length
    from vsekit.lab.train.retrieval_data import load_train_data
    from vsekit.text.tokenizer import tokenize

    data = load_train_data(cfg, vocab=vocab, progress=False)
    m = evaluate_model(model, data.dev_feats, data.dev_texts, data.dev_c2i)
    out = {k: round(float(v), 2) for k, v in m.items()}
    if weighted:  # baseline + weight: each image's captions averaged into one query
        w = evaluate_model(model, data.dev_feats, data.dev_texts, data.dev_c2i, queries="image")
        out["weighted"] = {k: round(float(v), 2) for k, v in w.items()}
        out["hubs"], out["weighted"]["hubs"] = hub_stats(model, data)
    if lengths:
        ranks = caption_ranks(model, data.dev_feats, data.dev_texts, data.dev_c2i)
        n = np.array([len(tokenize(t)) for t in data.dev_texts])
        out["by_length"] = recall_by_length(ranks, n, LENGTH_EDGES)
    return out


def hub_stats(model, data) -> tuple[dict, dict]:
    """How concentrated text-to-image retrieval is, per caption and per pooled query:
    the distinct images ranked first, and the share of all first places that the 10
    most frequent of them take (a hub is an image that is every query's neighbour)."""
    import numpy as np

    from vsekit.lab.eval.model_eval import encode_all, pool_per_image, similarity_matrix

    img, txt = encode_all(model, data.dev_feats, data.dev_texts)
    normalize = getattr(model.cfg, "similarity", "cosine") == "cosine"
    out = []
    for q in (txt, pool_per_image(txt, data.dev_c2i, normalize)):
        first = similarity_matrix(model, img, q).argmax(0).numpy()
        counts = np.sort(np.unique(first, return_counts=True)[1])[::-1]
        out.append({"distinct_first": int(len(counts)),
                    "top10_share": round(float(counts[:10].sum() / len(first)), 3)})  # fmt: skip
    return out[0], out[1]
