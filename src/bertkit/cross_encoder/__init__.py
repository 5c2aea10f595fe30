"""sentence-transformers' ``cross_encoder`` namespace: ``from bertkit.cross_encoder import CrossEncoder,
CrossEncoderTrainer, CrossEncoderTrainingArguments, losses`` works as the same line from
``sentence_transformers.cross_encoder`` does."""

from bertkit.cross_encoder import losses
from bertkit.model_card import CrossEncoderModelCardData
from bertkit.pipelines.cross_encoder import CrossEncoder
from bertkit.training.cross_encoder_trainer import CrossEncoderTrainer, CrossEncoderTrainingArguments

__all__ = [
    "CrossEncoder",
    "CrossEncoderModelCardData",
    "CrossEncoderTrainer",
    "CrossEncoderTrainingArguments",
    "losses",
]
