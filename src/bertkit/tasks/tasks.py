"""The four fine-tuning families as small Task objects: read, encode, score, predict.

A Task knows its data format, how examples become model features, which bertkit head it trains,
how raw model outputs become metrics and human-readable predictions, and which metric picks the
best checkpoint. The training loop itself is the shared :class:`bertkit.training.Trainer`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from bertkit.data.readers import (
    build_label_list,
    check_labels,
    read_conll,
    read_squad,
    read_swag,
    read_table,
)
from bertkit.inference import first_subtokens, merge_windows, run_batched, softmax, window_features

from ..tokenization.wordpiece import CJK_CHAR_RE as _CJK
from . import metrics as M
from .qa import decode_qa, prepare_qa_features

__all__ = [
    "TASKS",
    "TaskOptions",
    "Task",
    "TextClassificationTask",
    "TokenClassificationTask",
    "QuestionAnsweringTask",
    "MultipleChoiceTask",
    "get_task",
    "task_from_config",
    "run_model",
    "sentence_text",
    "tagged_entities",
]


@dataclass
class TaskOptions:
    """Data options shared by finetune / evaluate / predict (saved in the model's config)."""

    max_length: int | None = None  # None: the task's default (384 for question answering, else 128)
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    label_separator: str | None = None
    problem_type: str | None = None  # text-classification: single/multi_label_classification, regression
    doc_stride: int = 128
    max_answer_length: int = 30
    n_best_size: int = 20
    version_2_with_negative: bool | None = None  # None: detect from the training data
    null_score_diff_threshold: float = 0.0
    label_scheme: str | None = None  # BIO / BIOES / BMES; None: detect from the tags

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def validate(self) -> None:
        """Reject out-of-range values, naming the argument and its range."""
        from bertkit import _args as A

        A.SEQ_LEN.check("max_length", self.max_length, allow_none=True)
        A.positive_int.check("doc_stride", self.doc_stride)
        A.positive_int.check("max_answer_length", self.max_answer_length)
        A.positive_int.check("n_best_size", self.n_best_size)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "TaskOptions":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in (d or {}).items() if k in known})


@dataclass
class Encoded:
    """Model features of a list of examples plus what decoding needs."""

    features: list[dict]
    aux: Any = None


def run_model(
    model: torch.nn.Module,
    features: Sequence[dict],
    batch_size: int = 64,
    outputs: Sequence[str] = ("logits",),
    progress: bool = False,
    desc: str = "predict",
) -> list[dict[str, np.ndarray]]:
    """Forward ``features`` in length-sorted batches (see :func:`bertkit.inference.run_batched`)."""
    return run_batched(model, features, batch_size, outputs=outputs, progress=progress, desc=desc)


class Task:
    """Base class; see the concrete tasks below."""

    name: str = ""
    main_metric: str = ""
    greater_is_better: bool = True
    model_task: str = ""  # the registry's model task whose class the task trains (bertkit.modeling.registry)
    outputs: tuple[str, ...] = ("logits",)
    default_max_length: int = 128

    def __init__(self, options: TaskOptions | None = None) -> None:
        self.options = options or TaskOptions()
        if self.options.max_length is None:
            self.options.max_length = self.default_max_length
        self.options.validate()

    # --- data
    def read(self, path: str | Path, labelled: bool = True) -> list:
        raise NotImplementedError

    def setup_labels(self, train_examples: Sequence) -> None:
        """Learn the label set from the training data (no-op for tasks without labels)."""

    def load_labels(self, config: Any) -> None:
        """Restore the label set from a fine-tuned model's config."""

    def check(self, path: str | Path, examples: Sequence) -> None:
        """Validate labelled evaluation data against the training labels."""

    def encode(self, tokenizer: Any, examples: Sequence, with_labels: bool = True) -> Encoded:
        raise NotImplementedError

    # --- model
    def model_class(self) -> type:
        """The auto class of this task's head: ``from_pretrained`` loads the folder's family's class."""
        from bertkit.modeling.auto import auto_class_for_task

        return auto_class_for_task(self.model_task)

    def model_kwargs(self) -> dict[str, Any]:
        return {}

    # --- scoring
    def evaluate(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        examples: Sequence,
        encoded: Encoded | None = None,
        batch_size: int = 64,
        progress: bool = False,
    ) -> dict[str, float]:
        raise NotImplementedError

    def predict(
        self, model: torch.nn.Module, tokenizer: Any, examples: Sequence, batch_size: int = 64, progress: bool = False
    ) -> list[dict]:
        raise NotImplementedError


# ------------------------------------------------------------------------ text classification


class TextClassificationTask(Task):
    name = "text-classification"
    model_task = "sequence-classification"

    def __init__(self, options: TaskOptions | None = None) -> None:
        super().__init__(options)
        self.labels: list[str] = []

    @property
    def problem_type(self) -> str:
        return self.options.problem_type or "single_label_classification"

    @property
    def main_metric(self) -> str:  # type: ignore[override]
        return {"regression": "pearson", "multi_label_classification": "micro_f1"}.get(self.problem_type, "accuracy")

    def read(self, path, labelled=True):
        o = self.options
        return read_table(
            path,
            o.text_column,
            o.text_pair_column,
            o.label_column if labelled else None,
            o.label_separator,
            require_label=labelled,
        )

    def setup_labels(self, train_examples):
        labels = [e.label for e in train_examples]
        if self.options.problem_type is None:
            if any(isinstance(l, (list, tuple)) for l in labels):
                self.options.problem_type = "multi_label_classification"
            else:
                self.options.problem_type = "single_label_classification"
        if self.problem_type == "regression":
            self.labels = ["score"]  # the scores themselves are checked by check(), which knows the file
        else:
            self.labels = build_label_list(labels)
            if self.problem_type == "single_label_classification" and len(self.labels) < 2:
                raise ValueError(f"the training data has a single label ({self.labels}); need at least two")

    def load_labels(self, config):
        self.options.problem_type = self.options.problem_type or getattr(config, "problem_type", None)
        self.labels = [config.id2label[i] for i in range(config.num_labels)]

    @property
    def label2id(self) -> dict[str, int]:
        return {l: i for i, l in enumerate(self.labels)}

    def check(self, path, examples):
        if self.problem_type != "regression":
            check_labels(path, examples, self.label2id)
            return
        for e in examples:
            if e.label is None:
                continue
            try:
                score = float(e.label)
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{e.line}: regression label {e.label!r} is not a number") from None
            if not math.isfinite(score):
                raise ValueError(f"{path}:{e.line}: regression label {e.label!r} is not a finite number")

    def model_kwargs(self):
        return {
            "num_labels": len(self.labels),
            "id2label": dict(enumerate(self.labels)),
            "label2id": self.label2id,
            "problem_type": self.problem_type,
        }

    def encode(self, tokenizer, examples, with_labels=True):
        texts = [e.text for e in examples]
        kw = dict(truncation=True, max_length=self.options.max_length)
        if self.options.text_pair_column:
            enc = tokenizer(texts, [e.text_pair for e in examples], **kw)
        else:
            enc = tokenizer(texts, **kw)
        l2i = self.label2id
        feats = []
        for i, ex in enumerate(examples):
            f = {"input_ids": list(enc["input_ids"][i]), "attention_mask": list(enc["attention_mask"][i])}
            if "token_type_ids" in enc:
                f["token_type_ids"] = list(enc["token_type_ids"][i])
            if with_labels and ex.label is not None:
                if self.problem_type == "regression":
                    f["labels"] = float(ex.label)
                elif self.problem_type == "multi_label_classification":
                    labs = ex.label if isinstance(ex.label, (list, tuple)) else [ex.label]
                    hot = [0.0] * len(self.labels)
                    for lab in labs:
                        hot[l2i[str(lab)]] = 1.0
                    f["labels"] = hot
                else:
                    f["labels"] = l2i[str(ex.label)]
            feats.append(f)
        return Encoded(feats)

    def _logits(self, model, encoded, batch_size, progress):
        res = run_model(model, encoded.features, batch_size, progress=progress, desc="evaluate")
        return np.stack([r["logits"] for r in res])

    def evaluate(self, model, tokenizer, examples, encoded=None, batch_size=64, progress=False):
        encoded = encoded or self.encode(tokenizer, examples)
        logits = self._logits(model, encoded, batch_size, progress)
        y = [f["labels"] for f in encoded.features]
        if self.problem_type == "regression":
            pred = logits[:, 0]
            y = np.asarray(y, dtype=float)
            return {
                "pearson": M.pearsonr(pred, y),
                "spearman": M.spearmanr(pred, y),
                "mse": float(((pred - y) ** 2).mean()),
            }
        if self.problem_type == "multi_label_classification":
            probs = 1 / (1 + np.exp(-logits))
            return M.multilabel_scores(probs, np.asarray(y))
        pred = logits.argmax(-1)
        _, _, macro = M.precision_recall_f1(pred, y, "macro", num_labels=len(self.labels))
        return {
            "accuracy": M.accuracy(pred, y),
            "macro_f1": macro,
            "micro_f1": M.f1_score(pred, y, "micro"),
            "mcc": M.matthews_corrcoef(pred, y),
        }

    def predict(self, model, tokenizer, examples, batch_size=64, progress=False):
        logits = self._logits(model, self.encode(tokenizer, examples, with_labels=False), batch_size, progress)
        out = []
        for ex, lg in zip(examples, logits):
            row: dict[str, Any] = {"text": ex.text}
            if ex.text_pair is not None:
                row["text_pair"] = ex.text_pair
            if self.problem_type == "regression":
                row["score"] = float(lg[0])
            elif self.problem_type == "multi_label_classification":
                probs = 1 / (1 + np.exp(-lg))
                row["labels"] = [l for l, p in zip(self.labels, probs) if p >= 0.5]
                row["scores"] = {l: float(p) for l, p in zip(self.labels, probs)}
            else:
                probs = softmax(lg)
                k = int(probs.argmax())
                row["label"] = self.labels[k]
                row["score"] = float(probs[k])
                row["scores"] = {l: float(p) for l, p in zip(self.labels, probs)}
            if ex.label is not None:
                row["gold"] = ex.label
            out.append(row)
        return out


# ------------------------------------------------------------------------ token classification


def sentence_text(tokens: Sequence[str]) -> tuple[str, list[int]]:
    """The text a tagged sentence spells and each token's character offset in it.

    Character-level annotation (every token one character, as in Chinese NER corpora) is joined
    without spaces; otherwise tokens are joined by a space, except next to a CJK character.
    """
    glue = "" if all(len(t) == 1 for t in tokens) else " "
    parts, starts, pos = [], [], 0
    for k, t in enumerate(tokens):
        if k and glue and not (_CJK.match(tokens[k - 1][-1:]) or _CJK.match(t[:1])):
            parts.append(glue)
            pos += len(glue)
        starts.append(pos)
        parts.append(t)
        pos += len(t)
    return "".join(parts), starts


def tagged_entities(
    tokens: Sequence[str], tags: Sequence[str], scores: Sequence[float] | None = None, scheme: str = "BIO"
) -> tuple[str, list[dict]]:
    """(sentence text, entities) where each entity is ``{"entity": TYPE, "word": its text, "start",
    "end"}`` (character offsets into the text, end exclusive), plus ``"score"`` (mean over its
    tokens) when ``scores`` is given and ``"token_start"``/``"token_end"`` (token indices)."""
    text, starts = sentence_text(tokens)
    ents = []
    for e in M.get_entities(tags, scheme):
        a, b = starts[e.start], starts[e.end - 1] + len(tokens[e.end - 1])
        ent: dict[str, Any] = {"entity": e.type, "word": text[a:b], "start": a, "end": b}
        if scores is not None:
            ent["score"] = float(np.mean(scores[e.start : e.end]))
        ent.update(token_start=e.start, token_end=e.end)
        ents.append(ent)
    return text, ents


class TokenClassificationTask(Task):
    name = "token-classification"
    main_metric = "f1"
    model_task = "token-classification"

    def __init__(self, options: TaskOptions | None = None) -> None:
        super().__init__(options)
        self.labels: list[str] = []

    def read(self, path, labelled=True):
        return read_conll(path, require_tags=labelled)

    def setup_labels(self, train_examples):
        tags = [t for s in train_examples for t in s.tags]
        scheme = self.options.label_scheme or M.detect_scheme(tags)
        self.options.label_scheme = scheme.upper()
        # "O", then every prefix of the scheme for each entity type seen in training: a rare
        # I-/E- tag missing from the training split must not make its type unpredictable
        prefixes = {"BIO": "BI", "BIOES": "BIES", "BMES": "BMES"}[self.options.label_scheme]
        types = sorted({t.split("-", 1)[1] for t in tags if t != "O"})
        self.labels = ["O"] + [f"{p}-{ty}" for ty in types for p in prefixes]

    def load_labels(self, config):
        self.labels = [config.id2label[i] for i in range(config.num_labels)]
        if self.options.label_scheme is None:
            self.options.label_scheme = M.detect_scheme(self.labels)

    @property
    def label2id(self) -> dict[str, int]:
        return {l: i for i, l in enumerate(self.labels)}

    def check(self, path, examples):
        l2i = self.label2id
        for s in examples:
            for k, t in enumerate(s.tags or []):
                if t not in l2i:
                    raise ValueError(
                        f"{path}:{s.line + k}: tag {t!r} was never seen in training "
                        f"(known tags: {', '.join(self.labels)})"
                    )

    def model_kwargs(self):
        return {"num_labels": len(self.labels), "id2label": dict(enumerate(self.labels)), "label2id": self.label2id}

    def encode(self, tokenizer, examples, with_labels=True):
        """One feature per window (:func:`bertkit.inference.window_features`); aux: (sentence, word_ids,
        first token) per window.

        Sentences are tokenized once, without special tokens; WordPiece splits each word on its own,
        so a window is a slice of that encoding between [CLS] and [SEP].
        """
        full = tokenizer(
            [s.tokens for s in examples], is_split_into_words=True, add_special_tokens=False, verbose=False
        )
        cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
        l2i = self.label2id
        feats, aux = [], []
        for i, s in enumerate(examples):
            ids, wids = list(full["input_ids"][i]), full.word_ids(i)
            for t0, t1, f in window_features(
                ids,
                wids,
                len(s.tokens),
                cls_id,
                sep_id,
                self.options.max_length,
                self.options.doc_stride,
                "token_type_ids" in full,
            ):
                win_wids = [None, *wids[t0:t1], None]
                if with_labels and s.tags is not None:
                    labels, prev = [], None
                    for w in win_wids:
                        # only a word's first sub-token carries its label; the rest are ignored (-100)
                        labels.append(l2i[s.tags[w]] if w is not None and w != prev else -100)
                        prev = w
                    f["labels"] = labels
                feats.append(f)
                aux.append((i, win_wids, t0))
        return Encoded(feats, aux)

    def _word_predictions(self, model, encoded, examples, batch_size, progress):
        """Per word, the prediction at its first sub-token, from the window where that token is most
        central (furthest from a window edge, so it saw the most context on both sides)."""
        res = run_model(model, encoded.features, batch_size, progress=progress, desc="evaluate")
        windows: list[list[tuple[int, np.ndarray]]] = [[] for _ in examples]
        sentence_wids: list[list[int | None]] = [[] for _ in examples]
        for r, (i, wids, t0) in zip(res, encoded.aux):
            windows[i].append((t0, softmax(r["logits"])))
            inner = wids[1:-1]  # the window's tokens are tokens t0.. of the sentence's encoding
            need = t0 + len(inner)
            if len(sentence_wids[i]) < need:
                sentence_wids[i].extend([None] * (need - len(sentence_wids[i])))
            sentence_wids[i][t0:need] = inner
        best: list[dict[int, np.ndarray]] = []
        for wins, wids in zip(windows, sentence_wids):
            probs, covered = merge_windows(len(wids), wins)
            best.append({w: probs[t] for w, t in first_subtokens(wids, covered).items()})
        preds, scores, missing = [], [], 0
        for s, got in zip(examples, best):
            tags, sc = [], []
            for w in range(len(s.tokens)):
                if w in got:
                    k = int(got[w].argmax())
                    tags.append(self.labels[k])
                    sc.append(float(got[w][k]))
                else:  # a word the tokenizer turned into no tokens at all (e.g. a lone control character)
                    tags.append("O")
                    sc.append(0.0)
                    missing += 1
            preds.append(tags)
            scores.append(sc)
        if missing:
            warnings.warn(f"{missing} word(s) produced no tokens and were tagged O", stacklevel=3)
        return preds, scores

    def evaluate(self, model, tokenizer, examples, encoded=None, batch_size=64, progress=False):
        encoded = encoded or self.encode(tokenizer, examples)
        preds, _ = self._word_predictions(model, encoded, examples, batch_size, progress)
        gold = [s.tags for s in examples]
        s = M.entity_scores(gold, preds, self.options.label_scheme)
        flat_g = [t for g in gold for t in g]
        flat_p = [t for p in preds for t in p]
        return {
            "precision": s["precision"],
            "recall": s["recall"],
            "f1": s["f1"],
            "token_accuracy": float(np.mean([a == b for a, b in zip(flat_g, flat_p)])),
        }

    def predict(self, model, tokenizer, examples, batch_size=64, progress=False):
        encoded = self.encode(tokenizer, examples, with_labels=False)
        preds, scores = self._word_predictions(model, encoded, examples, batch_size, progress)
        out = []
        for s, tags, sc in zip(examples, preds, scores):
            text, ents = tagged_entities(s.tokens, tags, sc, self.options.label_scheme or "BIO")
            row = {"text": text, "tokens": s.tokens, "tags": tags, "scores": sc, "entities": ents}
            if s.tags is not None:
                row["gold"] = s.tags
            out.append(row)
        return out


# ------------------------------------------------------------------------ question answering


class QuestionAnsweringTask(Task):
    name = "question-answering"
    main_metric = "f1"
    model_task = "question-answering"
    outputs = ("start_logits", "end_logits")
    # The reference SQuAD scripts' window: 384 tokens, windows overlapping by doc_stride 128.
    default_max_length = 384

    def __init__(self, options: TaskOptions | None = None) -> None:
        super().__init__(options)
        if self.options.doc_stride >= self.options.max_length:
            raise ValueError(
                f"doc_stride ({self.options.doc_stride}) must be smaller than max_length "
                f"({self.options.max_length}): the windows of a context overlap by doc_stride tokens"
            )

    def read(self, path, labelled=True):
        return read_squad(path, require_answers=labelled)

    def setup_labels(self, train_examples):
        if self.options.version_2_with_negative is None:
            self.options.version_2_with_negative = any(e.is_impossible for e in train_examples)

    def encode(self, tokenizer, examples, with_labels=True):
        o = self.options
        qf = prepare_qa_features(tokenizer, examples, o.max_length, o.doc_stride, with_labels)
        return Encoded(qf.features, qf)

    def _decode(self, model, encoded, examples, batch_size, progress):
        res = run_model(model, encoded.features, batch_size, outputs=self.outputs, progress=progress, desc="evaluate")
        o = self.options
        return decode_qa(
            examples,
            encoded.aux,
            [r["start_logits"] for r in res],
            [r["end_logits"] for r in res],
            n_best_size=o.n_best_size,
            max_answer_length=o.max_answer_length,
            version_2_with_negative=bool(o.version_2_with_negative),
            null_score_diff_threshold=o.null_score_diff_threshold,
        )

    def evaluate(self, model, tokenizer, examples, encoded=None, batch_size=64, progress=False):
        encoded = encoded or self.encode(tokenizer, examples, with_labels=False)
        preds, _ = self._decode(model, encoded, examples, batch_size, progress)
        refs = {e.id: [a["text"] for a in e.answers] if not e.is_impossible else [] for e in examples}
        return M.squad_scores(preds, refs)

    def predict(self, model, tokenizer, examples, batch_size=64, progress=False):
        encoded = self.encode(tokenizer, examples, with_labels=False)
        preds, nbest = self._decode(model, encoded, examples, batch_size, progress)
        out = []
        for e in examples:
            best = next((a for a in nbest[e.id] if a.text == preds[e.id]), nbest[e.id][0])
            out.append(
                {
                    "id": e.id,
                    "question": e.question,
                    "answer": preds[e.id],
                    "start": best.start if preds[e.id] else -1,
                    "end": best.end if preds[e.id] else -1,
                    "score": best.probability,
                    "n_best": [
                        {"text": a.text, "start": a.start, "end": a.end, "probability": a.probability}
                        for a in nbest[e.id][:5]
                    ],
                }
            )
        return out


# ------------------------------------------------------------------------ multiple choice


class MultipleChoiceTask(Task):
    name = "multiple-choice"
    main_metric = "accuracy"
    model_task = "multiple-choice"

    def read(self, path, labelled=True):
        return read_swag(path, require_label=labelled)

    def encode(self, tokenizer, examples, with_labels=True):
        firsts = [e.context for e in examples for _ in e.endings]
        seconds = [end for e in examples for end in e.endings]
        enc = tokenizer(firsts, seconds, truncation=True, max_length=self.options.max_length)
        feats, k = [], 0
        for e in examples:
            n = len(e.endings)
            f = {
                key: [list(enc[key][k + j]) for j in range(n)]
                for key in ("input_ids", "token_type_ids", "attention_mask")
                if key in enc
            }
            if with_labels and e.label is not None:
                f["labels"] = int(e.label)
            feats.append(f)
            k += n
        return Encoded(feats)

    def _logits(self, model, encoded, batch_size, progress):
        res = run_model(model, encoded.features, batch_size, progress=progress, desc="evaluate")
        return [r["logits"] for r in res]

    def evaluate(self, model, tokenizer, examples, encoded=None, batch_size=64, progress=False):
        encoded = encoded or self.encode(tokenizer, examples)
        logits = self._logits(model, encoded, batch_size, progress)
        return {"accuracy": M.accuracy([int(np.argmax(l)) for l in logits], [e.label for e in examples])}

    def predict(self, model, tokenizer, examples, batch_size=64, progress=False):
        logits = self._logits(model, self.encode(tokenizer, examples, with_labels=False), batch_size, progress)
        out = []
        for e, lg in zip(examples, logits):
            p = softmax(np.asarray(lg))
            k = int(p.argmax())
            out.append(
                {
                    "context": e.context,
                    "label": k,
                    "ending": e.endings[k],
                    "score": float(p[k]),
                    "scores": [float(x) for x in p],
                }
            )
        return out


TASKS: dict[str, type[Task]] = {
    "text-classification": TextClassificationTask,
    "token-classification": TokenClassificationTask,
    "ner": TokenClassificationTask,
    "question-answering": QuestionAnsweringTask,
    "multiple-choice": MultipleChoiceTask,
}

# model task (bertkit.modeling.registry) -> the task that trains it
_BY_MODEL_TASK = {cls.model_task: name for name, cls in TASKS.items() if name != "ner"}


def get_task(name: str, options: TaskOptions | None = None) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name](options)


def task_from_config(config: Any, overrides: dict[str, Any] | None = None, where: str = "this model") -> Task:
    """The Task a fine-tuned model was trained for, from its config (finetuning_task or
    architectures), with the data options saved at fine-tuning time; ``where`` names the model
    folder in the error when neither tells."""
    name = getattr(config, "finetuning_task", None)
    if name not in TASKS:
        from bertkit.modeling.registry import task_of_class

        archs = getattr(config, "architectures", None) or []
        name = next((_BY_MODEL_TASK.get(task_of_class(a)) for a in archs if task_of_class(a) in _BY_MODEL_TASK), None)
    if name is None:
        archs = getattr(config, "architectures", None) or []
        raise ValueError(
            f"{where} is not a fine-tuned model: its config.json names no finetuning_task and no task head "
            f"among its architectures ({', '.join(archs) or 'none'}); fine-tune it first with "
            "`bertkit finetune --task ...`"
        )
    saved = getattr(config, "bertkit_task_options", None)
    opts = TaskOptions.from_dict({**(saved or {}), **{k: v for k, v in (overrides or {}).items() if v is not None}})
    task = get_task(name, opts)
    task.load_labels(config)
    return task
