"""The optimizer, its learning-rate schedule and the training precision.

AdamW (fused/foreach when available) without weight decay on biases and norm weights, optionally with
layer-wise learning-rate decay; linear warmup then linear decay to 0; ``auto`` precision picks bf16 only
where it is fast.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Callable

import torch
from torch import nn

from bertkit._cpu import has_fast_bf16
from bertkit.training.training_args import TrainingArguments

# encoder.layer.N (BERT, ELECTRA), transformer.layer.N (DistilBERT), transformer.h.N (GPT-2)
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layer|h|layers)\.(\d+)\.")


def layer_depths(names: list[str]) -> dict[str, int]:
    """Each parameter's depth for layer-wise learning-rate decay: 0 for the embeddings (and ELECTRA's
    projection of them), N + 1 for the transformer layer N, and one above the top layer for the rest
    (pooler, heads, a final LayerNorm)."""
    found = [_LAYER_INDEX.search(n) for n in names]
    top = max((int(m.group(1)) for m in found if m), default=-1) + 2
    depths = {}
    for name, m in zip(names, found):
        parts = name.split(".")
        if m:
            depths[name] = int(m.group(1)) + 1
        elif any(p.startswith("embeddings") or p in ("wte", "wpe") for p in parts):
            depths[name] = 0
        else:
            depths[name] = top
    return depths


def _param_groups(
    model: nn.Module, weight_decay: float, layer_lr_decay: float = 1.0, rates: dict[int, float] | None = None
) -> list[dict[str, Any]]:
    """No weight decay on biases and LayerNorm (and other norm) weights, as in BERT. With
    ``layer_lr_decay`` < 1, each group also carries ``lr_scale = layer_lr_decay ** (top - depth)``
    (:func:`layer_depths`): the heads learn at the full rate, each layer below at a fraction of the one
    above, the embeddings least (ELECTRA's fine-tuning uses 0.8). ``rates`` (a parameter's id -> its
    own learning rate) puts those parameters in groups of their own, with an ``lr``, after the others."""
    rates = rates or {}
    norm_params = set()
    for module in model.modules():
        if isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.RMSNorm)):
            norm_params.update(id(p) for p in module.parameters(recurse=False))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    depths = layer_depths([n for n, _ in named]) if layer_lr_decay != 1.0 else {n: 0 for n, _ in named}
    top = max(depths.values(), default=0)
    # one group per (depth, no decay); without the decay, the two groups BERT has, even when empty
    groups: dict[tuple[int, bool], list[nn.Parameter]] = (
        {} if layer_lr_decay != 1.0 else {(0, False): [], (0, True): []}
    )
    own: dict[tuple[float, bool], list[nn.Parameter]] = {}
    for name, p in named:
        no_decay = name.endswith("bias") or id(p) in norm_params or "LayerNorm" in name or p.ndim < 2
        if id(p) in rates:
            own.setdefault((rates[id(p)], no_decay), []).append(p)
        else:
            groups.setdefault((depths[name], no_decay), []).append(p)
    out = []
    for depth, no_decay in sorted(groups, key=lambda k: (k[1], -k[0])):  # the first group runs at the peak rate
        group: dict[str, Any] = {"params": groups[depth, no_decay], "weight_decay": 0.0 if no_decay else weight_decay}
        if layer_lr_decay != 1.0:
            group["lr_scale"] = layer_lr_decay ** (top - depth)
        out.append(group)
    for (lr, no_decay), params in own.items():
        out.append({"params": params, "weight_decay": 0.0 if no_decay else weight_decay, "lr": lr})
    return out


def _adamw(model: nn.Module, config: TrainingArguments) -> torch.optim.Optimizer:
    kwargs: dict[str, Any] = dict(lr=config.lr, betas=config.adam_betas, eps=config.adam_eps)
    # a model may give some parameters rates of their own (sentence-transformers' learning_rate_mapping)
    rates = getattr(model, "parameter_learning_rates", None)
    groups = _param_groups(model, config.weight_decay, config.layer_lr_decay, rates() if callable(rates) else None)
    for g in groups:  # LambdaLR scales each group's own initial rate
        g.setdefault("lr", config.lr * g.pop("lr_scale", 1.0))
    try:  # one fused kernel over all parameters (CUDA and, in recent torch, CPU)
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kwargs)


def _linear_schedule(warmup: int, total: int, from_zero: bool = False) -> Callable[[int], float]:
    """Warmup to 1 over ``warmup`` steps (the first step at 1/warmup, or at 0 ``from_zero`` as in
    transformers' schedule), then a linear decay to 0 at ``total``."""
    start = 0 if from_zero else 1

    def f(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + start) / warmup
        if total <= warmup:
            return 1.0
        return max(0.0, (total - step) / max(1, total - warmup))

    return f


_EMULATED_BF16_WARNED: list[bool] = []


def resolve_precision(precision: str, device: torch.device) -> str:
    """The precision a run trains in: ``auto`` is bf16 autocast on a CUDA GPU that supports it (else fp16
    with a GradScaler), on another accelerator, and on a CPU that multiplies bf16 natively (AMX or AVX-512
    BF16); fp32 on other CPUs.

    Elsewhere bf16 products are emulated: a step of the tiny preset at batch 64 x 32 took 62 s under bf16
    autocast against 1.3 s in fp32 with oneDNN held to AVX2.
    """
    prec = precision
    if prec == "auto":
        if device.type == "cuda":
            prec = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        elif device.type == "cpu":
            prec = "bf16" if has_fast_bf16() else "fp32"
        else:  # another accelerator (mps): its own bf16, whatever the host CPU's flags
            prec = "bf16"
    if prec == "fp16" and device.type != "cuda":
        warnings.warn("fp16 autocast needs CUDA; using bf16 on CPU", stacklevel=3)
        prec = "bf16"
    if prec == "bf16" and device.type == "cpu" and not has_fast_bf16() and not _EMULATED_BF16_WARNED:
        _EMULATED_BF16_WARNED.append(True)  # once a process: a recipe resolves it per phase and per timing
        warnings.warn(
            "precision bf16: this CPU has neither AMX nor AVX-512 BF16, so its bf16 products are emulated and "
            "training runs many times slower than in fp32 (precision auto picks fp32 here)",
            stacklevel=3,
        )
    return prec
