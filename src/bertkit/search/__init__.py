"""Semantic search: `bertkit index` builds a folder of normalised sentence vectors, `bertkit search` queries it."""

from .index import (
    BACKENDS,
    Index,
    build_faiss,
    build_index,
    embed_queries,
    load_index,
    open_index,
    read_corpus,
    top_k_exact,
)

__all__ = [
    "BACKENDS",
    "Index",
    "build_faiss",
    "build_index",
    "embed_queries",
    "load_index",
    "open_index",
    "read_corpus",
    "top_k_exact",
]
