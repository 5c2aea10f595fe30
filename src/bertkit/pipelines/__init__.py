"""Inference pipelines (fill-mask, classification, NER, QA, embeddings), answering like transformers'."""

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

__all__ = [
    "pipeline",
    "Pipeline",
    "SUPPORTED_TASKS",
    "FillMaskPipeline",
    "TextClassificationPipeline",
    "TokenClassificationPipeline",
    "QuestionAnsweringPipeline",
    "FeatureExtractionPipeline",
]
