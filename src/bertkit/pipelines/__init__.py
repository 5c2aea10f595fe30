"""Inference pipelines answering like transformers': fill-mask, classification, zero-shot classification, NER, QA,
embeddings, text generation, text ranking."""

from bertkit.modeling.static import is_static_folder

from .pipelines import (
    EMBEDDING_FOLDER_KINDS,
    SUPPORTED_TASKS,
    FeatureExtractionPipeline,
    FillMaskPipeline,
    Pipeline,
    QuestionAnsweringPipeline,
    TextClassificationPipeline,
    TokenClassificationPipeline,
    pipeline,
)
from .static_embedding import StaticEmbeddingPipeline
from .text_generation import TextGenerationPipeline
from .text_ranking import TextRankingPipeline
from .zero_shot import ZeroShotClassificationPipeline

SUPPORTED_TASKS["text-generation"] = TextGenerationPipeline
SUPPORTED_TASKS["text-ranking"] = TextRankingPipeline
EMBEDDING_FOLDER_KINDS.append((is_static_folder, StaticEmbeddingPipeline))

__all__ = [
    "pipeline",
    "Pipeline",
    "SUPPORTED_TASKS",
    "FillMaskPipeline",
    "TextClassificationPipeline",
    "TokenClassificationPipeline",
    "QuestionAnsweringPipeline",
    "FeatureExtractionPipeline",
    "StaticEmbeddingPipeline",
    "TextGenerationPipeline",
    "TextRankingPipeline",
    "ZeroShotClassificationPipeline",
]
