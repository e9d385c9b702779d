"""Acting on duplicate groups: keep one file of each, move the others out, undo it.

Nothing is ever deleted. :func:`plan_moves` chooses, in each group of copies (an exact
group and the near groups it takes part in count as one), the file to keep:

* ``best``: the most pixels, then the largest file, then the oldest (EXIF date, else the
  file's time), then the path;
* ``largest``: the largest file, then the most pixels, then the oldest, then the path;
* ``oldest``: the oldest, then the most pixels, then the largest file, then the path;

and where each other file goes: ``DIR/<its path relative to its indexed folder>``, under
another name (``name (2).jpg``) where that is taken. The destination must be given, must
exist, and must not lie inside an indexed folder. :func:`apply_plan` moves the files
under the index's writer lock and then removes them from the index in one transaction,
so searches and duplicate lists stop showing them at once. Before each move, its line
``<moved to> TAB <original path>`` is written (and flushed) to an undo list in ``DIR``;
:func:`undo` (``vse duplicates --undo FILE``) moves them back, never over a file; a
shell loop can too::

    grep -v '^#' UNDO | while IFS=$'\\t' read -r moved orig; do
        mkdir -p "$(dirname "$orig")" && mv -n "$moved" "$orig"; done

Restored files are indexed again by the next ``vse index`` (embedded again).
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from vsekit.index.duplicates import DuplicateGroup, components
from vsekit.index.files import LOCK_NAME
from vsekit.index.scan import inside
from vsekit.index.schema import CollectionError

KEEP = ("best", "largest", "oldest")
UNDO_PREFIX = "vse-duplicates-undo-"


class DedupeError(ValueError):
    """A request to move duplicates that cannot be carried out; one line, names the field."""


@dataclass
class Member:
    id: int
    path: str
    pixels: int  # 0 where the header cannot be read (a video, a damaged file)
    bytes: int
    taken: str | None  # ISO text: EXIF date, else the file's time


@dataclass
class PlanGroup:
    kind: str  # "exact" (all the same content) | "near"
    members: list[Member]
    keep: int  # the kept file's id
    #: (file id, original path, destination) of each file to move
    moves: list[tuple[int, str, str]] = field(default_factory=list)
    #: (file id, why) of files left where they are
    skipped: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Plan:
    keep: str
    move_to: str
    groups: list[PlanGroup]
    applied: bool = False
    undo_file: str | None = None
    moved: int = 0
    #: (path, why) of planned moves that did not happen when it was applied
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def n_moves(self) -> int:
        return sum(len(g.moves) for g in self.groups)


def _order(keep: str, m: Member) -> tuple:
    old = (m.taken is None, m.taken or "")
    if keep == "best":
        return (-m.pixels, -m.bytes, *old, m.path)
    if keep == "largest":
        return (-m.bytes, -m.pixels, *old, m.path)
    return (*old, -m.pixels, -m.bytes, m.path)


def choose_keep(members: list[Member], keep: str = "best") -> Member:
    """The member to keep under rule ``keep`` (see the module docstring)."""
    if keep not in KEEP:
        raise DedupeError(f"keep: {keep!r}; use best | largest | oldest")
    return min(members, key=lambda m: _order(keep, m))


def member_of(snap, file_id: int) -> Member:
    """A group member's pixel count (from its header only), size and date."""
    from PIL import Image

    pos = snap.id_to_pos[int(file_id)]
    path = snap.paths[pos]
    pixels = 0
    try:
        with Image.open(path) as im:
            pixels = im.width * im.height
    except Exception:  # noqa: BLE001  (a video, a damaged or vanished file: no pixels)
        pixels = 0
    return Member(int(file_id), path, pixels, int(snap.stamps[pos][0]),
                  snap.photo_meta.get("taken", [None] * len(snap))[pos])  # fmt: skip


def merged_groups(groups: list[DuplicateGroup]) -> list[tuple[str, list[int]]]:
    """The groups as sets of copies: an exact group and the near groups its files take
    part in are one set. ``(kind, ids)``: kind ``exact`` where the set is one exact
    group, else ``near``."""
    ids = sorted({i for g in groups for i in g.ids})
    at = {i: k for k, i in enumerate(ids)}
    pairs = [(at[g.ids[0]], at[i]) for g in groups for i in g.ids[1:]]
    exact = [set(g.ids) for g in groups if g.kind == "exact"]
    out = []
    for comp in components(len(ids), pairs):
        members = [ids[k] for k in comp]
        if len(members) < 2:
            continue
        kind = "exact" if any(set(members) == e for e in exact) else "near"
        out.append((kind, members))
    return out


def check_destination(move_to: str | os.PathLike | None, roots: list[str]) -> str:
    """The destination folder, resolved: it must be given, exist, be writable and lie
    outside every indexed folder; DedupeError otherwise."""
    if move_to is None or not str(move_to).strip():
        raise DedupeError("move_to: give the folder to move the files not kept into")
    raw = os.fspath(move_to)
    if not os.path.isdir(raw):
        what = "not a folder" if os.path.exists(raw) else "no such folder (create it first)"
        raise DedupeError(f"move_to: {raw}: {what}")
    real = os.path.realpath(raw)
    for r in roots:
        if inside(real, r):
            raise DedupeError(
                f"move_to: {raw} is inside the indexed folder {r}; the moved files would "
                "be indexed again: choose a folder outside it"
            )
    if not os.access(real, os.W_OK | os.X_OK):
        raise DedupeError(f"move_to: {raw}: not writable")
    return real


def _root_of(path: str, roots: list[str]) -> str | None:
    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    for r in sorted(roots, key=len, reverse=True):
        if inside(real, r):
            return r
    return None


def plan_moves(snap, groups: list[DuplicateGroup], keep: str, move_to, roots: list[str]) -> Plan:
    """What :func:`apply_plan` would do: per set of copies, the file kept and where each
    other one goes (nothing is moved here)."""
    if keep not in KEEP:
        raise DedupeError(f"keep: {keep!r}; use best | largest | oldest")
    dest = check_destination(move_to, roots)
    taken_dest: set[str] = set()
    out = []
    for kind, ids in merged_groups(groups):
        members = [member_of(snap, i) for i in ids]
        kept = choose_keep(members, keep)
        g = PlanGroup(kind, sorted(members, key=lambda m: m.path), kept.id)
        for m in g.members:
            if m.id == kept.id:
                continue
            root = _root_of(m.path, roots)
            if root is None:
                g.skipped.append((m.id, "not inside an indexed folder"))
                continue
            if any(c in m.path for c in "\t\n\r"):
                g.skipped.append((m.id, "its name holds a tab or a line break"))
                continue
            real = os.path.join(os.path.realpath(os.path.dirname(m.path)),
                                os.path.basename(m.path))  # fmt: skip
            target = _free_name(os.path.join(dest, os.path.relpath(real, root)), taken_dest)
            taken_dest.add(target)
            g.moves.append((m.id, m.path, target))
        out.append(g)
    return Plan(keep, dest, out)


def _free_name(target: str, taken: set[str]) -> str:
    """``target``, or ``stem (2).ext``, ``stem (3).ext``, ...: the first that neither
    exists nor is planned already."""
    stem, ext = os.path.splitext(target)
    k, cand = 1, target
    while cand in taken or os.path.lexists(cand):
        k += 1
        cand = f"{stem} ({k}){ext}"
    return cand


def move_no_overwrite(src: str, dst: str) -> None:
    """Move ``src`` to ``dst`` (creating its folders), never over an existing file:
    a hard link then an unlink on one file system, else an exclusive copy (with its
    times) then an unlink. FileExistsError if ``dst`` exists."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as e:
        if e.errno == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "exists", dst) from None
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EMLINK):
            raise
        with open(src, "rb") as fi, open(dst, "xb") as fo:
            try:
                shutil.copyfileobj(fi, fo, 1 << 20)
                fo.flush()
                os.fsync(fo.fileno())
                shutil.copystat(src, dst)
            except BaseException:  # a partial copy is not left behind
                os.unlink(dst)
                raise
    os.unlink(src)


def _undo_header() -> bytes:
    return (
        b"# vse duplicates undo list: each line is <moved to> TAB <original path>\n"
        b"# replay it with: vse duplicates --undo THIS_FILE\n"
        b"# or: grep -v '^#' THIS_FILE | while IFS=$'\\t' read -r moved orig; do "
        b'mkdir -p "$(dirname "$orig")" && mv -n "$moved" "$orig"; done\n'
    )


def apply_plan(plan: Plan, coll, wait: bool = True) -> Plan:
    """Carry out ``plan`` on the index ``coll`` (a :class:`~vsekit.index.Collection`)
    under its writer lock (``wait=False``: CollectionError at once if another process
    holds it). Files that changed or left the index since the plan are left alone. The
    moved files leave the index in one transaction at the end."""
    from vsekit.fsio import LockBusy, exclusive_lock

    store = coll.store
    if store.read_only:
        raise CollectionError(f"{store.path}: the index is read-only here; nothing moved")
    msg = f"{store.path}: another process is updating this index; waiting"
    try:
        with exclusive_lock(store.path / LOCK_NAME, wait=msg if wait else None):
            store.reopen_if_replaced()
            return _apply_locked(plan, store)
    except LockBusy:
        raise CollectionError(
            f"{store.path}: another process is updating this index; nothing moved, try again"
        ) from None


def _apply_locked(plan: Plan, store) -> Plan:
    snap = store.snapshot()
    stamp = time_stamp()
    undo = Path(plan.move_to) / f"{UNDO_PREFIX}{stamp}.tsv"
    k = 1
    while True:
        try:
            fh = open(undo, "xb")  # noqa: SIM115  (closed below)
            break
        except FileExistsError:
            k += 1
            undo = Path(plan.move_to) / f"{UNDO_PREFIX}{stamp}-{k}.tsv"
    moved_ids: list[int] = []
    with fh:
        fh.write(_undo_header())
        for g in plan.groups:
            done = []
            for file_id, src, dst in g.moves:
                pos = snap.id_to_pos.get(file_id)
                if pos is None or snap.paths[pos] != src:
                    plan.failed.append((src, "no longer indexed"))
                    continue
                try:
                    st = os.stat(src)
                except OSError:
                    plan.failed.append((src, "no longer on disk"))
                    continue
                if (st.st_size, st.st_mtime_ns) != tuple(snap.stamps[pos]):
                    plan.failed.append((src, "changed since it was indexed"))
                    continue
                if os.path.lexists(dst):
                    dst = _free_name(dst, set())
                fh.write(os.fsencode(dst) + b"\t" + os.fsencode(src) + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
                try:
                    move_no_overwrite(src, dst)
                except OSError as e:
                    plan.failed.append((src, e.strerror or str(e)))
                    continue
                moved_ids.append(file_id)
                done.append((file_id, src, dst))  # where it went (a name taken since: another)
            g.moves = done
    w = store._writer_db()
    with w:
        for table, key in (("segments", "file_id"), ("photo_meta", "file_id"), ("files", "id")):
            w.executemany(f"DELETE FROM {table} WHERE {key} = ?", [(i,) for i in moved_ids])
    plan.applied, plan.undo_file, plan.moved = True, str(undo), len(moved_ids)
    return plan


def time_stamp() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S")


@dataclass
class UndoReport:
    restored: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (original, why)


def undo(undo_file: str | os.PathLike) -> UndoReport:
    """Move every file of an undo list back to its original path, never over a file
    (those are skipped and named). Restored files return to the index at the next
    ``vse index``."""
    f = Path(undo_file)
    try:
        raw = f.read_bytes()
    except FileNotFoundError:
        raise DedupeError(f"undo: {f}: no such file") from None
    except IsADirectoryError:
        raise DedupeError(f"undo: {f}: a folder, not an undo list") from None
    if not raw.startswith(b"# vse duplicates undo list"):
        raise DedupeError(f"undo: {f}: not an undo list written by vse duplicates")
    rep = UndoReport()
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line or line.startswith(b"#"):
            continue
        parts = line.split(b"\t")
        if len(parts) != 2:
            raise DedupeError(f"undo: {f}: line {n} is not <moved to> TAB <original path>")
        moved, orig = os.fsdecode(parts[0]), os.fsdecode(parts[1])
        if not os.path.lexists(moved):
            rep.skipped.append((orig, f"{moved} is not there"))
            continue
        try:
            move_no_overwrite(moved, orig)
        except FileExistsError:
            rep.skipped.append((orig, "a file is there already: not overwritten"))
            continue
        except OSError as e:
            rep.skipped.append((orig, e.strerror or str(e)))
            continue
        rep.restored += 1
    return rep


def plan_json(plan: Plan, shown=lambda p: p) -> dict:
    """The plan as the CLI's ``--json`` and ``POST /duplicates/move`` give it."""
    return {
        "keep": plan.keep,
        "applied": plan.applied,
        "moves": plan.n_moves,
        "moved": plan.moved,
        "undo_file": plan.undo_file,
        "groups": [
            {
                "kind": g.kind,
                "keep": g.keep,
                "files": [
                    {
                        "id": m.id,
                        "path": shown(m.path),
                        "pixels": m.pixels,
                        "bytes": m.bytes,
                        "taken": m.taken,
                    }
                    for m in g.members
                ],  # fmt: skip
                "move": [{"id": i, "from": shown(s), "to": d} for i, s, d in g.moves],
                "skipped": [{"id": i, "why": why} for i, why in g.skipped],
            }
            for g in plan.groups
        ],
        "failed": [{"path": shown(p), "why": why} for p, why in plan.failed],
    }


def keeps_for(snap, groups: list[DuplicateGroup], keep: str = "best") -> list[int]:
    """For each group, the id of the file that :func:`plan_moves` with ``keep`` would
    keep in its set of copies: that file, or (where it lies in another group of the
    set) the group's exact copy of it."""
    sha = snap.photo_meta.get("sha256") or [None] * len(snap)
    kept: dict[int, int] = {}
    for _, ids in merged_groups(groups):
        k = choose_keep([member_of(snap, i) for i in ids], keep).id
        kept.update({i: k for i in ids})
    out = []
    for g in groups:
        k = kept[g.ids[0]]
        if k not in g.ids:
            h = sha[snap.id_to_pos[k]]
            same = [i for i in g.ids if h and sha[snap.id_to_pos[i]] == h]
            k = same[0] if same else choose_keep([member_of(snap, i) for i in g.ids], keep).id
        out.append(k)
    return out
