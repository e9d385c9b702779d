"""Approximate nearest-neighbour search with FAISS: the index's ANN structures.

Two kinds, chosen by :func:`choose_spec` from the collection's size and a RAM budget:

* **IVF-Flat** (``spec=None``): an inverted file over the full float32 rows, in RAM;
  its scores are exact inner products. While the rows fit in half the budget.
* **IVF-PQ** (a FAISS index-factory string, e.g. ``OPQ128_256,IVF16384,PQ128x4fs``):
  OPQ rotates and reduces the rows, an inverted file of ``nlist`` lists holds each row
  as ``m`` bytes of product-quantisation code: ``2m`` sub-quantizers of 4 bits, which
  FAISS scans with SIMD lookups held in registers ("fast scan", André et al., Quicker
  ADC, 2019), several times faster than ``m`` 8-bit ones at the same size, with the
  re-ranking making up their coarser scores. Only the codes and ids live in RAM (about
  ``m + 8`` bytes a row); the scores are approximate, so the search asks for
  ``rerank`` candidates and re-scores them with the full rows read from the memory-mapped
  file on disk (:func:`vsekit.index.search.rerank`; the reads of one query's candidates
  are issued together, :class:`vsekit.index.rows.ScatteredRows`). This is how clip-retrieval's
  autofaiss sizes an index under ``--max-ram`` (Johnson et al., Billion-scale
  similarity search with GPUs, 2017; Ge et al., Optimized Product Quantization, 2013).

A searcher can grow: :meth:`FaissSearcher.add` adds rows without training again. It
records how many live rows it was trained on (``trained_on``); :func:`is_stale` says
when the collection has outgrown that sample and a new one should be trained.
"""

from __future__ import annotations

import math

import numpy as np

FAISS_MIN_ROWS = 100_000  # "auto" switches to FAISS from this many live rows
DEFAULT_MAX_RAM = 4 << 30  # the ANN's budget when none is given (--max-ram)
RERANK = 200  # IVF-PQ candidates re-scored with the full rows, at least (big_index.py)
EF_PER_PROBE = 2  # an HNSW coarse quantizer explores this many nodes per list it returns
TRAIN_CAP = 262_144  # IVF-PQ training rows at most: 2 GiB of float32 at 2,048 dims
STALE_GROWTH = 2.0  # retrain once the live rows are this many times the trained ones


def parse_size(text: str) -> int:
    """``4G``, ``512M``, ``1.5G``, ``2000000000`` -> bytes."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        value = float(num) * units[unit]
    except ValueError:
        raise ValueError(f"--max-ram: not a size: {text!r} (e.g. 4G, 512M)") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--max-ram: must be positive, got {text!r}")
    return int(value)


#: fewer rows than this cannot train IVF-PQ (see :func:`choose_spec`)
PQ_MIN_ROWS = 256


def budget_note(n: int, dim: int, max_ram: int) -> str | None:
    """What ``vse index --max-ram`` says when the budget is below ``n`` float rows but
    they are too few for IVF-PQ, so they stay in float; None otherwise."""
    if n >= PQ_MIN_ROWS or n * dim * 4 <= max_ram // 2:
        return None
    return (
        f"note: --max-ram {_size(max_ram)} is below these {n:,} rows in float "
        f"({_size(2 * n * dim * 4)} with room to search), but they are too few to train "
        f"IVF-PQ (it needs {PQ_MIN_ROWS}); they are searched in float until there are more"
    )


def choose_spec(n: int, dim: int, max_ram: int = DEFAULT_MAX_RAM) -> tuple[str | None, int]:
    """``(spec, nprobe)`` for ``n`` rows of ``dim`` under ``max_ram`` bytes.

    IVF-Flat (``None``) while ``n * dim * 4`` fits in half the budget. Beyond, IVF-PQ:
    ``nlist`` the power of two nearest ``4 sqrt(n)`` (16 to 65,536), and the largest
    code of ``m`` bytes (128 down to 2, at most half of ``dim``; ``2m`` 4-bit fast-scan
    sub-quantizers; OPQ reducing to ``4m`` dimensions first; from 8,192 lists the
    coarse centroids are found through an HNSW graph, as autofaiss does, instead of
    scanned at every add and query)
    whose codes, ids and coarse centroids fit in 80% of the budget. ``nprobe``: 64, or
    ``nlist / 128`` lists once that is more (a query's true neighbours spread over more
    lists as they grow finer).

    Below :data:`PQ_MIN_ROWS` rows IVF-PQ cannot be trained (OPQ learns 256 centroids
    a sub-space, from at least as many rows), so the rows are kept in float whatever the
    budget: at most 8 MB at 2,048 dimensions."""
    if n * dim * 4 <= max_ram // 2 or n < PQ_MIN_ROWS:
        return None, 32
    nlist = int(min(65_536, max(16, 2 ** round(math.log2(4 * math.sqrt(n))))))
    for m in (128, 64, 32, 16, 8, 4, 2):
        if 2 * m > dim:
            continue
        d_out = min(4 * m, dim - dim % (2 * m))
        need = n * (m + 8) * 1.05 + nlist * d_out * 4 + d_out * dim * 4
        if nlist >= 8192:  # the coarse centroids searched through HNSW, not scanned
            need += nlist * 32 * 2 * 4
        if need <= 0.8 * max_ram:
            coarse = f"IVF{nlist}_HNSW32" if nlist >= 8192 else f"IVF{nlist}"
            return f"OPQ{2 * m}_{d_out},{coarse},PQ{2 * m}x4fs", max(64, nlist // 128)
    need = n * 10 * 1.05 / 0.8
    raise ValueError(
        f"--max-ram {_size(max_ram)}: too small for {n:,} rows of {dim} "
        f"(the smallest IVF-PQ codes need about {_size(need)})"
    )


def _size(n: float) -> str:
    """Bytes as ``--max-ram`` takes them: ``512K``, ``3.5M``, ``4G``."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20)):
        if n >= size:
            return f"{n / size:,.3g}{unit}"
    return f"{max(1, round(n / 1024)):,}K"


class FaissSearcher:
    """Approximate inner-product search over rows ``emb[N, D]`` (a float32 array, or
    anything indexed like one: :class:`vsekit.index.rows.Int8Rows`).

    ``spec=None``: IVF-Flat with ``nlist`` (default ``sqrt(N)``) clusters trained on 40
    sampled points each (``IndexFlatIP``, exact, below 39 a cluster). Otherwise a FAISS
    index-factory ``spec`` (IVF-PQ), trained on ``train_size`` sampled rows (default 30
    a list, at least 65,536, at most ``TRAIN_CAP``: the training peak, beyond the budget, is
    this sample in float32; OPQ uses at most 65,536 of them). A query visits ``nprobe``
    lists. Only live rows are added, under their row number, so results map straight
    back to the index.
    """

    def __init__(
        self,
        emb,
        live: np.ndarray | None = None,
        nlist: int | None = None,
        nprobe: int = 32,
        seed: int = 0,
        add_chunk: int = 65_536,
        spec: str | None = None,
        train_size: int | None = None,
    ) -> None:
        import faiss

        n, d = emb.shape
        rows = np.arange(n) if live is None else np.flatnonzero(live[:n])
        self.n, self.spec, self.rows_seen = 0, spec, 0
        self.approximate = spec is not None  # PQ codes: scores to re-rank
        self.rerank = RERANK
        rng = np.random.default_rng(seed)
        if spec is None:
            nlist = nlist or max(1, int(np.sqrt(len(rows))))
            if len(rows) < 39 * nlist:
                self.index = faiss.IndexIDMap(faiss.IndexFlatIP(d))
                sample = np.zeros(0, np.int64)
            else:
                self.index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist,
                                                faiss.METRIC_INNER_PRODUCT)  # fmt: skip
                sample = rng.choice(rows, size=min(len(rows), 40 * nlist), replace=False)
        else:
            self.index = faiss.index_factory(d, spec, faiss.METRIC_INNER_PRODUCT)
            nl = faiss.extract_index_ivf(self.index).nlist
            size = min(len(rows), train_size or min(max(30 * nl, 65_536), TRAIN_CAP))
            sample = rng.choice(rows, size=size, replace=False)
        if len(sample):
            self.index.train(np.ascontiguousarray(emb[np.sort(sample)], dtype=np.float32))
        self.trained_on = len(rows)
        self._set_nprobe(nprobe)
        self.add(emb, rows, add_chunk)

    def _ivf(self):
        import faiss

        try:
            return faiss.extract_index_ivf(self.index)
        except RuntimeError:
            return None  # a flat index

    def _set_nprobe(self, nprobe: int) -> None:
        """Visit ``nprobe`` lists. An HNSW coarse quantizer searches with ``efSearch``
        (FAISS's default 16) whatever ``nprobe`` asks for, so it returned far fewer of the
        ``nprobe`` nearest lists than asked (at 10M rows recall stalled below 0.88):
        it gets ``EF_PER_PROBE * nprobe``."""
        import faiss

        ivf = self._ivf()
        if ivf is not None:
            ivf.nprobe = nprobe
            quantizer = faiss.downcast_index(ivf.quantizer)
            if isinstance(quantizer, faiss.IndexHNSW):
                quantizer.hnsw.efSearch = max(16, EF_PER_PROBE * nprobe)
        self.nprobe = nprobe

    def add(self, emb, rows: np.ndarray, chunk: int = 65_536) -> None:
        """Add rows ``rows`` of ``emb`` (no training); ``rows_seen``: one past the last."""
        for a in range(0, len(rows), chunk):
            r = np.asarray(rows[a : a + chunk], np.int64)
            self.index.add_with_ids(np.ascontiguousarray(emb[r], dtype=np.float32), r)
        self.n += len(rows)
        if len(rows):
            self.rows_seen = max(self.rows_seen, int(rows[-1]) + 1)

    def save(self, path) -> None:
        """Write the FAISS index atomically (written beside, then renamed)."""
        import faiss

        from vsekit.fsio import atomic_write

        atomic_write(path, lambda tmp: faiss.write_index(self.index, str(tmp)))

    @classmethod
    def load(cls, path, nprobe: int | None = None, spec: str | None = None,
             trained_on: int = 0, rows_seen: int = 0) -> FaissSearcher:  # fmt: skip
        import faiss

        self = cls.__new__(cls)
        self.index = faiss.read_index(str(path))
        self.n = int(self.index.ntotal)
        self.spec, self.approximate, self.rerank = spec, spec is not None, RERANK
        self.trained_on, self.rows_seen = trained_on, rows_seen
        self._set_nprobe(nprobe or (64 if spec else 32))
        return self

    def search(
        self,
        q: np.ndarray,
        k: int,
        allowed: np.ndarray | None = None,
        bits: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)`` of the ``k`` best rows (``-1`` pads when fewer exist);
        ``allowed``: ``[rows]`` bool, search only those (a filter), through a FAISS
        bitmap ID selector (one bit a row); ``bits``: the same, already packed
        (little-endian bit order). With IVF-PQ the scores are approximate."""
        import faiss

        k = min(k, self.n)
        if k == 0:
            return np.zeros((len(q), 0), np.float32), np.zeros((len(q), 0), np.int64)
        params = None
        if allowed is not None:
            bits = np.packbits(np.asarray(allowed, bool), bitorder="little")
        if bits is not None:
            sel = faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits))  # size in bytes
            if self._ivf() is not None:
                params = faiss.SearchParametersIVF(sel=sel, nprobe=self.nprobe)
            else:
                params = faiss.SearchParameters(sel=sel)
            if isinstance(self.index, faiss.IndexPreTransform):
                params = faiss.SearchParametersPreTransform(index_params=params)
        s, r = self.index.search(np.ascontiguousarray(q, dtype=np.float32), k, params=params)
        del bits  # the selector reads the bitmap until the search returns
        return s, r


def is_stale(searcher: FaissSearcher, n_live: int) -> bool:
    """True when the live rows have outgrown the sample the searcher was trained on, or
    when most of the rows it holds have been deleted since."""
    return n_live > STALE_GROWTH * max(searcher.trained_on, 1) or searcher.n > 2 * max(n_live, 1)
