"""One Trainer for pretraining and fine-tuning (see :mod:`bertkit.training.trainer`).

- :mod:`~bertkit.training.training_args`: the training arguments every trainer and command shares.
- :mod:`~bertkit.training.trainer`: the loop (steps, evaluation, early stopping), and its parts:
  :mod:`~bertkit.training.state` (checkpoints, resume, the best model, ``trainer.state``),
  :mod:`~bertkit.training.distributed` (torchrun), :mod:`~bertkit.training.trainer_logging` (metrics.jsonl,
  the progress bar, callbacks), :mod:`~bertkit.training.hf_compat` (transformers' Trainer API) and
  :mod:`~bertkit.training.optim` (AdamW, the schedule, the precision).
- :mod:`~bertkit.training.checkpoint_folders`: checkpoint files, retention, best and final model.
- :mod:`~bertkit.training.plots`: metrics.png.
- :mod:`~bertkit.training.run_folders`: the folder rule and ``--resume`` identity of every training command.
- :mod:`~bertkit.training.mlm`: the MLM (+ NSP) pretraining recipe; :mod:`~bertkit.training.recipes`:
  time-budget schedules of it; :mod:`~bertkit.training.pretraining`: ``pretrain``, one run or a recipe.
- :mod:`~bertkit.training.clm`: GPT-2 pretraining (distillation, a task recipe, is :mod:`bertkit.tasks.distillation`).
"""

from bertkit.training.checkpoint_folders import latest_checkpoint
from bertkit.training.collators import (
    DataCollatorForLanguageModeling,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    DefaultDataCollator,
    default_data_collator,
)
from bertkit.training.plots import plot_metrics
from bertkit.training.pretraining import (
    PretrainingArguments,
    build_pretraining,
    evaluate_pretraining,
    mlm_nsp_loss,
    pretrain,
)
from bertkit.training.trainer import (
    EarlyStoppingCallback,
    EvalPrediction,
    NonFiniteLossError,
    PredictionOutput,
    RandomBatchSampler,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingConfig,
    TrainResult,
    model_loss,
    set_seed,
)
from bertkit.training.training_args import TrainingArguments

__all__ = [
    "DataCollatorForLanguageModeling",
    "DataCollatorForTokenClassification",
    "DataCollatorWithPadding",
    "DefaultDataCollator",
    "default_data_collator",
    "TrainerState",
    "EarlyStoppingCallback",
    "TrainerCallback",
    "TrainerControl",
    "EvalPrediction",
    "PredictionOutput",
    "Trainer",
    "TrainingArguments",
    "TrainingConfig",
    "TrainResult",
    "RandomBatchSampler",
    "NonFiniteLossError",
    "latest_checkpoint",
    "model_loss",
    "plot_metrics",
    "set_seed",
    "PretrainingArguments",
    "pretrain",
    "build_pretraining",
    "evaluate_pretraining",
    "mlm_nsp_loss",
]
