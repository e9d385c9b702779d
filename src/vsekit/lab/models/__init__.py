"""Model kinds: the joint embedding (UVS / VSE++ / order) and Word2VisualVec."""

from vsekit.lab.models.factory import MODELS, create_model
from vsekit.lab.models.joint import JointConfig, JointEmbedding
from vsekit.lab.models.w2vv import Word2VisualVec

__all__ = ["MODELS", "JointConfig", "JointEmbedding", "Word2VisualVec", "create_model"]
