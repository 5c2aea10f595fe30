"""Inference pipelines that answer like transformers' ``pipeline(...)``.

::

    from bertkit import pipeline
    clf = pipeline("text-classification", model="runs/polarity", dtype="auto")
    clf("a gorgeous, witty film")            # [{'label': 'positive', 'score': 0.97}]
    ner = pipeline("ner", model="runs/wnut16", aggregation_strategy="first")
    qa = pipeline("question-answering", model="runs/qa")
    qa(question="Who built it?", context="...")  # {'score', 'start', 'end', 'answer'}
    fill = pipeline("fill-mask", model="runs/pretrain")
    fill("paris is the [MASK] of france.")   # [{'score', 'token', 'token_str', 'sequence'}, ...]
    emb = pipeline("sentence-embedding", model=asset_path("minilm"))   # pooling/normalisation per the folder

Every pipeline runs its inputs through :func:`bertkit.inference.run_batched`: all texts of a call are
tokenized, sorted by length, forwarded in batches and returned in input order. ``dtype`` ("auto",
"fp32", "bf16", "int8"; see :mod:`bertkit.inference`) picks the precision; the default keeps fp32.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import _args as A
from bertkit.inference import (
    first_subtokens,
    merge_windows,
    prepare_for_inference,
    run_batched,
    softmax,
    window_features,
)

__all__ = [
    "SUPPORTED_TASKS",
    "FeatureExtractionPipeline",
    "FillMaskPipeline",
    "Pipeline",
    "QuestionAnsweringPipeline",
    "TextClassificationPipeline",
    "TokenClassificationPipeline",
    "pipeline",
    "register_pipeline",
]


# The keywords the running call took from those given when its pipeline was built (transformers
# shapes a few answers by where a keyword came from).
_FROM_BUILD: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("from_build", default=frozenset())


class Pipeline:
    """Holds a model and its tokenizer; subclasses implement ``__call__``.

    ``batch_size`` and ``max_batch_tokens`` bound each forward of the shared batched path.
    """

    # the registry's model task whose class a folder loads as (bertkit.modeling.registry)
    model_task = "base"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A keyword given when the pipeline is built is a default of every call, as in transformers
        (``pipeline("text-classification", model=m, top_k=None)`` scores every label on each call);
        one the call names itself wins."""
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is None or getattr(call, "_takes_built_defaults", False):
            return
        params = list(inspect.signature(call).parameters.values())[1:]
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        open_ended = any(p.kind == p.VAR_KEYWORD for p in params)

        @functools.wraps(call)
        def with_built_defaults(self: Pipeline, *args: Any, **kw: Any) -> Any:
            given = set(positional[: len(args)]) | set(kw)
            filled = {n for n in self.kwargs if n not in given and (open_ended or n in named)}
            kw.update({n: self.kwargs[n] for n in filled})
            token = _FROM_BUILD.set(frozenset(filled))
            try:
                return call(self, *args, **kw)
            finally:
                _FROM_BUILD.reset(token)

        with_built_defaults._takes_built_defaults = True  # type: ignore[attr-defined]
        with_built_defaults._call_names = named  # type: ignore[attr-defined]
        with_built_defaults._open_ended = open_ended  # type: ignore[attr-defined]
        cls.__call__ = with_built_defaults  # type: ignore[method-assign]

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int = 32,
        max_batch_tokens: int | None = 16384,
        **kwargs: Any,
    ) -> None:
        from bertkit import modeling
        from bertkit.modeling.auto import AutoTokenizer, auto_class_for_task

        self.folder: Path | None = None
        if isinstance(model, (str, Path)):
            from bertkit.hub import resolve_model_path

            # A model id resolves to its cache snapshot, so the weights, the tokenizer and the
            # sentence-transformers files all come from the same folder.
            path = resolve_model_path(model)
            self.folder = path
            # The registry picks the family's class for this task from the folder's config.json.
            model, info = auto_class_for_task(self.model_task).from_pretrained(str(path), output_loading_info=True)
            self._check_loaded(model, info["missing_keys"], path)
            dtype = dtype or "fp32"
            if tokenizer is None:
                tokenizer = path
        if tokenizer is None:
            raise ValueError("pass tokenizer=... when model is a model object rather than a folder")
        if isinstance(tokenizer, (str, Path)):
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        from bertkit.tokenization import BertTokenizer

        if self.folder is not None and isinstance(tokenizer, BertTokenizer):
            modeling.check_vocab_fits(tokenizer, model.config, str(self.folder))  # a wrong vocab.txt
        self.model = model.eval()
        if isinstance(device, int) and not isinstance(device, bool):
            device = _device_index(device)
        if isinstance(device, str):
            from bertkit._args import check_device

            device = check_device("device", device)  # before torch fails deep inside .to()
        if device:
            self.model.to(device)
        if dtype is not None:
            prepare_for_inference(self.model, dtype)
        self.tokenizer = tokenizer
        self.device = next(self.model.parameters()).device
        self.batch_size = A.positive_int.check("batch_size", batch_size)
        self.max_batch_tokens = max_batch_tokens
        call = type(self).__call__
        if kwargs and not getattr(call, "_open_ended", True):
            unknown = sorted(set(kwargs) - call._call_names)
            if unknown:
                raise TypeError(
                    f"{type(self).__name__} got an unexpected argument {unknown[0]}={kwargs[unknown[0]]!r}; "
                    f"a call takes {', '.join(sorted(call._call_names))}"
                )
        self.kwargs = kwargs

    def _check_loaded(self, model: Any, missing: list[str], path: Path) -> None:
        """Refuse a folder this pipeline cannot answer from (by default: one without the task's head)."""
        _refuse_an_untrained_head(model, missing, path, self.model_task)

    @property
    def dtype(self) -> str:
        from bertkit.inference import inference_dtype

        return inference_dtype(self.model)

    def _run(
        self,
        features: Sequence[dict],
        outputs: Sequence[str] = ("logits",),
        postprocess: Any = None,
        batch_size: int | None = None,
    ) -> list[dict[str, np.ndarray]]:
        A.positive_int.check("batch_size", batch_size, allow_none=True)
        return run_batched(
            self.model,
            features,
            batch_size or self.batch_size,
            outputs=outputs,
            max_batch_tokens=self.max_batch_tokens,
            postprocess=postprocess,
        )

    def _features(self, enc: Any, n: int) -> list[dict]:
        keys = [k for k in ("input_ids", "token_type_ids", "attention_mask") if k in enc]
        return [{k: enc[k][i] for k in keys} for i in range(n)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={type(self.model).__name__}, dtype={self.dtype})"


def _refuse_an_untrained_head(model: Any, missing: list[str], path: Path, task: str) -> None:
    """A task pipeline over a folder whose checkpoint lacks the task's head would answer from random
    weights, differently on every load: a ValueError naming the folder and the head instead."""
    if task == "base":
        return
    prefix = getattr(model, "base_model_prefix", "") + "."
    head = [k for k in missing if not k.startswith(prefix)]
    if head:
        what = getattr(model, "_head_description", "") or "task head"
        archs = ", ".join(getattr(model.config, "architectures", None) or []) or "no architectures named"
        raise ValueError(
            f"{path} has no trained {what} ({len(head)} weights missing, e.g. {head[0]}; its config.json names "
            f"{archs}), so this {task} pipeline would answer from random weights; give a model trained for it"
        )


def _device_index(index: int) -> str:
    """transformers' ``device=N``: GPU N (-1 = CPU); CPU with a warning when there is no GPU."""
    if index < 0:
        return "cpu"
    if torch.cuda.is_available():
        return f"cuda:{index}"
    import warnings

    warnings.warn(
        f"device={index} asks for GPU {index}, but no CUDA device is available; running on the CPU", stacklevel=4
    )
    return "cpu"


def _batched(inputs: Any) -> tuple[list, bool]:
    if isinstance(inputs, (list, tuple)):
        return list(inputs), True
    return [inputs], False


def _check_texts(texts: list, what: str = "inputs") -> None:
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"{what}[{i}] must be a string, got {type(t).__name__}")


def _target_ids(tokenizer: Any, targets: str | Sequence[str]) -> torch.Tensor:
    """Vocabulary ids of fill-mask ``targets`` (one word or a list), as transformers picks them: a
    target that is not one vocabulary token stands for its first word piece, with a warning."""
    import warnings

    words = [targets] if isinstance(targets, str) else list(targets)
    ids: list[int] = []
    for i, word in enumerate(words):
        if not isinstance(word, str):
            raise TypeError(f"targets[{i}] must be a string, got {type(word).__name__}")
        tid = tokenizer.convert_tokens_to_ids([word])[0]
        if tid == tokenizer.unk_token_id and word != tokenizer.unk_token:
            pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
            if not pieces:
                raise ValueError(f"fill-mask target {word!r} has no tokens")
            tid = pieces[0]
            warnings.warn(
                f"fill-mask target {word!r} is not one vocabulary token; using its first piece "
                f"{tokenizer.convert_ids_to_tokens([tid])[0]!r}",
                stacklevel=3,
            )
        if tid not in ids:
            ids.append(tid)
    return torch.tensor(ids)


class FillMaskPipeline(Pipeline):
    """``fill(text, top_k=5)``: the top tokens for each [MASK] (a list of lists for several masks)."""

    model_task = "masked-lm"

    def __call__(
        self,
        inputs: str | Sequence[str],
        top_k: int | None = None,
        targets: Sequence[str] | None = None,
        max_length: int = 512,
    ):
        texts, batched = _batched(inputs)
        _check_texts(texts)
        top_k = A.positive_int.check("top_k", self.kwargs.get("top_k", 5) if top_k is None else top_k)
        mask_id = self.tokenizer.mask_token_id
        enc = self.tokenizer(texts, truncation=True, max_length=max_length)
        feats = self._features(enc, len(texts))
        positions = [[p for p, t in enumerate(f["input_ids"]) if t == mask_id] for f in feats]
        for text, pos in zip(texts, positions):
            if not pos:
                raise ValueError(f"no {self.tokenizer.mask_token} token in {text!r}")

        def at_masks(out: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            # Only the [MASK] rows leave the batch: (B, masks, V) instead of (B, N, V).
            ids = batch["input_ids"]
            where = ids == mask_id
            k = int(where.sum(1).max())
            rows = torch.zeros(ids.shape[0], k, out.logits.shape[-1], dtype=out.logits.dtype)
            for r in range(ids.shape[0]):
                sel = out.logits[r][where[r]]
                rows[r, : sel.shape[0]] = sel
            return {"mask_logits": rows}

        res = self._run(feats, postprocess=at_masks)
        cand = _target_ids(self.tokenizer, targets) if targets else None
        results = []
        for f, pos, r in zip(feats, positions, res):
            ids = torch.tensor(f["input_ids"])
            per_mask = []
            for m, p in enumerate(pos):
                probs = torch.from_numpy(softmax(r["mask_logits"][m]))
                if cand is not None:
                    vals, order = probs[cand].sort(descending=True)
                    idx, vals = cand[order][:top_k], vals[:top_k]
                else:
                    vals, idx = probs.topk(min(top_k, probs.numel()))
                rows = []
                for score, i in zip(vals.tolist(), idx.tolist()):
                    filled = ids.clone()
                    filled[p] = i
                    rows.append(
                        {
                            "score": score,
                            "token": i,
                            "token_str": self.tokenizer.decode([i]),
                            "sequence": self.tokenizer.decode(filled.tolist(), skip_special_tokens=True),
                        }
                    )
                per_mask.append(rows)
            results.append(per_mask[0] if len(per_mask) == 1 else per_mask)
        return results if batched else results[0]


def _refuse_unknown(task: str, kwargs: dict[str, Any], known: str) -> None:
    """A misspelled or unsupported keyword is an error naming it, never silently ignored."""
    if kwargs:
        name = sorted(kwargs)[0]
        raise TypeError(f"{task} pipeline got an unexpected argument {name}={kwargs[name]!r}; it takes {known}")


def _function_to_apply(name: Any, config: Any) -> str:
    """The score function of a text-classification call: the one named, else the model's kind's."""
    if name is None:
        multi = config.problem_type == "multi_label_classification" or config.num_labels == 1
        return "sigmoid" if multi else "softmax"
    value = str(getattr(name, "value", name)).lower()  # an enum member, as transformers passes it, or its name
    if value not in ("softmax", "sigmoid", "none"):
        raise ValueError(f"function_to_apply must be 'softmax', 'sigmoid' or 'none', got {name!r}")
    return value


class TextClassificationPipeline(Pipeline):
    """``clf(text)`` -> ``[{'label', 'score'}]``; ``top_k=None`` for every label's score.

    A text pair is given as ``{"text": ..., "text_pair": ...}``. Multi-label and single-output
    (regression) models use a sigmoid, like transformers.
    """

    model_task = "sequence-classification"

    def __call__(
        self,
        inputs: Any,
        top_k: int | None | str = "",
        max_length: int = 512,
        truncation: str | None = None,
        function_to_apply: str | None = None,
        **kwargs: Any,
    ):
        """``truncation`` ("error" by default, "cut" or "chunk": the token-weighted mean of overlapping
        windows' logits) decides what happens to a text over ``max_length`` tokens. ``function_to_apply``
        ("softmax", "sigmoid" or "none" for the raw logits) overrides the model's own: sigmoid for
        multi-label and single-output models, softmax otherwise."""
        from .long_text import check_truncation, plan_windows, pool_windows, report_cut

        # top_k left out: the best label alone, a dict per text (transformers' legacy form); given, even
        # as 1, a list of the top_k labels per text
        legacy = top_k == ""
        if "return_all_scores" in kwargs:  # transformers' older spelling of top_k=None
            legacy, top_k = False, None if kwargs.pop("return_all_scores") else 1
        if legacy:
            top_k = 1
        batch_size = kwargs.pop("batch_size", None)
        _refuse_unknown("text-classification", kwargs, "top_k, function_to_apply, max_length, truncation, batch_size")
        A.positive_int.check("batch_size", batch_size, allow_none=True)
        A.positive_int.check("top_k", top_k, allow_none=True)
        apply = _function_to_apply(function_to_apply or self.kwargs.get("function_to_apply"), self.model.config)
        mode = check_truncation(truncation or self.kwargs.get("truncation", "error"))
        items, batched = _batched(inputs)
        texts = [x["text"] if isinstance(x, dict) else x for x in items]
        pairs = [x.get("text_pair") if isinstance(x, dict) else None for x in items]
        _check_texts(texts)
        if all(p is None for p in pairs):
            plan = plan_windows(self.tokenizer, texts, max_length, mode)
            rows = self._run(plan.features, batch_size=batch_size)
            logits = pool_windows(np.stack([r["logits"] for r in rows]), plan, len(texts))
            dropped = plan.dropped
        else:
            if mode == "chunk":
                raise ValueError("truncation='chunk' is for single texts; a text pair takes 'error' or 'cut'")
            dropped, feats = [], []
            for i, (t, p) in enumerate(zip(texts, pairs)):
                n = len(self.tokenizer(t, p)["input_ids"])
                if n > max_length and mode == "error":
                    raise ValueError(
                        f"inputs[{i}] has {n} tokens, over the model's limit of {max_length}; "
                        "pass truncation='cut' to drop the rest"
                    )
                dropped.append(max(0, n - max_length))
                feats.append(self._features(self.tokenizer([t], [p], truncation=True, max_length=max_length), 1)[0])
            logits = np.stack([r["logits"] for r in self._run(feats, batch_size=batch_size)])
        self.last_dropped_tokens = dropped
        report_cut(dropped, max_length)
        cfg = self.model.config
        out = []
        for row in logits:
            scores = {"sigmoid": lambda x: 1 / (1 + np.exp(-x)), "softmax": softmax, "none": lambda x: x}[apply](row)
            order = np.argsort(-scores)
            rows = [{"label": cfg.id2label[int(k)], "score": float(scores[k])} for k in order]
            out.append(rows if top_k is None else rows[:top_k])
        if legacy:  # transformers returns a list of dicts, also for one text; a bare dict for one pair dict
            return out[0][0] if isinstance(inputs, dict) else [r[0] for r in out]
        if isinstance(inputs, str) and "top_k" in _FROM_BUILD.get():
            return out  # one text, top_k from the pipeline's building: transformers wraps its list in one more
        return out if batched else out[0]


def _group_bio_runs(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, start, end) runs of BIO tags as transformers groups them: a tag continues the run before
    it when it has the same type and is not a B-; a stray I- starts a run; O tags form "O" runs, which
    ``ignore_labels`` drops by default."""
    spans: list[tuple[str, int, int]] = []
    for i, tag in enumerate(tags):
        bi, etype = (tag[0], tag[2:]) if tag[:2] in ("B-", "I-") else ("I", tag)
        if spans and spans[-1][0] == etype and bi != "B":
            spans[-1] = (etype, spans[-1][1], i + 1)
        else:
            spans.append((etype, i, i + 1))
    return spans


class TokenClassificationPipeline(Pipeline):
    """``ner(text)`` -> entities with character offsets.

    ``aggregation_strategy="none"`` (default, as transformers): one dict per sub-token whose label is
    not in ``ignore_labels`` (default ``["O"]``) with ``entity``, ``score``, ``index``, ``word``,
    ``start``, ``end``. Otherwise sub-tokens (``"simple"``) or words form entity groups
    (``entity_group``, ``score`` (the mean of the parts'), ``word`` (the parts' tokens put back
    together by the tokenizer, as transformers does: lower-cased by an uncased vocabulary, a group
    that starts inside a word keeps its ``##``), ``start``, ``end``); a word takes the label of its
    first sub-token (``"first"``), of its sub-tokens' mean probabilities (``"average"``) or of its most
    confident sub-token (``"max"``). BIO tags group as transformers groups them (a run of one type,
    broken by a B-); BIOES and BMES tags form only well-formed spans. Groups whose type is in
    ``ignore_labels`` are dropped.

    A text longer than ``max_length`` tokens is cut into overlapping word windows (the ones
    fine-tuning uses, ``doc_stride`` tokens of overlap), so every word gets a tag.
    """

    model_task = "token-classification"

    def __call__(
        self,
        inputs: Any,
        aggregation_strategy: str | None = None,
        max_length: int = 512,
        doc_stride: int = 128,
        ignore_labels: Sequence[str] | None = None,
    ):
        from bertkit.tasks.metrics import detect_scheme, get_entities

        strategy = aggregation_strategy or self.kwargs.get("aggregation_strategy") or "none"
        strategy = str(getattr(strategy, "value", strategy)).lower()  # transformers' enum member, or its name
        if strategy not in ("none", "simple", "first", "average", "max"):
            raise ValueError(f"aggregation_strategy must be none, simple, first, average or max, got {strategy!r}")
        ignore = self.kwargs.get("ignore_labels", ["O"]) if ignore_labels is None else ignore_labels
        if isinstance(ignore, str) or not all(isinstance(x, str) for x in ignore):
            raise TypeError(f"ignore_labels must be a list of label names, got {ignore!r}")
        texts, batched = _batched(inputs)
        _check_texts(texts)
        id2label = self.model.config.id2label
        scheme = detect_scheme(id2label.values())
        enc = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        cls_id, sep_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        feats, owners = [], []  # owners: (text index, first token of the window)
        per_text = []
        for i in range(len(texts)):
            ids, wids = list(enc["input_ids"][i]), enc.word_ids(i)
            n_words = max((w for w in wids if w is not None), default=-1) + 1
            for t0, _, f in window_features(
                ids, wids, n_words, cls_id, sep_id, max_length, doc_stride, "token_type_ids" in enc
            ):
                feats.append(f)
                owners.append((i, t0))
            per_text.append((ids, wids, [tuple(int(v) for v in o) for o in enc["offset_mapping"][i]]))
        windows: list[list[tuple[int, np.ndarray]]] = [[] for _ in texts]
        for (i, t0), r in zip(owners, self._run(feats)):
            windows[i].append((t0, softmax(r["logits"])))
        out = []
        for text, (ids, wids, offsets), wins in zip(texts, per_text, windows):
            probs, covered = merge_windows(len(ids), wins)
            rows = []
            if strategy == "none":
                for t, (tid, (s, e)) in enumerate(zip(ids, offsets)):
                    if not covered[t]:
                        continue
                    k = int(probs[t].argmax())
                    if id2label[k] in ignore:
                        continue
                    rows.append(
                        {
                            "entity": id2label[k],
                            "score": float(probs[t][k]),
                            "index": t + 1,
                            "word": self.tokenizer.convert_ids_to_tokens(tid),
                            "start": s,
                            "end": e,
                        }
                    )
            else:
                units = self._units(strategy, ids, wids, offsets, probs, covered, id2label)
                tags = [u[2] for u in units]
                if scheme == "BIO":
                    spans = _group_bio_runs(tags)
                else:  # B-(I|M)*-E and S- spans: a run of one type is not enough for these schemes
                    spans = [(ent.type, ent.start, ent.end) for ent in get_entities(tags, scheme)]
                for etype, a, b in spans:
                    if etype in ignore:
                        continue
                    s, e = units[a][0], units[b - 1][1]
                    rows.append(
                        {
                            "entity_group": etype,
                            "score": float(np.mean([u[3] for u in units[a:b]])),
                            "word": self.tokenizer.convert_tokens_to_string([u[4] for u in units[a:b]]),
                            "start": s,
                            "end": e,
                        }
                    )
            out.append(rows)
        return out if batched else out[0]

    def _units(
        self,
        strategy: str,
        ids: list[int],
        wids: list[int | None],
        offsets: list[tuple[int, ...]],
        probs: np.ndarray,
        covered: Any,
        id2label: dict[int, str],
    ) -> list[tuple[int, int, str, float, str]]:
        """(start, end, tag, score, word), one per word as ``strategy`` labels it, or per sub-token for
        "simple"; only the tokens a window covered."""
        units: list[tuple[int, int, str, float, str]] = []
        token = self.tokenizer.convert_ids_to_tokens
        if strategy == "simple":
            for t in range(len(ids)):
                if covered[t]:
                    k = int(probs[t].argmax())
                    units.append((*offsets[t], id2label[k], float(probs[t][k]), token(ids[t])))
            return units
        first = first_subtokens(wids, covered)
        last = {w: t for t, w in enumerate(wids) if w is not None}  # later sub-tokens widen the span
        for w in sorted(first):
            t = first[w]
            subs = [u for u in range(t, last[w] + 1) if wids[u] == w and covered[u]]
            word_probs = probs[t]
            if strategy == "average":
                word_probs = probs[subs].mean(0)
            elif strategy == "max":
                word_probs = probs[max(subs, key=lambda u: probs[u].max())]
            k = int(word_probs.argmax())
            word = self.tokenizer.convert_tokens_to_string([token(ids[u]) for u in subs])
            units.append((offsets[t][0], offsets[last[w]][1], id2label[k], float(word_probs[k]), word))
        return units


class QuestionAnsweringPipeline(Pipeline):
    """``qa(question=..., context=...)`` -> ``{'score', 'start', 'end', 'answer'}`` (character
    offsets into the context). Long contexts are split into windows with ``doc_stride``; answers
    longer than ``max_answer_len`` tokens are not considered. ``top_k`` > 1 returns a list.
    ``score`` is the softmax of the span's start+end logit over the n-best candidates."""

    model_task = "question-answering"

    def __call__(
        self,
        question: str | Sequence[str] | None = None,
        context: str | Sequence[str] | None = None,
        top_k: int = 1,
        doc_stride: int = 128,
        max_answer_len: int = 15,
        max_seq_len: int = 384,
        handle_impossible_answer: bool = False,
        **kwargs: Any,
    ):
        from bertkit.data.readers import QAExample
        from bertkit.tasks.qa import decode_qa, prepare_qa_features

        A.positive_int.check("top_k", top_k)
        A.positive_int.check("doc_stride", doc_stride)
        A.positive_int.check("max_answer_len", max_answer_len)
        A.SEQ_LEN.check("max_seq_len", max_seq_len)
        question = kwargs.pop("questions", question)
        _refuse_unknown(
            "question-answering",
            kwargs,
            "question, context, top_k, doc_stride, max_answer_len, max_seq_len, handle_impossible_answer",
        )
        items = question if isinstance(question, (list, tuple)) else [question]
        if context is None and items and all(isinstance(x, dict) for x in items):
            # transformers also takes {"question": ..., "context": ...} dicts, one or a list
            for i, x in enumerate(items):
                if not {"question", "context"} <= set(x):
                    raise ValueError(f"inputs[{i}] must have 'question' and 'context' keys, got {sorted(x)}")
            listed = isinstance(question, (list, tuple))
            qs_, cs_ = [x["question"] for x in items], [x["context"] for x in items]
            question, context = (qs_, cs_) if listed else (qs_[0], cs_[0])
        if question is None or context is None:
            raise ValueError("question-answering needs question=... and context=...")
        qs, batched = _batched(question)
        cs = list(context) if isinstance(context, (list, tuple)) else [context] * len(qs)
        if len(cs) != len(qs):
            raise ValueError(f"{len(qs)} questions but {len(cs)} contexts")
        _check_texts(qs, "question")
        _check_texts(cs, "context")
        examples = [QAExample(str(i), q, c) for i, (q, c) in enumerate(zip(qs, cs))]
        doc_stride = min(doc_stride, max_seq_len // 2)
        feats = prepare_qa_features(self.tokenizer, examples, max_seq_len, doc_stride, with_labels=False)
        res = self._run(feats.features, outputs=("start_logits", "end_logits"))
        _, nbest = decode_qa(
            examples,
            feats,
            [r["start_logits"] for r in res],
            [r["end_logits"] for r in res],
            n_best_size=max(20, top_k),
            max_answer_length=max_answer_len,
            version_2_with_negative=handle_impossible_answer,
        )
        results = []
        for ex in examples:
            rows = [
                {"score": a.probability, "start": max(a.start, 0), "end": max(a.end, 0), "answer": a.text}
                for a in nbest[ex.id][:top_k]
            ]
            results.append(rows[0] if top_k == 1 else rows)
        return results if batched else results[0]


class FeatureExtractionPipeline(Pipeline):
    """``feature-extraction``: token vectors ``[1][tokens][hidden]`` per text, as transformers.
    ``sentence-embedding``: one vector per text, ``pooling`` "mean" (mask-aware), "cls", "max" (or
    sentence-transformers' other modes, or several joined by "+", concatenated: "cls+mean"), through the
    folder's Dense modules (fp32), then L2-normalised when ``normalize``. All default to the folder's
    sentence-transformers config (mean and normalised when the folder has none); ``max_length`` to its
    ``max_seq_length`` (else 512).
    ``dense`` (a list, maybe empty) replaces the folder's modules: the caller built the model in code
    and gives pooling, normalize and max_length, so the folder's module files are not read."""

    model_task = "base"

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        device: str | None = None,
        sentence: bool = False,
        pooling: str | None = None,
        normalize: bool | None = None,
        max_length: int | None = None,
        truncation: str = "error",
        dense: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        from bertkit.modeling.sentence import (
            check_dense_chain,
            pooled_width,
            sentence_transformers_dense,
            sentence_transformers_pooling,
        )

        from .long_text import check_truncation

        super().__init__(model, tokenizer, device, **kwargs)
        self.truncation = check_truncation(truncation)
        self.last_dropped_tokens: list[int] = []
        read_folder = self.folder is not None and dense is None
        st_pool, st_norm, st_len = (
            sentence_transformers_pooling(self.folder, strict=sentence) if read_folder else (None, None, None)
        )
        pooling = pooling or st_pool or "mean"
        width = pooled_width(pooling, int(self.model.config.hidden_size))  # checks the pooling, naming it
        self.sentence = sentence
        self.pooling = pooling
        self.normalize = normalize if normalize is not None else (st_norm if st_norm is not None else sentence)
        self.max_length = int(max_length or st_len or 512)
        # The Dense modules stay fp32 on the model's device whatever dtype the encoder runs in: they are
        # one small matmul on pooled vectors, and fit() trains these same modules.
        if dense is None:
            dense = sentence_transformers_dense(self.folder) if (sentence and self.folder is not None) else []
        self.dense: list[Any] = [layer.to(self.device) for layer in dense]
        where = str(self.folder / "modules.json") if read_folder and self.folder is not None else "modules"
        self.dim = check_dense_chain(self.dense, width, where)

    def encode_features(self, texts: Sequence[str], max_length: int | None = None) -> list[dict]:
        """Token features of ``texts`` (truncated to ``max_length``), ready for :meth:`forward_features`."""
        texts = list(texts)
        _check_texts(texts)
        enc = self.tokenizer(texts, truncation=True, max_length=max_length or self.max_length)
        return self._features(enc, len(texts))

    def _pool(self, out: Any, batch: dict[str, torch.Tensor], normalize: bool | None = None) -> dict[str, torch.Tensor]:
        from bertkit.modeling.sentence import apply_dense, pool

        normalize = self.normalize if normalize is None else normalize
        hidden = (out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]).float()
        if not self.dense:
            return {"embedding": pool(hidden, batch["attention_mask"], self.pooling, normalize)}
        vec = pool(hidden, batch["attention_mask"], self.pooling)
        return {"embedding": apply_dense(vec, self.dense, normalize)}

    def forward_features(
        self, features: Sequence[dict], batch_size: int | None = None, normalize: bool | None = None
    ) -> np.ndarray:
        """Sentence vectors (len(features), dim) as float32, in input order; ``normalize`` overrides
        the pipeline's own setting for this call only (safe beside other calls on other threads)."""
        post = self._pool if normalize is None else functools.partial(self._pool, normalize=normalize)
        res = self._run(features, postprocess=post, batch_size=batch_size)
        if not res:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([r["embedding"] for r in res])

    def embed(
        self,
        texts: Sequence[str],
        max_length: int | None = None,
        batch_size: int | None = None,
        truncation: str | None = None,
    ) -> np.ndarray:
        """Sentence vectors (len(texts), dim); a text over ``max_length`` tokens is an error, cut, or
        (``truncation="chunk"``) the token-weighted mean of its overlapping windows' vectors."""
        from .long_text import plan_windows, pool_windows, report_cut

        texts = list(texts)
        _check_texts(texts)
        limit = max_length or self.max_length
        plan = plan_windows(self.tokenizer, texts, limit, truncation or self.truncation)
        self.last_dropped_tokens = plan.dropped
        report_cut(plan.dropped, limit)
        if len(plan.features) == len(texts):
            return self.forward_features(plan.features, batch_size)
        raw = self.forward_features(plan.features, batch_size, normalize=False)  # pool the raw vectors, then normalise
        vecs = pool_windows(raw, plan, len(texts))
        if self.normalize:
            vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        return vecs.astype(np.float32)

    def __call__(
        self,
        inputs: str | Sequence[str],
        max_length: int | None = None,
        batch_size: int | None = None,
        return_tensors: bool = False,
        truncation: str | None = None,
    ):
        from .long_text import plan_windows, report_cut

        texts, batched = _batched(inputs)
        if self.sentence:
            vecs = torch.from_numpy(self.embed(texts, max_length, batch_size, truncation))
            if return_tensors:
                return vecs if batched else vecs[0]
            outs = vecs.tolist()
            return outs if batched else outs[0]
        mode = truncation or self.truncation
        if mode == "chunk":
            raise ValueError("truncation='chunk' pools sentence vectors; token vectors take 'error' or 'cut'")
        _check_texts(texts)
        plan = plan_windows(self.tokenizer, texts, max_length or self.max_length, mode)
        self.last_dropped_tokens = plan.dropped
        report_cut(plan.dropped, max_length or self.max_length)
        res = self._run(plan.features, outputs=("last_hidden_state",), batch_size=batch_size)
        outs = [
            torch.from_numpy(r["last_hidden_state"]).unsqueeze(0)
            if return_tensors
            else [r["last_hidden_state"].tolist()]
            for r in res
        ]
        return outs if batched else outs[0]


SUPPORTED_TASKS: dict[str, type[Pipeline]] = {
    "fill-mask": FillMaskPipeline,
    "text-classification": TextClassificationPipeline,
    "sentiment-analysis": TextClassificationPipeline,
    "token-classification": TokenClassificationPipeline,
    "ner": TokenClassificationPipeline,
    "question-answering": QuestionAnsweringPipeline,
    "feature-extraction": FeatureExtractionPipeline,
    "sentence-embedding": FeatureExtractionPipeline,
}

# task -> keyword defaults the task implies (a task that shares a class with another)
TASK_DEFAULTS: dict[str, dict[str, Any]] = {"sentence-embedding": {"sentence": True}}


# (is this kind of folder?, its pipeline) for the embedding tasks: folders whose vectors come from
# something else than an encoder (bertkit.pipelines registers the static embedding folders)
EMBEDDING_FOLDER_KINDS: list[tuple[Callable[[Path], bool], type[Pipeline]]] = []


def register_pipeline(task: str, cls: type[Pipeline], **defaults: Any) -> None:
    """Make ``pipeline(task, ...)`` build ``cls`` (with ``defaults`` as keyword arguments)."""
    SUPPORTED_TASKS[task] = cls
    if defaults:
        TASK_DEFAULTS[task] = dict(defaults)


def pipeline(
    task: str,
    model: Any = None,
    tokenizer: Any = None,
    device: str | None = None,
    dtype: str | None = None,
    **kwargs: Any,
) -> Pipeline:
    """Build the pipeline for ``task`` from a model folder, a model id in the Hugging Face cache
    (never downloaded), or a model object plus ``tokenizer``.

    Tasks: fill-mask, text-classification (alias sentiment-analysis), token-classification (alias
    ner), question-answering, feature-extraction, sentence-embedding (``pooling="mean"|"cls"|"max"``),
    zero-shot-classification (an NLI model; ``candidate_labels=...``).
    ``dtype``: "auto" | "fp32" | "bf16" | "int8" (default fp32; "auto" = bf16 where the CPU has it).
    """
    if task not in SUPPORTED_TASKS:
        raise ValueError(f"unknown pipeline task {task!r}; choose one of {', '.join(SUPPORTED_TASKS)}")
    if model is None:
        raise ValueError(f"pipeline({task!r}) needs model=<folder or model>; bertkit never downloads a default")
    for k, v in TASK_DEFAULTS.get(task, {}).items():
        kwargs.setdefault(k, v)
    if task in ("sentence-embedding", "feature-extraction") and isinstance(model, (str, Path)):
        from bertkit.hub import resolve_model_path

        folder = resolve_model_path(model)
        for is_kind, cls in EMBEDDING_FOLDER_KINDS:  # a folder with no encoder to run (a static model)
            if is_kind(folder):
                return cls(model, tokenizer=tokenizer, device=device, dtype=dtype, **kwargs)
    return SUPPORTED_TASKS[task](model, tokenizer=tokenizer, device=device, dtype=dtype, **kwargs)
