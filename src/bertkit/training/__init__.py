"""One Trainer for pretraining and fine-tuning (see :mod:`bertkit.training.trainer`)."""

from bertkit.training.trainer import (
    NonFiniteLossError,
    RandomBatchSampler,
    Trainer,
    TrainingConfig,
    TrainResult,
    latest_checkpoint,
    plot_metrics,
    set_seed,
)

__all__ = [
    "Trainer",
    "TrainingConfig",
    "TrainResult",
    "RandomBatchSampler",
    "NonFiniteLossError",
    "latest_checkpoint",
    "plot_metrics",
    "set_seed",
]
