"""``vse doctor``: what runs on this machine, and whether it is right here.

The CPU features that decide speed and int8 accuracy, the precision chosen for the model
and why, the int8-against-fp32 parity measured on this CPU, the bundle's verification and
the cache's sizes. Exits 1 when the parity check or the verification fails.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

from vsekit.cli._base import command


@command
def _add_doctor(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check what runs on this machine: CPU, precision, parity")
    p.add_argument("model", nargs="?", default="default")
    p.add_argument("--photos", type=Path, help="check parity on these photos (a folder) instead "
                   "of the twelve that ship with vsekit")  # fmt: skip
    p.add_argument("--no-parity", action="store_true", help="skip the parity check (seconds)")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.set_defaults(handler=_doctor)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def report(model: str = "default", photos: Path | None = None, parity: bool = True) -> dict:
    """Everything ``vse doctor`` prints, as a dict (``ok``: all checks passed)."""
    import onnxruntime

    from vsekit import __version__
    from vsekit.bundle import ModelError, bundle_dir, read_onnx_meta, verify_bundle, verify_onnx
    from vsekit.fsio import cache_dir
    from vsekit.media.images import IMAGE_SUFFIXES
    from vsekit.runtime.loading import load_model
    from vsekit.runtime.parity import int8_parity
    from vsekit.runtime.precision import cpu_info, cpu_name

    cpu = cpu_info()
    out: dict = {
        "vsekit": __version__,
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "cpu": {
            "name": cpu_name(),
            "machine": cpu.machine,
            "int8_class": cpu.int8_class,
            "flags": cpu.reported(),
        },  # fmt: skip
    }
    path = bundle_dir(model)
    verify_bundle(path)
    meta = read_onnx_meta(path)
    verify_onnx(path, meta, None)  # every graph, whichever runs
    out["bundle"] = {"path": str(path), "verified": sorted(meta["sha256"]),
                     "int8_weights": meta.get("int8_weights")}  # fmt: skip
    choice = load_model(path, backend="onnx").precision_choice  # $VSEKIT_PRECISION too
    out["precision"] = choice.as_dict()
    ok = True
    if parity:
        pics = None
        if photos is not None:
            pics = sorted(p for p in photos.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            if not pics:
                raise ValueError(f"{photos}: no photos in this folder")
        try:
            checks = int8_parity(path, pics)
        except ModelError:  # one precision only: nothing to compare
            checks = {}
        used = {"image": choice.image, "text": choice.text}
        out["parity"] = {k: {**v.as_dict(), "used": used[k] == "int8"} for k, v in checks.items()}
        # int8 that does not run here cannot be wrong here: only what runs must match
        ok = all(v.ok for k, v in checks.items() if used[k] == "int8")
    root = cache_dir()
    out["cache"] = {
        "path": str(root),
        "sizes_mb": {d.name: round(_size(d) / 1e6, 1) for d in sorted(root.iterdir()) if d.is_dir()}
        if root.is_dir() else {},
    }  # fmt: skip
    out["ok"] = ok
    return out


def _doctor(args: argparse.Namespace) -> int:
    r = report(args.model, args.photos, not args.no_parity)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0 if r["ok"] else 1
    cpu = r["cpu"]
    have = [k for k, v in cpu["flags"].items() if v]
    lack = [k for k, v in cpu["flags"].items() if not v]
    lines = [
        f"vsekit {r['vsekit']}, Python {r['python']}, ONNX Runtime {r['onnxruntime']}",
        f"cpu:        {cpu['name']} ({cpu['machine']}; int8 class {cpu['int8_class']})",
        f"  has:      {' '.join(have) or '-'}",
        f"  lacks:    {' '.join(lack) or '-'}",
        f"model:      {r['bundle']['path']}",
        f"  verified: by sha256, {', '.join(r['bundle']['verified'])} (onnx.json) and the "
        "bundle's other files (manifest.json)",
        f"precision:  image {r['precision']['image']}, text {r['precision']['text']}: "
        f"{r['precision']['reason']}",
    ]
    for p in r.get("parity", {}).values():
        verdict = "ok" if p["ok"] else "FAILS"
        if not p["used"]:
            verdict += " (int8 is not used here: fp32 runs)"
        lines.append(f"parity:     {p['side']} int8 vs fp32 on this CPU, {p['n']} inputs: "
                     f"median {p['median']:.4f}, min {p['worst']:.4f}: {verdict}")  # fmt: skip
    sizes = r["cache"]["sizes_mb"]
    lines.append(f"cache:      {r['cache']['path']}: "
                 + (", ".join(f"{k} {v} MB" for k, v in sizes.items()) or "empty"))  # fmt: skip
    print("\n".join(lines))
    if not r["ok"]:
        print("vse doctor: int8 does not match fp32 on this CPU; run with "
              "VSEKIT_PRECISION=fp32 and report it", file=sys.stderr)  # fmt: skip
        return 1
    return 0
