"""Walking a folder for the files an index can hold, and recognising moved files.

:func:`scan_media` lists every photo and video under a folder with its size and mtime,
and says why it skips what it cannot index; :func:`match_moves` pairs new paths with
vanished indexed files that were only moved or renamed (no re-embedding)."""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from vsekit.fsio import stored_ns
from vsekit.media.images import IMAGE_SUFFIXES, UNREADABLE
from vsekit.media.video import INSTALL_HINT, VIDEO_SUFFIXES, is_video, video_support


def printable(path: str) -> str:
    """A path that can be printed and stored: undecodable bytes as ``\\xNN``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


#: control characters (C0, DEL, C1) as ``ls`` shows them: ``\n``, ``\t``, ``\r``, ``\xNN``
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]} | {
    ord("\n"): "\\n",
    ord("\t"): "\\t",
    ord("\r"): "\\r",
}


def shown(text: str) -> str:
    """Text for one terminal line: :func:`printable`, and control characters escaped, so
    that a file name holding a newline is still one line (as ``ls`` shows it)."""
    return printable(text).translate(_CONTROL)


def path_fields(path: str, always: bool = False) -> dict[str, str]:
    """A path in JSON output: ``path`` as text (:func:`printable`), and, when the name is
    not UTF-8 and that text is therefore not the real name (or ``always``),
    ``path_b64``: the file-system bytes in base64, which round-trip."""
    import base64

    out = {"path": printable(path)}
    raw = os.fsencode(path)
    try:
        raw.decode("utf-8")
        utf8 = True
    except UnicodeDecodeError:
        utf8 = False
    if always or not utf8:
        out["path_b64"] = base64.b64encode(raw).decode("ascii")
    return out


def inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (both resolved)."""
    return path == root or path.startswith(os.path.join(root, ""))


def excluded(rel: str, patterns: Sequence[str]) -> bool:
    """``rel`` (a path below the scanned folder) or its file name matches a pattern."""
    name = os.path.basename(rel)
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in patterns)


def scan_media(
    root: Path,
    skipped: list[tuple[str, str]] | None = None,
    exclude: Sequence[str] = (),
) -> Iterator[tuple[str, int, int]]:
    """``(absolute path, size, mtime_ns)`` of every regular image or video file under ``root``,
    sorted. A file name that is not UTF-8 is kept as Python reads it (undecodable bytes
    as surrogates; the index stores its bytes, :func:`vsekit.index.schema.path_param`).
    What cannot be indexed is appended to ``skipped`` as ``(path, reason)``: FIFOs,
    devices and sockets named like images (never opened,
    so nothing hangs), broken symbolic links and loops, symbolic links to files outside
    ``root`` (they could not be served), unreadable folders. Symbolic links to folders
    are not followed."""
    skipped = skipped if skipped is not None else []
    real_root = os.path.realpath(root)
    videos = video_support()

    def unreadable(e: OSError) -> None:
        skipped.append((printable(str(e.filename)), f"unreadable folder ({e.strerror})"))

    needs: dict[str, int] = {}  # extra -> files this installation cannot read

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.lower().endswith(IMAGE_SUFFIXES + VIDEO_SUFFIXES) or name.startswith("."):
                extra = UNREADABLE.get(os.path.splitext(name)[1].lower())
                if extra and not name.startswith("."):
                    needs[extra] = needs.get(extra, 0) + 1
                continue
            p = os.path.abspath(os.path.join(dirpath, name))
            if exclude and excluded(os.path.relpath(p, root), exclude):
                continue
            if not videos and is_video(name):
                skipped.append((printable(p), INSTALL_HINT))
                continue
            try:
                st = os.stat(p)
            except FileNotFoundError:
                if os.path.islink(p):
                    skipped.append((printable(p), "broken symbolic link"))
                continue  # else it vanished during the scan
            except OSError as e:
                skipped.append((printable(p), f"cannot be read ({e.strerror})"))
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append((printable(p), "not a regular file (a FIFO, device or socket)"))
                continue
            if os.path.islink(p) and not inside(os.path.realpath(p), real_root):
                skipped.append((printable(p), "symbolic link to a file outside the folder"))
                continue
            yield p, st.st_size, stored_ns(st.st_mtime_ns)
    for extra, n in sorted(needs.items()):  # once per run: what would read them
        kind = "HEIC/HEIF photos" if extra == "heic" else "camera RAW files"
        skipped.append((f"{n} {kind} under {printable(str(root))}",
                        f"install vsekit[{extra}] to read them"))  # fmt: skip


def match_moves(
    vanished: Sequence[str],
    new: Sequence[tuple[str, int, int]],
    known: dict[str, tuple[int, int, int]],
) -> dict[str, str]:
    """``{new path: old path}`` for files that were moved or renamed: the file name, size
    and mtime (which ``mv`` and folder moves keep) identify exactly one vanished indexed
    file and exactly one new path. Ambiguous keys are left to be re-embedded."""

    def key(path: str, size: int, mtime: int) -> tuple[str, int, int]:
        return os.path.basename(path), size, mtime

    old_by_key: dict[tuple, list[str]] = {}
    for p in vanished:
        old_by_key.setdefault(key(p, known[p][1], known[p][2]), []).append(p)
    new_by_key: dict[tuple, list[str]] = {}
    for p, size, mtime in new:
        new_by_key.setdefault(key(p, size, mtime), []).append(p)
    return {
        ps[0]: old_by_key[k][0]
        for k, ps in new_by_key.items()
        if len(ps) == 1 and len(old_by_key.get(k, ())) == 1
    }


def match_by_content(
    vanished: Sequence[str],
    new: Sequence[tuple[str, int, int]],
    sizes: dict[str, int],
    hashes: dict[str, str],
) -> dict[str, str]:
    """``{new path: old path}`` for files renamed (or copied away and deleted) under
    another name: a new file whose bytes hash to exactly one vanished file's recorded
    sha256 (``hashes``; ``sizes`` their sizes) is that file. Only new files of a
    vanished file's size are read."""
    import hashlib

    by_size: dict[int, list[str]] = {}
    for p in vanished:
        if p in hashes:
            by_size.setdefault(sizes[p], []).append(p)
    found: dict[str, list[str]] = {}  # old path -> new paths with its content
    for p, size, _ in new:
        olds = by_size.get(size)
        if not olds:
            continue
        try:
            with open(p, "rb") as fh:
                sha = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError:
            continue
        same = [o for o in olds if hashes[o] == sha]
        if len(same) == 1:
            found.setdefault(same[0], []).append(p)
    return {ps[0]: old for old, ps in found.items() if len(ps) == 1}
