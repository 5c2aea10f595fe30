"""sentence-transformers' ``model_card`` module at its drop-in path: ``from bertkit.model_card import ...``."""

from bertkit.sentence.model_card import *  # noqa: F403
from bertkit.sentence.model_card import __all__  # noqa: F401
