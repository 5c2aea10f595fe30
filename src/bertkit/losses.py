"""sentence-transformers' ``losses`` module at its drop-in path: ``from bertkit import losses``."""

from bertkit.sentence.losses import *  # noqa: F403
from bertkit.sentence.losses import __all__  # noqa: F401
