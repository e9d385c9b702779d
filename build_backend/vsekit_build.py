"""vsekit's build backend: setuptools', with one check before a wheel is built.

The default model's ONNX encoders are generated from the tracked weights by
``scripts/setup`` (they need PyTorch, the backbone's weights and calibration photos), so
a clean clone does not have them. A wheel built without them would install and then
fail at the first ``vse index``: instead the build stops here and says what to do.
Editable installs (``pip install -e .``, which ``scripts/setup`` runs before it makes
the encoders) are not checked.
"""

from __future__ import annotations

import json
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the PEP 517 hooks, as is)

DEFAULT = Path(__file__).resolve().parents[1] / "src" / "vsekit" / "assets" / "default"


class MissingEncoders(RuntimeError):
    pass


def check_encoders(bundle: Path = DEFAULT) -> None:
    """MissingEncoders naming what is missing and the commands that make it."""
    meta = bundle / "onnx.json"
    missing = [] if meta.is_file() else ["onnx.json"]
    if meta.is_file():
        try:
            missing = [n for n in json.loads(meta.read_text())["sha256"]
                       if not (bundle / n).is_file()]  # fmt: skip
        except (OSError, ValueError, KeyError) as e:
            missing = [f"a readable onnx.json ({e})"]
    if missing:
        raise MissingEncoders(
            f"vsekit: the default model's ONNX encoders are not in this checkout "
            f"({', '.join(missing)} missing under {bundle}). They are generated, not "
            "tracked: run `scripts/setup` (it makes them with PyTorch, then "
            "`scripts/check_wheel` builds a working wheel), or install a released "
            "vsekit wheel. A wheel without them would fail at its first `vse index`."
        )


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    check_encoders()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
