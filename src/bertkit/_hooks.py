"""Calls a lower layer makes into a higher one, without importing it.

A layer never imports one above it. Where lower code must reach higher code (a model loaded at an
inference precision needs :mod:`bertkit.inference`; a model prepared for inference must have its fused
weights follow ``.to()``), the higher layer provides a function under a name and the lower one calls
it by that name. The root package (``bertkit/__init__.py``) names every provider's module, so a
provider is found even before its module was first imported, and the layers below never name it.

This module is a leaf: it imports nothing of bertkit.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

__all__ = ["call", "provide", "provide_lazily"]

_PROVIDERS: dict[str, Callable[..., Any]] = {}
_LAZY: dict[str, str] = {}


def provide(name: str, fn: Callable[..., Any]) -> None:
    """Make ``fn`` the function that ``call(name, ...)`` runs."""
    _PROVIDERS[name] = fn


def provide_lazily(name: str, target: str) -> None:
    """Name the provider of ``name`` as ``"module:function"``, imported on its first call."""
    _LAZY[name] = target


def call(name: str, *args: Any, **kwargs: Any) -> Any:
    """Run the function provided under ``name``."""
    fn = _PROVIDERS.get(name)
    if fn is None:
        target = _LAZY.get(name)
        if target is None:
            raise RuntimeError(f"bertkit: nothing provides {name!r} (a provider is declared in bertkit/__init__.py)")
        module, _, attr = target.partition(":")
        fn = _PROVIDERS[name] = getattr(importlib.import_module(module), attr)
    return fn(*args, **kwargs)
