"""``vse search``: find indexed photos by text or by a similar image."""

from __future__ import annotations

import argparse
import json
import sys

from vsekit.cli._base import DEFAULT_INDEX, clock, command, positive_int


@command
def _add_search(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="find indexed photos by text or by a similar image")
    p.add_argument(
        "query",
        nargs="?",
        help='what is in the photo; or a sum of terms: \'"a dog" + "beach" - "snow"\', '
        "'2:\"golden retriever\"', '#ID' (an indexed photo), './photo.jpg'",
    )
    p.add_argument("--image", help="find photos similar to this image instead")
    p.add_argument("--index", default=DEFAULT_INDEX)
    p.add_argument("--model", help="model (default: the one the index was built with)")
    p.add_argument("--k", type=positive_int, default=20)
    p.add_argument("--method", default="auto", choices=["auto", "exact", "faiss"])
    p.add_argument(
        "--exact",
        action="store_true",
        help="search the words as typed (by default misspellings and informal forms of "
        "words the model does not know are corrected, and the note says so)",
    )
    p.add_argument(
        "--no-stack",
        dest="stack",
        action="store_false",
        help="list copies of a photo (same content, or near-duplicates) as separate results "
        "instead of one result with '(+N copies)' (--json and -f always list every file; "
        "JSON names each one's copies)",
    )
    f = p.add_argument_group("filters (from EXIF; files without a date use their mtime)")
    f.add_argument("--after", metavar="DATE", help="taken on or after: 2019, 2019-06, 2019-06-15")
    f.add_argument("--before", metavar="DATE", help="taken before this year, month or day starts")
    f.add_argument("--camera", help="part of the camera's make and model, e.g. 'pixel'")
    f.add_argument("--near", metavar="LAT,LON[,KM]", help="GPS within KM (10) of a place")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument(
        "--paths-only", "-f", action="store_true", help="print only the paths (for pipes)"
    )
    p.set_defaults(handler=_search)


def _search(args: argparse.Namespace) -> int:
    from pathlib import Path

    from vsekit.index.api import open_index
    from vsekit.index.filters import Filters
    from vsekit.index.query import check_query
    from vsekit.index.scan import path_fields, shown
    from vsekit.media.images import open_regular
    from vsekit.text.notes import correction_note, weak_note
    from vsekit.text.spelling import Normalised

    if (args.query is None) == (args.image is None):
        raise ValueError("give either a text query or --image FILE")
    filters = Filters.parse(args.after, args.before, args.camera, args.near)
    if args.query is not None:
        args.query = check_query(args.query)
    else:
        open_regular(args.image).close()  # a FIFO or a device is refused before any read
    index = open_index(args.index, args.model)  # the Python API's front door
    # copies are stacked for reading; JSON and pipes keep every file in its place
    stack = args.stack and not (args.json or args.paths_only)
    searched = None
    if args.query is not None:
        fix = Normalised(args.query) if args.exact else index.correct(args.query)
        searched = fix.text
        if fix.changes:
            print(correction_note(searched, fix.changes, "--exact for the words as typed"),
                  file=sys.stderr)  # fmt: skip
        unknown = index.unknown_words(searched)
        if unknown:
            print(f"note: the model does not know {', '.join(unknown)}", file=sys.stderr)
        note = weak_note(index.weak_words(searched))
        if note:
            print(note, file=sys.stderr)
        hits = index.search(searched, args.k, args.method, filters, stack, exact=True)
    else:
        hits = index.search(Path(args.image), args.k, args.method, filters, stack)
    if not hits and filters:
        print(f"note: no photo of the {len(index):,} indexed matches the filters (dates come "
              "from EXIF, else from the file's modification time)", file=sys.stderr)  # fmt: skip
    # a name that is not UTF-8 is shown with its undecodable bytes as \xNN (and, in JSON,
    # its real bytes in path_b64); in plain output control characters are escaped too
    if args.json:  # every file in its place, with the ids of its copies among the results
        from vsekit.index.stacking import copy_ids

        same = copy_ids(index.collection.snapshot, hits) if args.stack else [[]] * len(hits)
        # a text search's hits name the query as searched (after any correction)
        said = {} if searched is None else {"searched": searched}
        print(json.dumps([{**h.__dict__, **path_fields(h.path), "copies": c, **said}
                          for h, c in zip(hits, same, strict=True)], indent=2))  # fmt: skip
    elif args.paths_only:  # for pipes: the file-system bytes, so xargs finds the file
        import os

        for h in hits:
            sys.stdout.buffer.write(os.fsencode(h.path) + b"\n")
        sys.stdout.flush()
    else:
        for h in hits:
            at = f"  [{clock(h.start)}-{clock(h.end)}]" if h.start is not None else ""
            cue = f"{h.cue:<6}  " if h.cue is not None else ""
            n = len(h.copies)
            more = f"  (+{n} {'copy' if n == 1 else 'copies'})" if n else ""
            print(f"{cue}{h.score:7.4f}  {shown(h.path)}{at}{more}")
    return 0
