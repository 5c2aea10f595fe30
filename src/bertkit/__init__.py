"""bertkit: BERT from scratch on PyTorch.

The public names are imported lazily so that `import bertkit` stays cheap (the tokenizer does not
pull in torch, the CLI starts fast).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # tokenization
    "BertTokenizer": "bertkit.tokenization",
    "BertTokenizerFast": "bertkit.tokenization",
    "BatchEncoding": "bertkit.tokenization",
    "WordPieceTrainer": "bertkit.tokenization",
    # modeling
    "BertConfig": "bertkit.modeling",
    "BertModel": "bertkit.modeling",
    "BertForPreTraining": "bertkit.modeling",
    "BertForMaskedLM": "bertkit.modeling",
    "BertForNextSentencePrediction": "bertkit.modeling",
    "BertForSequenceClassification": "bertkit.modeling",
    "BertForTokenClassification": "bertkit.modeling",
    "BertForQuestionAnswering": "bertkit.modeling",
    "BertForMultipleChoice": "bertkit.modeling",
    "DistilBertConfig": "bertkit.modeling.distilbert",
    "DistilBertModel": "bertkit.modeling.distilbert",
    "DistilBertForMaskedLM": "bertkit.modeling.distilbert",
    "DistilBertForSequenceClassification": "bertkit.modeling.distilbert",
    "DistilBertForTokenClassification": "bertkit.modeling.distilbert",
    "DistilBertForQuestionAnswering": "bertkit.modeling.distilbert",
    "DistilBertForMultipleChoice": "bertkit.modeling.distilbert",
    "ElectraConfig": "bertkit.modeling.electra",
    "ElectraModel": "bertkit.modeling.electra",
    "ElectraForPreTraining": "bertkit.modeling.electra",
    "ElectraForMaskedLM": "bertkit.modeling.electra",
    "ElectraForSequenceClassification": "bertkit.modeling.electra",
    "ElectraForTokenClassification": "bertkit.modeling.electra",
    "ElectraForQuestionAnswering": "bertkit.modeling.electra",
    "ElectraForMultipleChoice": "bertkit.modeling.electra",
    "RobertaConfig": "bertkit.modeling.roberta",
    "RobertaModel": "bertkit.modeling.roberta",
    "RobertaForMaskedLM": "bertkit.modeling.roberta",
    "RobertaForSequenceClassification": "bertkit.modeling.roberta",
    "RobertaForTokenClassification": "bertkit.modeling.roberta",
    "RobertaForQuestionAnswering": "bertkit.modeling.roberta",
    "RobertaForMultipleChoice": "bertkit.modeling.roberta",
    "XLMRobertaConfig": "bertkit.modeling.roberta",
    "XLMRobertaModel": "bertkit.modeling.roberta",
    "XLMRobertaForMaskedLM": "bertkit.modeling.roberta",
    "XLMRobertaForSequenceClassification": "bertkit.modeling.roberta",
    "XLMRobertaForTokenClassification": "bertkit.modeling.roberta",
    "XLMRobertaForQuestionAnswering": "bertkit.modeling.roberta",
    "XLMRobertaForMultipleChoice": "bertkit.modeling.roberta",
    "ModernBertConfig": "bertkit.modeling.modernbert",
    "ModernBertModel": "bertkit.modeling.modernbert",
    "ModernBertForMaskedLM": "bertkit.modeling.modernbert",
    "ModernBertForSequenceClassification": "bertkit.modeling.modernbert",
    "ModernBertForTokenClassification": "bertkit.modeling.modernbert",
    "ModernBertForQuestionAnswering": "bertkit.modeling.modernbert",
    "ModernBertForMultipleChoice": "bertkit.modeling.modernbert",
    "GPT2Config": "bertkit.modeling.gpt2",
    "GPT2Model": "bertkit.modeling.gpt2",
    "GPT2LMHeadModel": "bertkit.modeling.gpt2",
    "AutoConfig": "bertkit.modeling.auto",
    "AutoTokenizer": "bertkit.modeling.auto",
    "AutoModel": "bertkit.modeling.auto",
    "AutoModelForPreTraining": "bertkit.modeling.auto",
    "AutoModelForMaskedLM": "bertkit.modeling.auto",
    "AutoModelForSequenceClassification": "bertkit.modeling.auto",
    "AutoModelForTokenClassification": "bertkit.modeling.auto",
    "AutoModelForQuestionAnswering": "bertkit.modeling.auto",
    "AutoModelForMultipleChoice": "bertkit.modeling.auto",
    "AutoModelForCausalLM": "bertkit.modeling.auto",
    "count_parameters": "bertkit.modeling",
    "freeze": "bertkit.modeling",
    "unfreeze": "bertkit.modeling",
    # training
    "Trainer": "bertkit.training",
    "EvalPrediction": "bertkit.training",
    "EarlyStoppingCallback": "bertkit.training",
    "TrainerCallback": "bertkit.training",
    "TrainerControl": "bertkit.training",
    "DataCollatorWithPadding": "bertkit.training",
    "DataCollatorForLanguageModeling": "bertkit.training",
    "DefaultDataCollator": "bertkit.training",
    "default_data_collator": "bertkit.training",
    "DataCollatorForTokenClassification": "bertkit.training",
    "TrainingConfig": "bertkit.training",
    "TrainingArguments": "bertkit.training",
    # pipelines
    "pipeline": "bertkit.pipelines",
    # sentence-transformers' classes, answering the same calls
    "SentenceTransformer": "bertkit.pipelines.sentence_transformer",
    "CrossEncoder": "bertkit.pipelines.cross_encoder",
    "InputExample": "bertkit.training.sentence_fit",
    "LoggingHandler": "bertkit.training.sentence_fit",
    "SentenceTransformerTrainer": "bertkit.training.st_trainer",
    "SentenceTransformerTrainingArguments": "bertkit.training.st_trainer",
    "BatchSamplers": "bertkit.training.st_trainer",
    "MultiDatasetBatchSamplers": "bertkit.training.st_trainer",
    "CrossEncoderTrainer": "bertkit.training.cross_encoder_trainer",
    "CrossEncoderTrainingArguments": "bertkit.training.cross_encoder_trainer",
    "SentenceTransformerModelCardData": "bertkit.model_card",
    "CrossEncoderModelCardData": "bertkit.model_card",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
