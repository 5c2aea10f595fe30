"""Task heads on top of BertModel, with transformers' module paths (``bert.*``, ``cls.*``, ``classifier``).

The shared pieces live once: the MLM prediction head (transform + tied decoder) serves pretraining
and masked LM, ``_BertHeadModel`` owns the encoder call and the output packing, and
``_BertWithClassifier`` is the dropout + linear classifier behind sequence, token and
multiple-choice classification.
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
    MaskedLMOutput,
    ModelOutput,
    MultipleChoiceModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
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

IGNORE_INDEX = -100


def num_choices_of(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> int:
    """C of multiple-choice inputs: ids (B, C, N) or embeddings (B, C, N, H); other shapes are an error."""
    ref = input_ids if input_ids is not None else inputs_embeds
    if ref is None:
        raise ValueError("pass exactly one of input_ids or inputs_embeds")
    expected = 3 if input_ids is not None else 4
    if ref.dim() != expected:
        raise ValueError(
            "multiple-choice inputs must have shape "
            f"(batch, num_choices, seq_len{', hidden' if expected == 4 else ''}), got {tuple(ref.shape)}"
        )
    return ref.shape[1]


def flatten_choices(t: torch.Tensor | None) -> torch.Tensor | None:
    """(B, C, N, ...) -> (B*C, N, ...), so that each choice is encoded as one sequence."""
    return None if t is None else t.reshape(-1, *t.shape[2:])


def _check_class_labels(name: str, labels: torch.Tensor, num_classes: int, what: str) -> None:
    """Class ids must lie in [0, num_classes) (or be IGNORE_INDEX); torch's own message names neither."""
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of class ids, got {type(labels).__name__}")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer class ids, got dtype {labels.dtype}")
    ids = labels[labels != IGNORE_INDEX]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_classes):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(
            f"{name} contains {bad}, outside [0, {num_classes}) ({what}={num_classes}; "
            f"{IGNORE_INDEX} marks positions to ignore)"
        )


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


def masked_lm_logits_and_loss(
    predictions: BertLMPredictionHead,
    sequence_output: torch.Tensor,  # (B, N, H)
    labels: torch.Tensor | None,  # (B, N), -100 = not predicted
    sparse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """MLM logits and mean cross-entropy. ``sparse`` runs the head only where labels != -100.

    Sparse gives logits of shape (num_masked, V) and the same loss as dense: the head is per-token,
    and the dense loss ignores every other position anyway. It skips most of the (B*N, V) decoder GEMM.
    """
    if labels is None:
        return predictions(sequence_output), None
    if labels.shape != sequence_output.shape[:-1]:
        raise ValueError(
            f"labels has shape {tuple(labels.shape)} but the input has shape {tuple(sequence_output.shape[:-1])}"
        )
    _check_class_labels("labels", labels, predictions.decoder.out_features, "vocab_size")
    if sparse:
        selected = labels != IGNORE_INDEX  # (B, N)
        logits = predictions(sequence_output[selected])  # (M, V)
        return logits, F.cross_entropy(logits, labels[selected])
    logits = predictions(sequence_output)  # (B, N, V)
    return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


def sequence_classification_loss(config, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """MSE, cross-entropy or BCE by ``config.problem_type`` (inferred from num_labels and labels' dtype)."""
    num_labels = config.num_labels
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        if num_labels == 1:
            return F.mse_loss(logits.squeeze(), labels.squeeze().to(logits.dtype))
        return F.mse_loss(logits, labels.to(logits.dtype))
    if config.problem_type == "single_label_classification":
        _check_class_labels("labels", labels, num_labels, "num_labels")
        return F.cross_entropy(logits.view(-1, num_labels), labels.view(-1))
    if labels.shape != logits.shape:
        raise ValueError(f"multi-label labels must have shape {tuple(logits.shape)}, got {tuple(labels.shape)}")
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


def token_classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every (B, N) position; -100 labels are ignored."""
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels has shape {tuple(labels.shape)} but the input has shape {tuple(logits.shape[:-1])}")
    _check_class_labels("labels", labels, logits.shape[-1], "num_labels")
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


def span_logits_and_loss(
    logits: torch.Tensor, start_positions: torch.Tensor | None, end_positions: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(B, N, 2) QA logits -> start, end logits (B, N) and the mean of both span cross-entropies."""
    start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
    loss = None
    if start_positions is not None and end_positions is not None:
        # Positions outside the sequence (answer truncated away) are clamped to N and ignored.
        n = start_logits.size(1)
        start = start_positions.view(-1).clamp(0, n)
        end = end_positions.view(-1).clamp(0, n)
        loss = (
            F.cross_entropy(start_logits, start, ignore_index=n) + F.cross_entropy(end_logits, end, ignore_index=n)
        ) / 2
    return start_logits, end_logits, loss


# ---------------------------------------------------------------------------------------- shared plumbing


class _BertHeadModel(BertPreTrainedModel):
    """A BertModel under ``self.bert`` plus a head; runs the encoder and packs outputs."""

    _add_pooling_layer = True

    def __init__(self, config: BertConfig):
        super().__init__(config)
        with no_init_weights():  # the whole model is initialised once, in post_init
            self.bert = BertModel(config, add_pooling_layer=self._add_pooling_layer)

    def _encode(
        self,
        input_ids,
        attention_mask,
        token_type_ids,
        position_ids,
        inputs_embeds,
        output_attentions,
        output_hidden_states,
    ) -> BaseModelOutputWithPooling:
        return self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )

    def _pack(self, output: ModelOutput, return_dict: bool | None) -> ModelOutput | tuple:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


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
        sparse_mlm: bool = False,
    ) -> BertForPreTrainingOutput | tuple:
        out = self._encode(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
        )
        prediction_logits, mlm_loss = masked_lm_logits_and_loss(
            self.cls.predictions, out.last_hidden_state, labels, sparse_mlm
        )
        nsp_logits = self.cls.seq_relationship(out.pooler_output)  # (B, 2)
        loss = None
        if labels is not None and next_sentence_label is not None:
            loss = mlm_loss + F.cross_entropy(nsp_logits.view(-1, 2), next_sentence_label.view(-1))
        return self._pack(
            BertForPreTrainingOutput(
                loss=loss,
                prediction_logits=prediction_logits,
                seq_relationship_logits=nsp_logits,
                hidden_states=out.hidden_states,
                attentions=out.attentions,
            ),
            return_dict,
        )


class BertForMaskedLM(_MaskedLMMixin, _BertHeadModel):
    """BERT with the masked-LM head (fill-mask)."""

    _add_pooling_layer = False
    _head_description = "masked-LM head"

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # (B, N) token ids, -100 where not masked
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        sparse_mlm: bool = False,
    ) -> MaskedLMOutput | tuple:
        out = self._encode(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
        )
        logits, loss = masked_lm_logits_and_loss(self.cls.predictions, out.last_hidden_state, labels, sparse_mlm)
        return self._pack(
            MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions),
            return_dict,
        )


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
        out = self._encode(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
        )
        logits = self.cls(out.pooler_output)  # (B, 2)
        if labels is not None:
            _check_class_labels("labels", labels, 2, "next-sentence classes")
        loss = F.cross_entropy(logits.view(-1, 2), labels.view(-1)) if labels is not None else None
        return self._pack(
            NextSentencePredictorOutput(
                loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions
            ),
            return_dict,
        )


# ---------------------------------------------------------------------------------------- fine-tuning heads


class _BertWithClassifier(_BertHeadModel):
    """bert + dropout + ``classifier`` Linear(H, n). Subclasses choose n, the features and the loss."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(config.hidden_size, self._num_outputs(config))
        self.post_init()

    @staticmethod
    def _num_outputs(config: BertConfig) -> int:
        return config.num_labels

    def _classify(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(features))


class BertForSequenceClassification(_BertWithClassifier):
    """Sentence(-pair) classification or regression on the pooled [CLS] vector.

    ``config.problem_type`` picks the loss: regression (MSE), single_label_classification (cross-entropy)
    or multi_label_classification (BCE with logits); when unset it is inferred from num_labels and the
    label dtype, as in transformers.
    """

    _head_description = "sequence-classification head"

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # (B,) class ids, (B,) / (B, n) floats, or (B, n) multi-hot
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> SequenceClassifierOutput | tuple:
        out = self._encode(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
        )
        logits = self._classify(out.pooler_output)  # (B, num_labels)
        loss = self._loss(logits, labels) if labels is not None else None
        return self._pack(
            SequenceClassifierOutput(
                loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions
            ),
            return_dict,
        )

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return sequence_classification_loss(self.config, logits, labels)


class BertForTokenClassification(_BertWithClassifier):
    """Per-token classification (NER, POS) on the last hidden states."""

    _add_pooling_layer = False
    _head_description = "token-classification head"

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # (B, N) tag ids, -100 = ignored
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> TokenClassifierOutput | tuple:
        out = self._encode(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
        )
        logits = self._classify(out.last_hidden_state)  # (B, N, num_labels)
        loss = token_classification_loss(logits, labels) if labels is not None else None
        return self._pack(
            TokenClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions),
            return_dict,
        )


class BertForMultipleChoice(_BertWithClassifier):
    """Scores each of C choices (B, C, N) with the pooled vector; softmax over choices."""

    _head_description = "multiple-choice head"

    @staticmethod
    def _num_outputs(config: BertConfig) -> int:
        return 1

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, C, N)
        attention_mask: torch.Tensor | None = None,  # (B, C, N)
        token_type_ids: torch.Tensor | None = None,  # (B, C, N)
        position_ids: torch.Tensor | None = None,  # (B, C, N)
        inputs_embeds: torch.Tensor | None = None,  # (B, C, N, H)
        labels: torch.Tensor | None = None,  # (B,) index of the right choice
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> MultipleChoiceModelOutput | tuple:
        num_choices = num_choices_of(input_ids, inputs_embeds)
        flat = flatten_choices
        out = self._encode(
            flat(input_ids),
            flat(attention_mask),
            flat(token_type_ids),
            flat(position_ids),
            flat(inputs_embeds),
            output_attentions,
            output_hidden_states,
        )
        logits = self._classify(out.pooler_output).view(-1, num_choices)  # (B, C)
        if labels is not None:
            _check_class_labels("labels", labels, num_choices, "num_choices")
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return self._pack(
            MultipleChoiceModelOutput(
                loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions
            ),
            return_dict,
        )


class BertForQuestionAnswering(_BertHeadModel):
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

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,  # (B,)
        end_positions: torch.Tensor | None = None,  # (B,)
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> QuestionAnsweringModelOutput | tuple:
        out = self._encode(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
        )
        if self.num_labels != 2:
            raise ValueError(f"question answering needs num_labels=2 (start, end); this model has {self.num_labels}")
        logits = self.qa_outputs(out.last_hidden_state)  # (B, N, 2)
        start_logits, end_logits, loss = span_logits_and_loss(logits, start_positions, end_positions)
        return self._pack(
            QuestionAnsweringModelOutput(
                loss=loss,
                start_logits=start_logits,
                end_logits=end_logits,
                hidden_states=out.hidden_states,
                attentions=out.attentions,
            ),
            return_dict,
        )
