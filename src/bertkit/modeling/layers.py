"""Building blocks every family shares: activations by config name and (multi-head) attention.

Shapes: B batch, N sequence length (L keys), H hidden size, h heads, d = H / h head size, T real
tokens of a packed batch (see :mod:`bertkit.modeling.packing`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from bertkit._cpu import gemm_attention_max_len

from .packing import AttentionMask

__all__ = ["CheckpointedLayer", "attention", "dense_residual", "get_activation", "multi_head_attention", "project_qkv"]


class CheckpointedLayer(nn.Module):
    """A repeated block that can keep only its inputs in training and recompute its activations in the
    backward pass (activation checkpointing: memory traded for compute), switched on by the model's
    ``activation_checkpointing_enable``. The recomputation replays the same dropout masks, so the
    gradients are those of the plain forward."""

    gradient_checkpointing = False
    _checkpoint_fn = None

    def __call__(self, *args, **kwargs):
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            return self._checkpoint_fn(super().__call__, *args, **kwargs)
        return super().__call__(*args, **kwargs)


# ---------------------------------------------------------------------------------------- activations


class NewGELU(nn.Module):
    """tanh approximation of GELU (transformers' gelu_new / Google's original BERT code)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


_ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),
    "gelu_new": NewGELU,
    "gelu_fast": lambda: nn.GELU(approximate="tanh"),
    "gelu_pytorch_tanh": lambda: nn.GELU(approximate="tanh"),
    "quick_gelu": QuickGELU,
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "mish": nn.Mish,
    "leaky_relu": nn.LeakyReLU,
    "linear": nn.Identity,
}


def get_activation(name: str) -> nn.Module:
    """The activation module for a config's ``hidden_act``."""
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unsupported hidden_act {name!r}; supported: {', '.join(sorted(_ACTIVATIONS))}") from None


# ---------------------------------------------------------------------------------------- sublayer output


def hooked(*modules: nn.Module) -> bool:
    """Whether any of ``modules`` has a forward hook or pre-hook: it must then run as its own call."""
    return any(m._forward_hooks or m._forward_pre_hooks for m in modules)


def dense_residual(
    dense: nn.Module, dropout: nn.Dropout | None, x: torch.Tensor, residual: torch.Tensor
) -> torch.Tensor:
    """``dropout(dense(x)) + residual`` (no dropout when None): a sublayer's output before a post-LN
    block normalises it.

    A projection prepared for inference (``bertkit.inference.prepare_for_inference``) offers
    ``add_residual`` on its forward, which adds the residual inside its product: one pass over the
    output fewer. It declines (None) in training, under a gradient or a hook; a hook on the dropout
    keeps the modules' own calls too, so every hook sees what it always saw.
    """
    add_residual = getattr(dense.forward, "add_residual", None)
    if add_residual is not None and not (dropout is not None and (dropout.training or hooked(dropout))):
        y = add_residual(x, residual)
        if y is not None:
            return y
    y = dense(x)
    return (y if dropout is None else dropout(y)) + residual


# ---------------------------------------------------------------------------------------- attention


def project_qkv(x: torch.Tensor, query: nn.Linear, key: nn.Linear, value: nn.Linear) -> torch.Tensor:
    """q, k and v side by side, ``(..., H) -> (..., 3H)``, in one GEMM.

    The parameters stay separate so checkpoint keys are unchanged.
    """
    w = torch.cat([query.weight, key.weight, value.weight])  # (3H, H)
    b = torch.cat([query.bias, key.bias, value.bias])  # (3H,)
    return F.linear(x, w, b)


# cuDNN's SDPA builds an execution plan for every new shape: about 11 ms of host time forward and 14
# ms backward on an H200, for kernels that run in 15-20 us. Training's exact lengths and inference's
# length groups meet new shapes all the time, so on a GPU attention takes the other fused kernels.
_CUDA_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention(
    q: torch.Tensor,  # (B, h, N, d)
    k: torch.Tensor,  # (B, h, L, d)
    v: torch.Tensor,  # (B, h, L, d)
    attention_mask: torch.Tensor | None,  # bool (B, 1, 1|N, L), True = attend; None = all
    output_attentions: bool,
    dropout: nn.Dropout,
    is_causal: bool = False,  # query i sees keys up to L - N + i (a causal block after cached keys)
    scale: float | None = None,  # None = 1/sqrt(d)
) -> tuple[torch.Tensor, torch.Tensor | None]:  # (B, h, N, d); (B, h, N, L) probabilities or None
    """Scaled dot-product attention: SDPA unless the probabilities are wanted (then an explicit softmax)."""
    if output_attentions:
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, h, N, L)
        if is_causal:
            n, length = q.shape[2], k.shape[2]
            causal = torch.ones(n, length, dtype=torch.bool, device=q.device).tril(length - n)
            attention_mask = causal if attention_mask is None else attention_mask & causal
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        return torch.matmul(dropout(probs), v), probs
    p = dropout.p if dropout.training else 0.0
    kw = dict(attn_mask=attention_mask, dropout_p=p, is_causal=is_causal and attention_mask is None, scale=scale)
    if q.is_cuda:
        with sdpa_kernel(_CUDA_SDPA_BACKENDS):
            return F.scaled_dot_product_attention(q, k, v, **kw), None
    return F.scaled_dot_product_attention(q, k, v, **kw), None


def multi_head_attention(
    qkv: torch.Tensor,  # (B, N, 3H), or (T, 3H) real tokens when the mask is packed: q, k and v side by side
    num_heads: int,
    attention_mask: AttentionMask | torch.Tensor | None,  # or a bool (B, 1, 1|N, N), True = attend; None = all
    output_attentions: bool,
    dropout: nn.Dropout,
) -> tuple[torch.Tensor, torch.Tensor | None]:  # like qkv with H columns; (B, h, N, N) probabilities or None
    """Bidirectional self-attention over fused q/k/v: the one used by the encoders (BERT, DistilBERT)."""
    mask = AttentionMask.wrap(attention_mask)
    if mask.packed:
        return _grouped_attention(qkv, num_heads, mask, dropout), None
    B, N, three_h = qkv.shape
    d = three_h // (3 * num_heads)
    x = qkv.view(B, N, 3, num_heads, d)
    if not output_attentions and _short_bf16_inference(x, dropout) and (mask.mask is None or mask.mask.shape[2] == 1):
        # the kernels a packed batch attends with, so a text alone gets what it gets in a batch
        return _batched_gemm_attention(x, mask.mask).view(B, N, num_heads * d), None
    q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, h, N, d)
    y, probs = attention(q, k, v, mask.mask, output_attentions, dropout)
    return y.transpose(1, 2).reshape(B, N, num_heads * d), probs  # (B, N, H)


def _grouped_attention(
    qkv: torch.Tensor, num_heads: int, mask: AttentionMask, dropout: nn.Dropout
) -> torch.Tensor:  # (rows, 3H) packed -> (rows, H)
    """Attention of a packed batch, one length group at a time (see :class:`AttentionMask`).

    Each group's output goes straight into its place in one buffer of every group's padded rows, and
    one gather takes the packed rows from it: no per-group selection, concatenation or reordering pass.
    Filler rows past the real tokens get the first row's output, which no real row reads.
    """
    h = qkv.shape[-1] // 3
    d = h // num_heads
    if not mask.groups:  # every sequence empty: no real rows at all
        return qkv.new_zeros(qkv.shape[0], h)
    out = qkv.new_empty(sum(g.batch * g.seq_len for g in mask.groups), h)
    start = 0
    for g in mask.groups:
        x = qkv.index_select(0, g.src).view(g.batch, g.seq_len, 3, num_heads, d)
        dst = out[start : start + g.batch * g.seq_len]
        if _short_bf16_inference(x, dropout):
            _batched_gemm_attention(x, g.mask, out=dst)
        else:
            q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)  # each (B_g, h, N_g, d)
            y, _ = attention(q, k, v, g.mask, False, dropout)
            dst.view(g.batch, g.seq_len, num_heads, d).copy_(y.transpose(1, 2))
        start += len(dst)
    return out if mask.gather is None else out.index_select(0, mask.gather)


# Up to this many keys, bf16 inference attends with two batched GEMMs and a softmax: on short
# sequences SDPA's flash kernel spends more time tiling than computing; the (B*h, N, N) scores stay
# small. The limit measured for this CPU's kind (AMX or not), read from its flags once, at import, so
# a compiled graph holds the number.
_GEMM_ATTENTION_MAX_LEN = gemm_attention_max_len()


def _short_bf16_inference(x: torch.Tensor, dropout: nn.Dropout) -> bool:
    """Whether a group ``(B, N, 3, h, d)`` takes :func:`_batched_gemm_attention`: bf16, no gradient,
    no dropout, and short."""
    return (
        x.dtype == torch.bfloat16
        and not torch.is_grad_enabled()
        and not (dropout.training and dropout.p > 0)
        and x.shape[1] <= _GEMM_ATTENTION_MAX_LEN
    )


def _batched_gemm_attention(
    x: torch.Tensor,  # (B, N, 3, h, d): q, k and v of each token
    mask: torch.Tensor | None,  # bool (B, 1, 1, N), True = attend; None = all
    out: torch.Tensor | None = None,  # (B * N, h * d) to write the result into
) -> torch.Tensor:  # (B * N, h * d)
    """Softmax attention as ``bmm(softmax(scale * bmm(q, k^T)), v)`` over the B*h heads at once.

    The scores are bf16 out of the product and take the mask and the softmax in float32: the CPU's
    float32 softmax runs about twice as fast as its bf16 one, and adding a (B, 1, 1, N) bias replaces
    a masked fill over every score."""
    B, N, _, h, d = x.shape
    if N <= _ELEMENTWISE_ATTENTION_MAX_LEN:
        return _elementwise_attention(x, mask, out)
    q, k, v = x.permute(2, 0, 3, 1, 4).reshape(3, B * h, N, d).unbind(0)  # each (B*h, N, d)
    scores = torch.baddbmm(q.new_empty(B * h, N, N), q, k.transpose(1, 2), beta=0, alpha=d**-0.5).float()
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device).masked_fill_(~mask, float("-inf"))
        scores.view(B, h, N, N).add_(bias)
    probs = torch.softmax(scores, -1, out=scores).to(v.dtype)
    y = torch.bmm(probs, v).view(B, h, N, d).transpose(1, 2)  # (B, N, h, d)
    if out is None:
        return y.reshape(B * N, h * d)
    out.view(B, N, h, d).copy_(y)
    return out


# Up to this many keys, attention is N broadcast products per step rather than batched GEMMs: (N, d)
# by (d, N) products are too small for a GEMM kernel's tiling to pay. Measured on AVX-512 BF16 (one
# thread, 3072 tokens, 12 heads of 32): 3 keys 4.8 against 8.2 ms, 5 keys 5.7 against 6.9, 8 keys
# 8.6 against 7.5.
_ELEMENTWISE_ATTENTION_MAX_LEN = 4


def _elementwise_attention(
    x: torch.Tensor,  # (B, N, 3, h, d): q, k and v of each token, N tiny
    mask: torch.Tensor | None,  # bool (B, 1, 1, N), True = attend; None = all
    out: torch.Tensor | None = None,  # (B * N, h * d) to write the result into
) -> torch.Tensor:  # (B * N, h * d)
    """Softmax attention of very short sequences in float32, one key position at a time: the scores
    ``(B, N queries, N keys, h)`` are N products summed over ``d``, the output N multiply-adds."""
    B, N, _, h, d = x.shape
    xf = x.float()
    q = xf[:, :, 0].mul_(d**-0.5)  # (B, N, h, d)
    k, v = xf[:, :, 1], xf[:, :, 2]
    scores = torch.stack([(q * k[:, j : j + 1]).sum(-1) for j in range(N)], 2)  # (B, N, N, h)
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device).masked_fill_(~mask, float("-inf"))
        scores.add_(bias.reshape(B, 1, N, 1))
    probs = torch.softmax(scores, 2)
    y = probs[:, :, 0, :, None] * v[:, None, 0]  # (B, N, h, d)
    for j in range(1, N):
        y.addcmul_(probs[:, :, j, :, None], v[:, None, j])
    if out is None:
        return y.to(x.dtype).reshape(B * N, h * d)
    out.view(B, N, h, d).copy_(y)
    return out
