"""From a training run to a model bundle (:class:`~vsekit.lab.torch_model.VSEModel`): the image
side is read from the FeatureStore the run trained on, so the bundle records the backbone,
its weights' sha256 and preprocessing, the crops and the feature kind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from vsekit.lab.features.store import FeatureStore
from vsekit.lab.torch_model import BUNDLE_VERSION, ModelError, VSEModel
from vsekit.lab.train.trainer import load_run


def _run_metrics(run: Path, which: str) -> dict | None:
    p = run / f"{which}.json"
    return json.loads(p.read_text()).get("metrics") if p.is_file() else None


def image_spec(store: FeatureStore, features: str) -> dict:
    """What a bundle records of the image side, from the store the run trained on."""
    m = store.meta
    return {
        **store.identity(),
        "crops": int(m["crops"]),
        "features": features,
        "baseline_layer": m["baseline_layer"],
        "fne": m.get("fne") if features == "fne" else None,
    }


def model_from_run(run: str | Path, which: str = "best", store: str | None = None) -> VSEModel:
    """A training run as a :class:`VSEModel` (``store`` overrides the run's store path)."""
    run = Path(run)
    model, meta = load_run(run, which)
    data = meta["config"]["data"]
    if meta["config"].get("tune"):
        raise ModelError(
            f"{run}: a tuned-stage run (tune:); bundles carry the pretrained backbone only, "
            "so it cannot be exported yet"
        )
    if data["features"].endswith("+audio"):
        raise ModelError(
            f"{run}: trained on visual+audio features ({data['features']}); a bundle embeds "
            "images and video frames only, so export a run on visual features"
        )
    fs = FeatureStore(Path(store or data["store"]).expanduser())
    if meta.get("store_fingerprint") and fs.fingerprint() != meta["store_fingerprint"]:
        raise ModelError(
            f"{fs.path}: not the FeatureStore run {run} trained on (fingerprint differs)"
        )
    spec = image_spec(fs, data["features"])
    if spec["weights_sha256"] is None and fs.meta.get("weights") != "random":
        raise ModelError(
            f"{fs.path}: the store records no backbone weights sha256; re-extract it "
            "(`vse features extract`) so that the bundle can pin its weights"
        )
    if spec["weights_sha256"] is None:
        spec["weights"] = "random"
    info = {
        "version": BUNDLE_VERSION,
        "config": meta["config"],
        "img_dim": meta["img_dim"],
        "image": spec,
        "source": {"run": run.name, "checkpoint": which},
        "dev_metrics": _run_metrics(run, which),
    }
    stats = fs.fne_stats() if data["features"] == "fne" else None
    return VSEModel(model, info, stats, None, run)


def attach_tagger(model: VSEModel, run: str | Path) -> None:
    """Add a trained tag ranker (a ``task: tags`` run) that reads the same image
    features as ``model`` (ValueError if it does not)."""
    tagger, meta = load_run(run)
    data = meta["config"]["data"]
    spec = model.info["image"]
    if meta["config"].get("task") != "tags":
        raise ValueError(f"{run}: not a tag-ranking run")
    if (data["backbone"], int(data["crops"]), data["features"]) != (
        spec["backbone"],
        int(spec["crops"]),
        spec["features"],
    ):
        raise ValueError(f"{run}: its image features differ from the model's ({spec})")
    names = list(tagger.vocab.itos)
    model.tagger = (tagger.W.detach().float().cpu().numpy(), names)
    model.info["tagger"] = {"run": Path(run).name, "dev_metrics": _run_metrics(Path(run), "best")}
    model._tag_table = model._tag_bias = model._tag_vectors = None
    if getattr(tagger.cfg, "learn_tags", False):  # ship phi(y) + d_y, b_y and a threshold
        from vsekit.lab.text.glove import tag_vectors

        vecs, known = tag_vectors(names)
        if not known.all():
            raise ValueError(f"{run}: training tags without a word vector")
        with torch.no_grad():
            v, b = tagger.tag_terms(torch.from_numpy(vecs), tagger.tag_ids(names))
        model._tag_table = (v.cpu().numpy(), [True] * len(names))
        model._tag_bias = b.cpu().numpy()
        model.info["tagger"].update(calibrate_tagger(tagger, run))


def calibrate_tagger(tagger, run: str | Path, precision: float = 0.8) -> dict:
    """The display threshold of a probability tagger (``loss: tag_bce``): the lowest at
    which its shown tags reach ``precision`` on the run's selection images (its ``dev``:
    500 train images carved out, with ``data.val_from_train``), over every training tag."""
    from vsekit.lab.tags.metrics import calibrate_threshold, shown_tags
    from vsekit.lab.train.config import ExperimentConfig, from_dict
    from vsekit.lab.train.tags import load_tag_data

    _, meta = load_run(run)
    cfg = from_dict(ExperimentConfig, meta["config"])
    data = load_tag_data(cfg, progress=False)
    scores, rel = data.vocab_scores(tagger, min_count=1, model_tags_only=True)
    probs = 1 / (1 + np.exp(-scores))
    thr = calibrate_threshold(probs, rel, precision)
    on = "carved train slice" if cfg.data.val_from_train else "dev (no carved slice)"
    return {"threshold": thr, "calibrated_on": on, "target_precision": precision,
            "calibration": shown_tags(probs, rel, thr)}  # fmt: skip


#: what must agree for models to share one image pass (an ensemble's members)
_SAME_IMAGE_SIDE = ("backbone", "weights_sha256", "crops", "features", "baseline_layer")


def ensemble_from_models(models: list[VSEModel], weights: list[float] | None = None) -> VSEModel:
    """Several models trained on the same image features as one
    (:class:`~vsekit.lab.models.factory.EnsembleEmbedding`: the weighted mean of their cosine
    similarities). Raises ValueError naming the member whose image side or vocabulary
    differs."""
    import torch

    from vsekit.lab.models.factory import create_model, model_config, text_encoders, word_encoder

    if len(models) < 2:
        raise ValueError("an ensemble needs at least 2 models")
    first = models[0]
    want = {k: first.info["image"].get(k) for k in _SAME_IMAGE_SIDE}
    vocab = None
    for m in models:
        got = {k: m.info["image"].get(k) for k in _SAME_IMAGE_SIDE}
        if got != want:
            diff = [k for k in _SAME_IMAGE_SIDE if got[k] != want[k]]
            raise ValueError(f"{m.path}: other image features than {first.path} ({diff})")
        if m.expansion is not None:
            raise ValueError(f"{m.path}: expand the ensemble's vocabulary, not a member's")
        enc = word_encoder(m.model)
        if enc is not None:
            if vocab is not None and enc[1].vocab.itos != vocab.itos:
                raise ValueError(f"{m.path}: its vocabulary differs from the other members'")
            vocab = enc[1].vocab
    vocab = vocab or text_encoders(first.model)[0][1].vocab
    section = {
        "kind": "ensemble",
        "members": [m.info["config"]["model"] for m in models],
        "weights": list(weights or [1.0] * len(models)),
    }
    model = create_model(first.info["img_dim"], vocab, model_config(section))
    with torch.no_grad():
        for member, m in zip(model.members, models, strict=True):
            member.load_state_dict(m.model.state_dict())
    config = dict(first.info["config"], name="ensemble", model=section)
    info = dict(first.info, config=config, dev_metrics=None,
                source={"ensemble": [m.info.get("source") for m in models]})  # fmt: skip
    info.pop("tagger", None)
    return VSEModel(model, info, first.fne_stats, None, first.path)
