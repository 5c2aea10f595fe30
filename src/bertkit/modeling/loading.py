"""``PreTrainedModel.from_pretrained``: what is BERT's own in loading a checkpoint.

The file formats, key mapping and the meta-device build are :mod:`bertkit.checkpoint`'s; this
module passes in BERT's parts (config class, tied weights, initialisation of a missing parameter)
and writes the load report that names what was initialised and why.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch
from torch import nn

from bertkit import _hooks
from bertkit.checkpoint import find_weights_file, load_into_new_model
from bertkit.hub import resolve_model_path

__all__ = ["load_pretrained", "no_init_weights", "init_weights_enabled"]

logger = logging.getLogger("bertkit")

# Keyword arguments transformers users pass that mean nothing here (bertkit is local-only, SDPA/eager).
_IGNORED_HF_KWARGS = frozenset(
    {
        "attn_implementation",
        "local_files_only",
        "trust_remote_code",
        "low_cpu_mem_usage",
        "use_safetensors",
        "force_download",
        "resume_download",
        "proxies",
        "token",
        "use_auth_token",
        "mirror",
        "_fast_init",
        "device_map",
    }
)


_INFERENCE_DTYPES = ("fp32", "bf16", "int8")

_INIT_WEIGHTS = contextvars.ContextVar("bertkit_init_weights", default=True)


@contextlib.contextmanager
def no_init_weights() -> Iterator[None]:
    """Build models without running BERT's initialisation (from_pretrained overwrites the weights)."""
    token = _INIT_WEIGHTS.set(False)
    try:
        yield
    finally:
        _INIT_WEIGHTS.reset(token)


def init_weights_enabled() -> bool:
    """False inside :func:`no_init_weights` (read by ``PreTrainedModel.post_init``)."""
    return _INIT_WEIGHTS.get()


def _summarize(keys: Iterable[str], limit: int = 8) -> str:
    keys = list(keys)
    shown = ", ".join(keys[:limit])
    return shown + (f" (and {len(keys) - limit} more)" if len(keys) > limit else "")


def _head_of(key: str) -> str:
    return key.split(".")[0] if not key.startswith("bert.") else ".".join(key.split(".")[:2])


def _load_report(
    model: nn.Module,
    source: Path,
    missing: list[str],
    unexpected: list[str],
    mismatched: list[tuple[str, tuple, tuple]],
) -> str:
    name = type(model).__name__
    lines: list[str] = []
    groups: dict[str, list[str]] = {}
    for k in missing:
        groups.setdefault(_head_of(k), []).append(k)
    for head, keys in groups.items():
        if head in ("cls", "classifier", "qa_outputs"):
            why = (
                f"the checkpoint has no {model._head_description or 'head for ' + name}; "
                "train this model before using it"
            )
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


def checkpoint_dtype(config: Any, weights_file: Path) -> torch.dtype:
    """The dtype a checkpoint was saved in: config.json's ``torch_dtype`` (or ``dtype``), else the first
    floating-point tensor of a safetensors file, else float32."""
    for key in ("torch_dtype", "dtype"):
        name = getattr(config, "extra", {}).get(key)
        if isinstance(name, str) and isinstance(getattr(torch, name.removeprefix("torch."), None), torch.dtype):
            return getattr(torch, name.removeprefix("torch."))
    if weights_file.suffix == ".safetensors":
        from safetensors import safe_open

        codes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
        with safe_open(str(weights_file), framework="pt") as f:
            for name in f.keys():
                found = codes.get(f.get_slice(name).get_dtype())
                if found is not None:
                    return found
    return torch.float32


def load_pretrained(
    cls: type[nn.Module],
    pretrained_model_name_or_path: str | os.PathLike,
    *model_args: Any,
    config: Any = None,
    cache_dir: str | os.PathLike | None = None,
    revision: str | None = None,
    dtype: torch.dtype | str | None = None,
    torch_dtype: torch.dtype | str | None = None,
    device: str | torch.device | None = None,
    ignore_mismatched_sizes: bool = False,
    output_loading_info: bool = False,
    **kwargs: Any,
):
    """Implementation of ``PreTrainedModel.from_pretrained`` (see there), for every model family.

    The class passes in what is its own: ``config_class``, ``tied_weights(config)`` and ``init_missing``;
    ``_keys_to_ignore_on_load_unexpected`` is read from the model by :func:`bertkit.checkpoint.map_checkpoint_keys`.
    """
    init_params = set(inspect.signature(cls.__init__).parameters) - {"self", "config"}
    model_kwargs = {k: v for k, v in kwargs.items() if k in init_params}  # e.g. add_pooling_layer=False
    config_class = cls.config_class
    field_names = config_class.field_names() | set(config_class.attribute_map)
    overrides = {k: v for k, v in kwargs.items() if k in field_names and k not in model_kwargs}
    unknown = sorted(set(kwargs) - set(overrides) - set(model_kwargs) - _IGNORED_HF_KWARGS)
    if unknown:
        raise TypeError(f"{cls.__name__}.from_pretrained got unexpected keyword arguments: {', '.join(unknown)}")
    folder = resolve_model_path(pretrained_model_name_or_path, cache_dir=cache_dir, revision=revision)
    if config is None:
        config = config_class.from_pretrained(folder, **overrides)
    elif isinstance(config, (str, os.PathLike)):
        config = config_class.from_pretrained(config, cache_dir=cache_dir, **overrides)
    elif overrides:
        config = config.copy(**overrides)

    given = Path(pretrained_model_name_or_path)
    # a weights file names itself; a config.json (or any other file) names the folder it sits in
    weights_file = find_weights_file(given if given.is_file() and given.suffix != ".json" else folder)

    def build() -> nn.Module:
        with no_init_weights():
            return cls(config, *model_args, **model_kwargs)

    model, res = load_into_new_model(
        build,
        weights_file,
        tied=cls.tied_weights(config),
        init_missing=cls.init_missing,
        ignore_mismatched_sizes=ignore_mismatched_sizes,
    )
    target_dtype = dtype if dtype is not None else torch_dtype
    if target_dtype == "auto":
        # transformers' dtype="auto" (torch_dtype="auto" before it): the checkpoint's own dtype, a model
        # that trains. The inference precision this CPU runs fastest is a separate step,
        # prepare_for_inference(model, "auto"), or pipeline(..., dtype="auto").
        target_dtype = checkpoint_dtype(config, weights_file)
    # "auto" / "fp32" / "bf16" / "int8" name an inference precision (bertkit.inference), applied after loading
    inference_dtype = target_dtype if isinstance(target_dtype, str) and target_dtype in _INFERENCE_DTYPES else None
    if isinstance(target_dtype, str):
        target_dtype = None if inference_dtype else getattr(torch, target_dtype)
    model.to(dtype=target_dtype or torch.float32)
    if device is not None:
        model.to(device)
    model.eval()
    if inference_dtype is not None:
        _hooks.call("inference.prepare", model, inference_dtype)  # bertkit.inference, a layer above

    from .generation import GENERATION_CONFIG_NAME, GenerationConfig, GenerationMixin

    if isinstance(model, GenerationMixin) and (folder / GENERATION_CONFIG_NAME).is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder)
    if res.missing_keys or res.unexpected_keys or res.mismatched:
        logger.warning(_load_report(model, weights_file, res.missing_keys, res.unexpected_keys, res.mismatched))
    if output_loading_info:
        return model, {
            "missing_keys": res.missing_keys,
            "unexpected_keys": res.unexpected_keys,
            "mismatched_keys": [k for k, _, _ in res.mismatched],
            "weights_file": str(weights_file),
        }
    return model
