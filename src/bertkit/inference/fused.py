"""The fused and reordered forwards a prepared model runs: one (3H, H) attention projection, every
Linear on a weight reordered once for oneDNN, and a feed-forward projection with its GELU in one call.

Each replaced forward is an object (:class:`BoundForward`) set on the module instance, so parameters,
``state_dict()`` keys and training are untouched. :mod:`bertkit.inference.precision` and
:mod:`bertkit.inference.int8` both build on these.
"""

from __future__ import annotations

import copy
import threading
import weakref
from typing import Any

import torch
from torch import nn

from bertkit.modeling.gpt2 import Conv1D
from bertkit.modeling.layers import NewGELU, hooked

__all__ = ["BoundForward", "FusedOutput", "PassthroughAct", "prepack_linears"]


def _fuse_qkv(model: nn.Module) -> None:
    """Give every attention that names its projections in ``qkv_names`` one (3H, H) Linear for inference."""
    for m in model.modules():
        names = getattr(type(m), "qkv_names", None)
        if names is None or not all(isinstance(getattr(m, n, None), nn.Linear) for n in names):
            continue
        q, k, v = (getattr(m, n) for n in names)
        fused = nn.Linear(q.in_features, 3 * q.out_features, device=q.weight.device, dtype=q.weight.dtype)
        with torch.no_grad():
            fused.weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
            fused.bias.copy_(torch.cat([q.bias, k.bias, v.bias]))
        fused.requires_grad_(False)
        fused.eval()  # not a submodule, so model.eval() never reaches it; a training Linear skips the packed kernel
        # Not registered as a submodule: state_dict() keys and checkpoints stay unchanged.
        object.__setattr__(m, "_inference_qkv", fused)


def _pack(weight: torch.Tensor, bias: torch.Tensor | None, attr: str = "none", algorithm: str = "") -> Any:
    """``weight`` (out, in) reordered once into oneDNN's blocked layout, or None where this oneDNN has no
    kernel for it: one trial row fails here, at preparation (bf16 without AVX-512 or AMX, a build without
    the layout or the post-op), and the caller keeps the plain GEMM instead of failing later."""
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 64)
        with torch.no_grad():
            torch.ops.mkldnn._linear_pointwise(weight.new_zeros(1, weight.shape[1]), packed, bias, attr, [], algorithm)
    except RuntimeError:
        return None
    return packed


def _gelu_algorithm(act: nn.Module) -> str | None:
    """oneDNN's name for ``act`` when it is exactly erf GELU (``"none"``) or tanh GELU (``"tanh"``), else None."""
    if type(act) is nn.GELU:
        return act.approximate
    if type(act) is NewGELU:
        return "tanh"
    return None


class BoundForward:
    """A forward set on a module instance that refers to modules (its own, a paired activation) and
    to state made for them. An object rather than a closure so that ``copy.deepcopy`` of a prepared
    model binds the copy's forwards to the copy's own modules and slots: the copy trains, hooks and
    serves itself, not the original. Attributes named in ``_shared`` (reordered weights: snapshots of
    weights the copy starts with) are kept as they are."""

    _shared: tuple[str, ...] = ()

    def __deepcopy__(self, memo: dict[int, Any]) -> BoundForward:
        new = object.__new__(type(self))
        for name, value in vars(self).items():
            setattr(new, name, value if name in self._shared else copy.deepcopy(value, memo))
        return new


class _PackedLinear(BoundForward):
    """A projection's inference forward on its weight reordered once for oneDNN (set as the module's
    instance ``forward``). Training, autograd, or a hook run the module's own forward; with ``act``
    (the GELU its parent applies right after it) the product returns the activated output in one
    oneDNN call, marked in ``fused_out`` for the activation to pass through. A hook on either module
    runs the two apart, so it sees what it always saw. A deep copy shares the reordered weight; the
    bias, deep-copied with the model's memo, stays a view of the copied parameter.
    """

    _shared = ("packed",)

    def __init__(
        self,
        linear: nn.Module,
        packed: torch.Tensor,
        bias: torch.Tensor | None,
        act: nn.Module | None = None,
        algorithm: str = "",
        fused_out: FusedOutput | None = None,
    ) -> None:
        self.linear, self.packed, self.bias = linear, packed, bias
        self.act, self.algorithm, self.fused_out = act, algorithm, fused_out
        self.residual_post_op = True  # False once this oneDNN refused the add post-op

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        lin = self.linear
        if lin.training or torch.is_grad_enabled():  # training, or a gradient asked for: the module as it is
            return type(lin).forward(lin, x)
        if self.act is None or hooked(lin, self.act):
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        y = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "gelu", [], self.algorithm)
        return self.fused_out.mark(y)  # type: ignore[union-attr]  # set whenever act is

    def add_residual(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor | None:
        """``linear(x) + residual`` in one oneDNN call, the add a post-op of the product (summed in
        float32 and rounded once, where a separate add rounds the product first): one pass over the
        output fewer. None where the module must run as it is (training, a gradient, a hook, a fused
        activation) or ``residual`` is not the product's shape and dtype."""
        lin = self.linear
        if not self.residual_post_op or self.act is not None or lin.training or torch.is_grad_enabled():
            return None
        if (
            hooked(lin)
            or residual.dtype != self.packed.dtype
            or residual.shape != (*x.shape[:-1], self.packed.shape[0])
        ):
            return None
        try:
            return torch.ops.mkldnn._linear_pointwise.binary(x, residual, self.packed, self.bias, "add")
        except RuntimeError:  # a CPU or build without the post-op for this dtype: the separate add from now on
            self.residual_post_op = False
            return None


class FusedOutput(threading.local):
    """The output a fused projection last activated, per thread and held weakly (so nothing is kept
    alive): forwards may run in several threads at once (:func:`bertkit.inference.run_batched`), and
    one thread's activated output must never pass for another's."""

    def __init__(self) -> None:
        self.ref: weakref.ref | None = None

    def mark(self, y: torch.Tensor) -> torch.Tensor:
        """Record ``y`` as activated already; returns it."""
        self.ref = weakref.ref(y)
        return y

    def take(self, x: torch.Tensor) -> bool:
        """Whether ``x`` is exactly this thread's last activated output (then forgotten)."""
        ref, self.ref = self.ref, None
        return ref is not None and ref() is x

    def __deepcopy__(self, memo: dict[int, Any]) -> FusedOutput:
        return FusedOutput()  # one new slot, which the memo gives both forwards of the copied pair


class PassthroughAct(BoundForward):
    """An activation's instance ``forward`` once its projection applies it: the projection's own output
    (marked in ``fused_out``) passes through as it is, anything else runs the module's own forward."""

    def __init__(self, act: nn.Module, fused_out: FusedOutput) -> None:
        self.act, self.fused_out = act, fused_out

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.fused_out.take(x) else type(self.act).forward(self.act, x)


def _projections(model: nn.Module) -> list[tuple[nn.Module, torch.Tensor]]:
    """Every float32/bf16 CPU projection of ``model`` with its weight as (out, in): each ``nn.Linear``,
    the fused attention projections, and GPT-2's ``Conv1D``, whose (in, out) weight is transposed into a
    copy here, so the parameter, state_dict() and a saved checkpoint keep transformers' layout."""
    found: list[tuple[nn.Module, torch.Tensor]] = []
    for m in model.modules():
        qkv = getattr(m, "_inference_qkv", None)
        for lin in (m, qkv) if isinstance(qkv, nn.Linear) else (m,):
            if isinstance(lin, nn.Linear):
                found.append((lin, lin.weight.detach()))
            elif isinstance(lin, Conv1D):
                found.append((lin, lin.weight.detach().t().contiguous()))
    return [(m, w) for m, w in found if w.device.type == "cpu" and w.dtype in (torch.float32, torch.bfloat16)]


def _fusable_activations(model: nn.Module) -> dict[int, tuple[nn.Module, str]]:
    """id(projection) -> (activation, oneDNN GELU algorithm) for each parent that declares, in
    ``fused_act_names``, a projection it always runs through a GELU right away."""
    pairs: dict[int, tuple[nn.Module, str]] = {}
    for m in model.modules():
        names = getattr(type(m), "fused_act_names", None)
        if names is None:
            continue
        linear, act = (getattr(m, n, None) for n in names)
        algorithm = _gelu_algorithm(act) if isinstance(act, nn.Module) else None
        if algorithm is not None and isinstance(linear, (nn.Linear, Conv1D)):
            pairs[id(linear)] = (act, algorithm)
    return pairs


def prepack_linears(model: nn.Module) -> int:
    """Run every float32/bf16 ``nn.Linear`` and GPT-2 ``Conv1D`` of ``model`` (and its fused attention
    projections) on a weight reordered once for oneDNN; returns how many. A feed-forward projection
    followed by an erf or tanh GELU computes both in one call (the bias and GELU as oneDNN's post-op).
    Parameters and state_dict() are unchanged: only the inference forward is replaced (training and
    autograd use the modules as they are). The reordered weight is a snapshot: call this after the
    weights are final. Without oneDNN, nothing changes.
    """
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return 0
    fusable = _fusable_activations(model)
    n = 0
    for lin, w in _projections(model):
        act, algorithm = fusable.get(id(lin), (None, ""))
        for m, attr in ((lin, "forward"), (lin, "_inference_gelu"), (act, "forward")):
            # A second preparation (another dtype) starts from the module's own forward, never a stale snapshot.
            if m is not None:
                m.__dict__.pop(attr, None)
        bias = None if lin.bias is None else lin.bias.detach()
        packed = _pack(w, bias, "gelu", algorithm) if act is not None else None
        if packed is not None:
            fused_out = FusedOutput()
            object.__setattr__(lin, "forward", _PackedLinear(lin, packed, bias, act, algorithm, fused_out))
            object.__setattr__(act, "forward", PassthroughAct(act, fused_out))
            object.__setattr__(lin, "_inference_gelu", algorithm)  # what the fused call computes after the product
        else:  # no activation to fuse, or no fused kernel here: the plain product alone
            packed = _pack(w, bias)
            if packed is None:
                continue
            object.__setattr__(lin, "forward", _PackedLinear(lin, packed, bias))
        n += 1
    return n
