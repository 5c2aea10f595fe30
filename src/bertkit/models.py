"""sentence-transformers' ``models`` module at its drop-in path: ``from bertkit import models``."""

from bertkit.sentence.models import *  # noqa: F403
from bertkit.sentence.models import __all__  # noqa: F401
