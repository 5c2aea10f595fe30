"""Inference pipelines that answer like transformers' ``pipeline(...)``.

::

    from bertkit import pipeline
    clf = pipeline("text-classification", model="runs/polarity")
    clf("a gorgeous, witty film")            # [{'label': 'positive', 'score': 0.97}]
    ner = pipeline("ner", model="runs/wnut16", aggregation_strategy="simple")
    qa = pipeline("question-answering", model="runs/qa")
    qa(question="Who built it?", context="...")  # {'score', 'start', 'end', 'answer'}
    fill = pipeline("fill-mask", model="runs/pretrain")
    fill("paris is the [MASK] of france.")   # [{'score', 'token', 'token_str', 'sequence'}, ...]
    emb = pipeline("sentence-embedding", model=asset_path("minilm"))   # mean pooling, L2-normalised
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from bertkit import _args as A

__all__ = [
    "pipeline",
    "Pipeline",
    "FillMaskPipeline",
    "TextClassificationPipeline",
    "TokenClassificationPipeline",
    "QuestionAnsweringPipeline",
    "FeatureExtractionPipeline",
    "SUPPORTED_TASKS",
]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class Pipeline:
    """Holds a model and its tokenizer; subclasses implement ``__call__``."""

    model_class_name = "BertModel"

    def __init__(self, model: Any, tokenizer: Any = None, device: str | None = None, **kwargs: Any) -> None:
        import bertkit.modeling as modeling

        if isinstance(model, (str, Path)):
            path = Path(model)
            if not path.exists():
                raise FileNotFoundError(f"{path}: no such model folder")
            model = getattr(modeling, self.model_class_name).from_pretrained(str(path))
            if tokenizer is None:
                tokenizer = path
        if tokenizer is None:
            raise ValueError("pass tokenizer=... when model is a model object rather than a folder")
        if isinstance(tokenizer, (str, Path)):
            from bertkit.tokenization import BertTokenizer

            tokenizer = BertTokenizer.from_pretrained(str(tokenizer))
        self.model = model.eval()
        if device:
            self.model.to(device)
        self.tokenizer = tokenizer
        self.device = next(self.model.parameters()).device
        self.kwargs = kwargs

    def _forward(self, enc: dict) -> Any:
        keys = ("input_ids", "token_type_ids", "attention_mask")
        with torch.inference_mode():
            return self.model(**{k: torch.as_tensor(enc[k]).to(self.device) for k in keys if k in enc})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={type(self.model).__name__})"


def _batched(inputs: Any) -> tuple[list, bool]:
    if isinstance(inputs, (list, tuple)):
        return list(inputs), True
    return [inputs], False


class FillMaskPipeline(Pipeline):
    """``fill(text, top_k=5)``: the top tokens for each [MASK] (a list of lists for several masks)."""

    model_class_name = "BertForMaskedLM"

    def __call__(self, inputs: str | Sequence[str], top_k: int | None = None, targets: Sequence[str] | None = None):
        texts, batched = _batched(inputs)
        top_k = A.positive_int.check("top_k", self.kwargs.get("top_k", 5) if top_k is None else top_k)
        mask_id = self.tokenizer.mask_token_id
        results = []
        for text in texts:
            enc = self.tokenizer(text, return_tensors="pt", truncation=True)
            ids = enc["input_ids"][0]
            positions = (ids == mask_id).nonzero().flatten().tolist()
            if not positions:
                raise ValueError(f"no {self.tokenizer.mask_token} token in {text!r}")
            logits = self._forward(enc).logits[0].float()
            per_mask = []
            for pos in positions:
                probs = logits[pos].softmax(-1)
                if targets:
                    cand = torch.tensor(self.tokenizer.convert_tokens_to_ids(list(targets)))
                    vals, order = probs[cand].sort(descending=True)
                    idx = cand[order][:top_k]
                    vals = vals[:top_k]
                else:
                    vals, idx = probs.topk(min(top_k, probs.numel()))
                rows = []
                for p, i in zip(vals.tolist(), idx.tolist()):
                    filled = ids.clone()
                    filled[pos] = i
                    rows.append({
                        "score": p,
                        "token": i,
                        "token_str": self.tokenizer.decode([i]),
                        "sequence": self.tokenizer.decode(filled.tolist(), skip_special_tokens=True),
                    })
                per_mask.append(rows)
            results.append(per_mask[0] if len(per_mask) == 1 else per_mask)
        return results if batched else results[0]


class TextClassificationPipeline(Pipeline):
    """``clf(text)`` -> ``[{'label', 'score'}]``; ``top_k=None`` for every label's score.

    A text pair is given as ``{"text": ..., "text_pair": ...}``. Multi-label and single-output
    (regression) models use a sigmoid, like transformers.
    """

    model_class_name = "BertForSequenceClassification"

    def __call__(self, inputs: Any, top_k: int | None = 1, max_length: int = 512, **_: Any):
        A.positive_int.check("top_k", top_k, allow_none=True)
        items, batched = _batched(inputs)
        texts = [x["text"] if isinstance(x, dict) else x for x in items]
        pairs = [x.get("text_pair") if isinstance(x, dict) else None for x in items]
        cfg = self.model.config
        out = []
        for text, pair in zip(texts, pairs):
            enc = self.tokenizer(text, pair, truncation=True, max_length=max_length, return_tensors="pt")
            logits = self._forward(enc).logits[0].float().cpu().numpy()
            if cfg.problem_type == "multi_label_classification" or cfg.num_labels == 1:
                scores = 1 / (1 + np.exp(-logits))
            else:
                scores = _softmax(logits)
            order = np.argsort(-scores)
            rows = [{"label": cfg.id2label[int(k)], "score": float(scores[k])} for k in order]
            out.append(rows if top_k is None else rows[:top_k])
        if top_k == 1:
            out = [r[0] for r in out]
            return out  # transformers returns a list of dicts, also for one input
        return out if batched else out[0]


class TokenClassificationPipeline(Pipeline):
    """``ner(text)`` -> entities with character offsets.

    ``aggregation_strategy="none"`` (default, as transformers): one dict per sub-token not tagged O
    with ``entity``, ``score``, ``index``, ``word``, ``start``, ``end``. ``"simple"``/``"first"``:
    words take the label of their first sub-token and form strict-scheme entity spans:
    ``entity_group``, ``score`` (mean), ``word`` (the text span), ``start``, ``end``.
    """

    model_class_name = "BertForTokenClassification"

    def __call__(self, inputs: Any, aggregation_strategy: str | None = None, max_length: int = 512):
        from bertkit.tasks.metrics import detect_scheme, get_entities

        strategy = (aggregation_strategy or self.kwargs.get("aggregation_strategy") or "none").lower()
        if strategy not in ("none", "simple", "first"):
            raise ValueError(f"aggregation_strategy must be none, simple or first, got {strategy!r}")
        texts, batched = _batched(inputs)
        id2label = self.model.config.id2label
        scheme = detect_scheme(id2label.values())
        out = []
        for text in texts:
            enc = self.tokenizer(text, truncation=True, max_length=max_length, return_offsets_mapping=True,
                                 return_tensors="pt")
            probs = _softmax(self._forward(enc).logits[0].float().cpu().numpy())
            offsets = [tuple(int(v) for v in o) for o in enc["offset_mapping"][0].tolist()]
            ids = enc["input_ids"][0].tolist()
            special = set(self.tokenizer.all_special_ids)
            rows = []
            if strategy == "none":
                for i, (tid, (s, e)) in enumerate(zip(ids, offsets)):
                    if tid in special:
                        continue
                    k = int(probs[i].argmax())
                    if id2label[k] == "O":
                        continue
                    rows.append({"entity": id2label[k], "score": float(probs[i][k]), "index": i,
                                 "word": self.tokenizer.convert_ids_to_tokens(tid), "start": s, "end": e})
            else:
                word_ids = enc.word_ids(0)
                words: list[tuple[int, int, str, float]] = []  # start, end, tag, score
                prev = None
                for i, w in enumerate(word_ids):
                    if w is None:
                        continue
                    if w != prev:
                        k = int(probs[i].argmax())
                        words.append((offsets[i][0], offsets[i][1], id2label[k], float(probs[i][k])))
                    else:  # later sub-tokens widen the word's span
                        s0, _, tag, sc = words[-1]
                        words[-1] = (s0, offsets[i][1], tag, sc)
                    prev = w
                for ent in get_entities([w[2] for w in words], scheme):
                    s, e = words[ent.start][0], words[ent.end - 1][1]
                    rows.append({"entity_group": ent.type,
                                 "score": float(np.mean([w[3] for w in words[ent.start:ent.end]])),
                                 "word": text[s:e], "start": s, "end": e})
            out.append(rows)
        return out if batched else out[0]


class QuestionAnsweringPipeline(Pipeline):
    """``qa(question=..., context=...)`` -> ``{'score', 'start', 'end', 'answer'}`` (character
    offsets into the context). Long contexts are split into windows with ``doc_stride``; answers
    longer than ``max_answer_len`` tokens are not considered. ``top_k`` > 1 returns a list.
    ``score`` is the softmax of the span's start+end logit over the n-best candidates."""

    model_class_name = "BertForQuestionAnswering"

    def __call__(self, question: str | Sequence[str] | None = None, context: str | Sequence[str] | None = None,
                 top_k: int = 1, doc_stride: int = 128, max_answer_len: int = 15, max_seq_len: int = 384,
                 handle_impossible_answer: bool = False, **kwargs: Any):
        from bertkit.tasks.data import QAExample
        from bertkit.tasks.qa import decode_qa, prepare_qa_features

        A.positive_int.check("top_k", top_k)
        A.positive_int.check("doc_stride", doc_stride)
        A.positive_int.check("max_answer_len", max_answer_len)
        A.SEQ_LEN.check("max_seq_len", max_seq_len)
        question = kwargs.get("questions", question)
        if question is None or context is None:
            raise ValueError("question-answering needs question=... and context=...")
        qs, batched = _batched(question)
        cs = list(context) if isinstance(context, (list, tuple)) else [context] * len(qs)
        if len(cs) != len(qs):
            raise ValueError(f"{len(qs)} questions but {len(cs)} contexts")
        examples = [QAExample(str(i), q, c) for i, (q, c) in enumerate(zip(qs, cs))]
        doc_stride = min(doc_stride, max_seq_len // 2)
        feats = prepare_qa_features(self.tokenizer, examples, max_seq_len, doc_stride, with_labels=False)
        starts, ends = [], []
        for f in feats.features:
            out = self._forward({k: torch.tensor([v]) for k, v in f.items()})
            starts.append(out.start_logits[0].float().cpu().numpy())
            ends.append(out.end_logits[0].float().cpu().numpy())
        _, nbest = decode_qa(examples, feats, starts, ends, n_best_size=max(20, top_k),
                             max_answer_length=max_answer_len, version_2_with_negative=handle_impossible_answer)
        results = []
        for ex in examples:
            rows = [{"score": a.probability, "start": max(a.start, 0), "end": max(a.end, 0), "answer": a.text}
                    for a in nbest[ex.id][:top_k]]
            results.append(rows[0] if top_k == 1 else rows)
        return results if batched else results[0]


class FeatureExtractionPipeline(Pipeline):
    """``feature-extraction``: token vectors ``[1][tokens][hidden]`` per text, as transformers.
    ``sentence-embedding``: one vector per text, ``pooling`` "mean" (mask-aware, default), "cls"
    or "max", L2-normalised when ``normalize`` (default True for sentence-embedding)."""

    model_class_name = "BertModel"

    def __init__(self, model: Any, tokenizer: Any = None, device: str | None = None, sentence: bool = False,
                 pooling: str = "mean", normalize: bool | None = None, **kwargs: Any) -> None:
        super().__init__(model, tokenizer, device, **kwargs)
        if pooling not in ("mean", "cls", "max"):
            raise ValueError(f"pooling must be mean, cls or max, got {pooling!r}")
        self.sentence = sentence
        self.pooling = pooling
        self.normalize = sentence if normalize is None else normalize

    def __call__(self, inputs: str | Sequence[str], max_length: int = 512, batch_size: int = 32,
                 return_tensors: bool = False):
        texts, batched = _batched(inputs)
        outs: list[Any] = []
        for b in range(0, len(texts), batch_size):
            chunk = texts[b : b + batch_size]
            enc = self.tokenizer(chunk, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            out = self._forward(enc)
            hidden = (out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]).float()
            mask = enc["attention_mask"].to(hidden.device).unsqueeze(-1).to(hidden.dtype)
            if not self.sentence:
                for i in range(len(chunk)):
                    n = int(mask[i].sum())
                    v = hidden[i, :n].cpu()
                    outs.append(v.unsqueeze(0) if return_tensors else [v.tolist()])
                continue
            if self.pooling == "mean":
                vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            elif self.pooling == "cls":
                vec = hidden[:, 0]
            else:
                vec = hidden.masked_fill(mask == 0, float("-inf")).max(1).values
            if self.normalize:
                vec = torch.nn.functional.normalize(vec, dim=-1)
            outs.extend(v.cpu() if return_tensors else v.tolist() for v in vec)
        if self.sentence and return_tensors:
            return torch.stack(outs) if batched else outs[0]
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


def pipeline(task: str, model: Any = None, tokenizer: Any = None, device: str | None = None, **kwargs: Any) -> Pipeline:
    """Build the pipeline for ``task`` from a model folder (or a model object plus ``tokenizer``).

    Tasks: fill-mask, text-classification (alias sentiment-analysis), token-classification (alias
    ner), question-answering, feature-extraction, sentence-embedding (``pooling="mean"|"cls"|"max"``).
    """
    if task not in SUPPORTED_TASKS:
        raise ValueError(f"unknown pipeline task {task!r}; choose one of {', '.join(SUPPORTED_TASKS)}")
    if model is None:
        raise ValueError(f"pipeline({task!r}) needs model=<folder or model>; bertkit never downloads a default")
    cls = SUPPORTED_TASKS[task]
    if task == "sentence-embedding":
        kwargs.setdefault("sentence", True)
    return cls(model, tokenizer=tokenizer, device=device, **kwargs)
