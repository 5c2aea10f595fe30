"""Changing an index folder without rebuilding it: add rows (only they are embedded), delete ids.

Each change publishes a new folder in one rename (:func:`bertkit._io.atomic_dir`), so a reader sees
the old index or the new one, never a mix; faiss and BM25 files, which would be stale, are left out
(they are rebuilt when next asked for).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit import _args as A
from bertkit._folders import LOCK, MARKER, held
from bertkit._io import atomic_dir, atomic_update_dir, atomic_write_json

from .long_texts import check_lengths, embed_texts

__all__ = ["add_to_index", "append_corpus", "delete_from_index"]


def _say(value: Any = None) -> str:
    """The index folder as the caller named it: ``--output`` under ``bertkit index``, ``path`` from Python."""
    return A.said("--output", value, name="path")


def _publish(path: Path, meta: dict[str, Any], vectors: np.ndarray, ids: list[str], texts: list[str]) -> None:
    # the folder's claim marker travels with the index; a folder that also holds the user's files is
    # updated file by file so theirs stay (stale faiss and BM25 files are removed first: they would not match)
    from .index import BM25_FILE

    ours = ("meta.json", "vectors.npy", "texts.jsonl", MARKER, LOCK, BM25_FILE)
    foreign = [p for p in path.iterdir() if p.name not in ours and not p.name.startswith("faiss-")]
    if foreign:
        for stale in [*path.glob("faiss-*.index"), path / BM25_FILE]:
            stale.unlink(missing_ok=True)
    publish = atomic_update_dir(path) if foreign else atomic_dir(path, replace=True)
    with publish as tmp:
        if not foreign and (path / MARKER).is_file():
            shutil.copy2(path / MARKER, tmp / MARKER)
        with open(tmp / "vectors.npy", "wb") as f:
            np.save(f, vectors.astype(meta.get("vector_dtype", "float16")))
        with open(tmp / "texts.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in zip(ids, texts))
        atomic_write_json(tmp / "meta.json", {**meta, "count": len(ids)})


def add_to_index(
    path: str | Path,
    rows: Sequence[tuple[str, str]],
    model: str | Path | None = None,
    progress: bool = False,
    truncation: str = "error",
    on_cut: Callable[[str], None] | None = None,
    where: Callable[[int], str] | None = None,
    device: str | None = None,
) -> int:
    """Embed ``rows`` (id, text) with the index's model (on ``device``) and add them; an id already in the index is an
    error, and so is a text over the model's limit unless ``truncation`` is "cut" or "chunk" (see
    :func:`bertkit.search.build_index`; ``where(i)`` names row ``i`` in the error). Returns the number added."""
    from bertkit.hub import resolve_model_arg
    from bertkit.pipelines import pipeline
    from bertkit.search.index import _report_cut, load_index, report_blank

    # the rule of `bertkit index`: a row with an id and a blank text is skipped and counted
    blank = [(0, i) for i, t in rows if not t.strip()]
    if blank:
        keep = [k for k, (_, t) in enumerate(rows) if t.strip()]
        rows = [rows[k] for k in keep]
        where = (lambda k, named=where: named(keep[k])) if where is not None else None
        report_blank(blank, path, on_cut)
    with held(Path(path), "index", _say):  # one change at a time: a second one would lose this one's rows
        index = load_index(path)
        built_with = Path(index.meta["model"]).resolve()
        given = resolve_model_arg(model).resolve() if model is not None else None  # a model id: its snapshot
        if given is not None and given != built_with:
            raise ValueError(
                f"{path} was built with {built_with}, not {given}; vectors of two models cannot share an index"
            )
        have = set(index.ids)
        for i, _ in rows:
            if i in have:
                raise ValueError(f"id {i!r} is already in {path}; delete it first to replace its text")
            have.add(i)  # and two new rows may not share one either
        if not rows:
            return 0
        dtype = index.meta.get("dtype", "fp32")
        emb = pipeline(
            "sentence-embedding",
            model=str(built_with),
            dtype=dtype if dtype in ("fp32", "bf16", "int8") else "auto",
            batch_size=64,
            device=device,
        )
        texts = [t for _, t in rows]
        dropped = check_lengths(emb, texts, where or (lambda i: f"row id {rows[i][0]!r}"), truncation)
        new = embed_texts(emb, texts, truncation)
        new = new / np.maximum(np.linalg.norm(new, axis=1, keepdims=True), 1e-12)
        _publish(
            Path(path),
            index.meta,
            np.concatenate([index.vectors, new.astype(np.float32)]),
            index.ids + [i for i, _ in rows],
            index.texts + [t for _, t in rows],
        )
    _report_cut(dropped, emb.max_length, on_cut)
    return len(rows)


def delete_from_index(path: str | Path, ids: Sequence[str]) -> int:
    """Remove the rows with these ids; an id not in the index is an error. Returns the number removed."""
    from bertkit.search.index import load_index

    with held(Path(path), "index", _say):
        index = load_index(path)
        gone = set(ids)
        missing = sorted(gone - set(index.ids))
        if missing:
            raise ValueError(
                f"id {missing[0]!r} is not in {path}" + (f" (nor {len(missing) - 1} more)" if len(missing) > 1 else "")
            )
        keep = [k for k, i in enumerate(index.ids) if i not in gone]
        _publish(
            Path(path), index.meta, index.vectors[keep], [index.ids[k] for k in keep], [index.texts[k] for k in keep]
        )
    return len(index.ids) - len(keep)


def append_corpus(
    path: str | Path,
    corpus: str | Path,
    model: str | Path | None = None,
    text_column: str = "text",
    truncation: str = "error",
    on_cut: Callable[[str], None] | None = None,
    device: str | None = None,
) -> int:
    """``bertkit index --append``: add the rows of ``corpus`` whose id the index lacks (rows it holds
    with the same text are skipped; an id it holds with another text is an error naming the line)."""
    from bertkit.search.index import load_index, read_corpus_lines, report_blank

    index = load_index(path)
    have = dict(zip(index.ids, index.texts))
    blank: list[tuple[int, str]] = []
    lines = read_corpus_lines(corpus, text_column, skipped=blank)
    report_blank(blank, corpus, on_cut)
    changed = [(n, i) for n, i, t in lines if i in have and have[i] != t]
    if changed:
        n, i = changed[0]
        raise ValueError(
            f"{len(changed)} row(s) of {corpus} have an id the index already holds with another text "
            f"(first: {corpus}:{n}, id {i!r}); {A.flag('append')} adds new ids only, so their new text would be lost: "
            f"give them new ids, or build the index again without {A.flag('append')}"
        )
    new = [(n, i, t) for n, i, t in lines if i not in have]
    rows = [(i, t) for _, i, t in new]
    return add_to_index(
        path,
        rows,
        model,
        truncation=truncation,
        on_cut=on_cut,
        where=lambda k: f"{corpus}:{new[k][0]} (id {rows[k][0]!r})",
        device=device,
    )
