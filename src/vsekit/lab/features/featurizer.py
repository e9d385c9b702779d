"""Features of new images, consistent with an existing FeatureStore.

Search and annotation embed images that were never extracted; they must go through the
same backbone, weights, crops, layer set and (for the FNE) the store's train-split
statistics and thresholds. :class:`ImageFeaturizer` takes all of that from the store.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vsekit.lab.features.backbones import Backbone, create_backbone
from vsekit.lab.features.extract import check_store_matches, embed_images, prepare_model
from vsekit.lab.features.store import FeatureStore
from vsekit.runtime.kinds import features_of_kind


class ImageFeaturizer:
    """``ImageFeaturizer(store)(images)`` -> ``{"pooled", "baseline", "rmac", "fne"}``.

    ``images`` are PIL images or paths. ``fne`` is present once the store has one;
    ``rmac`` when the store was extracted with it.
    """

    def __init__(
        self, store: FeatureStore, model: Backbone | None = None, device: str | None = None
    ) -> None:
        self.store = store
        self.crops = int(store.meta["crops"])
        if model is None:
            model = create_backbone(store.meta["backbone"], weights="auto")
        check_store_matches(store, model, self.crops)
        self.model = prepare_model(model, device)
        self.fne_stats = store.fne_stats() if "fne" in store.meta else None
        self._baseline = store.layer_slices()[store.meta["baseline_layer"]]

    def __call__(self, images: Sequence) -> dict[str, np.ndarray]:
        with_rmac = bool(self.store.meta.get("rmac_dim"))
        pooled, r = embed_images(self.model, images, self.crops, with_rmac)
        out = {"pooled": pooled, "baseline": features_of_kind(pooled, "baseline", self._baseline)}
        if r is not None:
            out["rmac"] = r
        if self.fne_stats is not None:
            fne = self.store.meta["fne"]
            out["fne"] = features_of_kind(
                pooled, "fne", self._baseline, self.fne_stats, fne["f_minus"], fne["f_plus"]
            )
        return out
