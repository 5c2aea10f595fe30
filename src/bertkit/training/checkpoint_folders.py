"""The Trainer's files: resumable checkpoints, their retention, the best model and the final model.

Layout under a run's ``output_dir``::

    checkpoints/step-0000500/   model weights (+ tokenizer), trainer_state.pt, rng_rank{R}.pt
    best/                       the best model so far and best.json (with ``best_metric``)
    config.json, model.safetensors, ...   the final model, written into output_dir itself

Every folder is published in one rename (:mod:`bertkit._io`), so a run killed while writing leaves
the previous checkpoint intact and :func:`latest_checkpoint` never picks a half-written one. Tied
weights follow :func:`bertkit.checkpoint.shared_parameters` everywhere: saved once, re-tied on load.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from bertkit._io import atomic_dir, atomic_update_dir, atomic_write_json, atomic_write_text
from bertkit._text import read_jsonl

__all__ = [
    "STATE_FILE",
    "checkpoints_newest_first",
    "latest_checkpoint",
    "rng_state",
    "set_rng_state",
    "save_model",
    "load_model_weights",
    "write_checkpoint",
    "read_checkpoint",
    "prune_checkpoints",
    "write_best",
    "write_final",
    "remove_leftovers",
    "remove_run",
    "truncate_metrics",
]

STATE_FILE = "trainer_state.pt"
_CKPT_RE = re.compile(r"^step-(\d+)$")

SaveFn = Callable[[nn.Module, Path], None]


def _checkpoints_root(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / "checkpoints"


def checkpoints_newest_first(output_dir: str | os.PathLike) -> list[Path]:
    """Every published ``checkpoints/step-N`` folder, newest first (temporary folders are ignored)."""
    root = _checkpoints_root(output_dir)
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), p) for p in root.iterdir() if (m := _CKPT_RE.match(p.name)) and (p / STATE_FILE).is_file()
    ]
    return [p for _, p in sorted(found, reverse=True)]


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """Newest complete ``checkpoints/step-N`` folder (temporary folders are ignored)."""
    found = checkpoints_newest_first(output_dir)
    return found[0] if found else None


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU and CUDA) RNG states of this process."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_model(model: nn.Module, directory: Path, tokenizer: Any = None, save_fn: SaveFn | None = None) -> None:
    """Write ``model`` (and the tokenizer's files) into the existing ``directory``.

    ``save_fn(model, directory)`` when given, else ``model.save_pretrained``, else the state dict
    as ``model.safetensors`` without tied duplicates.
    """
    from bertkit.checkpoint import checkpoint_state, save_state_dict

    if save_fn is not None:
        save_fn(model, directory)
    elif hasattr(model, "save_pretrained"):
        model.save_pretrained(str(directory))
    else:
        save_state_dict(checkpoint_state(model), directory)
    if tokenizer is not None and hasattr(tokenizer, "save_pretrained") and not (directory / "vocab.txt").exists():
        tokenizer.save_pretrained(str(directory))


def load_model_weights(model: nn.Module, directory: Path) -> None:
    """Load the ``*.safetensors`` of a checkpoint folder into ``model`` (tied aliases may be absent)."""
    own = getattr(model, "load_folder_weights", None)
    if own is not None:  # a model saved as several folders (ELECTRA's discriminator + generator/) reads them
        own(directory)
        return
    from safetensors.torch import load_file

    from bertkit.checkpoint import load_checkpoint_state

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in checkpoint {directory}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    load_checkpoint_state(model, state, directory)


def write_checkpoint(
    output_dir: str | os.PathLike,
    step: int,
    write_model: Callable[[Path], None],
    state: dict[str, Any],
    rng_states: list[dict[str, Any]],
    keep_last: int,
) -> Path:
    """Publish ``checkpoints/step-N`` (model, trainer state, one RNG file per rank); prune old ones."""
    root = _checkpoints_root(output_dir)
    final = root / f"step-{step:07d}"
    with atomic_dir(final, replace=True) as tmp:  # a step-N of an earlier, abandoned run is ours to replace
        for rank, rng in enumerate(rng_states):
            torch.save(rng, tmp / f"rng_rank{rank}.pt")
        write_model(tmp)
        torch.save(state, tmp / STATE_FILE)
    prune_checkpoints(output_dir, keep_last)
    return final


def read_checkpoint(ckpt: Path, rank: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(trainer state, this rank's RNG state or None) of a checkpoint folder."""
    state = torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=False)
    rng_file = ckpt / f"rng_rank{rank}.pt"
    rng = torch.load(rng_file, map_location="cpu", weights_only=False) if rng_file.exists() else None
    return state, rng


def prune_checkpoints(output_dir: str | os.PathLike, keep_last: int) -> None:
    """Keep the newest ``keep_last`` (at least one) ``step-N`` folders."""
    root = _checkpoints_root(output_dir)
    kept = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _CKPT_RE.match(p.name)))
    for _, old in kept[: -max(1, keep_last)]:
        shutil.rmtree(old, ignore_errors=True)


def write_best(output_dir: str | os.PathLike, write_model: Callable[[Path], None], info: dict[str, Any]) -> Path:
    """Publish ``best/`` (the model and ``best.json`` with ``info``), replacing the previous best."""
    best = Path(output_dir) / "best"
    with atomic_dir(best, replace=True) as tmp:
        write_model(tmp)
        atomic_write_json(tmp / "best.json", info, indent=None)
    return best


def write_final(output_dir: str | os.PathLike, write_model: Callable[[Path], None]) -> Path:
    """Write the model into ``output_dir`` itself, each file replaced atomically."""
    with atomic_update_dir(output_dir) as tmp:
        write_model(tmp)
    return Path(output_dir)


def remove_leftovers(output_dir: str | os.PathLike) -> None:
    """Temp folders of a run killed while publishing a checkpoint or the best model."""
    out = Path(output_dir)
    patterns = [
        (_checkpoints_root(out), ".step-*.tmp"),
        (_checkpoints_root(out), ".step-*.old"),
        (out, ".best.*.tmp"),
        (out, ".best.*.old"),
    ]
    for folder, pattern in patterns:
        if folder.is_dir():
            for p in folder.glob(pattern):
                shutil.rmtree(p, ignore_errors=True)


def remove_run(output_dir: str | os.PathLike) -> None:
    """The Trainer's own files of an earlier run (checkpoints, best model, metrics), for overwrite."""
    out = Path(output_dir)
    for name in ("checkpoints", "best"):
        if (out / name).is_dir():
            shutil.rmtree(out / name)
    for name in ("metrics.jsonl", "metrics.png"):
        (out / name).unlink(missing_ok=True)


def truncate_metrics(path: Path, step: int) -> None:
    """Drop the metrics rows logged after ``step`` (a resumed run logs them again)."""
    if not path.exists():
        return
    kept = [row for row in read_jsonl(path) if row.get("step", 0) <= step]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in kept))
