"""Model kinds: the joint embedding (UVS / VSE++ / order) and Word2VisualVec."""

from .factory import MODELS, create_model
from .joint import JointConfig, JointEmbedding
from .w2vv import Word2VisualVec

__all__ = ["MODELS", "JointConfig", "JointEmbedding", "Word2VisualVec", "create_model"]
