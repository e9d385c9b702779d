"""Where the int8 image graph's calibration photos come from: a dataset's train split,
or the photographs bundled with scikit-image (a build from a clean clone); and making a
bundle's encoders again with the settings its onnx.json records."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("skimage")

from vsekit.lab.encoders import remake_encoders  # noqa: E402
from vsekit.lab.train.calibration import SAMPLE_PHOTOS, calibration_images  # noqa: E402
from vsekit.media.images import load_image  # noqa: E402


def test_sample_photos_are_real_decodable_photographs():
    paths = calibration_images("samples", 48)  # all of them, whatever the count asked
    assert [p.name for p in paths] == list(SAMPLE_PHOTOS)
    for p in paths:
        im = load_image(p)
        assert im.mode == "RGB" and min(im.size) >= 300, (p.name, im.mode, im.size)


def test_a_dataset_source_takes_every_step_th_train_image(flickr8k_root):
    paths = calibration_images(str(flickr8k_root), 48)
    assert len(paths) == 48 and len(set(paths)) == 48 and all(p.is_file() for p in paths)


def test_remaking_int8_encoders_needs_the_recorded_source(tmp_path, monkeypatch):
    prev = {"sha256": {"image.int8.onnx": "x"}, "default_precision": "int8",
            "int8": {"calibration_images": 48, "calibration_method": "percentile"}}  # fmt: skip
    with pytest.raises(ValueError, match="records no calibration source"):
        remake_encoders(tmp_path, prev)
    prev["int8"]["calibration_source"] = "flickr8k"
    monkeypatch.delenv("VSEKIT_CALIBRATION_DATA", raising=False)
    with pytest.raises(ValueError, match="calibrated on flickr8k; set VSEKIT_CALIBRATION_DATA"):
        remake_encoders(tmp_path, prev)
    monkeypatch.setenv("VSEKIT_CALIBRATION_DATA", str(Path("/elsewhere/coco")))
    with pytest.raises(ValueError, match="calibrated on flickr8k"):
        remake_encoders(tmp_path, prev)
