"""bertkit: BERT from scratch on PyTorch.

The public names are imported lazily so that `import bertkit` stays cheap (the tokenizer does not
pull in torch, the CLI starts fast).
"""

from __future__ import annotations

import importlib
from typing import Any

from bertkit import _hooks

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
    "SentenceTransformer": "bertkit.sentence",
    "CrossEncoder": "bertkit.sentence",
    "InputExample": "bertkit.sentence",
    "LoggingHandler": "bertkit.sentence",
    "SentenceTransformerTrainer": "bertkit.sentence",
    "SentenceTransformerTrainingArguments": "bertkit.sentence",
    "BatchSamplers": "bertkit.sentence",
    "MultiDatasetBatchSamplers": "bertkit.sentence",
    "CrossEncoderTrainer": "bertkit.sentence",
    "CrossEncoderTrainingArguments": "bertkit.sentence",
    "SentenceTransformerModelCardData": "bertkit.sentence",
    "CrossEncoderModelCardData": "bertkit.sentence",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

# The calls lower layers make into higher ones, by name (bertkit._hooks): modeling loads a model at an
# inference precision and moves a prepared model's derived weights without importing bertkit.inference.
_hooks.provide_lazily("inference.prepare", "bertkit.inference.precision:prepare_for_inference")
_hooks.provide_lazily("inference.check_move", "bertkit.inference.precision:check_move")
_hooks.provide_lazily("inference.follow_move", "bertkit.inference.precision:follow_move")
# train-embedder mines negatives from a corpus file or a search index folder (bertkit.search, above bertkit.sentence)
_hooks.provide_lazily("search.mining_corpus", "bertkit.search.index:mining_corpus")
# retrieval metrics of hybrid search (bertkit.sentence.evaluation.metrics) rank with bertkit.search.lexical
_hooks.provide_lazily("search.first_stage", "bertkit.search.lexical:first_stage")
# SentenceTransformer(static folder) gives the subclass that bertkit.sentence.static builds on it
_hooks.provide_lazily("sentence.static_class_for", "bertkit.sentence.static:static_class_for")


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
