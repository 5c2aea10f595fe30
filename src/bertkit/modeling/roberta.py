"""RoBERTa and XLM-RoBERTa: BERT's encoder with other embeddings and heads (Liu et al. 2019; Conneau et al. 2020).

Module attribute paths equal transformers' RoBERTa paths, so ``state_dict()`` keys are checkpoint
keys: ``roberta.embeddings.word_embeddings/position_embeddings/token_type_embeddings/LayerNorm``,
``roberta.encoder.layer.N...`` (BERT's layer, unchanged), ``roberta.pooler.dense``, and the heads'
``lm_head.dense/layer_norm/decoder/bias`` (masked LM, decoder tied to the word embeddings),
``classifier.dense/out_proj`` (sequence classification), ``classifier`` (tokens, multiple choice),
``qa_outputs``. XLM-RoBERTa is the same network under its own names (its difference is the
vocabulary: a 250k-piece SentencePiece Unigram model).

What differs from BERT, and why:

* Positions start after ``padding_idx``: fairseq numbered positions from ``pad_token_id + 1`` and gave
  padding tokens the padding position, so ``max_position_embeddings`` (514) holds 512 usable
  positions plus two the model never uses for text. Position ids come from the input ids
  (``create_position_ids_from_input_ids``), so left padding shifts nothing.
* One token type (``type_vocab_size`` = 1): RoBERTa dropped next-sentence prediction and segments.
* The heads: a masked-LM head with exact GELU and a LayerNorm (``lm_head``), and a two-layer
  classifier on the first token (``classifier.dense/out_proj``) rather than BERT's pooler.

Everything else comes from BERT (``model.py``): the encoder layers, attention, padding packing,
initialisation and checkpoint I/O; what the task heads share comes from ``task_heads.py``.
Shapes: B batch, N sequence length, H hidden size, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .base import _check_ids
from .config import BertConfig
from .loading import no_init_weights
from .model import BertEmbeddings, BertEncoder, BertModel, BertPooler, BertPreTrainedModel, get_activation
from .outputs import BaseModelOutputWithPooling
from .task_heads import (
    EncoderHeadMixin,
    LinearSpanHead,
    LinearTokenClassification,
    MaskedLMHead,
    MultipleChoiceHead,
    SequenceClassificationHead,
    classifier_dropout,
    masked_lm_logits_and_loss,
)

__all__ = [
    "RobertaConfig",
    "RobertaEmbeddings",
    "RobertaForMaskedLM",
    "RobertaForMultipleChoice",
    "RobertaForQuestionAnswering",
    "RobertaForSequenceClassification",
    "RobertaForTokenClassification",
    "RobertaModel",
    "RobertaPreTrainedModel",
    "XLMRobertaConfig",
    "XLMRobertaForMaskedLM",
    "XLMRobertaForMultipleChoice",
    "XLMRobertaForQuestionAnswering",
    "XLMRobertaForSequenceClassification",
    "XLMRobertaForTokenClassification",
    "XLMRobertaModel",
    "create_position_ids_from_input_ids",
]


@dataclass
class RobertaConfig(BertConfig):
    """RoBERTa hyper-parameters with transformers' names and defaults (roberta-base)."""

    vocab_size: int = 50265
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1
    bos_token_id: int = 0
    eos_token_id: int = 2
    model_type: str = "roberta"

    def validate(self) -> None:
        """BERT's checks, and room for at least one position after ``padding_idx``."""
        super().validate()
        if self.max_position_embeddings <= self.pad_token_id + 1:
            raise ValueError(
                f"max_position_embeddings ({self.max_position_embeddings}) leaves no position after "
                f"pad_token_id ({self.pad_token_id}): positions start at pad_token_id + 1"
            )


@dataclass
class XLMRobertaConfig(RobertaConfig):
    """XLM-RoBERTa hyper-parameters (xlm-roberta-base): RoBERTa's with a 250,002-piece vocabulary."""

    vocab_size: int = 250002
    model_type: str = "xlm-roberta"


def create_position_ids_from_input_ids(input_ids: torch.Tensor, padding_idx: int) -> torch.Tensor:  # (B, N)
    """Real tokens count from ``padding_idx + 1``; padding tokens get ``padding_idx`` (fairseq's numbering)."""
    mask = input_ids.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class RobertaEmbeddings(BertEmbeddings):
    """BERT's embeddings with positions counted from ``padding_idx + 1`` (the padding row stays zero)."""

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=self.padding_idx
        )

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, N)
        token_type_ids: torch.Tensor | None = None,  # (B, N)
        position_ids: torch.Tensor | None = None,  # (B, N) or (1, N)
        inputs_embeds: torch.Tensor | None = None,  # (B, N, H)
    ) -> torch.Tensor:  # (B, N, H)
        if position_ids is None:
            if input_ids is not None:
                position_ids = create_position_ids_from_input_ids(input_ids, self.padding_idx)
            else:  # no ids to find padding in: every position is a token
                n = inputs_embeds.shape[1]
                position_ids = self.position_ids[:, self.padding_idx + 1 : n + self.padding_idx + 1]
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds)


# ---------------------------------------------------------------------------------------- models


class RobertaPreTrainedModel(BertPreTrainedModel):
    """RoBERTa's config and prefix on BERT's initialisation and checkpoint I/O."""

    config_class = RobertaConfig
    base_model_prefix = "roberta"
    # Positions run from pad_token_id + 1 to max_position_embeddings - 1.
    positions_field = "max_position_embeddings - pad_token_id - 1"

    @property
    def max_positions(self) -> int:
        return int(self.config.max_position_embeddings - self.config.pad_token_id - 1)

    def validate_inputs(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        past_length: int = 0,
    ) -> tuple[int, int]:
        """BERT's checks; explicit position ids may use every row of the table (up to
        ``max_position_embeddings``), not only the text's."""
        if position_ids is not None and isinstance(position_ids, torch.Tensor):
            check = self.check_inputs and not torch.compiler.is_compiling()
            limit = int(self.config.max_position_embeddings)
            _check_ids("position_ids", position_ids, limit, "max_position_embeddings", check)
            shape = self.validate_inputs(input_ids, attention_mask, token_type_ids, None, inputs_embeds, past_length)
            B, N = shape
            if position_ids.dim() != 2 or position_ids.shape[1] != N or position_ids.shape[0] not in (1, B):
                raise ValueError(f"position_ids has shape {tuple(position_ids.shape)} but the input has shape {shape}")
            return shape
        return super().validate_inputs(input_ids, attention_mask, token_type_ids, None, inputs_embeds, past_length)


class RobertaModel(BertModel, RobertaPreTrainedModel):
    """The bare encoder: RoBERTa's embeddings, BERT's layers and (optionally) BERT's pooler."""

    config_class = RobertaConfig
    base_model_prefix = "roberta"

    def __init__(self, config: RobertaConfig, add_pooling_layer: bool = True):
        RobertaPreTrainedModel.__init__(self, config)
        self.embeddings = RobertaEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()


class _RobertaHeadModel(EncoderHeadMixin, RobertaPreTrainedModel):
    """A RobertaModel under ``self.roberta`` plus a head."""

    _add_pooling_layer = False
    _model_class: type = RobertaModel

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        with no_init_weights():  # the whole model is initialised once, in post_init
            self.roberta = self._model_class(config, add_pooling_layer=self._add_pooling_layer)


class RobertaLMHead(nn.Module):
    """dense, exact GELU, LayerNorm, then the decoder onto the vocabulary (tied to the word embeddings)."""

    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.act = get_activation("gelu")  # fixed in RoBERTa, whatever hidden_act says
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))  # `lm_head.bias`; the decoder shares it
        self.decoder.bias = self.bias

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (..., H) -> (..., V)
        return self.decoder(self.layer_norm(self.act(self.dense(features))))


class RobertaForMaskedLM(MaskedLMHead, _RobertaHeadModel):
    """RoBERTa with the masked-LM head (fill-mask); also its pretraining head (no next-sentence task)."""

    _head_description = "masked-LM head"
    _tied_weights_keys: dict[str, str] = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.decoder.weight = self.base_model.embeddings.word_embeddings.weight
        self.lm_head.decoder.bias = self.lm_head.bias

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new: nn.Linear) -> None:
        self.lm_head.decoder = new
        self.lm_head.bias = new.bias  # tie_weights keeps decoder.bias the same parameter

    def _masked_lm(
        self, sequence_output: torch.Tensor, labels: torch.Tensor | None, sparse: bool | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        vocab = self.lm_head.decoder.out_features
        return masked_lm_logits_and_loss(self.lm_head, sequence_output, labels, sparse, vocab_size=vocab)


class RobertaClassificationHead(nn.Module):
    """First token (``<s>``): dropout, dense, tanh, dropout, out_proj."""

    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (B, N, H) -> (B, num_labels)
        x = torch.tanh(self.dense(self.dropout(features[:, 0])))
        return self.out_proj(self.dropout(x))


class RobertaForSequenceClassification(SequenceClassificationHead, _RobertaHeadModel):
    """Sentence(-pair) classification or regression from the first token (``classifier.dense/out_proj``)."""

    _head_description = "sequence-classification head"

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.classifier = RobertaClassificationHead(config)
        self.post_init()

    def _logits(self, out: BaseModelOutputWithPooling) -> torch.Tensor:  # (B, num_labels)
        return self.classifier(out.last_hidden_state)


class RobertaForTokenClassification(LinearTokenClassification, _RobertaHeadModel):
    """Per-token classification (NER) on the last hidden states: ``dropout``, ``classifier``."""


class RobertaForQuestionAnswering(LinearSpanHead, _RobertaHeadModel):
    """Extractive QA: start and end logits per token from ``qa_outputs``."""


class RobertaForMultipleChoice(MultipleChoiceHead, _RobertaHeadModel):
    """Scores each of C choices (B, C, N) from BERT's pooled vector; softmax over the choices."""

    _add_pooling_layer = True
    _head_description = "multiple-choice head"

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def _logits(self, out: BaseModelOutputWithPooling) -> torch.Tensor:  # (B*C, 1)
        return self.classifier(self.dropout(out.pooler_output))


# ---------------------------------------------------------------------------------------- XLM-RoBERTa
# The same network: each class is RoBERTa's under XLM-RoBERTa's config, prefix and name.


class XLMRobertaPreTrainedModel(RobertaPreTrainedModel):
    config_class = XLMRobertaConfig
    base_model_prefix = "roberta"


class XLMRobertaModel(RobertaModel):
    config_class = XLMRobertaConfig


class _XLMRobertaHead:
    config_class = XLMRobertaConfig
    _model_class = XLMRobertaModel


class XLMRobertaForMaskedLM(_XLMRobertaHead, RobertaForMaskedLM):
    pass


class XLMRobertaForSequenceClassification(_XLMRobertaHead, RobertaForSequenceClassification):
    pass


class XLMRobertaForTokenClassification(_XLMRobertaHead, RobertaForTokenClassification):
    pass


class XLMRobertaForQuestionAnswering(_XLMRobertaHead, RobertaForQuestionAnswering):
    pass


class XLMRobertaForMultipleChoice(_XLMRobertaHead, RobertaForMultipleChoice):
    pass
