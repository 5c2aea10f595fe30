"""Pretraining recipes: whole schedules chosen from a time budget, run as one resumable job.

``cpu-hour`` (`bertkit pretrain --recipe cpu-hour --max-minutes 60`) is the two-phase schedule
that gets a small BERT off the "unigram plateau" on a CPU:

1. The objective on 32-token sequences, batch 64, lr 1e-3. A post-LN BERT trained from scratch first
   predicts frequent tokens whatever the context, and only leaves that plateau once its attention
   has learned to find neighbouring positions; under the initial uniform attention a neighbour
   gets 1/N of the weight, so short sequences leave the plateau within minutes where 128-token
   ones did not within an hour.
2. The objective on 128-token sequences, batch 32, lr 5e-4, as BERT's own second phase, so that
   positions 32-127 are trained too.

The objective is ``--objective`` when it names ``mlm`` or ``electra``, otherwise the recipe's own,
:data:`RECIPE_OBJECTIVE` (the one the measured runs of ``docs/pretraining.md`` chose), and a masked-LM
objective masks :data:`RECIPE_MASK_RATE` (30%) of the tokens unless ``--mask-rate`` gives a rate. With
``mlm+nsp`` phase 1 is MLM alone on single segments and phase 2 adds NSP, as before NSP was dropped.

Phase 1 gets 60% of the budget and phase 2 the rest (phase 2 climbs fast from phase 1's weights:
32% held-out MLM accuracy after 8.6 minutes in the measured run). With ``--recipe-schedule phases``
(the default) each phase's learning rate warms up and decays linearly to 0 over the phase's
training minutes (the Trainer's ``schedule="time"``), so a phase ends on time with a decayed
learning rate however fast the machine runs, and a machine that slows down under load still
finishes its schedule. ``--recipe-schedule single`` runs one decay instead, from phase 1's peak to
0 at the end of the whole budget: phase 2 continues it from where phase 1 stopped, after a short
warmup of its fresh optimizer (the two phases train different heads, so there is no one optimizer
state to carry over). The throughput measured before training (a few
steps of each phase's shape) only sizes the warmup, the evaluation and checkpoint intervals and a
step cap far above what the budget allows.

Layout of ``OUTPUT``: ``recipe.json`` (the schedule, fixed at the first start, and which phases are
done), ``phase1/`` and ``phase2/`` (each phase's `bertkit pretrain` folder: checkpoints, metrics,
plots) and, once the last phase is done, the final model itself, so that ``OUTPUT`` loads as a
model. A killed run continues with ``--resume`` in the phase where it stopped, from that phase's
newest checkpoint; ``--overwrite`` starts it again (removing only what the recipe wrote).

Under ``torchrun --nproc_per_node N -m bertkit pretrain --recipe cpu-hour ...`` rank 0 claims
OUTPUT and plans, and all N processes train every phase in one process group (DDP). Each process
trains the phase's batch, so the global batch is N times the phase's; on a CPU, N processes of one
thread each can see more tokens per minute than one process of N threads.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import _args as A
from bertkit._folders import claim_output_dir
from bertkit._io import atomic_write_bytes, atomic_write_json
from bertkit.training.mlm import MASK_RATE, RECIPES
from bertkit.training.pretrain_run import PRETRAIN_OUTPUTS, train_mlm

__all__ = [
    "RECIPES",
    "RECIPE_MASK_RATE",
    "RECIPE_OBJECTIVE",
    "Phase",
    "cpu_hour_phases",
    "recipe_mask_rate",
    "run_recipe",
]

# The objective --recipe cpu-hour trains when --objective is left at the plain command's default.
RECIPE_OBJECTIVE = "mlm"
# The masked-LM rate it trains with when --mask-rate is not given (the plain command masks 15%): over 60
# minutes, 30% matched or beat 15% on both downstream tasks of docs/pretraining.md (BBC News +3.2
# points at the same fine-tuning settings; polarity within noise). ELECTRA's generator keeps 15%.
RECIPE_MASK_RATE = 0.3

# The settings each phase fixes; giving one of them with --recipe is an error (they would be ignored).
_RECIPE_FIELDS = (
    "seq_len",
    "batch_size",
    "lr",
    "warmup_steps",
    "warmup_ratio",
    "max_steps",
    "no_nsp",
    "eval_every",
    "save_every",
    "model",
    "schedule",
)


@dataclass
class Phase:
    """One phase of a recipe: the :class:`~bertkit.training.mlm.PretrainingArguments` fields it sets."""

    name: str
    minutes: float
    seq_len: int
    batch_size: int
    lr: float
    warmup_steps: int
    nsp: bool
    objective: str = "mlm+nsp"
    max_steps: int = 0  # the steps the budget allows at the throughput measured before training
    eval_every: int = 0
    save_every: int = 0


def cpu_hour_phases(minutes: float, objective: str = RECIPE_OBJECTIVE, schedule: str = "phases") -> list[Phase]:
    """The cpu-hour schedule of ``objective`` for a budget of ``minutes`` of training (step counts
    not yet set). Under ``schedule="single"`` phase 2's ``lr`` is the one decay's peak, phase 1's."""
    if minutes <= 0:
        raise ValueError(f"the time budget must be positive, got {minutes} minutes")
    first = 0.6 * minutes
    nsp = objective == "mlm+nsp"
    # Masked-LM phase 1 runs on single segments (whole sentences, BERT's instances without NSP):
    # on contiguous 32-token windows two runs were still on the plateau after 18 minutes, where
    # single segments leave it within 7.
    early = "mlm+nsp" if objective in ("mlm", "mlm+nsp") else objective
    peak = 1e-3
    return [
        Phase("phase1", first, seq_len=32, batch_size=64, lr=peak, warmup_steps=300, nsp=False, objective=early),
        Phase(
            "phase2",
            minutes - first,
            128,
            32,
            lr=peak if schedule == "single" else 5e-4,
            warmup_steps=100,
            nsp=nsp,
            objective=objective,
        ),
    ]


def recipe_objective(args: Any) -> str:
    """The objective a recipe trains: ``--objective`` when it is not the plain command's default."""
    return args.objective if args.objective != "mlm+nsp" else RECIPE_OBJECTIVE


def recipe_mask_rate(args: Any) -> float:
    """The mask rate a recipe trains with: ``--mask-rate`` when given, else :data:`RECIPE_MASK_RATE`
    for the masked-LM objectives and the plain command's default for ELECTRA's generator."""
    if args.mask_prob is not None:
        return float(args.mask_prob)
    return MASK_RATE if recipe_objective(args) == "electra" else RECIPE_MASK_RATE


def _steps_per_minute(
    parts: dict[str, Any], batch_size: int, precision: str, n_steps: int = 4, max_seconds: float = 20.0
) -> float:  # parts: build_objective's
    """Optimizer steps per minute of this phase's shape, timed on a throwaway copy of the model
    (the fastest of ``n_steps`` steps, fewer but at least two when they take over ``max_seconds``)."""
    import torch

    from bertkit.training.trainer import resolve_precision

    model = copy.deepcopy(parts["model"]).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ds, collate = parts["train_dataset"], parts["collate"]
    # timed in the precision the phase will train in (auto: bf16 only where the CPU multiplies it natively)
    bf16 = resolve_precision(precision, torch.device("cpu")) == "bf16"
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else None
    times = []
    for k in range(n_steps + 1):  # the first step warms up kernels and allocations
        idx = [(k * batch_size + i) % len(ds) for i in range(batch_size)]
        t0 = time.perf_counter()
        batch = collate([ds[i] for i in idx])
        with amp if amp is not None else torch.autocast("cpu", enabled=False):
            loss, _ = parts["loss_fn"](model, batch)
        loss.float().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if k:
            times.append(time.perf_counter() - t0)
            if len(times) >= 2 and sum(times) > max_seconds:
                break
    return rate_from_step_times(times)


def rate_from_step_times(times: list[float]) -> float:
    """Steps per minute from timed steps: the fastest one. Another process on the CPU only ever slows
    a step, and on a 2-core machine a busy neighbour made the median of four steps 10x slow; the rate
    sizes a step cap and the evaluation, checkpoint and warmup intervals, which must not shrink
    tenfold because of a moment's load."""
    if not times:
        raise ValueError("no timed steps to take a rate from")
    return 60.0 / min(times)


def _objective_name(ph: Phase) -> str:
    return ("MLM + NSP" if ph.nsp else "MLM") if ph.objective in ("mlm", "mlm+nsp") else ph.objective.upper()


def _phase_args(
    args: Any, phase: Phase, output: Path, model: str | None, minutes: float, span: tuple[float, float] | None = None
) -> Any:
    """The arguments of one phase's `bertkit pretrain`; ``span``: (minutes of the one schedule
    already spent, its whole length) under a single schedule."""
    fields = {
        "seq_len": phase.seq_len,
        "batch_size": phase.batch_size,
        "lr": phase.lr,
        "warmup_steps": min(phase.warmup_steps, max(1, phase.max_steps // 10)),
        "warmup_ratio": 0.0,
        # The time budget ends the phase; the step cap only guards against a badly wrong estimate.
        "max_steps": 10 * phase.max_steps,
        "max_minutes": minutes,
        "schedule": "time",
        "schedule_offset_minutes": span[0] if span else 0.0,
        "schedule_minutes": span[1] if span else None,
        "recipe_schedule": "phases",
        "no_nsp": not phase.nsp,
        "objective": phase.objective,
        "eval_every": phase.eval_every,
        "save_every": phase.save_every,
        "output": str(output),
        "resume": True,
        "overwrite": False,
        "recipe": None,
        "model": model,
        "vocab": None if model else args.vocab,
        "dropout": 0.0 if args.dropout is None else args.dropout,
    }
    return dataclasses.replace(args, **fields)


def _plan(args: Any) -> dict[str, Any]:
    """Choose the phases' step counts from the measured throughput (the first start only)."""
    from bertkit.training.objectives import build_objective

    phases = cpu_hour_phases(args.max_minutes, recipe_objective(args), args.recipe_schedule)
    if args.recipe_schedule == "single":
        print(
            f"recipe cpu-hour: one learning-rate schedule: warmup, then a linear decay from "
            f"{phases[0].lr:g} to 0 at {args.max_minutes:g} training minutes across both phases",
            file=sys.stderr,
        )
    for ph in phases:
        parts = build_objective(
            dataclasses.replace(args, seq_len=ph.seq_len, no_nsp=not ph.nsp, objective=ph.objective, model=None)
        )
        rate = _steps_per_minute(parts, ph.batch_size, args.precision)
        ph.max_steps = max(10, int(rate * ph.minutes))
        ph.eval_every = max(1, ph.max_steps // 12)
        ph.save_every = max(1, int(rate * min(5.0, ph.minutes / 4)))  # a kill loses at most ~5 minutes
        print(
            f"recipe cpu-hour: {ph.name}: seq {ph.seq_len}, batch {ph.batch_size}, lr {ph.lr:g}, "
            f"{_objective_name(ph)} (mask rate {args.mask_prob:g}), {ph.minutes:.1f} min at {rate:.0f} "
            f"steps/min measured -> about {ph.max_steps} steps",
            file=sys.stderr,
        )
    return {
        "recipe": "cpu-hour",
        "max_minutes": args.max_minutes,
        "mask_prob": args.mask_prob,
        "schedule": args.recipe_schedule,
        "phases": [dataclasses.asdict(p) for p in phases],
        "done": {},
    }


def run_recipe(args: Any) -> Any:
    """Run ``args.recipe`` into ``args.output`` (see module docs); returns the last phase's TrainResult.

    Under torchrun rank 0 claims the folder and plans the phases, and every rank trains them.
    """
    import torch

    if args.recipe not in RECIPES:
        raise ValueError(f"unknown recipe {args.recipe!r}; known: {', '.join(RECIPES)}")
    defaults = {f.name: f.default for f in dataclasses.fields(args)}
    given = [A.flag(f) for f in _RECIPE_FIELDS if getattr(args, f) != defaults[f]]
    if given:
        raise ValueError(f"{A.given('recipe', str(args.recipe))} chooses {', '.join(given)} itself; leave them out")
    if args.max_minutes is None:
        args = dataclasses.replace(args, max_minutes=60.0)
    args = dataclasses.replace(args, mask_prob=recipe_mask_rate(args))
    if args.threads:
        torch.set_num_threads(args.threads)
    from bertkit.training.trainer import end_process_group, start_process_group, training_device

    rank = int(os.environ.get("RANK", "0"))
    claim, state = _claim_and_plan(args) if rank == 0 else (None, None)
    # The plan is measured before the process group starts, as rank 0's plain steps: a loss that
    # reduces across ranks would wait for the others. They wait in the group's start meanwhile, and
    # torchrun stops them if rank 0 fails. The phases' Trainers then share the group.
    started_group = start_process_group(training_device(args))
    try:
        return _run_phases(args, rank, claim, _from_rank0(state))
    finally:
        if started_group:
            end_process_group()


def _from_rank0(value: Any) -> Any:
    """``value`` as rank 0 has it (the value itself outside torchrun)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _run_phases(args: Any, rank: int, claim: Any, state: dict[str, Any]) -> Any:
    """Train the phases ``state`` plans and not yet done; rank 0 records them and publishes OUTPUT."""
    out = Path(args.output)
    phases = [Phase(**p) for p in state["phases"]]
    model_dir: str | None = None
    result = None
    used = 0.0  # training minutes of the finished phases
    for i, ph in enumerate(phases):
        folder = out / ph.name
        if ph.name in state["done"]:
            used += float(state["done"][ph.name])
            model_dir = str(folder)
            continue
        # The last phase gets whatever the earlier ones left of the budget.
        minutes = ph.minutes if i < len(phases) - 1 else max(0.1, float(state["max_minutes"]) - used)
        if rank == 0:
            print(
                f"recipe {args.recipe}: {ph.name} ({minutes:.1f} training minutes, about {ph.max_steps} steps)",
                file=sys.stderr,
            )
        # One schedule: each phase is the part of it that starts where the earlier phases stopped
        # (stretched to this phase's end should the earlier ones have overrun the whole budget).
        span = (used, max(float(state["max_minutes"]), used + minutes)) if state.get("schedule") == "single" else None
        result = train_mlm(_phase_args(args, ph, folder, model_dir, minutes, span))
        # Every rank reads the same value: rank 0 wrote the metrics before the Trainer's last barrier.
        spent = _train_minutes(folder)
        state["done"][ph.name] = spent
        if rank == 0:
            atomic_write_json(out / "recipe.json", state)
        used += spent
        model_dir = str(folder)
    if rank != 0:
        return result
    # OUTPUT itself becomes the final model: the last phase's model files (and an ELECTRA run's
    # generator folder), each written atomically.
    for name in PRETRAIN_OUTPUTS:
        src = Path(model_dir) / name  # type: ignore[arg-type]
        if src.is_file() and not name.startswith("metrics"):
            atomic_write_bytes(out / name, src.read_bytes())
        elif src.is_dir():
            for f in sorted(src.iterdir()):
                if f.is_file():
                    atomic_write_bytes(out / name / f.name, f.read_bytes())
    claim.finish()  # type: ignore[union-attr]
    return result


def _claim_and_plan(args: Any) -> tuple[Any, dict[str, Any]]:
    """Claim OUTPUT for the recipe; the plan of a resumed run, or a new one (written at once)."""
    out = Path(args.output)
    state_file = out / "recipe.json"
    run = {
        "recipe": args.recipe,
        "max_minutes": args.max_minutes,
        "vocab": str(args.vocab),
        "config": args.config,
        "whole_word_masking": bool(args.whole_word_masking),
        "seed": args.seed,
        "objective": recipe_objective(args),
        "mask_prob": args.mask_prob,
    }
    if args.recipe_schedule != "phases":  # runs of the default schedule keep the identity they had
        run["recipe_schedule"] = args.recipe_schedule
    claim = claim_output_dir(
        out,
        "pretrain",
        overwrite=getattr(args, "overwrite", False),
        resume=args.resume,
        run=run,
        owned=("recipe.json", "phase*", *PRETRAIN_OUTPUTS),
        can_resume=True,
        resume_needs=("recipe.json",),
    )
    if claim.resumed and state_file.is_file():
        return claim, json.loads(state_file.read_text(encoding="utf-8"))
    try:
        state = _plan(args)
    except BaseException:
        claim.abandon()  # no empty output folder left behind
        raise
    atomic_write_json(state_file, state)
    return claim, state


def _train_minutes(folder: Path) -> float:
    """Training minutes a Trainer folder's metrics.jsonl records (its last train_seconds)."""
    last = 0.0
    path = folder / "metrics.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                last = max(last, float(json.loads(line).get("train_seconds", 0.0)))
    return last / 60.0
