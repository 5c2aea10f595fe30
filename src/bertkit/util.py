"""sentence-transformers' ``util`` module at its drop-in path: ``from bertkit import util``."""

from bertkit.sentence.util import *  # noqa: F403
from bertkit.sentence.util import __all__  # noqa: F401
