"""Models: the joint embedding (UVS / VSE++ / order)."""

from .joint import JointConfig, JointEmbedding

__all__ = ["JointConfig", "JointEmbedding"]
