"""Task heads on top of BertModel, with transformers' module paths (``bert.*``, ``cls.*``, ``classifier``).

The shared pieces live once: the MLM prediction head (transform + tied decoder) serves pretraining
and masked LM, and ``_BertWithClassifier`` is the dropout + linear classifier behind sequence, token
and multiple-choice classification. What every family's heads share (the encoder call, the
fine-tuning tasks' forward, their losses and outputs) is in ``task_heads.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig
from .loading import no_init_weights
from .model import BertModel, BertPreTrainedModel, get_activation
from .outputs import (
    BaseModelOutputWithPooling,
    BertForPreTrainingOutput,
    NextSentencePredictorOutput,
)
from .task_heads import (
    IGNORE_INDEX,
    EncoderHeadMixin,
    EncoderInputs,
    MaskedLMHead,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    SequenceClassificationHead,
    TokenClassificationHead,
    check_class_labels,
    classifier_dropout,
    flatten_choices,
    head_output,
    masked_lm_logits_and_loss,
    num_choices_of,
    sequence_classification_loss,
    span_logits_and_loss,
    token_classification_loss,
)

__all__ = [
    "BertPredictionHeadTransform",
    "BertLMPredictionHead",
    "BertOnlyMLMHead",
    "BertOnlyNSPHead",
    "BertPreTrainingHeads",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForNextSentencePrediction",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "BertForMultipleChoice",
]


# Re-exported: the shared head helpers lived here before they had a module of their own (task_heads.py).
_SHARED = (
    IGNORE_INDEX,
    flatten_choices,
    num_choices_of,
    sequence_classification_loss,
    span_logits_and_loss,
    token_classification_loss,
)
_check_class_labels = check_class_labels

# ---------------------------------------------------------------------------------------- head modules


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = get_activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., H) -> (..., H)
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class BertLMPredictionHead(nn.Module):
    """transform, then the decoder onto the vocabulary (its weight tied to the word embeddings)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        # The output-only bias is `cls.predictions.bias` in checkpoints; the decoder uses the same tensor,
        # so `cls.predictions.decoder(h)` gives the logits as in transformers.
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.bias = self.bias

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., H) -> (..., V)
        return self.decoder(self.transform(hidden_states))


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        return self.predictions(sequence_output)


class BertOnlyNSPHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled_output: torch.Tensor) -> torch.Tensor:  # (B, H) -> (B, 2)
        return self.seq_relationship(pooled_output)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, sequence_output: torch.Tensor, pooled_output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.predictions(sequence_output), self.seq_relationship(pooled_output)


# ---------------------------------------------------------------------------------------- shared plumbing


class _BertHeadModel(EncoderHeadMixin, BertPreTrainedModel):
    """A BertModel under ``self.bert`` plus a head."""

    _add_pooling_layer = True

    def __init__(self, config: BertConfig):
        super().__init__(config)
        with no_init_weights():  # the whole model is initialised once, in post_init
            self.bert = BertModel(config, add_pooling_layer=self._add_pooling_layer)


class _MaskedLMMixin:
    """Ties ``cls.predictions.decoder`` to the word embeddings (both MLM models)."""

    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def tie_weights(self) -> None:
        predictions = self.cls.predictions
        if self.config.tie_word_embeddings:
            predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
        predictions.decoder.bias = predictions.bias

    def get_output_embeddings(self) -> nn.Linear:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new: nn.Linear) -> None:
        self.cls.predictions.decoder = new
        self.cls.predictions.bias = new.bias  # tie_weights keeps decoder.bias the same parameter

    def _masked_lm(
        self, sequence_output: torch.Tensor, labels: torch.Tensor | None, sparse: bool | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        predictions = self.cls.predictions
        return masked_lm_logits_and_loss(
            predictions, sequence_output, labels, sparse, vocab_size=predictions.decoder.out_features
        )


# ---------------------------------------------------------------------------------------- pretraining heads


class BertForPreTraining(_MaskedLMMixin, _BertHeadModel):
    """BERT with the masked-LM and next-sentence heads, as pretrained."""

    _head_description = "pretraining (masked-LM + next-sentence) head"

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # (B, N) token ids, -100 where not masked
        next_sentence_label: torch.Tensor | None = None,  # (B,) 0 = is next, 1 = random
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        sparse_mlm: bool | torch.Tensor = False,
    ) -> BertForPreTrainingOutput | tuple:
        inputs = EncoderInputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        out = self._encode(inputs, output_attentions, output_hidden_states)
        prediction_logits, mlm_loss = self._masked_lm(out.last_hidden_state, labels, sparse_mlm)
        nsp_logits = self.cls.seq_relationship(out.pooler_output)  # (B, 2)
        loss = None
        if labels is not None and next_sentence_label is not None:
            loss = mlm_loss + F.cross_entropy(nsp_logits.view(-1, 2), next_sentence_label.view(-1))
        elif labels is not None and (isinstance(sparse_mlm, torch.Tensor) or sparse_mlm):
            # The sparse path is bertkit's own (pretraining without NSP): it returns the masked-LM
            # loss it computed rather than None, so the caller need not compute it again.
            loss = mlm_loss
        output = head_output(
            BertForPreTrainingOutput,
            out,
            loss=loss,
            prediction_logits=prediction_logits,
            seq_relationship_logits=nsp_logits,
        )
        return self._pack(output, return_dict)


class BertForMaskedLM(MaskedLMHead, _MaskedLMMixin, _BertHeadModel):
    """BERT with the masked-LM head (fill-mask)."""

    _add_pooling_layer = False
    _head_description = "masked-LM head"

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()


class BertForNextSentencePrediction(_BertHeadModel):
    """BERT with the next-sentence head on the pooled [CLS] vector."""

    _head_description = "next-sentence head"

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = BertOnlyNSPHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # (B,) 0 = is next, 1 = random
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        next_sentence_label: torch.Tensor | None = None,  # old name of `labels`
    ) -> NextSentencePredictorOutput | tuple:
        labels = next_sentence_label if labels is None else labels
        inputs = EncoderInputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        out = self._encode(inputs, output_attentions, output_hidden_states)
        logits = self.cls(out.pooler_output)  # (B, 2)
        if labels is not None:
            check_class_labels("labels", labels, 2, "next-sentence classes")
        loss = F.cross_entropy(logits.view(-1, 2), labels.view(-1)) if labels is not None else None
        return self._pack(head_output(NextSentencePredictorOutput, out, loss=loss, logits=logits), return_dict)


# ---------------------------------------------------------------------------------------- fine-tuning heads
# The forward, loss and output of each task are every family's (task_heads.py); a BERT head says what
# it computes from the encoder's output (``_logits``).


class _BertWithClassifier(_BertHeadModel):
    """bert + dropout + ``classifier`` Linear(H, n). Subclasses choose n and the features."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, self._num_outputs(config))
        self.post_init()

    @staticmethod
    def _num_outputs(config: BertConfig) -> int:
        return config.num_labels

    def _classify(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(features))


class BertForSequenceClassification(SequenceClassificationHead, _BertWithClassifier):
    """Sentence(-pair) classification or regression on the pooled [CLS] vector.

    ``config.problem_type`` picks the loss: regression (MSE), single_label_classification (cross-entropy)
    or multi_label_classification (BCE with logits); when unset it is inferred from num_labels and the
    label dtype, as in transformers.
    """

    _head_description = "sequence-classification head"

    def _logits(self, out: BaseModelOutputWithPooling) -> torch.Tensor:  # (B, num_labels)
        return self._classify(out.pooler_output)


class BertForTokenClassification(TokenClassificationHead, _BertWithClassifier):
    """Per-token classification (NER, POS) on the last hidden states."""

    _add_pooling_layer = False
    _head_description = "token-classification head"

    def _logits(self, out: BaseModelOutputWithPooling) -> torch.Tensor:  # (B, N, num_labels)
        return self._classify(out.last_hidden_state)


class BertForMultipleChoice(MultipleChoiceHead, _BertWithClassifier):
    """Scores each of C choices (B, C, N) with the pooled vector; softmax over choices."""

    _head_description = "multiple-choice head"

    @staticmethod
    def _num_outputs(config: BertConfig) -> int:
        return 1

    def _logits(self, out: BaseModelOutputWithPooling) -> torch.Tensor:  # (B*C, 1)
        return self._classify(out.pooler_output)


class BertForQuestionAnswering(QuestionAnsweringHead, _BertHeadModel):
    """Extractive QA: start and end logits per token from ``qa_outputs``."""

    _add_pooling_layer = False
    _head_description = "question-answering (span) head"

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)  # start and end logits
        # Span logits are normalised over every position, padding included (as in transformers), so
        # padding positions must be computed, not left at zero.
        self.bert.pack_padding = False
        self.post_init()

    def _logits(self, out: BaseModelOutputWithPooling) -> torch.Tensor:  # (B, N, 2)
        if self.num_labels != 2:
            raise ValueError(f"question answering needs num_labels=2 (start, end); this model has {self.num_labels}")
        return self.qa_outputs(out.last_hidden_state)
