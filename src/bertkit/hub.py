"""Find a model folder: a local path, or a model id in the local Hugging Face hub cache.

The one resolver of bertkit: models, configs and tokenizers all come through
:func:`resolve_model_path`, so a model id gives its weights and its vocabulary from the same
snapshot. Never touches the network and imports nothing but the standard library.

Cache folders, in order (as ``huggingface_hub`` reads them): ``cache_dir`` when given,
``$HF_HUB_CACHE``, ``$HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``, then
``${XDG_CACHE_HOME:-~/.cache}/huggingface/hub``. In each, ``models--org--name/`` holds
``refs/<revision>`` (a commit hash) and ``snapshots/<hash>/``. The snapshot is the one that
``refs/<revision>`` names, or the folder named by a commit-hash revision; a cache copied without
``refs/`` falls back to the newest snapshot that holds one of the files the caller needs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from bertkit import _args as A

__all__ = ["hub_cache_dirs", "snapshot_folder", "resolve_model_path", "resolve_model_arg"]

_ID_RE = re.compile(r"[\w.\-]+(/[\w.\-]+)?")
# Files that mark a snapshot as a model folder (for the fallback without refs/).
MODEL_FILES = ("config.json", "vocab.txt", "tokenizer.json")


def hub_cache_dirs(cache_dir: str | os.PathLike | None = None) -> list[Path]:
    """Hugging Face hub cache folders to search, in order (explicit, env vars, default)."""
    candidates: list[Path] = []
    if cache_dir is not None:
        candidates.append(Path(cache_dir).expanduser())
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]).expanduser())
    if os.environ.get("HF_HOME"):
        candidates.append(Path(os.environ["HF_HOME"]).expanduser() / "hub")
    xdg = os.environ.get("XDG_CACHE_HOME")
    candidates.append((Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub")
    out: list[Path] = []
    for c in candidates:
        if c not in out:
            out.append(c)
    return out


def snapshot_folder(repo_dir: Path, revision: str = "main", files: Sequence[str] = MODEL_FILES) -> Path | None:
    """The snapshot of ``repo_dir`` (a ``models--org--name`` folder) for ``revision``, or None."""
    snapshots = repo_dir / "snapshots"
    ref = repo_dir / "refs" / revision
    if ref.is_file():
        snap = snapshots / ref.read_text(encoding="utf-8").strip()
        return snap if snap.is_dir() else None
    snap = snapshots / revision  # a commit hash given as the revision
    if snap.is_dir():
        return snap
    if revision != "main" or not snapshots.is_dir():
        return None
    found = [p for p in snapshots.iterdir() if p.is_dir() and any((p / f).is_file() for f in files)]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def resolve_model_path(
    path_or_id: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    revision: str | None = None,
    files: Sequence[str] = MODEL_FILES,
) -> Path:
    """A local model folder for a path or for a model id (``bert-base-uncased``, ``org/name``).

    A path to a file gives its folder. Ids are looked up in the Hugging Face cache layout only
    (a bare id also as ``google-bert/<id>``, where the hub moved the original BERT checkpoints);
    the error lists every place searched.
    """
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        return path.parent
    text = str(path_or_id)
    if _ID_RE.fullmatch(text) is None or text.startswith("."):
        raise FileNotFoundError(f"model folder {text} does not exist")
    ids = [text] if "/" in text else [text, f"google-bert/{text}"]
    looked: list[str] = []
    for cache in hub_cache_dirs(cache_dir):
        for model_id in ids:
            repo_dir = cache / ("models--" + model_id.replace("/", "--"))
            looked.append(str(repo_dir))
            if repo_dir.is_dir():
                snap = snapshot_folder(repo_dir, revision or "main", files)
                if snap is not None:
                    return snap
                looked[-1] += f" (no snapshot for revision {revision or 'main'!r})"
    raise FileNotFoundError(
        f"model {text!r} is neither a local folder nor in the Hugging Face cache. Looked in: "
        + ", ".join(looked)
        + ". bertkit never downloads, so no download was attempted: pass the folder that holds config.json "
        "and the weights, or put the model in the cache (HF_HOME / cache_dir) first."
    )


def hub_id(folder: str | os.PathLike) -> str | None:
    """The model id (``org/name``) of a folder in the Hugging Face cache layout
    (``models--org--name/snapshots/<revision>``), or None for any other folder."""
    parts = Path(folder).resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3].removeprefix("models--").replace("--", "/")
    return None


def resolve_model_arg(value: str | os.PathLike, flag: str = "--model") -> Path:
    """The model folder a command's ``flag`` names: a local folder, or a model id in the cache.

    Unlike :func:`resolve_model_path`, a file is refused rather than read as its folder: a command
    given ``config.json`` for ``--model`` was most likely given the wrong argument. Errors start
    with ``flag`` so the one line a command prints says which argument was wrong.
    """
    path = Path(value).expanduser()
    if path.is_file():
        raise NotADirectoryError(
            f"{A.said(flag, value)} is a file; give the model folder (config.json, weights, tokenizer)"
        )
    try:
        return resolve_model_path(value)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{A.said(flag)}: {e}") from None
