"""What the task heads of every encoder family share: the losses, the encoder call and each task's forward.

A family's head model (``BertForSequenceClassification``, ``ElectraForSequenceClassification``,
``DistilBertForSequenceClassification``...) declares its own modules, under transformers' names, and
one method, ``_logits(out)``: what its head computes from the encoder's output. The rest is the same
for every family and lives here once: transformers' forward signature of each task, the encoder call,
the task's loss (chosen by ``config.problem_type`` for sequence classification) and the output.

Shapes: B batch, C choices, N sequence length, H hidden size, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .outputs import (
    MaskedLMOutput,
    ModelOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

__all__ = [
    "IGNORE_INDEX",
    "EncoderHeadMixin",
    "EncoderInputs",
    "LabelledHead",
    "LinearSpanHead",
    "LinearTokenClassification",
    "MaskedLMHead",
    "MultipleChoiceHead",
    "QuestionAnsweringHead",
    "SequenceClassificationHead",
    "TokenClassificationHead",
    "check_class_labels",
    "check_span_config",
    "classifier_dropout",
    "flatten_choices",
    "head_output",
    "masked_lm_logits_and_loss",
    "num_choices_of",
    "sequence_classification_loss",
    "span_logits_and_loss",
    "token_classification_loss",
]

IGNORE_INDEX = -100


# ---------------------------------------------------------------------------------------- checks and losses


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


def check_class_labels(name: str, labels: torch.Tensor, num_classes: int, what: str) -> None:
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


def classifier_dropout(config: Any) -> float:
    """The dropout before a classifier: ``classifier_dropout``, or ``hidden_dropout_prob`` when unset."""
    return config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob


def check_span_config(config: Any) -> None:
    """A span head has two outputs per token, start and end."""
    if config.num_labels != 2:
        raise ValueError(f"question answering needs num_labels=2 (start, end); the config has {config.num_labels}")


def masked_lm_logits_and_loss(
    head: Callable[[torch.Tensor], torch.Tensor],  # (..., H) -> (..., V), per token
    sequence_output: torch.Tensor,  # (B, N, H)
    labels: torch.Tensor | None,  # (B, N), -100 = not predicted
    sparse: bool | torch.Tensor,  # or (B, N) bool: positions predicted beside the masked ones
    vocab_size: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """MLM logits and mean cross-entropy. ``sparse`` runs the head only where labels != -100.

    Sparse gives logits of shape (num_masked, V) and the same loss as dense: the head is per-token,
    and the dense loss ignores every other position anyway. It skips most of the (B*N, V) decoder GEMM.
    A (B, N) bool ``sparse`` also predicts the positions it marks (rows in row-major order among the
    masked ones), for a loss of the caller's own; the cross-entropy still covers the masked ones only.
    """
    if labels is None:
        return head(sequence_output), None
    if labels.shape != sequence_output.shape[:-1]:
        raise ValueError(
            f"labels has shape {tuple(labels.shape)} but the input has shape {tuple(sequence_output.shape[:-1])}"
        )
    check_class_labels("labels", labels, vocab_size, "vocab_size")
    extra = sparse if isinstance(sparse, torch.Tensor) else None
    if extra is not None and (extra.shape != labels.shape or extra.dtype != torch.bool):
        raise ValueError(
            f"sparse_mlm, when a tensor, is a bool mask of the labels' shape {tuple(labels.shape)}; "
            f"got {extra.dtype} of shape {tuple(extra.shape)}"
        )
    if extra is not None or sparse:
        selected = labels != IGNORE_INDEX if extra is None else (labels != IGNORE_INDEX) | extra  # (B, N)
        logits = head(sequence_output[selected])  # (M, V); extra rows' labels are -100: not in the loss
        return logits, F.cross_entropy(logits, labels[selected])
    logits = head(sequence_output)  # (B, N, V)
    return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


def sequence_classification_loss(config: Any, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
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
        check_class_labels("labels", labels, num_labels, "num_labels")
        return F.cross_entropy(logits.view(-1, num_labels), labels.view(-1))
    if labels.shape != logits.shape:
        raise ValueError(f"multi-label labels must have shape {tuple(logits.shape)}, got {tuple(labels.shape)}")
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


def token_classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every (B, N) position; -100 labels are ignored."""
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels has shape {tuple(labels.shape)} but the input has shape {tuple(logits.shape[:-1])}")
    check_class_labels("labels", labels, logits.shape[-1], "num_labels")
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


# ---------------------------------------------------------------------------------------- the encoder call


class EncoderInputs(NamedTuple):
    """What a head model hands its encoder, in BERT's argument order."""

    input_ids: torch.Tensor | None  # (B, N)
    attention_mask: torch.Tensor | None  # (B, N)
    token_type_ids: torch.Tensor | None  # (B, N)
    position_ids: torch.Tensor | None  # (B, N) or (1, N)
    inputs_embeds: torch.Tensor | None  # (B, N, H)


def head_output(output_class: type[ModelOutput], out: ModelOutput, **fields: Any) -> ModelOutput:
    """A head's ``output_class`` with its ``fields`` and the encoder's hidden states and attentions."""
    return output_class(**fields, hidden_states=out.hidden_states, attentions=out.attentions)


class EncoderHeadMixin:
    """A head model's encoder call (the encoder is ``self.base_model``) and output packing."""

    def _encode(
        self, inputs: EncoderInputs, output_attentions: bool | None, output_hidden_states: bool | None
    ) -> ModelOutput:
        kwargs = inputs._asdict()
        if inputs.position_ids is None:  # not passed: the encoder makes 0..N-1 itself
            del kwargs["position_ids"]
        return self.base_model(
            kwargs.pop("input_ids"),
            **kwargs,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )

    def _pack(self, output: ModelOutput, return_dict: bool | None) -> ModelOutput | tuple:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


# ---------------------------------------------------------------------------------------- task forwards
# A task mixin goes first among a head model's bases (its forward must come before nn.Module's); the
# model supplies ``_logits(out)``, what its head computes from the encoder's output.


class LabelledHead:
    """transformers' forward of a head trained on ``labels``: encode, then ``_task_output``."""

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # the task's targets (see the task's class)
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> ModelOutput | tuple:
        inputs = EncoderInputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        out = self._encode(self._encoder_inputs(inputs), output_attentions, output_hidden_states)
        return self._pack(self._task_output(out, labels, inputs), return_dict)

    def _encoder_inputs(self, inputs: EncoderInputs) -> EncoderInputs:
        return inputs


class SequenceClassificationHead(LabelledHead):
    """Sentence(-pair) classification or regression: ``_logits(out)`` is (B, num_labels).

    ``config.problem_type`` picks the loss: regression (MSE), single_label_classification (cross-entropy)
    or multi_label_classification (BCE with logits); when unset it is inferred from num_labels and the
    label dtype, as in transformers. ``labels``: (B,) class ids, (B,) / (B, n) floats, or (B, n) multi-hot.
    """

    def _task_output(self, out: ModelOutput, labels: torch.Tensor | None, inputs: EncoderInputs) -> ModelOutput:
        logits = self._logits(out)  # (B, num_labels)
        loss = sequence_classification_loss(self.config, logits, labels) if labels is not None else None
        return head_output(SequenceClassifierOutput, out, loss=loss, logits=logits)


class TokenClassificationHead(LabelledHead):
    """Per-token classification (NER, POS): ``_logits(out)`` is (B, N, num_labels); ``labels``: (B, N)
    tag ids, -100 = ignored."""

    def _task_output(self, out: ModelOutput, labels: torch.Tensor | None, inputs: EncoderInputs) -> ModelOutput:
        logits = self._logits(out)  # (B, N, num_labels)
        loss = token_classification_loss(logits, labels) if labels is not None else None
        return head_output(TokenClassifierOutput, out, loss=loss, logits=logits)


class MultipleChoiceHead(LabelledHead):
    """C choices per example, as (B, C, N) ids or (B, C, N, H) embeddings, each encoded as one sequence:
    ``_logits(out)`` scores each, (B*C, 1); softmax over the choices. ``labels``: (B,) the right choice."""

    def _encoder_inputs(self, inputs: EncoderInputs) -> EncoderInputs:
        num_choices_of(inputs.input_ids, inputs.inputs_embeds)  # a wrong shape fails here, before encoding
        return EncoderInputs(*map(flatten_choices, inputs))

    def _task_output(self, out: ModelOutput, labels: torch.Tensor | None, inputs: EncoderInputs) -> ModelOutput:
        num_choices = num_choices_of(inputs.input_ids, inputs.inputs_embeds)
        logits = self._logits(out).view(-1, num_choices)  # (B, C)
        if labels is not None:
            check_class_labels("labels", labels, num_choices, "num_choices")
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return head_output(MultipleChoiceModelOutput, out, loss=loss, logits=logits)


class MaskedLMHead:
    """Masked LM (fill-mask): the model supplies ``_masked_lm(sequence_output, labels, sparse)``, its
    logits and loss (see :func:`masked_lm_logits_and_loss`). ``labels``: (B, N) token ids, -100 where not
    masked; ``sparse_mlm``: logits only where labels != -100, (num_masked, V), or also where a (B, N)
    bool ``sparse_mlm`` is True."""

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
        sparse_mlm: bool | torch.Tensor = False,
    ) -> MaskedLMOutput | tuple:
        inputs = EncoderInputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        out = self._encode(inputs, output_attentions, output_hidden_states)
        logits, loss = self._masked_lm(out.last_hidden_state, labels, sparse_mlm)
        return self._pack(head_output(MaskedLMOutput, out, loss=loss, logits=logits), return_dict)


class QuestionAnsweringHead:
    """Extractive QA: ``_logits(out)`` is (B, N, 2), start and end logits per token; the loss is the mean
    cross-entropy of the start and end positions, (B,) each."""

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
        inputs = EncoderInputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        out = self._encode(inputs, output_attentions, output_hidden_states)
        start, end, loss = span_logits_and_loss(self._logits(out), start_positions, end_positions)
        output = head_output(QuestionAnsweringModelOutput, out, loss=loss, start_logits=start, end_logits=end)
        return self._pack(output, return_dict)


# ---------------------------------------------------------------------------------------- linear heads
# The token and span heads of the families whose heads are one Linear on the last hidden states
# (ELECTRA, RoBERTa, XLM-RoBERTa), with transformers' module names. A family whose head differs
# (BERT's shared classifier, DistilBERT's, ModernBERT's ``head``) writes its own.


class LinearTokenClassification(TokenClassificationHead):
    """Per-token classification (NER) on the last hidden states: dropout, then ``classifier``."""

    _head_description = "token-classification head"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _logits(self, out: ModelOutput) -> torch.Tensor:  # (B, N, num_labels)
        return self.classifier(self.dropout(out.last_hidden_state))


class LinearSpanHead(QuestionAnsweringHead):
    """Extractive QA: start and end logits per token from ``qa_outputs``."""

    _head_description = "question-answering (span) head"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        check_span_config(config)
        self.num_labels = config.num_labels
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        # Span logits are normalised over every position, padding included, so padding is computed.
        self.base_model.pack_padding = False
        self.post_init()

    def _logits(self, out: ModelOutput) -> torch.Tensor:  # (B, N, 2)
        return self.qa_outputs(out.last_hidden_state)
