"""Evaluation: retrieval metrics and protocols."""

from .retrieval import (
    METRIC_KEYS,
    PROTOCOLS,
    evaluate_protocol,
    fold_indices,
    metrics_from_ranks,
    retrieval_metrics,
    retrieval_metrics_from_embeddings,
)

__all__ = [
    "METRIC_KEYS",
    "PROTOCOLS",
    "evaluate_protocol",
    "fold_indices",
    "metrics_from_ranks",
    "retrieval_metrics",
    "retrieval_metrics_from_embeddings",
]
