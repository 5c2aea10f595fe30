"""Optional extras: import a module that an extra installs, or fail with one line naming the extra.

``require("faiss", "faiss")`` returns the module, or raises :class:`MissingExtraError`, whose
message says what to ``pip install``. The CLI reports that error in one line and exits 2 (the
command cannot run as installed), without a traceback.

This module is a leaf: it imports nothing of bertkit.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(ImportError):
    """A feature needs a module that one of bertkit's optional extras installs."""

    def __init__(self, module: str, extra: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs {module}, which is not installed: pip install 'bertkit[{extra}]'", name=module
        )
        self.module, self.extra, self.feature = module, extra, feature

    def __reduce__(self) -> tuple:
        # raised in a worker process, it must unpickle in the parent with the same message
        return type(self), (self.module, self.extra, self.feature)


def require(module: str, extra: str, feature: str | None = None) -> ModuleType:
    """Import ``module`` (installed by ``bertkit[extra]``) or raise :class:`MissingExtraError`."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(module, extra, feature or f"the {extra} extra") from None
