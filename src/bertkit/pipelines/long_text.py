"""Texts longer than the model's limit are never cut silently: ``truncation="error" | "cut" | "chunk"``.

* ``error`` (the default): a ValueError that states the text's token count and the limit.
* ``cut``: keep the first tokens; how many were dropped per text is reported
  (``pipeline.last_dropped_tokens`` and a warning).
* ``chunk``: overlapping windows of at most ``max_length`` tokens (a quarter of a window shared
  with the next), each run through the model; the caller pools them weighted by each window's
  number of text tokens (embeddings and classifier logits) or takes the best window (ranking).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["TRUNCATION", "WindowPlan", "check_truncation", "plan_windows", "pool_windows", "report_cut"]

TRUNCATION = ("error", "cut", "chunk")


def check_truncation(mode: str) -> str:
    if mode not in TRUNCATION:
        raise ValueError(f"truncation must be one of {', '.join(TRUNCATION)}, got {mode!r}")
    return mode


@dataclass
class WindowPlan:
    """Model inputs for a list of texts: ``features[j]`` belongs to text ``owner[j]`` with ``weight[j]``
    text tokens; ``dropped[i]`` tokens of text ``i`` were cut."""

    features: list[dict] = field(default_factory=list)
    owner: list[int] = field(default_factory=list)
    weight: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)


def _window_starts(n: int, room: int) -> list[int]:
    overlap = room // 4
    step = max(1, room - overlap)
    starts = list(range(0, max(n - overlap, 1), step))
    if starts[-1] + room < n:  # never leave a tail uncovered
        starts.append(n - room)
    return starts


def plan_windows(tokenizer: Any, texts: Sequence[str], max_length: int, mode: str, what: str = "inputs") -> WindowPlan:
    """One feature per text that fits; for longer ones an error, a cut, or overlapping windows."""
    from bertkit import _args as A

    check_truncation(mode)
    A.SEQ_LEN.check("max_length", max_length)  # fewer tokens hold no text beside [CLS] and [SEP]
    texts = list(texts)
    plain = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]  # long ones are handled here
    specials = [t for t in (tokenizer.cls_token_id, tokenizer.sep_token_id) if t is not None]
    room = max_length - len(specials)
    with_types = "token_type_ids" in tokenizer(["x"])
    plan = WindowPlan()
    for i, ids in enumerate(plain):
        ids = list(ids)
        n = len(ids) + len(specials)
        dropped, pieces = 0, [ids]
        if n > max_length:
            if mode == "error":
                where = f"{what}[{i}]" if len(texts) > 1 else what
                raise ValueError(
                    f"{where} has {n} tokens, over the model's limit of {max_length}; pass "
                    "truncation='cut' to drop the rest or truncation='chunk' to pool overlapping windows"
                )
            if mode == "cut":  # the tokenizer's truncation_side says which end goes, as in transformers
                left = getattr(tokenizer, "truncation_side", "right") == "left"
                pieces, dropped = [ids[len(ids) - room :] if left else ids[:room]], len(ids) - room
            else:
                pieces = [ids[s : s + room] for s in _window_starts(len(ids), room)]
        for piece in pieces:
            full = (
                ([tokenizer.cls_token_id] if tokenizer.cls_token_id is not None else [])
                + piece
                + ([tokenizer.sep_token_id] if tokenizer.sep_token_id is not None else [])
            )
            f = {"input_ids": full, "attention_mask": [1] * len(full)}
            if with_types:
                f["token_type_ids"] = [0] * len(full)
            plan.features.append(f)
            plan.owner.append(i)
            plan.weight.append(max(1, len(piece)))
        plan.dropped.append(dropped)
    return plan


def pool_windows(values: np.ndarray, plan: WindowPlan, n_texts: int, how: str = "mean") -> np.ndarray:
    """Per text: the token-weighted mean (``how="mean"``) or the maximum (``"max"``) of its windows' rows."""
    values = np.asarray(values, np.float64)
    out = np.zeros((n_texts, *values.shape[1:]), np.float64)
    if how == "max":
        out[:] = -np.inf
        for j, i in enumerate(plan.owner):
            out[i] = np.maximum(out[i], values[j])
        return out.astype(np.float32)
    total = np.zeros(n_texts, np.float64)
    for j, i in enumerate(plan.owner):
        out[i] += plan.weight[j] * values[j]
        total[i] += plan.weight[j]
    return (out / total.reshape(-1, *([1] * (values.ndim - 1)))).astype(np.float32)


def report_cut(dropped: Sequence[int], max_length: int) -> None:
    """A warning that says how many texts were cut and how many tokens that dropped."""
    cut = [d for d in dropped if d]
    if cut:
        warnings.warn(
            f"{len(cut)} text(s) over {max_length} tokens were cut: {sum(cut):,} tokens dropped "
            "(truncation='chunk' keeps them)",
            stacklevel=3,
        )
