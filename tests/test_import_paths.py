"""The import paths users have (sentence-transformers' and transformers' drop-in lines, and the
layout's own) resolve to the one class defined in bertkit.sentence; the house's shape holds."""

import subprocess
import sys
import types
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
def test_drop_in_paths_give_the_sentence_package_objects(module, names):
    """Each name a drop-in line imports is the very object bertkit.sentence holds under that name."""
    mod = __import__(module, fromlist=names)  # what `from MODULE import NAMES` runs
    home_name = "bertkit.sentence" + module[len("bertkit") :]
    home = __import__(home_name, fromlist=names)
    for name in names:
        value, expected = getattr(mod, name), getattr(home, name)
        if isinstance(value, types.ModuleType):
            assert value.__all__ and all(getattr(value, n) is getattr(expected, n) for n in value.__all__), name
        else:
            assert value is expected, f"{module}.{name} is not {home_name}.{name}"


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
