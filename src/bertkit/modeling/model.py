"""The BERT encoder in one readable file (in the spirit of nanoGPT's model.py).

Module attribute paths equal transformers' BERT module paths, so ``state_dict()`` keys are the keys
of every BERT checkpoint with no mapping table: ``embeddings.word_embeddings``,
``encoder.layer.N.attention.self.query``, ``encoder.layer.N.attention.output.dense/LayerNorm``,
``encoder.layer.N.intermediate.dense``, ``encoder.layer.N.output.dense/LayerNorm``, ``pooler.dense``.

Shapes: B batch, N sequence length, H hidden size, h heads, d = H / h head size, I intermediate size.

Weight initialisation is one pass over a whole model, apart from the modules: modules only declare
their parameters, and ``init_weights`` (on the shared base, ``base.py``) applies BERT's initialisation (normal with
``initializer_range``, zero biases, unit LayerNorm) once, from ``post_init`` at the end of the
outermost constructor (a head model builds its encoder inside ``no_init_weights()``, so nothing is
initialised twice). ``from_pretrained`` draws no random weights that the checkpoint overwrites: it
builds the model on the meta device inside ``no_init_weights()``, allocates it with ``to_empty``,
copies the checkpoint in and initialises only the parameters the checkpoint lacks
(``init_missing``). Padding packing lives in ``packing.py``; the attention math every family
shares, and the activations, in ``layers.py``.
"""

from __future__ import annotations

import torch
from torch import nn

from .base import PreTrainedModel, _check_ids
from .config import BertConfig
from .layers import CheckpointedLayer, attention, dense_residual, get_activation, multi_head_attention, project_qkv
from .outputs import BaseModelOutputWithPooling
from .packing import AttentionMask, inference_rows, length_groups, packs

# Re-exported: the shared blocks lived here before they had modules of their own.
_SHARED = (
    AttentionMask,
    PreTrainedModel,
    _check_ids,
    attention,
    get_activation,
    length_groups,
    multi_head_attention,
    project_qkv,
)

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
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False
        )

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
    qkv_names = ("query", "key", "value")  # what prepare_for_inference concatenates

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
        return self.LayerNorm(dense_residual(self.dense, self.dropout, hidden_states, input_tensor))


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: AttentionMask | torch.Tensor | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        y, probs = self.self(hidden_states, attention_mask, output_attentions)
        return self.output(y, hidden_states), probs


class BertIntermediate(nn.Module):
    """First feed-forward half: H -> I and the activation."""

    fused_act_names = ("dense", "intermediate_act_fn")  # prepare_for_inference fuses a GELU here into the projection

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
        return self.LayerNorm(dense_residual(self.dense, self.dropout, hidden_states, input_tensor))


class BertLayer(CheckpointedLayer):
    """One transformer block (post-LN): attention, add & norm, feed-forward, add & norm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: AttentionMask | torch.Tensor | None = None,
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


# ---------------------------------------------------------------------------------------- models


class BertPreTrainedModel(PreTrainedModel):
    """BERT's config and checkpoint prefix on the shared base (BERT's initialisation is the default)."""

    config_class = BertConfig
    base_model_prefix = "bert"


class BertModel(BertPreTrainedModel):
    """The bare encoder: embeddings, N transformer layers and (optionally) the pooler.

    ``pack_padding`` (default True): on padded batches, when neither attentions nor hidden states are
    requested, per-token work runs on the real tokens only and padding positions of
    ``last_hidden_state`` are zeros (transformers computes meaningless values there). Real tokens are
    unaffected. Set it to False to compute padding positions as transformers does. Inference on a GPU
    (eval mode, no gradients) always pads, which is faster there (:func:`~bertkit.modeling.packing.packs`).
    """

    pack_padding: bool = True

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()

    def _embed(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
    ) -> torch.Tensor:
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
        self.validate_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)

        x = self._embed(input_ids, token_type_ids, position_ids, inputs_embeds)  # (B, N, H)
        pack = packs(self, x, self.pack_padding and not (output_attentions or output_hidden_states))
        mask = AttentionMask.build(
            attention_mask, pack, not compiling, cfg.hidden_size, row_multiple=inference_rows(self)
        )
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
