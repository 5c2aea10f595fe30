"""Auto classes: pick the config, tokenizer and model class from a folder's ``config.json``.

Dispatch is on ``model_type``, then, when a folder has no ``model_type``, on the family named by
``architectures``; the families and their classes are :mod:`bertkit.modeling.registry`'s. ``AutoTokenizer`` follows
``tokenizer_config.json``'s ``tokenizer_class``, then ``config.json``'s (the uer Chinese GPT-2 models
name ``BertTokenizer`` there), then the model type. Folders and model ids in the local Hugging Face
cache work as with ``from_pretrained``; nothing is downloaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from . import registry

__all__ = [
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
    "auto_class_for_task",
]


def _tokenizer_names() -> dict[str, str]:
    """tokenizer_class in a saved folder -> bertkit tokenizer class (DistilBERT uses BERT's WordPiece)."""
    return {name: fam.tokenizer for fam in registry.families() if fam.tokenizer for name in fam.tokenizer_names}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:  # a weights file or another binary given where a config is read
        raise ValueError(
            f"{path}: not a JSON config (byte {e.start} is not UTF-8 text); give the model folder, which holds "
            "config.json beside the weights"
        ) from None
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
        fams = (registry.family_of_architecture(str(a)) for a in data.get("architectures") or [])
        model_type = next((f.model_type for f in fams if f is not None), None)
    supported = ", ".join(registry.supported_model_types())
    if model_type is None:
        raise ValueError(
            f"{where} has neither model_type nor a known architectures entry; bertkit supports model_type {supported}"
        )
    if model_type not in registry.supported_model_types():
        raise ValueError(f"{where}: model_type {model_type!r} is not supported; bertkit supports: {supported}")
    return model_type


class AutoConfig:
    """``AutoConfig.from_pretrained(path)`` -> BertConfig / DistilBertConfig / GPT2Config."""

    @staticmethod
    def from_pretrained(
        path_or_id: str | os.PathLike, cache_dir: str | os.PathLike | None = None, **overrides: Any
    ) -> Any:
        """Read config.json and build the config class its model_type names."""
        path = Path(path_or_id)
        config_file = path if path.is_file() else _folder(path_or_id, cache_dir) / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(f"no config.json in {config_file.parent}")
        model_type = _model_type(_read_json(config_file), config_file)
        return registry.family(model_type).config_class().from_pretrained(config_file, **overrides)

    @staticmethod
    def for_model(model_type: str, **kwargs: Any) -> Any:
        """A fresh config of ``model_type`` with ``kwargs`` set."""
        return registry.family(model_type).config_class().from_dict(kwargs)


class AutoTokenizer:
    """``AutoTokenizer.from_pretrained(path)``: the tokenizer class the folder names."""

    @staticmethod
    def from_pretrained(path_or_id: str | os.PathLike, **kwargs: Any) -> Any:
        """tokenizer_config.json's tokenizer_class, else config.json's, else the model type's tokenizer."""
        from bertkit import tokenization
        from bertkit.tokenization.auto import TOKENIZER_CLASSES, class_name_for, class_name_from_files

        folder = _folder(path_or_id, kwargs.get("cache_dir"))
        name = source = None
        for file in ("tokenizer_config.json", "config.json"):
            if (folder / file).is_file():
                data = _read_json(folder / file)
                if data.get("tokenizer_class"):
                    name, source = str(data["tokenizer_class"]), folder / file
                    break
        name = class_name_for(folder, name)
        model_type = None
        if name is None and (folder / "config.json").is_file():
            model_type = _model_type(_read_json(folder / "config.json"), folder / "config.json")
        known = {f.model_type for f in registry.families()}
        if model_type is not None and (model_type in known or class_name_from_files(folder) is None):
            fam = registry.family(model_type)
            source = folder / "config.json"
            name = fam.tokenizer or class_name_from_files(folder)
            if name is None:
                raise ValueError(
                    f"{folder} is a {fam.model_type} model without a tokenizer_class or tokenizer files "
                    "(tokenizer.json, vocab.json + merges.txt). Models trained on a WordPiece vocabulary name "
                    '"tokenizer_class": "BertTokenizer" in config.json'
                )
        if name is None:
            name = class_name_from_files(folder)
            if name is None:
                raise FileNotFoundError(f"{folder} has no tokenizer_config.json, config.json or tokenizer files")
        names = {**{k: v for k, v in TOKENIZER_CLASSES.items() if v}, **_tokenizer_names()}
        if name not in names and name not in names.values():
            raise ValueError(
                f"{source}: tokenizer_class {name!r} is not supported; bertkit supports {', '.join(sorted(names))}"
            )
        return getattr(tokenization, names.get(name, name)).from_pretrained(str(folder), **kwargs)


class _AutoModel:
    """Shared dispatch: the registry's class for (model_type, this auto class's task)."""

    _task: str = ""

    @classmethod
    def _class_for(cls, model_type: str, where: Any) -> type:
        fam = registry.family(model_type)
        if fam.class_name(cls._task) is None:
            able = [f.model_type for f in registry.families() if f.class_name(cls._task)]
            raise ValueError(
                f"{cls.__name__} cannot load {where}: its model_type is {model_type!r}. "
                f"{fam.why_missing(cls._task)}. {cls.__name__} supports model_type {', '.join(able)}"
            )
        return fam.model_class(cls._task)

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


def _auto(name: str, task: str) -> type:
    doc = (
        f"``{name}.from_pretrained(path)``: the {task} class of the folder's family "
        "(see :mod:`bertkit.modeling.registry`)."
    )
    return type(name, (_AutoModel,), {"_task": task, "__doc__": doc})


AutoModel = _auto("AutoModel", "base")
AutoModelForPreTraining = _auto("AutoModelForPreTraining", "pretraining")
AutoModelForMaskedLM = _auto("AutoModelForMaskedLM", "masked-lm")
AutoModelForSequenceClassification = _auto("AutoModelForSequenceClassification", "sequence-classification")
AutoModelForTokenClassification = _auto("AutoModelForTokenClassification", "token-classification")
AutoModelForQuestionAnswering = _auto("AutoModelForQuestionAnswering", "question-answering")
AutoModelForMultipleChoice = _auto("AutoModelForMultipleChoice", "multiple-choice")
AutoModelForCausalLM = _auto("AutoModelForCausalLM", "causal-lm")
_BY_TASK = {
    auto._task: auto
    for auto in (
        AutoModel,
        AutoModelForPreTraining,
        AutoModelForMaskedLM,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoModelForQuestionAnswering,
        AutoModelForMultipleChoice,
        AutoModelForCausalLM,
    )
}


def auto_class_for_task(task: str) -> type:
    """The auto class of a model task (``sequence-classification`` -> AutoModelForSequenceClassification)."""
    if task not in _BY_TASK:
        raise ValueError(f"unknown model task {task!r}; choose one of {', '.join(_BY_TASK)}")
    return _BY_TASK[task]


def auto_class_for(class_name: str) -> type:
    """The auto class that loads what a class of any family loads (``BertModel`` -> AutoModel)."""
    task = registry.task_of_class(class_name)
    if task is None:
        raise ValueError(f"no auto class loads {class_name}")
    return _BY_TASK[task]
