"""One pretraining run: the objective's parts (:func:`bertkit.training.objectives.build_objective`) put
into the :class:`~bertkit.training.Trainer` under the output folder's claim, the whole of
`bertkit pretrain` without ``--recipe``."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from bertkit import _args as A
from bertkit.hub import resolve_model_arg
from bertkit.training.mlm import PretrainingArguments, masked_fraction
from bertkit.training.run_folders import TRAINER_OUTPUTS, claim_training_output, run_identity, within_claim
from bertkit.training.training_args import with_step_length

__all__ = ["PRETRAIN_OUTPUTS", "mlm_identity", "train_mlm"]


# What `bertkit pretrain` writes into its --output (an ELECTRA run adds its generator's folder).
PRETRAIN_OUTPUTS = (*TRAINER_OUTPUTS, "generator")

_MODEL_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "max_position_embeddings",
    "type_vocab_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
)


def mlm_identity(args: Any, parts: dict[str, Any]) -> dict[str, Any]:
    """What makes a pretraining run the same run on --resume: settings, model configuration, data, objective."""
    from bertkit.data.corpus import vocab_fingerprint

    config, corpus = parts["config"], parts["corpus"]
    objective = {
        "nsp": not args.no_nsp,
        "whole_word_masking": bool(args.whole_word_masking),
        "mask_prob": masked_fraction(args),
        "seq_len": args.seq_len,
        "short_seq_prob": args.short_seq_prob,
    }
    name = getattr(args, "objective", "mlm+nsp")
    if name != "mlm+nsp":  # runs of the default objective keep the identity they were started with
        objective["objective"] = name
        if name == "electra":
            objective["generator_size"] = parts.get("generator_size", args.generator_size)
            if args.generator_temperature != 1.0:  # runs from before the setting keep their identity
                objective["generator_temperature"] = args.generator_temperature
    if getattr(args, "cls_bow_weight", 0.0):  # runs from before the setting keep their identity
        objective["cls_bow_weight"] = args.cls_bow_weight
    model = {k: getattr(config, k, None) for k in _MODEL_KEYS}
    if args.dropout is not None:  # the rates the run trains at (runs that wrote them into the config match)
        model["hidden_dropout_prob"] = model["attention_probs_dropout_prob"] = args.dropout
    return run_identity(
        args,
        model=model,
        data={
            "vocab": vocab_fingerprint(parts["vocab"]),
            "tokens": int(corpus.num_tokens),
            "documents": int(corpus.num_documents),
            "eval_fraction": args.eval_fraction,
            "seed": args.seed,
        },
        objective=objective,
    )


def train_mlm(args: PretrainingArguments) -> Any:
    """One run of ``args.objective`` (MLM + NSP, MLM, or ELECTRA: :mod:`bertkit.training.objectives`),
    the whole of `bertkit pretrain` without ``--recipe``; returns the TrainResult.

    Prints a one-line summary of the data and model to stderr and, on rank 0, the final held-out
    metrics as JSON to stdout. Raises :class:`~bertkit.training.NonFiniteLossError` on a NaN loss.
    """
    from bertkit.training.objectives import build_objective
    from bertkit.training.trainer import Trainer

    # Resolved before the run's identity is taken, so a run started with the default resumes as one.
    args = dataclasses.replace(args, mask_prob=masked_fraction(args))
    if args.model:
        # A model id resolves to its cache snapshot once: its config, weights, vocab.txt (and an
        # ELECTRA run's generator/) are read from there, and the output may not be inside it.
        args = dataclasses.replace(args, model=str(resolve_model_arg(args.model)))
    check_inputs = {"--model": args.model}
    claim_training_output(args, "pretrain", {}, PRETRAIN_OUTPUTS, check_inputs, dry_run=True)
    parts = build_objective(args)
    claim = claim_training_output(args, "pretrain", mlm_identity(args, parts), PRETRAIN_OUTPUTS, check_inputs)
    eval_ds, collate = parts["eval_dataset"], parts["collate"]
    trainer: Trainer | None = None

    def evaluate(model: Any) -> dict[str, float]:
        if len(eval_ds) == 0:
            return {}
        return parts["evaluate"](model, eval_ds, collate, device=trainer.device, amp_dtype=trainer.amp_dtype)

    trainer = Trainer(
        parts["model"],
        dataclasses.replace(with_step_length(args), run_name="pretrain"),
        parts["train_dataset"],
        collate_fn=collate,
        evaluate=evaluate,
        loss_fn=parts["loss_fn"],
        tokenizer=parts["tokenizer"],
    )
    if trainer.is_main:
        n_params = sum(p.numel() for p in parts["model"].parameters())
        print(
            f"pretrain: {len(parts['train_dataset']):,} training / {len(eval_ds):,} held-out instances "
            f"from {parts['data_dir']}; {n_params:,} parameters; precision {trainer.precision}; "
            f"{trainer.world_size} process(es)",
            file=sys.stderr,
        )
        if not len(eval_ds) and args.eval_every:
            print(
                "pretrain: warning: no document could be held out (a corpus of one document, or every "
                f"document over twice the {A.flag('eval_fraction')} budget), so {A.flag('eval_every')} has nothing "
                "to measure; "
                f"split the corpus into documents (blank lines) or raise {A.flag('eval_fraction')}",
                file=sys.stderr,
            )
    result = within_claim(claim, trainer.train)
    if trainer.is_main:
        summary = {"step": result.step, **{f"eval_{k}": v for k, v in result.last_metrics.items()}}
        print(json.dumps(summary))
    return result
