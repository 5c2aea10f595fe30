"""The BERT encoder in one readable file (in the spirit of nanoGPT's model.py).

Module attribute paths equal transformers' BERT module paths, so ``state_dict()`` keys are the keys
of every BERT checkpoint with no mapping table: ``embeddings.word_embeddings``,
``encoder.layer.N.attention.self.query``, ``encoder.layer.N.attention.output.dense/LayerNorm``,
``encoder.layer.N.intermediate.dense``, ``encoder.layer.N.output.dense/LayerNorm``, ``pooler.dense``.

Shapes: B batch, N sequence length, H hidden size, h heads, d = H / h head size, I intermediate size.

Weight initialisation is kept apart from construction (as in torchtitan): modules declare their
parameters, ``BertPreTrainedModel.init_weights`` applies BERT's initialisation (normal with
``initializer_range``) to a whole model once, and ``from_pretrained`` builds on the meta device,
assigns the checkpoint's tensors and initialises only the parameters the checkpoint lacks.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig
from .outputs import BaseModelOutputWithPooling

__all__ = [
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


# ---------------------------------------------------------------------------------------- packing


class PackedBatch:
    """The real (non-padding) tokens of a padded (B, N) batch, flattened to (T, ...) rows.

    Every per-token op (projections, feed-forward, LayerNorm) runs on the T real tokens only; attention
    re-pads q/k/v to (B, N) for SDPA. On batches of variable-length sentences this skips the padding's
    share of the compute. Padding positions of the outputs are zeros.
    """

    def __init__(self, attention_mask: torch.Tensor):  # (B, N) 0/1
        self.batch, self.seq_len = attention_mask.shape
        self.index = attention_mask.reshape(-1).nonzero().squeeze(1)  # (T,)

    def pack(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, C) -> (T, C)
        return x.reshape(self.batch * self.seq_len, -1).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:  # (T, C) -> (B, N, C), zeros at padding
        # In place on a fresh buffer (autograd-safe) saves the clone that out-of-place index_copy makes.
        out = x.new_zeros(self.batch * self.seq_len, x.shape[-1]).index_copy_(0, self.index, x)
        return out.view(self.batch, self.seq_len, -1)


# ---------------------------------------------------------------------------------------- modules


class BertEmbeddings(nn.Module):
    """word + position + token-type embeddings, summed, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
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

    fused_qkv: bool = True

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
        hidden_states: torch.Tensor,  # (B, N, H), or (T, H) real tokens when packed
        attention_mask: torch.Tensor | None = None,  # bool (B, 1, 1|N, N), True = attend; None = all
        output_attentions: bool = False,
        packed: PackedBatch | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:  # like hidden_states; (B, h, N, N) or None
        h, d = self.num_attention_heads, self.attention_head_size
        if self.fused_qkv:
            # One GEMM for q, k and v; the parameters stay separate so checkpoint keys are unchanged.
            w = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # (3H, H)
            b = torch.cat([self.query.bias, self.key.bias, self.value.bias])  # (3H,)
            qkv = F.linear(hidden_states, w, b)  # (B, N, 3H) or (T, 3H)
        else:
            qkv = torch.cat([self.query(hidden_states), self.key(hidden_states), self.value(hidden_states)], -1)
        if packed is not None:
            qkv = packed.unpack(qkv)  # (B, N, 3H)
        B, N, _ = qkv.shape
        q, k, v = qkv.view(B, N, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)  # each (B, h, N, d)
        if output_attentions:
            scores = torch.matmul(q, k.transpose(-1, -2)) * (d ** -0.5)  # (B, h, N, N)
            if attention_mask is not None:
                scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
            probs = scores.softmax(dim=-1)
            y = torch.matmul(self.dropout(probs), v)  # (B, h, N, d)
        else:
            probs = None
            p = self.dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=p)
        y = y.transpose(1, 2).reshape(B, N, h * d)  # (B, N, H)
        return (packed.pack(y) if packed is not None else y), probs


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
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, output_attentions: bool = False,
        packed: PackedBatch | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        y, probs = self.self(hidden_states, attention_mask, output_attentions, packed)
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
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, output_attentions: bool = False,
        packed: PackedBatch | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attention_output, probs = self.attention(hidden_states, attention_mask, output_attentions, packed)
        return self.output(self.intermediate(attention_output), attention_output), probs


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, N, H)
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        packed: PackedBatch | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        all_hidden = [hidden_states] if output_hidden_states else None
        all_probs = [] if output_attentions else None
        for layer in self.layer:
            hidden_states, probs = layer(hidden_states, attention_mask, output_attentions, packed)
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

_INIT_WEIGHTS = contextvars.ContextVar("bertkit_init_weights", default=True)


@contextlib.contextmanager
def no_init_weights() -> Iterator[None]:
    """Build models without running BERT's initialisation (from_pretrained overwrites the weights)."""
    token = _INIT_WEIGHTS.set(False)
    try:
        yield
    finally:
        _INIT_WEIGHTS.reset(token)


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
        if not isinstance(config, BertConfig):
            raise TypeError(f"{type(self).__name__} needs a BertConfig, got {type(config).__name__}")
        config.validate()
        self.config = config

    def post_init(self) -> None:
        """Tie weights, then initialise them (skipped inside ``no_init_weights()``)."""
        self.tie_weights()
        if _INIT_WEIGHTS.get():
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

    # ----------------------------------------------------------------- conveniences
    @property
    def base_model(self) -> "BertModel":
        return getattr(self, self.base_model_prefix, self)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.word_embeddings

    def get_output_embeddings(self) -> nn.Linear | None:
        return None

    @torch.no_grad()
    def resize_token_embeddings(self, new_num_tokens: int) -> nn.Embedding:
        """Grow or shrink the vocabulary: existing rows are kept, new rows get BERT's init.

        Updates ``config.vocab_size`` and keeps the MLM decoder (and its bias) tied and sized to match.
        """
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
        self.base_model.embeddings.word_embeddings = new
        decoder = self.get_output_embeddings()
        if decoder is not None:
            bias = self.cls.predictions.bias
            new_bias = torch.zeros(new_num_tokens, dtype=bias.dtype, device=bias.device)
            new_bias[:keep] = bias[:keep]
            self.cls.predictions.bias = nn.Parameter(new_bias)
            new_decoder = nn.Linear(dim, new_num_tokens, device=bias.device, dtype=bias.dtype)
            if not self.config.tie_word_embeddings:
                self._init_module(new_decoder)
                new_decoder.weight[:keep] = decoder.weight[:keep]
            self.cls.predictions.decoder = new_decoder
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
        from bertkit.checkpoint import load_pretrained

        return load_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike, tokenizer: Any = None, **kwargs: Any) -> Path:
        """Write config.json + model.safetensors (and the tokenizer's files) atomically."""
        from bertkit.checkpoint import save_pretrained

        return save_pretrained(self, save_directory, tokenizer=tokenizer, **kwargs)


# ---------------------------------------------------------------------------------------- BertModel


def _check_ids(name: str, ids: torch.Tensor, limit: int, limit_name: str) -> None:
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"{name} must hold integer ids, got dtype {ids.dtype}")
    if ids.numel() == 0:
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
    ) -> tuple[int, int]:
        """Cheap checks that turn deep IndexErrors into messages naming the value and the limit."""
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
            _check_ids("input_ids", input_ids, cfg.vocab_size, "vocab_size")
        else:
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != cfg.hidden_size:
                raise ValueError(
                    f"inputs_embeds must have shape (batch, seq_len, {cfg.hidden_size}), "
                    f"got {tuple(inputs_embeds.shape)}"
                )
            shape = tuple(inputs_embeds.shape[:2])
        B, N = shape
        if B == 0 or N == 0:
            name = "input_ids" if input_ids is not None else "inputs_embeds"
            raise ValueError(f"{name} has shape {tuple((input_ids if input_ids is not None else inputs_embeds).shape)}: "
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
            _check_ids("token_type_ids", token_type_ids, cfg.type_vocab_size, "type_vocab_size")
        if position_ids is not None:
            if position_ids.dim() != 2 or position_ids.shape[1] != N or position_ids.shape[0] not in (1, B):
                raise ValueError(
                    f"position_ids has shape {tuple(position_ids.shape)} but the input has shape {shape}"
                )
            _check_ids("position_ids", position_ids, cfg.max_position_embeddings, "max_position_embeddings")
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

    @staticmethod
    def _sdpa_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """(B, N) 0/1 or (B, N, N) mask -> bool (B, 1, 1|N, N) with True = attend; None when nothing is masked."""
        if attention_mask is None:
            return None
        mask = attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0
        if bool(mask.all()):
            return None  # lets SDPA take its fastest kernel
        return mask[:, None, None, :] if mask.dim() == 2 else mask[:, None, :, :]

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
        self._validate_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)

        x = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)  # (B, N, H)
        mask = self._sdpa_mask(attention_mask)
        if (self.pack_padding and mask is not None and attention_mask.dim() == 2
                and not (output_attentions or output_hidden_states)):
            # Fast path: per-token work on real tokens only (padding outputs are zeros, not computed).
            packed = PackedBatch(attention_mask)
            last, hidden_states, attentions = self.encoder(packed.pack(x), mask, False, False, packed)
            last = packed.unpack(last)
        else:
            last, hidden_states, attentions = self.encoder(x, mask, output_attentions, output_hidden_states)
        pooled = self.pooler(last) if self.pooler is not None else None  # (B, H)
        out = BaseModelOutputWithPooling(
            last_hidden_state=last, pooler_output=pooled, hidden_states=hidden_states, attentions=attentions
        )
        return out if return_dict else out.to_tuple()
