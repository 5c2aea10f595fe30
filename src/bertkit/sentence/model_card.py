"""Model cards: the README.md that ``SentenceTransformer.save`` and ``CrossEncoder.save`` write beside
the weights, as sentence-transformers writes its own.

The card holds the Hub's metadata (a YAML header: library, tags, pipeline, base model, datasets and
the ``model-index`` of evaluation results), what the model is (type, base model, sequence length,
vector size, similarity, architecture), how to use it in bertkit and in sentence-transformers (with
scores the model computes on example texts), and how it was trained: the datasets' sizes, columns,
statistics and samples, each loss with its parameters, the hyperparameters that differ from the
defaults, the training logs and the evaluators' metrics.

What goes in is recorded on ``model.model_card_data`` (a :class:`SentenceTransformerModelCardData` or
:class:`CrossEncoderModelCardData`): the user's fields (language, license, model_id, datasets...),
and what the trainers and evaluators record while they run. A card is never written over a
README.md that bertkit did not write; an untrained model keeps the card its folder came with.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CrossEncoderModelCardData", "SentenceTransformerModelCardData", "card_text", "write_card"]

# The mark in every card bertkit writes: a README.md without it is the user's, and stays. The
# digest is of the card as written (with the digest zeroed), so a card the user has edited since is
# theirs too and stays. Cards from before the digest carry the mark alone.
MARK = "<!-- model card written by bertkit's save(); it is written again on each save -->"
_SEAL_ZERO = "0" * 16
_SEALED_MARK = "<!-- model card written by bertkit's save(); written again on each save unless edited (digest {}) -->"
_SEALED_RE = re.compile(re.escape(_SEALED_MARK).replace(r"\{\}", "([0-9a-f]{16})"))


def _seal(text: str) -> str:
    """``text`` with its zeroed digest replaced by the digest of the whole (zeroed) text."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    return text.replace(_SEALED_MARK.format(_SEAL_ZERO), _SEALED_MARK.format(digest), 1)


def card_origin(text: str) -> str:
    """Who wrote a README.md's ``text``: "bertkit" (a card as bertkit wrote it), "edited" (a card
    bertkit wrote and someone changed since) or "user"."""
    found = _SEALED_RE.search(text)
    if found is not None:
        zeroed = text[: found.start(1)] + _SEAL_ZERO + text[found.end(1) :]
        return "bertkit" if _seal(zeroed) == text else "edited"
    return "bertkit" if MARK in text else "user"


_USER_FIELDS = (
    "language",
    "license",
    "model_name",
    "model_id",
    "train_datasets",
    "eval_datasets",
    "task_name",
    "tags",
    "local_files_only",
    "generate_widget_examples",
    "base_model",
)


@dataclass
class SentenceTransformerModelCardData:
    """What a SentenceTransformer's card says, under sentence-transformers' field names: the caller's
    ``language``, ``license``, ``model_name``, ``model_id``, ``train_datasets``/``eval_datasets``
    (dicts with ``name`` and/or ``id``), ``task_name`` and ``tags``; bertkit fills in the rest."""

    language: str | list[str] | None = None
    license: str | None = None
    model_name: str | None = None
    model_id: str | None = None
    train_datasets: list[dict[str, str]] = field(default_factory=list)
    eval_datasets: list[dict[str, str]] = field(default_factory=list)
    task_name: str | None = (
        "semantic textual similarity, semantic search, paraphrase mining, classification, clustering, and more"
    )
    tags: list[str] = field(
        default_factory=lambda: ["sentence-transformers", "sentence-similarity", "feature-extraction", "dense"]
    )
    local_files_only: bool = False  # bertkit never looks anything up online
    generate_widget_examples: bool = True
    base_model: str | None = None

    # recorded by the evaluators and trainers
    evaluations: list[tuple[Any, ...]] = field(default_factory=list, init=False, repr=False)
    eval_results_dict: dict[Any, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    losses: list[Any] = field(default_factory=list, init=False, repr=False)
    train_sizes: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)
    hyperparameters: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    trainer: Any = field(default=None, init=False, repr=False)
    training_logs: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)
    # a metric a command's own evaluation logs (without "eval_") -> the evaluator metric it equals, so the
    # training log shows it under the evaluator's name, as sentence-transformers' trainer logs it
    log_names: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    best_model_step: int | None = field(default=None, init=False, repr=False)
    original_text: str | None = field(default=None, init=False, repr=False)

    kind = "Sentence Transformer"
    pipeline_tag = "sentence-similarity"

    def set_evaluation_metrics(self, evaluator: Any, metrics: dict[str, Any], epoch: int = 0, step: int = 0) -> None:
        """Record an evaluator's results (called by the evaluators, as sentence-transformers' are)."""
        self.evaluations.append((type(evaluator).__name__, dict(metrics), epoch, step))
        self.eval_results_dict[evaluator] = dict(metrics)

    def add_tags(self, tags: str | list[str]) -> None:
        """Add tags to the card's metadata, each once."""
        for tag in [tags] if isinstance(tags, str) else tags:
            if tag not in self.tags:
                self.tags.append(tag)

    def set_losses(self, losses: list[Any]) -> None:
        """The losses a trainer trains with (each listed with its parameters and tagged)."""
        self.losses = list(losses)
        self.add_tags([f"loss:{name}" for name in dict.fromkeys(type(loss).__name__ for loss in losses)])

    def set_language(self, language: str | list[str]) -> None:
        """The model's language(s)."""
        self.language = [language] if isinstance(language, str) else language

    def set_license(self, license: str) -> None:
        """The model's license."""
        self.license = license

    def set_model_id(self, model_id: str) -> None:
        """The model's name on the Hub (used in the usage snippets)."""
        self.model_id = model_id

    def set_best_model_step(self, step: int) -> None:
        """The step whose weights were kept (bold in the training logs)."""
        self.best_model_step = step

    def _record_training(self, sizes: list[dict[str, Any]], hyperparameters: dict[str, Any], trainer: Any) -> None:
        """What a trainer records when it is built: the datasets, the settings, itself (for its logs)."""
        self.add_tags("generated_from_trainer")
        self.train_sizes, self.hyperparameters, self.trainer = sizes, hyperparameters, trainer
        for size in sizes:
            self.add_tags(f"dataset_size:{size['size']}")


@dataclass
class CrossEncoderModelCardData(SentenceTransformerModelCardData):
    """What a CrossEncoder's card says (sentence-transformers' field names)."""

    task_name: str | None = None
    tags: list[str] = field(default_factory=lambda: ["sentence-transformers", "cross-encoder", "reranker"])

    kind = "Cross Encoder"
    pipeline_tag = "text-ranking"


def adopt(data: Any, cls: type[SentenceTransformerModelCardData]) -> SentenceTransformerModelCardData:
    """``model_card_data=`` as given (bertkit's or sentence-transformers' dataclass): bertkit's, holding
    the caller's fields."""
    if data is None:
        return cls()
    if isinstance(data, cls):
        return data
    if not any(hasattr(data, name) for name in _USER_FIELDS):
        raise TypeError(f"model_card_data must be a {cls.__name__}, got {type(data).__name__}")
    ours = cls()
    for name in _USER_FIELDS:
        value = getattr(data, name, None)
        if value is not None and value != []:
            setattr(ours, name, list(value) if isinstance(value, list) else value)
    return ours


# settings a card does not list: where the run writes and how it shows progress, not how it trains
_NOT_HYPERPARAMETERS = {
    "output",
    "overwrite",
    "resume",
    "progress",
    "device",
    "threads",
    "run_name",
    "plot",
    "extra",
    "api",
}


def changed_arguments(args: Any) -> dict[str, Any]:
    """The training arguments that differ from their defaults, under transformers' names where the
    setting has one (``learning_rate``, ``num_train_epochs``...)."""
    import dataclasses

    from bertkit.training.training_args import TRANSFORMERS_NAMES

    names = {field: name for name, field in TRANSFORMERS_NAMES.items()}
    names.update(eval_every="eval_steps", save_every="save_steps")
    # the sentence-transformers trainers' arguments are written in transformers' names, whose
    # defaults (weight decay 0, warmup from zero...) are not all bertkit's own
    defaults = type(args)(output_dir=args.output)
    out = {}
    for f in dataclasses.fields(args):
        if f.name in _NOT_HYPERPARAMETERS or not f.init:
            continue
        value = getattr(args, f.name)
        if value != getattr(defaults, f.name):
            out[names.get(f.name, f.name)] = str(value) if hasattr(value, "value") else value
    return out


def changed_settings(args: Any) -> dict[str, Any]:
    """A command's settings (a dataclass of ``setting`` fields) that differ from their defaults, by
    their flag names: what a card lists as the non-default hyperparameters of a CLI run."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(args):
        if f.name in _NOT_HYPERPARAMETERS or not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:  # a required argument: the data and model, listed elsewhere on the card
            continue
        value = getattr(args, f.name)
        if value != default:
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def write_command_card(
    model_class: type,
    output: Path,
    base: str,
    sizes: list[dict[str, Any]],
    make_losses: Any,  # (model) -> the losses the run trained with, as sentence-transformers' classes
    settings: dict[str, Any],
    trainer: Any,
    make_evaluators: Any = None,  # () -> evaluators to run on the saved model for the card's Evaluation
    log_names: dict[str, str] | None = None,  # the trainer's metric -> the evaluator's name for it
) -> None:
    """README.md in a training command's ``output``: the card of the model saved there (loaded as
    ``model_class``), trained from ``base`` on ``sizes`` with ``make_losses(model)``, ``settings`` and
    ``trainer``'s logs, with the scores ``make_evaluators()`` give it (each evaluator records its own on
    the card, as sentence-transformers' do). A user's own README.md is kept; a failure warns and the
    saved model stands."""
    from bertkit.hub import hub_id

    try:
        model = model_class(str(output), device="cpu")
        data = model.model_card_data
        data.base_model = data.base_model or hub_id(base)
        data.original_text = None  # a trained model gets its own card, not its base model's
        record_training(model, sizes, make_losses(model), settings, trainer)
        data.log_names = dict(log_names or {})
        for evaluator in make_evaluators() if make_evaluators is not None else []:
            evaluator(model)
    except Exception as e:  # a card is a description: a failure in it must not fail the finished run
        warnings.warn(
            f"no model card written into {output}: {type(e).__name__}: {e} (the model is saved)", stacklevel=3
        )
        return
    write_card(model, output, output)


def record_training(
    model: Any, sizes: list[dict[str, Any]], losses: list[Any], settings: dict[str, Any], trainer: Any
) -> None:
    """What a trainer tells the card of the model it trains: the datasets (``name``, ``size``,
    ``columns``, and ``data``, its columns' values, for the statistics and samples), the losses, the
    settings that differ from the defaults, and itself (its logs)."""
    data = getattr(model, "model_card_data", None)
    if isinstance(data, SentenceTransformerModelCardData):
        sizes = [
            {**{k: v for k, v in size.items() if k != "data"}, "statistics": column_statistics(model, size["data"])}
            if size.get("data")
            else size
            for size in sizes
        ]
        data._record_training(sizes, settings, trainer)
        data.set_losses(losses)


STATS_ROWS = 100  # sentence-transformers' cards describe each dataset's first 100 rows


def card_columns(rows: list[dict[str, Any]], columns: list[str]) -> dict[str, list[Any]]:
    """The first rows' values of each card column that every one of them has, for
    :func:`column_statistics` (a row's first negative as its ``negative``)."""
    head = rows[:STATS_ROWS]
    out = {}
    for name in columns:
        if name == "negative":
            if all(r["negatives"] for r in head):
                out[name] = [r["negatives"][0] for r in head]
        elif all(name in r for r in head):
            out[name] = [r[name] for r in head]
    return out


def column_statistics(model: Any, columns: dict[str, list[Any]]) -> dict[str, Any]:
    """A dataset's card statistics, as sentence-transformers computes them on its first 100 rows: per
    column its type, modality and details (a text's tokens with the model's tokenizer, special tokens
    and truncation included; a float's range; each int's share; a list's length), and the first 3 rows
    as samples. Texts are counted in characters where the model has no ``preprocess``."""
    stats: dict[str, dict[str, Any]] = {}
    for name, values in columns.items():
        head = list(values[:STATS_ROWS])
        if not head:
            continue
        first = head[0]
        if isinstance(first, str):
            unit, counts = "characters", [len(t) for t in head]
            if callable(getattr(model, "preprocess", None)):
                unit, counts = "tokens", [int(n) for n in model.preprocess(head)["attention_mask"].sum(1).tolist()]
            data: dict[str, Any] = {
                "min": f"{min(counts)} {unit}",
                "mean": f"{round(sum(counts) / len(counts), 2)} {unit}",
                "max": f"{max(counts)} {unit}",
            }
            stats[name] = {"dtype": "string", "modality": "text", "data": data}
        elif isinstance(first, (bool, int)):
            counter = Counter(head)
            share = {k: f"{'~' if len(counter) > 1 else ''}{counter[k] / len(head):.2%}" for k in sorted(counter)}
            stats[name] = {"dtype": type(first).__name__, "modality": "", "data": share}
        elif isinstance(first, float):
            data = {"min": round(min(head), 2), "mean": round(sum(head) / len(head), 2), "max": round(max(head), 2)}
            stats[name] = {"dtype": "float", "modality": "", "data": data}
        elif isinstance(first, (list, tuple)):
            sizes = [len(v) for v in head]
            if min(sizes) == max(sizes):
                data = {"size": f"{sizes[0]} elements"}
            else:
                mean = sum(sizes) / len(sizes)
                data = {"min": f"{min(sizes)} elements", "mean": f"{mean:.2f} elements"}
                data["max"] = f"{max(sizes)} elements"
            text = bool(first) and all(isinstance(v, str) for v in first)
            stats[name] = {"dtype": "list", "modality": "text" if text else "", "data": data}
    rows = min(3, min((len(v) for v in columns.values()), default=0))
    samples = [{name: values[i] for name, values in columns.items()} for i in range(rows)]
    return {"stats": stats, "samples": samples}


def _sample_cell(value: Any) -> str:
    """One sample as sentence-transformers' cards show it: in <code>, long lists and texts cut."""
    if isinstance(value, (list, tuple)) and len(value) > 5:
        value = str(list(value[:5]))[:-1] + ", ...]"
    if isinstance(value, str) and len(value) > 1000:
        value = value[:1000] + "..."
    return "<code>" + str(value).replace("\n", "<br>").replace("|", "\\|") + "</code>"


def _statistics_lines(size: dict[str, Any]) -> list[str]:
    """The card lines of a dataset's statistics and samples (none where they were not recorded)."""
    recorded = size.get("statistics") or {}
    stats, samples = recorded.get("stats") or {}, recorded.get("samples") or []
    lines: list[str] = []
    if stats:
        lists = {
            k: "<ul><li>" + "</li><li>".join(f"{a}: {b}" for a, b in v["data"].items()) + "</li></ul>"
            if v["data"]
            else ""
            for k, v in stats.items()
        }
        rows = [
            {"": "type", **{k: v["dtype"] for k, v in stats.items()}},
            {"": "modality", **{k: v["modality"] for k, v in stats.items()}},
            {"": "details", **lists},
        ]
        lines += [f"* Approximate statistics based on the first {min(size['size'], STATS_ROWS)} samples:"]
        lines += ["  " + line for line in _table(rows).splitlines()]
    if samples:
        table = _table([{k: _sample_cell(v) for k, v in r.items()} for r in samples])
        lines += ["* Samples:", *("  " + line for line in table.splitlines())]
    return lines


def keep_logs(model: Any) -> None:
    """Copy the trainer's logs onto the card: the run's folder (and its metrics) may be temporary."""
    data = getattr(model, "model_card_data", None)
    if isinstance(data, SentenceTransformerModelCardData) and data.trainer is not None:
        data.training_logs = training_rows(data)
        data.trainer = None


# ---------------------------------------------------------------------------------------- metadata


def _log_value(value: Any) -> Any:
    """A metric as the tables show it: floats to 4 decimals."""
    if isinstance(value, float):
        return round(value, 4)
    return value


def _strip_name(evaluator: Any, metrics: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The evaluator's metrics without its name prefix, and its primary metric likewise."""
    name, primary = getattr(evaluator, "name", None), getattr(evaluator, "primary_metric", None)
    if name and all(str(k).startswith(name + "_") for k in metrics):
        metrics = {str(k)[len(name) + 1 :]: v for k, v in metrics.items()}
        if primary and primary.startswith(name + "_"):
            primary = primary[len(name) + 1 :]
    return {str(k): (v.item() if hasattr(v, "item") else v) for k, v in metrics.items()}, primary


def _as_float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        if isinstance(value, str) and " " in value:
            return _as_float(value.split()[0])
        return None
    return out if math.isfinite(out) else None


def metadata(data: SentenceTransformerModelCardData, model_name: str) -> dict[str, Any]:
    """The card's YAML header, in the Hub's keys: the model-index lists every evaluator's metrics."""
    results, metric_names = [], []
    for evaluator, raw in data.eval_results_dict.items():
        metrics, _ = _strip_name(evaluator, raw)
        description = str(getattr(evaluator, "description", type(evaluator).__name__))
        name = getattr(evaluator, "name", None) or None
        scores = [(k, f) for k, v in metrics.items() if (f := _as_float(v)) is not None]
        if scores:
            results.append(
                {
                    "task": {"type": description.lower().replace(" ", "-"), "name": description},
                    "dataset": {
                        "name": name.replace("_", " ").replace("-", " ") if name else "Unknown",
                        "type": name or "unknown",
                    },
                    "metrics": [{"type": k, "value": f, "name": k.replace("_", " ").title()} for k, f in scores],
                }
            )
        metric_names += [k for k in metrics if k not in metric_names]
    datasets = [d["id"] for d in [*data.train_datasets, *data.eval_datasets] if d.get("id")]
    out: dict[str, Any] = {
        "language": data.language,
        "license": data.license,
        "library_name": "sentence-transformers",
        "tags": list(data.tags),
        "datasets": list(dict.fromkeys(datasets)),
        "metrics": metric_names,
        "pipeline_tag": data.pipeline_tag,
        "model-index": [{"name": model_name, "results": results}] if results else [],
        "base_model": data.base_model,
    }
    return {k: v for k, v in out.items() if v not in (None, [])}


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9 ._/()+-]*$")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    plain = _PLAIN.match(text) and text.lower() not in {"true", "false", "null", "yes", "no", "on", "off", "~"}
    return text if plain and not text.endswith(" ") else json.dumps(text)  # JSON strings are YAML strings


def to_yaml(value: Any, indent: int = 0) -> list[str]:
    """Block-style YAML of dicts, lists and scalars (the header's shapes), one line per scalar."""
    pad, lines = " " * indent, []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:")
                lines += to_yaml(item, indent + (2 if isinstance(item, dict) else 0))
            else:
                lines.append(f"{pad}{key}: {_scalar(item) if item not in ({}, []) else json.dumps(item)}")
    else:
        for item in value:
            if isinstance(item, (dict, list)) and item:
                inner = to_yaml(item, indent + 2)
                lines.append(f"{pad}- {inner[0].lstrip()}")
                lines += inner[1:]
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    return lines


# ---------------------------------------------------------------------------------------- the card


def _table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of rows with the same keys (missing cells: '-')."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join(":---" for _ in keys) + "|"]
    lines += ["| " + " | ".join(str(_log_value(row.get(k, "-"))) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def _loss_config(loss: Any) -> str | None:
    """A loss's parameters as JSON (its repr where they are not JSON), None when it has none."""
    config = loss.get_config_dict() if callable(getattr(loss, "get_config_dict", None)) else {}
    if not config:
        return None
    try:
        return json.dumps(config, indent=4)
    except TypeError:
        return str(config)


def training_rows(data: SentenceTransformerModelCardData) -> list[dict[str, Any]]:
    """The training log: one row per logged step (epoch, step, training loss, evaluation metrics)."""
    if data.trainer is None:
        return list(data.training_logs)  # kept by keep_logs, already in rows
    try:
        history = list(data.trainer.state.log_history)
    except (OSError, ValueError, AttributeError):  # the run's folder is gone: what was kept
        return list(data.training_logs)
    primaries: set[str] = set()
    for evaluator in data.eval_results_dict:
        for ev in getattr(evaluator, "evaluators", None) or [evaluator]:
            primary = getattr(ev, "primary_metric", None)
            primaries.update([primary] if isinstance(primary, str) else primary or [])
    rows: dict[int, dict[str, Any]] = {}
    for entry in history:
        if "step" not in entry or "train_runtime" in entry:
            continue
        row = rows.setdefault(int(entry["step"]), {"Epoch": round(float(entry.get("epoch") or 0), 4)})
        row["Step"] = int(entry["step"])
        if "loss" in entry:
            row["Training Loss"] = entry["loss"]
        for key, value in entry.items():
            # as sentence-transformers' cards: the losses and each evaluator's primary metric
            if not key.startswith("eval_"):
                continue
            name = data.log_names.get(key.removeprefix("eval_"), key.removeprefix("eval_"))
            if key.endswith("loss") or name in primaries:
                row["Validation Loss" if key == "eval_loss" else name] = value
    return [rows[s] for s in sorted(rows)]


def _versions() -> list[str]:
    import torch

    from bertkit import __version__

    return [f"- Python: {platform.python_version()}", f"- bertkit: {__version__}", f"- PyTorch: {torch.__version__}"]


def _usage(model: Any, data: SentenceTransformerModelCardData, cross: bool) -> str:
    """The usage snippet, in bertkit and in sentence-transformers, with the model's own scores."""
    import numpy as np
    import torch

    name = data.model_id or "path/to/this/folder"
    if cross:
        query = "How many calories in an egg"
        docs = [
            "There are on average between 55 and 80 calories in an egg depending on its size.",
            "Egg whites are very low in calories, have no fat, no cholesterol, and are loaded with protein.",
            "Most of the calories in an egg come from the yellow yolk in the center.",
        ]
        shown = ""
        if data.generate_widget_examples:
            scores = model.predict([(query, d) for d in docs], show_progress_bar=False, convert_to_numpy=True)
            shown = f"\nprint(scores)\n# {np.round(np.asarray(scores, dtype=np.float64), 4).tolist()}"
        body = (
            f'model = CrossEncoder("{name}")\n'
            f"pairs = [\n" + "".join(f"    [{json.dumps(query)}, {json.dumps(d)}],\n" for d in docs) + "]\n"
            "scores = model.predict(pairs)" + shown + "\n\n"
            f"ranks = model.rank({json.dumps(query)}, [pair[1] for pair in pairs])"
        )
        cls = "CrossEncoder"
    else:
        texts = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
        shown = ""
        if data.generate_widget_examples:
            vectors = model.encode(texts, convert_to_tensor=True, show_progress_bar=False)
            with torch._tensor_str.printoptions(precision=4, sci_mode=False):
                table = str(model.similarity(vectors, vectors).float().cpu())
            shown = "\n" + "\n".join(f"# {line}" for line in table.splitlines())
        body = (
            f'model = SentenceTransformer("{name}")\n'
            "sentences = [\n" + "".join(f"    {json.dumps(t)},\n" for t in texts) + "]\n"
            "embeddings = model.encode(sentences)\n"
            f"print(embeddings.shape)\n# [3, {model.get_embedding_dimension()}]\n\n"
            "similarities = model.similarity(embeddings, embeddings)\nprint(similarities)" + shown
        )
        cls = "SentenceTransformer"
    return "\n".join(
        [
            "### bertkit",
            "",
            "```python",
            f"from bertkit import {cls}",
            "",
            body,
            "```",
            "",
            "### Sentence Transformers",
            "",
            "The folder loads unchanged in sentence-transformers, with the same results:",
            "",
            "```python",
            f"from sentence_transformers import {cls}",
            "",
            f'model = {cls}("{name}")',
            "```",
        ]
    )


def _evaluation_lines(data: Any) -> list[str]:
    """The card's "Evaluation" section: each evaluator's metrics, its primary one in bold."""
    lines: list[str] = []
    if data.eval_results_dict:
        lines += ["", "## Evaluation", "", "### Metrics"]
        for evaluator, raw in data.eval_results_dict.items():
            metrics, primary = _strip_name(evaluator, raw)
            title = getattr(evaluator, "name", None) or getattr(evaluator, "description", type(evaluator).__name__)
            lines += [
                "",
                f"#### {title}",
                "",
                f"* Evaluated with `{type(evaluator).__module__}.{type(evaluator).__name__}`",
            ]
            rows = [
                {
                    "Metric": f"**{k}**" if k == primary else k,
                    "Value": f"**{_log_value(v)}**" if k == primary else _log_value(v),
                }
                for k, v in metrics.items()
            ]
            lines += ["", _table(rows)]
    return lines


def _training_data_lines(data: Any) -> list[str]:
    """The card's "Training Details" dataset part: each dataset's size, columns and statistics, then each
    loss with its settings."""
    lines: list[str] = []
    if data.train_sizes or data.losses:
        lines += ["", "## Training Details", "", "### Training Dataset"]
        for size in data.train_sizes:
            title = size.get("name") or "Unnamed Dataset"
            columns = ", ".join(f"<code>{c}</code>" for c in size.get("columns", []))
            lines += ["", f"#### {title}", "", f"* Size: {size['size']:,} training samples"]
            if columns:
                lines.append(f"* Columns: {columns}")
            lines += _statistics_lines(size)
        for loss in data.losses:
            config = _loss_config(loss)
            if config is None:  # a loss without settings is named alone, as sentence-transformers does
                lines += ["", f"* Loss: `{type(loss).__name__}`"]
                continue
            lines += ["", f"* Loss: `{type(loss).__name__}` with these parameters:", "  ```json"]
            lines += ["  " + line for line in config.splitlines()]
            lines.append("  ```")
    return lines


def card_text(model: Any, model_name: str | None = None) -> str:
    """The whole card for ``model``: a SentenceTransformer, or a CrossEncoder (whose card data says so)."""
    data: SentenceTransformerModelCardData = model.model_card_data
    cross = isinstance(data, CrossEncoderModelCardData)
    kind = data.kind
    model_name = (
        data.model_name
        or model_name
        or (f"{kind.replace(' ', '')} based on {data.base_model}" if data.base_model else kind.replace(" ", ""))
    )
    head = to_yaml(metadata(data, model_name))
    lines = ["---", *head, "---", "", _SEALED_MARK.format(_SEAL_ZERO), "", f"# {model_name}", ""]
    trained = (
        f"finetuned from [{data.base_model}](https://huggingface.co/{data.base_model})"
        if data.base_model
        else "trained"
    )
    named = [d.get("name") or d.get("id") for d in data.train_datasets if d.get("name") or d.get("id")]
    on = f" on the {', '.join(named)} dataset{'s' if len(named) > 1 else ''}" if named else ""
    if cross:
        task = data.task_name or (
            "text reranking and semantic search" if model.num_labels == 1 else "text pair classification"
        )
        lines.append(
            "This is a [Cross Encoder](https://www.sbert.net/docs/cross_encoder/usage/usage.html) model "
            f"{trained}{on}, written by bertkit. It computes scores for pairs of texts, which can be used for {task}."
        )
    else:
        lines.append(
            f"This is a [sentence-transformers](https://www.SBERT.net) model {trained}{on}, written by bertkit. "
            f"It maps sentences and paragraphs to a {model.get_embedding_dimension()}-dimensional dense vector "
            f"space and can be used for {data.task_name}."
        )
    lines += ["", "## Model Details", "", "### Model Description", f"- **Model Type:** {kind}"]
    if data.base_model:
        lines.append(f"- **Base model:** [{data.base_model}](https://huggingface.co/{data.base_model})")
    lines.append(f"- **Maximum Sequence Length:** {model.max_seq_length} tokens")
    if cross:
        lines.append(f"- **Number of Output Labels:** {model.num_labels} label{'s' if model.num_labels > 1 else ''}")
    else:
        similarity = {
            "cosine": "Cosine Similarity",
            "dot": "Dot Product",
            "euclidean": "Euclidean Distance",
            "manhattan": "Manhattan Distance",
        }.get(model.similarity_fn_name or "cosine", str(model.similarity_fn_name).replace("_", " ").title())
        lines += [
            f"- **Output Dimensionality:** {model.get_embedding_dimension()} dimensions",
            f"- **Similarity Function:** {similarity}",
        ]
    if named:
        lines.append(f"- **Training Dataset{'s' if len(named) > 1 else ''}:** {', '.join(named)}")
    for label, value in (("Language", data.language), ("License", data.license)):
        if value:
            lines.append(f"- **{label}:** {', '.join(value) if isinstance(value, list) else value}")
    lines += ["", "### Full Model Architecture", "", "```", repr(model), "```", "", "## Usage", ""]
    lines.append(_usage(model, data, cross))
    lines += _evaluation_lines(data)
    lines += _training_data_lines(data)
    if data.hyperparameters:
        lines += ["", "### Training Hyperparameters", "", "#### Non-Default Hyperparameters", ""]
        lines += [f"- `{k}`: {v}" for k, v in data.hyperparameters.items()]
    rows = training_rows(data)
    if rows:
        if data.best_model_step is not None:
            rows = [
                {k: f"**{_log_value(v)}**" for k, v in row.items()} if row["Step"] == data.best_model_step else row
                for row in rows
            ]
        lines += ["", "### Training Logs", "", _table(rows)]
        if data.best_model_step is not None:
            lines += ["", "* The bold row denotes the saved checkpoint."]
    level = "###" if data.train_sizes or data.losses or data.hyperparameters or rows else "##"
    lines += ["", f"{level} Framework Versions", "", *_versions()]
    citations: dict[str, str] = {}  # each paper once, under the first loss that cites it
    for loss in data.losses:
        text = getattr(loss, "citation", None)
        if text and text not in citations:
            citations[text] = type(loss).__name__
    if citations:
        lines += ["", "## Citation", "", "### BibTeX"]
        for text, name in citations.items():
            lines += ["", f"#### {name}", "", "```bibtex", text.strip(), "```"]
    return _seal("\n".join(lines) + "\n")


def write_card(model: Any, folder: Path, target: Path, model_name: str | None = None) -> bool:
    """Write README.md into ``folder`` (a save's staging folder, or the target itself) unless
    ``target`` holds a README.md bertkit did not write; an untrained model with the card its folder
    came with writes that one back. ``model_name`` titles the card when model_card_data has none.
    Returns whether a card was written."""
    existing = target / "README.md"
    if existing.is_file():
        try:
            found: str | None = existing.read_text(encoding="utf-8", errors="replace")
        except OSError:
            found = None
        origin = "user" if found is None else card_origin(found)
        if origin != "bertkit" and found != model.model_card_data.original_text:
            why = "was edited since bertkit wrote it" if origin == "edited" else "was not written by bertkit"
            from bertkit._io import warn_kept

            warn_kept(
                existing,
                f"{existing} {why}: it is kept, and no model card is written "
                "(remove it, or save into another folder, for bertkit's card)",
                stacklevel=3,
            )
            return False
    data = model.model_card_data
    if data.original_text is not None and "generated_from_trainer" not in data.tags:
        text = data.original_text
    else:
        try:
            text = card_text(model, model_name)
        except Exception as e:  # a card is a description: a failure in it must not lose the model's save
            warnings.warn(
                f"no model card written into {target}: {type(e).__name__}: {e} (the model itself is saved)",
                stacklevel=3,
            )
            return False
    from bertkit._io import atomic_write_text

    atomic_write_text(folder / "README.md", text)
    return True


def read_original(folder: Path) -> str | None:
    """The README.md a loaded model's folder holds, if any (carried over by an untrained save)."""
    path = Path(folder) / "README.md"
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        return None
