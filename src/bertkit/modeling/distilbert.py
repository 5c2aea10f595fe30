"""DistilBERT: BERT with half the layers, no token types and no pooler (Sanh et al. 2019).

Module attribute paths equal transformers' DistilBERT paths, so ``state_dict()`` keys are checkpoint
keys: ``distilbert.embeddings.word_embeddings/position_embeddings/LayerNorm``,
``distilbert.transformer.layer.N.attention.q_lin/k_lin/v_lin/out_lin``, ``sa_layer_norm``,
``ffn.lin1/lin2``, ``output_layer_norm``, and the heads' ``vocab_transform``, ``vocab_layer_norm``,
``vocab_projector`` (tied to the word embeddings), ``pre_classifier``, ``classifier``, ``qa_outputs``.

Everything that is the same as BERT comes from BERT: the attention math and SDPA, padding packing,
the initialisation, checkpoint I/O (``from_pretrained``/``save_pretrained``) and the output classes.
What every family's task heads share (the forward of each task, its loss and its output) comes from
``task_heads.py``: each head here says what it computes from the encoder's output (``_logits``).
Shapes: B batch, N sequence length, H = dim, I = hidden_dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .base import PreTrainedModel
from .config import SharedConfigFields
from .layers import CheckpointedLayer, dense_residual, get_activation, hooked, multi_head_attention, project_qkv
from .loading import no_init_weights
from .outputs import BaseModelOutput, MaskedLMOutput, ModelOutput, QuestionAnsweringModelOutput
from .packing import AttentionMask, inference_rows, packs
from .task_heads import (
    EncoderHeadMixin,
    EncoderInputs,
    LabelledHead,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    SequenceClassificationHead,
    TokenClassificationHead,
    check_span_config,
    head_output,
    masked_lm_logits_and_loss,
)

__all__ = [
    "DistilBertConfig",
    "DistilBertForMaskedLM",
    "DistilBertForMultipleChoice",
    "DistilBertForQuestionAnswering",
    "DistilBertForSequenceClassification",
    "DistilBertForTokenClassification",
    "DistilBertModel",
    "DistilBertPreTrainedModel",
]


@dataclass
class DistilBertConfig(SharedConfigFields):
    """DistilBERT hyper-parameters with transformers' names and defaults (distilbert-base-uncased)."""

    vocab_size: int = 30522
    max_position_embeddings: int = 512
    sinusoidal_pos_embds: bool = False
    n_layers: int = 6
    n_heads: int = 12
    dim: int = 768
    hidden_dim: int = 3072
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"
    initializer_range: float = 0.02
    qa_dropout: float = 0.1
    seq_classif_dropout: float = 0.2
    pad_token_id: int = 0
    model_type: str = "distilbert"

    attribute_map = {  # noqa: RUF012 - class-level name table, as transformers' attribute_map
        "hidden_size": "dim",
        "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_layers",
        "intermediate_size": "hidden_dim",
    }

    def validate(self) -> None:
        """Raise for sizes that cannot build a model."""
        if self.dim % self.n_heads:
            raise ValueError(f"dim ({self.dim}) is not a multiple of n_heads ({self.n_heads})")


# ---------------------------------------------------------------------------------------- modules


def sinusoidal_embeddings(n_pos: int, dim: int) -> torch.Tensor:
    """The fixed sin/cos position table of 'Attention is all you need' (``sinusoidal_pos_embds``)."""
    pos = torch.arange(n_pos, dtype=torch.float64)[:, None]
    j = torch.arange(dim, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, 2 * torch.div(j, 2, rounding_mode="floor") / dim)
    out = torch.empty(n_pos, dim, dtype=torch.float64)
    out[:, 0::2] = torch.sin(angle[:, 0::2])
    out[:, 1::2] = torch.cos(angle[:, 1::2])
    return out.float()


class Embeddings(nn.Module):
    """word + position embeddings, LayerNorm, dropout (no token types)."""

    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.LayerNorm = nn.LayerNorm(config.dim, eps=1e-12)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,  # (B, N) or (1, N); default 0..N-1
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, N, H)
        if position_ids is None:
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)
        return self.dropout(self.LayerNorm(inputs_embeds + self.position_embeddings(position_ids)))


class MultiHeadSelfAttention(nn.Module):
    """BERT's attention under DistilBERT's names (q_lin/k_lin/v_lin/out_lin, no output LayerNorm here)."""

    # (3H, H) projection built once by bertkit.inference.prepare_for_inference; used in eval mode only
    _inference_qkv: nn.Module | None = None
    qkv_names = ("q_lin", "k_lin", "v_lin")

    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.q_lin = nn.Linear(config.dim, config.dim)
        self.k_lin = nn.Linear(config.dim, config.dim)
        self.v_lin = nn.Linear(config.dim, config.dim)
        self.out_lin = nn.Linear(config.dim, config.dim)
        self.dropout = nn.Dropout(config.attention_dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: AttentionMask | torch.Tensor | None,
        output_attentions: bool,
        residual: torch.Tensor | None = None,  # added to the output (inside the product where it can be)
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self._inference_qkv is not None and not self.training:
            qkv = self._inference_qkv(x)  # (B, N, 3H) or (T, 3H) when packed
        else:
            qkv = project_qkv(x, self.q_lin, self.k_lin, self.v_lin)
        y, probs = multi_head_attention(qkv, self.n_heads, mask, output_attentions, self.dropout)
        if residual is None:
            return self.out_lin(y), probs
        return dense_residual(self.out_lin, None, y, residual), probs  # DistilBERT: no dropout after out_lin


class FFN(nn.Module):
    fused_act_names = ("lin1", "activation")  # prepare_for_inference fuses a GELU here into the projection

    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.lin1 = nn.Linear(config.dim, config.hidden_dim)
        self.lin2 = nn.Linear(config.hidden_dim, config.dim)
        self.activation = get_activation(config.activation)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        h = self.activation(self.lin1(x))
        return self.dropout(self.lin2(h)) if residual is None else dense_residual(self.lin2, self.dropout, h, residual)


class TransformerBlock(CheckpointedLayer):
    """Post-LN block: attention, add & sa_layer_norm, feed-forward, add & output_layer_norm."""

    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.attention = MultiHeadSelfAttention(config)
        self.sa_layer_norm = nn.LayerNorm(config.dim, eps=1e-12)
        self.ffn = FFN(config)
        self.output_layer_norm = nn.LayerNorm(config.dim, eps=1e-12)

    def forward(
        self, x: torch.Tensor, mask: AttentionMask | torch.Tensor | None, output_attentions: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if hooked(self.attention):  # a hook sees out_lin's output
            a, probs = self.attention(x, mask, output_attentions)
            x = self.sa_layer_norm(a + x)
        else:  # the residual enters the projection, which adds it in its product when prepared for inference
            a, probs = self.attention(x, mask, output_attentions, residual=x)
            x = self.sa_layer_norm(a)
        if hooked(self.ffn):
            return self.output_layer_norm(self.ffn(x) + x), probs
        return self.output_layer_norm(self.ffn(x, residual=x)), probs


class DistilBertTransformer(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.layer = nn.ModuleList([TransformerBlock(config) for _ in range(config.n_layers)])


# ---------------------------------------------------------------------------------------- models


class DistilBertPreTrainedModel(PreTrainedModel):
    """DistilBERT's config and prefix on BERT's initialisation and checkpoint I/O."""

    config_class = DistilBertConfig
    base_model_prefix = "distilbert"

    @torch.no_grad()
    def init_weights(self) -> None:
        """BERT's initialisation; the fixed sinusoidal position table when the config asks for it."""
        super().init_weights()
        if self.config.sinusoidal_pos_embds:
            table = self.base_model.embeddings.position_embeddings.weight
            table.copy_(sinusoidal_embeddings(*table.shape))


class DistilBertModel(DistilBertPreTrainedModel):
    """The bare encoder: embeddings and n_layers transformer blocks (hidden states, no pooler)."""

    pack_padding: bool = True  # as BertModel: per-token work on real tokens only (padding outputs are zeros)

    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.embeddings = Embeddings(config)
        self.transformer = DistilBertTransformer(config)
        self.post_init()

    def token_type_limit(self) -> None:
        """DistilBERT has no segments: token_type_ids (from BERT tokenizers) are shape-checked, then ignored."""
        return None

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, N)
        attention_mask: torch.Tensor | None = None,  # (B, N): 1 = token, 0 = padding
        inputs_embeds: torch.Tensor | None = None,  # (B, N, H)
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,  # accepted from BERT tokenizers; DistilBERT has no segments
        position_ids: torch.Tensor | None = None,  # (B, N) or (1, N); default 0..N-1
    ) -> BaseModelOutput | tuple:
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = cfg.return_dict if return_dict is None else return_dict
        self.validate_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        x = self.embeddings(input_ids, inputs_embeds, position_ids)
        pack = packs(self, x, self.pack_padding and not (output_attentions or output_hidden_states))
        mask = AttentionMask.build(
            attention_mask,
            pack=pack,
            sync=not torch.compiler.is_compiling(),
            hidden_size=cfg.dim,
            row_multiple=inference_rows(self),
        )
        if mask.packed:
            x = mask.pack(x)
        all_hidden = [x] if output_hidden_states else None
        all_probs = [] if output_attentions else None
        for block in self.transformer.layer:
            x, probs = block(x, mask, output_attentions)
            if all_hidden is not None:
                all_hidden.append(x)
            if all_probs is not None:
                all_probs.append(probs)
        if mask.packed:
            x = mask.unpack(x)
        out = BaseModelOutput(
            last_hidden_state=x,
            hidden_states=tuple(all_hidden) if all_hidden is not None else None,
            attentions=tuple(all_probs) if all_probs is not None else None,
        )
        return out if return_dict else out.to_tuple()


class _DistilBertHeadModel(EncoderHeadMixin, DistilBertPreTrainedModel):
    """A DistilBertModel under ``self.distilbert`` plus a head."""

    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        with no_init_weights():  # the whole model is initialised once, in post_init
            self.distilbert = DistilBertModel(config)


class _DistilBertArguments:
    """DistilBERT's forward arguments for a head trained on ``labels``, put in the shared (BERT) order.

    token_type_ids and position_ids come last (transformers' DistilBERT takes no token_type_ids; its
    position_ids came later than BERT's); token_type_ids go down only to be shape-checked like every
    family's (DistilBERT ignores them).
    """

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # the task's targets (see the class)
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,  # ignored: DistilBERT has no segments
        position_ids: torch.Tensor | None = None,
    ) -> ModelOutput | tuple:
        return super().forward(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            labels,
            output_attentions,
            output_hidden_states,
            return_dict,
        )


class DistilBertForMaskedLM(_DistilBertArguments, LabelledHead, _DistilBertHeadModel):
    """DistilBERT with its masked-LM head (``vocab_projector`` tied to the word embeddings); ``labels``:
    (B, N) token ids, -100 where not masked."""

    _head_description = "masked-LM head"

    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.activation = get_activation(config.activation)
        self.vocab_transform = nn.Linear(config.dim, config.dim)
        self.vocab_layer_norm = nn.LayerNorm(config.dim, eps=1e-12)
        self.vocab_projector = nn.Linear(config.dim, config.vocab_size)
        self.post_init()

    _tied_weights_keys: dict[str, str] = {"vocab_projector.weight": "distilbert.embeddings.word_embeddings.weight"}

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.vocab_projector.weight = self.distilbert.embeddings.word_embeddings.weight

    def get_output_embeddings(self) -> nn.Linear:
        return self.vocab_projector

    def set_output_embeddings(self, new: nn.Linear) -> None:
        self.vocab_projector = new

    def _task_output(self, out: BaseModelOutput, labels: torch.Tensor | None, inputs: EncoderInputs) -> MaskedLMOutput:
        # the shared MLM loss checks the labels' shape and ids against the vocabulary, as BERT's does
        logits, loss = masked_lm_logits_and_loss(
            self._predict, out.last_hidden_state, labels, False, vocab_size=self.vocab_projector.out_features
        )
        return head_output(MaskedLMOutput, out, loss=loss, logits=logits)

    def _predict(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., dim) -> (..., V)
        return self.vocab_projector(self.vocab_layer_norm(self.activation(self.vocab_transform(hidden_states))))


class DistilBertForSequenceClassification(_DistilBertArguments, SequenceClassificationHead, _DistilBertHeadModel):
    """Sentence classification from the first token: pre_classifier, ReLU, dropout, classifier."""

    _head_description = "sequence-classification head"

    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.pre_classifier = nn.Linear(config.dim, config.dim)
        self.classifier = nn.Linear(config.dim, config.num_labels)
        self.dropout = nn.Dropout(config.seq_classif_dropout)
        self.post_init()

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B, num_labels)
        pooled = self.dropout(torch.relu(self.pre_classifier(out.last_hidden_state[:, 0])))  # (B, H)
        return self.classifier(pooled)


class DistilBertForTokenClassification(_DistilBertArguments, TokenClassificationHead, _DistilBertHeadModel):
    """Per-token classification (NER) on the last hidden states."""

    _head_description = "token-classification head"

    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.dim, config.num_labels)
        self.post_init()

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B, N, num_labels)
        return self.classifier(self.dropout(out.last_hidden_state))


class DistilBertForQuestionAnswering(QuestionAnsweringHead, _DistilBertHeadModel):
    """Extractive QA: start and end logits per token from ``qa_outputs``."""

    _head_description = "question-answering (span) head"

    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        check_span_config(config)
        self.qa_outputs = nn.Linear(config.dim, config.num_labels)
        self.dropout = nn.Dropout(config.qa_dropout)
        # Span logits are normalised over every position, padding included, so padding is computed.
        self.distilbert.pack_padding = False
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,  # (B,)
        end_positions: torch.Tensor | None = None,  # (B,)
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,  # ignored: DistilBERT has no segments
        position_ids: torch.Tensor | None = None,
    ) -> QuestionAnsweringModelOutput | tuple:
        # DistilBERT's argument order, put in the shared one (as _DistilBertArguments does)
        return super().forward(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            start_positions,
            end_positions,
            output_attentions,
            output_hidden_states,
            return_dict,
        )

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B, N, 2)
        return self.qa_outputs(self.dropout(out.last_hidden_state))


class DistilBertForMultipleChoice(_DistilBertArguments, MultipleChoiceHead, _DistilBertHeadModel):
    """Scores each of C choices (B, C, N) from its first token, as the sequence classifier does; softmax
    over the choices."""

    _head_description = "multiple-choice head"

    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.pre_classifier = nn.Linear(config.dim, config.dim)
        self.classifier = nn.Linear(config.dim, 1)
        self.dropout = nn.Dropout(config.seq_classif_dropout)
        self.post_init()

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B*C, 1)
        pooled = self.dropout(torch.relu(self.pre_classifier(out.last_hidden_state[:, 0])))  # (B*C, H)
        return self.classifier(pooled)
