"""Shared test set-up: find the real assets that `make assets` fetched into the repo's .assets/."""

import os
from pathlib import Path

_REPO_ASSETS = Path(__file__).resolve().parents[1] / ".assets"
if "BERTKIT_ASSETS" not in os.environ and _REPO_ASSETS.is_dir():
    os.environ["BERTKIT_ASSETS"] = str(_REPO_ASSETS)
