"""Trainable text encoders and word vectors (PyTorch)."""

from vsekit.lab.text.encoders import (
    TextEncoderConfig,
    create_text_encoder,
    list_text_encoders,
    register_text_encoder,
)

__all__ = [
    "TextEncoderConfig",
    "create_text_encoder",
    "list_text_encoders",
    "register_text_encoder",
]
