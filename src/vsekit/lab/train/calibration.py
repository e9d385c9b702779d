"""Calibration photos for the int8 image graph.

Static int8 quantisation needs activation ranges, measured on photos the model has not
been evaluated on. The development setup calibrates on Flickr8k train images; a build
from a clean clone has no dataset, so it calibrates on the photographs that ship inside
scikit-image (``skimage/data``: a cat, a coffee cup, an astronaut, a rocket, textures,
a retina...). ``benchmarks/int8_calibration.py`` measures what each source costs
against the float graph (``@samples``).
"""

from __future__ import annotations

from pathlib import Path

# the photographs among scikit-image's bundled data (drawings, charts, masks and
# synthetic images left out); grey ones are converted to RGB like any grey photo
SAMPLE_PHOTOS = (
    "astronaut.png", "brick.png", "camera.png", "chelsea.png", "clock_motion.png",
    "coffee.png", "coins.png", "grass.png", "gravel.png", "hubble_deep_field.jpg",
    "ihc.png", "moon.png", "motorcycle_left.png", "retina.jpg", "rocket.jpg",
)  # fmt: skip

SAMPLES = "samples"  # the name `vse model onnx --calibrate` takes for them


def sample_photos() -> list[Path]:
    """Paths of scikit-image's bundled photographs (scikit-image is in ``[train]``)."""
    try:
        import skimage
    except ImportError as e:  # pragma: no cover - [train] has it
        raise RuntimeError("calibrating on sample photos needs scikit-image") from e
    root = Path(skimage.__file__).parent / "data"
    paths = [root / name for name in SAMPLE_PHOTOS]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise RuntimeError(f"{root}: scikit-image {skimage.__version__} lacks {missing}")
    return paths


def calibration_images(source: str, count: int) -> list[Path]:
    """``count`` calibration photos from ``source``: ``samples`` (all of them, whatever
    ``count``), or a dataset whose train split gives every step-th image."""
    if source == SAMPLES:
        return sample_photos()
    from vsekit.lab.data import load_dataset

    train = load_dataset(source).split("train")
    step = max(1, len(train.images) // count)
    return [Path(im.path) for im in train.images[::step][:count]]
