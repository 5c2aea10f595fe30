"""The sentence-transformers world in one package, laid out as sentence-transformers lays out its own.

- :mod:`.sentence_transformer`: the ``SentenceTransformer`` model; :mod:`.models`: its modules
  (Transformer, Pooling, Dense, Normalize), each saving and loading itself.
- :mod:`.fit`: the pre-v3 ``model.fit`` call; :mod:`.trainer` and :mod:`.training_args`: the v3+
  trainer, run by bertkit's one :class:`~bertkit.training.Trainer`.
- :mod:`.losses`, :mod:`.evaluation` (evaluators over :mod:`.evaluation.metrics`), :mod:`.model_card`,
  :mod:`.datasets`, :mod:`.util`.
- :mod:`.cross_encoder`: the cross-encoder's model, fit, trainer, losses and ``train-reranker``.
- :mod:`.embedder`: the ``train-embedder`` command's recipe.

sentence-transformers' import paths answer too, as re-export modules: ``bertkit.losses``,
``bertkit.evaluation``, ``bertkit.models``, ``bertkit.util``, ``bertkit.datasets``,
``bertkit.model_card``, ``bertkit.training_args`` and ``bertkit.cross_encoder``. The classes load
lazily, so that importing the package costs nothing until one is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "SentenceTransformer": "bertkit.sentence.sentence_transformer",
    "InputExample": "bertkit.sentence.fit",
    "LoggingHandler": "bertkit.sentence.fit",
    "SentenceTransformerTrainer": "bertkit.sentence.trainer",
    "SentenceTransformerTrainingArguments": "bertkit.sentence.training_args",
    "BatchSamplers": "bertkit.sentence.training_args",
    "MultiDatasetBatchSamplers": "bertkit.sentence.training_args",
    "SentenceTransformerModelCardData": "bertkit.sentence.model_card",
    "CrossEncoder": "bertkit.sentence.cross_encoder.cross_encoder",
    "CrossEncoderTrainer": "bertkit.sentence.cross_encoder.trainer",
    "CrossEncoderTrainingArguments": "bertkit.sentence.cross_encoder.trainer",
    "CrossEncoderModelCardData": "bertkit.sentence.model_card",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'bertkit.sentence' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
