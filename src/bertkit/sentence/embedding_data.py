"""Training data for sentence embeddings: reading rows, batching them, mining hard negatives.

Rows are ``anchor``, ``positive`` and optional ``negative`` (a string, or in JSONL a list of
strings), or for scored pairs ``sentence1``, ``sentence2``, ``score``; in JSONL or CSV/TSV. Every
bad row is an error naming the file and line.

Hard-negative mining ranks a corpus (a text file, or a search index built with the same model, whose
stored vectors are used as they are) for every anchor with the base model and takes the best-scoring
texts that are not the anchor's positive. Scoring is chunked over blocks of anchors and blocks of
the corpus, so memory is one block of scores however large both are. A candidate scoring within
``margin`` of the positive (or above it) is probably another right answer (a false negative) and is
skipped.
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import _args as A
from bertkit._text import require_file

__all__ = ["EmbeddingCollator", "mine_hard_negatives", "read_embedding_rows"]

PAIR_COLUMNS = ("anchor", "positive")
SCORED_COLUMNS = ("sentence1", "sentence2", "score")


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of a JSONL, CSV or TSV file."""
    from bertkit._text import jsonl_objects, read_text, split_records

    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv", ".tsv"):
        raise ValueError(f"{path}: unsupported format {suffix!r}; use .jsonl, .csv or .tsv")
    text = read_text(path)  # strict UTF-8 (a bad byte names its line), a spreadsheet's BOM dropped
    out: list[tuple[int, dict[str, Any]]] = []
    if suffix == ".jsonl":
        out.extend(jsonl_objects(text, path))
    else:
        reader = csv.DictReader(split_records(text, keepends=True), delimiter="\t" if suffix == ".tsv" else ",")
        for n, rec in enumerate(reader, 2):
            out.append((n, {k: v for k, v in rec.items() if k is not None and v not in (None, "")}))
    return out


def _text(path: Path, n: int, rec: dict[str, Any], key: str) -> str:
    value = rec.get(key)
    if not isinstance(value, str) or not value.strip():
        have = ", ".join(sorted(rec)) or "none"
        raise ValueError(f"{path}:{n}: no text in column {key!r} (columns: {have})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:  # a JSON escape such as "\ud800": not text, and no model card can hold it
        raise ValueError(
            f"{path}:{n}: column {key!r} holds a lone surrogate (U+{ord(value[e.start]):04X}) at character "
            f"{e.start}, which is not text; fix the file"
        ) from None
    return value


def read_embedding_rows(
    path: str | Path, scored: bool = False, score_range: tuple[float, float] = (0.0, 1.0)
) -> list[dict[str, Any]]:
    """Rows ``{"anchor", "positive", "negatives": [...]}``, or with ``scored``
    ``{"sentence1", "sentence2", "score"}`` with every score inside ``score_range``."""
    path = require_file(path)
    rows: list[dict[str, Any]] = []
    lo, hi = score_range
    for n, rec in _records(path):
        if scored:
            row: dict[str, Any] = {
                "sentence1": _text(path, n, rec, "sentence1"),
                "sentence2": _text(path, n, rec, "sentence2"),
            }
            raw = rec.get("score")
            try:
                score = float(raw)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{n}: score {raw!r} is not a number") from None
            if not math.isfinite(score):
                raise ValueError(f"{path}:{n}: score {raw!r} is not a finite number")
            if not lo <= score <= hi:
                raise ValueError(
                    f"{path}:{n}: score {score:g} is outside [{lo:g}, {hi:g}] "
                    f"(give the scale of your scores with {A.flag('score_range')}, e.g. 0,5)"
                )
            row["score"] = score
        else:
            row = {"anchor": _text(path, n, rec, "anchor"), "positive": _text(path, n, rec, "positive")}
            neg = rec.get("negative", rec.get("negatives"))
            negs = [neg] if isinstance(neg, str) else list(neg or [])
            if any(not isinstance(t, str) or not t.strip() for t in negs):
                raise ValueError(f"{path}:{n}: 'negative' must be a text or a list of texts")
            row["negatives"] = negs
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    if not scored:
        counts = {len(r["negatives"]) for r in rows}
        if len(counts) > 1:
            raise ValueError(
                f"{path}: rows have different numbers of negatives ({sorted(counts)}); give every row the same number"
            )
    return rows


class EmbeddingCollator:
    """Rows -> ``{"columns": [padded features per column], "labels": scores, targets or None}``."""

    def __init__(self, encoder: Any, scored: bool = False) -> None:
        self.encoder, self.scored = encoder, scored

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if "target" in rows[0]:  # a text and the teacher's vector of it (--loss mse)
            cols = [[r["text"] for r in rows]]
            labels = torch.from_numpy(np.stack([np.asarray(r["target"], np.float32) for r in rows]))
        elif self.scored:
            cols = [[r["sentence1"] for r in rows], [r["sentence2"] for r in rows]]
            labels = torch.tensor([r["score"] for r in rows], dtype=torch.float32)
        else:
            cols = [[r["anchor"] for r in rows], [r["positive"] for r in rows]]
            cols += [[r["negatives"][j] for r in rows] for j in range(len(rows[0]["negatives"]))]
            labels = None
        return {"columns": [self.encoder.tokenize(c) for c in cols], "labels": labels}


def _embed_corpus(encoder: Any, texts: Sequence[str], batch_size: int, progress: bool, desc: str) -> np.ndarray:
    """float16 vectors of ``texts`` (half the memory of float32 for the corpus being mined)."""
    from tqdm.auto import tqdm

    out = np.zeros((len(texts), encoder.dim), np.float16)
    block = 4096
    with tqdm(total=len(texts), desc=desc, unit="text", disable=not progress, file=sys.stderr) as bar:
        for s in range(0, len(texts), block):
            out[s : s + block] = encoder.encode(texts[s : s + block], batch_size=batch_size).numpy().astype(np.float16)
            bar.update(min(block, len(texts) - s))
    return out


MINING_DEPTH = 200  # candidates searched past k: a row is dropped only when all are near its positive


def mine_hard_negatives(
    encoder: Any,
    rows: list[dict[str, Any]],
    corpus: Sequence[str],
    k: int,
    margin: float = 0.05,
    batch_size: int = 64,
    query_block: int = 512,
    corpus_chunk: int = 16384,
    progress: bool = True,
    corpus_vectors: np.ndarray | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Each row with ``k`` mined negatives added (after its own): the best-scoring corpus texts that score
    at least ``margin`` below the row's positive, searched among the ``k + MINING_DEPTH`` nearest; rows
    without ``k`` such candidates are dropped. Returns (rows, dropped). ``corpus_vectors`` (e.g. a search
    index's, made with the same model) saves embedding the corpus."""
    from bertkit.sentence.util import top_k_exact

    if corpus_vectors is None:
        corpus = list(dict.fromkeys(corpus))  # one vector per distinct text
        vectors = _embed_corpus(encoder, corpus, batch_size, progress, "mine: corpus")
    else:
        corpus, vectors = list(corpus), corpus_vectors
    anchors = _embed_corpus(encoder, [r["anchor"] for r in rows], batch_size, progress, "mine: anchors")
    positives = _embed_corpus(encoder, [r["positive"] for r in rows], batch_size, progress, "mine: positives")
    pos_score = (anchors.astype(np.float32) * positives.astype(np.float32)).sum(1)
    # Room for the positive, duplicates and false negatives: where the model ranks a row's positive low,
    # every candidate above it is a probable false negative, and the row's negatives come from below.
    depth = min(len(corpus), k + MINING_DEPTH)
    out, dropped = [], 0
    for s in range(0, len(rows), query_block):
        scores, idx = top_k_exact(vectors, anchors[s : s + query_block].astype(np.float32), depth, chunk=corpus_chunk)
        for j, (cand, cand_scores) in enumerate(zip(idx, scores)):
            row = rows[s + j]
            limit = float(pos_score[s + j]) - margin
            taken = []
            for c, score in zip(cand, cand_scores):
                text = corpus[int(c)]
                if text in (row["positive"], row["anchor"]) or text in row["negatives"]:
                    continue
                if float(score) > limit:
                    continue  # as close as the positive: probably also right, not a negative
                taken.append(text)
                if len(taken) == k:
                    break
            if len(taken) < k:
                dropped += 1
                continue
            out.append({**row, "negatives": [*row["negatives"], *taken]})
    return out, dropped
