"""`bertkit pretrain` in Python: one MLM (+ NSP) run, or a whole recipe of runs.

``pretrain(PretrainingArguments(corpus=[...], vocab="vocab.txt", output="runs/mini"))`` runs what
`bertkit pretrain` runs. The MLM recipe itself (arguments, data, loss, evaluation) lives in
:mod:`bertkit.training.mlm`, one run in :mod:`bertkit.training.pretrain_run`, the time-budget
schedules in :mod:`bertkit.training.recipes`; all are re-exported here, which imports them and is
imported by none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bertkit.training.mlm import (
    RECIPES,
    PretrainingArguments,
    build_pretraining,
    check_unused_settings,
    evaluate_pretraining,
    mlm_nsp_loss,
)
from bertkit.training.pretrain_run import PRETRAIN_OUTPUTS, mlm_identity, train_mlm
from bertkit.training.recipes import run_recipe

__all__ = [
    "PRETRAIN_OUTPUTS",
    "RECIPES",
    "PretrainingArguments",
    "build_pretraining",
    "evaluate_pretraining",
    "mlm_identity",
    "mlm_nsp_loss",
    "pretrain",
    "run_recipe",
    "train_mlm",
]


def pretrain(args: PretrainingArguments, given: Sequence[str] = ()) -> Any:
    """Run ``args.recipe``'s phases when it is set (:func:`~bertkit.training.recipes.run_recipe`),
    else one run (:func:`~bertkit.training.pretrain_run.train_mlm`); returns the (last) TrainResult.

    A setting the run would not use is refused (:func:`~bertkit.training.mlm.check_unused_settings`;
    ``given``: settings given explicitly, even at their default)."""
    check_unused_settings(args, given)
    return run_recipe(args) if args.recipe else train_mlm(args)
