"""ELECTRA: BERT's encoder trained to spot replaced tokens (Clark et al. 2020).

Module attribute paths equal transformers' ELECTRA paths, so ``state_dict()`` keys are checkpoint
keys: ``electra.embeddings.word_embeddings/position_embeddings/token_type_embeddings/LayerNorm``,
``electra.embeddings_project`` (only when ``embedding_size != hidden_size``), ``electra.encoder.layer.N...``
(BERT's layer, unchanged), and the heads' ``discriminator_predictions.dense/dense_prediction``,
``generator_predictions.dense/LayerNorm``, ``generator_lm_head`` (tied to the word embeddings),
``classifier.dense/out_proj`` (sequence classification), ``classifier`` (tokens), ``qa_outputs``,
``sequence_summary.summary`` + ``classifier`` (multiple choice).

Everything that is the same as BERT comes from BERT: the embeddings, the encoder layers, attention
and SDPA, padding packing, the initialisation and checkpoint I/O. What every family's task heads share
(the forward of each task, its loss and its output) comes from ``task_heads.py``: each head here
says what it computes from the encoder's output (``_logits``).
Shapes: B batch, N sequence length, E embedding size, H hidden size, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig, SharedConfigFields
from .loading import no_init_weights
from .model import BertEmbeddings, BertEncoder, BertModel, BertPreTrainedModel, get_activation
from .outputs import BaseModelOutput, ModelOutput
from .task_heads import (
    EncoderHeadMixin,
    EncoderInputs,
    LabelledHead,
    LinearSpanHead,
    LinearTokenClassification,
    MaskedLMHead,
    MultipleChoiceHead,
    SequenceClassificationHead,
    classifier_dropout,
    head_output,
    masked_lm_logits_and_loss,
)

__all__ = [
    "ElectraConfig",
    "ElectraForMaskedLM",
    "ElectraForMultipleChoice",
    "ElectraForPreTraining",
    "ElectraForPreTrainingOutput",
    "ElectraForQuestionAnswering",
    "ElectraForSequenceClassification",
    "ElectraForTokenClassification",
    "ElectraModel",
    "ElectraPreTrainedModel",
]


@dataclass
class ElectraConfig(SharedConfigFields):
    """ELECTRA hyper-parameters with transformers' names and defaults (electra-small discriminator)."""

    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    summary_type: str = "first"
    summary_use_proj: bool = True
    summary_activation: str | None = "gelu"
    summary_last_dropout: float = 0.1
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    classifier_dropout: float | None = None
    is_decoder: bool = False
    add_cross_attention: bool = False
    model_type: str = "electra"

    # BERT's derived sizes, as BERT's fields: under the same names
    head_dim = BertConfig.head_dim
    use_return_dict = BertConfig.use_return_dict

    def validate(self) -> None:
        """BERT's checks (head split, absolute positions, encoder only) and ELECTRA's summary."""
        BertConfig.validate(self)  # the same fields under the same names
        if self.summary_type != "first":
            raise NotImplementedError(
                f"summary_type={self.summary_type!r} is not supported; bertkit's ELECTRA "
                "multiple-choice head summarises with the first token ('first')"
            )


@dataclass(repr=True, eq=False)
class ElectraForPreTrainingOutput(ModelOutput):
    loss: torch.Tensor | None = None  # BCE of replaced-token detection over real tokens
    logits: torch.Tensor | None = None  # (B, N): > 0 means "replaced"
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


# ---------------------------------------------------------------------------------------- models


class ElectraPreTrainedModel(BertPreTrainedModel):
    """ELECTRA's config and prefix on BERT's initialisation and checkpoint I/O."""

    config_class = ElectraConfig
    base_model_prefix = "electra"


class ElectraModel(BertModel, ElectraPreTrainedModel):
    """The bare encoder: BERT's embeddings at ``embedding_size``, a projection to ``hidden_size`` when
    the two differ, and BERT's layers. No pooler (ELECTRA has none)."""

    config_class = ElectraConfig
    base_model_prefix = "electra"

    def __init__(self, config: ElectraConfig):
        ElectraPreTrainedModel.__init__(self, config)
        self.embeddings = BertEmbeddings(config, width=config.embedding_size)
        if config.embedding_size != config.hidden_size:
            self.embeddings_project = nn.Linear(config.embedding_size, config.hidden_size)
        self.encoder = BertEncoder(config)
        self.pooler = None
        self.post_init()

    @property
    def input_embedding_size(self) -> int:
        return int(self.config.embedding_size)

    def _embed(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
    ) -> torch.Tensor:
        x = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)  # (B, N, E)
        project = getattr(self, "embeddings_project", None)
        return x if project is None else project(x)  # (B, N, H)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, N)
        attention_mask: torch.Tensor | None = None,  # (B, N): 1 = token, 0 = padding
        token_type_ids: torch.Tensor | None = None,  # (B, N)
        position_ids: torch.Tensor | None = None,  # (B, N)
        inputs_embeds: torch.Tensor | None = None,  # (B, N, E)
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutput | tuple:
        out = super().forward(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
            return_dict=True,
        )
        out = BaseModelOutput(
            last_hidden_state=out.last_hidden_state, hidden_states=out.hidden_states, attentions=out.attentions
        )
        return out if (self.config.return_dict if return_dict is None else return_dict) else out.to_tuple()


class _ElectraHeadModel(EncoderHeadMixin, ElectraPreTrainedModel):
    """An ElectraModel under ``self.electra`` plus a head."""

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        with no_init_weights():  # the whole model is initialised once, in post_init
            self.electra = ElectraModel(config)


class ElectraDiscriminatorPredictions(nn.Module):
    """dense, hidden_act, dense_prediction: one replaced-or-original logit per token."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = get_activation(config.hidden_act)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., H) -> (...)
        return self.dense_prediction(self.activation(self.dense(hidden_states))).squeeze(-1)


class ElectraGeneratorPredictions(nn.Module):
    """dense to the embedding size, GELU, LayerNorm (then the tied ``generator_lm_head``)."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.activation = get_activation("gelu")  # fixed in ELECTRA, whatever hidden_act says
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., H) -> (..., E)
        return self.LayerNorm(self.activation(self.dense(hidden_states)))


def replaced_token_loss(
    logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """Mean BCE of the (B, N) replaced-token logits over real tokens (``attention_mask == 1``)."""
    if labels.shape != logits.shape:
        raise ValueError(f"labels has shape {tuple(labels.shape)} but the input has shape {tuple(logits.shape)}")
    if attention_mask is not None:
        active = attention_mask == 1
        logits, labels = logits[active], labels[active]
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


class ElectraForPreTraining(LabelledHead, _ElectraHeadModel):
    """The discriminator: for every token, is it the original (< 0) or a replacement (> 0)?
    ``labels``: (B, N), 1 = replaced, 0 = original."""

    _head_description = "replaced-token-detection (discriminator) head"

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        self.post_init()

    def _task_output(
        self, out: BaseModelOutput, labels: torch.Tensor | None, inputs: EncoderInputs
    ) -> ElectraForPreTrainingOutput:
        logits = self.discriminator_predictions(out.last_hidden_state)  # (B, N)
        loss = replaced_token_loss(logits, labels, inputs.attention_mask) if labels is not None else None
        return head_output(ElectraForPreTrainingOutput, out, loss=loss, logits=logits)


class ElectraForMaskedLM(MaskedLMHead, _ElectraHeadModel):
    """The generator: a masked LM whose ``generator_lm_head`` is tied to the word embeddings."""

    _head_description = "masked-LM (generator) head"
    _tied_weights_keys: dict[str, str] = {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"}

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.generator_predictions = ElectraGeneratorPredictions(config)
        self.generator_lm_head = nn.Linear(config.embedding_size, config.vocab_size)
        self.post_init()

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.generator_lm_head.weight = self.electra.embeddings.word_embeddings.weight

    def get_output_embeddings(self) -> nn.Linear:
        return self.generator_lm_head

    def set_output_embeddings(self, new: nn.Linear) -> None:
        self.generator_lm_head = new

    def _masked_lm(
        self, sequence_output: torch.Tensor, labels: torch.Tensor | None, sparse: bool | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return masked_lm_logits_and_loss(
            self._generate, sequence_output, labels, sparse, vocab_size=self.config.vocab_size
        )

    def _generate(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., H) -> (..., V)
        return self.generator_lm_head(self.generator_predictions(hidden_states))


class ElectraClassificationHead(nn.Module):
    """First token: dropout, dense, GELU, dropout, out_proj."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = get_activation("gelu")
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (B, N, H) -> (B, num_labels)
        x = self.activation(self.dense(self.dropout(features[:, 0])))
        return self.out_proj(self.dropout(x))


class ElectraForSequenceClassification(SequenceClassificationHead, _ElectraHeadModel):
    """Sentence(-pair) classification or regression from the first token (``classifier.dense/out_proj``)."""

    _head_description = "sequence-classification head"

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.classifier = ElectraClassificationHead(config)
        self.post_init()

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B, num_labels)
        return self.classifier(out.last_hidden_state)


class ElectraForTokenClassification(LinearTokenClassification, _ElectraHeadModel):
    """Per-token classification (NER) on the last hidden states: ``dropout``, ``classifier``."""


class ElectraForQuestionAnswering(LinearSpanHead, _ElectraHeadModel):
    """Extractive QA: start and end logits per token from ``qa_outputs``."""


class ElectraSequenceSummary(nn.Module):
    """First token, projection (``summary``), ``summary_activation``, dropout: one vector per sequence."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.summary = nn.Linear(config.hidden_size, config.hidden_size) if config.summary_use_proj else nn.Identity()
        act = config.summary_activation
        self.activation = get_activation(act) if act else nn.Identity()
        p = config.summary_last_dropout
        self.last_dropout = nn.Dropout(p) if p and p > 0 else nn.Identity()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (B, N, H) -> (B, H)
        return self.last_dropout(self.activation(self.summary(hidden_states[:, 0])))


class ElectraForMultipleChoice(MultipleChoiceHead, _ElectraHeadModel):
    """Scores each of C choices (B, C, N) from its summary vector; softmax over the choices."""

    _head_description = "multiple-choice head"

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.sequence_summary = ElectraSequenceSummary(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def _logits(self, out: BaseModelOutput) -> torch.Tensor:  # (B*C, 1)
        return self.classifier(self.sequence_summary(out.last_hidden_state))
