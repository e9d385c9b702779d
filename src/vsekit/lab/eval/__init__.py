"""Evaluation: retrieval metrics and protocols."""

from vsekit.lab.eval.model_eval import encode_all, evaluate_model
from vsekit.lab.eval.retrieval import (
    METRIC_KEYS,
    PROTOCOLS,
    evaluate_protocol,
    fold_indices,
    metrics_from_ranks,
    retrieval_metrics,
    retrieval_metrics_from_embeddings,
)

__all__ = [
    "encode_all",
    "evaluate_model",
    "METRIC_KEYS",
    "PROTOCOLS",
    "evaluate_protocol",
    "fold_indices",
    "metrics_from_ranks",
    "retrieval_metrics",
    "retrieval_metrics_from_embeddings",
]
