"""Inference precision (fp32 / bf16 / int8) and per-call overhead cuts for a loaded model.

``prepare_for_inference(model, dtype)`` is the one place a model is made ready to serve:

- ``"auto"`` picks bf16 where the CPU multiplies bf16 natively (AMX or AVX-512 BF16), else fp32; on a
  GPU, bf16 where the GPU supports it. int8 is a CPU path: asked for on a GPU, it is refused by name;
- ``"bf16"`` casts every parameter to bfloat16 (outputs are cast back to float32 by the callers); on a
  CPU without AMX or AVX-512 BF16 it warns, since its bf16 products are emulated there (MiniLM on 32
  sentences, one thread, oneDNN held to AVX2: 768 ms against fp32's 155 ms);
- ``"int8"`` runs the encoder's Linear layers as int8 products with one scale per token and per
  output channel, smoothed (:mod:`bertkit.inference.int8`); heads and the pooler stay in bf16 or
  fp32, embeddings and LayerNorm keep float32;
- every BERT self-attention gets its query/key/value weights concatenated once, so inference runs one
  GEMM without re-building the (3H, H) matrix on every call (training ignores the cache);
- every float Linear on the CPU (GPT-2's transposed ``Conv1D`` included) runs oneDNN's linear on a
  weight reordered once into its blocked layout (:func:`prepack_linears`): measured 2.4x faster than
  the default fp32 GEMM and up to 1.3x for bf16 on MiniLM's shapes, and with AMX it is oneDNN that
  drives the tiles;
- a feed-forward up-projection followed by an erf or tanh GELU (the parent names the pair in
  ``fused_act_names``) computes bias and GELU as oneDNN's post-op of the same call, so the (B, N, I)
  activation is written once instead of read back for a separate GELU.

A prepared model moved or cast afterwards (``.to("cuda")``, ``.to(torch.bfloat16)``) rebuilds its
fused projections where its weights now are and keeps packed weights only on the CPU
(:func:`follow_move`); an int8 model refuses to move off the CPU before any weight moves.
"""

from __future__ import annotations

import logging
import time
import warnings
import weakref
from typing import Any

import torch
from torch import nn

from bertkit._cpu import cpu_flags, has_fast_bf16
from bertkit._memory import keep_freed_buffers

from .fused import PassthroughAct, _fuse_qkv, _PackedLinear, prepack_linears

__all__ = [
    "DTYPES",
    "TrainedCopy",
    "inference_dtype",
    "prepack_linears",
    "prepare_for_inference",
    "resolve_dtype",
    "try_compile",
]

logger = logging.getLogger(__name__)

DTYPES = ("auto", "fp32", "bf16", "int8")
_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "qint8": "int8"}


def resolve_dtype(
    dtype: str | torch.dtype | None = "auto",
    flags: dict[str, bool] | None = None,
    device: str | torch.device | None = None,
) -> str:
    """Map ``auto|fp32|bf16|int8`` (or a torch dtype) to the concrete choice for ``device`` (the CPU
    when None): on the CPU, ``auto`` is bf16 where it multiplies bf16 natively; on a GPU, bf16 where
    the GPU supports it. int8 runs on the CPU only (its products are CPU kernels)."""
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
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type != "cpu":
        if name == "int8":
            raise ValueError(
                f"dtype 'int8' runs on the CPU only (bertkit's int8 products are CPU kernels); on {dev} "
                "choose bf16, fp32 or auto"
            )
        if name == "auto":
            cuda_bf16 = dev.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            return "bf16" if cuda_bf16 else "fp32"
        return name
    if name == "auto":
        return "bf16" if has_fast_bf16(cpu_flags() if flags is None else flags) else "fp32"
    return name


def inference_dtype(model: nn.Module) -> str:
    """The precision ``prepare_for_inference`` gave ``model`` (``fp32`` for an untouched model)."""
    return getattr(model, "_bertkit_inference_dtype", "fp32")


def prepare_for_inference(model: nn.Module, dtype: str | torch.dtype | None = "auto") -> nn.Module:
    """Put ``model`` in eval mode at the requested precision (see the module docstring); returns it.

    The fused attention weights are a snapshot: call this after the weights are final.
    """
    param = next(model.parameters(), None)
    device = torch.device("cpu") if param is None else param.device
    choice = resolve_dtype(dtype, device=device)
    if choice == "bf16" and device.type == "cpu" and not has_fast_bf16():
        warnings.warn(
            "dtype bf16: this CPU has neither AMX nor AVX-512 BF16, so its bf16 products are emulated and "
            "inference runs slower than in fp32 (dtype auto picks fp32 here)",
            stacklevel=2,
        )
    if device.type == "cpu":
        keep_freed_buffers()  # every batch frees buffers the next one allocates again: keep them (bertkit._memory)
    model.__dict__.pop("_bertkit_inference_dtype", None)  # the casts below are this preparation's own
    model.eval()
    model.requires_grad_(False)
    if choice == "bf16":
        model.to(torch.bfloat16)
    elif choice == "fp32":
        model.to(torch.float32)
    _fuse_qkv(model)
    if choice == "int8":
        from .int8 import quantize_int8

        model.to(torch.float32)
        quantize_int8(model)
    prepack_linears(model)
    object.__setattr__(model, "_bertkit_inference_dtype", choice)
    return model


def _unpack(model: nn.Module) -> None:
    """Drop what :func:`prepack_linears` set: every module runs its own forward again."""
    for m in model.modules():
        if isinstance(m.__dict__.get("forward"), (_PackedLinear, PassthroughAct)):
            del m.__dict__["forward"]
        m.__dict__.pop("_inference_gelu", None)


def _stale(model: nn.Module) -> bool:
    """Whether a weight derived at preparation no longer sits where (device, dtype) its source does."""
    for m in model.modules():
        fused = m.__dict__.get("_inference_qkv")
        if isinstance(fused, nn.Linear):
            source = getattr(m, type(m).qkv_names[0]).weight
            if (fused.weight.device, fused.weight.dtype) != (source.device, source.dtype):
                return True
        packed = m.__dict__.get("forward")
        if isinstance(packed, _PackedLinear):
            w = packed.linear.weight
            if w.device.type != "cpu" or packed.packed.dtype != w.dtype:
                return True
    return False


def check_move(model: nn.Module, target: torch.Tensor) -> None:
    """Refuse to move an int8-prepared ``model`` off the CPU or to another float type (``target`` is
    an empty float32 CPU tensor after the move's conversion), before any weight moves."""
    if inference_dtype(model) == "int8" and (target.device.type != "cpu" or target.dtype != torch.float32):
        where = target.device if target.device.type != "cpu" else target.dtype
        raise ValueError(
            f"this model was prepared for int8 inference, which runs on the CPU only, and cannot move to "
            f"{where}; load it again at dtype bf16 or fp32 (from_pretrained(folder, dtype='bf16'), then .to())"
        )


def follow_move(model: nn.Module) -> None:
    """After ``model.to()`` / ``.cuda()`` / ``.half()``: rebuild the fused projections where the weights
    now are, and keep oneDNN's packed weights only on the CPU. A float16 model is no longer prepared
    (no inference precision names it); fp32 and bf16 keep their name."""
    if inference_dtype(model) == "int8" or not _stale(model):
        return
    param = next(model.parameters())
    _unpack(model)
    for m in model.modules():
        m.__dict__.pop("_inference_qkv", None)
    if param.dtype not in (torch.float32, torch.bfloat16):
        model.__dict__.pop("_bertkit_inference_dtype", None)
        return
    _fuse_qkv(model)
    prepack_linears(model)
    object.__setattr__(model, "_bertkit_inference_dtype", "bf16" if param.dtype == torch.bfloat16 else "fp32")


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


class TrainedCopy:
    """A trainable fp32 copy of a prepared inference model (whose fused, frozen weights cannot train),
    and the one way its weights reach the inference model again: :meth:`sync` copies them over and
    prepares again, only when they changed since the last call."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._synced = self._version()
        # A fused optimizer kernel updates the weights without bumping their versions, so every
        # optimizer step over this copy's weights is also noted, by a hook that holds no reference
        # to the copy (it is removed when the copy goes).
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._stepped = False
        ids = {id(p) for p in model.parameters()}
        ref = weakref.ref(self)

        def stepped(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            copy = ref()
            if copy is not None and not copy._stepped:
                copy._stepped = any(id(p) in ids for g in optimizer.param_groups for p in g["params"])

        handle = register_optimizer_step_post_hook(stepped)
        weakref.finalize(self, handle.remove)

    def _version(self) -> int:
        # every unfused in-place update (an optimizer step, load_state_dict) bumps a tensor's version
        return sum(p._version for p in self.model.parameters())

    def sync(self, inference_model: nn.Module) -> None:
        """Give ``inference_model`` (prepared in fp32) this copy's weights, if they changed."""
        if self._synced == self._version() and not self._stepped:
            return
        # preparing builds modules whose init draws from the global RNG; a sync (at every checkpoint
        # and evaluation of a fit) must leave training's dropout stream alone, or a resumed run differs
        with torch.random.fork_rng():
            inference_model.load_state_dict(self.model.state_dict())
            prepare_for_inference(inference_model, "fp32")  # the fused and packed weights are snapshots: redo them
        self._synced, self._stepped = self._version(), False
