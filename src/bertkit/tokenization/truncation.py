"""Inputs, padding and truncation windows as transformers and `tokenizers` compute them (any model)."""

from __future__ import annotations

from typing import Any


class _Seq:
    """One encoded text: ids, and with details also offsets and word indices per token."""

    __slots__ = ("ids", "offsets", "words")

    def __init__(self, ids: list[int], offsets: list | None = None, words: list | None = None) -> None:
        self.ids = ids
        self.offsets = offsets
        self.words = words


def _split_inputs(text: Any, text_pair: Any, split_words: bool) -> tuple[bool, list, list | None]:
    """(batched, texts, pairs or None) from ``__call__``'s text arguments."""
    if text is None:
        raise ValueError("you need to give `text` (a str, a list of str, or a list of pairs)")
    if not _is_batched(text, split_words):
        # like transformers, an empty second text means "no pair"
        return False, [text], [text_pair] if text_pair else None
    texts = list(text)
    if text_pair is None:
        if texts and all(isinstance(t, (tuple, list)) and len(t) == 2 and not split_words for t in texts):
            return True, [t[0] for t in texts], [t[1] for t in texts]
        return True, texts, None
    if not _is_batched(text_pair, split_words):
        raise TypeError(f"text is a batch, so text_pair must be a batch too, got {type(text_pair).__name__}")
    pairs = list(text_pair)
    if len(pairs) != len(texts):
        raise ValueError(f"text has {len(texts)} items but text_pair has {len(pairs)}")
    return True, texts, pairs


def _padding_mode(padding: Any) -> str | None:
    """``"longest"``, ``"max_length"`` or None (no padding) for transformers' ``padding`` values."""
    if padding is True or padding == "longest":
        return "longest"
    if padding is False or padding is None or padding == "do_not_pad":
        return None
    if padding == "max_length":
        return "max_length"
    raise ValueError(f"padding must be True, False, 'longest', 'max_length' or 'do_not_pad', got {padding!r}")


def _pad_target(lengths: list[int], mode: str | None, max_length: int | None, multiple: int | None) -> int | None:
    """The padded length of every row (None: no padding), rounded up to ``multiple``."""
    if mode == "longest":
        target = max(lengths, default=0)
    elif mode == "max_length":
        target = max_length
    else:
        return None
    if target is not None and multiple:
        target = -(-target // multiple) * multiple
    return target


def _from_the_left(wins: list, la: int, lb: int | None, overflow: bool) -> list:
    """The kept window of a right cut, mirrored: the same number of tokens of each text, taken from its
    end (``truncation_side="left"``, which keeps the last tokens, as transformers does)."""
    if overflow and len(wins) > 1:
        raise ValueError(
            "truncation_side='left' keeps one window; with return_overflowing_tokens use truncation_side='right'"
        )
    (a0, a1), b = wins[0]
    return [((la - (a1 - a0), la), None if b is None else (lb - (b[1] - b[0]), lb))]


def _windows(la: int, lb: int | None, room: int, strategy: str, stride: int):
    """Truncation windows as tokenizers computes them: [(range_a, range_b), ...], first = kept."""

    def split(n: int, keep: int) -> list[tuple[int, int]]:
        if keep >= n:
            return [(0, n)]
        if keep == 0:
            return [(0, 0), (0, n)]
        if stride >= keep:
            raise ValueError(f"stride={stride} must be smaller than the room left for the text ({keep} tokens)")
        step = keep - stride
        out = []
        start = 0
        while True:
            stop = min(start + keep, n)
            out.append((start, stop))
            if stop == n:
                return out
            start += step

    if lb is None:
        if strategy == "only_second" and la > room:
            raise ValueError("truncation='only_second' needs a text pair")
        return [(w, None) for w in split(la, room)]
    total = la + lb
    if total <= room:
        return [((0, la), (0, lb))]
    if strategy == "longest_first":
        n1, n2 = la, lb
        swap = n1 > n2
        if swap:
            n1, n2 = n2, n1
        n2 = n1 if n1 > room else max(n1, room - n1)
        if n1 + n2 > room:
            n1 = room // 2
            n2 = n1 + room % 2
        if swap:
            n1, n2 = n2, n1
        wa, wb = split(la, n1), split(lb, n2)
    elif strategy == "only_first":
        to_remove = total - room
        if la <= to_remove:
            raise ValueError(
                f"cannot truncate the first text ({la} tokens) by {to_remove} tokens to fit "
                f"max_length; use truncation='longest_first' or a larger max_length"
            )
        wa, wb = split(la, la - to_remove), [(0, lb)]
    else:
        to_remove = total - room
        if lb <= to_remove:
            raise ValueError(
                f"cannot truncate the second text ({lb} tokens) by {to_remove} tokens to fit "
                f"max_length; use truncation='longest_first' or a larger max_length"
            )
        wa, wb = [(0, la)], split(lb, lb - to_remove)
    # the order in which tokenizers' Encoding.merge_with combines overflowing parts
    out = [(wa[0], wb[0])]
    for a in wa[1:]:
        out.append((a, wb[0]))
        out.extend((a, b) for b in wb[1:])
    out.extend((wa[0], b) for b in wb[1:])
    return out


def _is_batched(x: Any, split_words: bool) -> bool:
    if isinstance(x, str):
        return False
    if isinstance(x, (list, tuple)):
        if split_words:
            return bool(x) and isinstance(x[0], (list, tuple))
        return True
    raise TypeError(f"text must be a str, a list of str or a list of pairs, got {type(x).__name__}")


def clean_up_tokenization(text: str) -> str:
    """transformers' ``clean_up_tokenization``: undo spaces before punctuation and contractions."""
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )
