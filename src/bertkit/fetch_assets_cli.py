"""`bertkit fetch-assets`: the set-up step that fetches real weights and data (see assets.py)."""

from __future__ import annotations

import argparse

from bertkit.assets import fetch_assets


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="fetch again even when cached")


def run(args: argparse.Namespace) -> int:
    fetch_assets(force=args.force)
    return 0
