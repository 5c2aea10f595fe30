"""Inference pipelines answering like transformers': fill-mask, classification, zero-shot classification, NER, QA,
embeddings, text generation, text ranking."""

from .pipelines import (
    SUPPORTED_TASKS,
    FeatureExtractionPipeline,
    FillMaskPipeline,
    Pipeline,
    QuestionAnsweringPipeline,
    TextClassificationPipeline,
    TokenClassificationPipeline,
    pipeline,
)
from .text_generation import TextGenerationPipeline
from .text_ranking import TextRankingPipeline
from .zero_shot import ZeroShotClassificationPipeline

SUPPORTED_TASKS["text-generation"] = TextGenerationPipeline
SUPPORTED_TASKS["text-ranking"] = TextRankingPipeline

__all__ = [
    "pipeline",
    "Pipeline",
    "SUPPORTED_TASKS",
    "FillMaskPipeline",
    "TextClassificationPipeline",
    "TokenClassificationPipeline",
    "QuestionAnsweringPipeline",
    "FeatureExtractionPipeline",
    "TextGenerationPipeline",
    "TextRankingPipeline",
    "ZeroShotClassificationPipeline",
]
