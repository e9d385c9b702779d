"""The ConSE concept channel (Norouzi et al. 2014) against a naive per-image loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vsekit.lab.features.weight_files import save_weights
from vsekit.lab.models.conse import class_vectors, imagenet_classes
from vsekit.lab.models.factory import create_model, model_config
from vsekit.lab.text.glove import load_glove


@pytest.fixture()
def conse(tmp_path):
    g = torch.Generator().manual_seed(0)
    state = {
        "fc.weight": torch.randn(1000, 16, generator=g),
        "fc.bias": torch.randn(1000, generator=g),
    }
    save_weights(tmp_path / "fc.safetensors", state, {})
    cfg = {
        "kind": "conse",
        "pool5_norm": 3.0,
        "top_k": 4,
        "weights": str(tmp_path / "fc.safetensors"),
    }
    return create_model(16, None, model_config(cfg)), state


def test_images_are_the_probability_weighted_mean_of_their_top_classes(conse):
    model, state = conse
    names = imagenet_classes()
    vec, known = class_vectors(names)
    x = torch.nn.functional.normalize(
        torch.randn(5, 16, generator=torch.Generator().manual_seed(1)), dim=1
    )
    got = model.encode_images(x).numpy()
    for r in range(5):  # naive: softmax, drop unreadable names, top 4, weighted mean, unit
        logits = (3.0 * x[r].double()) @ state["fc.weight"].double().T + state["fc.bias"].double()
        p = torch.softmax(logits, 0).numpy() * known
        top = np.argsort(-p)[:4]
        f = sum(p[t] * vec[t] for t in top)
        np.testing.assert_allclose(got[r], f / np.linalg.norm(f), atol=1e-5)


def test_sentences_are_their_mean_word_vector_without_stop_words(conse):
    model, _ = conse
    index, vectors = load_glove()
    got = model.encode_texts(["a giraffe and the zebra"]).numpy()[0]
    want = (np.asarray(vectors[index["giraffe"]]) + np.asarray(vectors[index["zebra"]])) / 2
    np.testing.assert_allclose(got, want / np.linalg.norm(want), atol=1e-6)
    assert len(names := imagenet_classes()) == 1000 and names[207] == "golden retriever"


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match="pool5_norm"):
        create_model(16, None, model_config({"kind": "conse"}))
