"""Evaluators with sentence-transformers' calls (:mod:`.evaluators`) over the metrics they share with
``evaluate-embeddings`` and ``train-embedder`` (:mod:`.metrics`)."""

from .evaluators import *  # noqa: F403
from .evaluators import __all__  # noqa: F401
