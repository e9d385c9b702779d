"""``vse features extract --ray``: the backbone's forward passes on a Ray cluster.

Ray Data reads the items from where the store stopped; an actor pool of backbone
replicas (:class:`FeatureWorker`, one model each) decodes the views and computes the
pooled features of a block through ``map_batches``. Blocks come back in item order
(``preserve_order``), and the driver appends each to the store through the same commit
as a local batch (:func:`vsekit.lab.features.extract.extract_to_store`): one writer,
resumable after the last committed block, bad files recorded in ``failed.jsonl``.
Workers read the images by path and load the same weights file (the same paths on every
machine, or the default weights installed on each with ``vse weights install``).
"""

from __future__ import annotations

import os
import pickle

import numpy as np

from vsekit.index.ray_index import actor_pool_map
from vsekit.lab.features.extract import BlockSource, features_of, read_views
from vsekit.media.video import Sampling


class FeatureWorker:
    """One backbone replica in a Ray actor: ``__call__`` reads and embeds a block of
    items (columns ``k``, ``path`` as file-system bytes) and returns one pickled
    ``([(index, error)], pooled, rmac)``."""

    def __init__(self, backbone: str, weights: str, sha256: str | None, crops: int, size: int,
                 sampling: Sampling | None, with_rmac: bool, threads: int,
                 device: str = "cpu") -> None:  # fmt: skip
        import torch

        from vsekit.lab.features.backbones import create_backbone
        from vsekit.lab.features.extract import prepare_model

        if device == "cuda" and not torch.cuda.is_available():  # never a quiet CPU run
            raise RuntimeError(
                "a GPU was asked for, but this worker's PyTorch sees none "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}, "
                f"torch {torch.__version__})"
            )
        torch.set_num_threads(threads)
        self.model = prepare_model(create_backbone(backbone, weights, sha256), device)
        self.crops, self.size, self.with_rmac, self.sampling = crops, size, with_rmac, sampling

    def __call__(self, block: dict) -> dict:
        batch = [read_views(int(k), os.fsdecode(bytes(p)), self.crops, self.size, self.sampling)
                 for k, p in zip(block["k"], block["path"], strict=True)]  # fmt: skip
        out = features_of(self.model, batch, self.crops, self.with_rmac)
        return {"out": np.array([pickle.dumps(out)], dtype=object)}


def ray_blocks(
    backbone,
    address: str | None = None,
    workers: int | None = None,
    cpus_per_worker: int = 1,
    gpus_per_worker: float = 0,
) -> BlockSource:
    """A :data:`~vsekit.lab.features.extract.BlockSource` computing on Ray with
    ``workers`` replicas of ``backbone`` (its name and weights file travel, not the
    module), each with ``cpus_per_worker`` CPUs and as many torch threads, and with
    ``gpus_per_worker`` of a GPU, on CUDA, when that is set."""

    def source(items, start, crops, size, sampling, with_rmac, batch_size):
        if start >= len(items):
            return
        rows = [{"k": k, "path": os.fsencode(str(items[k].path))}
                for k in range(start, len(items))]  # fmt: skip
        kwargs = {"backbone": backbone.name, "weights": backbone.weights_source,
                  "sha256": backbone.weights_sha256, "crops": crops, "size": size,
                  "with_rmac": with_rmac, "threads": cpus_per_worker,
                  "sampling": sampling, "device": "cuda" if gpus_per_worker else "cpu"}  # fmt: skip
        yield from actor_pool_map(rows, FeatureWorker, kwargs, batch_size, address, workers,
                                  cpus_per_worker, ordered=True,
                                  gpus_per_worker=gpus_per_worker)  # fmt: skip

    return source
