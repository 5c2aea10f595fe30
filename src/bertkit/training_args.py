"""sentence-transformers' ``training_args`` module: ``from bertkit.training_args import BatchSamplers``
works as ``from sentence_transformers.training_args import BatchSamplers`` does."""

from bertkit.training.st_trainer import BatchSamplers, MultiDatasetBatchSamplers, SentenceTransformerTrainingArguments

__all__ = ["BatchSamplers", "MultiDatasetBatchSamplers", "SentenceTransformerTrainingArguments"]
