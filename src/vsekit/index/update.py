"""Bringing an index in line with a folder: scan, match moves, decode, embed, commit.

Incremental: a file is re-embedded only when its path is new or its size or mtime
changed; a file that failed to decode is remembered with its size and mtime and not
retried until it changes; a file moved to another folder under the same name (same
size and mtime) keeps its id and embedding (:func:`vsekit.index.scan.match_moves`), and
so does a file renamed, or copied elsewhere and deleted, whose content hashes to the
vanished file's recorded sha256 (:func:`vsekit.index.scan.match_by_content`), as
rclip and immich keep a photo by its content. Each batch's rows are appended and fsync'ed
before the transaction that makes them reachable commits (:class:`vsekit.fsio.RowFile`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vsekit.index.checksums import encoded_crcs, record
from vsekit.index.phash import backfill_hashes, crop_hashes, image_hash
from vsekit.index.scan import match_by_content, match_moves, printable, scan_media
from vsekit.index.schema import PATH, CollectionError, path_param, set_meta
from vsekit.index.store import IndexStore
from vsekit.media.exif import PhotoMeta, read_meta
from vsekit.media.images import ImageError, load_image
from vsekit.media.video import Sampling, embed_video, is_video
from vsekit.progress import progress_bar

SEGMENT_SECONDS = 2.0  # a video is searchable per segment of this length
FRAME_EVERY = 1.0  # one frame embedded every this many seconds of video


@dataclass
class UpdateReport:
    scanned: int = 0
    added: int = 0
    updated: int = 0
    removed: int = 0
    moved: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, error)
    embedded: int = 0  # images (and video frames) that went through the model
    #: indexed files that changed and then failed: their old rows are gone (a file's
    #: changed content is never served from its old embedding)
    dropped: int = 0
    replaced: bool = False  # a rebuild replaced the index while this update waited
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{self.scanned:,} files: {self.added:,} added, {self.updated:,} updated, "
            f"{self.removed:,} removed, {self.moved:,} moved, {self.unchanged:,} unchanged, "
            f"{len(self.failed):,} failed"
            + (f" ({self.dropped} changed and cannot be read now: dropped from the index)"
               if self.dropped else "")
            + f" ({self.seconds:.1f} s in all)"
            + ("; the index was rebuilt by another process while this one waited, and these"
               " counts are against the rebuilt index" if self.replaced else "")
        )  # fmt: skip


def update(
    store: IndexStore,
    w: sqlite3.Connection,
    root: Path,
    embed: Callable[[Sequence], np.ndarray],
    batch_size: int = 16,
    progress: bool = True,
    on_batch: Callable[[int], None] | None = None,
    reduce_to: int | None = None,
    exclude: Sequence[str] = (),
    batches: BatchSource | None = None,
    tap: Tap | None = None,
) -> UpdateReport:
    """Index the files under ``root`` (the caller holds ``store.writer()`` as ``w``).

    ``embed(list of PIL images) -> [n, dim]`` unit vectors. Files outside ``root`` that
    are already indexed are left alone. ``reduce_to``: decode JPEGs at reduced size down
    to this short side (the model's ``decode_size``). ``batches``: where the embedded
    batches come from (default :func:`local_batches` with ``embed``; ``vse index --ray``
    gives :func:`vsekit.index.ray_index.ray_batches`); each is committed as it arrives,
    so a killed run keeps every committed batch and the next one embeds only the rest.
    ``tap``: shown each batch's decoded photos (local batches only; see :data:`Tap`)."""
    t0 = time.perf_counter()
    rep = UpdateReport()
    store.backfill_sums(w)  # an index from before checksums: its rows get theirs
    store.add_root(w, root)
    prefix = os.path.join(os.path.abspath(root), "")
    known = {p: (i, s, m) for i, p, s, m in w.execute("SELECT id, path, size, mtime_ns FROM files")}
    failed = {p: (s, m) for p, s, m in w.execute("SELECT path, size, mtime_ns FROM failed")}
    seen, todo, skipped = set(), [], []
    for p, size, mtime in scan_media(root, skipped, exclude):
        rep.scanned += 1
        seen.add(p)
        k = known.get(p)
        if k is not None and (k[1], k[2]) == (size, mtime):
            rep.unchanged += 1
        elif k is None and failed.get(p) == (size, mtime):
            rep.failed.append((p, "unchanged since it failed"))
        else:
            todo.append((p, size, mtime))
    rep.failed.extend(skipped)
    gone = [p for p in known if p.startswith(prefix) and p not in seen]
    gone_failed = [p for p in failed if p.startswith(prefix) and p not in seen]
    moves: dict[str, str] = {}
    new = [t for t in todo if t[0] not in known]
    if new:  # only new paths can be moves; then look for vanished files to match
        outside_gone = [p for p in known if not p.startswith(prefix) and not os.path.exists(p)]
        moves = match_moves(gone + outside_gone, new, known)
        # renamed under another name (or copied and deleted): the same content
        sizes, taken = {t[1] for t in new if t[0] not in moves}, set(moves.values())
        left = [p for p in gone + outside_gone
                if p not in taken and known[p][1] in sizes]  # fmt: skip
        moves |= match_by_content(left, [t for t in new if t[0] not in moves],
                                  {p: known[p][1] for p in left}, _hashes(w, left))  # fmt: skip
        todo = [t for t in todo if t[0] not in moves]
        moved_from = set(moves.values())
        gone = [p for p in gone if p not in moved_from]
    stamp = {p: (size, mtime) for p, size, mtime in new}
    with w:
        w.executemany(  # a file found by content may have another time than the old one
            f"UPDATE files SET path = {PATH}, size = ?, mtime_ns = ? WHERE path = {PATH}",
            [(path_param(n), *stamp[n], path_param(o)) for n, o in moves.items()],
        )
        w.executemany(  # its date may be its time: read again (backfill_meta, below)
            "DELETE FROM photo_meta WHERE file_id = ?",
            [(known[o][0],) for n, o in moves.items() if stamp[n][1] != known[o][2]],
        )
        w.executemany(
            f"DELETE FROM segments WHERE file_id IN (SELECT id FROM files WHERE path = {PATH})",
            [(path_param(p),) for p in gone],
        )
        w.executemany(f"DELETE FROM files WHERE path = {PATH}", [(path_param(p),) for p in gone])
        w.executemany(f"DELETE FROM failed WHERE path = {PATH}",
                      [(path_param(p),) for p in gone_failed])  # fmt: skip
    rep.removed, rep.moved = len(gone), len(moves)

    unit_rows = store.similarity == "cosine"
    if batches is None:
        batches = local_batches(embed, batch_size, reduce_to, unit_rows, store.dim, tap)
    done = 0
    # a bar on a terminal; piped or logged, a line every 10 s (not carriage returns)
    with progress_bar(len(todo), "index", "file", show=progress and bool(todo)) as bar:
        for b in batches(todo):
            rep.embedded += b.embedded
            commit_batch(store, w, b.ok, b.vecs, b.errors, known, rep, b.segs, b.phashes, b.crops)
            done += b.files
            bar.update(b.files)
            if on_batch is not None:
                on_batch(done)
    backfill_meta(w)
    backfill_hashes(w, lambda p: load_image(p, reduce_to), progress=progress, tap=tap)
    store.compact(w)
    rep.seconds = time.perf_counter() - t0
    return rep


def _hashes(w: sqlite3.Connection, paths: list[str]) -> dict[str, str]:
    """The recorded sha256 of the indexed files at ``paths`` (those that have one)."""
    out = {}
    for p in paths:
        row = w.execute(
            f"SELECT m.sha256 FROM files f JOIN photo_meta m ON m.file_id = f.id "
            f"WHERE f.path = {PATH} AND m.sha256 IS NOT NULL",
            (path_param(p),),
        ).fetchone()
        if row is not None:
            out[p] = row[0]
    return out


@dataclass
class Batch:
    """What one batch of files became: the files that embedded (``ok``, one row of
    ``vecs`` each; ``segs[j]``: a video's segment vectors or None), the files that
    failed (``errors``: path, size, mtime, message), images and frames embedded."""

    ok: list[tuple[str, int, int]]
    vecs: np.ndarray
    errors: list[tuple[str, int, int, str]]
    segs: list
    embedded: int
    files: int
    #: the perceptual hash of each file in ``ok`` (:mod:`vsekit.index.phash`; "" for a
    #: video); None: not computed (the update backfills them)
    phashes: list[str] | None = None
    #: the crop hashes of each file in ``ok`` (:func:`vsekit.index.phash.crop_hashes`;
    #: "" for a video); None: not computed (the update backfills them)
    crops: list[str] | None = None


#: ``todo`` (path, size, mtime_ns) -> the embedded batches, in any order
BatchSource = Callable[[list], Iterator[Batch]]
#: ``(files, images)``: the (path, size, mtime_ns) of a batch's photos and their decoded
#: images, as embedded; for what else is computed from the pixels without decoding them
#: again (the evidence sources, :class:`vsekit.evidence.store.EvidenceTap`)
Tap = Callable[[list, list], None]


def embed_files(
    files: Sequence[tuple[str, int, int]],
    embed: Callable[[Sequence], np.ndarray],
    reduce_to: int | None,
    unit_rows: bool,
    dim: int,
    batch_size: int = 16,
    tap: Tap | None = None,
) -> Batch:
    """Decode and embed ``files`` (path, size, mtime_ns): photos in one call of
    ``embed``, each video on its own (a clip row and its segments). A file that cannot
    be read is an error of the batch, not of the run."""
    images, ok, errors, videos, embedded, phashes, crops = [], [], [], [], 0, [], []
    sampling = Sampling(every=FRAME_EVERY)
    for p, size, mtime in files:
        try:
            if is_video(p):
                v = embed_video(p, embed, sampling, SEGMENT_SECONDS, reduce_to,
                                batch_size, unit_rows)  # fmt: skip
                videos.append(((p, size, mtime), v))
                embedded += v.frames
            else:
                images.append(load_image(p, reduce_to))
                phashes.append(image_hash(images[-1]))
                crops.append(crop_hashes(images[-1]))
                ok.append((p, size, mtime))
        except ImageError as e:
            errors.append((p, size, mtime, printable(str(e))))
    vecs = embed(images) if images else np.zeros((0, dim), np.float32)
    if tap is not None and images:
        tap(list(ok), images)
    embedded += len(images)
    vecs = np.asarray(vecs, np.float32).reshape(-1, dim)
    if videos:
        ok += [f for f, _ in videos]
        vecs = np.concatenate([vecs, *(v.clip[None] for _, v in videos)])
    segs = [None] * (len(ok) - len(videos)) + [v for _, v in videos]
    blank = [""] * len(videos)
    return Batch(ok, vecs, errors, segs, embedded, len(files), phashes + blank, crops + blank)


def local_batches(
    embed: Callable[[Sequence], np.ndarray],
    batch_size: int,
    reduce_to: int | None,
    unit_rows: bool,
    dim: int,
    tap: Tap | None = None,
) -> BatchSource:
    """This process embeds ``todo`` in order, ``batch_size`` files at a time."""

    def source(todo: list) -> Iterator[Batch]:
        for a in range(0, len(todo), batch_size):
            yield embed_files(todo[a : a + batch_size], embed, reduce_to, unit_rows, dim,
                              batch_size, tap)  # fmt: skip

    return source


def put_meta(w: sqlite3.Connection, file_id: int, m: PhotoMeta) -> None:
    w.execute(
        "INSERT OR REPLACE INTO photo_meta (file_id, taken, taken_from, make, model, lat, lon,"
        " sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (file_id, m.taken, m.taken_from, m.make, m.model, m.lat, m.lon, m.sha256),
    )


def backfill_meta(w: sqlite3.Connection, block: int = 256) -> None:
    """Read the EXIF header and content hash of indexed files that have no metadata yet
    (an index made before it was recorded, or a writer killed between the two), and
    drop the metadata of files that are gone. In blocks, each committed. A file that
    cannot be read keeps no hash and is tried again by the next update."""
    with w:
        w.execute("DELETE FROM photo_meta WHERE file_id NOT IN (SELECT id FROM files)")
    todo = w.execute(  # read once: a file that cannot be read is tried once a run
        "SELECT id, path, mtime_ns FROM files WHERE id NOT IN "
        "(SELECT file_id FROM photo_meta WHERE sha256 IS NOT NULL)"
    ).fetchall()
    for a in range(0, len(todo), block):
        part = todo[a : a + block]
        metas = [read_meta(p, m) for _, p, m in part]
        with w:
            for (i, _, _), m in zip(part, metas, strict=True):
                put_meta(w, i, m)


def commit_batch(
    store: IndexStore,
    w: sqlite3.Connection,
    ok,
    vecs,
    errors,
    known,
    rep: UpdateReport,
    segs,
    phashes: list[str] | None = None,
    crops: list[str] | None = None,
) -> None:
    """Append ``vecs`` (one row per file in ``ok``) and, for videos (``segs[j]`` a
    :class:`~vsekit.media.video.VideoVectors`), their segment rows after them; then make
    them reachable in one transaction. Non-finite rows are refused before anything is
    written."""
    if vecs.shape != (len(ok), store.dim):
        raise CollectionError(f"embedder returned {vecs.shape}, expected ({len(ok)}, {store.dim})")
    extra = [v.segments for v in segs if v is not None]
    if not all(np.isfinite(b).all() for b in (vecs, *extra)):
        raise CollectionError("the model returned NaN or infinite embeddings; nothing written")
    meta = dict(w.execute("SELECT key, value FROM meta").fetchall())
    gen, n_rows = int(meta["generation"]), int(meta["rows"])
    rows = store.rows_file(gen)
    rows.truncate(n_rows)  # drop bytes of an interrupted batch
    written = b"".join(rows.append(block) for block in (vecs, *extra))
    rows.sync()
    next_row = n_rows + len(ok)
    metas = [read_meta(p, mtime) for p, _, mtime in ok]  # headers only
    with w:
        for j, (p, size, mtime) in enumerate(ok):
            if p in known:
                w.execute(
                    f"UPDATE files SET size = ?, mtime_ns = ?, row = ? WHERE path = {PATH}",
                    (size, mtime, n_rows + j, path_param(p)),
                )
                file_id = known[p][0]
                w.execute("DELETE FROM segments WHERE file_id = ?", (file_id,))
                rep.updated += 1
            else:
                cur = w.execute(
                    f"INSERT INTO files (path, size, mtime_ns, row) VALUES ({PATH}, ?, ?, ?)",
                    (path_param(p), size, mtime, n_rows + j),
                )
                file_id = cur.lastrowid
                rep.added += 1
            v = segs[j]
            if v is not None:
                seg_rows = range(next_row, next_row + len(v.segments))
                w.executemany(
                    "INSERT INTO segments (file_id, row, start, end) VALUES (?, ?, ?, ?)",
                    [(file_id, r, float(s), float(e))
                     for r, s, e in zip(seg_rows, v.starts, v.ends, strict=True)],
                )  # fmt: skip
                next_row += len(v.segments)
            w.execute(f"DELETE FROM failed WHERE path = {PATH}", (path_param(p),))
            put_meta(w, file_id, metas[j])
            if phashes is not None:
                w.execute(
                    "UPDATE photo_meta SET phash = ?, phash_crops = ? WHERE file_id = ?",
                    (phashes[j], crops[j] if crops is not None else None, file_id),
                )
        for p, size, mtime, err in errors:
            if p in known:  # it changed and cannot be read: its old row must not stay
                file_id = known[p][0]
                for table, key in (("segments", "file_id"), ("photo_meta", "file_id"),
                                   ("files", "id")):  # fmt: skip
                    w.execute(f"DELETE FROM {table} WHERE {key} = ?", (file_id,))
                err = f"{err} (it changed since it was indexed: dropped from the index)"
                rep.dropped += 1
            w.execute(
                f"INSERT OR REPLACE INTO failed (path, size, mtime_ns, error) "
                f"VALUES ({PATH}, ?, ?, ?)",
                (path_param(p), size, mtime, err),
            )
            rep.failed.append((p, err))
        record(w, n_rows, encoded_crcs(written, rows.row_bytes))
        set_meta(w, rows=next_row)
