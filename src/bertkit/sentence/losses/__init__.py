"""The losses of sentence embeddings, each answering sentence-transformers' namesake's calls."""

from .losses import *  # noqa: F403
from .losses import __all__  # noqa: F401
