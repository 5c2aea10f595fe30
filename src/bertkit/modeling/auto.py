"""Auto classes: pick the config, tokenizer and model class from a folder's ``config.json``.

Dispatch is on ``model_type`` (``bert``, ``distilbert``, ``gpt2``), then, when a folder has no
``model_type``, on the family named by ``architectures``. ``AutoTokenizer`` follows
``tokenizer_config.json``'s ``tokenizer_class``, then ``config.json``'s (the uer Chinese GPT-2 models
name ``BertTokenizer`` there), then the model type. Folders and model ids in the local Hugging Face
cache work as with ``from_pretrained``; nothing is downloaded.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "AutoConfig",
    "AutoModel",
    "AutoModelForCausalLM",
    "AutoModelForMaskedLM",
    "AutoModelForMultipleChoice",
    "AutoModelForPreTraining",
    "AutoModelForQuestionAnswering",
    "AutoModelForSequenceClassification",
    "AutoModelForTokenClassification",
    "AutoTokenizer",
    "auto_class_for",
]

# model_type -> (module, config class)
_CONFIGS = {
    "bert": ("bertkit.modeling.config", "BertConfig"),
    "distilbert": ("bertkit.modeling.distilbert", "DistilBertConfig"),
    "gpt2": ("bertkit.modeling.gpt2", "GPT2Config"),
    "electra": ("bertkit.modeling.electra", "ElectraConfig"),
}
SUPPORTED_MODEL_TYPES = tuple(_CONFIGS)

_MODULES = {"bert": "bertkit.modeling", "distilbert": "bertkit.modeling.distilbert", "gpt2": "bertkit.modeling.gpt2",
            "electra": "bertkit.modeling.electra"}

# Why a family has no class for an auto class (instead of a bare "not supported").
_ENCODER_NO_CAUSAL = ("{t} is a bidirectional encoder trained with masked-LM; it has no causal language-model "
                      "head and cannot generate text left to right. Use AutoModelForMaskedLM (fill-mask), or a "
                      "GPT-2 folder (model_type gpt2) for text generation")
_DECODER_ONLY = "gpt2 is a causal decoder; bertkit implements GPT2Model and GPT2LMHeadModel (AutoModelForCausalLM)"

_TOKENIZERS = {
    # tokenizer_class -> bertkit class (DistilBERT uses BERT's WordPiece tokenizer unchanged)
    "BertTokenizer": "BertTokenizer",
    "BertTokenizerFast": "BertTokenizer",
    "DistilBertTokenizer": "BertTokenizer",
    "DistilBertTokenizerFast": "BertTokenizer",
    "ElectraTokenizer": "BertTokenizer",
    "ElectraTokenizerFast": "BertTokenizer",
}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise TypeError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _folder(path_or_id: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    from bertkit.hub import resolve_model_path

    return resolve_model_path(path_or_id, cache_dir=cache_dir)


def _model_type(data: dict[str, Any], where: Path) -> str:
    """config.json's model_type, else the family its architectures name."""
    model_type = data.get("model_type")
    if model_type is None:
        for arch in data.get("architectures") or []:
            for prefix, t in (("DistilBert", "distilbert"), ("GPT2", "gpt2"), ("Bert", "bert"), ("Electra", "electra")):
                if str(arch).startswith(prefix):
                    model_type = t
                    break
            if model_type:
                break
    if model_type is None:
        raise ValueError(f"{where} has neither model_type nor a known architectures entry; "
                         f"bertkit supports model_type {', '.join(SUPPORTED_MODEL_TYPES)}")
    if model_type not in _CONFIGS:
        raise ValueError(f"{where}: model_type {model_type!r} is not supported; "
                         f"bertkit supports: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return model_type


def _config_class(model_type: str) -> type:
    module, name = _CONFIGS[model_type]
    return getattr(importlib.import_module(module), name)


class AutoConfig:
    """``AutoConfig.from_pretrained(path)`` -> BertConfig / DistilBertConfig / GPT2Config."""

    @staticmethod
    def from_pretrained(path_or_id: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                        **overrides: Any) -> Any:
        """Read config.json and build the config class its model_type names."""
        path = Path(path_or_id)
        config_file = path if path.is_file() else _folder(path_or_id, cache_dir) / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(f"no config.json in {config_file.parent}")
        model_type = _model_type(_read_json(config_file), config_file)
        return _config_class(model_type).from_pretrained(config_file, **overrides)

    @staticmethod
    def for_model(model_type: str, **kwargs: Any) -> Any:
        """A fresh config of ``model_type`` with ``kwargs`` set."""
        if model_type not in _CONFIGS:
            raise ValueError(f"model_type {model_type!r} is not supported; bertkit supports: "
                             f"{', '.join(SUPPORTED_MODEL_TYPES)}")
        return _config_class(model_type).from_dict(kwargs)


class AutoTokenizer:
    """``AutoTokenizer.from_pretrained(path)``: the tokenizer class the folder names."""

    @staticmethod
    def from_pretrained(path_or_id: str | os.PathLike, **kwargs: Any) -> Any:
        """tokenizer_config.json's tokenizer_class, else config.json's, else the model type's tokenizer."""
        from bertkit import tokenization

        folder = _folder(path_or_id, kwargs.get("cache_dir"))
        name = source = None
        for file in ("tokenizer_config.json", "config.json"):
            if (folder / file).is_file():
                data = _read_json(folder / file)
                if data.get("tokenizer_class"):
                    name, source = str(data["tokenizer_class"]), folder / file
                    break
        if name is None and (folder / "config.json").is_file():
            model_type = _model_type(_read_json(folder / "config.json"), folder / "config.json")
            source = folder / "config.json"
            if model_type == "gpt2":
                raise ValueError(
                    f"{folder} is a GPT-2 model without a tokenizer_class; bertkit has no byte-level BPE "
                    "tokenizer. Models trained on a WordPiece vocabulary name \"tokenizer_class\": "
                    "\"BertTokenizer\" in config.json"
                )
            name = "BertTokenizer"
        if name is None:
            if (folder / "vocab.txt").is_file():
                name = "BertTokenizer"
            else:
                raise FileNotFoundError(f"{folder} has no tokenizer_config.json, config.json or vocab.txt")
        if name not in _TOKENIZERS:
            raise ValueError(f"{source}: tokenizer_class {name!r} is not supported; bertkit supports "
                             f"{', '.join(sorted(_TOKENIZERS))} (WordPiece)")
        return getattr(tokenization, _TOKENIZERS[name]).from_pretrained(str(folder), **kwargs)


class _AutoModel:
    """Shared dispatch: model_type -> class name for this auto class (or why there is none)."""

    _mapping: dict[str, str] = {}  # noqa: RUF012 - per-subclass table
    _missing: dict[str, str] = {}  # noqa: RUF012

    @classmethod
    def _class_for(cls, model_type: str, where: Any) -> type:
        name = cls._mapping.get(model_type)
        if name is None:
            why = cls._missing.get(model_type, "")
            raise ValueError(
                f"{cls.__name__} cannot load {where}: its model_type is {model_type!r}. "
                + (why.format(t=model_type) + "." if why else "")
                + f" {cls.__name__} supports model_type {', '.join(cls._mapping)}"
            )
        return getattr(importlib.import_module(_MODULES[model_type]), name)

    @classmethod
    def from_pretrained(cls, path_or_id: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        """Load the class this auto class maps the folder's model_type to (see ``from_pretrained``)."""
        config = kwargs.get("config")
        if config is not None and not isinstance(config, (str, os.PathLike)):
            model_type, where = config.model_type, type(config).__name__
        else:
            folder = _folder(config if config is not None else path_or_id, kwargs.get("cache_dir"))
            config_file = folder / "config.json"
            if not config_file.is_file():
                raise FileNotFoundError(f"no config.json in {folder}")
            model_type, where = _model_type(_read_json(config_file), config_file), folder
        return cls._class_for(model_type, where).from_pretrained(path_or_id, *args, **kwargs)

    @classmethod
    def from_config(cls, config: Any, **kwargs: Any) -> Any:
        """A freshly initialised model of the class for ``config.model_type``."""
        return cls._class_for(config.model_type, type(config).__name__)(config, **kwargs)


def _auto(name: str, mapping: dict[str, str], missing: dict[str, str] | None = None) -> type:
    doc = f"``{name}.from_pretrained(path)``: " + ", ".join(f"{k} -> {v}" for k, v in mapping.items()) + "."
    return type(name, (_AutoModel,), {"_mapping": mapping, "_missing": missing or {}, "__doc__": doc})


_NO_ENCODER_HEAD = {"gpt2": _DECODER_ONLY}
AutoModel = _auto("AutoModel", {"bert": "BertModel", "distilbert": "DistilBertModel", "gpt2": "GPT2Model"})
AutoModelForPreTraining = _auto("AutoModelForPreTraining", {
    "bert": "BertForPreTraining", "distilbert": "DistilBertForMaskedLM", "gpt2": "GPT2LMHeadModel"})
AutoModelForMaskedLM = _auto("AutoModelForMaskedLM", {"bert": "BertForMaskedLM", "distilbert": "DistilBertForMaskedLM"},
                             {"gpt2": "gpt2 is a causal (left-to-right) model, not a masked LM; use "
                                      "AutoModelForCausalLM"})
AutoModelForSequenceClassification = _auto("AutoModelForSequenceClassification", {
    "bert": "BertForSequenceClassification", "distilbert": "DistilBertForSequenceClassification"}, _NO_ENCODER_HEAD)
AutoModelForTokenClassification = _auto("AutoModelForTokenClassification", {
    "bert": "BertForTokenClassification", "distilbert": "DistilBertForTokenClassification"}, _NO_ENCODER_HEAD)
AutoModelForQuestionAnswering = _auto("AutoModelForQuestionAnswering", {
    "bert": "BertForQuestionAnswering", "distilbert": "DistilBertForQuestionAnswering"}, _NO_ENCODER_HEAD)
AutoModelForMultipleChoice = _auto("AutoModelForMultipleChoice", {
    "bert": "BertForMultipleChoice", "distilbert": "DistilBertForMultipleChoice"}, {"gpt2": _DECODER_ONLY})
AutoModelForCausalLM = _auto("AutoModelForCausalLM", {"gpt2": "GPT2LMHeadModel"},
                             {"bert": _ENCODER_NO_CAUSAL, "distilbert": _ENCODER_NO_CAUSAL})

# ELECTRA: the discriminator is the pretraining model; the generator is the masked LM.
for _auto_cls, _name in ((AutoModel, "ElectraModel"), (AutoModelForPreTraining, "ElectraForPreTraining"),
                         (AutoModelForMaskedLM, "ElectraForMaskedLM"),
                         (AutoModelForSequenceClassification, "ElectraForSequenceClassification"),
                         (AutoModelForTokenClassification, "ElectraForTokenClassification"),
                         (AutoModelForQuestionAnswering, "ElectraForQuestionAnswering"),
                         (AutoModelForMultipleChoice, "ElectraForMultipleChoice")):
    _auto_cls._mapping["electra"] = _name
AutoModelForCausalLM._missing["electra"] = _ENCODER_NO_CAUSAL


def auto_class_for(class_name: str) -> type:
    """The auto class that loads what a BERT-named class loads, for any family (``BertModel`` -> AutoModel)."""
    for auto in (AutoModel, AutoModelForPreTraining, AutoModelForMaskedLM, AutoModelForSequenceClassification,
                 AutoModelForTokenClassification, AutoModelForQuestionAnswering, AutoModelForMultipleChoice,
                 AutoModelForCausalLM):
        if class_name in auto._mapping.values():
            return auto
    raise ValueError(f"no auto class loads {class_name}")
