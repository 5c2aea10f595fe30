"""GPT-2: the causal decoder of BERT's family, in one readable file next to ``model.py``.

Module attribute paths equal transformers' GPT-2 paths, so ``state_dict()`` keys are checkpoint keys:
``transformer.wte``, ``transformer.wpe``, ``transformer.h.N.ln_1``, ``transformer.h.N.attn.c_attn``,
``transformer.h.N.attn.c_proj``, ``transformer.h.N.ln_2``, ``transformer.h.N.mlp.c_fc``,
``transformer.h.N.mlp.c_proj``, ``transformer.ln_f`` and ``lm_head`` (tied to ``wte``, so checkpoints
carry it only when untied). GPT-2's projections are ``Conv1D``: a linear layer whose weight is stored
as (in, out), the transpose of ``nn.Linear``; the parameters keep that layout so the checkpoint's
tensors load and save unchanged.

Shapes: B batch, N new tokens, P tokens already in the KV cache, L = P + N, H hidden size, h heads,
d = H / h head size, V vocabulary.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .base import PreTrainedModel
from .config import SharedConfigFields
from .generation import GenerationMixin
from .layers import CheckpointedLayer, attention, get_activation
from .loading import no_init_weights
from .outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from .task_heads import IGNORE_INDEX

__all__ = ["Conv1D", "GPT2Config", "GPT2LMHeadModel", "GPT2Model", "GPT2PreTrainedModel", "KVCache"]


@dataclass
class GPT2Config(SharedConfigFields):
    """GPT-2 hyper-parameters with transformers' field names and defaults (the 124M ``gpt2``)."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None  # None = 4 * n_embd
    activation_function: str = "gelu_new"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    use_cache: bool = True
    bos_token_id: int | None = 50256
    eos_token_id: int | list[int] | None = 50256
    pad_token_id: int | None = None
    model_type: str = "gpt2"

    attribute_map = {  # noqa: RUF012 - class-level name table, as transformers' attribute_map
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    }

    def validate(self) -> None:
        """Raise for sizes that cannot build a model."""
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) is not a multiple of n_head ({self.n_head})")


# ---------------------------------------------------------------------------------------- building blocks


class Conv1D(nn.Module):
    """GPT-2's linear layer: ``y = x @ weight + bias`` with ``weight`` stored as (in, out)."""

    def __init__(self, nf: int, nx: int):  # transformers' argument order: out features, then in features
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return out.view(*x.shape[:-1], self.nf)


class KVCache:
    """Keys and values of every layer, preallocated as (B, h, capacity, d) and filled in place.

    Generation sizes it once for the whole output (no re-allocation per token); a plain forward with
    ``use_cache=True`` starts small and doubles when full.
    """

    def __init__(self, num_layers: int, capacity: int = 0):
        self.num_layers = num_layers
        self.capacity = capacity
        self.length = 0  # tokens stored
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    def get_seq_length(self) -> int:
        """Tokens already in the cache (transformers' name)."""
        return self.length

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, h, N, d) keys/values of ``layer``; returns every key/value so far, (B, h, L, d)."""
        n = k.shape[2]
        end = self.length + n
        buf_k, buf_v = self.keys[layer], self.values[layer]
        if buf_k is None or buf_k.shape[2] < end or buf_k.shape[0] != k.shape[0]:
            size = max(end, self.capacity, 2 * (buf_k.shape[2] if buf_k is not None else 0))
            new_k = k.new_empty(k.shape[0], k.shape[1], size, k.shape[3])
            new_v = v.new_empty(new_k.shape)
            if buf_k is not None and self.length:
                new_k[:, :, : self.length] = buf_k[:, :, : self.length]
                new_v[:, :, : self.length] = buf_v[:, :, : self.length]
            buf_k, buf_v = self.keys[layer], self.values[layer] = new_k, new_v
        buf_k[:, :, self.length : end] = k
        buf_v[:, :, self.length : end] = v
        return buf_k[:, :, :end], buf_v[:, :, :end]

    def advance(self, n: int) -> None:
        """Mark ``n`` more tokens as stored (after every layer has written them)."""
        self.length += n

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Make row i hold what row ``beam_idx[i]`` held (beam search keeps the beams it continues)."""
        for layer in range(self.num_layers):
            for buf in (self.keys[layer], self.values[layer]):
                if buf is not None:  # in place, so the preallocated capacity is kept
                    buf[:, :, : self.length] = buf[beam_idx.to(buf.device), :, : self.length]


class GPT2Attention(nn.Module):
    """Causal multi-head self-attention; reads and extends the KV cache when one is given."""

    def __init__(self, config: GPT2Config, layer_idx: int):
        super().__init__()
        H = config.n_embd
        self.num_heads = config.n_head
        self.head_dim = H // config.n_head
        self.layer_idx = layer_idx
        self.scale = self.head_dim**-0.5 if config.scale_attn_weights else 1.0
        if config.scale_attn_by_inverse_layer_idx:
            self.scale /= layer_idx + 1
        self.c_attn = Conv1D(3 * H, H)
        self.c_proj = Conv1D(H, H)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(
        self,
        x: torch.Tensor,  # (B, N, H)
        mask: torch.Tensor | None,  # bool (B, 1, N, L), True = attend; None = plain causal
        cache: KVCache | None = None,
        output_attentions: bool = False,
        blind: torch.Tensor | None = None,  # bool (B, 1, N, 1): queries that may see no key at all
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, N, _ = x.shape
        q, k, v = self.c_attn(x).view(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)  # (B, h, L, d)
        # Without a mask, only a fresh causal block needs masking: one new token may see the whole cache.
        y, probs = attention(
            q, k, v, mask, output_attentions, self.attn_dropout, is_causal=mask is None and N > 1, scale=self.scale
        )
        if blind is not None:  # as SDPA answers a query with every key masked (transformers' default): zeros
            y = y.masked_fill(blind, 0.0)
        y = y.transpose(1, 2).reshape(B, N, -1)  # (B, N, H)
        return self.resid_dropout(self.c_proj(y)), probs


class GPT2MLP(nn.Module):
    fused_act_names = ("c_fc", "act")  # prepare_for_inference fuses a GELU here into the projection

    def __init__(self, config: GPT2Config):
        super().__init__()
        inner = config.n_inner or 4 * config.n_embd
        self.c_fc = Conv1D(inner, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, inner)
        self.act = get_activation(config.activation_function)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(CheckpointedLayer):
    """One pre-LN block: x + attn(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, config: GPT2Config, layer_idx: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(config)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        cache: KVCache | None,
        output_attentions: bool,
        blind: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        a, probs = self.attn(self.ln_1(x), mask, cache, output_attentions, blind)
        x = a + x
        return self.mlp(self.ln_2(x)) + x, probs


# ---------------------------------------------------------------------------------------- models


class GPT2PreTrainedModel(PreTrainedModel):
    """GPT-2's config, initialisation and embeddings on the shared from_pretrained / save_pretrained."""

    config_class = GPT2Config
    base_model_prefix = "transformer"
    # Causal-mask buffers that old GPT-2 checkpoints carry; the mask is built on the fly here.
    _keys_to_ignore_on_load_unexpected = (r"\.attn\.(masked_)?bias$",)
    positions_field = "n_positions"
    accepts_square_mask = False  # the causal mask is built here; callers give (B, P + N) padding only

    def token_type_limit(self) -> tuple[int, str]:
        """GPT-2 embeds token_type_ids with ``wte``, so they are bounded by the vocabulary."""
        return self.config.vocab_size, "vocab_size"

    @torch.no_grad()
    def init_weights(self) -> None:
        """GPT-2 initialisation: normal(0, initializer_range), residual projections scaled by 1/sqrt(2 n_layer)."""
        self.apply(self._init_module)
        std = self.config.initializer_range / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, std)

    @torch.no_grad()
    def _init_module(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, Conv1D)):
            module.weight.normal_(0.0, std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, std)
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.wte

    def set_input_embeddings(self, new: nn.Embedding) -> None:
        self.base_model.wte = new

    def embedding_tables(self) -> dict[str, nn.Embedding]:
        """``wte`` and ``wpe`` (GPT-2 embeds token_type_ids with ``wte``; there is no separate table)."""
        return {"word": self.base_model.wte, "position": self.base_model.wpe}


def _one_cache(past_key_values: KVCache | None, cache: KVCache | None) -> KVCache | None:
    """The KV cache given as ``past_key_values`` or as ``cache`` (transformers' name since 5.x)."""
    if past_key_values is not None and cache is not None:
        raise TypeError("give the KV cache as past_key_values= or as cache=, not both")
    return cache if cache is not None else past_key_values


class GPT2Model(GPT2PreTrainedModel):
    """The bare decoder: token + position embeddings, N causal blocks, final LayerNorm."""

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPT2Block(config, i) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.post_init()

    @staticmethod
    def _mask(
        attention_mask: torch.Tensor | None, past: int, n: int, device: torch.device
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(B, L) 0/1 padding mask -> bool (B, 1, N, L): causal and not padding (None when causal alone
        does), and the bool (B, 1, N, 1) queries that see no key (None when there are none)."""
        if attention_mask is None or bool(attention_mask.all()):
            if past == 0 or n == 1:
                return None, None  # SDPA's is_causal (or no mask at all for one new token)
            attention_mask = None
        L = past + n
        rows = torch.arange(past, L, device=device).unsqueeze(1)  # absolute position of each query
        cols = torch.arange(L, device=device).unsqueeze(0)
        causal = cols <= rows  # (N, L)
        if attention_mask is None:
            return causal[None, None], None
        mask = causal[None, None] & attention_mask.bool()[:, None, None, :]
        # A left-padding query sees no key at all. transformers' default (SDPA) answers it with zeros, and
        # its logits count in the loss (the last pad predicts the first real token), so the attention
        # zeroes those rows; letting them see themselves keeps every backend (and the explicit softmax
        # of output_attentions) from producing NaN there. Other queries keep transformers' mask.
        blind = ~mask.any(dim=-1, keepdim=True)  # (B, 1, N, 1)
        if not bool(blind.any()):
            return mask, None
        return mask | (blind & (cols == rows)[None, None]), blind

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, N)
        past_key_values: KVCache | None = None,
        attention_mask: torch.Tensor | None = None,  # (B, P + N): 1 = token, 0 = padding
        token_type_ids: torch.Tensor | None = None,  # (B, N), embedded with wte as in GPT-2
        position_ids: torch.Tensor | None = None,  # (B, N) or (1, N)
        inputs_embeds: torch.Tensor | None = None,  # (B, N, H)
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache: KVCache | None = None,  # the same cache under transformers' newer name
    ) -> BaseModelOutputWithPast | tuple:
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = cfg.return_dict if return_dict is None else return_dict
        use_cache = (cfg.use_cache and not self.training) if use_cache is None else use_cache
        cache = _one_cache(past_key_values, cache)
        checkpointing = self.training and torch.is_grad_enabled() and any(b.gradient_checkpointing for b in self.h)
        if checkpointing and (use_cache or cache is not None):
            # a recomputed block would write its keys and values into the cache a second time
            warnings.warn(
                "use_cache=True is incompatible with activation checkpointing in training: running without "
                "the cache (use_cache=False)",
                stacklevel=2,
            )
            use_cache, cache = False, None
        if cache is None and use_cache:
            cache = KVCache(cfg.n_layer)
        past = cache.length if cache is not None else 0
        B, N = self.validate_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, past)
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)
        if position_ids is None:
            position_ids = torch.arange(past, past + N, device=inputs_embeds.device).unsqueeze(0)
        x = inputs_embeds + self.wpe(position_ids)
        if token_type_ids is not None:
            x = x + self.wte(token_type_ids)
        x = self.drop(x)
        mask, blind = self._mask(attention_mask, past, N, x.device)
        all_hidden = [x] if output_hidden_states else None
        all_probs = [] if output_attentions else None
        for block in self.h:
            x, probs = block(x, mask, cache, output_attentions, blind)
            if all_hidden is not None:
                all_hidden.append(x)
            if all_probs is not None:
                all_probs.append(probs)
        x = self.ln_f(x)
        if all_hidden is not None:
            all_hidden[-1] = x  # as transformers: the last hidden state is after ln_f
        if cache is not None:
            cache.advance(N)
        out = BaseModelOutputWithPast(
            last_hidden_state=x,
            past_key_values=cache if use_cache else None,
            hidden_states=tuple(all_hidden) if all_hidden is not None else None,
            attentions=tuple(all_probs) if all_probs is not None else None,
        )
        return out if return_dict else out.to_tuple()


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting token t+1 from position t (labels -100 are ignored)."""
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels has shape {tuple(labels.shape)} but the input has shape {tuple(logits.shape[:-1])}")
    shift = F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), shift.reshape(-1), ignore_index=IGNORE_INDEX)


class GPT2LMHeadModel(GenerationMixin, GPT2PreTrainedModel):
    """GPT-2 with the language-model head (tied to ``wte``): next-token logits, loss and ``generate``."""

    _head_description = "language-model head"

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        with no_init_weights():  # the whole model is initialised once, in post_init
            self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    _tied_weights_keys: dict[str, str] = {"lm_head.weight": "transformer.wte.weight"}

    @classmethod
    def tied_weights(cls, config: GPT2Config) -> dict[str, str]:
        """``lm_head`` shares ``wte`` unless the config unties them."""
        return dict(cls._tied_weights_keys) if config.tie_word_embeddings else {}

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.transformer.wte.weight

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def new_cache(self, capacity: int) -> KVCache:
        """A key/value cache preallocated for ``capacity`` tokens (``generate`` sizes it once)."""
        return KVCache(self.config.n_layer, capacity=capacity)

    def set_output_embeddings(self, new: nn.Linear) -> None:
        self.lm_head = new

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        past_key_values: KVCache | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # (B, N): usually input_ids; shifted inside, -100 ignored
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int = 0,  # > 0: logits of the last k positions only (generation needs one)
        cache: KVCache | None = None,  # the same cache under transformers' newer name
    ) -> CausalLMOutputWithPast | tuple:
        out = self.transformer(
            input_ids,
            past_key_values=_one_cache(past_key_values, cache),
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden = out.last_hidden_state
        logits = self.lm_head(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)  # (B, N|k, V)
        loss = causal_lm_loss(logits, labels) if labels is not None else None
        result = CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=out.past_key_values,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return result if return_dict else result.to_tuple()
