"""The cross-encoder: its model, fit, trainer and arguments, losses, and the ``train-reranker`` command,
laid out as ``sentence_transformers.cross_encoder``."""

from bertkit.sentence.model_card import CrossEncoderModelCardData

from . import losses
from .cross_encoder import CrossEncoder
from .trainer import CrossEncoderTrainer, CrossEncoderTrainingArguments

__all__ = [
    "CrossEncoder",
    "CrossEncoderModelCardData",
    "CrossEncoderTrainer",
    "CrossEncoderTrainingArguments",
    "losses",
]
