"""BERT models with transformers' module paths, every head, and inspection helpers; the shared base
(:class:`PreTrainedModel`) and the registry of every family (:mod:`bertkit.modeling.registry`)."""

from .base import PreTrainedModel
from .config import PRESETS, BertConfig, check_vocab_fits
from .electra import (
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForMultipleChoice,
    ElectraForPreTraining,
    ElectraForQuestionAnswering,
    ElectraForSequenceClassification,
    ElectraForTokenClassification,
    ElectraModel,
)
from .heads import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from .inspect import count_parameters, freeze, parameter_table, set_dropout, unfreeze
from .model import BertModel, BertPreTrainedModel
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

MODEL_CLASSES = {
    cls.__name__: cls
    for cls in (
        BertModel,
        BertForPreTraining,
        BertForMaskedLM,
        BertForNextSentencePrediction,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertForQuestionAnswering,
        BertForMultipleChoice,
    )
}

__all__ = [
    "check_vocab_fits",
    "PRESETS",
    "MODEL_CLASSES",
    "BertConfig",
    "PreTrainedModel",
    "BertPreTrainedModel",
    "BertModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForNextSentencePrediction",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "BertForMultipleChoice",
    "ElectraConfig",
    "ElectraModel",
    "ElectraForPreTraining",
    "ElectraForMaskedLM",
    "ElectraForSequenceClassification",
    "ElectraForTokenClassification",
    "ElectraForQuestionAnswering",
    "ElectraForMultipleChoice",
    "count_parameters",
    "parameter_table",
    "freeze",
    "set_dropout",
    "unfreeze",
    "ModelOutput",
    "BaseModelOutputWithPooling",
    "BertForPreTrainingOutput",
    "MaskedLMOutput",
    "NextSentencePredictorOutput",
    "SequenceClassifierOutput",
    "TokenClassifierOutput",
    "QuestionAnsweringModelOutput",
    "MultipleChoiceModelOutput",
]
