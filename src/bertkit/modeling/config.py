"""BertConfig: the hyper-parameters of a BERT model, read from and written to transformers' config.json."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from bertkit import _args as A

__all__ = ["PRESETS", "BertConfig", "PretrainedConfig", "SharedConfigFields", "check_vocab_fits", "preset_size"]

# Google's BERT miniatures (Turc et al. 2019) plus the two original sizes: (layers, hidden).
# Heads = hidden / 64 and intermediate = 4 * hidden, as in every released miniature.
PRESETS: dict[str, tuple[int, int]] = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}

# Fields that exist only at run time in transformers and are not written unless changed.
_RUNTIME_FIELDS = ("output_attentions", "output_hidden_states", "return_dict")


class _ConfigType(type):
    """Config classes take keyword arguments that are not their fields, as transformers' configs do:
    a common name (``hidden_size`` for GPT-2's ``n_embd``) sets its field, any other is kept as an
    extra field that saving writes to config.json."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        names = cls.field_names() if dataclasses.is_dataclass(cls) else None
        later = {} if names is None else {k: kwargs.pop(k) for k in list(kwargs) if k not in names}
        obj = super().__call__(*args, **kwargs)
        for k, v in later.items():
            setattr(obj, k, v)
        return obj


class PretrainedConfig(metaclass=_ConfigType):
    """config.json I/O shared by every model family (BERT, DistilBERT, GPT-2).

    Subclasses are dataclasses with an ``extra`` field; unknown fields found in a config.json are kept in
    ``extra`` (and readable as attributes) so that saving writes them back unchanged. ``attribute_map``
    gives transformers' common names (``hidden_size``...) for family-specific fields (``n_embd``...).
    """

    model_type: str = ""
    attribute_map: ClassVar[dict[str, str]] = {}

    @classmethod
    def field_names(cls) -> frozenset[str]:
        """The dataclass fields of this config class."""
        names = cls.__dict__.get("_field_names")
        if names is None:
            names = frozenset(f.name for f in dataclasses.fields(cls))
            cls._field_names = names  # per class: subclasses have their own fields
        return names

    def _init_labels(self) -> None:
        """Derive num_labels / id2label / label2id from whichever of them was given (as transformers does)."""
        if self.id2label is not None:
            self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
        n = self.num_labels
        if n is None:
            n = len(self.id2label) if self.id2label else 2
        self.num_labels = int(n)
        if self.id2label is None or len(self.id2label) != self.num_labels:
            self.id2label = {i: f"LABEL_{i}" for i in range(self.num_labels)}
        if self.label2id is not None:
            self.label2id = {str(k): int(v) for k, v in self.label2id.items()}
        if self.label2id is None or set(self.label2id) != set(self.id2label.values()):
            self.label2id = {v: k for k, v in self.id2label.items()}
        if self.problem_type not in (None, "regression", "single_label_classification", "multi_label_classification"):
            raise ValueError(
                f"problem_type must be regression, single_label_classification or multi_label_classification; "
                f"got {self.problem_type!r}"
            )

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: expose unknown config.json fields as attributes.
        mapped = type(self).attribute_map.get(name)
        if mapped is not None:
            return getattr(self, mapped)
        extra = self.__dict__.get("extra")
        if extra is not None and name in extra:
            return extra[name]
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "num_labels" and "id2label" in self.__dict__ and value is not None:
            # Changing the label count re-derives the label maps, as transformers does.
            object.__setattr__(self, "num_labels", int(value))
            if self.id2label is None or len(self.id2label) != int(value):
                object.__setattr__(self, "id2label", {i: f"LABEL_{i}" for i in range(int(value))})
                object.__setattr__(self, "label2id", {f"LABEL_{i}": i for i in range(int(value))})
            return
        name = type(self).attribute_map.get(name, name)
        if name in type(self).field_names() or name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self.__dict__.setdefault("extra", {})[name] = value

    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> PretrainedConfig:
        """Build from a config.json-style dict; unknown keys go to ``extra``."""
        data = {cls.attribute_map.get(k, k): v for k, v in {**copy.deepcopy(dict(data)), **overrides}.items()}
        known = {k: v for k, v in data.items() if k in cls.field_names() and k != "extra"}
        extra = {k: v for k, v in data.items() if k not in cls.field_names()}
        extra.update(data.get("extra") or {})
        # An explicit num_labels that disagrees with the saved label maps wins (from_pretrained(p, num_labels=5)).
        if "num_labels" in overrides and "id2label" not in overrides:
            if known.get("id2label") is not None and len(known["id2label"]) != int(overrides["num_labels"]):
                known.pop("id2label", None)
                known.pop("label2id", None)
        # And new label maps without a count set the count (from_pretrained(p, id2label={...}) for NER):
        # the saved num_labels and label2id belong to the old labels.
        if "id2label" in overrides and "num_labels" not in overrides:
            known.pop("num_labels", None)
            if "label2id" not in overrides:
                known.pop("label2id", None)
        return cls(**known, extra=extra)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> PretrainedConfig:
        path = Path(path)
        from bertkit._text import read_json

        data = read_json(path)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
        found = data.get("model_type")
        from .registry import supported_model_types

        if found in supported_model_types() and cls.model_type and found != cls.model_type:
            raise ValueError(
                f"{path} is a {found!r} model (model_type), not {cls.model_type!r}: load it with the "
                f"{found} classes or the Auto classes (AutoModel, AutoModelForCausalLM...), not with "
                f"{cls.__name__.removesuffix('Config')} classes"
            )
        _check_fields(cls, data, path)
        return cls.from_dict(data)

    @classmethod
    def from_pretrained(
        cls, path_or_id: str | os.PathLike, cache_dir: str | os.PathLike | None = None, **overrides: Any
    ) -> PretrainedConfig:
        """Read config.json from a folder, a config.json path, or a model id in the local HF cache."""
        from bertkit.hub import resolve_model_path

        path = Path(path_or_id)
        if path.is_file():
            config_file = path
        else:
            config_file = resolve_model_path(path_or_id, cache_dir=cache_dir) / "config.json"
            if not config_file.is_file():
                raise FileNotFoundError(f"no config.json in {config_file.parent}")
        config = cls.from_json_file(config_file)
        return cls.from_dict(config.to_dict(), **overrides) if overrides else config

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        """The config.json dict: known fields, then unknown ones kept from loading."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name in _RUNTIME_FIELDS and value == f.default:
                continue
            if f.name == "architectures" and value is None:
                continue
            if f.name == "id2label":
                value = {str(k): v for k, v in value.items()}
            out[f.name] = copy.deepcopy(value)
        for k, v in self.extra.items():
            out.setdefault(k, copy.deepcopy(v))
        return out

    def update(self, config_dict: dict[str, Any]) -> None:
        """Set each field of ``config_dict`` on this config (unknown names are kept as extra fields)."""
        for k, v in config_dict.items():
            setattr(self, k, v)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write ``config.json`` into ``save_directory`` atomically; returns the file path."""
        from bertkit._io import atomic_write_text

        return atomic_write_text(Path(save_directory) / "config.json", self.to_json_string())

    def copy(self, **overrides: Any) -> PretrainedConfig:
        return type(self).from_dict(self.to_dict(), **overrides)

    def __repr__(self) -> str:
        return f"{type(self).__name__} {self.to_json_string()}"


@dataclass(kw_only=True)
class SharedConfigFields(PretrainedConfig):
    """The fields every family's config has, with transformers' names and defaults: the task's labels,
    weight tying, what a forward returns, and the ``architectures`` and unknown fields of a config.json.

    Keyword-only, so that each family's own fields keep their positional order.
    """

    problem_type: str | None = None
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    num_labels: int | None = None
    tie_word_embeddings: bool = True
    output_attentions: bool = False
    output_hidden_states: bool = False
    return_dict: bool = True
    architectures: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._init_labels()


@dataclass
class BertConfig(SharedConfigFields):
    """BERT hyper-parameters. Defaults are bert-base-uncased, as in transformers.

    Unknown fields found in a config.json are kept in ``extra`` (and readable as attributes) so that
    saving writes them back unchanged.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    classifier_dropout: float | None = None
    is_decoder: bool = False
    add_cross_attention: bool = False
    model_type: str = "bert"

    # ------------------------------------------------------------------ derived sizes
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def use_return_dict(self) -> bool:
        return self.return_dict

    def validate(self) -> None:
        """Raise for sizes that cannot build a model and for features bertkit does not implement."""
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not a multiple of num_attention_heads "
                f"({self.num_attention_heads})"
            )
        if self.position_embedding_type != "absolute":
            raise NotImplementedError(
                f"position_embedding_type={self.position_embedding_type!r} is not supported; "
                "bertkit implements absolute position embeddings only"
            )
        if self.is_decoder or self.add_cross_attention:
            raise NotImplementedError(
                "is_decoder / add_cross_attention (BERT as a decoder with cross-attention) is not supported; "
                "bertkit implements the bidirectional encoder only"
            )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> BertConfig:
        """A config by size name: tiny, mini, small, medium, base or large (Google's miniatures)."""
        layers, hidden = preset_size(name)
        kwargs: dict[str, Any] = dict(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=hidden // 64,
            intermediate_size=4 * hidden,
        )
        kwargs.update(overrides)
        return cls.from_dict(kwargs)


def preset_size(name: str) -> tuple[int, int]:
    """(layers, hidden size) of a preset: tiny, mini, small, medium, base or large (Google's miniatures)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


# sizes a model is built from: a whole number of at least 1 (0 builds empty layers that fail far from the cause)
_POSITIVE_SIZES = frozenset(
    "vocab_size hidden_size num_hidden_layers num_attention_heads intermediate_size max_position_embeddings "
    "embedding_size n_embd n_layer n_head n_positions dim n_layers n_heads hidden_dim".split()
)


def _check_fields(cls: type, data: dict[str, Any], path: Path) -> None:
    """One line naming the file, the key and the value for a size in config.json that is not a whole
    number of at least 1 (``"hidden_size": "big"``, ``"vocab_size": null``, ``"hidden_size": 0``),
    before a model is built from it."""
    for f in dataclasses.fields(cls):
        if f.name in _POSITIVE_SIZES and f.name in data:
            value = data[f.name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f'{path}: "{f.name}": {json.dumps(value)} is not a whole number of at least 1')


def check_length_fits(model: Any, max_length: int | None, flag: str = "--max-length") -> None:
    """Raise a ValueError naming ``flag`` when ``max_length`` tokens would run past the positions the
    model embeds: before training, where the forward would otherwise fail at its first long batch."""
    limit = int(model.max_positions)
    if max_length is not None and max_length > limit:
        raise ValueError(
            f"max_length {max_length} exceeds the model's {model.positions_field} ({limit}); "
            f"use {A.said(flag, limit)} or less"
        )


def check_vocab_fits(tokenizer: Any, config: Any, where: str | None = None) -> None:
    """Raise a ValueError when ``tokenizer`` can produce ids past the model's embedding table.

    ``config`` is a BertConfig or a model. A vocabulary *smaller* than the table is legitimate
    (some checkpoints pad the table to a multiple of 8); a larger one means the wrong vocab.txt
    sits beside the weights, and every id past the table would read garbage or crash. The message
    gives both numbers and ``where`` (the folder or file the pair came from).
    """
    config = getattr(config, "config", config)
    rows = int(config.vocab_size)
    size = len(tokenizer)
    if size > rows:
        place = f"{where}: " if where else ""
        raise ValueError(
            f"{place}the vocabulary has {size:,} tokens but the model's embedding table has {rows:,} rows "
            f"(config vocab_size); ids {rows:,} and up would read past it. Use the vocab.txt the model was "
            f"trained with, or resize the model's embeddings (resize_token_embeddings) before training it"
        )
