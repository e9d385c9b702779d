"""vsekit: visual-semantic embeddings. Put images and sentences in one space."""

__version__ = "0.1.0"
