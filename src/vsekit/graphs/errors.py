"""The errors of :mod:`vsekit.graphs`."""

from __future__ import annotations


class UnsupportedModel(ValueError):
    """The bundle's architecture is not one the PyTorch-free graph writer covers (FNE
    features, LSTM or bidirectional text encoders, EfficientNet/VGG backbones, ...): its
    ONNX files need the PyTorch export (``vse model onnx``, vsekit[train])."""


class GraphWeightsError(RuntimeError):
    """Weights a graph needs are missing, could not be fetched, or are not the ones the
    bundle records; the message says what to install or do."""
