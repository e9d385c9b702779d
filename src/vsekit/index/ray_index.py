"""``vse index --ray``: the embedding of an update on a Ray cluster.

The driver (``vse index``) scans the folder and decides what to embed exactly as a
local update does; only the embedding moves. Ray Data reads that file list, and an
actor pool of model replicas (one model per actor, :class:`Embedder`) decodes and
embeds the files through ``map_batches``. The driver takes the embedded blocks as they
come and commits each through the same path as a local batch
(:func:`vsekit.index.update.commit_batch`): one writer, rows fsync'ed before the
transaction that makes them reachable, bad files recorded and skipped. A killed job
keeps every committed block; run again, it embeds only the rest.

Workers read the photos by path and load the model by name or path: every worker must
see the same paths (shared storage) and, for a model other than the shipped default, the
bundle at the same path. Ray is the ``[ray]`` extra; nothing here imports it until used.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
from collections.abc import Iterator

import numpy as np

from vsekit.index.update import Batch, BatchSource, embed_files


class Embedder:
    """One model replica in a Ray actor: ``__call__`` embeds a block of files (columns
    ``path`` as file-system bytes, ``size``, ``mtime``) and returns one pickled
    :class:`~vsekit.index.update.Batch` (paths travel as bytes, so names that are not
    UTF-8 arrive intact)."""

    def __init__(self, model: str, reduce_to: int | None, unit_rows: bool, dim: int,
                 threads: int | None = None, fingerprint: str | None = None,
                 device: str = "cpu") -> None:  # fmt: skip
        if threads:
            os.environ["VSEKIT_THREADS"] = str(threads)
        os.environ.pop("VSEKIT_ONNX_DEVICE", None)
        if device == "cuda":  # ONNX Runtime's CUDA provider, or a refusal: never the CPU
            from vsekit.runtime.onnx_model import providers

            os.environ["VSEKIT_ONNX_DEVICE"] = "cuda"
            providers()  # refused here, before any block, not at the first batch
        from vsekit.runtime.loading import load_model

        self.model = load_model(model)
        mine = self.model.describe(model)["fingerprint"]
        if fingerprint is not None and mine != fingerprint:  # another vsekit or bundle there
            raise RuntimeError(
                f"this worker's model {model!r} is {mine}, the index's is {fingerprint}: "
                "install the same vsekit and bundle on every worker"
            )
        self.reduce_to, self.unit_rows, self.dim = reduce_to, unit_rows, dim

    def __call__(self, block: dict) -> dict:
        cols = zip(block["path"], block["size"], block["mtime"], strict=True)
        files = [(os.fsdecode(bytes(p)), int(s), int(m)) for p, s, m in cols]
        b = embed_files(files, self.model.encode_image, self.reduce_to, self.unit_rows,
                        self.dim, max(1, len(files)))  # fmt: skip
        return {"out": np.array([pickle.dumps(b)], dtype=object)}


def cluster(address: str | None) -> None:
    """Connect to the Ray cluster at ``address`` (``auto``: the running one), or start
    a local one when ``address`` is None; a no-op when this process is connected."""
    try:
        import ray
    except ImportError as e:
        raise RuntimeError("--ray needs Ray: pip install 'vsekit[ray]'") from e
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)  # fmt: skip
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # the update's own bar counts committed files
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)


def actor_pool_map(
    rows: list[dict],
    worker: type,
    kwargs: dict,
    batch_size: int,
    address: str | None,
    workers: int | None,
    cpus_per_worker: int,
    ordered: bool = False,
    gpus_per_worker: float = 0,
) -> Iterator:
    """Ray Data over ``rows``: ``workers`` actors of class ``worker`` (constructed with
    ``kwargs``; default: the cluster's CPUs over ``cpus_per_worker``, or its GPUs over
    ``gpus_per_worker`` when that is set), each with ``cpus_per_worker`` CPUs and
    ``gpus_per_worker`` GPUs (Ray sets each actor's ``CUDA_VISIBLE_DEVICES``), map blocks
    of ``batch_size`` rows; each block's result is
    one pickled object in column ``out``, unpickled here as it arrives (in row order
    when ``ordered``). Ray Data restarts a killed actor and runs its block again."""
    import ray

    cluster(address)
    try:
        yield from _pool_map(ray, rows, worker, kwargs, batch_size, workers, cpus_per_worker,
                             ordered, gpus_per_worker)  # fmt: skip
    except ray.exceptions.RayError as e:  # a worker's failure, in one line
        raise RuntimeError(f"the Ray job failed: {root_cause(e)}") from e


def root_cause(e: BaseException) -> str:
    """The first ``SomeError: message`` line of a Ray error's text that is not Ray's own
    (the worker's exception, under Ray's wrapping and retry advice), else its last line."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    ours = [x for x in lines if _EXC.match(x) and not x.startswith("ray.")]
    return (ours[:1] or lines[-1:] or [type(e).__name__])[0]


_EXC = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): ")


def _pool_map(ray, rows, worker, kwargs, batch_size, workers, cpus_per_worker, ordered, gpus):
    ray.data.DataContext.get_current().execution_options.preserve_order = ordered
    have = ray.cluster_resources()
    if gpus and not have.get("GPU"):
        raise RuntimeError("--gpus-per-worker: the Ray cluster has no GPUs")
    per = (have.get("GPU", 0) / gpus) if gpus else (have.get("CPU", 1) / cpus_per_worker)
    n = workers or max(1, int(per))
    ds = ray.data.from_items(rows, override_num_blocks=max(1, -(-len(rows) // batch_size)))
    out = ds.map_batches(
        worker,
        fn_constructor_kwargs=kwargs,
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=n),
        num_cpus=cpus_per_worker,
        **({"num_gpus": gpus} if gpus else {}),
    )
    for block in out.iter_batches(batch_size=None, batch_format="numpy"):
        for blob in block["out"]:
            yield pickle.loads(blob)


def ray_batches(
    model: str,
    dim: int,
    reduce_to: int | None,
    unit_rows: bool = True,
    batch_size: int = 16,
    address: str | None = None,
    workers: int | None = None,
    cpus_per_worker: int = 1,
    fingerprint: str | None = None,
    gpus_per_worker: float = 0,
) -> BatchSource:
    """A :data:`~vsekit.index.update.BatchSource` embedding on Ray: ``workers`` actors
    (default: the cluster's CPUs over ``cpus_per_worker``), each with
    ``cpus_per_worker`` CPUs and as many model threads, ``batch_size`` files a block.
    ``gpus_per_worker``: each actor also holds that share of a GPU and runs the image
    graph on ONNX Runtime's CUDA provider (``onnxruntime-gpu``); a worker without one
    refuses to start. ``fingerprint``: the index's model; a worker whose model differs
    refuses to start."""

    def source(todo: list) -> Iterator[Batch]:
        if not todo:
            return
        rows = [{"path": os.fsencode(p), "size": s, "mtime": m} for p, s, m in todo]
        kwargs = {"model": model, "reduce_to": reduce_to, "unit_rows": unit_rows, "dim": dim,
                  "threads": cpus_per_worker, "fingerprint": fingerprint,
                  "device": "cuda" if gpus_per_worker else "cpu"}  # fmt: skip
        yield from actor_pool_map(rows, Embedder, kwargs, batch_size, address, workers,
                                  cpus_per_worker, gpus_per_worker=gpus_per_worker)  # fmt: skip

    return source
