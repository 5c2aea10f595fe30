"""The import paths users have (sentence-transformers' and transformers' drop-in lines, and the
layout's own) resolve to the one class defined in bertkit.sentence; the house's shape holds."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (module, names): each line a user writes today, from sentence-transformers' layout
DROP_IN = [
    ("bertkit", ["SentenceTransformer", "CrossEncoder", "InputExample", "LoggingHandler", "losses", "util", "models"]),
    ("bertkit", ["SentenceTransformerTrainer", "SentenceTransformerTrainingArguments", "BatchSamplers"]),
    ("bertkit", ["CrossEncoderTrainer", "CrossEncoderTrainingArguments", "SentenceTransformerModelCardData"]),
    ("bertkit.losses", ["MultipleNegativesRankingLoss", "CoSENTLoss", "MatryoshkaLoss", "GISTEmbedLoss"]),
    ("bertkit.evaluation", ["InformationRetrievalEvaluator", "EmbeddingSimilarityEvaluator", "SequentialEvaluator"]),
    ("bertkit.models", ["Transformer", "Pooling", "Dense", "Normalize"]),
    ("bertkit.util", ["cos_sim", "semantic_search", "paraphrase_mining"]),
    ("bertkit.datasets", ["NoDuplicatesDataLoader", "SentencesDataset"]),
    ("bertkit.model_card", ["SentenceTransformerModelCardData", "CrossEncoderModelCardData"]),
    ("bertkit.training_args", ["BatchSamplers", "MultiDatasetBatchSamplers", "SentenceTransformerTrainingArguments"]),
    ("bertkit.cross_encoder", ["CrossEncoder", "CrossEncoderTrainer", "CrossEncoderTrainingArguments", "losses"]),
    ("bertkit.cross_encoder.losses", ["BinaryCrossEntropyLoss", "LambdaLoss", "MultipleNegativesRankingLoss"]),
]


@pytest.mark.parametrize("module,names", DROP_IN, ids=[m for m, _ in DROP_IN])
def test_drop_in_paths_resolve_to_the_sentence_package(module, names):
    mod = importlib.import_module(module)
    for name in names:
        value = getattr(mod, name)
        home = getattr(value, "__module__", None) or value.__name__
        assert home.startswith("bertkit.sentence"), f"{module}.{name} comes from {home}"


def test_a_drop_in_module_is_the_same_objects_as_the_package():
    from bertkit import losses
    from bertkit.sentence import losses as home

    assert losses.CoSENTLoss is home.CoSENTLoss
    assert set(losses.__all__) == set(home.__all__)


def test_the_house_shape_holds():
    """No import circle (function-local imports counted), no public class defined twice, no file or
    function over its limit: tools/check_house.py, which `make lint` runs, says nothing."""
    done = subprocess.run(
        [sys.executable, "tools/check_house.py"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
