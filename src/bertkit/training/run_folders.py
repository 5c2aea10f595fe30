"""The folder rule for every training command, in one place.

A training command (``pretrain``, ``pretrain-clm``, ``distill``, ``finetune`` and the ones to come)
claims its ``--output`` through :func:`bertkit._folders.claim_output_dir`: a new or empty folder, or
its own earlier output with ``--overwrite`` (only the files it wrote are removed) or ``--resume``.
The run's identity recorded in the folder's marker is the command's settings that must not change
on resume (:meth:`~bertkit.training.training_args.TrainingArguments.resume_settings`) plus what the
recipe adds (model configuration, data fingerprint, objective), so ``--resume`` of another run lists
every difference instead of silently training on. The output may never be, or hold, an input model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from bertkit import _args as A
from bertkit._folders import OutputClaim, check_not_input, claim_output_dir, within_claim
from bertkit.training.training_args import TrainingArguments

__all__ = ["claim_training_output", "run_identity", "within_claim"]

# What the Trainer itself writes into its output (see bertkit.training.checkpoint_folders).
TRAINER_OUTPUTS = (
    "checkpoints",
    "best",
    "metrics.jsonl",
    "metrics.png",
    "config.json",
    "model.safetensors",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
)


def run_identity(args: TrainingArguments, **sections: Any) -> dict[str, Any]:
    """What makes a run the same run on ``--resume``: its settings plus the recipe's ``sections``."""
    return {"settings": args.resume_settings(), **sections}


def claim_training_output(
    args: TrainingArguments,
    command: str,
    identity: Mapping[str, Any],
    owned: Sequence[str] = TRAINER_OUTPUTS,
    inputs: Mapping[str, str | os.PathLike | None] | None = None,
    dry_run: bool = False,
    resume_needs: Sequence[str] = ("checkpoints",),
) -> OutputClaim | None:
    """Claim ``args.output`` for ``command`` (rank 0 only: other ranks return None and wait at the
    Trainer's first barrier). ``inputs`` (``{"--teacher": path}``) may not be the output or inside it.
    ``dry_run`` checks without changing anything (to fail before minutes of data preparation)."""
    check_not_input(args.output, inputs or {})
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    return claim_output_dir(
        args.output,
        command,
        overwrite=args.overwrite,
        resume=args.resume,
        run=dict(identity),
        owned=owned,
        can_resume=True,
        dry_run=dry_run,
        resume_needs=resume_needs,
        run_defaults={"settings": A.resume_defaults(args)},
    )
