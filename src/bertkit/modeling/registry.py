"""The one table of model families: (model_type, task) -> class, plus what each family can do.

Everything that turns a folder into a model or a model into a task reads this table: the Auto
classes, ``bertkit serve`` (which task a folder serves), ``bertkit explain`` (which views apply),
``finetune``/``evaluate``/``predict`` (which head class a task loads) and the pipelines. A family
that is registered here works everywhere; nothing else branches on class names.

Tasks (the head a class carries): ``base``, ``pretraining``, ``masked-lm``,
``sequence-classification``, ``token-classification``, ``question-answering``, ``multiple-choice``,
``causal-lm``. A family leaves out the tasks it has no class for; asking for one gives a message
that says why (an encoder has no causal-LM head, a causal decoder no encoder heads).

Adding a family is one call, at the bottom of this module (classes named by module and class name,
so nothing is imported until a folder of that family is loaded)::

    register_family(
        "electra", module="bertkit.modeling.electra", config="ElectraConfig", kind="encoder",
        models={"base": "ElectraModel", "pretraining": "ElectraForPreTraining",
                "masked-lm": "ElectraForMaskedLM", "sequence-classification": "ElectraForSequenceClassification"},
        tokenizer_names=("ElectraTokenizer", "ElectraTokenizerFast"), architecture_prefix="Electra",
        pipeline_tasks={"pretraining": None},  # the discriminator tags replaced tokens; it fills no mask
    )

``register_family`` also accepts the classes themselves (``config=ElectraConfig``, ``models={"base":
ElectraModel, ...}``), for a family registered from its own module (that module must then be
imported before its folders are loaded).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ENCODER",
    "CAUSAL",
    "MODEL_TASKS",
    "PIPELINE_TASKS",
    "Family",
    "families",
    "family",
    "family_of_architecture",
    "model_class",
    "model_task_of",
    "register_family",
    "supported_model_types",
    "task_of_class",
]

ENCODER, CAUSAL = "encoder", "causal"
MODEL_TASKS = (
    "base",
    "pretraining",
    "masked-lm",
    "sequence-classification",
    "token-classification",
    "question-answering",
    "multiple-choice",
    "causal-lm",
)
_ENCODER_HEADS = ("sequence-classification", "token-classification", "question-answering", "multiple-choice")

# model task -> the pipeline task that serves it (``bertkit serve``, ``pipeline(...)``)
PIPELINE_TASKS = {
    "base": "sentence-embedding",
    "pretraining": "fill-mask",
    "masked-lm": "fill-mask",
    "sequence-classification": "text-classification",
    "token-classification": "token-classification",
    "question-answering": "question-answering",
    "causal-lm": "text-generation",
}


@dataclass
class Family:
    """One model family: its config and tokenizer classes, one model class per task, its capabilities.

    ``pipeline_tasks``: overrides of :data:`PIPELINE_TASKS` for this family.
    ``kind``: ``"encoder"`` (bidirectional: fill-mask, classification, QA, embeddings) or ``"causal"``
    (left to right: generation). ``has_token_types``: the model embeds segment ids (BERT) rather than
    ignoring them. ``tokenizer``: the bertkit tokenizer class a folder of this family loads with when
    it names none (None: the folder must name one). ``tokenizer_names``: the ``tokenizer_class``
    values in saved folders that map to it. ``architecture_prefix``: how ``architectures`` entries of
    this family begin (for folders without ``model_type``).
    """

    model_type: str
    module: str
    config: str | type
    models: dict[str, str | type]
    kind: str = ENCODER
    has_token_types: bool = False
    tokenizer: str | None = "BertTokenizer"
    tokenizer_names: tuple[str, ...] = ()
    architecture_prefix: str = ""
    missing: dict[str, str] = field(default_factory=dict)
    pipeline_tasks: dict[str, str | None] = field(default_factory=dict)

    def pipeline_task(self, task: str | None) -> str | None:
        """The pipeline task that serves this family's ``task`` class (None: none does). The family's
        own ``pipeline_tasks`` win over :data:`PIPELINE_TASKS` (a pretraining head that does not
        predict tokens, such as a replaced-token discriminator, maps to None)."""
        if task in self.pipeline_tasks:
            return self.pipeline_tasks[task]
        return PIPELINE_TASKS.get(task) if task is not None else None

    def _resolve(self, ref: str | type) -> type:
        return ref if isinstance(ref, type) else getattr(importlib.import_module(self.module), ref)

    def config_class(self) -> type:
        """The family's config class."""
        return self._resolve(self.config)

    def class_name(self, task: str) -> str | None:
        """The name of the family's class for ``task`` (None when it has none)."""
        ref = self.models.get(task)
        return None if ref is None else (ref if isinstance(ref, str) else ref.__name__)

    def why_missing(self, task: str) -> str:
        """Why this family has no class for ``task``."""
        if task in self.missing:
            return self.missing[task]
        if task == "causal-lm" and self.kind == ENCODER:
            return (
                f"{self.model_type} is a bidirectional encoder trained with masked-LM; it has no causal "
                "language-model head and cannot generate text left to right. Use fill-mask, or a causal "
                f"family ({', '.join(t for t, f in _FAMILIES.items() if f.kind == CAUSAL)}) for text generation"
            )
        if self.kind == CAUSAL and task in (*_ENCODER_HEADS, "masked-lm"):
            return (
                f"{self.model_type} is a causal (left-to-right) decoder; bertkit implements "
                f"{', '.join(self.class_name(t) for t in self.models)} for it"
            )
        return f"bertkit has no {task} class for {self.model_type}"

    def model_class(self, task: str) -> type:
        """The family's class for ``task``; ValueError saying why when it has none."""
        if task not in MODEL_TASKS:
            raise ValueError(f"unknown model task {task!r}; choose one of {', '.join(MODEL_TASKS)}")
        ref = self.models.get(task)
        if ref is None:
            raise ValueError(self.why_missing(task))
        return self._resolve(ref)

    def task_of(self, class_name: str) -> str | None:
        """The task of one of this family's class names; a class that also serves as the pretraining
        head (DistilBERT's masked-LM, GPT-2's LM head) answers its own task, not ``pretraining``."""
        tasks = [t for t in MODEL_TASKS if self.class_name(t) == class_name]
        own = [t for t in tasks if t != "pretraining"]
        return (own or tasks or [None])[0]


_FAMILIES: dict[str, Family] = {}


def register_family(
    model_type: str,
    *,
    module: str,
    config: str | type,
    models: dict[str, str | type],
    kind: str = ENCODER,
    has_token_types: bool = False,
    tokenizer: str | None = "BertTokenizer",
    tokenizer_names: tuple[str, ...] = (),
    architecture_prefix: str = "",
    missing: dict[str, str] | None = None,
    pipeline_tasks: dict[str, str | None] | None = None,
) -> Family:
    """Register (or replace) a model family; see the module docstring. Returns it."""
    if kind not in (ENCODER, CAUSAL):
        raise ValueError(f"kind must be {ENCODER!r} or {CAUSAL!r}, got {kind!r}")
    unknown = sorted(set(models) - set(MODEL_TASKS))
    if unknown:
        raise ValueError(f"{model_type}: unknown model tasks {unknown}; the tasks are {', '.join(MODEL_TASKS)}")
    if "base" not in models:
        raise ValueError(f"{model_type}: a family needs a 'base' model class")
    fam = Family(
        model_type,
        module,
        config,
        dict(models),
        kind,
        has_token_types,
        tokenizer,
        tuple(tokenizer_names),
        architecture_prefix,
        dict(missing or {}),
        dict(pipeline_tasks or {}),
    )
    _FAMILIES[model_type] = fam
    return fam


def supported_model_types() -> tuple[str, ...]:
    """Every registered model_type, in registration order."""
    return tuple(_FAMILIES)


def families() -> tuple[Family, ...]:
    """Every registered family."""
    return tuple(_FAMILIES.values())


def family(model_type: str) -> Family:
    """The family of ``model_type``; ValueError listing the supported ones."""
    try:
        return _FAMILIES[model_type]
    except KeyError:
        raise ValueError(
            f"model_type {model_type!r} is not supported; bertkit supports: {', '.join(_FAMILIES)}"
        ) from None


def model_class(model_type: str, task: str) -> type:
    """The class for ``task`` in the family ``model_type`` (ValueError saying why when there is none)."""
    return family(model_type).model_class(task)


def family_of_architecture(arch: str) -> Family | None:
    """The family an ``architectures`` entry belongs to (its exact class first, then its prefix)."""
    for fam in _FAMILIES.values():
        if fam.task_of(arch) is not None:
            return fam
    # The longest prefix wins: "DistilBert..." is DistilBERT, not BERT.
    for fam in sorted(_FAMILIES.values(), key=lambda f: -len(f.architecture_prefix)):
        if fam.architecture_prefix and arch.startswith(fam.architecture_prefix):
            return fam
    return None


def task_of_class(class_name: str) -> str | None:
    """The model task of a registered class name (``DistilBertForSequenceClassification`` ->
    ``sequence-classification``), or None."""
    for fam in _FAMILIES.values():
        task = fam.task_of(class_name)
        if task is not None:
            return task
    return None


def model_task_of(model: Any) -> str | None:
    """The model task of a model instance of a registered family (by its class)."""
    for cls in type(model).__mro__:
        task = task_of_class(cls.__name__)
        if task is not None:
            return task
    return None


# ---------------------------------------------------------------------------------------- the families

register_family(
    "bert",
    module="bertkit.modeling",
    config="BertConfig",
    kind=ENCODER,
    has_token_types=True,
    models={
        "base": "BertModel",
        "pretraining": "BertForPreTraining",
        "masked-lm": "BertForMaskedLM",
        "sequence-classification": "BertForSequenceClassification",
        "token-classification": "BertForTokenClassification",
        "question-answering": "BertForQuestionAnswering",
        "multiple-choice": "BertForMultipleChoice",
    },
    tokenizer_names=("BertTokenizer", "BertTokenizerFast"),
    architecture_prefix="Bert",
)
register_family(
    "distilbert",
    module="bertkit.modeling.distilbert",
    config="DistilBertConfig",
    kind=ENCODER,
    # DistilBERT was distilled with masked-LM alone: its pretraining head is the masked-LM head.
    models={
        "base": "DistilBertModel",
        "pretraining": "DistilBertForMaskedLM",
        "masked-lm": "DistilBertForMaskedLM",
        "sequence-classification": "DistilBertForSequenceClassification",
        "token-classification": "DistilBertForTokenClassification",
        "question-answering": "DistilBertForQuestionAnswering",
        "multiple-choice": "DistilBertForMultipleChoice",
    },
    tokenizer_names=("DistilBertTokenizer", "DistilBertTokenizerFast"),
    architecture_prefix="DistilBert",
)
register_family(
    "gpt2",
    module="bertkit.modeling.gpt2",
    config="GPT2Config",
    kind=CAUSAL,
    tokenizer=None,
    # The language-model head is GPT-2's pretraining head.
    models={"base": "GPT2Model", "pretraining": "GPT2LMHeadModel", "causal-lm": "GPT2LMHeadModel"},
    architecture_prefix="GPT2",
    missing={"masked-lm": "gpt2 is a causal (left-to-right) model, not a masked LM; use AutoModelForCausalLM"},
)
register_family(
    "electra",
    module="bertkit.modeling.electra",
    config="ElectraConfig",
    kind=ENCODER,
    has_token_types=True,
    # The discriminator (pretraining head) tags replaced tokens; the generator is the masked LM.
    models={
        "base": "ElectraModel",
        "pretraining": "ElectraForPreTraining",
        "masked-lm": "ElectraForMaskedLM",
        "sequence-classification": "ElectraForSequenceClassification",
        "token-classification": "ElectraForTokenClassification",
        "question-answering": "ElectraForQuestionAnswering",
        "multiple-choice": "ElectraForMultipleChoice",
    },
    tokenizer_names=("ElectraTokenizer", "ElectraTokenizerFast"),
    architecture_prefix="Electra",
    pipeline_tasks={"pretraining": None},  # the discriminator fills no mask
)
# RoBERTa and XLM-RoBERTa: masked LM alone was their pretraining, so the masked-LM head is the
# pretraining head. Their byte-level BPE / Unigram tokenizers are named by the folder.
register_family(
    "roberta",
    module="bertkit.modeling.roberta",
    config="RobertaConfig",
    kind=ENCODER,
    tokenizer=None,
    models={
        "base": "RobertaModel",
        "pretraining": "RobertaForMaskedLM",
        "masked-lm": "RobertaForMaskedLM",
        "sequence-classification": "RobertaForSequenceClassification",
        "token-classification": "RobertaForTokenClassification",
        "question-answering": "RobertaForQuestionAnswering",
        "multiple-choice": "RobertaForMultipleChoice",
    },
    architecture_prefix="Roberta",
)
register_family(
    "xlm-roberta",
    module="bertkit.modeling.roberta",
    config="XLMRobertaConfig",
    kind=ENCODER,
    tokenizer=None,
    models={
        "base": "XLMRobertaModel",
        "pretraining": "XLMRobertaForMaskedLM",
        "masked-lm": "XLMRobertaForMaskedLM",
        "sequence-classification": "XLMRobertaForSequenceClassification",
        "token-classification": "XLMRobertaForTokenClassification",
        "question-answering": "XLMRobertaForQuestionAnswering",
        "multiple-choice": "XLMRobertaForMultipleChoice",
    },
    architecture_prefix="XLMRoberta",
)
register_family(
    "modernbert",
    module="bertkit.modeling.modernbert",
    config="ModernBertConfig",
    kind=ENCODER,
    tokenizer=None,
    # ModernBERT was pretrained with masked LM alone: the masked-LM head is its pretraining head.
    models={
        "base": "ModernBertModel",
        "pretraining": "ModernBertForMaskedLM",
        "masked-lm": "ModernBertForMaskedLM",
        "sequence-classification": "ModernBertForSequenceClassification",
        "token-classification": "ModernBertForTokenClassification",
        "question-answering": "ModernBertForQuestionAnswering",
        "multiple-choice": "ModernBertForMultipleChoice",
    },
    architecture_prefix="ModernBert",
)
