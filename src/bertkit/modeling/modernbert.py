"""ModernBERT in one readable file, to read beside ``model.py`` (BERT) (Warner et al. 2024).

Module attribute paths equal transformers' ModernBERT paths, so ``state_dict()`` keys are checkpoint
keys: ``model.embeddings.tok_embeddings/norm``, ``model.layers.N.attn_norm`` (absent in layer 0),
``model.layers.N.attn.Wqkv/Wo``, ``model.layers.N.mlp_norm``, ``model.layers.N.mlp.Wi/Wo``,
``model.final_norm``, and the heads' ``head.dense/norm``, ``decoder`` (masked LM, tied to the token
embeddings), ``classifier``.

Shapes: B batch, N sequence length, H hidden size, h heads, d = H / h head size, I intermediate
size, T packed rows (the real tokens of a padded batch, see ``packing.py``), W = local_attention / 2
the half window, V vocabulary.

What ModernBERT changes from BERT, and why (each change is marked "vs BERT" where it happens):

1. **Rotary positions** instead of a learned position table: q and k are rotated by an angle that
   grows with the position, so their dot product depends on the *distance* between two tokens. No
   table caps the length; ``max_position_embeddings`` (8,192) is what the model was trained on.
   Global layers use a large base (``global_rope_theta``, 160k: slow rotations that stay distinct
   over 8k tokens), local layers a small one (``local_rope_theta``, 10k: they only see a window).
2. **Local attention** in most layers: only every ``global_attn_every_n_layers``-th layer (from layer
   0) attends over the whole text; the others see the ``local_attention`` tokens around each token
   (``|i - j| <= W``). Attention costs N x N in a global layer and N x (2W + 1) in a local one, so a
   long text pays the quadratic price in a third of the layers. Here local attention runs in blocks
   of queries against their window of keys: no N x N score or mask is ever built.
3. **Pre-norm**: each sublayer normalises its *input* and adds its output to an un-normalised
   residual stream (``x + attn(norm(x))``), where BERT normalises after the add. Gradients flow
   through the residual unchanged, which lets deep models train stably at high learning rates. The
   embeddings are already normalised, so layer 0 has no ``attn_norm``; a ``final_norm`` closes the stack.
4. **GeGLU feed-forward**: ``Wo(gelu(a) * g)`` with ``a, g = Wi(x)`` split in two, instead of
   ``dense(gelu(dense(x)))``: the gate lets each unit scale its own output, better per parameter.
5. **No biases** in the linear layers and LayerNorms (``attention_bias``, ``mlp_bias``, ``norm_bias``):
   they barely help and cost memory traffic.
6. **No token types and no pooler**: one segment embedding was never needed, and classification
   reads the first token or the mean of the tokens (``classifier_pooling``) through ``head``.
7. **Unpadded execution**: bertkit already runs every per-token op on the real tokens of a padded
   batch (``AttentionMask`` in ``packing.py``); the window applies within each text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .base import PreTrainedModel
from .config import SharedConfigFields, preset_size
from .layers import CheckpointedLayer, get_activation
from .loading import no_init_weights
from .outputs import BaseModelOutput
from .packing import AttentionMask, inference_rows, packs
from .task_heads import (
    EncoderHeadMixin,
    MaskedLMHead,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    SequenceClassificationHead,
    TokenClassificationHead,
    check_span_config,
    masked_lm_logits_and_loss,
)

__all__ = [
    "ModernBertConfig",
    "ModernBertForMaskedLM",
    "ModernBertForMultipleChoice",
    "ModernBertForQuestionAnswering",
    "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification",
    "ModernBertModel",
    "ModernBertPreTrainedModel",
    "local_attention",
]

GLOBAL, LOCAL = "full_attention", "sliding_attention"  # transformers' layer_types names


@dataclass
class ModernBertConfig(SharedConfigFields):
    """ModernBERT hyper-parameters with transformers' names and defaults (ModernBERT-base).

    Reads both config.json layouts: the original one (``global_rope_theta``, ``local_rope_theta``,
    ``global_attn_every_n_layers``) and transformers' newer one (``layer_types``, ``rope_parameters``);
    writes both, so either reader finds what it looks for.
    """

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int = 50283
    eos_token_id: int = 50282
    bos_token_id: int = 50281
    cls_token_id: int = 50281
    sep_token_id: int = 50282
    global_rope_theta: float = 160000.0
    attention_bias: bool = False
    attention_dropout: float = 0.0
    global_attn_every_n_layers: int = 3
    local_attention: int = 128
    local_rope_theta: float = 10000.0
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    deterministic_flash_attn: bool = False
    sparse_prediction: bool = False
    sparse_pred_ignore_index: int = -100
    layer_types: list[str] | None = None
    rope_parameters: dict[str, Any] | None = None
    model_type: str = "modernbert"

    def __post_init__(self) -> None:
        super().__post_init__()
        rope = self.rope_parameters or {}
        for kind, name in ((GLOBAL, "global_rope_theta"), (LOCAL, "local_rope_theta")):
            params = rope.get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise NotImplementedError(
                    f"rope_parameters[{kind!r}] rope_type {params['rope_type']!r} is not supported; "
                    "bertkit's ModernBERT implements the default rotary embedding"
                )
            if "rope_theta" in params:
                setattr(self, name, float(params["rope_theta"]))
        self.rope_parameters = None  # the two thetas hold it; to_dict writes it back from them
        if self.layer_types is None and isinstance(self.global_attn_every_n_layers, int):
            n = max(1, self.global_attn_every_n_layers)
            self.layer_types = [LOCAL if i % n else GLOBAL for i in range(self.num_hidden_layers)]

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def sliding_window(self) -> int:
        """W: each token of a local layer sees W tokens on each side (``local_attention`` // 2)."""
        return self.local_attention // 2

    @property
    def use_return_dict(self) -> bool:
        return self.return_dict

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["rope_parameters"] = {
            LOCAL: {"rope_type": "default", "rope_theta": self.local_rope_theta},
            GLOBAL: {"rope_type": "default", "rope_theta": self.global_rope_theta},
        }
        return out

    def validate(self) -> None:
        """Raise for sizes that cannot build a model: head split, rotary pairs, the window, layer kinds."""
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not a multiple of num_attention_heads "
                f"({self.num_attention_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"head size hidden_size / num_attention_heads = {self.head_dim} is odd; rotary embeddings "
                "rotate pairs of dimensions, so it must be even"
            )
        if isinstance(self.local_attention, bool) or not isinstance(self.local_attention, int):
            raise ValueError(f"local_attention must be an integer, got {self.local_attention!r}")
        if self.local_attention < 2 or self.local_attention % 2:
            raise ValueError(
                f"local_attention ({self.local_attention}) must be a positive even number: the window "
                "is local_attention // 2 tokens on each side of a token"
            )
        types = self.layer_types or []
        if len(types) != self.num_hidden_layers or set(types) - {GLOBAL, LOCAL}:
            raise ValueError(
                f"layer_types must list {GLOBAL!r} or {LOCAL!r} for each of the {self.num_hidden_layers} "
                f"layers (num_hidden_layers); got {types!r}"
            )
        if self.classifier_pooling not in ("cls", "mean"):
            raise ValueError(f"classifier_pooling must be 'cls' or 'mean', got {self.classifier_pooling!r}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"pad_token_id ({self.pad_token_id}) is not a row of the {self.vocab_size}-token vocabulary "
                "(vocab_size); give the padding token's id"
            )

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModernBertConfig:
        """A new model of BERT's preset size ``name`` (tiny ... large: the same layers, width and
        64-wide heads), with a GeGLU feed-forward of about BERT's parameters (8/3 x hidden, rounded
        to 64, where BERT's plain one is 4 x hidden) and BERT's 512 positions."""
        layers, hidden = preset_size(name)
        kwargs: dict[str, Any] = {
            "num_hidden_layers": layers,
            "hidden_size": hidden,
            "num_attention_heads": hidden // 64,
            "intermediate_size": 64 * round(8 * hidden / 3 / 64),
            "max_position_embeddings": 512,
            **overrides,
        }
        config = cls.from_dict(kwargs)
        config.validate()
        return config

    @classmethod
    def from_json_file(cls, path: str | Path) -> ModernBertConfig:
        """Read config.json; an inconsistent config names the file."""
        config = super().from_json_file(path)
        try:
            config.validate()
        except (ValueError, NotImplementedError) as e:
            raise type(e)(f"{path}: {e}") from None
        return config


# ---------------------------------------------------------------------------------------- rotary positions
# vs BERT: no position table. Position p turns each pair (x_i, x_{i + d/2}) of q and k by the angle
# p * theta^(-2i/d); the score q_m . k_n then depends on m - n only.


def rotary_tables(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:  # positions (...) -> cos, sin (..., d/2)
    """cos and sin of each position's d/2 angles, computed in float32 and rounded to ``dtype`` as
    transformers rounds its (..., d) tables (which hold each angle twice)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))  # (d/2,)
    freqs = positions[..., None].float() * inv_freq.to(positions.device)  # (..., d/2)
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def rotate_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """q and k of ``qkv`` (..., 3, h, d) turned, v copied, into a new contiguous tensor; ``cos``/``sin``
    (..., d/2). Dimension i pairs with i + d/2: ``(x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)``.

    Written half by half into one output: no (..., d) tables, no concatenation, no negated copy (in a
    profile of a 512-token bf16 forward, the step written as transformers writes it cost more than
    all the projections)."""
    half = qkv.shape[-1] // 2
    qk = qkv[..., :2, :, :]
    x1, x2 = qk[..., :half], qk[..., half:]
    c, s = cos[..., None, None, :], sin[..., None, None, :]  # broadcast over q/k and the heads
    if qkv.requires_grad and torch.is_grad_enabled():  # training: out= has no gradient, so build it
        qk = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)  # (..., 2, h, d)
        return torch.cat((qk, qkv[..., 2:, :, :]), dim=-3)
    out = torch.empty_like(qkv)
    torch.addcmul(x1 * c, x2, s, value=-1, out=out[..., :2, :, :half])
    torch.addcmul(x2 * c, x1, s, out=out[..., :2, :, half:])
    out[..., 2, :, :] = qkv[..., 2, :, :]
    return out


# ---------------------------------------------------------------------------------------- attention


def _band(n_q: int, n_k: int, offset: int, window: int, device: torch.device) -> torch.Tensor:
    """bool (n_q, n_k): query i (at position i + offset in key numbering) sees keys within ``window``."""
    i = torch.arange(n_q, device=device)[:, None] + offset
    j = torch.arange(n_k, device=device)[None, :]
    return (j - i).abs() <= window


def _no_empty_rows(mask: torch.Tensor, offset: int) -> torch.Tensor:
    """Off the CPU, a query that sees no key (a padding slot far from any token) sees itself instead.

    On the CPU, SDPA gives such a row zeros, as transformers' own SDPA does, so padding positions match
    it too. Other devices' kernels are not all known to do so, and a NaN in a padding row would reach
    the real tokens through the next layer's product (0 x NaN); the padding row's value is never read.
    """
    if mask.device.type == "cpu":
        return mask
    diag = _band(mask.shape[-2], mask.shape[-1], offset, 0, mask.device)
    return mask | (diag & ~mask.any(-1, keepdim=True))


def local_attention(
    q: torch.Tensor,  # (B, h, N, d)
    k: torch.Tensor,  # (B, h, N, d)
    v: torch.Tensor,  # (B, h, N, d)
    key_mask: torch.Tensor | None,  # bool (B, N), True = a token; None = all
    window: int,  # W: keys with |i - j| <= W
    dropout_p: float = 0.0,
    block: int | None = None,
) -> torch.Tensor:  # (B, h, N, d)
    """Sliding-window attention in blocks: each block of queries attends to its own keys plus W on
    either side, so memory and work grow as N x (block + 2W), never N x N (vs BERT: one N x N softmax)."""
    B, h, N, d = q.shape
    block = block or max(window, 32)  # measured: W-query blocks (keys 3W) beat 2W and 4W at 512-8,192 tokens
    nb = -(-N // block)
    span = block + 2 * window  # the keys one block of queries can see
    valid = torch.ones(B, N, dtype=torch.bool, device=q.device) if key_mask is None else key_mask
    pad_q = nb * block - N
    q = F.pad(q, (0, 0, 0, pad_q))  # (B, h, nb * block, d)
    k, v = (F.pad(t, (0, 0, window, window + pad_q)) for t in (k, v))  # (B, h, nb * block + 2W, d)
    valid = F.pad(valid, (window, window + pad_q), value=False)  # (B, nb * block + 2W)
    qb = q.view(B, h, nb, block, d).transpose(1, 2).reshape(B * nb, h, block, d)
    kb, vb = (t.unfold(2, span, block).permute(0, 2, 1, 4, 3).reshape(B * nb, h, span, d) for t in (k, v))
    keys = valid.unfold(1, span, block).reshape(B * nb, 1, 1, span)  # (B*nb, 1, 1, span)
    mask = _no_empty_rows(_band(block, span, window, window, q.device) & keys, window)  # (B*nb, 1, block, span)
    y = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, dropout_p=dropout_p)  # (B*nb, h, block, d)
    return y.view(B, nb, h, block, d).transpose(1, 2).reshape(B, h, nb * block, d)[:, :, :N]


def attend(
    x: torch.Tensor,  # (B, N, 3, h, d): rotated q, k and v of each token
    key_mask: torch.Tensor | None,  # bool (B, N), True = a token; None = all
    window: int | None,  # W of a local layer; None = global
    dropout_p: float,
    output_attentions: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:  # (B, N, h, d); (B, h, N, N) probabilities or None
    """One layer's attention over padded sequences: global, or local within the window."""
    B, N = x.shape[:2]
    if window is not None and N - 1 <= window:
        window = None  # the window covers the whole text: a global layer's attention
    q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, h, N, d)
    if window is not None and not output_attentions and N > 4 * window:
        return local_attention(q, k, v, key_mask, window, dropout_p).transpose(1, 2), None
    mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, N)
    if window is not None:  # a short text: one (N, N) band
        band = _band(N, N, 0, window, x.device)
        mask = _no_empty_rows(band if mask is None else band & mask, 0)  # (B|1, 1, N, N)
    if output_attentions:
        scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, h, N, N)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(F.dropout(probs, dropout_p), v)
        return y.transpose(1, 2), probs
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    return y.transpose(1, 2), None


class ModernBertAttention(nn.Module):
    """Fused q/k/v projection (``Wqkv``), rotary positions, global or local attention, ``Wo``.

    vs BERT: one (H, 3H) ``Wqkv`` instead of query/key/value, no biases, q and k rotated, and a window
    in local layers.
    """

    def __init__(self, config: ModernBertConfig, layer_idx: int):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.is_global = config.layer_types[layer_idx] == GLOBAL
        self.window = None if self.is_global else config.sliding_window
        self.attention_dropout = config.attention_dropout
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.out_drop = nn.Dropout(config.attention_dropout) if config.attention_dropout > 0 else nn.Identity()

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, N, H), or (T, H) when the mask is packed
        rope: tuple[torch.Tensor, torch.Tensor],  # cos, sin: (B|1, N, d/2) or (T, d/2)
        mask: AttentionMask,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:  # like hidden_states; (B, h, N, N) or None
        qkv = self.Wqkv(hidden_states)
        qkv = qkv.view(*qkv.shape[:-1], 3, self.num_heads, self.head_dim)  # (..., 3, h, d)
        qkv = rotate_qkv(qkv, *rope)  # q and k turned by their positions
        p = self.attention_dropout if self.training else 0.0
        if mask.packed:
            y, probs = self._grouped(qkv, mask, p), None  # (T, H)
        else:
            keys = None if mask.mask is None else mask.mask[:, 0, 0, :]  # (B, N)
            y, probs = attend(qkv, keys, self.window, p, output_attentions)  # (B, N, h, d)
            y = y.reshape(*hidden_states.shape)
        return self.out_drop(self.Wo(y)), probs

    def _grouped(self, qkv: torch.Tensor, mask: AttentionMask, p: float) -> torch.Tensor:  # (T, 3, h, d) -> (T, H)
        """A packed batch attends one length group at a time, each text padded to its group's longest
        (see ``AttentionMask``); the window applies within each text."""
        h = self.num_heads * self.head_dim
        if not mask.groups:
            return qkv.new_zeros(qkv.shape[0], h)
        out = qkv.new_empty(sum(g.batch * g.seq_len for g in mask.groups), h)
        start = 0
        for g in mask.groups:
            x = qkv.index_select(0, g.src).view(g.batch, g.seq_len, 3, self.num_heads, self.head_dim)
            keys = None if g.mask is None else g.mask[:, 0, 0, :]  # (B_g, N_g)
            y, _ = attend(x, keys, self.window, p)  # (B_g, N_g, h, d)
            out[start : start + g.batch * g.seq_len].view_as(y).copy_(y)
            start += g.batch * g.seq_len
        return out if mask.gather is None else out.index_select(0, mask.gather)


class ModernBertMLP(nn.Module):
    """GeGLU: ``Wo(drop(act(a) * g))`` with ``a, g = Wi(x).chunk(2)``.

    vs BERT: BertIntermediate + BertOutput (dense, GELU, dense, add & norm) become one gated block;
    ``Wi`` is (H, 2I), one half the input and one half the gate. The residual add is the layer's.
    """

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = get_activation(config.hidden_activation)
        self.drop = nn.Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., H) -> (..., H)
        a, gate = self.Wi(hidden_states).chunk(2, dim=-1)  # each (..., I)
        return self.Wo(self.drop(self.act(a) * gate))


def _norm(config: ModernBertConfig) -> nn.LayerNorm:
    return nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)


class ModernBertEncoderLayer(CheckpointedLayer):
    """One pre-norm block: ``x + attn(attn_norm(x))``, then ``x + mlp(mlp_norm(x))``.

    vs BERT (post-norm): ``norm(x + attn(x))``, then ``norm(x + ffn(x))``.
    """

    def __init__(self, config: ModernBertConfig, layer_idx: int):
        super().__init__()
        # The embeddings end in a LayerNorm already: layer 0 does not normalise its input again.
        self.attn_norm = nn.Identity() if layer_idx == 0 else _norm(config)
        self.attn = ModernBertAttention(config, layer_idx)
        self.mlp_norm = _norm(config)
        self.mlp = ModernBertMLP(config)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, N, H) or (T, H)
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: AttentionMask,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        y, probs = self.attn(self.attn_norm(hidden_states), rope, mask, output_attentions)
        hidden_states = hidden_states + y
        return hidden_states + self.mlp(self.mlp_norm(hidden_states)), probs


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, LayerNorm, dropout. vs BERT: no position or token-type tables."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = _norm(config)
        self.drop = nn.Dropout(config.embedding_dropout)

    def forward(
        self, input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None
    ) -> torch.Tensor:  # (B, N) ids or (B, N, H) -> (B, N, H)
        x = self.tok_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        return self.drop(self.norm(x))


# ---------------------------------------------------------------------------------------- models


class ModernBertPreTrainedModel(PreTrainedModel):
    """ModernBERT's config, prefix and initialisation on the shared base.

    vs BERT's initialisation: truncated normals (cut at ``initializer_cutoff_factor`` standard
    deviations); the projections that write into the residual stream (``Wo``, ``head.dense``,
    ``decoder``) are scaled down by sqrt(2 * layers), so the stream's variance does not grow with depth.
    """

    config_class = ModernBertConfig
    base_model_prefix = "model"
    accepts_square_mask = False  # padding masks only: the window is the model's own mask

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.tok_embeddings

    def set_input_embeddings(self, new: nn.Embedding) -> None:
        self.base_model.embeddings.tok_embeddings = new

    @classmethod
    def tied_weights(cls, config: ModernBertConfig) -> dict[str, str]:
        return dict(cls._tied_weights_keys) if config.tie_word_embeddings else {}

    def _std(self, name: str) -> float:
        cfg = self.config
        if name.endswith("classifier"):
            return cfg.hidden_size**-0.5
        if name.endswith(("Wo", "head.dense", "decoder")):
            return cfg.initializer_range / math.sqrt(2.0 * cfg.num_hidden_layers)
        return cfg.initializer_range

    @torch.no_grad()
    def _init_named(self, name: str, module: nn.Module, attr: str | None = None) -> None:
        cut = self.config.initializer_cutoff_factor or 3.0
        if isinstance(module, nn.LayerNorm):
            for a in [attr] if attr else ["weight", "bias"]:
                if getattr(module, a, None) is not None:
                    getattr(module, a).fill_(1.0 if a == "weight" else 0.0)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            std = self._std(name)
            tied = module.weight is self.get_input_embeddings().weight and not isinstance(module, nn.Embedding)
            if attr in (None, "weight") and not tied:
                nn.init.trunc_normal_(module.weight, 0.0, std, -cut * std, cut * std)
            if attr in (None, "bias") and getattr(module, "bias", None) is not None:
                module.bias.zero_()

    @torch.no_grad()
    def init_weights(self) -> None:
        for name, module in self.named_modules():
            self._init_named(name, module)
        self.tie_weights()

    @torch.no_grad()
    def init_missing(self, keys: list[str]) -> None:
        for key in keys:
            owner, _, attr = key.rpartition(".")
            self._init_named(owner, self.get_submodule(owner), attr)


class ModernBertModel(ModernBertPreTrainedModel):
    """The bare encoder: embeddings, N pre-norm layers, the final norm. No pooler.

    ``pack_padding`` (default True): as in BertModel, a padded batch runs its per-token work on the
    real tokens only and padding positions of ``last_hidden_state`` are zeros.
    """

    pack_padding: bool = True

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList([ModernBertEncoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.final_norm = _norm(config)  # vs BERT: pre-norm leaves the last layer's output unnormalised
        self.post_init()

    def _rope(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> dict[bool, tuple[torch.Tensor, torch.Tensor]]:  # is_global -> (cos, sin)
        cfg = self.config
        return {
            True: rotary_tables(positions, cfg.head_dim, cfg.global_rope_theta, dtype),
            False: rotary_tables(positions, cfg.head_dim, cfg.local_rope_theta, dtype),
        }

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, N)
        attention_mask: torch.Tensor | None = None,  # (B, N): 1 = token, 0 = padding
        token_type_ids: torch.Tensor | None = None,  # accepted for the common signature; ModernBERT has none
        position_ids: torch.Tensor | None = None,  # (B, N) or (1, N); default 0..N-1
        inputs_embeds: torch.Tensor | None = None,  # (B, N, H)
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutput | tuple:
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = cfg.return_dict if return_dict is None else return_dict
        B, N = self.validate_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)

        x = self.embeddings(input_ids, inputs_embeds)  # (B, N, H)
        if position_ids is None:
            position_ids = torch.arange(N, device=x.device)[None]  # (1, N)
        pack = packs(self, x, self.pack_padding and not (output_attentions or output_hidden_states))
        sync = not torch.compiler.is_compiling()
        mask = AttentionMask.build(attention_mask, pack, sync, cfg.hidden_size, row_multiple=inference_rows(self))
        if mask.packed:  # per-token work on real tokens only; each row keeps its text's position
            x = mask.pack(x)  # (T, H)
            position_ids = position_ids.expand(B, N).reshape(-1).index_select(0, mask.pack_index)  # (T,)
        rope = self._rope(position_ids, x.dtype)  # cos, sin: (T, d/2) or (B|1, N, d/2)
        all_hidden = [x] if output_hidden_states else None
        all_probs = [] if output_attentions else None
        for layer in self.layers:
            x, probs = layer(x, rope[layer.attn.is_global], mask, output_attentions)
            if all_hidden is not None:
                all_hidden.append(x)
            if all_probs is not None:
                all_probs.append(probs)
        x = self.final_norm(x)
        if all_hidden is not None:  # transformers' last hidden state is the normalised one
            all_hidden[-1] = x
        last = mask.unpack(x) if mask.packed else x  # (B, N, H)
        out = BaseModelOutput(
            last_hidden_state=last,
            hidden_states=tuple(all_hidden) if all_hidden is not None else None,
            attentions=tuple(all_probs) if all_probs is not None else None,
        )
        return out if return_dict else out.to_tuple()


# ---------------------------------------------------------------------------------------- heads
# vs BERT: every head reads ``head`` (dense, activation, norm) before its output layer.


class ModernBertPredictionHead(nn.Module):
    """dense, ``classifier_activation``, LayerNorm: the transform before every output layer."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = get_activation(config.classifier_activation)
        self.norm = _norm(config)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., H) -> (..., H)
        return self.norm(self.act(self.dense(hidden_states)))


class _ModernBertHeadModel(EncoderHeadMixin, ModernBertPreTrainedModel):
    """A ModernBertModel under ``self.model`` plus ``head``."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        with no_init_weights():  # the whole model is initialised once, in post_init
            self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)

    def _encode(self, inputs: Any, output_attentions: bool | None, output_hidden_states: bool | None) -> Any:
        out = super()._encode(inputs, output_attentions, output_hidden_states)
        out.text_mask = inputs.attention_mask  # (B, N) for the pooling heads; not an output field
        return out


class ModernBertForMaskedLM(MaskedLMHead, _ModernBertHeadModel):
    """The masked LM (fill-mask), also the pretraining head: ``decoder`` tied to the token embeddings."""

    _head_description = "masked-LM head"
    _tied_weights_keys: dict[str, str] = {"decoder.weight": "model.embeddings.tok_embeddings.weight"}

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        self.post_init()

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.decoder.weight = self.model.embeddings.tok_embeddings.weight

    def get_output_embeddings(self) -> nn.Linear:
        return self.decoder

    def set_output_embeddings(self, new: nn.Linear) -> None:
        self.decoder = new

    def _masked_lm(
        self, sequence_output: torch.Tensor, labels: torch.Tensor | None, sparse: bool | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        sparse = sparse if isinstance(sparse, torch.Tensor) else sparse or self.config.sparse_prediction
        return masked_lm_logits_and_loss(
            self._predict, sequence_output, labels, sparse, vocab_size=self.config.vocab_size
        )

    def _predict(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., H) -> (..., V)
        return self.decoder(self.head(hidden_states))


class _ModernBertClassifier(_ModernBertHeadModel):
    """``head``, dropout, ``classifier`` Linear(H, n)."""

    _num_outputs: int | None = None  # None: num_labels

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.drop = nn.Dropout(config.classifier_dropout)
        n = config.num_labels if self._num_outputs is None else self._num_outputs
        self.classifier = nn.Linear(config.hidden_size, n)
        self.post_init()

    def _classify(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.drop(self.head(features)))

    def _pool(self, out: BaseModelOutput, attention_mask: torch.Tensor | None) -> torch.Tensor:  # (B, H)
        """The first token (``cls``) or the mean over the tokens (``mean``), by ``classifier_pooling``.

        Why mean exists: in a local layer the first token sees only its window, so on long texts the
        mean of every token summarises more of the text."""
        h = out.last_hidden_state
        if self.config.classifier_pooling == "cls":
            return h[:, 0]
        m = torch.ones(h.shape[:2], dtype=h.dtype, device=h.device) if attention_mask is None else attention_mask
        m = m.to(h.dtype).unsqueeze(-1)  # (B, N, 1)
        return (h * m).sum(1) / m.sum(1)


class ModernBertForSequenceClassification(SequenceClassificationHead, _ModernBertClassifier):
    """Sentence(-pair) classification or regression on the pooled text (``classifier_pooling``)."""

    _head_description = "sequence-classification head"

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B, num_labels)
        return self._classify(self._pool(out, out.text_mask))


class ModernBertForTokenClassification(TokenClassificationHead, _ModernBertClassifier):
    """Per-token classification (NER) through ``head``."""

    _head_description = "token-classification head"

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B, N, num_labels)
        return self._classify(out.last_hidden_state)


class ModernBertForQuestionAnswering(QuestionAnsweringHead, _ModernBertClassifier):
    """Extractive QA: start and end logits per token from ``classifier``."""

    _head_description = "question-answering (span) head"

    def __init__(self, config: ModernBertConfig):
        check_span_config(config)
        super().__init__(config)
        # Span logits are normalised over every position, padding included, so padding is computed.
        self.model.pack_padding = False

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B, N, 2)
        return self._classify(out.last_hidden_state)


class ModernBertForMultipleChoice(MultipleChoiceHead, _ModernBertClassifier):
    """Scores each of C choices (B, C, N) from its pooled vector; softmax over the choices. ``cls``
    pooling reads the first real token of each choice (left padding included), as transformers does."""

    _head_description = "multiple-choice head"
    _num_outputs = 1

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B*C, 1)
        mask = out.text_mask  # (B*C, N): the choices are flattened
        if self.config.classifier_pooling == "cls" and mask is not None:
            h = out.last_hidden_state
            first = mask.argmax(dim=-1)  # the first real token of each choice
            return self._classify(h[torch.arange(h.shape[0], device=h.device), first])
        return self._classify(self._pool(out, mask))
