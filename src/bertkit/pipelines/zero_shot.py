"""``pipeline("zero-shot-classification", model=DIR)``: classify texts into labels named at call time
with a model trained for natural language inference (NLI), as transformers does.

::

    clf = pipeline("zero-shot-classification", model="runs/mnli")
    clf("the striker scored twice", candidate_labels=["sport", "politics"])
    # {'sequence': 'the striker scored twice', 'labels': ['sport', 'politics'], 'scores': [0.93, 0.07]}

Each (text, label) becomes the pair (text, ``hypothesis_template.format(label)``) and goes through
the model's sequence-classification head. Single-label: a softmax over the labels' entailment
logits. ``multi_label=True`` (and always for one label): per label, a softmax of its entailment
logit against its contradiction logit. The entailment id is the first ``label2id`` entry whose name
starts with "entail" (any case); a model with none uses its last label, with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bertkit import _args as A
from bertkit.inference.batching import softmax

from .pipelines import Pipeline, _batched, register_pipeline

__all__ = ["PairCuts", "ZeroShotClassificationPipeline", "check_template", "entailment_id", "pair_cuts", "parse_labels"]

DEFAULT_TEMPLATE = "This example is {}."


def entailment_id(config: Any) -> int:
    """The id of the first label whose name starts with "entail" (any case), else -1 (the last label)."""
    for label, ind in (getattr(config, "label2id", None) or {}).items():
        if str(label).lower().startswith("entail"):
            return int(ind)
    return -1


def parse_labels(labels: Any) -> list[Any]:
    """Candidate labels as a list: a string is split at commas, each part stripped, empty parts dropped."""
    if isinstance(labels, str):
        return [x.strip() for x in labels.split(",") if x.strip()]
    if labels is None:
        raise ValueError("zero-shot-classification needs candidate_labels=[...] (or 'a,b,c'); none were given")
    if not isinstance(labels, Sequence):
        raise TypeError(f"candidate_labels must be a list of labels or a comma-separated string, got {labels!r}")
    return list(labels)


def check_template(template: Any, labels: list[Any]) -> None:
    if not isinstance(template, str):
        raise TypeError(f"hypothesis_template must be a string with {{}} where the label goes, got {template!r}")
    try:
        filled = template.format(labels[0])
    except (IndexError, KeyError, ValueError) as e:  # "{label}", "{1}" or an unclosed brace
        raise ValueError(
            f"hypothesis_template {template!r} cannot be formatted with the label {labels[0]!r} "
            f"({type(e).__name__}: {e}); put {{}} where the label should go"
        ) from None
    if filled == template:  # transformers' own test and words
        raise ValueError(
            f'The provided hypothesis_template "{template}" was not able to be formatted with the target labels. '
            "Make sure the passed template includes formatting syntax such as {} where the label should go."
        )


class ZeroShotClassificationPipeline(Pipeline):
    """``clf(sequences, candidate_labels, hypothesis_template="This example is {}.", multi_label=False)``
    -> ``{'sequence', 'labels', 'scores'}`` (labels best first), a list of them for a list of sequences.

    A pair over the model's limit (``max_length``, default the tokenizer's and the position table's)
    loses the end of its text, never of its hypothesis, as in transformers; the dropped tokens per
    sequence are in ``last_dropped_tokens`` and a warning. ``truncation="error"`` refuses instead.
    """

    model_task = "sequence-classification"

    def __init__(self, model: Any, tokenizer: Any = None, device: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, tokenizer, device, **kwargs)
        _check_nli_head(self.model, str(self.folder or "the model"))
        self.entailment_id = entailment_id(self.model.config)
        if self.entailment_id == -1:
            warnings.warn(
                "Failed to determine 'entailment' label id from the label2id mapping in the model config. Setting "
                "to -1. Define a descriptive label2id mapping in the model config to ensure correct outputs. "
                "(Label -1, the last, is read as entailment.)",
                stacklevel=3,
            )
        self.last_dropped_tokens: list[int] = []

    def _check_loaded(self, model: Any, missing: list[str], path: Path) -> None:
        _check_nli_head(model, str(path))  # a wrong kind of folder is named before a missing head is
        super()._check_loaded(model, missing, path)

    def _limit(self, max_length: int | None) -> int:
        if max_length is not None:
            return A.SEQ_LEN.check("max_length", max_length)
        limits = [getattr(self.tokenizer, "model_max_length", None), self.model.config.max_position_embeddings]
        return min(int(x) for x in limits if x)

    def __call__(
        self,
        sequences: str | Sequence[str],
        candidate_labels: str | Sequence[Any] | None = None,
        *,
        hypothesis_template: str = DEFAULT_TEMPLATE,
        multi_label: bool = False,
        max_length: int | None = None,
        truncation: str = "cut",
        batch_size: int | None = None,
    ) -> dict[str, Any] | list[dict[str, Any]]:
        """Score every candidate label for each sequence (see the class docstring)."""
        labels = parse_labels(candidate_labels)
        if not labels:
            raise ValueError(
                f"zero-shot-classification needs at least one label in candidate_labels, got {candidate_labels!r}"
            )
        check_template(hypothesis_template, labels)
        if not isinstance(multi_label, (bool, np.bool_)):
            raise TypeError(f"multi_label must be True or False, got {multi_label!r}")
        if truncation not in ("cut", "error"):
            raise ValueError(f"truncation must be 'cut' or 'error', got {truncation!r}")
        texts, batched = _batched(sequences)
        if not texts:
            raise ValueError("zero-shot-classification needs at least one sequence, got an empty list")
        for i, t in enumerate(texts):
            where = f"sequences[{i}]" if batched else "sequence"
            if not isinstance(t, str):
                raise TypeError(f"{where} must be a string, got {type(t).__name__}")
            if not t:
                raise ValueError(f"{where} is an empty string; there is nothing to classify")
        hypotheses = [hypothesis_template.format(x) for x in labels]
        limit = self._limit(max_length)
        self.last_dropped_tokens = self._dropped(texts, hypotheses, limit, truncation == "error")
        tok = self.tokenizer
        n, k = len(texts), len(hypotheses)
        # One tokenizer call and one batched, length-sorted forward over every (text, hypothesis) pair.
        enc = tok([t for t in texts for _ in hypotheses], hypotheses * n, truncation="only_first", max_length=limit)
        rows = self._run(self._features(enc, n * k), batch_size=batch_size)
        logits = np.stack([r["logits"] for r in rows]).astype(np.float32).reshape(n, k, -1)
        if multi_label or k == 1:
            entail = self.entailment_id
            contra = -1 if entail == 0 else 0
            scores = softmax(logits[..., [contra, entail]])[..., 1]
        else:
            scores = softmax(logits[..., self.entailment_id])
        out = []
        for text, s in zip(texts, scores):
            order = s.argsort()[::-1]  # transformers' order, ties included
            out.append({"sequence": text, "labels": [labels[i] for i in order], "scores": s[order].tolist()})
        return out if batched else out[0]

    def _dropped(self, texts: list[str], hypotheses: list[str], limit: int, refuse: bool) -> list[int]:
        """Tokens each text loses to fit its longest pair into ``limit``; a hypothesis that leaves its
        text no room, or any cut when ``refuse``, is a ValueError naming it."""
        cuts = pair_cuts(self.tokenizer, texts, hypotheses, limit)
        for i, (cut, total) in enumerate(zip(cuts.dropped, cuts.longest_pair)):
            if cut and (cuts.room < 1 or refuse):
                where = f"sequences[{i}]" if len(texts) > 1 else "the sequence"
                why = (
                    f"the hypothesis {hypotheses[cuts.longest_hypothesis]!r} alone fills it"
                    if cuts.room < 1
                    else "pass truncation='cut' to drop the end of the text"
                )
                raise ValueError(
                    f"{where} and its hypothesis make {total} tokens, over the model's limit of {limit}; {why}"
                )
        cut = [d for d in cuts.dropped if d]
        if cut:
            warnings.warn(
                f"{len(cut)} sequence(s) were cut to fit {limit} tokens with their hypotheses: "
                f"{sum(cut):,} tokens dropped from their ends",
                stacklevel=4,  # the caller of the pipeline, past __call__ and its built-defaults wrapper
            )
        return cuts.dropped


class PairCuts(NamedTuple):
    """What fitting each text's (text, hypothesis) pairs into a token limit costs.

    ``dropped[i]``: tokens text i loses (only its end is cut, so its longest hypothesis sets it);
    ``longest_pair[i]``: tokens of text i's longest pair uncut; ``room``: tokens left for the text
    beside the longest hypothesis (the same for every text); ``tokens``: tokens of all the pairs as
    they will run, cut; ``longest_hypothesis``: that hypothesis' index.
    """

    dropped: list[int]
    longest_pair: list[int]
    room: int
    tokens: int
    longest_hypothesis: int


def pair_cuts(tokenizer: Any, texts: list[str], hypotheses: list[str], limit: int) -> PairCuts:
    """The cuts and token counts of every (text, hypothesis) pair within ``limit`` (see :class:`PairCuts`)."""
    plain = {"add_special_tokens": False, "verbose": False}
    text_len = [len(x) for x in tokenizer(texts, **plain)["input_ids"]]
    hyp_len = [len(x) for x in tokenizer(hypotheses, **plain)["input_ids"]]
    special = tokenizer.num_special_tokens_to_add(pair=True)
    longest = max(range(len(hypotheses)), key=lambda j: hyp_len[j])
    room = limit - special - hyp_len[longest]
    tokens = sum(min(n + h + special, limit) for n in text_len for h in hyp_len)
    return PairCuts(
        dropped=[max(0, n - room) for n in text_len],
        longest_pair=[n + hyp_len[longest] + special for n in text_len],
        room=room,
        tokens=tokens,
        longest_hypothesis=longest,
    )


def _check_nli_head(model: Any, where: str) -> None:
    """Zero-shot scores come from an NLI sequence classifier: at least two labels (entailment and one
    to weigh it against), and a folder trained as that, not as a token tagger or a bare encoder."""
    from bertkit.modeling.registry import model_task_of, task_of_class

    config = model.config
    n = int(getattr(config, "num_labels", 0) or 0)
    archs = list(getattr(config, "architectures", None) or [])
    tasks = {task_of_class(a) for a in archs} - {None}
    if model_task_of(model) != "sequence-classification" or (tasks and "sequence-classification" not in tasks):
        named = ", ".join(archs) or type(model).__name__
        raise ValueError(
            f"{where} is not a sequence classifier ({named}); zero-shot-classification needs one trained for NLI"
        )
    if n < 2:
        raise ValueError(
            f"{where} has {n} output label(s); zero-shot-classification needs an NLI head with at least 2 "
            "(entailment and contradiction)"
        )


register_pipeline("zero-shot-classification", ZeroShotClassificationPipeline)
