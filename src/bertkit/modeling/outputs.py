"""Model outputs readable by attribute, by key and by index, like transformers' ModelOutput.

``outputs.last_hidden_state``, ``outputs["pooler_output"]`` and ``outputs[0]`` all work. Fields that
are None are skipped by keys, iteration and indexing, so ``outputs[2]`` is ``hidden_states`` exactly
when it was requested, as in transformers.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "ModelOutput",
    "BaseModelOutput",
    "BaseModelOutputWithPast",
    "CausalLMOutputWithPast",
    "BaseModelOutputWithPooling",
    "BertForPreTrainingOutput",
    "MaskedLMOutput",
    "NextSentencePredictorOutput",
    "SequenceClassifierOutput",
    "TokenClassifierOutput",
    "QuestionAnsweringModelOutput",
    "MultipleChoiceModelOutput",
]

Tensor = torch.Tensor
Tensors = tuple[torch.Tensor, ...]


class ModelOutput(OrderedDict):
    """Base of every output dataclass: an ordered dict of its non-None fields."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                super().__setitem__(f.name, value)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            if key == "cache" and "past_key_values" in self.__dataclass_fields__:
                key = "past_key_values"  # transformers' newer name for the KV cache, as the property
            return super().__getitem__(key)
        return self.to_tuple()[key]

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dataclass_fields__ and value is not None:
            super().__setitem__(name, value)
        elif name in self.__dataclass_fields__ and name in self.keys():
            super().__delitem__(name)
        super().__setattr__(name, value)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self) -> tuple[Any, ...]:
        """The non-None fields in order, as ``return_dict=False`` returns them."""
        return tuple(v for v in (getattr(self, f.name) for f in dataclasses.fields(self)) if v is not None)

    def __reduce__(self):  # pickle through the dataclass constructor, not OrderedDict's
        return (type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self)))


@dataclass(repr=True, eq=False)
class BaseModelOutput(ModelOutput):
    last_hidden_state: Tensor | None = None  # (B, N, H)
    hidden_states: Tensors | None = None  # num_layers + 1 of (B, N, H): embeddings, then each layer
    attentions: Tensors | None = None  # num_layers of (B, heads, N, N) probabilities


@dataclass(repr=True, eq=False)
class BaseModelOutputWithPast(ModelOutput):
    last_hidden_state: Tensor | None = None  # (B, N, H)
    past_key_values: Any = None  # the KV cache to pass to the next call (use_cache=True)
    hidden_states: Tensors | None = None
    attentions: Tensors | None = None

    cache = property(lambda self: self.past_key_values)  # transformers' newer name for it


@dataclass(repr=True, eq=False)
class CausalLMOutputWithPast(ModelOutput):
    loss: Tensor | None = None  # mean next-token cross-entropy
    logits: Tensor | None = None  # (B, N, V)
    past_key_values: Any = None
    hidden_states: Tensors | None = None
    attentions: Tensors | None = None

    cache = property(lambda self: self.past_key_values)  # transformers' newer name for it


@dataclass(repr=True, eq=False)
class GenerateDecoderOnlyOutput(ModelOutput):
    """What ``generate(..., return_dict_in_generate=True)`` returns, under transformers' names."""

    sequences: Tensor | None = None  # (B * num_return_sequences, prompt + new) token ids
    scores: Tensors | None = None  # one (B, V) per new token: the scores the token was chosen from
    logits: Tensors | None = None  # one (B, V) per new token: the model's raw logits


@dataclass(repr=True, eq=False)
class GenerateBeamDecoderOnlyOutput(ModelOutput):
    """What beam search (``num_beams`` > 1) returns with ``return_dict_in_generate=True``."""

    sequences: Tensor | None = None  # (B * num_return_sequences, prompt + new) token ids
    sequences_scores: Tensor | None = None  # (B * num_return_sequences,) length-penalised log-probs
    scores: Tensors | None = None  # one (B * num_beams, V) per step: the processed log-probs
    logits: Tensors | None = None  # one (B * num_beams, V) per step: the model's raw logits
    beam_indices: Tensor | None = None  # (B * num_return_sequences, new): the beam each token came from


@dataclass(repr=True, eq=False)
class BaseModelOutputWithPooling(ModelOutput):
    last_hidden_state: Tensor | None = None  # (B, N, H)
    pooler_output: Tensor | None = None  # (B, H)
    hidden_states: Tensors | None = None  # num_layers + 1 of (B, N, H): embeddings, then each layer
    attentions: Tensors | None = None  # num_layers of (B, heads, N, N) probabilities


@dataclass(repr=True, eq=False)
class BertForPreTrainingOutput(ModelOutput):
    loss: Tensor | None = None
    prediction_logits: Tensor | None = None  # (B, N, V), or (num_masked, V) with sparse_mlm
    seq_relationship_logits: Tensor | None = None  # (B, 2)
    hidden_states: Tensors | None = None
    attentions: Tensors | None = None


@dataclass(repr=True, eq=False)
class MaskedLMOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # (B, N, V), or (num_masked, V) with sparse_mlm
    hidden_states: Tensors | None = None
    attentions: Tensors | None = None


@dataclass(repr=True, eq=False)
class NextSentencePredictorOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # (B, 2)
    hidden_states: Tensors | None = None
    attentions: Tensors | None = None


@dataclass(repr=True, eq=False)
class SequenceClassifierOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # (B, num_labels)
    hidden_states: Tensors | None = None
    attentions: Tensors | None = None


@dataclass(repr=True, eq=False)
class TokenClassifierOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # (B, N, num_labels)
    hidden_states: Tensors | None = None
    attentions: Tensors | None = None


@dataclass(repr=True, eq=False)
class QuestionAnsweringModelOutput(ModelOutput):
    loss: Tensor | None = None
    start_logits: Tensor | None = None  # (B, N)
    end_logits: Tensor | None = None  # (B, N)
    hidden_states: Tensors | None = None
    attentions: Tensors | None = None


@dataclass(repr=True, eq=False)
class MultipleChoiceModelOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # (B, num_choices)
    hidden_states: Tensors | None = None
    attentions: Tensors | None = None
