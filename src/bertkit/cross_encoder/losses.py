"""sentence-transformers' ``cross_encoder.losses`` module at its drop-in path."""

from bertkit.sentence.cross_encoder.losses import *  # noqa: F403
from bertkit.sentence.cross_encoder.losses import __all__  # noqa: F401
