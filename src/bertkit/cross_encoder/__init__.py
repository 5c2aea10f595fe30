"""sentence-transformers' ``cross_encoder`` namespace at its drop-in path:
``from bertkit.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments, losses``."""

from bertkit.sentence.cross_encoder import *  # noqa: F403
from bertkit.sentence.cross_encoder import __all__  # noqa: F401
