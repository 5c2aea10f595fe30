"""Extractive QA: context windows with a doc stride, and n-best span decoding back to characters.

Windowing uses the tokenizer's own overflow support (``return_overflowing_tokens`` + ``stride``
with ``truncation="only_second"``), so a long context becomes overlapping windows that each repeat
the question. Decoding scores every (start, end) pair among the top start and end logits of every
window of an example, keeps spans inside the context and no longer than ``max_answer_length``,
and maps the best one back to character offsets in the original context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from bertkit import _args as A
from bertkit.data.readers import QAExample

__all__ = ["QAFeatures", "prepare_qa_features", "decode_qa", "NBestAnswer"]


@dataclass
class QAFeatures:
    """Windows of a list of examples: model inputs plus what decoding needs."""

    features: list[dict]  # input_ids, token_type_ids, attention_mask[, start/end_positions]
    example_index: list[int]  # window -> example
    offsets: list[list[tuple[int, int] | None]]  # per token; None outside the context


def prepare_qa_features(
    tokenizer: Any,
    examples: Sequence[QAExample],
    max_length: int = 384,
    doc_stride: int = 128,
    with_labels: bool = True,
) -> QAFeatures:
    """Tokenize question+context pairs into overlapping windows.

    With labels, a window gets the token positions of the first answer when it lies entirely
    inside that window, and position 0 ([CLS]) otherwise or for unanswerable questions.
    """
    if doc_stride >= max_length:
        raise ValueError(
            f"{A.flag('doc_stride')} ({doc_stride}) must be smaller than {A.flag('max_length')} ({max_length})"
        )
    questions = [ex.question.lstrip() for ex in examples]
    contexts = [ex.context for ex in examples]
    enc = tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=max_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,
    )
    sample_map = list(enc["overflow_to_sample_mapping"])
    feats: list[dict] = []
    offsets_out: list[list[tuple[int, int] | None]] = []
    for i, ex_i in enumerate(sample_map):
        seq_ids = enc.sequence_ids(i)
        offs = [tuple(o) for o in enc["offset_mapping"][i]]
        feat = {
            "input_ids": list(enc["input_ids"][i]),
            "token_type_ids": list(enc["token_type_ids"][i]),
            "attention_mask": list(enc["attention_mask"][i]),
        }
        ctx = [k for k, s in enumerate(seq_ids) if s == 1]
        if not ctx:
            raise ValueError(
                f"question {examples[ex_i].id!r} leaves no room for its context in max_length={max_length}"
            )
        if with_labels:
            ex = examples[ex_i]
            start_pos = end_pos = 0
            if ex.answers and not ex.is_impossible:
                a = ex.answers[0]
                cs, ce = a["answer_start"], a["answer_start"] + len(a["text"])
                first, last = ctx[0], ctx[-1]
                if offs[first][0] <= cs and offs[last][1] >= ce:
                    s = first
                    while s <= last and offs[s][0] <= cs:
                        s += 1
                    e = last
                    while e >= first and offs[e][1] >= ce:
                        e -= 1
                    start_pos, end_pos = s - 1, e + 1
            feat["start_positions"] = start_pos
            feat["end_positions"] = end_pos
        feats.append(feat)
        offsets_out.append([o if s == 1 else None for o, s in zip(offs, seq_ids)])
    return QAFeatures(feats, sample_map, offsets_out)


@dataclass
class NBestAnswer:
    text: str
    start: int  # character offsets in the context; -1 for no answer
    end: int
    score: float  # start + end logit
    probability: float = 0.0


def decode_qa(
    examples: Sequence[QAExample],
    qa_features: QAFeatures,
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> tuple[dict[str, str], dict[str, list[NBestAnswer]]]:
    """Best answer text per example id (``""`` for no answer in v2 mode) and the n-best lists."""
    per_example: dict[int, list[int]] = {}
    for f, ex_i in enumerate(qa_features.example_index):
        per_example.setdefault(ex_i, []).append(f)
    predictions: dict[str, str] = {}
    nbest_all: dict[str, list[NBestAnswer]] = {}
    for ex_i, ex in enumerate(examples):
        cands: list[NBestAnswer] = []
        null_score = None
        for f in per_example.get(ex_i, []):
            s_log = np.asarray(start_logits[f], dtype=np.float64)
            e_log = np.asarray(end_logits[f], dtype=np.float64)
            offs = qa_features.offsets[f]
            n = min(len(offs), len(s_log))
            s_log, e_log = s_log[:n], e_log[:n]
            null = s_log[0] + e_log[0]
            null_score = null if null_score is None else min(null_score, null)
            top_s = np.argsort(s_log)[::-1][:n_best_size]
            top_e = np.argsort(e_log)[::-1][:n_best_size]
            for s in top_s:
                if offs[s] is None:
                    continue
                for e in top_e:
                    if offs[e] is None or e < s or e - s + 1 > max_answer_length:
                        continue
                    cs, ce = offs[s][0], offs[e][1]
                    cands.append(NBestAnswer(ex.context[cs:ce], cs, ce, float(s_log[s] + e_log[e])))
        cands.sort(key=lambda a: -a.score)
        # the same span can come from two overlapping windows: keep its best score once
        seen: set[tuple[int, int]] = set()
        unique = []
        for c in cands:
            if (c.start, c.end) not in seen:
                seen.add((c.start, c.end))
                unique.append(c)
        nbest = unique[:n_best_size]
        if version_2_with_negative and null_score is not None:
            nbest.append(NBestAnswer("", -1, -1, float(null_score)))
            nbest.sort(key=lambda a: -a.score)
        if not nbest:
            nbest = [NBestAnswer("", -1, -1, 0.0)]
        scores = np.array([a.score for a in nbest])
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        for a, p in zip(nbest, probs):
            a.probability = float(p)
        if version_2_with_negative:
            best_non_null = next((a for a in nbest if a.start >= 0), None)
            if best_non_null is None or (
                null_score is not None and null_score - best_non_null.score > null_score_diff_threshold
            ):
                predictions[ex.id] = ""
            else:
                predictions[ex.id] = best_non_null.text
        else:
            predictions[ex.id] = nbest[0].text
        nbest_all[ex.id] = nbest
    return predictions, nbest_all
