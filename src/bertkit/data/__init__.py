"""Pretraining data: raw text -> token shards -> BERT instances -> dynamically masked batches."""

from bertkit.data.collator import MaskingCollator
from bertkit.data.corpus import (
    ShardedCorpus,
    ensure_prepared,
    prepare_corpus,
    read_documents,
    split_sentences,
)
from bertkit.data.instances import (
    PretrainingDataset,
    create_contiguous_instances,
    create_nsp_instances,
    create_single_segment_instances,
    split_documents,
)

__all__ = [
    "MaskingCollator",
    "PretrainingDataset",
    "ShardedCorpus",
    "create_contiguous_instances",
    "create_nsp_instances",
    "create_single_segment_instances",
    "ensure_prepared",
    "prepare_corpus",
    "read_documents",
    "split_documents",
    "split_sentences",
]
