"""Sentence embeddings: an encoder, a pooling rule and optional L2 normalisation.

A sentence-embedding folder is the encoder's ``save_pretrained`` folder plus the three files
sentence-transformers reads (``modules.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``), so ``SentenceTransformer(folder)`` and
``pipeline("sentence-embedding", model=folder)`` load the same model and give the same vectors.
Pooling has no weights: the encoder's state dict is the checkpoint's, key for key. A folder may add
Dense projections after the pooling (``2_Dense/config.json`` and ``model.safetensors`` with
``linear.weight``/``linear.bias``, as sentence-transformers writes them); :class:`Dense` computes them
in fp32 whatever the encoder's precision (one small matmul on pooled vectors).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit._io import atomic_path, atomic_write_json
from bertkit._text import read_json

__all__ = [
    "ACTIVATIONS",
    "POOLINGS",
    "POOLING_MODE_KEYS",
    "Dense",
    "SentenceEncoder",
    "SentenceStack",
    "load_dense",
    "load_sentence_encoder",
    "pool",
    "pooled_width",
    "pooling_modes",
    "save_dense",
    "save_sentence_folder",
    "sentence_transformers_dense",
    "sentence_transformers_pooling",
    "sentence_transformers_pooling_config",
]

POOLINGS = ("mean", "cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")

# sentence-transformers' Pooling config and v2 constructor: one boolean per mode, in the order
# sentence-transformers concatenates the modes it turns on
POOLING_MODE_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}

# The activations a Dense may end in, by the dotted class path sentence-transformers stores; each is
# built without arguments, as sentence-transformers builds it on load (so none with settings is listed).
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "torch.nn.modules.activation.Tanh": nn.Tanh,
    "torch.nn.modules.linear.Identity": nn.Identity,
    "torch.nn.modules.activation.ReLU": nn.ReLU,
    "torch.nn.modules.activation.GELU": nn.GELU,
    "torch.nn.modules.activation.Sigmoid": nn.Sigmoid,
    "torch.nn.modules.activation.SiLU": nn.SiLU,
}
_DENSE_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def pooling_modes(pooling: str) -> list[str]:
    """The modes of a pooling: one of :data:`POOLINGS`, or several joined by "+" ("cls+mean"), whose
    vectors are concatenated in that order, as sentence-transformers' Pooling does with a list of modes.
    Anything else is a ValueError naming it."""
    modes = pooling.split("+") if isinstance(pooling, str) else []
    if not modes or any(m not in POOLINGS for m in modes):
        raise ValueError(
            f"pooling must be one of {', '.join(POOLINGS)}, or several joined by '+' (e.g. 'cls+mean'), got {pooling!r}"
        )
    return modes


def pooled_width(pooling: str, hidden: int) -> int:
    """The width of the pooled vectors: ``hidden`` for each of the pooling's modes."""
    return len(pooling_modes(pooling)) * int(hidden)


def pool(
    hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str = "mean", normalize: bool = False
) -> torch.Tensor:
    """(B, N, H) right-padded token vectors -> (B, H * modes) sentence vectors, as sentence-transformers'
    Pooling computes them: mask-aware mean, [CLS], max, mean over sqrt(length), position-weighted mean or
    the last real token, or several of them concatenated ("cls+mean"); then L2 when ``normalize``."""
    modes = pooling_modes(pooling)
    if len(modes) > 1:
        vec = torch.cat([_pool_one(hidden, attention_mask, m) for m in modes], dim=-1)
    else:
        vec = _pool_one(hidden, attention_mask, modes[0])
    return nn.functional.normalize(vec, dim=-1) if normalize else vec


def _pool_one(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One pooling mode of :func:`pool` (``pooling`` is one of :data:`POOLINGS`)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    if pooling == "mean":
        vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    elif pooling == "mean_sqrt_len_tokens":
        vec = (hidden * mask).sum(1) / torch.sqrt(mask.sum(1).clamp(min=1e-9))
    elif pooling == "weightedmean":
        weights = mask * torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype).view(1, -1, 1)
        vec = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    elif pooling == "lasttoken":
        last = (attention_mask.sum(1).long() - 1).clamp(min=0)
        vec = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    elif pooling == "cls":
        vec = hidden[:, 0]
    else:  # "max"
        vec = hidden.masked_fill(mask == 0, float("-inf")).max(1).values
    return vec


def activation_path(activation: Any) -> str:
    """The dotted class path sentence-transformers stores for ``activation`` (None is Identity), or a
    ValueError naming it when bertkit cannot write and read it back."""
    if activation is None:
        return "torch.nn.modules.linear.Identity"
    cls = type(activation)
    path = f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(activation, nn.Module) or ACTIVATIONS.get(path) is not cls:
        raise ValueError(
            f"Dense: activation_function {activation!r} is not supported; use one of "
            f"{', '.join(c.__name__ for c in ACTIVATIONS.values())} (torch.nn modules)"
        )
    if isinstance(activation, nn.GELU) and activation.approximate != "none":
        # the config stores the class only: sentence-transformers would load a plain GELU
        raise ValueError(f"Dense: activation_function {activation!r} is not supported (only GELU())")
    return path


class Dense(nn.Module):
    """sentence-transformers' Dense module: ``activation(linear(x))`` (``+ x`` or a projection of ``x``
    with ``use_residual``) on the pooled sentence vectors; kept in fp32."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        activation_function: Any = nn.Tanh(),  # noqa: B008 (sentence-transformers' default, never mutated)
        init_weight: torch.Tensor | None = None,
        init_bias: torch.Tensor | None = None,
        module_input_name: str = "sentence_embedding",
        module_output_name: str | None = None,
        use_residual: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Dense: {name} must be a positive integer, got {value!r}")
        for name, value in (("module_input_name", module_input_name), ("module_output_name", module_output_name)):
            if value not in (None, "sentence_embedding"):
                raise ValueError(f"Dense: {name}={value!r} is not supported (bertkit's Dense maps sentence_embedding)")
        self.activation_name = activation_path(activation_function)
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.bias, self.use_residual = bool(bias), bool(use_residual)
        self.activation_function = ACTIVATIONS[self.activation_name]()
        self.linear = nn.Linear(self.in_features, self.out_features, bias=self.bias)
        if self.use_residual and self.in_features != self.out_features:
            self.residual = nn.Linear(self.in_features, self.out_features, bias=False)
        with torch.no_grad():
            for name, init, param in (
                ("init_weight", init_weight, self.linear.weight),
                ("init_bias", init_bias, self.linear.bias),
            ):
                if init is None:
                    continue
                if param is None:
                    raise ValueError("Dense: init_bias was given but bias=False")
                if tuple(init.shape) != tuple(param.shape):
                    raise ValueError(f"Dense: {name} has shape {tuple(init.shape)}, expected {tuple(param.shape)}")
                param.copy_(init)

    def forward(self, x: Any) -> Any:
        """A (B, in_features) tensor -> (B, out_features); a features dict gets its
        ``sentence_embedding`` replaced, as sentence-transformers' module does."""
        if isinstance(x, dict):
            return {**x, "sentence_embedding": self(x["sentence_embedding"])}
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Dense: input has {x.shape[-1]} features, in_features is {self.in_features}")
        x = x.to(self.linear.weight.dtype)
        out = self.activation_function(self.linear(x))
        if self.use_residual:
            out = out + (x if self.in_features == self.out_features else self.residual(x))
        return out

    def get_sentence_embedding_dimension(self) -> int:
        return self.out_features

    def get_embedding_dimension(self) -> int:
        return self.out_features

    def get_config_dict(self) -> dict[str, Any]:
        """The ``config.json`` sentence-transformers writes for this module."""
        cfg: dict[str, Any] = {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.bias,
            "activation_function": self.activation_name,
            "module_input_name": "sentence_embedding",
            "module_output_name": "sentence_embedding",
        }
        if self.use_residual:  # omitted at its default, as sentence-transformers does
            cfg["use_residual"] = True
        return cfg

    def save(self, directory: str | Path) -> None:
        save_dense(self, directory)

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, activation={type(self.activation_function).__name__}"


_DENSE_KEYS = {"in_features", "out_features", "bias", "activation_function", "module_input_name"}
_DENSE_KEYS |= {"module_output_name", "use_residual"}


def load_dense(directory: str | Path) -> Dense:
    """A Dense module from its folder (``config.json`` and ``model.safetensors`` or ``pytorch_model.bin``,
    as sentence-transformers writes them); every problem is a ValueError naming the file."""
    from bertkit._text import read_json
    from bertkit.checkpoint import load_state_dict

    d = Path(directory)
    path = d / "config.json"
    if not path.is_file():
        raise ValueError(f"{path}: missing; a Dense module needs its config.json")
    cfg = read_json(path)
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected a JSON object")
    unknown = sorted(set(cfg) - _DENSE_KEYS)
    if unknown:
        raise ValueError(f"{path}: Dense setting(s) {unknown} are not supported")
    missing = [k for k in ("in_features", "out_features") if k not in cfg]
    if missing:
        raise ValueError(f"{path}: Dense config lacks {', '.join(missing)}")
    name = cfg.get("activation_function", "torch.nn.modules.activation.Tanh")
    if name not in ACTIVATIONS:
        raise ValueError(
            f"{path}: activation_function {name!r} is not supported; bertkit runs "
            f"{', '.join(c.__name__ for c in ACTIVATIONS.values())}"
        )
    try:
        dense = Dense(
            cfg["in_features"],
            cfg["out_features"],
            bias=bool(cfg.get("bias", True)),
            activation_function=ACTIVATIONS[name](),
            module_input_name=cfg.get("module_input_name", "sentence_embedding"),
            module_output_name=cfg.get("module_output_name"),
            use_residual=bool(cfg.get("use_residual", False)),
        )
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    weights = next((d / f for f in _DENSE_WEIGHTS if (d / f).is_file()), None)
    if weights is None:
        raise ValueError(f"{d}: no Dense weights ({' or '.join(_DENSE_WEIGHTS)})")
    # the one checkpoint reader: a truncated file, or a .bin holding code, is named, never loaded
    state = load_state_dict(weights)
    want = dense.state_dict()
    if set(state) != set(want):
        raise ValueError(f"{weights}: Dense weights {sorted(state)} do not match the config's {sorted(want)}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(want[k].shape):
            raise ValueError(f"{weights}: {k} has shape {tuple(v.shape)}, the config gives {tuple(want[k].shape)}")
    dense.load_state_dict({k: v.float() for k, v in state.items()})
    return dense


def save_dense(dense: Dense, directory: str | Path) -> None:
    """Write ``dense`` as sentence-transformers does: ``config.json`` and ``model.safetensors``."""
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_json(d / "config.json", dense.get_config_dict(), indent=4)
    state = {k: v.detach().float().cpu().contiguous() for k, v in dense.state_dict().items()}
    with atomic_path(d / "model.safetensors") as tmp:
        save_file(state, str(tmp), metadata={"format": "pt"})


def check_dense_chain(dense: Sequence[Dense], width: int, where: str) -> int:
    """Each Dense's in_features must be the width before it (``width``, the pooled vectors' first);
    returns the final width. ``where`` names the source in the error."""
    for i, layer in enumerate(dense):
        if layer.in_features != width:
            raise ValueError(
                f"{where}: Dense {i} has in_features={layer.in_features}, but the vectors before it have {width}"
            )
        width = layer.out_features
    return width


def apply_dense(vec: torch.Tensor, dense: Sequence[Dense], normalize: bool) -> torch.Tensor:
    """Pooled vectors through the Dense modules (fp32, on their device), then L2 when ``normalize``."""
    for layer in dense:
        if layer.linear.weight.device != vec.device:
            layer.to(vec.device)
        vec = layer(vec.float())
    return nn.functional.normalize(vec, dim=-1) if normalize else vec


class SentenceStack(nn.Module):
    """The encoder and its Dense modules as one module, so fit's optimizer, gradient clipping and
    checkpoints cover the Dense weights too (``training_model`` of a model with a Dense)."""

    def __init__(self, encoder: nn.Module, dense: Sequence[Dense]) -> None:
        super().__init__()
        self.encoder = encoder
        self.dense = nn.ModuleList(dense)

    @property
    def config(self) -> Any:
        return self.encoder.config

    def load_folder_weights(self, directory: str | Path) -> None:
        """Read back a folder :func:`save_sentence_folder` wrote (a fit checkpoint): the encoder's
        ``*.safetensors`` and each Dense folder of its ``modules.json``, in order."""
        from safetensors.torch import load_file

        from bertkit._text import read_json
        from bertkit.checkpoint import load_checkpoint_state

        d = Path(directory)
        state: dict[str, torch.Tensor] = {}
        for f in sorted(d.glob("*.safetensors")):
            state.update(load_file(str(f)))
        load_checkpoint_state(self.encoder, state, d)
        modules = read_json(d / "modules.json")
        paths = [m["path"] for m in modules if str(m.get("type", "")).endswith("Dense")]
        if len(paths) != len(self.dense):
            raise ValueError(f"{d / 'modules.json'}: {len(paths)} Dense modules, this model has {len(self.dense)}")
        for layer, sub in zip(self.dense, paths, strict=True):
            layer.load_state_dict(load_dense(d / sub).state_dict())


class SentenceEncoder:
    """Embeds tokenized texts with gradients: ``enc(features) -> (B, H)``.

    ``model`` is a bare encoder (BertModel and kin), ``tokenizer`` its tokenizer; ``tokenize(texts)``
    pads a batch to its longest text (at most ``max_seq_length`` tokens). ``dense``: Dense modules
    applied after pooling and before the normalisation; :attr:`stack` holds them with the encoder.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        pooling: str = "mean",
        normalize: bool = True,
        max_seq_length: int = 256,
        dense: Sequence[Dense] = (),
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.pooling, self.normalize, self.max_seq_length = pooling, normalize, int(max_seq_length)
        self.dense = list(dense)
        check_dense_chain(self.dense, pooled_width(pooling, int(model.config.hidden_size)), "SentenceEncoder")
        self.stack: nn.Module = SentenceStack(model, self.dense) if self.dense else model

    @property
    def dim(self) -> int:
        """The width of the sentence vectors (after the Dense modules, if any)."""
        return self.dense[-1].out_features if self.dense else pooled_width(self.pooling, self.model.config.hidden_size)

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        enc = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_seq_length, return_tensors="pt"
        )
        return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}

    def __call__(self, features: dict[str, torch.Tensor], model: nn.Module | None = None) -> torch.Tensor:
        """Sentence vectors of a padded batch; ``model`` (e.g. the DDP wrapper) replaces ``self.model``."""
        out = (model or self.model)(**features)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        if not self.dense:
            return pool(hidden.float(), features["attention_mask"], self.pooling, self.normalize)
        return apply_dense(pool(hidden.float(), features["attention_mask"], self.pooling), self.dense, self.normalize)

    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        """(len(texts), H) float32 vectors without gradients, in eval mode, sorted batches by length."""
        texts = list(texts)
        was = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = torch.zeros(len(texts), self.dim)
        try:
            for s in range(0, len(order), batch_size):
                idx = order[s : s + batch_size]
                feats = {k: v.to(device) for k, v in self.tokenize([texts[i] for i in idx]).items()}
                out[idx] = self(feats).float().cpu()
        finally:
            self.model.train(was)
        return out

    def save(self, directory: str | Path) -> None:
        """Write the encoder, tokenizer and sentence-transformers files into ``directory``."""
        self.model.save_pretrained(str(directory), tokenizer=self.tokenizer)
        save_sentence_folder(
            directory, int(self.model.config.hidden_size), self.pooling, self.normalize, self.max_seq_length, self.dense
        )


def save_sentence_folder(
    directory: str | Path,
    dim: int,
    pooling: str,
    normalize: bool,
    max_seq_length: int,
    dense: Sequence[Dense] = (),
    include_prompt: bool = True,
) -> None:
    """The sentence-transformers module files next to an encoder's ``save_pretrained`` files
    (``dim``: the encoder's width); each Dense in its ``{idx}_Dense`` folder, before the Normalize."""
    d = Path(directory)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    for layer in dense:
        idx = len(modules)
        path = f"{idx}_Dense"
        modules.append({"idx": idx, "name": str(idx), "path": path, "type": "sentence_transformers.models.Dense"})
        save_dense(layer, d / path)
    if normalize:
        idx = len(modules)
        path = f"{idx}_Normalize"
        modules.append({"idx": idx, "name": str(idx), "path": path, "type": "sentence_transformers.models.Normalize"})
        (d / path).mkdir(exist_ok=True)
    (d / "1_Pooling").mkdir(exist_ok=True)
    modes = pooling_modes(pooling)
    config: dict[str, Any] = {
        "word_embedding_dimension": dim,
        **{key: mode in modes for key, mode in POOLING_MODE_KEYS.items()},
        "include_prompt": bool(include_prompt),
    }
    if modes != [m for m in POOLING_MODE_KEYS.values() if m in modes]:
        # The booleans alone say "concatenate in sentence-transformers' fixed order"; another order (or a
        # mode twice) needs the list, which sentence-transformers reads first from version 6 on
        config["pooling_mode"] = modes
    atomic_write_json(d / "1_Pooling" / "config.json", config, indent=2)
    atomic_write_json(
        d / "sentence_bert_config.json", {"max_seq_length": int(max_seq_length), "do_lower_case": False}, indent=2
    )
    atomic_write_json(d / "modules.json", modules, indent=2)


def load_sentence_encoder(
    folder: str | Path, pooling: str | None = None, normalize: bool | None = None, max_seq_length: int | None = None
) -> SentenceEncoder:
    """A :class:`SentenceEncoder` from a model folder or a model id in the Hugging Face cache;
    pooling, normalisation and length default to the folder's sentence-transformers files (else
    mean, normalised, 256)."""
    from bertkit.hub import resolve_model_path
    from bertkit.modeling.auto import AutoTokenizer, auto_class_for
    from bertkit.modeling.config import check_length_fits

    # A model id resolves to its cache snapshot, where its sentence-transformers files are too.
    folder = resolve_model_path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder}: not a model folder (no config.json)")
    # strict: a module the encoder would silently leave out (a Dense, an unknown kind) is named instead
    st_pool, st_norm, st_len = sentence_transformers_pooling(folder, strict=True)
    if sentence_transformers_dense(folder):
        raise ValueError(
            f"{folder / 'modules.json'}: the model has Dense modules after its pooling, which this trainer "
            "would leave out of what it trains and saves; train it with SentenceTransformer(folder).fit(...)"
        )
    model = auto_class_for("BertModel").from_pretrained(str(folder))
    check_length_fits(model, max_seq_length)
    tok = AutoTokenizer.from_pretrained(str(folder))
    return SentenceEncoder(
        model,
        tok,
        pooling or st_pool or "mean",
        normalize if normalize is not None else (st_norm if st_norm is not None else True),
        max_seq_length or st_len or 256,
    )


# ----------------------------------------------------------------- reading a sentence-transformers folder


def _config_pooling_modes(cfg: dict[str, Any]) -> list[str]:
    """The pooling modes a Pooling config turns on: its ``pooling_mode`` (a name or a list, what
    sentence-transformers writes now), else the older ``pooling_mode_*`` booleans."""
    mode = cfg.get("pooling_mode")
    if isinstance(mode, str):
        return [mode]
    if isinstance(mode, list):
        return [str(m) for m in mode]
    return [name for key, name in POOLING_MODE_KEYS.items() if cfg.get(key)]


def _st_modules(folder: Path) -> list[dict[str, Any]] | None:
    """A sentence-transformers folder's ``modules.json`` (None when absent; damaged is an error naming it)."""
    # Absent files mean "not a sentence-transformers folder"; a damaged one is an error naming it, since
    # guessing the pooling would give other vectors than the folder's model was trained to give.
    if not (folder / "modules.json").is_file():
        return None
    modules = read_json(folder / "modules.json")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ValueError(f"{folder / 'modules.json'}: expected a JSON list of module objects")
    return modules


def _module_kind(module: dict[str, Any]) -> str:
    return str(module.get("type", "")).rsplit(".", 1)[-1]


def sentence_transformers_pooling_config(folder: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The path and content of a sentence-transformers folder's Pooling ``config.json`` (the last
    Pooling module's, as it is the one applied last); None when the folder has none."""
    folder = Path(folder)
    found = None
    for m in _st_modules(folder) or []:
        if _module_kind(m) == "Pooling":
            path = folder / str(m.get("path", "")) / "config.json"
            if not path.is_file():
                continue
            cfg = read_json(path)
            if not isinstance(cfg, dict):
                raise ValueError(f"{path}: expected a JSON object")
            found = (path, cfg)
    return found


def sentence_transformers_pooling(
    folder: str | Path, strict: bool = True
) -> tuple[str | None, bool | None, int | None]:
    """(pooling, normalize, max_seq_length) read from a sentence-transformers folder's
    ``modules.json``, ``1_Pooling/config.json`` and ``sentence_bert_config.json``; None where absent.

    With ``strict`` (sentence vectors are wanted), a module other than Transformer, Pooling, Dense and
    Normalize, Dense modules anywhere but between the Pooling and the Normalize, or a pooling mode
    other than those of :data:`~bertkit.modeling.sentence.POOLINGS`, is a ValueError naming it: the
    defaults would give other vectors than the folder's model gives. Several modes come back joined by
    "+" ("cls+mean"), in the order their vectors are concatenated. The Dense modules are
    :func:`sentence_transformers_dense`'s to read.
    """
    folder = Path(folder)
    pooling = normalize = max_len = None
    modules = _st_modules(folder)
    if modules is None:
        return None, None, None
    kinds = [_module_kind(m) for m in modules]
    other = [k for k in kinds if k not in ("Transformer", "Pooling", "Dense", "Normalize")]
    if strict and other:
        raise ValueError(
            f"{folder / 'modules.json'}: bertkit's sentence vectors follow Transformer, Pooling, Dense and "
            f"Normalize modules only, and this model also has {', '.join(other)}; its vectors would differ"
        )
    if strict and "Dense" in kinds:
        dense_at = [i for i, k in enumerate(kinds) if k == "Dense"]
        pooling_at = [i for i, k in enumerate(kinds) if k == "Pooling"]
        normalize_at = [i for i, k in enumerate(kinds) if k == "Normalize"]
        if not pooling_at or min(dense_at) < max(pooling_at) or (normalize_at and max(dense_at) > min(normalize_at)):
            raise ValueError(
                f"{folder / 'modules.json'}: modules in the order {', '.join(kinds)}; bertkit runs a Dense "
                "only after the Pooling and before the Normalize"
            )
    normalize = "Normalize" in kinds
    found = sentence_transformers_pooling_config(folder)
    if found is not None:
        path, cfg = found
        modes = _config_pooling_modes(cfg)
        known = bool(modes) and all(m in POOLINGS for m in modes)
        if strict and not known:
            raise ValueError(
                f"{path}: bertkit pools with {', '.join(POOLINGS)} (or several of them), and this model's "
                f"pooling is {' + '.join(modes) or 'none'}; its vectors would differ"
            )
        pooling = "+".join(modes) if known else None
    if (folder / "sentence_bert_config.json").is_file():
        st_config = read_json(folder / "sentence_bert_config.json")
        if not isinstance(st_config, dict):
            raise ValueError(f"{folder / 'sentence_bert_config.json'}: expected a JSON object")
        max_len = st_config.get("max_seq_length")
    return pooling, normalize, max_len


def sentence_transformers_dense(folder: str | Path) -> list[Any]:
    """The Dense modules of a sentence-transformers folder, in ``modules.json`` order, with their
    weights (:func:`bertkit.modeling.sentence.load_dense`); empty when it has none."""
    folder = Path(folder)
    return [
        load_dense(folder / str(m.get("path", ""))) for m in _st_modules(folder) or [] if _module_kind(m) == "Dense"
    ]
