"""Inference precision (fp32 / bf16 / int8) and per-call overhead cuts for a loaded model.

``prepare_for_inference(model, dtype)`` is the one place a model is made ready to serve:

- ``"auto"`` picks bf16 where the CPU multiplies bf16 natively (AMX or AVX-512 BF16), else fp32;
- ``"bf16"`` casts every parameter to bfloat16 (outputs are cast back to float32 by the callers);
- ``"int8"`` applies dynamic quantization to the Linear layers only (int8 weights with one scale per
  output row): embeddings and LayerNorm keep float32, activations are quantized per batch at run time;
- every BERT self-attention gets its query/key/value weights concatenated once, so inference runs one
  GEMM without re-building the (3H, H) matrix on every call (training ignores the cache).
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import torch
from torch import nn

from .cpu import cpu_flags, has_fast_bf16

__all__ = ["DTYPES", "inference_dtype", "prepare_for_inference", "resolve_dtype", "try_compile"]

logger = logging.getLogger(__name__)

DTYPES = ("auto", "fp32", "bf16", "int8")
_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "qint8": "int8"}


def resolve_dtype(dtype: str | torch.dtype | None = "auto", flags: dict[str, bool] | None = None) -> str:
    """Map ``auto|fp32|bf16|int8`` (or a torch dtype) to the concrete choice for this CPU."""
    if dtype is None:
        return "fp32"
    if isinstance(dtype, torch.dtype):
        if dtype == torch.float32:
            return "fp32"
        if dtype == torch.bfloat16:
            return "bf16"
        raise ValueError(f"dtype {dtype} is not an inference precision; choose one of {', '.join(DTYPES)}")
    name = _ALIASES.get(str(dtype).lower(), str(dtype).lower())
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if name == "auto":
        return "bf16" if has_fast_bf16(cpu_flags() if flags is None else flags) else "fp32"
    return name


def inference_dtype(model: nn.Module) -> str:
    """The precision ``prepare_for_inference`` gave ``model`` (``fp32`` for an untouched model)."""
    return getattr(model, "_bertkit_inference_dtype", "fp32")


def _quantize(module: nn.Module) -> nn.Module:
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch marks eager quantization deprecated; it is still its CPU int8 path
        warnings.simplefilter("ignore")
        # one scale per output row: per-tensor scales lose too much on rows with small weights
        return quantize_dynamic(module, {nn.Linear: per_channel_dynamic_qconfig}, inplace=True)


def _fuse_qkv(model: nn.Module, quantize: bool) -> None:
    from bertkit.modeling.model import BertSelfAttention

    for m in model.modules():
        if not isinstance(m, BertSelfAttention) or not isinstance(m.query, nn.Linear):
            continue
        q, k, v = m.query, m.key, m.value
        fused = nn.Linear(q.in_features, 3 * q.out_features, device=q.weight.device, dtype=q.weight.dtype)
        with torch.no_grad():
            fused.weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
            fused.bias.copy_(torch.cat([q.bias, k.bias, v.bias]))
        fused.requires_grad_(False)
        if quantize:
            fused = _quantize(nn.Sequential(fused))[0]
        # Not registered as a submodule: state_dict() keys and checkpoints stay unchanged.
        object.__setattr__(m, "_inference_qkv", fused)


def prepare_for_inference(model: nn.Module, dtype: str | torch.dtype | None = "auto") -> nn.Module:
    """Put ``model`` in eval mode at the requested precision (see the module docstring); returns it.

    The fused attention weights are a snapshot: call this after the weights are final.
    """
    choice = resolve_dtype(dtype)
    model.eval()
    model.requires_grad_(False)
    if choice == "bf16":
        model.to(torch.bfloat16)
    elif choice == "fp32":
        model.to(torch.float32)
    _fuse_qkv(model, quantize=choice == "int8")
    if choice == "int8":
        model.to(torch.float32)
        _quantize(model)
    object.__setattr__(model, "_bertkit_inference_dtype", choice)
    return model


def try_compile(model: nn.Module, example: dict[str, torch.Tensor] | None = None) -> tuple[Any, float | None]:
    """``torch.compile(model)`` with a one-time warm-up on ``example``; returns (callable, warm-up seconds).

    Falls back to the eager model (and ``None``) when no compiler works here, so callers never fail.
    """
    try:
        compiled = torch.compile(model, dynamic=True)
        t0 = time.perf_counter()
        if example is not None:
            with torch.inference_mode():
                compiled(**example)
        return compiled, time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - no C++ compiler, an unsupported op...: eager is always correct
        logger.warning("torch.compile unavailable (%s: %s); running eagerly", type(e).__name__, e)
        return model, None
