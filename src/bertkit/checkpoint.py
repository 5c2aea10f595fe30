"""transformers-compatible checkpoints: find, read, map and write weights of any model family.

Reads ``model.safetensors``, a sharded ``model.safetensors.index.json``, ``pytorch_model.bin``
(always with ``weights_only=True``) or its sharded index, from a folder or from a model id in the
local Hugging Face cache (``models--org--name/snapshots/<rev>/``). Never touches the network.

Keys are checkpoint keys as they are (module paths mirror transformers); the only mapping is the
model's ``base_model_prefix`` (a head model from a bare-encoder checkpoint and the reverse), legacy
TensorFlow ``gamma``/``beta`` LayerNorm names, renames a model class passes in, tied weights, and
the checkpoint keys a model class lists as known leftovers (``_keys_to_ignore_on_load_unexpected``).

This module is a leaf: it knows no model class. A model family passes in what is its own (its
builder, key renames, tied weights and how to initialise a missing parameter) to
:func:`load_into_new_model`; name resolution is :mod:`bertkit.hub`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn

from bertkit._io import atomic_update_dir, file_mode
from bertkit._text import read_json
from bertkit.hub import hub_cache_dirs, resolve_model_path

__all__ = [
    "hub_cache_dirs",
    "resolve_model_path",
    "find_weights_file",
    "load_state_dict",
    "save_state_dict",
    "save_pretrained",
    "map_checkpoint_keys",
    "load_into_new_model",
    "LoadResult",
    "shared_parameters",
    "checkpoint_state",
    "load_checkpoint_state",
]

logger = logging.getLogger("bertkit")

SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
BIN_WEIGHTS = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"
WEIGHT_FILES = (SAFE_WEIGHTS, SAFE_INDEX, BIN_WEIGHTS, BIN_INDEX)

# Buffers that some checkpoints carry and no current model needs.
_IGNORED_KEYS = re.compile(r"(^|\.)embeddings\.(position_ids|token_type_ids)$")

# ---------------------------------------------------------------------------------------- locating


def find_weights_file(folder: str | os.PathLike) -> Path:
    """The weights file (or shard index) in a model folder, safetensors first."""
    folder = Path(folder)
    if folder.is_file():
        return folder
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    raise FileNotFoundError(
        f"no weights in {folder}: expected one of {', '.join(WEIGHT_FILES)}; found {present or 'nothing'}"
    )


# ---------------------------------------------------------------------------------------- reading


def _read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except Exception as e:  # safetensors raises its own error type for truncated/corrupt headers and data
        raise ValueError(
            f"cannot read weights file {file} ({file.stat().st_size:,} bytes): {e}. "
            "The file is truncated or corrupt; save or copy it again."
        ) from None


def _read_bin(file: Path) -> dict[str, torch.Tensor]:
    try:
        data = torch.load(str(file), map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as e:
        raise ValueError(f"cannot read weights file {file}: {e}. The file is truncated or corrupt.") from None
    except Exception as e:  # pickle.UnpicklingError: refused by weights_only (code, not tensors)
        raise ValueError(
            f"refusing to load {file}: it holds more than tensors ({e}); bertkit loads .bin files with "
            "weights_only=True. Convert it to safetensors with a trusted tool."
        ) from None
    if isinstance(data, Mapping) and "state_dict" in data and isinstance(data["state_dict"], Mapping):
        data = data["state_dict"]
    if not isinstance(data, Mapping) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ValueError(f"{file} does not hold a state dict of tensors")
    return dict(data)


def load_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint (folder, weights file or shard index), keys unchanged."""
    file = find_weights_file(path)
    if file.name.endswith(".index.json"):
        try:
            index = read_json(file)
            weight_map = index["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError(f"weight_map is a {type(weight_map).__name__}, not an object")
        except (KeyError, TypeError) as e:
            raise ValueError(f"{file}: not a valid shard index ({e})") from None
        state: dict[str, torch.Tensor] = {}
        for shard in dict.fromkeys(weight_map.values()):
            shard_file = file.parent / shard
            if not shard_file.is_file():
                raise FileNotFoundError(f"shard {shard_file} listed in {file} is missing")
            state.update(_read_safetensors(shard_file) if shard.endswith(".safetensors") else _read_bin(shard_file))
        missing = set(weight_map) - set(state)
        if missing:
            raise ValueError(f"{file} lists {len(missing)} tensors its shards lack, e.g. {sorted(missing)[:3]}")
        return state
    if file.suffix == ".safetensors":
        return _read_safetensors(file)
    return _read_bin(file)


# ---------------------------------------------------------------------------------------- writing


def _parse_size(size: int | str) -> int:
    if isinstance(size, int):
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B)?\s*", size, flags=re.I)
    if not m:
        raise ValueError(f"bad shard size {size!r}; use bytes or e.g. '500MB', '2GB'")
    unit = (m.group(2) or "B").upper()
    mult = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}[unit]
    return int(float(m.group(1)) * mult)


def _compact(t: torch.Tensor) -> torch.Tensor:
    """``t`` on the CPU, contiguous, and alone in its storage (torch.save writes a view's whole storage)."""
    t = t.detach().contiguous().cpu()
    return t.clone() if t.untyped_storage().nbytes() != t.numel() * t.element_size() else t


def _write_weights(tensors: dict[str, torch.Tensor], file: Path, safe: bool) -> None:
    if safe:
        from safetensors.torch import save_file

        save_file(tensors, str(file), metadata={"format": "pt"})
        os.chmod(file, file_mode())  # safetensors creates its files 0600
    else:
        torch.save({k: _compact(v) for k, v in tensors.items()}, str(file))


def save_state_dict(
    state: Mapping[str, torch.Tensor],
    folder: str | os.PathLike,
    max_shard_size: int | str | None = None,
    safe_serialization: bool = True,
) -> list[Path]:
    """Write tensors as model.safetensors (or shards + index) into an existing folder; with
    ``safe_serialization=False`` as pytorch_model.bin (or its shards + index), as transformers does."""
    folder = Path(folder)
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    single, index_name = (SAFE_WEIGHTS, SAFE_INDEX) if safe_serialization else (BIN_WEIGHTS, BIN_INDEX)
    if max_shard_size is None:
        _write_weights(tensors, folder / single, safe_serialization)
        return [folder / single]
    limit = _parse_size(max_shard_size)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for k, v in tensors.items():
        n = v.numel() * v.element_size()
        if shards[-1] and size + n > limit:
            shards.append({})
            size = 0
        shards[-1][k] = v
        size += n
    if len(shards) == 1:
        return save_state_dict(state, folder, None, safe_serialization)
    weight_map: dict[str, str] = {}
    files = []
    stem, ext = ("model", "safetensors") if safe_serialization else ("pytorch_model", "bin")
    for i, shard in enumerate(shards, 1):
        name = f"{stem}-{i:05d}-of-{len(shards):05d}.{ext}"
        _write_weights(shard, folder / name, safe_serialization)
        weight_map.update(dict.fromkeys(shard, name))
        files.append(folder / name)
    total = sum(v.numel() * v.element_size() for v in tensors.values())
    (folder / index_name).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"
    )
    return files + [folder / index_name]


def shared_parameters(model: nn.Module) -> dict[str, str]:
    """``{alias: kept name}`` for every tensor the model reaches under several state_dict names.

    The one tied-weights policy of bertkit: a tied tensor is saved once and loading fills every
    name. The kept name is the first in state_dict order that is not a target of the model's
    ``_tied_weights_keys`` (so BERT keeps ``word_embeddings`` and drops ``cls.predictions.decoder``,
    as transformers does); for any other model, simply the first name.
    """
    targets = set(getattr(model, "_tied_weights_keys", None) or {})
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    aliases: dict[str, str] = {}
    for names in groups.values():
        if len(names) > 1:
            keep = next((n for n in names if n not in targets), names[0])
            aliases.update({n: keep for n in names if n != keep})
    return aliases


def checkpoint_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """state_dict without tied duplicates (safetensors refuses shared tensors; loading re-ties)."""
    state = model.state_dict()
    for alias in shared_parameters(model):
        state.pop(alias, None)
    return state


def load_checkpoint_state(model: nn.Module, state: Mapping[str, torch.Tensor], source: str | os.PathLike) -> None:
    """Load a :func:`checkpoint_state` back: every key must match except tied aliases."""
    missing, unexpected = model.load_state_dict(dict(state), strict=False)
    missing = [k for k in missing if k not in shared_parameters(model)]
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {source} does not match the model: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )


_WEIGHT_FILE_RE = re.compile(r"(model|pytorch_model)-\d{5}-of-\d{5}\.(safetensors|bin)")


def save_pretrained(
    model: nn.Module,
    save_directory: str | os.PathLike,
    tokenizer: Any = None,
    max_shard_size: int | str | None = None,
    safe_serialization: bool = True,
) -> Path:
    """Write config.json + weights (+ tokenizer files) atomically: all files go to a temp folder first.

    Weights are ``model.safetensors``, or with ``safe_serialization=False`` ``pytorch_model.bin`` (a
    pickle of tensors, as transformers writes it). A new folder appears complete or not at all; into an
    existing folder each file is replaced by an atomic rename, and weight files of the other format that
    would shadow the new ones are removed.
    """
    if not isinstance(safe_serialization, bool):
        raise TypeError(f"safe_serialization must be True or False, got {safe_serialization!r}")
    target = Path(save_directory).expanduser()
    with atomic_update_dir(target) as tmp:
        config = model.config.copy(architectures=[type(model).__name__])
        config.save_pretrained(tmp)
        generation = model.__dict__.get("_generation_config")  # loaded from a folder, read or set
        if generation is not None and hasattr(generation, "save_pretrained"):
            generation.save_pretrained(tmp)
        save_state_dict(checkpoint_state(model), tmp, max_shard_size, safe_serialization)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        written = {p.name for p in tmp.iterdir()}
    for stale in target.iterdir():
        if stale.name not in written and (stale.name in WEIGHT_FILES or _WEIGHT_FILE_RE.fullmatch(stale.name)):
            stale.unlink()
    return target


# ---------------------------------------------------------------------------------------- loading into a model


def _legacy_name(key: str) -> str:
    """TensorFlow-era LayerNorm names: ``LayerNorm.gamma`` -> ``LayerNorm.weight``, ``beta`` -> ``bias``."""
    if key.endswith(".gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith(".beta"):
        return key[: -len("beta")] + "bias"
    return key


def map_checkpoint_keys(
    state: Mapping[str, torch.Tensor],
    model: nn.Module,
    tied: Mapping[str, str] | None = None,
    rename: Callable[[str], str] | None = None,
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Rename checkpoint keys onto the model's keys. Returns (mapped state, unexpected keys).

    ``tied`` maps a tied parameter to the one it shares (``{target: source}``): a checkpoint that
    stores only the target fills the source. ``rename`` is the model family's own key rename,
    applied after the legacy LayerNorm names.
    """
    expected = set(model.state_dict().keys())
    prefix = getattr(model, "base_model_prefix", "") + "."
    # A model class may list regexes of checkpoint keys it knowingly drops (e.g. GPT-2's attention bias buffers).
    ignore_patterns = getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ()
    mapped: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    for raw, tensor in state.items():
        key = _legacy_name(raw)
        if rename is not None:
            key = rename(key)
        if key in expected:
            pass
        elif prefix != "." and prefix + key in expected:  # head model from a bare-encoder checkpoint
            key = prefix + key
        elif prefix != "." and key.startswith(prefix) and key[len(prefix) :] in expected:  # the reverse
            key = key[len(prefix) :]
        elif _IGNORED_KEYS.search(key) or any(re.search(p, key) for p in ignore_patterns):
            continue
        else:
            unexpected.append(raw)
            continue
        mapped[key] = tensor
    for target, source in (tied or {}).items():
        if target in mapped and source not in mapped:
            mapped[source] = mapped[target]
        mapped.pop(target, None)
    return mapped, unexpected


@dataclass
class LoadResult:
    """What :func:`load_into_new_model` did: keys initialised, ignored and re-initialised."""

    missing_keys: list[str]
    unexpected_keys: list[str]
    mismatched: list[tuple[str, tuple, tuple]]
    weights_file: Path


_RANDOM_INIT = frozenset([torch.Tensor.normal_, torch.Tensor.uniform_])


class _LightMetaBuild(torch.overrides.TorchFunctionMode):
    """A model built on the meta device without torch's Python meta kernels: initialisers
    (``torch.nn.init``, in-place draws) are skipped, since they fill nothing, and ``arange`` (position
    ids) runs on the CPU and moves to meta. The Python kernels' first calls import the compiler stack
    and sympy, about two CPU-seconds of a cold start."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in _RANDOM_INIT or getattr(func, "__module__", None) == "torch.nn.init":
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        if func is torch.arange and kwargs.get("device") is None:
            return func(*args, **kwargs, device="cpu").to("meta")
        return func(*args, **kwargs)


def load_into_new_model(
    build: Callable[[], nn.Module],
    weights_file: Path,
    *,
    tied: Mapping[str, str] | None = None,
    rename: Callable[[str], str] | None = None,
    init_missing: Callable[[nn.Module, list[str]], None],
    ignore_mismatched_sizes: bool = False,
) -> tuple[nn.Module, LoadResult]:
    """Build a model on the meta device, allocate it, load a checkpoint, initialise only the rest.

    ``build()`` constructs the model without initialising it (it runs under ``torch.device("meta")``,
    so no memory is touched and no random numbers are drawn). The model is then allocated on the CPU
    with ``to_empty``, the checkpoint's tensors are copied in, weights are re-tied
    (``model.tie_weights()`` when defined), and ``init_missing(model, keys)`` initialises the keys the
    checkpoint lacked (or had with another shape) and any non-persistent buffer the model owns.
    """
    state = load_state_dict(weights_file)
    with torch.device("meta"), _LightMetaBuild():
        model = build()
    mapped, unexpected = map_checkpoint_keys(state, model, tied, rename)
    model_state = model.state_dict()
    expected = [k for k in model_state if k not in (tied or {})]
    persistent = [k for k in expected if k not in dict(model.named_buffers())]
    if persistent and not any(k in mapped for k in persistent):
        raise ValueError(
            f"none of the {len(state)} tensors in {weights_file} match {type(model).__name__} "
            f"(e.g. checkpoint {list(state)[:3]} vs model {persistent[:3]}); is this checkpoint for this model family?"
        )
    mismatched = [
        (k, tuple(mapped[k].shape), tuple(model_state[k].shape))
        for k in mapped
        if k in model_state and tuple(mapped[k].shape) != tuple(model_state[k].shape)
    ]
    if mismatched and not ignore_mismatched_sizes:
        from bertkit._args import under_cli

        # the first keys and a count: every layer of a wrong hidden_size would make a line of kilobytes
        desc = "; ".join(f"{k} has shape {a} in the checkpoint but {b}" for k, a, b in mismatched[:3])
        more = f" (and {len(mismatched) - 3} more weights)" if len(mismatched) > 3 else ""
        raise ValueError(
            f"{weights_file}: {desc} in {type(model).__name__}{more}; "
            f"the weights do not match {weights_file.parent / 'config.json'}: fix the config (e.g. num_labels)"
            + ("" if under_cli() else " or pass ignore_mismatched_sizes=True to re-initialize these weights")
        )
    for k, _, _ in mismatched:
        del mapped[k]
    missing = [k for k in persistent if k not in mapped]
    # to_empty's empty_like of a meta tensor takes a Python kernel that imports sympy: empty() does not
    model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device="cpu"))
    with torch.no_grad():
        if hasattr(model, "tie_weights"):
            model.tie_weights()
        model.load_state_dict(mapped, strict=False)
        init_missing(model, missing + [k for k, _, _ in mismatched])
        if hasattr(model, "tie_weights"):
            model.tie_weights()
    return model, LoadResult(missing, unexpected, mismatched, weights_file)
