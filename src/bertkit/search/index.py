"""Semantic search over sentence vectors: build an index folder from a corpus, then query it.

An index folder holds ``meta.json`` (model, dimension, dtype, count, source), ``vectors.npy``
(L2-normalised rows, float16 or float32) and ``texts.jsonl`` (``{"id", "text"}`` per row), and,
when built, ``faiss-hnsw.index`` / ``faiss-ivf.index``. Building embeds the corpus in chunks saved
in ``<output>.partial/`` so a killed run resumes where it stopped; the finished folder is published
in one rename. Exact search is built in (chunked matrix products); ``backend="faiss"`` (HNSW) or
``"faiss-ivf"`` use faiss-cpu (the faiss extra) for large collections.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit._io import atomic_dir, atomic_path, atomic_write_json, atomic_write_text

__all__ = ["BACKENDS", "Index", "build_faiss", "build_index", "embed_queries", "load_index", "read_corpus",
           "top_k_exact"]

BACKENDS = ("exact", "faiss", "faiss-ivf")
_FAISS_FILES = {"faiss": "faiss-hnsw.index", "faiss-ivf": "faiss-ivf.index"}


def read_corpus(path: str | Path, text_column: str = "text", id_column: str = "id") -> list[tuple[str, str]]:
    """(id, text) rows of a .txt (one text a line, id = line number), .jsonl or .csv file; blank texts
    are skipped. Errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such corpus file")
    suffix = path.suffix.lower()
    rows: list[tuple[str, str]] = []
    with open(path, encoding="utf-8", newline="") as f:
        if suffix == ".txt":
            for n, line in enumerate(f, 1):
                if line.strip():
                    rows.append((str(n), line.rstrip("\r\n")))
        elif suffix == ".jsonl":
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    raise ValueError(f"{path}:{n}: invalid JSON ({e})") from None
                if not isinstance(obj, dict) or not isinstance(obj.get(text_column), str):
                    # bad data in a file, not a bad argument: ValueError, like the other file errors
                    msg = f"{path}:{n}: no string field {text_column!r} (use --text-column)"
                    raise ValueError(msg)  # noqa: TRY004
                if obj[text_column].strip():
                    rows.append((str(obj.get(id_column, n)), obj[text_column]))
        elif suffix == ".csv":
            reader = csv.DictReader(f)
            if text_column not in (reader.fieldnames or []):
                raise ValueError(f"{path}:1: no column {text_column!r} (columns: {', '.join(reader.fieldnames or [])};"
                                 " use --text-column)")
            for n, rec in enumerate(reader, 2):
                text = rec.get(text_column) or ""
                if text.strip():
                    rows.append((str(rec.get(id_column) or n), text))
        else:
            raise ValueError(f"{path}: unsupported corpus format {suffix!r}; use .txt, .jsonl or .csv")
    if not rows:
        raise ValueError(f"{path}: no texts found")
    return rows


def top_k_exact(vectors: np.ndarray, queries: np.ndarray, k: int, chunk: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Inner-product top-``k`` of ``queries`` (Q, d) against ``vectors`` (N, d) in row chunks, so memory
    stays at ``Q * chunk`` scores. Returns (scores, indices), each (Q, k), best first."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    n = vectors.shape[0]
    k = min(k, n)
    best_s = np.full((q.shape[0], 0), -np.inf, np.float32)
    best_i = np.zeros((q.shape[0], 0), np.int64)
    for start in range(0, n, chunk):
        block = np.asarray(vectors[start : start + chunk], dtype=np.float32)
        s = q @ block.T  # (Q, chunk)
        kk = min(k, s.shape[1])
        idx = np.argpartition(-s, kk - 1, axis=1)[:, :kk]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, idx, 1)], 1)
        cand_i = np.concatenate([best_i, idx + start], 1)
        keep = np.argsort(-cand_s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, keep, 1), np.take_along_axis(cand_i, keep, 1)
    return best_s, best_i


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise ImportError("the faiss backend needs the faiss extra: pip install 'bertkit[faiss]'") from None
    return faiss


def build_faiss(vectors: np.ndarray, kind: str = "faiss", seed: int = 0) -> Any:
    """An inner-product faiss index over ``vectors``: HNSW (``faiss``) or IVF-flat (``faiss-ivf``)."""
    faiss = _faiss()
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    d = x.shape[1]
    if kind == "faiss":
        index = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 80
        index.hnsw.efSearch = 64
    elif kind == "faiss-ivf":
        # about sqrt(n) lists, with the ~40 training points per centroid k-means wants
        nlist = max(1, min(4096, int(np.sqrt(len(x))), len(x) // 40))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(seed)
        train = x[rng.choice(len(x), size=min(len(x), 64 * nlist), replace=False)]
        index.train(train)
        # an eighth of the lists: recall@10 about 0.95 on 100k MiniLM sentence vectors, 10x exact search
        index.nprobe = min(nlist, max(8, nlist // 8))
    else:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {kind!r}")
    index.add(x)
    return index


@dataclass
class Index:
    """A loaded index folder. ``search(queries, k)`` -> per query, hits ``{"score", "id", "text"}``."""

    path: Path
    meta: dict[str, Any]
    vectors: np.ndarray
    ids: list[str]
    texts: list[str]
    backend: str = "exact"
    _faiss_index: Any = None

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def search_ids(self, queries: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row indices), each (Q, k), best first."""
        q = np.atleast_2d(np.asarray(queries, np.float32))
        if q.shape[1] != self.dim:
            raise ValueError(f"queries have {q.shape[1]} dimensions but {self.path} holds {self.dim}")
        if self._faiss_index is not None:
            s, i = self._faiss_index.search(np.ascontiguousarray(q), min(k, len(self)))
            return s, i
        return top_k_exact(self.vectors, q, k)

    def search(self, queries: np.ndarray, k: int = 10) -> list[list[dict[str, Any]]]:
        scores, idx = self.search_ids(queries, k)
        return [[{"score": float(s), "id": self.ids[i], "text": self.texts[i]} for s, i in zip(srow, irow) if i >= 0]
                for srow, irow in zip(scores, idx)]


def load_index(path: str | Path, backend: str = "exact") -> Index:
    """Open an index folder made by :func:`build_index`; a faiss backend is built (and saved in the
    folder, atomically) the first time it is asked for."""
    path = Path(path)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path}: not an index folder (no meta.json); build one with `bertkit index`")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    # float16 on disk halves the size; searching float32 in memory avoids a cast per query
    vectors = np.load(path / "vectors.npy").astype(np.float32, copy=False)
    ids, texts = [], []
    with open(path / "texts.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            ids.append(row["id"])
            texts.append(row["text"])
    if len(ids) != vectors.shape[0]:
        raise ValueError(f"{path}: {vectors.shape[0]} vectors but {len(ids)} texts; rebuild the index")
    index = Index(path, meta, vectors, ids, texts, backend)
    if backend != "exact":
        faiss = _faiss()
        file = path / _FAISS_FILES[backend]
        if file.is_file():
            index._faiss_index = faiss.read_index(str(file))
        else:
            index._faiss_index = build_faiss(np.asarray(vectors), backend)
            with atomic_path(file) as tmp:
                faiss.write_index(index._faiss_index, str(tmp))
    return index


def _chunks(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start // size, start


def build_index(model: str | Path, input: str | Path, output: str | Path, text_column: str = "text",
                dtype: str = "auto", vector_dtype: str = "float16", chunk_size: int = 2048,
                backend: str = "exact", progress: bool = True) -> Path:
    """Embed every text of ``input`` with ``model`` and write an index folder at ``output``.

    Chunks of ``chunk_size`` vectors are saved as they finish in ``<output>.partial/``; a re-run with
    the same arguments skips them (resume after a kill). ``output`` must not exist yet.
    """
    from tqdm.auto import tqdm

    from bertkit.pipelines import pipeline

    output = Path(output)
    if output.exists():
        raise FileExistsError(f"{output} already exists; choose a new --output (an index is never overwritten)")
    if vector_dtype not in ("float16", "float32"):
        raise ValueError(f"vector dtype must be float16 or float32, got {vector_dtype!r}")
    rows = read_corpus(input, text_column)
    # the work folder is tied to these inputs: a different corpus or model starts afresh
    key = hashlib.sha256(json.dumps([str(Path(model).resolve()), str(Path(input).resolve()), len(rows), text_column,
                                     dtype, vector_dtype, chunk_size]).encode()).hexdigest()[:16]
    work = output.with_name(output.name + ".partial")
    key_file = work / "key"
    if work.exists():
        if not key_file.is_file() or key_file.read_text(encoding="utf-8") != key:
            raise FileExistsError(f"{work} holds an unfinished index of other inputs; "
                                  "remove it or pick another --output")
    else:
        work.mkdir(parents=True)
        atomic_write_text(key_file, key)
    emb = pipeline("sentence-embedding", model=str(model), dtype=dtype, batch_size=64)
    texts = [t for _, t in rows]
    n_chunks = (len(rows) + chunk_size - 1) // chunk_size
    with tqdm(total=len(rows), desc="index", unit="text", disable=not progress, dynamic_ncols=True) as bar:
        for c, start in _chunks(len(rows), chunk_size):
            file = work / f"{c:06d}.npy"
            part = texts[start : start + chunk_size]
            if not file.exists():
                vecs = emb.forward_features(emb.encode_features(part)).astype(vector_dtype)
                with atomic_path(file) as tmp, open(tmp, "wb") as f:
                    np.save(f, vecs)
            bar.update(len(part))
    vectors = np.concatenate([np.load(work / f"{c:06d}.npy") for c in range(n_chunks)])
    norms = np.linalg.norm(vectors.astype(np.float32), axis=1, keepdims=True)
    vectors = (vectors.astype(np.float32) / np.maximum(norms, 1e-12)).astype(vector_dtype)
    with atomic_dir(output) as tmp:
        with open(tmp / "vectors.npy", "wb") as f:
            np.save(f, vectors)
        with open(tmp / "texts.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in rows)
        atomic_write_json(tmp / "meta.json", {
            "model": str(Path(model).resolve()), "source": str(Path(input).resolve()), "text_column": text_column,
            "count": int(vectors.shape[0]), "dim": int(vectors.shape[1]), "vector_dtype": vector_dtype,
            "dtype": emb.dtype, "pooling": emb.pooling, "normalized": True,
        })
        if backend != "exact":
            faiss = _faiss()
            faiss.write_index(build_faiss(vectors, backend), str(tmp / _FAISS_FILES[backend]))
    shutil.rmtree(work, ignore_errors=True)  # our own chunks, now inside the published index
    return output


def embed_queries(model: str | Path, queries: Sequence[str], dtype: str = "auto") -> np.ndarray:
    """Normalised query vectors with the model an index was built with."""
    from bertkit.pipelines import pipeline

    emb = pipeline("sentence-embedding", model=str(model), dtype=dtype)
    v = emb.forward_features(emb.encode_features(list(queries)))
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
