"""Image tagging: ranked tags mined from captions and a bilinear SJE/ListSJE ranker."""
