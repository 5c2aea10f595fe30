"""Shared test set-up: find the real assets that `make assets` fetched into the repo's .assets/."""

import os
from pathlib import Path

_REPO_ASSETS = Path(__file__).resolve().parents[1] / ".assets"
if "BERTKIT_ASSETS" not in os.environ and _REPO_ASSETS.is_dir():
    os.environ["BERTKIT_ASSETS"] = str(_REPO_ASSETS)


import pytest


@pytest.fixture(scope="session")
def polarity_clf(tmp_path_factory):
    """A small real fine-tune of MiniLM on polarity (1,600 sentences, one epoch): a classifier folder
    whose accuracy means something, shared by the precision and serving tests."""
    from bertkit.assets import asset_path
    from bertkit.tasks import finetune

    out = tmp_path_factory.mktemp("polarity-clf") / "model"
    finetune("text-classification", asset_path("minilm"), asset_path("polarity-train"), out, epochs=1,
             batch_size=32, lr=1e-4, max_length=64, max_train_samples=1600, seed=0, progress=False, quiet=True)
    return out
