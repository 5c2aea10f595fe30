"""sentence-transformers' ``training_args`` module at its drop-in path:
``from bertkit.training_args import BatchSamplers``."""

from bertkit.sentence.training_args import *  # noqa: F403
from bertkit.sentence.training_args import __all__  # noqa: F401
