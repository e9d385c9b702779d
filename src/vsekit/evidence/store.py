"""Evidence kept beside an index, and the bias it adds to a text query's row scores.

Each source keeps one file, ``<index>/evidence/<source>.npz``: the photos it covers,
keyed by (path, size, mtime_ns) as the index's own files table keys them, and the
source's per-photo arrays (:meth:`vsekit.evidence.EvidenceScorer.index`). Keying by
file rather than by embedding row keeps it valid through compaction; a photo that
changed or is new simply has no evidence until :func:`fill_evidence` runs, and adds
nothing meanwhile. Video files have no evidence.

:func:`evidence_bias` is the one place a search adds the sources' bonuses: ``[rows]``,
to be added to the CSLS bias the collection search already takes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from vsekit.bundle import ModelError
from vsekit.evidence import EvidenceScorer, PhotoBatch
from vsekit.fsio import atomic_write

EVIDENCE_DIR = "evidence"
_KEYS = ("paths", "sizes", "mtimes")


def evidence_path(index: Path, source: str) -> Path:
    return Path(index) / EVIDENCE_DIR / f"{source}.npz"


def read_evidence(index: Path, source: str) -> dict[str, np.ndarray] | None:
    """The stored arrays of ``source`` (with ``paths``, ``sizes``, ``mtimes``); None
    when there are none or the file cannot be read (evidence is optional: a damaged
    file costs its bonus, never the search)."""
    path = evidence_path(index, source)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError):
        return None
    n = len(out.get("paths", ()))
    if any(k not in out for k in _KEYS) or any(len(v) != n for v in out.values()):
        return None
    return out


def write_evidence(index: Path, source: str, arrays: dict[str, np.ndarray]) -> None:
    """Replace ``source``'s file atomically."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path = evidence_path(index, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, buf.getvalue())


def stored_version(evidence: dict[str, np.ndarray]) -> np.ndarray:
    """``[N]`` the source version that made each stored row (1 for files from before
    versions were recorded: every source was at version 1 then)."""
    n = len(evidence["paths"])
    return np.asarray(evidence.get("version", np.ones(n, np.int32)), np.int32)


def _key(paths, sizes, mtimes) -> list[tuple[str, int, int]]:
    return [(str(p), int(s), int(m)) for p, s, m in zip(paths, sizes, mtimes, strict=True)]


def fill_evidence(
    index: Path,
    files: Sequence[tuple[str, int, int]],
    source: EvidenceScorer,
    featurise: Callable[[list], np.ndarray] | None = None,
    batch_size: int = 16,
    is_video: Callable[[str], bool] = lambda _: False,
    decode_size: int | None = None,
    progress: bool = False,
    ready: Mapping[tuple[str, int, int], dict[str, np.ndarray]] | None = None,
) -> int:
    """Bring ``source``'s file in line with ``files`` (path, size, mtime_ns: the index's
    photos now): drop photos that are gone or changed, compute the missing ones in
    batches (:class:`~vsekit.evidence.PhotoBatch`: each photo decoded at ``decode_size``
    when the source reads pixels, and ``featurise(decoded images) -> [N, F]``, the
    model's image features, when it reads features). ``ready``: arrays already computed
    for some photos, by key (an :class:`EvidenceTap` of the update that embedded them),
    taken as they are. Returns how many photos were added (computed or ready). A photo
    that cannot be decoded or featurised is left out (it is tried again next time).
    ``progress``: a bar on stderr while photos are computed."""
    from vsekit.progress import progress_bar

    want = [f for f in files if not is_video(f[0])]
    old = read_evidence(index, source.name)
    have: dict[tuple[str, int, int], int] = {}
    if old is not None:  # rows made by another version of the source are made again
        same = stored_version(old) == source.version
        have = {k: i for i, k in enumerate(_key(old["paths"], old["sizes"], old["mtimes"]))
                if same[i]}  # fmt: skip
    todo = [tuple(f) for f in want if tuple(f) not in have]
    keep = [have[tuple(f)] for f in want if tuple(f) in have]
    parts: list[dict[str, np.ndarray]] = []
    if old is not None and keep:
        parts.append({k: v[keep] for k, v in old.items()})
    done = 0
    given = [f for f in todo if ready and f in ready]
    if given:
        names = list(ready[given[0]])
        parts.append({"paths": np.array([p for p, _, _ in given], dtype=str),
                      "sizes": np.array([s for _, s, _ in given], np.int64),
                      "mtimes": np.array([m for _, _, m in given], np.int64),
                      **{k: np.stack([ready[f][k] for f in given]) for k in names}})  # fmt: skip
        done += len(given)
        todo = [f for f in todo if f not in ready]
    with progress_bar(len(todo), f"evidence ({source.name})", "photo",
                      show=progress and bool(todo)) as bar:  # fmt: skip
        for a in range(0, len(todo), batch_size):
            batch = todo[a : a + batch_size]
            bar.update(len(batch))
            try:
                arr = source.index(_batch([p for p, _, _ in batch], featurise, decode_size))
            except ModelError:
                raise  # the source itself is broken: say so, never skip every photo
            except (OSError, ValueError):  # one unreadable photo: try them one by one
                arr, batch = _one_by_one(batch, source, featurise, decode_size)
            if not batch:
                continue
            parts.append({"paths": np.array([p for p, _, _ in batch], dtype=str),
                          "sizes": np.array([s for _, s, _ in batch], np.int64),
                          "mtimes": np.array([m for _, _, m in batch], np.int64),
                          **arr})  # fmt: skip
            done += len(batch)
    if not parts:
        parts = [{"paths": np.array([], dtype=str), "sizes": np.zeros(0, np.int64),
                  "mtimes": np.zeros(0, np.int64)}]  # fmt: skip
    if not done and old is not None and len(keep) == len(old["paths"]):
        return 0  # nothing gone, changed or new: the file stays as it is
    for part in parts:  # every row records the version that made it
        part["version"] = np.full(len(part["paths"]), source.version, np.int32)
    names = set().union(*(p.keys() for p in parts))
    merged = {k: np.concatenate([p[k] for p in parts if k in p]) for k in names}
    write_evidence(index, source.name, merged)
    return done


class EvidenceTap:
    """Computes the evidence of photos an index update has decoded anyway (pass it as
    the update's ``tap``), so that :func:`fill_evidence` decodes none of them again;
    then :meth:`ready` for each source. A batch a source cannot index is left for
    :func:`fill_evidence` to compute (nothing is lost). Small: a source's arrays are
    ``[N, ...]`` of a few hundred bytes a photo."""

    def __init__(
        self,
        sources: Sequence[EvidenceScorer],
        featurise: Callable[[list], np.ndarray] | None = None,
    ):
        self.sources = list(sources)
        self.featurise = featurise
        self._got: dict[str, dict[tuple[str, int, int], dict[str, np.ndarray]]] = {
            s.name: {} for s in self.sources
        }

    def __call__(self, files: list, images: list) -> None:
        batch = PhotoBatch(images=images, featurise=self.featurise)
        for src in self.sources:
            try:
                arr = src.index(batch)
            except (OSError, ValueError):  # a broken source raises again, in fill_evidence
                continue
            got = self._got[src.name]
            for i, f in enumerate(files):
                got[(str(f[0]), int(f[1]), int(f[2]))] = {k: v[i] for k, v in arr.items()}

    def ready(self, source: str) -> dict[tuple[str, int, int], dict[str, np.ndarray]]:
        """The arrays computed for ``source``, by (path, size, mtime_ns)."""
        return self._got.get(source, {})


def _batch(paths: list[str], featurise, decode_size) -> PhotoBatch:
    return PhotoBatch(paths=paths, featurise=featurise, decode_size=decode_size)


def _one_by_one(batch, source, featurise, decode_size):
    arrays, ok = [], []
    for f in batch:
        try:
            arrays.append(source.index(_batch([f[0]], featurise, decode_size)))
            ok.append(f)
        except ModelError:
            raise
        except (OSError, ValueError):
            continue
    if not ok:
        return {}, []
    return {k: np.concatenate([a[k] for a in arrays]) for k in arrays[0]}, ok


_READ: dict[tuple[str, str], tuple[tuple[int, int], dict[str, np.ndarray] | None]] = {}


def _read_cached(index: Path, source: str) -> dict[str, np.ndarray] | None:
    """:func:`read_evidence`, kept in memory while the file's size and mtime stay the
    same (a warm service reads it once, not at every search)."""
    path = evidence_path(index, source)
    try:
        st = path.stat()
    except OSError:
        return None
    stamp, key = (st.st_size, st.st_mtime_ns), (str(path), source)
    hit = _READ.get(key)
    if hit is None or hit[0] != stamp:
        hit = (stamp, read_evidence(index, source))
        _READ[key] = hit
    return hit[1]


def evidence_bias(
    index: Path,
    snap,
    sources: Sequence[EvidenceScorer],
    text: str,
) -> np.ndarray | None:
    """``[snap.n_rows]``: the sum of the sources' bonuses for ``text`` on each row's
    photo (0 for rows without evidence: segments, new or changed photos); None when no
    source has evidence here or anything to say about ``text`` (the search is then
    exactly the model's)."""
    out = None
    for src in sources:
        ev = _read_cached(index, src.name)
        if ev is None or not len(ev["paths"]):
            continue
        bonus = src.score(text, ev)
        if bonus is None:
            continue
        bonus = np.where(stored_version(ev) == src.version, bonus, 0.0)  # stale rows: none
        per_key = dict(zip(_key(ev["paths"], ev["sizes"], ev["mtimes"]), bonus, strict=True))
        per_file = np.array([per_key.get((p, int(s), int(m)), 0.0)
                             for p, (s, m) in zip(snap.paths, snap.stamps, strict=True)],
                            np.float32)  # fmt: skip
        per_row = np.zeros(snap.n_rows, np.float32)
        whole = np.isnan(snap.row_start)  # whole-file rows, not a video's segments
        pos = snap.row_to_pos
        ok = whole & (pos >= 0)
        per_row[ok] = per_file[pos[ok]]
        out = per_row if out is None else out + per_row
    return out


_SOURCES: dict[str, list[EvidenceScorer]] = {}


def model_sources(model) -> list[EvidenceScorer]:
    """The enabled evidence sources of ``model``'s bundle (none for a model without a
    bundle folder, or whose bundle has no ``evidence.json`` or files), loaded once."""
    path = getattr(model, "path", None)
    if path is None:
        return []
    key = str(path)
    if key not in _SOURCES:
        from vsekit.evidence import load_sources

        _SOURCES[key] = load_sources(Path(path))
    return _SOURCES[key]


def fill_index_evidence(
    coll,
    model,
    sources: Sequence[EvidenceScorer] | None = None,
    progress: bool = False,
    tap: EvidenceTap | None = None,
) -> int:
    """:func:`fill_evidence` of every enabled source of ``model`` for the photos of the
    collection ``coll`` now (what ``vse index`` runs after an update). ``tap``: the
    :class:`EvidenceTap` the update ran with (its photos are not decoded again; a source
    that reads features still runs the backbone once more). Returns the photos added."""
    from vsekit.media.video import is_video

    sources = model_sources(model) if sources is None else sources
    if not sources:
        return 0
    snap = coll.snapshot
    files = [(p, int(s), int(m)) for p, (s, m) in zip(snap.paths, snap.stamps, strict=True)]
    return sum(fill_evidence(coll.path, files, src, model.image_features, is_video=is_video,
                             decode_size=model.decode_size, progress=progress,
                             ready=None if tap is None else tap.ready(src.name))
               for src in sources)  # fmt: skip


def evidence_tap(model) -> EvidenceTap | None:
    """An :class:`EvidenceTap` for ``model``'s enabled sources (None when it has none)."""
    sources = model_sources(model)
    return EvidenceTap(sources, model.image_features) if sources else None
