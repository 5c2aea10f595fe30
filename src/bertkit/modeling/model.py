"""The BERT encoder in one readable file (in the spirit of nanoGPT's model.py).

Module attribute paths equal transformers' BERT module paths, so ``state_dict()`` keys are the keys
of every BERT checkpoint with no mapping table: ``embeddings.word_embeddings``,
``encoder.layer.N.attention.self.query``, ``encoder.layer.N.attention.output.dense/LayerNorm``,
``encoder.layer.N.intermediate.dense``, ``encoder.layer.N.output.dense/LayerNorm``, ``pooler.dense``.

Shapes: B batch, N sequence length, H hidden size, h heads, d = H / h head size, I intermediate size.

Weight initialisation is one pass over a whole model, apart from the modules: modules only declare
their parameters, and ``BertPreTrainedModel.init_weights`` applies BERT's initialisation (normal with
``initializer_range``, zero biases, unit LayerNorm) once, from ``post_init`` at the end of the
outermost constructor (a head model builds its encoder inside ``no_init_weights()``, so nothing is
initialised twice). ``from_pretrained`` draws no random weights that the checkpoint overwrites: it
builds the model on the meta device inside ``no_init_weights()``, allocates it with ``to_empty``,
copies the checkpoint in and initialises only the parameters the checkpoint lacks
(:meth:`BertPreTrainedModel.init_missing`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig
from .loading import init_weights_enabled, load_pretrained
from .outputs import BaseModelOutputWithPooling

__all__ = [
    "AttentionMask",
    "BertEmbeddings",
    "BertSelfAttention",
    "BertSelfOutput",
    "BertAttention",
    "BertIntermediate",
    "BertOutput",
    "BertLayer",
    "BertEncoder",
    "BertPooler",
    "BertPreTrainedModel",
    "BertModel",
    "attention",
    "multi_head_attention",
    "project_qkv",
]

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


# ---------------------------------------------------------------------------------------- attention mask


class _LengthGroup:
    """Sequences of similar length that attend together, padded to their own longest: gather
    ``src`` rows of the packed tokens into ``(batch, seq_len)``, attend under ``mask``, keep ``keep``."""

    __slots__ = ("src", "keep", "mask", "batch", "seq_len")

    def __init__(self, src: torch.Tensor, keep: torch.Tensor | None, mask: torch.Tensor | None, batch: int,
                 seq_len: int) -> None:
        self.src, self.keep, self.mask, self.batch, self.seq_len = src, keep, mask, batch, seq_len


# Per attention call, in units of (sequence x key x query) work of a 384-wide model: what a group
# costs besides its own B * N^2 (the kernel launch and the gathers). Measured on AVX-512 CPUs, where
# a call's fixed cost equals roughly 1,500 such units; wider models do more work per unit.
_GROUP_OVERHEAD = 1500 * 384


def length_groups(lengths: list[int], hidden_size: int = 384) -> list[list[int]]:
    """Split sequences into groups by length, minimising ``sum(B_g * N_g^2) + overhead * groups``.

    Attention on a padded batch costs ``B * N_max^2``; on batches of mixed lengths most of it is
    padding. Sorted by length, the best contiguous split is a small dynamic programme over the
    distinct lengths. Returns lists of sequence indices (each in increasing order).
    """
    distinct = sorted(set(lengths) - {0})  # ascending; empty sequences have no tokens to attend
    count = [0] * len(distinct)
    where = {n: i for i, n in enumerate(distinct)}
    for n in lengths:
        if n:
            count[where[n]] += 1
    overhead = _GROUP_OVERHEAD / hidden_size
    # best[i]: cost of the i shortest distinct lengths; a group (j, i] is padded to distinct[i - 1]
    best, cut, members = [0.0], [0], [0]
    for c in count:
        members.append(members[-1] + c)
    for i in range(1, len(distinct) + 1):
        top = distinct[i - 1] ** 2
        j = min(range(i), key=lambda j: best[j] + (members[i] - members[j]) * top)
        best.append(best[j] + (members[i] - members[j]) * top + overhead)
        cut.append(j)
    bounds, i = [], len(distinct)
    while i > 0:
        bounds.append((distinct[cut[i]], distinct[i - 1]))
        i = cut[i]
    return [[b for b, n in enumerate(lengths) if lo <= n <= hi] for lo, hi in bounds]


class AttentionMask:
    """The attention mask of one batch, built once and passed to every layer.

    ``mask``: bool ``(B, 1, 1|N, N)`` for SDPA, True = attend; None when nothing is masked (SDPA then
    takes its fastest kernel). When ``index`` is set the batch is *packed*: every per-token op
    (projections, feed-forward, LayerNorm) runs on the T real tokens only, as ``(T, C)`` rows, and
    attention runs per group of sequences of similar length (:func:`length_groups`), each padded to
    its own longest, so a batch of mixed lengths pays for little padding anywhere. Padding positions
    of the outputs are zeros.
    """

    __slots__ = ("mask", "index", "batch", "seq_len", "groups", "order")

    def __init__(self, mask: torch.Tensor | None, index: torch.Tensor | None = None, batch: int = 0,
                 seq_len: int = 0, groups: list[_LengthGroup] | None = None,
                 order: torch.Tensor | None = None) -> None:
        self.mask, self.index, self.batch, self.seq_len = mask, index, batch, seq_len
        self.groups = groups or []
        self.order = order  # packed row t comes from row order[t] of the groups' outputs; None = as is

    @classmethod
    def build(cls, attention_mask: torch.Tensor | None, pack: bool = False, sync: bool = True,
              hidden_size: int = 384) -> "AttentionMask":
        """From a ``(B, N)`` 0/1 or ``(B, N, N)`` mask.

        ``pack``: drop padding tokens (2-D masks only). ``sync=False`` skips the two steps that read
        the mask on the host (the all-ones shortcut and packing), for ``torch.compile``.
        """
        if attention_mask is None:
            return cls(None)
        m = attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0
        if sync and bool(m.all()):
            return cls(None)
        sdpa = m[:, None, None, :] if m.dim() == 2 else m[:, None, :, :]
        if not (pack and sync and m.dim() == 2):
            return cls(sdpa)
        batch, seq_len = m.shape
        index = m.reshape(-1).nonzero().squeeze(1)  # (T,) real tokens, sequence by sequence
        lengths = m.sum(1).tolist()
        starts = [0]
        for n in lengths[:-1]:
            starts.append(starts[-1] + n)
        groups, dst = [], []
        for members in length_groups(lengths, hidden_size):
            longest = max(lengths[b] for b in members)
            k = torch.arange(longest)
            n = torch.tensor([lengths[b] for b in members])
            valid = k[None, :] < n[:, None]  # (B_g, N_g)
            first = torch.tensor([starts[b] for b in members])
            # padding slots repeat the sequence's first token: masked out as keys, dropped as queries
            src = torch.where(valid, first[:, None] + k[None, :], first[:, None]).reshape(-1)
            full = bool(valid.all())
            keep = None if full else valid.reshape(-1).nonzero().squeeze(1)
            groups.append(_LengthGroup(src.to(m.device), None if keep is None else keep.to(m.device),
                                       None if full else valid[:, None, None, :].to(m.device), len(members), longest))
            dst.append(src if keep is None else src[keep])
        dst_all = torch.cat(dst)  # packed row of each output row, in group order
        order = None
        if not bool((dst_all == torch.arange(len(dst_all))).all()):
            order = torch.empty_like(dst_all)
            order[dst_all] = torch.arange(len(dst_all))
            order = order.to(m.device)
        return cls(sdpa, index, batch, seq_len, groups, order)

    @classmethod
    def wrap(cls, mask: "AttentionMask | torch.Tensor | None") -> "AttentionMask":
        """An :class:`AttentionMask` as is; a bool ``(B, 1, 1|N, N)`` SDPA mask (or None) wrapped."""
        return mask if isinstance(mask, AttentionMask) else cls(mask)

    @property
    def packed(self) -> bool:
        return self.index is not None

    def pack(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, C) -> (T, C)
        return x.reshape(self.batch * self.seq_len, -1).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:  # (T, C) -> (B, N, C), zeros at padding
        # In place on a fresh buffer (autograd-safe) saves the clone that out-of-place index_copy makes.
        out = x.new_zeros(self.batch * self.seq_len, x.shape[-1]).index_copy_(0, self.index, x)
        return out.view(self.batch, self.seq_len, -1)


# ---------------------------------------------------------------------------------------- attention


def project_qkv(x: torch.Tensor, query: nn.Linear, key: nn.Linear, value: nn.Linear) -> torch.Tensor:
    """q, k and v side by side, ``(..., H) -> (..., 3H)``, in one GEMM.

    The parameters stay separate so checkpoint keys are unchanged.
    """
    w = torch.cat([query.weight, key.weight, value.weight])  # (3H, H)
    b = torch.cat([query.bias, key.bias, value.bias])  # (3H,)
    return F.linear(x, w, b)


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
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=p,
                                       is_causal=is_causal and attention_mask is None, scale=scale)
    return y, None


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
    q, k, v = qkv.view(B, N, 3, num_heads, d).permute(2, 0, 3, 1, 4).unbind(0)  # each (B, h, N, d)
    y, probs = attention(q, k, v, mask.mask, output_attentions, dropout)
    return y.transpose(1, 2).reshape(B, N, num_heads * d), probs  # (B, N, H)


def _grouped_attention(qkv: torch.Tensor, num_heads: int, mask: AttentionMask,
                       dropout: nn.Dropout) -> torch.Tensor:  # (T, 3H) packed -> (T, H)
    """Attention of a packed batch, one length group at a time (see :class:`AttentionMask`)."""
    three_h = qkv.shape[-1]
    d = three_h // (3 * num_heads)
    if not mask.groups:  # every sequence empty: no rows at all
        return qkv.new_zeros(0, three_h // 3)
    outs = []
    for g in mask.groups:
        x = qkv.index_select(0, g.src).view(g.batch, g.seq_len, 3, num_heads, d)
        q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)  # each (B_g, h, N_g, d)
        y, _ = attention(q, k, v, g.mask, False, dropout)
        y = y.transpose(1, 2).reshape(g.batch * g.seq_len, num_heads * d)
        outs.append(y if g.keep is None else y.index_select(0, g.keep))
    y = outs[0] if len(outs) == 1 else torch.cat(outs)
    return y if mask.order is None else y.index_select(0, mask.order)


# ---------------------------------------------------------------------------------------- modules


class BertEmbeddings(nn.Module):
    """word + position + token-type embeddings, summed, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig, width: int | None = None):  # width: hidden_size unless given
        super().__init__()
        width = config.hidden_size if width is None else width
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # Non-persistent: saved files stay clean, and old checkpoints that carry it load without noise.
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)),
                             persistent=False)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, N)
        token_type_ids: torch.Tensor | None = None,  # (B, N)
        position_ids: torch.Tensor | None = None,  # (B, N) or (1, N)
        inputs_embeds: torch.Tensor | None = None,  # (B, N, H)
    ) -> torch.Tensor:  # (B, N, H)
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        seq_len = inputs_embeds.shape[1]
        if position_ids is None:
            position_ids = self.position_ids[:, :seq_len]
        if token_type_ids is None:
            x = inputs_embeds + self.token_type_embeddings.weight[0]  # all-zero segment ids, without a gather
        else:
            x = inputs_embeds + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)  # same summation order as transformers
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Multi-head self-attention. SDPA when probabilities are not needed; explicit softmax when they are."""

    # (3H, H) projection built once by bertkit.inference.prepare_for_inference; used in eval mode only
    _inference_qkv: nn.Module | None = None

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, N, H), or (T, H) real tokens when the mask is packed
        attention_mask: AttentionMask | torch.Tensor | None = None,  # or a bool (B, 1, 1|N, N), True = attend
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:  # like hidden_states; (B, h, N, N) or None
        if self._inference_qkv is not None and not self.training:
            qkv = self._inference_qkv(hidden_states)  # (B, N, 3H) or (T, 3H)
        else:
            qkv = project_qkv(hidden_states, self.query, self.key, self.value)  # (B, N, 3H) or (T, 3H)
        return multi_head_attention(qkv, self.num_attention_heads, attention_mask, output_attentions, self.dropout)


class BertSelfOutput(nn.Module):
    """Attention output projection, dropout, residual add and LayerNorm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: AttentionMask | torch.Tensor | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        y, probs = self.self(hidden_states, attention_mask, output_attentions)
        return self.output(y, hidden_states), probs


class BertIntermediate(nn.Module):
    """First feed-forward half: H -> I and the activation."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = get_activation(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (B, N, H) -> (B, N, I)
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(nn.Module):
    """Second feed-forward half: I -> H, dropout, residual add and LayerNorm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertLayer(nn.Module):
    """One transformer block (post-LN): attention, add & norm, feed-forward, add & norm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: AttentionMask | torch.Tensor | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attention_output, probs = self.attention(hidden_states, attention_mask, output_attentions)
        return self.output(self.intermediate(attention_output), attention_output), probs


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, N, H), or (T, H) when the mask is packed
        attention_mask: AttentionMask | torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        all_hidden = [hidden_states] if output_hidden_states else None
        all_probs = [] if output_attentions else None
        mask = AttentionMask.wrap(attention_mask)
        for layer in self.layer:
            hidden_states, probs = layer(hidden_states, mask, output_attentions)
            if all_hidden is not None:
                all_hidden.append(hidden_states)
            if all_probs is not None:
                all_probs.append(probs)
        return (
            hidden_states,
            tuple(all_hidden) if all_hidden is not None else None,
            tuple(all_probs) if all_probs is not None else None,
        )


class BertPooler(nn.Module):
    """tanh(dense(h[CLS])): the sentence vector used by NSP and sequence classification."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (B, N, H) -> (B, H)
        return self.activation(self.dense(hidden_states[:, 0]))


# ---------------------------------------------------------------------------------------- base class

class BertPreTrainedModel(nn.Module):
    """Shared plumbing: config, weight init, weight tying, from_pretrained / save_pretrained."""

    config_class = BertConfig
    base_model_prefix = "bert"
    # tied parameter -> the parameter it shares storage with (checkpoints need only the latter)
    _tied_weights_keys: dict[str, str] = {}
    # what a newly initialised head is, for the load report
    _head_description: str = ""

    def __init__(self, config: BertConfig):
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}"
                + (f" (model_type {config.model_type!r}: load it with the Auto classes or its own classes)"
                   if hasattr(config, "model_type") else "")
            )
        config.validate()
        self.config = config

    def post_init(self) -> None:
        """Tie weights, then initialise them (skipped inside ``no_init_weights()``)."""
        self.tie_weights()
        if init_weights_enabled():
            self.init_weights()

    # ----------------------------------------------------------------- init
    @torch.no_grad()
    def init_weights(self) -> None:
        """BERT initialisation: normal(0, initializer_range) weights, zero biases, unit LayerNorm."""
        self.apply(self._init_module)
        for m in self.modules():  # a tied decoder may have overwritten the padding row
            if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()

    @torch.no_grad()
    def _init_module(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif isinstance(module, BertEmbeddings):
            module.position_ids.copy_(torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
        bias = getattr(module, "bias", None)
        if not isinstance(module, (nn.Linear, nn.LayerNorm)) and isinstance(bias, nn.Parameter):
            bias.zero_()  # the MLM output bias (cls.predictions.bias)

    def tie_weights(self) -> None:
        """Share the MLM decoder with the word embeddings (when the config ties them)."""

    @classmethod
    def tied_weights(cls, config: BertConfig) -> dict[str, str]:
        """``{tied parameter: the parameter it shares}`` for this class under ``config``."""
        keys = dict(cls._tied_weights_keys)
        if not config.tie_word_embeddings:
            keys = {t: s for t, s in keys.items() if not s.endswith("word_embeddings.weight")}
        return keys

    @torch.no_grad()
    def init_missing(self, keys: list[str]) -> None:
        """BERT's initialisation of the parameters ``keys`` only, and of the non-persistent buffers.

        For a model whose other parameters came from a checkpoint (their values are kept).
        """
        for key in keys:
            owner_name, _, attr = key.rpartition(".")
            owner = self.get_submodule(owner_name)
            param = getattr(owner, attr)
            if isinstance(owner, nn.LayerNorm):
                param.fill_(1.0 if attr == "weight" else 0.0)
            elif attr == "bias":
                param.zero_()
            else:
                param.normal_(0.0, self.config.initializer_range)
                if isinstance(owner, nn.Embedding) and owner.padding_idx is not None:
                    param[owner.padding_idx].zero_()
        for module in self.modules():
            if isinstance(module, BertEmbeddings):
                module.position_ids.copy_(torch.arange(module.position_ids.shape[-1]).expand((1, -1)))

    # ----------------------------------------------------------------- conveniences
    @property
    def base_model(self) -> "BertModel":
        return getattr(self, self.base_model_prefix, self)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.word_embeddings

    def get_output_embeddings(self) -> nn.Linear | None:
        return None

    def set_input_embeddings(self, new: nn.Embedding) -> None:
        self.base_model.embeddings.word_embeddings = new

    def set_output_embeddings(self, new: nn.Linear) -> None:
        """Replace the vocabulary projection (heads that have one override this)."""
        raise NotImplementedError(f"{type(self).__name__} has no output embeddings")

    @torch.no_grad()
    def resize_token_embeddings(self, new_num_tokens: int) -> nn.Embedding:
        """Grow or shrink the vocabulary: existing rows are kept, new rows get the model's init.

        Updates ``config.vocab_size`` and keeps the vocabulary projection (the MLM decoder and its
        bias) tied or, untied, sized to match with its existing rows kept.
        """
        if new_num_tokens < 1:
            raise ValueError(f"new_num_tokens must be >= 1, got {new_num_tokens}")
        old = self.get_input_embeddings()
        n_old, dim = old.weight.shape
        if new_num_tokens == n_old:
            return old
        new = nn.Embedding(new_num_tokens, dim, padding_idx=old.padding_idx if
                           old.padding_idx is not None and old.padding_idx < new_num_tokens else None)
        new.to(device=old.weight.device, dtype=old.weight.dtype)
        self._init_module(new)
        keep = min(n_old, new_num_tokens)
        new.weight[:keep] = old.weight[:keep]
        self.set_input_embeddings(new)
        decoder = self.get_output_embeddings()  # None for a bare encoder or decoder
        if decoder is not None:
            w = decoder.weight
            new_decoder = nn.Linear(dim, new_num_tokens, bias=decoder.bias is not None, device=w.device,
                                    dtype=w.dtype)
            if not self.config.tie_word_embeddings:
                self._init_module(new_decoder)
                new_decoder.weight[:keep] = w[:keep]
            if decoder.bias is not None:
                new_decoder.bias.zero_()
                new_decoder.bias[:keep] = decoder.bias[:keep]
            self.set_output_embeddings(new_decoder)
        self.config.vocab_size = new_num_tokens
        self.tie_weights()
        return new

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def num_parameters(self, only_trainable: bool = False) -> int:
        """Number of (unique) parameters, like transformers' ``num_parameters``."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not only_trainable)

    # ----------------------------------------------------------------- checkpoints
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any):
        """Load config.json + weights from a folder, a model id in the local HF cache, or a config.

        Keyword arguments that are config fields override the saved config (``num_labels=5``). Others:
        ``config``, ``cache_dir``, ``dtype``, ``device``, ``ignore_mismatched_sizes``,
        ``output_loading_info``. Never touches the network.
        """
        return load_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike, tokenizer: Any = None, **kwargs: Any) -> Path:
        """Write config.json + model.safetensors (and the tokenizer's files) atomically."""
        from bertkit.checkpoint import save_pretrained

        return save_pretrained(self, save_directory, tokenizer=tokenizer, **kwargs)


# ---------------------------------------------------------------------------------------- BertModel


def _check_ids(name: str, ids: torch.Tensor, limit: int, limit_name: str, check_values: bool = True) -> None:
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"{name} must hold integer ids, got dtype {ids.dtype}")
    if not check_values or ids.numel() == 0:
        return
    lo, hi = torch.aminmax(ids)
    lo, hi = int(lo), int(hi)
    if lo < 0 or hi >= limit:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} contains {bad}, outside [0, {limit}) ({limit_name}={limit})")


class BertModel(BertPreTrainedModel):
    """The bare encoder: embeddings, N transformer layers and (optionally) the pooler.

    ``pack_padding`` (default True): on padded batches, when neither attentions nor hidden states are
    requested, per-token work runs on the real tokens only and padding positions of
    ``last_hidden_state`` are zeros (transformers computes meaningless values there). Real tokens are
    unaffected. Set it to False to compute padding positions as transformers does.
    """

    pack_padding: bool = True
    # False: a trusted caller (serving ids its own tokenizer made) skips the id-range checks, which
    # read the ids on the host; shapes and dtypes are still checked. torch.compile skips them anyway.
    check_inputs: bool = True

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()

    def _validate_inputs(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        check_values: bool = True,
    ) -> tuple[int, int]:
        """Cheap checks that turn deep IndexErrors into messages naming the value and the limit.

        Shapes and dtypes are always checked; id ranges only with ``check_values`` (a host sync).
        """
        cfg = self.config
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        for name, t in (("input_ids", input_ids), ("attention_mask", attention_mask),
                        ("token_type_ids", token_type_ids), ("position_ids", position_ids),
                        ("inputs_embeds", inputs_embeds)):
            if t is not None and not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}; use the tokenizer's "
                                f"return_tensors='pt' or torch.tensor({name})")
        if input_ids is not None:
            if input_ids.dim() != 2:
                raise ValueError(
                    f"input_ids must have shape (batch, seq_len), got {tuple(input_ids.shape)}"
                    + ("; add a batch dimension with input_ids.unsqueeze(0)" if input_ids.dim() == 1 else "")
                )
            shape = tuple(input_ids.shape)
            _check_ids("input_ids", input_ids, cfg.vocab_size, "vocab_size", check_values)
        else:
            width = self.embeddings.word_embeddings.embedding_dim  # ELECTRA embeds narrower than hidden_size
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != width:
                raise ValueError(
                    f"inputs_embeds must have shape (batch, seq_len, {width}), "
                    f"got {tuple(inputs_embeds.shape)}"
                )
            shape = tuple(inputs_embeds.shape[:2])
        B, N = shape
        if B == 0 or N == 0:
            name = "input_ids" if input_ids is not None else "inputs_embeds"
            given = input_ids if input_ids is not None else inputs_embeds
            raise ValueError(f"{name} has shape {tuple(given.shape)}: "
                             f"an empty batch or empty sequences; every row needs at least one token")
        if position_ids is None and N > cfg.max_position_embeddings:
            raise ValueError(
                f"sequence length {N} exceeds max_position_embeddings={cfg.max_position_embeddings}; "
                f"truncate the input to at most {cfg.max_position_embeddings} tokens"
            )
        if token_type_ids is not None:
            if tuple(token_type_ids.shape) != shape:
                raise ValueError(
                    f"token_type_ids has shape {tuple(token_type_ids.shape)} but the input has shape {shape}"
                )
            _check_ids("token_type_ids", token_type_ids, cfg.type_vocab_size, "type_vocab_size", check_values)
        if position_ids is not None:
            if position_ids.dim() != 2 or position_ids.shape[1] != N or position_ids.shape[0] not in (1, B):
                raise ValueError(
                    f"position_ids has shape {tuple(position_ids.shape)} but the input has shape {shape}"
                )
            _check_ids("position_ids", position_ids, cfg.max_position_embeddings, "max_position_embeddings",
                       check_values)
        if attention_mask is not None:
            ok = (attention_mask.dim() == 2 and tuple(attention_mask.shape) == shape) or (
                attention_mask.dim() == 3 and tuple(attention_mask.shape) == (B, N, N)
            )
            if not ok:
                raise ValueError(
                    f"attention_mask has shape {tuple(attention_mask.shape)} but the input has shape {shape} "
                    f"(expected {shape} or {(B, N, N)})"
                )
        return B, N

    def _embed(self, input_ids: torch.Tensor | None, token_type_ids: torch.Tensor | None,
               position_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> torch.Tensor:
        """The encoder's input (B, N, H); ELECTRA adds a projection from its narrower embeddings."""
        return self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, N)
        attention_mask: torch.Tensor | None = None,  # (B, N): 1 = token, 0 = padding
        token_type_ids: torch.Tensor | None = None,  # (B, N)
        position_ids: torch.Tensor | None = None,  # (B, N)
        inputs_embeds: torch.Tensor | None = None,  # (B, N, H)
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple:
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = cfg.return_dict if return_dict is None else return_dict
        # Id-range checks, the all-ones mask shortcut and packing each read a tensor on the host (a
        # device sync and a graph break): a compiled graph skips all three, check_inputs=False the first.
        compiling = torch.compiler.is_compiling()
        self._validate_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              check_values=self.check_inputs and not compiling)

        x = self._embed(input_ids, token_type_ids, position_ids, inputs_embeds)  # (B, N, H)
        pack = self.pack_padding and not (output_attentions or output_hidden_states)
        mask = AttentionMask.build(attention_mask, pack=pack, sync=not compiling, hidden_size=cfg.hidden_size)
        if mask.packed:  # per-token work on real tokens only (padding outputs are zeros, not computed)
            last, hidden_states, attentions = self.encoder(mask.pack(x), mask, False, False)
            last = mask.unpack(last)
        else:
            last, hidden_states, attentions = self.encoder(x, mask, output_attentions, output_hidden_states)
        pooled = self.pooler(last) if self.pooler is not None else None  # (B, H)
        out = BaseModelOutputWithPooling(
            last_hidden_state=last, pooler_output=pooled, hidden_states=hidden_states, attentions=attentions
        )
        return out if return_dict else out.to_tuple()
