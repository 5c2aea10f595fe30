"""Refuse a pretraining corpus that contains the evaluation data.

Pretraining on the test split's own text inflates every downstream score measured on it, and the
user rarely notices: a corpus built from "all the reviews" may hold the test sentences too. So
`bertkit pretrain --eval-data FILE...` reads the texts of the task files the model will be judged
on and refuses a ``--corpus`` whose lines contain any of them.

Matching is on lower-cased word sequences (``\\w+`` runs, so spacing and punctuation style do not
hide a copy). Each evaluation text is split into its lines; a line of at least
:data:`MIN_WORDS` words counts as found when it appears anywhere inside a corpus line (found with
a hash of its first :data:`MIN_WORDS` words, so the scan is one pass over the corpus); a shorter
one only when a corpus line is exactly that line, since short phrases recur by chance.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bertkit import _args as A

__all__ = ["MIN_WORDS", "EvalTexts", "check_corpus_overlap", "eval_texts", "find_overlap"]

MIN_WORDS = 8
_WORD = re.compile(r"\w+")


def _words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text.lower()))


class EvalTexts:
    """The evaluation lines, keyed for one-pass containment search."""

    def __init__(self) -> None:
        self.by_prefix: dict[tuple[str, ...], list[tuple[tuple[str, ...], str]]] = {}
        self.short: dict[tuple[str, ...], str] = {}

    def add(self, text: str, where: str) -> None:
        for line in text.splitlines():
            w = _words(line)
            if len(w) >= MIN_WORDS:
                self.by_prefix.setdefault(w[:MIN_WORDS], []).append((w, where))
            elif w:
                self.short.setdefault(w, where)

    def find(self, line: str) -> str | None:
        """Where the first evaluation line found in ``line`` comes from, or None."""
        w = _words(line)
        if w in self.short:
            return self.short[w]
        for i in range(len(w) - MIN_WORDS + 1):
            for full, where in self.by_prefix.get(w[i : i + MIN_WORDS], ()):
                if w[i : i + len(full)] == full:
                    return where
        return None


def eval_texts(eval_files: list[str]) -> EvalTexts:
    """The texts of task files, ready for :meth:`EvalTexts.find` (a corpus line holding one of them)."""
    from bertkit.data.readers import read_table

    index = EvalTexts()
    for f in eval_files:
        if not Path(f).is_file():
            raise FileNotFoundError(f"{A.given('eval_data', str(f))}: no such file")
        for ex in read_table(f, require_label=False):
            index.add(ex.text, f"{f} line {ex.line}")
            if ex.text_pair:
                index.add(ex.text_pair, f"{f} line {ex.line}")
    return index


def _corpus_lines(path: Path, jsonl_field: str):
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if path.suffix == ".jsonl":
                try:
                    record = json.loads(line) if line.strip() else None
                except json.JSONDecodeError:
                    continue  # the corpus reader reports malformed lines itself
                if isinstance(record, dict) and isinstance(record.get(jsonl_field), str):
                    yield n, record[jsonl_field]
            else:
                yield n, line


def find_overlap(corpus: list[str], eval_files: list[str], jsonl_field: str = "text") -> str | None:
    """A one-line description of the first corpus line holding evaluation text, or None."""
    index = eval_texts(eval_files)
    for f in corpus:
        path = Path(f)
        if not path.is_file():
            continue  # the corpus reader names a missing file
        for n, text in _corpus_lines(path, jsonl_field):
            where = index.find(text)
            if where is not None:
                snippet = " ".join(text.split())[:60]
                return f"--corpus {f} line {n} contains text of the evaluation data ({where}): {snippet!r}"
    return None


def check_corpus_overlap(corpus: list[str], eval_files: list[str], jsonl_field: str = "text") -> None:
    """Raise ValueError naming the first corpus line that holds evaluation text."""
    found = find_overlap(corpus, eval_files, jsonl_field)
    if found:
        raise ValueError(
            f"{found}; remove it from the corpus: pretraining on the evaluation text inflates the scores measured on it"
        )
