"""sentence-transformers' ``evaluation`` module at its drop-in path: ``from bertkit.evaluation import ...``."""

from bertkit.sentence.evaluation import *  # noqa: F403
from bertkit.sentence.evaluation import __all__  # noqa: F401
