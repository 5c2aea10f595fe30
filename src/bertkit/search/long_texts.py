"""`index` and `search` never cut a long text silently: ``--truncation error | cut | chunk``.

``error`` (the default) refuses the first text over the model's limit, naming where it is (file and
line, or the query), its token count and the limit, before anything is embedded. ``cut`` keeps the
first tokens and says how many texts and tokens were cut; ``chunk`` pools overlapping windows
(:mod:`bertkit.pipelines.long_text`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bertkit import _args as A

__all__ = ["check_lengths", "cut_summary", "embed_texts"]


def check_lengths(emb: Any, texts: Sequence[str], where: Callable[[int], str], mode: str) -> list[int]:
    """Tokens each text would lose to a cut (0 unless ``mode`` is "cut"); in "error", a ValueError for
    the first text over ``emb.max_length`` naming ``where(i)``, its token count and the limit."""
    from bertkit.pipelines.long_text import check_truncation

    check_truncation(mode)
    tok, limit = emb.tokenizer, emb.max_length
    specials = sum(t is not None for t in (tok.cls_token_id, tok.sep_token_id))
    dropped = []
    for i, ids in enumerate(tok.encode_batch_ids(list(texts))):
        n = len(ids) + specials
        if n > limit and mode == "error":
            raise ValueError(
                f"{where(i)} has {n} tokens, over the model's limit of {limit}; pass {A.given('truncation', 'cut')} to "
                f"drop the rest or {A.given('truncation', 'chunk')} to pool overlapping windows"
            )
        dropped.append(max(0, n - limit) if mode == "cut" else 0)
    return dropped


def cut_summary(dropped: Sequence[int], limit: int) -> str | None:
    """One line saying how many texts were cut and how many tokens that dropped, or None."""
    cut = [d for d in dropped if d]
    if not cut:
        return None
    return f"{len(cut)} text(s) over {limit} tokens were cut: {sum(cut):,} tokens dropped"


def embed_texts(emb: Any, texts: Sequence[str], mode: str) -> np.ndarray:
    """Sentence vectors under ``mode``; the caller has checked the lengths and reports the cut once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the pipeline's per-call warning; see cut_summary
        return emb.embed(list(texts), truncation=mode)
