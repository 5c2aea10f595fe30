"""sentence-transformers' ``datasets`` module at its drop-in path: ``from bertkit.datasets import ...``."""

from bertkit.sentence.datasets import *  # noqa: F403
from bertkit.sentence.datasets import __all__  # noqa: F401
