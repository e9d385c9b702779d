"""Config sections validated by pydantic: a discriminated union on ``kind`` (absent:
joint), unknown keys and wrong types refused in one line naming the field, and no
silent coercion (a boolean is not a number, text is not an int)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from vsekit.config import ConfigError  # noqa: E402
from vsekit.lab.models.bilinear import BilinearConfig  # noqa: E402
from vsekit.lab.models.factory import EnsembleConfig  # noqa: E402
from vsekit.lab.models.joint import JointConfig  # noqa: E402
from vsekit.lab.train.config import ExperimentConfig, from_dict  # noqa: E402


def test_kind_picks_the_section_and_defaults_to_joint():
    assert isinstance(from_dict(ExperimentConfig, {}).model, JointConfig)
    assert isinstance(from_dict(ExperimentConfig, {"model": {"text": {}}}).model, JointConfig)
    assert isinstance(from_dict(ExperimentConfig, {"model": {"kind": "bilinear"}}).model,
                      BilinearConfig)  # fmt: skip
    ens = from_dict(ExperimentConfig, {"model": {"kind": "ensemble", "weights": [1, 2]}}).model
    assert isinstance(ens, EnsembleConfig) and ens.weights == [1.0, 2.0]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"model": {"kind": "nope"}}, r"model.kind: unknown 'nope'; known: \['bilinear', "),
        ({"model": {"kind": "joint", "members": []}}, r"model: unknown field\(s\) \['members'\]"),
        ({"model": {"text": {"word_dim": 1.5}}}, "model.text.word_dim: expected int, got 1.5"),
        ({"train": {"lr": "abc"}}, "train.lr: expected float, got 'abc'"),
        ({"train": {"lr": True}}, "train.lr: expected float, got True"),
        ({"train": {"epochs": "3"}}, "train.epochs: expected int, got '3'"),
        ({"data": 3}, "data: expected a mapping, got 3"),
        ({"nope": 1}, r"unknown field\(s\) \['nope'\]; known: \['data', "),
    ],
)
def test_bad_sections_are_named_in_one_line(section, message):
    with pytest.raises(ConfigError, match=message) as e:
        from_dict(ExperimentConfig, section)
    assert "\n" not in str(e.value)


def test_yaml_exponents_read_as_text_are_floats():
    assert from_dict(ExperimentConfig, {"train": {"lr": "2e-4"}}).train.lr == 2e-4
