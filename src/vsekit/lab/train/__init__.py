"""Training: configs, the trainer, checkpoints."""

from vsekit.lab.train.config import ConfigError, ExperimentConfig, load_config
from vsekit.lab.train.retrieval_data import TrainData
from vsekit.lab.train.trainer import Trainer, load_run, train

__all__ = [
    "ConfigError",
    "ExperimentConfig",
    "TrainData",
    "Trainer",
    "load_config",
    "load_run",
    "train",
]
