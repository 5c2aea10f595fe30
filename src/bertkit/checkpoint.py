"""transformers-compatible checkpoints: find, read, map and write BERT weights.

Reads ``model.safetensors``, a sharded ``model.safetensors.index.json``, ``pytorch_model.bin``
(always with ``weights_only=True``) or its sharded index, from a folder or from a model id in the
local Hugging Face cache (``models--org--name/snapshots/<rev>/``). Never touches the network.

Keys are checkpoint keys as they are (module paths mirror transformers); the only mapping is the
``bert.`` prefix (a head model from a bare-encoder checkpoint and the reverse), legacy TensorFlow
``gamma``/``beta`` LayerNorm names, and tied weights (the MLM decoder shares the word embeddings).
"""

from __future__ import annotations

import json
import logging
import os
import re
import zipfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
from torch import nn

from bertkit._io import atomic_update_dir
from bertkit._text import read_json

__all__ = [
    "hub_cache_dirs",
    "resolve_model_path",
    "find_weights_file",
    "load_state_dict",
    "save_state_dict",
    "load_pretrained",
    "save_pretrained",
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

# Keyword arguments transformers users pass that mean nothing here (bertkit is local-only, SDPA/eager).
_IGNORED_HF_KWARGS = frozenset({
    "attn_implementation", "local_files_only", "trust_remote_code", "low_cpu_mem_usage", "use_safetensors",
    "force_download", "resume_download", "proxies", "token", "use_auth_token", "mirror", "_fast_init",
    "device_map",
})


# ---------------------------------------------------------------------------------------- locating


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
    candidates.append((Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub")
    out: list[Path] = []
    for c in candidates:
        if c not in out:
            out.append(c)
    return out


def _snapshot(repo_dir: Path, revision: str) -> Path | None:
    ref = repo_dir / "refs" / revision
    if ref.is_file():
        snap = repo_dir / "snapshots" / ref.read_text().strip()
        if snap.is_dir():
            return snap
    snap = repo_dir / "snapshots" / revision  # a commit hash given as revision
    if snap.is_dir():
        return snap
    snaps = [p for p in (repo_dir / "snapshots").glob("*") if (p / "config.json").exists()]
    if revision == "main" and snaps:  # no refs/main (copied cache): newest snapshot with a config
        return max(snaps, key=lambda p: p.stat().st_mtime)
    return None


def resolve_model_path(path_or_id: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                       revision: str | None = None) -> Path:
    """A local model folder for a path or for a model id (``bert-base-uncased``, ``org/name``).

    Ids are looked up in the Hugging Face cache layout only; the error lists every place searched.
    """
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        return path.parent
    text = str(path_or_id)
    looks_like_id = re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", text) is not None and not text.startswith(".")
    if not looks_like_id:
        raise FileNotFoundError(f"model folder {text} does not exist")
    ids = [text]
    if "/" not in text:
        ids.append(f"google-bert/{text}")  # the hub moved the original BERT checkpoints under google-bert/
    looked: list[str] = []
    for cache in hub_cache_dirs(cache_dir):
        for model_id in ids:
            repo_dir = cache / ("models--" + model_id.replace("/", "--"))
            looked.append(str(repo_dir))
            if repo_dir.is_dir():
                snap = _snapshot(repo_dir, revision or "main")
                if snap is not None:
                    return snap
    raise FileNotFoundError(
        f"model {text!r} is neither a local folder nor in the Hugging Face cache. Looked in: "
        + ", ".join(looked)
        + ". bertkit never downloads, so no download was attempted: pass the folder that holds config.json "
        "and the weights, or put the model in the cache (HF_HOME / cache_dir) first."
    )


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


def save_state_dict(state: Mapping[str, torch.Tensor], folder: str | os.PathLike,
                    max_shard_size: int | str | None = None) -> list[Path]:
    """Write tensors as model.safetensors (or shards + index) into an existing folder."""
    from safetensors.torch import save_file

    folder = Path(folder)
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    if max_shard_size is None:
        save_file(tensors, str(folder / SAFE_WEIGHTS), metadata={"format": "pt"})
        return [folder / SAFE_WEIGHTS]
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
        return save_state_dict(state, folder, None)
    weight_map: dict[str, str] = {}
    files = []
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, name))
        files.append(folder / name)
    total = sum(v.numel() * v.element_size() for v in tensors.values())
    (folder / SAFE_INDEX).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"
    )
    return files + [folder / SAFE_INDEX]


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
        raise ValueError(f"checkpoint {source} does not match the model: missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}")


_WEIGHT_FILE_RE = re.compile(r"(model|pytorch_model)-\d{5}-of-\d{5}\.(safetensors|bin)")


def save_pretrained(model: nn.Module, save_directory: str | os.PathLike, tokenizer: Any = None,
                    max_shard_size: int | str | None = None, safe_serialization: bool = True) -> Path:
    """Write config.json + weights (+ tokenizer files) atomically: all files go to a temp folder first.

    A new folder appears complete or not at all; into an existing folder each file is replaced by an
    atomic rename, and weight files of an older format that would shadow the new ones are removed.
    """
    if not safe_serialization:
        raise ValueError("bertkit writes safetensors only (safe_serialization=False is not supported)")
    target = Path(save_directory).expanduser()
    with atomic_update_dir(target) as tmp:
        config = model.config.copy(architectures=[type(model).__name__])
        config.save_pretrained(tmp)
        save_state_dict(checkpoint_state(model), tmp, max_shard_size)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        written = {p.name for p in tmp.iterdir()}
    for stale in target.iterdir():
        if stale.name not in written and (stale.name in WEIGHT_FILES or _WEIGHT_FILE_RE.fullmatch(stale.name)):
            stale.unlink()
    return target


# ---------------------------------------------------------------------------------------- loading into a model


def _tied_keys(model: nn.Module) -> dict[str, str]:
    keys = dict(getattr(model, "_tied_weights_keys", {}) or {})
    config = getattr(model, "config", None)
    if config is not None and not config.tie_word_embeddings:
        keys = {t: s for t, s in keys.items() if not s.endswith("word_embeddings.weight")}
    return keys


def _legacy_name(key: str) -> str:
    """TensorFlow-era LayerNorm names: ``LayerNorm.gamma`` -> ``LayerNorm.weight``, ``beta`` -> ``bias``."""
    if key.endswith(".gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith(".beta"):
        return key[: -len("beta")] + "bias"
    return key


def map_checkpoint_keys(state: Mapping[str, torch.Tensor], model: nn.Module) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Rename checkpoint keys onto the model's keys. Returns (mapped state, unexpected keys)."""
    expected = set(model.state_dict().keys())
    prefix = getattr(model, "base_model_prefix", "bert") + "."
    mapped: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    for raw, tensor in state.items():
        key = _legacy_name(raw)
        if key in expected:
            pass
        elif prefix + key in expected:  # head model from a bare-encoder checkpoint
            key = prefix + key
        elif key.startswith(prefix) and key[len(prefix):] in expected:  # bare encoder from a head checkpoint
            key = key[len(prefix):]
        elif _IGNORED_KEYS.search(key):
            continue
        else:
            unexpected.append(raw)
            continue
        mapped[key] = tensor
    for target, source in _tied_keys(model).items():
        if target in mapped and source not in mapped:
            mapped[source] = mapped[target]
        mapped.pop(target, None)
    return mapped, unexpected


def _summarize(keys: Iterable[str], limit: int = 8) -> str:
    keys = list(keys)
    shown = ", ".join(keys[:limit])
    return shown + (f" (and {len(keys) - limit} more)" if len(keys) > limit else "")


def _head_of(key: str) -> str:
    return key.split(".")[0] if not key.startswith("bert.") else ".".join(key.split(".")[:2])


def _load_report(model: nn.Module, source: Path, missing: list[str], unexpected: list[str],
                 mismatched: list[tuple[str, tuple, tuple]]) -> str:
    name = type(model).__name__
    lines: list[str] = []
    groups: dict[str, list[str]] = {}
    for k in missing:
        groups.setdefault(_head_of(k), []).append(k)
    for head, keys in groups.items():
        if head in ("cls", "classifier", "qa_outputs"):
            why = (f"the checkpoint has no {model._head_description or 'head for ' + name}; "
                   "train this model before using it")
        elif head.endswith("pooler"):
            why = "the checkpoint has no pooler weights; pooler_output (and heads on it) need training"
        else:
            why = "they are not in the checkpoint, so they start from random values"
        lines.append(f"{_summarize(keys)} {'is' if len(keys) == 1 else 'are'} newly initialized: {why}.")
    if mismatched:
        desc = "; ".join(f"{k}: checkpoint {tuple(a)} vs model {tuple(b)}" for k, a, b in mismatched)
        lines.append(f"re-initialized because shapes differ (ignore_mismatched_sizes=True): {desc}.")
    if unexpected:
        lines.append(
            f"not used by {name} (weights for heads or layers this model does not have): {_summarize(unexpected)}."
        )
    return f"{name}.from_pretrained({source}):\n  " + "\n  ".join(lines)


@torch.no_grad()
def _init_parameter(model: nn.Module, key: str) -> None:
    """BERT initialisation of one parameter the checkpoint lacked (its siblings keep their loaded values)."""
    owner_name, _, attr = key.rpartition(".")
    owner = model.get_submodule(owner_name)
    param = getattr(owner, attr)
    if isinstance(owner, nn.LayerNorm):
        param.fill_(1.0 if attr == "weight" else 0.0)
    elif attr == "bias":
        param.zero_()
    else:
        param.normal_(0.0, model.config.initializer_range)
        if isinstance(owner, nn.Embedding) and owner.padding_idx is not None:
            param[owner.padding_idx].zero_()


def load_pretrained(cls: type, pretrained_model_name_or_path: str | os.PathLike, *model_args: Any,
                    config: Any = None, cache_dir: str | os.PathLike | None = None, revision: str | None = None,
                    dtype: torch.dtype | str | None = None, torch_dtype: torch.dtype | str | None = None,
                    device: str | torch.device | None = None, ignore_mismatched_sizes: bool = False,
                    output_loading_info: bool = False, **kwargs: Any):
    """Implementation of ``BertPreTrainedModel.from_pretrained`` (see there)."""
    from bertkit.modeling.config import _FIELD_NAMES, BertConfig
    from bertkit.modeling.model import BertEmbeddings, no_init_weights

    import inspect

    init_params = set(inspect.signature(cls.__init__).parameters) - {"self", "config"}
    model_kwargs = {k: v for k, v in kwargs.items() if k in init_params}  # e.g. add_pooling_layer=False
    overrides = {k: v for k, v in kwargs.items() if k in _FIELD_NAMES and k not in model_kwargs}
    unknown = sorted(set(kwargs) - set(overrides) - set(model_kwargs) - _IGNORED_HF_KWARGS)
    if unknown:
        raise TypeError(f"{cls.__name__}.from_pretrained got unexpected keyword arguments: {', '.join(unknown)}")
    folder = resolve_model_path(pretrained_model_name_or_path, cache_dir=cache_dir, revision=revision)
    if config is None:
        config = BertConfig.from_pretrained(folder, **overrides)
    elif isinstance(config, (str, os.PathLike)):
        config = BertConfig.from_pretrained(config, cache_dir=cache_dir, **overrides)
    elif overrides:
        config = config.copy(**overrides)

    weights_file = find_weights_file(Path(pretrained_model_name_or_path)
                                     if Path(pretrained_model_name_or_path).is_file() else folder)
    state = load_state_dict(weights_file)

    with no_init_weights(), torch.device("meta"):
        model = cls(config, *model_args, **model_kwargs)
    mapped, unexpected = map_checkpoint_keys(state, model)
    model_state = model.state_dict()
    tied = _tied_keys(model)
    expected = [k for k in model_state if k not in tied]
    if expected and not any(k in mapped for k in expected):
        raise ValueError(
            f"none of the {len(state)} tensors in {weights_file} match {cls.__name__} "
            f"(e.g. checkpoint {list(state)[:3]} vs model {expected[:3]}); is this a BERT checkpoint?"
        )
    mismatched = [(k, tuple(mapped[k].shape), tuple(model_state[k].shape)) for k in mapped
                  if k in model_state and tuple(mapped[k].shape) != tuple(model_state[k].shape)]
    if mismatched and not ignore_mismatched_sizes:
        desc = "; ".join(f"{k} has shape {a} in the checkpoint but {b} in {cls.__name__}" for k, a, b in mismatched)
        raise ValueError(
            f"{weights_file}: {desc}. Fix the config (e.g. num_labels) or pass ignore_mismatched_sizes=True "
            "to re-initialize these weights"
        )
    for k, _, _ in mismatched:
        del mapped[k]
    missing = [k for k in expected if k not in mapped and k not in dict(model.named_buffers())]

    target_dtype = dtype if dtype is not None else torch_dtype
    if isinstance(target_dtype, str):
        target_dtype = None if target_dtype == "auto" else getattr(torch, target_dtype)
    model.load_state_dict(mapped, strict=False, assign=True)

    # Whatever the checkpoint did not provide is still on the meta device: allocate and initialise it.
    with torch.no_grad():
        for module in model.modules():
            for name, p in list(module._parameters.items()):
                if p is not None and p.is_meta:
                    module._parameters[name] = nn.Parameter(torch.empty_like(p, device="cpu"), p.requires_grad)
            for name, b in list(module._buffers.items()):
                if b is not None and b.is_meta:
                    module._buffers[name] = torch.empty_like(b, device="cpu")
            if isinstance(module, BertEmbeddings):
                module.position_ids = torch.arange(config.max_position_embeddings).expand((1, -1))
        model.tie_weights()
        for key in missing + [k for k, _, _ in mismatched]:
            _init_parameter(model, key)
        model.tie_weights()
    model.to(dtype=target_dtype or torch.float32)
    if device is not None:
        model.to(device)
    model.eval()

    if missing or unexpected or mismatched:
        logger.warning(_load_report(model, weights_file, missing, unexpected, mismatched))
    if output_loading_info:
        return model, {
            "missing_keys": missing,
            "unexpected_keys": unexpected,
            "mismatched_keys": [k for k, _, _ in mismatched],
            "weights_file": str(weights_file),
        }
    return model
