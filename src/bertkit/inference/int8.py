"""int8 inference that keeps its quality: per-token activations, per-channel weights, smoothing.

Dynamic quantization with one scale per batch (torch's eager ``quantize_dynamic``) loses the small
values of every token whenever one token of the batch, or one channel, is large; on BERT's hidden
states that drops the sentence-embedding cosine against fp32 to about 0.92. Two choices fix it:

- **one activation scale per token** (computed at run time), and **one weight scale per output
  channel**, symmetric, so a product ``int8 x int8 -> int32`` is rescaled by ``s_token * s_channel``;
  the quantization never mixes tokens, so an int8 product gives a row the same output in any batch
  (what still changes with the batch is the float rounding of attention over length groups, in the
  last bits, which a value on a rounding boundary turns into one code: a sentence's int8 vector alone
  and in a batch of 32 differ by min cosine 0.9990 on MiniLM, where fp32's differ by 2e-7);
- **smoothing** (SmoothQuant, Xiao et al. 2023): a LayerNorm or GELU output has a few channels far
  larger than the rest. Dividing input channel ``j`` by ``s_j = max|x_j|^a / max|w_j|^(1-a)``
  (a = 0.5) and multiplying the weight's column ``j`` by it leaves the product unchanged but spreads
  the range between activations and weights. ``max|x_j|`` comes from one calibration forward over
  seeded random token ids: the outlier channels come from the weights, not from the text, so no
  data is needed;
- **asymmetric codes for the down-projection**: its input is a GELU output, with nothing under -0.17,
  so symmetric codes leave half of the 256 unused. There each token's range ``[min, max]`` takes all
  256 codes (``x ~ s * code + o``), and the product gains ``o`` times each output's weight sum, one
  pass over the (T, H) output. On MiniLM (512 real sentences, against fp32, on an AVX2 CPU with 7-bit
  weights) it lifted the min cosine from 0.9889 to 0.9926 and the mean from 0.9974 to 0.9978, at no
  measurable cost; a simulation of 8-bit weights gave 0.9909 -> 0.9954.

Every Linear of the encoder layers is int8 (the fused query/key/value projection, the attention
output, both feed-forward projections; the up-projection applies its GELU in place). Where the CPU
multiplies bf16 natively, q, k and v leave their projection in bf16 and attend with the bf16 kernels
(MiniLM, 512 sentences: 3.5% faster on one thread, 10% on two, min cosine 0.9909 -> 0.9924); heads, the
pooler and ELECTRA's embedding projection stay in float (bf16 where the CPU multiplies it natively,
else fp32). Measured on MiniLM against fp32 over 512 real sentences with AMX, before the asymmetric
down-projection: min cosine 0.9958, mean 0.9986 (0.9988 / 0.9994 with the down-projections kept in
bf16, about 4% slower end to end); polarity accuracy within 0.2 points.

**Which kernel runs.** Where torch has oneDNN's quantized linear (``torch.ops.onednn``) and it passes
a one-row trial against the exact product, the product is oneDNN's **u8 x s8** kernel: activations
are shifted to uint8 with zero point 128 (the sign bit flipped), which is the form AVX-512 VNNI's
``vpdpbusd`` and AMX-INT8 multiply natively, on the weight reordered once. The kernel takes one
activation scale per call, so it runs with scale 1 and the per-token scales multiply its float32
output afterwards, with the bias, in one pass. ``torch._int_mm`` (s8 x s8) is the fallback: on a
VNNI CPU without AMX it measured up to 7x slower than the u8 x s8 kernel for the same product (VNNI
has no signed x signed instruction). On such a CPU (AVX-512 VNNI + BF16, one thread, ~1,200 tokens)
the u8 x s8 product alone takes half the time of the reordered bf16 one, but the per-token
quantization (smoothing, max and min, division, rounding: memory-bound passes over fp32
activations) eats much of that: a whole projection takes 0.65-0.95x bf16's time and the 1536-wide
down-projection 1.1-1.5x alone (in the fp32 model a bf16 one also converts its input and output);
the int8 sentence-embedding pipeline takes 0.84-0.95x of bf16's time (``benchmarks/int8_linear.py``
for the projections).

**Without VNNI** (AVX2 alone, or AVX-512 without VNNI) oneDNN multiplies with ``vpmaddubsw``, whose
int16 pair sums saturate: with 8-bit weights the products are wrong, not merely rounded. There the
weights keep 7 bits (:func:`weight_qmax`, chosen by trials of the kernel, not by the CPU's name), which
keeps every sum exact (asymmetric codes too: they span the same 0-255 the kernel reads). On a real
AVX2 CPU (an AMD EPYC of the Zen 3 generation) oneDNN's kernel passed a trial of equal weights at 127
and missed the sums of MiniLM's real weights by up to 4x, so it is also tried on mixed random weights;
at 63 it sums them exactly. ``torch._int_mm`` summed them exactly at 127 there,
but about 150 times slower: oneDNN's kernel is preferred, at 7 bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from bertkit._cpu import has_fast_bf16
from bertkit.modeling.layers import hooked

from .fused import BoundForward, FusedOutput, PassthroughAct, _fusable_activations

__all__ = ["Int8Linear", "SMOOTHING_ALPHA", "onednn_int8_available", "quantize_int8", "weight_qmax"]

SMOOTHING_ALPHA = 0.5
_INT_MM_MIN_ROWS = 17  # torch._int_mm on CPU wants more than 16 rows; shorter inputs are padded with zeros


def _quantize_rows(
    x: torch.Tensor, inv_smooth: torch.Tensor | None, asymmetric: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``x`` (T, in) float32 as int8 codes ``xq`` with one scale ``s`` (T, 1) per row: ``x ~ s * xq + o``.

    Symmetric (``o`` is None): ``xq = round(x / s)`` with ``s = max|x| / 127``. Asymmetric: the row's range
    ``[min, max]`` maps onto all 256 codes, ``s = (max - min) / 255`` and ``o = 128 s + min`` (T, 1), which
    gives a GELU output (nothing under -0.17) about twice the resolution of the symmetric codes.

    One product with the smoothing, a max and a min, one division (or one multiply-add) and one rounding in
    place: every pass is a read and write of the (T, in) activations, which cost as much as the int8
    product itself here.
    """
    xs = x if inv_smooth is None else x * inv_smooth
    hi, lo = xs.amax(1, keepdim=True), xs.amin(1, keepdim=True)
    if asymmetric:
        sx = (hi - lo).clamp_min_(1e-8).div_(255.0)
        inv = sx.reciprocal()
        shift = lo.mul(inv).neg_().sub_(128.0)  # (T, 1): -min / s - 128
        # (x - min) / s - 128, in [-128, 127]; never written into the caller's tensor. A product and an
        # add, not one addcmul: with two (T, 1) operands addcmul takes torch's unvectorized loop, measured
        # 5-6x slower than the two passes on (900, 1536) float32 activations
        xs = (xs * inv if inv_smooth is None else xs.mul_(inv)).add_(shift)
        return xs.round_().to(torch.int8), sx, sx * 128.0 + lo
    # max |x| as max(max x, -min x): two reads, no (T, in) temporary for abs() (measured 10x faster)
    sx = torch.maximum(hi, lo.neg_()).clamp_min_(1e-8).div_(127.0)  # (T, 1): one scale per token
    xs = xs / sx if inv_smooth is None else xs.div_(sx)
    return xs.round_().to(torch.int8), sx, None


def _onednn_product(q: torch.Tensor, scale: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``xu -> (xu - 128) q^T * scale`` (uint8 ``xu``, float32 out) on oneDNN's u8 x s8 kernel with ``q``
    (out, in) reordered once, or None where this torch has no such kernel or it fails a one-row trial
    against the exact product: the caller then keeps ``torch._int_mm``.

    A closure, so the opaque reordered weight stays out of ``state_dict()`` and ``deepcopy``.
    """
    onednn = getattr(torch.ops, "onednn", None)
    if not torch.backends.mkldnn.is_available() or not hasattr(onednn, "qlinear_pointwise"):
        return None
    zero_points = torch.zeros(q.shape[0], dtype=torch.int64)
    try:
        packed = onednn.qlinear_prepack(q, None)

        def product(xu: torch.Tensor) -> torch.Tensor:
            return onednn.qlinear_pointwise(
                xu, 1.0, 128, packed, scale, zero_points, None, 1.0, 0, torch.float32, "none", [], ""
            )

        row = (torch.arange(q.shape[1]) * 37 % 255).to(torch.uint8)[None, :]  # every value, both signs
        got = product(row)
    except (RuntimeError, AttributeError):  # no kernel for this CPU or build, or no prepack op
        return None
    want = ((row.double() - 128) @ q.double().t()) * scale.double()
    return product if torch.allclose(got.double(), want, rtol=1e-5, atol=1e-6) else None


def _extremes_exact(qmax: int, onednn: bool) -> bool:
    """Whether one int8 product (oneDNN's u8 x s8 kernel, or ``torch._int_mm``) gives the exact sums of
    int8 activations at their extreme, 127, against weights of magnitude ``qmax`` of either sign."""
    q = torch.full((16, 64), qmax, dtype=torch.int8)
    q[1::2].neg_()  # both signs: a saturated sum is clipped at either end
    x = torch.full((_INT_MM_MIN_ROWS, 64), 127, dtype=torch.int8)
    want = x[0].long() @ q.long().t()  # (16,)
    if not onednn:
        return torch.equal(torch._int_mm(x, q.t().contiguous())[0].long(), want)
    product = _onednn_product(q, torch.ones(16))
    return product is not None and torch.equal(product(x[:1].view(torch.uint8) ^ 128)[0].long(), want)


def _onednn_exact(qmax: int) -> bool:
    """Whether oneDNN's u8 x s8 kernel sums exactly at weights of magnitude ``qmax``: at the extremes, and
    for mixed random weights over the whole range (its one-row trial against the exact product)."""
    if not _extremes_exact(qmax, onednn=True):
        return False
    q = torch.randint(-qmax, qmax + 1, (64, 384), generator=torch.Generator().manual_seed(0)).to(torch.int8)
    return _onednn_product(q, torch.ones(64)) is not None


@functools.cache
def _plan() -> tuple[int, bool]:
    """(weight magnitude, whether oneDNN's kernel runs): the widest weights oneDNN's u8 x s8 kernel sums
    exactly, else the widest ``torch._int_mm`` does. oneDNN comes first even at 7 bits: on an AVX2 CPU
    ``torch._int_mm`` took 728 ms for a (512, 384) x (384, 1536) product that oneDNN's kernel did in 4.7 ms
    and float32 in 8.8 (one thread)."""
    for qmax in (127, 63):
        if _onednn_exact(qmax):
            return qmax, True
    for qmax in (127, 63):
        if _extremes_exact(qmax, onednn=False):
            return qmax, False
    raise RuntimeError(
        "int8: this CPU's int8 matrix products do not sum exactly even with 7-bit weights; use dtype 'bf16' or 'fp32'"
    )


def onednn_int8_available() -> bool:
    """True when :class:`Int8Linear` runs oneDNN's u8 x s8 kernel here: it exists and sums exactly over the
    whole range of :func:`weight_qmax`."""
    return _plan()[1]


def weight_qmax() -> int:
    """The largest int8 weight magnitude :class:`Int8Linear` stores on this CPU: 127 where its int8
    products sum exactly (AVX-512 VNNI, AVX-VNNI, AMX-INT8), else 63.

    Without VNNI, oneDNN multiplies with ``vpmaddubsw``, which adds each pair of uint8 x int8 products in
    int16 and saturates past 32,767: an activation of 255 (127 shifted by the zero point 128) against two
    weights of 127 gives 64,770, and MiniLM's products came out wrong by orders of magnitude. Weights of at
    most 63 keep every pair under the limit (255 x 63 x 2 = 32,130) at the cost of one bit of weight
    precision, where activations keep all 8.
    """
    return _plan()[0]


class Int8Linear(nn.Module):
    """``y = x W^T + b`` with int8 ``x`` (one scale per token) and int8 ``W`` (one scale per output row).

    ``kernel`` says which product runs: ``"onednn"`` (uint8 activations, VNNI / AMX) where this torch
    has it, else ``"int_mm"``; both give the same integer sums.
    """

    def __init__(self, linear: nn.Linear, smooth: torch.Tensor | None = None, asymmetric: bool = False) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        if smooth is not None:
            w = w * smooth[None, :]
        qmax = weight_qmax()  # 127, or 63 on a CPU whose int8 products would saturate
        scale = w.abs().amax(1).clamp_min(1e-8) / qmax  # (out,)
        q = torch.round(w / scale[:, None]).clamp(-qmax, qmax).to(torch.int8)
        self.register_buffer("weight_t", q.t().contiguous())  # (in, out): the layout _int_mm takes
        self.register_buffer("weight_scale", scale)
        self.register_buffer("inv_smooth", None if smooth is None else (1.0 / smooth).float())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        # with asymmetric activations x ~ s * xq + o, the product gains o * sum_in(W) per output: (out,)
        self.register_buffer("weight_sums", (q.float().sum(1) * scale) if asymmetric else None)
        self.asymmetric = asymmetric
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # each weight gets its own trial too; a CPU whose kernel fails the general one keeps _int_mm for all
        self._onednn = _onednn_product(q, scale) if onednn_int8_available() else None
        self._activate: Callable[[torch.Tensor], torch.Tensor] | None = None  # set by _fuse_activation
        self.out_dtype: torch.dtype | None = None  # set by quantize_int8: bf16 q/k/v for the bf16 attention
        self.kernel = "int_mm" if self._onednn is None else "onednn"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xq, sx, offset = _quantize_rows(x.reshape(-1, shape[-1]).float(), self.inv_smooth, self.asymmetric)
        if self.kernel == "onednn":
            # int8 v -> uint8 v + 128 (flipping the sign bit), the zero point the u8 x s8 kernel takes
            y = self._onednn(xq.view(torch.uint8).bitwise_xor_(128))
            y = y.mul_(sx) if self.bias is None else torch.addcmul(self.bias, y, sx, out=y)
        else:
            rows = xq.shape[0]
            if rows < _INT_MM_MIN_ROWS:
                xq = torch.cat([xq, xq.new_zeros(_INT_MM_MIN_ROWS - rows, xq.shape[1])])
            y = torch._int_mm(xq, self.weight_t)[:rows].float() * sx * self.weight_scale
            if self.bias is not None:
                y = y + self.bias
        if offset is not None:
            y.addcmul_(offset, self.weight_sums)  # (T, 1) x (out,)
        y = y.reshape(*shape[:-1], self.out_features)
        if self.out_dtype is not None:
            y = y.to(self.out_dtype)
        return y if self._activate is None else self._activate(y)

    def extra_repr(self) -> str:
        sizes = f"in_features={self.in_features}, out_features={self.out_features}"
        return f"{sizes}, smoothed={self.inv_smooth is not None}, asymmetric={self.asymmetric}, kernel={self.kernel}"


class _FloatLinear(nn.Module):
    """A Linear kept out of int8, run in ``dtype`` (bf16 on a CPU that multiplies it natively)."""

    def __init__(self, linear: nn.Linear, dtype: torch.dtype) -> None:
        super().__init__()
        self.linear = linear.to(dtype)
        self.dtype = dtype
        # read by the heads that size their logits from their decoder (a masked LM's vocabulary)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.to(self.dtype)).float()


def _fuse_activation(linear: Int8Linear, act: nn.Module, algorithm: str) -> None:
    """``linear`` applies the GELU its parent runs right after it (erf or tanh, ``algorithm``) in place
    on its own fresh output, and ``act`` passes exactly that tensor through: one pass over the (T, 4H)
    activations and one allocation fewer. A hook on either module runs them apart, as it always saw."""
    fused_out = FusedOutput()
    linear._activate = _InPlaceGelu(linear, act, algorithm, fused_out)
    object.__setattr__(act, "forward", PassthroughAct(act, fused_out))


class _InPlaceGelu(BoundForward):
    """What :class:`Int8Linear` applies to its output when its GELU is fused: the GELU in place, marked
    for the activation module to pass through, unless either module has a hook."""

    def __init__(self, linear: Int8Linear, act: nn.Module, algorithm: str, fused_out: FusedOutput) -> None:
        self.linear, self.act, self.algorithm, self.fused_out = linear, act, algorithm, fused_out

    def __call__(self, y: torch.Tensor) -> torch.Tensor:
        if hooked(self.linear, self.act):
            return y
        return self.fused_out.mark(torch.ops.aten.gelu_(y, approximate=self.algorithm))


def _is_down_projection(name: str) -> bool:
    """The feed-forward block's second Linear (intermediate -> hidden) in BERT, ELECTRA and DistilBERT: its
    input is a GELU (or ReLU) output, almost all of it non-negative, so it takes asymmetric activations."""
    if name.endswith(".attention.output.dense"):
        return False
    return name.endswith(".output.dense") or name.endswith(".ffn.lin2")


def _kept_in_float(name: str) -> bool:
    """Linears outside the encoder layers (heads, the pooler, ELECTRA's embedding projection) stay in
    float: they run once per sequence or are too small for int8 to gain anything."""
    # encoder.layer.N (BERT, ELECTRA, RoBERTa), transformer.layer.N (DistilBERT), layers.N (ModernBERT)
    return ".layer." not in f".{name}" and ".layers." not in f".{name}"


@torch.no_grad()
def _calibrate(model: nn.Module, attention_inputs: dict[str, nn.Module], seed: int = 0) -> dict[str, torch.Tensor]:
    """Per input channel ``max |x|`` of every Linear (and of each fused attention input), on random ids."""
    stats: dict[str, torch.Tensor] = {}

    def record(name: str, x: torch.Tensor) -> None:
        a = x.detach().float().abs().reshape(-1, x.shape[-1]).amax(0)
        stats[name] = torch.maximum(stats[name], a) if name in stats else a

    hooks = [
        m.register_forward_pre_hook(lambda m, inp, n=n: record(n, inp[0]))
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear)
    ]
    hooks += [m.register_forward_pre_hook(lambda m, inp, n=n: record(n, inp[0])) for n, m in attention_inputs.items()]
    try:
        vocab = int(getattr(model.config, "vocab_size", 1000))
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(min(1000, vocab // 2), vocab, (16, 64), generator=g)
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        for h in hooks:
            h.remove()
    return stats


def _smoothing(act_max: torch.Tensor, weight: torch.Tensor, alpha: float = SMOOTHING_ALPHA) -> torch.Tensor:
    w_max = weight.detach().float().abs().amax(0).clamp_min(1e-5)
    return (act_max.clamp_min(1e-5) ** alpha / w_max ** (1 - alpha)).clamp_min(1e-5)


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace ``model``'s encoder Linears (and fused attention projections) by :class:`Int8Linear`, in place.

    ``model`` is float32, in eval mode, with its fused query/key/value weights already built.
    """
    attention = {n: m for n, m in model.named_modules() if getattr(m, "_inference_qkv", None) is not None}
    stats = _calibrate(model, attention)
    keep = torch.bfloat16 if has_fast_bf16() else torch.float32
    fusable = _fusable_activations(model)  # id(up-projection) -> (its GELU, erf or tanh)
    for name, att in attention.items():
        fused = att._inference_qkv
        qkv = Int8Linear(fused, _smoothing(stats[name], fused.weight))
        # Where the CPU multiplies bf16 natively, q, k and v leave in bf16, so attention takes the bf16
        # kernels (about half the time of float32 SDPA on short groups); the output projection reads them
        # back as float32 when it quantizes its input.
        qkv.out_dtype = torch.bfloat16 if keep == torch.bfloat16 else None
        object.__setattr__(att, "_inference_qkv", qkv)
    for name, m in list(model.named_modules()):
        if not isinstance(m, nn.Linear) or name not in stats:
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if any(parent is a for a in attention.values()) and attr in type(parent).qkv_names:
            continue  # inference runs the fused projection; the originals stay for state_dict()
        if _kept_in_float(name):
            new: nn.Module = _FloatLinear(m, keep) if keep != torch.float32 else m
        else:
            new = Int8Linear(m, _smoothing(stats[name], m.weight), asymmetric=_is_down_projection(name))
            if id(m) in fusable:
                _fuse_activation(new, *fusable[id(m)])
        setattr(parent, attr, new)
    return model
