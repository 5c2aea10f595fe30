"""Downstream tasks: readers, metrics, fine-tuning, evaluation and prediction.

The heavy parts (torch, the Trainer) load only when ``finetune`` / ``evaluate`` / ``predict`` are
first used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "finetune": "bertkit.tasks.api",
    "evaluate": "bertkit.tasks.api",
    "predict": "bertkit.tasks.api",
    "load_finetuned": "bertkit.tasks.api",
    "FinetuneResult": "bertkit.tasks.api",
    "get_task": "bertkit.tasks.tasks",
    "TaskOptions": "bertkit.tasks.tasks",
    "TASKS": "bertkit.tasks.tasks",
    "LengthGroupedBatchSampler": "bertkit.data.batching",
    "collate_features": "bertkit.data.batching",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'bertkit.tasks' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
