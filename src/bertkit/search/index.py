"""Semantic search over sentence vectors: build an index folder from a corpus, then query it.

An index folder holds ``meta.json`` (model, dimension, dtype, count, source), ``vectors.npy``
(L2-normalised rows, float16 or float32) and ``texts.jsonl`` (``{"id", "text"}`` per row), and,
when built, ``faiss-hnsw.index`` / ``faiss-ivf.index`` and (after a hybrid search) ``bm25.npz``.
Building embeds the corpus in chunks saved in ``<output>.partial/`` so a killed run resumes where it
stopped; the finished folder is published in one rename. Exact search is built in (chunked matrix
products); ``backend="faiss"`` (HNSW) or ``"faiss-ivf"`` use faiss-cpu (the faiss extra) for large
collections.
"""

from __future__ import annotations

import csv
import functools
import glob
import hashlib
import json
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit import _args as A
from bertkit._folders import LOCK, MARKER, claim_output_dir, held, refuse_inside_input
from bertkit._io import atomic_dir, atomic_path, atomic_update_dir, atomic_write_json
from bertkit._text import decode_utf8, iter_lines, parse_json, read_json, read_text, split_records
from bertkit.hub import resolve_model_arg
from bertkit.sentence.util import top_k_exact

from .long_texts import check_lengths, cut_summary, embed_texts
from .shards import (
    MANIFEST,
    ShardedIndex,
    check_shard,
    finished_shard,
    plan_shards,
    read_manifest,
    sha256_file,
    write_manifest,
)

__all__ = [
    "BACKENDS",
    "Index",
    "build_faiss",
    "build_index",
    "corpus_fingerprint",
    "check_index_model",
    "embed_queries",
    "load_index",
    "open_index",
    "read_corpus",
    "top_k_exact",
    "weights_fingerprint",
]

BACKENDS = ("exact", "faiss", "faiss-ivf")
_FAISS_FILES = {"faiss": "faiss-hnsw.index", "faiss-ivf": "faiss-ivf.index"}
BM25_FILE = "bm25.npz"  # hybrid search's postings, saved by the first search that needs them


def _text_field(path: Path, n: int, what: str, value: str) -> str:
    """``value`` unchanged, or a ValueError naming the file and line when UTF-8 cannot encode it (a
    lone surrogate from a JSON escape such as ``"\\ud800"``): the model could not embed it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{path}:{n}: {what} holds a lone surrogate (U+{ord(value[e.start]):04X}) at "
            f"character {e.start}, which is not text; fix the file"
        ) from None
    return value


# The readers yield (line, id, text); id None: the row has none, and is named by its line number.
def _read_txt(path: Path) -> Iterator[tuple[int, str | None, str]]:
    for n, line in iter_lines(path):  # records end at \n only, so ids are line numbers
        if line.strip():
            yield n, None, line


def _read_jsonl(path: Path, text_column: str, id_column: str) -> Iterator[tuple[int, str | None, str]]:
    for n, line in iter_lines(path):
        if not line.strip():
            continue
        obj = parse_json(line, f"{path}:{n}")
        if not isinstance(obj, dict) or not isinstance(obj.get(text_column), str):
            # bad data in a file, not a bad argument: ValueError, like the other file errors
            msg = f"{path}:{n}: no string field {text_column!r} (use {A.flag('text_column')})"
            raise ValueError(msg)  # noqa: TRY004
        # BEIR corpora name their ids "_id"; the line number when neither is there
        key = id_column if id_column in obj or id_column != "id" else "_id"
        if key not in obj:
            yield n, None, obj[text_column]
            continue
        ident = obj[key]
        if not isinstance(ident, (str, int)) or isinstance(ident, bool):
            raise ValueError(
                f"{path}:{n}: field {id_column!r} must be a string or an integer, got {type(ident).__name__}"
            )
        # a blank text under an id is a row too: read_corpus_lines skips and counts it
        yield n, _text_field(path, n, f"field {id_column!r}", str(ident)), obj[text_column]


def _read_csv(path: Path, text_column: str, id_column: str) -> Iterator[tuple[int, str | None, str]]:
    text = read_text(path)  # UTF-8 errors name file and line; a byte-order mark is dropped
    old = csv.field_size_limit()
    # a long text is still a text: the csv module's 131,072-character default is no limit of ours
    csv.field_size_limit(max(old, len(text) + 1))
    try:
        reader = csv.DictReader(split_records(text, keepends=True))
        try:
            fields = reader.fieldnames or []
            if text_column not in fields:
                raise ValueError(
                    f"{path}:1: no column {text_column!r} (columns: {', '.join(map(repr, fields))}; "
                    f"use {A.flag('text_column')})"
                )
            for n, rec in enumerate(reader, 2):
                value = rec.get(text_column) or ""
                if value.strip() or rec.get(id_column):  # a blank text under an id: skipped and counted
                    yield n, rec.get(id_column) or None, value
        except csv.Error as e:
            raise ValueError(f"{path}:{reader.line_num}: not valid CSV ({e})") from None
    finally:
        csv.field_size_limit(old)


def read_corpus(path: str | Path, text_column: str = "text", id_column: str = "id") -> list[tuple[str, str]]:
    """(id, text) rows of a .txt (one text a line, id = line number), .jsonl or .csv file; blank texts
    are skipped. Records end at ``\\n`` only; the text must be UTF-8. Errors name the file and line."""
    return [(ident, text) for _, ident, text in read_corpus_lines(path, text_column, id_column)]


def read_corpus_lines(
    path: str | Path,
    text_column: str = "text",
    id_column: str = "id",
    skipped: list | None = None,
    id_prefix: str = "",
) -> list[tuple[int, str, str]]:
    """:func:`read_corpus`'s rows with the line each starts on: (line, id, text). The (line, id) of each
    row whose text is blank, which is skipped, is appended to ``skipped``. A row without an id is named
    ``id_prefix`` + its line number."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder; give a corpus file (.txt, .jsonl or .csv)")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such corpus file")
    suffix = path.suffix.lower()
    if suffix == ".txt":
        records = _read_txt(path)
    elif suffix == ".jsonl":
        records = _read_jsonl(path, text_column, id_column)
    elif suffix == ".csv":
        records = _read_csv(path, text_column, id_column)
    else:
        raise ValueError(f"{path}: unsupported corpus format {suffix!r}; use .txt, .jsonl or .csv")
    rows = [
        (n, f"{id_prefix}{n}" if ident is None else ident, _text_field(path, n, "the text", text))
        for n, ident, text in records
    ]
    if skipped is not None:
        skipped.extend((n, ident) for n, ident, text in rows if not text.strip())
    rows = [row for row in rows if row[2].strip()]
    if not rows:
        raise ValueError(f"{path}: no texts found")
    seen: dict[str, int] = {}
    for n, ident, _ in rows:  # an id names one row: search answers it, --append and delete find it by it
        if ident in seen:
            raise ValueError(f"{path}:{n}: id {ident!r} is already the id of line {seen[ident]}; ids must be unique")
        seen[ident] = n
    return rows


CORPUS_SUFFIXES = (".txt", ".jsonl", ".csv")


def corpus_files(input: str | Path | Sequence[str | Path]) -> list[Path]:
    """The corpus files ``input`` names, in order: a file as given, a folder's .txt/.jsonl/.csv files
    sorted by name, a glob pattern's matches sorted (for a pattern the shell did not expand)."""
    found: list[Path] = []
    for item in [input] if isinstance(input, (str, Path)) else list(input):
        path = Path(item)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix.lower() in CORPUS_SUFFIXES and p.is_file())
            if not files:
                raise FileNotFoundError(f"{path}: a folder with no corpus file (.txt, .jsonl or .csv) in it")
        elif not path.exists() and any(c in str(item) for c in "*?["):
            files = sorted(Path(p) for p in glob.glob(str(item)) if Path(p).is_file())
            if not files:
                raise FileNotFoundError(f"{item}: no file matches this pattern")
        else:
            files = [path]  # read_corpus_lines names a missing file, a wrong format
        found += files
    seen: set[Path] = set()
    for f in found:
        if f.resolve() in seen:  # its rows would be indexed twice, under the same ids
            raise ValueError(f"{f}: this corpus file is given twice")
        seen.add(f.resolve())
    if not found:
        raise ValueError("no corpus file given")
    return found


def read_here(read: Callable[[Path], Any], files: Sequence[Path]) -> list[Any]:
    """``read`` over ``files``, in order, in this process."""
    return [read(f) for f in files]


def read_corpus_files(
    files: Sequence[Path],
    text_column: str = "text",
    skipped: list | None = None,
    map_files: Callable[[Callable[[Path], Any], Sequence[Path]], list[Any]] = read_here,
) -> list[tuple[Path, int, str, str]]:
    """The rows of ``files`` in file order, then line order: (file, line, id, text). With several files a
    row without an id is named ``FILE_NAME:LINE``; an id must be unique over all the files. The
    (file, line, id) of each row with a blank text, which is skipped, is appended to ``skipped``.
    ``map_files(read, files)`` reads each file, its results in file order: in this process by default,
    or spread over a cluster (:mod:`bertkit.search.ray_index`)."""
    rows: list[tuple[Path, int, str, str]] = []
    first: dict[str, tuple[Path, int]] = {}
    several = len(files) > 1
    read = functools.partial(_read_one, text_column=text_column, several=several)
    for f, (lines, blank) in zip(files, map_files(read, files)):
        for n, ident, text in lines:
            if ident in first and first[ident][0] != f:  # in one file read_corpus_lines already refused it
                g, m = first[ident]
                raise ValueError(f"{f}:{n}: id {ident!r} is already the id of {g}:{m}; ids must be unique")
            first.setdefault(ident, (f, n))
            rows.append((f, n, ident, text))
        if skipped is not None:
            skipped.extend((f, n, ident) for n, ident in blank)
    return rows


def _read_one(path: Path, text_column: str, several: bool) -> tuple[list[tuple[int, str, str]], list]:
    """One file's part of :func:`read_corpus_files`, run wherever the file is read (here, or on a cluster's
    node): its rows, (line, id, text), and its skipped blank rows, (line, id)."""
    blank: list[tuple[int, str]] = []
    rows = read_corpus_lines(path, text_column, skipped=blank, id_prefix=f"{path.name}:" if several else "")
    return rows, blank


def corpus_fingerprint(rows: Sequence[tuple[str, str]]) -> str:
    """SHA-256 of the (id, text) rows: equal only for the same texts in the same order."""
    h = hashlib.sha256()
    for ident, text in rows:
        h.update(json.dumps([ident, text], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def _faiss() -> Any:
    from bertkit._extras import require

    return require("faiss", "faiss", "the faiss backend (--backend faiss, faiss-ivf)")


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
    _lexical: Any = None
    texts_sha256: str = ""  # of the very bytes ``texts`` were parsed from
    signature: tuple = ()  # the files' identities at load (:meth:`changed`)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def lexical(self) -> Any:
        """The BM25 index of the texts (:class:`bertkit.search.lexical.BM25`): read from the folder's
        ``bm25.npz`` when it was built from these very texts, else built and saved there for next time."""
        if self._lexical is None:
            from .lexical import BM25

            # hashed and built from the one read of load_index: postings of other texts are never saved
            file, digest = self.path / BM25_FILE, self.texts_sha256 or sha256_file(self.path / "texts.jsonl")
            self._lexical = BM25.load(file, digest)
            if self._lexical is None:
                self._lexical = BM25(self.texts)
                try:
                    if self.changed():  # the folder holds another index now: keep these postings in memory only
                        return self._lexical
                    self._lexical.save(file, digest)
                    _record_in_marker(self.path, file.name)
                except OSError as e:  # a read-only index still answers; it only cannot keep the postings
                    warnings.warn(f"{e}; BM25 is built again on each load of {self.path}", stacklevel=2)
        return self._lexical

    def changed(self) -> bool:
        """Whether the folder's files are no longer the ones this index was read from (an ``--append``, a
        delete or a rebuild since): a long-lived reader loads the index again rather than mix the two."""
        return bool(self.signature) and _signature(self.path) != self.signature

    def search_ids(
        self,
        queries: np.ndarray,
        k: int = 10,
        texts: Sequence[str] | None = None,
        lexical_weight: float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row indices), each (Q, k), best first. With ``lexical_weight`` > 0 (``texts`` are the
        queries as text), hybrid search: see :func:`bertkit.search.lexical.hybrid_top_k`."""
        return self._search(queries, k, texts, lexical_weight)[:2]

    def _search(
        self, queries: np.ndarray, k: int, texts: Sequence[str] | None, lexical_weight: float
    ) -> tuple[np.ndarray, ...]:
        q = np.atleast_2d(np.asarray(queries, np.float32))
        if q.shape[1] != self.dim:
            raise ValueError(f"queries have {q.shape[1]} dimensions but {self.path} holds {self.dim}")
        if lexical_weight:
            from .lexical import hybrid_top_k

            if texts is None:
                raise ValueError("hybrid search (a lexical weight above 0) needs the queries' texts")
            return hybrid_top_k(self.vectors, q, self.lexical, list(texts), k, lexical_weight)
        if self._faiss_index is not None:
            s, i = self._faiss_index.search(np.ascontiguousarray(q), min(k, len(self)))
            return s, i
        return top_k_exact(self.vectors, q, k)

    def search(
        self,
        queries: np.ndarray,
        k: int = 10,
        texts: Sequence[str] | None = None,
        lexical_weight: float = 0.0,
    ) -> list[list[dict[str, Any]]]:
        """Per query, hits ``{"score", "id", "text"}``, best first; hybrid hits (``lexical_weight`` > 0)
        also carry their ``cosine`` and ``bm25`` scores, and ``score`` is the fused one."""
        found = self._search(queries, k, texts, lexical_weight)
        parts = (found[2], found[3]) if len(found) == 4 else None
        out = []
        for r, (srow, irow) in enumerate(zip(found[0], found[1])):
            hits = []
            for c, (s, i) in enumerate(zip(srow, irow)):
                if i < 0:
                    continue
                hit = {"score": float(s), "id": self.ids[i], "text": self.texts[i]}
                if parts is not None:
                    hit["cosine"], hit["bm25"] = float(parts[0][r, c]), float(parts[1][r, c])
                hits.append(hit)
            out.append(hits)
        return out


def open_index(path: str | Path, backend: str = "exact") -> Index | ShardedIndex:
    """:func:`load_index`, or for a sharded index (``--shard-size``: shard folders and a manifest) a
    :class:`~bertkit.search.shards.ShardedIndex` of its shards, each checked against the manifest."""
    path = Path(path)
    if not (path / MANIFEST).is_file() or (path / "meta.json").is_file():
        return load_index(path, backend)
    manifest = read_manifest(path)
    shards = []
    for entry in manifest["shards"]:
        shards.append(load_index(path / entry["name"], backend))
        check_shard(path, entry, shards[-1], manifest)
    return ShardedIndex(path, manifest, shards, backend)


def load_index(path: str | Path, backend: str = "exact") -> Index:
    """Open an index folder made by :func:`build_index`; a faiss backend is built (and saved in the
    folder, atomically) the first time it is asked for."""
    path = Path(path)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    meta_file = path / "meta.json"
    if path.is_file():
        raise NotADirectoryError(f"{path} is a file, not an index folder; give the folder made by `bertkit index`")
    if (path / MANIFEST).is_file() and not meta_file.is_file():
        raise ValueError(f"{path} is a sharded index (manifest.json): `bertkit search` reads it; this needs one folder")
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path}: not an index folder (no meta.json); build one with `bertkit index`")
    for _ in range(10):  # the three files of one version: read again if the folder changed while reading
        before = _signature(path)
        meta = read_json(meta_file)
        if not isinstance(meta, dict) or not isinstance(meta.get("model"), str):
            raise ValueError(f'{meta_file}: damaged index metadata (no "model" path); rebuild the index')
        vectors = _load_vectors(path / "vectors.npy")
        ids, texts, digest = _load_texts(path / "texts.jsonl")
        if _signature(path) == before:
            break
    if len(ids) != vectors.shape[0]:
        raise ValueError(
            f"{path}: {vectors.shape[0]} vectors in vectors.npy but {len(ids)} texts in texts.jsonl; rebuild the index"
        )
    index = Index(path, meta, vectors, ids, texts, backend, texts_sha256=digest, signature=before)
    if backend != "exact":
        faiss = _faiss()
        file = path / _FAISS_FILES[backend]
        if file.is_file():
            index._faiss_index = faiss.read_index(str(file))
        else:
            index._faiss_index = build_faiss(np.asarray(vectors), backend)
            with atomic_path(file) as tmp:
                faiss.write_index(index._faiss_index, str(tmp))
            _record_in_marker(path, file.name)
    return index


def _record_in_marker(folder: Path, name: str) -> None:
    """List a file added to a finished index (the faiss or BM25 cache) as the index's own, so that
    ``index --overwrite`` removes it with the vectors it was built from instead of keeping it stale."""
    marker = folder / MARKER
    try:
        data = parse_json(marker.read_text(encoding="utf-8"), str(marker))
    except (OSError, ValueError):
        return  # an index written before folders were marked: its faiss files match the owned patterns
    if isinstance(data, dict) and isinstance(data.get("files"), list) and name not in data["files"]:
        data["files"] = sorted([*data["files"], name])
        atomic_write_json(marker, data, indent=1)


def _load_vectors(file: Path) -> np.ndarray:
    """The (N, d) vectors of an index, as float32; a damaged file is a ValueError naming it."""
    if not file.is_file():
        raise FileNotFoundError(f"{file}: missing from the index; rebuild the index")
    try:
        # memory-mapped first: a header that claims more rows than the file holds fails here, rather
        # than allocating what it claims
        vectors = np.load(file, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # numpy's header parser lets tokenizer and syntax errors through too
        raise ValueError(f"{file}: damaged vectors ({type(e).__name__}: {e}); rebuild the index") from None
    if vectors.ndim != 2 or vectors.dtype.kind != "f" or vectors.shape[1] == 0:
        raise ValueError(
            f"{file}: damaged vectors (shape {vectors.shape}, dtype {vectors.dtype}; "
            "expected (count, dim) floats); rebuild the index"
        )
    # float16 on disk halves the size; searching float32 in memory avoids a cast per query
    return np.array(vectors, dtype=np.float32)


def _signature(folder: Path) -> tuple:
    """The identity (inode, size, modification time) of an index's three files; None for a missing one."""
    out = []
    for name in ("meta.json", "vectors.npy", "texts.jsonl"):
        try:
            st = (folder / name).stat()
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def _load_texts(file: Path) -> tuple[list[str], list[str], str]:
    """(ids, texts, SHA-256 of the bytes they were parsed from)."""
    if not file.is_file():
        raise FileNotFoundError(f"{file}: missing from the index; rebuild the index")
    data = file.read_bytes()
    text = decode_utf8(data, file)
    ids, texts = [], []
    for n, line in enumerate(split_records(text.removeprefix("\ufeff")), 1):
        if not line.strip():  # a blank line (an edited file's last one) is no row; the count check still holds
            continue
        row = parse_json(line, f"{file}:{n}")
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or "id" not in row:
            raise ValueError(f'{file}:{n}: damaged row (needs "id" and a string "text"); rebuild the index')
        ids.append(str(row["id"]))
        texts.append(row["text"])
    return ids, texts, hashlib.sha256(data).hexdigest()


def _chunks(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start // size, start


_OWNED = ("meta.json", "vectors.npy", "texts.jsonl", "faiss-*.index", BM25_FILE, MANIFEST, "shard-[0-9]*")


def _is_index(folder: Path) -> bool:
    """An index written before folders were marked."""
    return (folder / "meta.json").is_file() and (folder / "vectors.npy").is_file()


def _model_identity(model: Path) -> dict[str, Any]:
    """What identifies the model's weights without reading them: the folder, config.json's hash,
    and each weight file's size and modification time."""
    ident: dict[str, Any] = {"path": str(model.resolve())}
    cfg = model / "config.json"
    if cfg.is_file():
        ident["config_sha256"] = hashlib.sha256(cfg.read_bytes()).hexdigest()
    for f in sorted(model.glob("*.safetensors")) + sorted(model.glob("*.bin")):
        st = f.stat()
        ident[f.name] = [st.st_size, st.st_mtime_ns]
    return ident


def weights_fingerprint(model: str | Path) -> str:
    """SHA-256 of the weights a model folder loads (each file's name and bytes): the same for a copy of the
    folder, different for any other weights, even one changed value (a model load reads them all anyway)."""
    from bertkit.checkpoint import find_weights_file

    model = Path(model)
    h = hashlib.sha256()
    try:
        main = find_weights_file(model)  # the file the model loads (other weight files may sit beside it)
    except FileNotFoundError:
        return h.hexdigest()
    files = [main]
    if main.name.endswith(".index.json"):  # a sharded checkpoint: its shards
        files += sorted(model.glob("*.safetensors" if ".safetensors" in main.name else "*.bin"))
    files += [p for pat in ("*/*.safetensors", "*/*.bin") for p in sorted(model.glob(pat))]  # Dense modules
    for f in files:
        h.update(f"{f.relative_to(model).as_posix()}\0{f.stat().st_size}\0".encode())
        with open(f, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def check_index_model(index: Index, model: str | Path, flag: str = "--model") -> None:
    """Refuse a query model whose weights are not those the index was built with: the vectors of two
    models share no space, and searching one with the other answers at random."""
    built = Path(index.meta["model"])
    model = Path(model)
    if not model.is_dir():  # no folder to compare: loading it fails with its own message
        return
    want = index.meta.get("model_fingerprint")
    if want is None:  # an index built before fingerprints: the folder it names, where it still exists
        if model.resolve() == built.resolve() or not built.is_dir():
            return
        want = weights_fingerprint(built)
    if weights_fingerprint(model) != want:
        same = model.resolve() == built.resolve()
        raise ValueError(
            f"{index.path} was built with {built}"
            + (", whose weights have changed since" if same else f", not {A.given(flag.lstrip('-'), str(model), flag)}")
            + "; vectors of two models cannot be compared: search with that model or build the index again"
        )


def _embedder(model: Path, dtype: str, device: str | None = None) -> Any:
    """The sentence-embedding pipeline over the folder ``model`` (from :func:`resolve_model_arg`),
    refusing what is not a sentence encoder."""
    from bertkit.pipelines import pipeline

    emb = pipeline("sentence-embedding", model=str(model), dtype=dtype, batch_size=64, device=device)
    kind = getattr(emb.model.config, "model_type", "bert")
    if type(emb.model).__name__.startswith("GPT2") or kind == "gpt2":
        raise ValueError(
            f"{A.given('model', str(model))} is a {kind} model (a text generator), not an encoder: it cannot embed "
            "sentences for search; use a sentence-embedding model such as all-MiniLM-L6-v2"
        )
    return emb


def _refuse_a_foreign_work_folder(work: Path) -> None:
    """A folder named like the work folder that an unfinished ``bertkit index`` did not leave is the
    user's: never written into, never removed."""
    if work.exists():
        names = [p.name for p in work.iterdir()] if work.is_dir() else None
        ours = names is not None and (
            (
                "key" in names
                and all(n in ("key", LOCK) or n.endswith((".npy", ".tmp")) or n.startswith("shard-") for n in names)
            )
            # killed between taking the lock and writing the key, or while its temporary file was written
            or (LOCK in names and all(n == LOCK or (n.startswith(".key.") and n.endswith(".tmp")) for n in names))
        )
        if not ours:
            raise FileExistsError(
                f"{work} exists and is not an unfinished `bertkit index`; move it away or choose another --output"
            )


def _partial_key(work: Path, key: dict[str, Any], overwrite: bool) -> None:
    """Start the work folder (which this process holds locked), or check that it holds the chunks of
    these same inputs (resume)."""
    key_file = work / "key"
    if key_file.is_file() and not overwrite:
        try:
            old = parse_json(key_file.read_text(encoding="utf-8"), str(key_file))
        except (OSError, ValueError):
            old = None
        if old == key:
            return
        diffs = (
            [
                f"{k}: was {json.dumps(old.get(k))[:80]}, now {json.dumps(v)[:80]}"
                for k, v in key.items()
                if old.get(k) != v
            ]
            if isinstance(old, dict)
            else ["no readable key file"]
        )
        raise FileExistsError(
            f"{work} holds an unfinished index of other inputs ({'; '.join(diffs)}); "
            f"pass {A.switch('overwrite')} to start afresh, or choose another {A.flag('output')}"
        )
    for p in work.iterdir():  # an earlier start's chunks, shards and key; the lock file stays, held
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.name != LOCK:
            p.unlink()
    atomic_write_json(key_file, key)


def _embed_chunks(
    emb: Any,
    rows: Sequence[tuple[str, str]],
    work: Path,
    chunk_size: int,
    vector_dtype: str,
    truncation: str,
    progress: bool,
) -> None:
    """Embed the chunks ``work`` does not hold yet, each saved atomically as it finishes."""
    from tqdm.auto import tqdm

    texts = [t for _, t in rows]
    with tqdm(total=len(rows), desc="index", unit="text", disable=not progress, dynamic_ncols=True) as bar:
        for c, start in _chunks(len(rows), chunk_size):
            file = work / f"{c:06d}.npy"
            part = texts[start : start + chunk_size]
            if not file.exists():
                vecs = embed_texts(emb, part, truncation).astype(vector_dtype)
                with atomic_path(file) as tmp, open(tmp, "wb") as f:
                    np.save(f, vecs)
            bar.update(len(part))


def _joined_chunks(work: Path, start: int, end: int, chunk_size: int, vector_dtype: str) -> np.ndarray:
    """Rows ``start`` to ``end`` of the work folder's saved chunks, as one matrix of L2-normalised rows."""
    first = start // chunk_size
    chunks = [np.load(work / f"{c:06d}.npy") for c in range(first, (end + chunk_size - 1) // chunk_size)]
    vectors = np.concatenate(chunks)[start - first * chunk_size : end - first * chunk_size]
    norms = np.linalg.norm(vectors.astype(np.float32), axis=1, keepdims=True)
    return (vectors.astype(np.float32) / np.maximum(norms, 1e-12)).astype(vector_dtype)


def build_index(
    model: str | Path,
    input: str | Path | Sequence[str | Path],
    output: str | Path,
    text_column: str = "text",
    dtype: str = "auto",
    vector_dtype: str = "float16",
    chunk_size: int = 2048,
    backend: str = "exact",
    progress: bool = True,
    overwrite: bool = False,
    truncation: str = "error",
    on_cut: Callable[[str], None] | None = None,
    device: str | None = None,
    chunk_embedder: Callable[..., None] | None = None,
    shard_size: int | None = None,
    map_files: Callable[[Callable[[Path], Any], Sequence[Path]], list[Any]] = read_here,
) -> Path:
    """Embed every text of ``input`` with ``model`` (on ``device``, the CPU by default) and write an
    index folder at ``output``.

    ``input`` is a corpus file, a folder of them, a glob pattern, or a list of these
    (:func:`corpus_files`); rows keep file order, then line order. ``output`` follows the folder rule
    (:mod:`bertkit._folders`): a new or empty folder, or an earlier index replaced only with
    ``overwrite``. Chunks of ``chunk_size`` vectors are saved as they finish in ``<output>.partial/``;
    a re-run over the same model and the same texts (by content) skips them (resume after a kill);
    other inputs are refused unless ``overwrite``. A text over the model's limit is refused before any
    embedding unless ``truncation`` is "cut" (reported through ``on_cut``, else a warning) or "chunk"
    (:mod:`bertkit.search.long_texts`). ``chunk_embedder`` replaces the step that embeds and saves the
    missing chunks (same arguments as ``_embed_chunks``), e.g. with one that spreads them over a
    cluster (:mod:`bertkit.search.ray_index`), and ``map_files`` the one that reads the corpus files
    (:func:`read_corpus_files`). ``shard_size`` writes a sharded index instead
    (:mod:`bertkit.search.shards`): ``output/shard-NNNNN/`` index folders of that many rows each, and
    ``output/manifest.json``.
    """
    # A model id resolves to its cache snapshot: the index records (and `bertkit search` later
    # embeds its queries with) that folder, which needs no cache settings to be found again.
    output, model = Path(output), resolve_model_arg(model)
    if vector_dtype not in ("float16", "float32"):
        raise ValueError(f"vector dtype must be float16 or float32, got {vector_dtype!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if shard_size is not None and shard_size < 1:
        raise ValueError(f"--shard-size must be at least 1 row, got {shard_size}")
    if backend != "exact":
        _faiss()  # before the embedding, not after
    refuse_inside_input(output, model)
    files = corpus_files(input)
    source: str | list[str] = [str(f.resolve()) for f in files] if len(files) > 1 else str(files[0].resolve())
    run = {"model": str(model.resolve()), "source": source, "backend": backend}
    check = dict(command="index", overwrite=overwrite, run=run, owned=_OWNED, legacy=_is_index)
    claim = claim_output_dir(output, dry_run=True, **check)
    blank: list[tuple[Path, int, str]] = []
    lines = read_corpus_files(files, text_column, skipped=blank, map_files=map_files)
    rows = [(ident, text) for _, _, ident, text in lines]
    emb = _embedder(model, dtype, device)  # a model that cannot embed fails before any folder is made
    dropped = check_lengths(
        emb, [t for _, t in rows], lambda i: f"{lines[i][0]}:{lines[i][1]} (id {lines[i][2]!r})", truncation
    )
    key = {
        "model": _model_identity(model),
        "rows": len(rows),
        "content_sha256": corpus_fingerprint(rows),
        "text_column": text_column,
        "dtype": dtype,
        "vector_dtype": vector_dtype,
        "chunk_size": chunk_size,
        "truncation": truncation,
    }
    if shard_size is not None:  # absent otherwise: the work folder of an earlier bertkit still resumes
        key["shard_size"] = shard_size
    work = output.with_name(output.name + ".partial")
    _refuse_a_foreign_work_folder(work)
    work.mkdir(parents=True, exist_ok=True)
    # One writer at a time, until its work folder is gone: a second `index` on this output while this
    # one runs is refused, naming it
    with held(work, "index", lambda v=None: A.said("--output", output if v is not None else None, name="output")):
        _partial_key(work, key, overwrite)
        (chunk_embedder or _embed_chunks)(emb, rows, work, chunk_size, vector_dtype, truncation, progress)
        meta = _meta(model, emb, source, text_column, vector_dtype, truncation, dropped)

        def write(tmp: Path) -> None:
            if shard_size is None:
                vectors = _joined_chunks(work, 0, len(rows), chunk_size, vector_dtype)
                meta.update(count=int(vectors.shape[0]), dim=int(vectors.shape[1]))
                _write_index(tmp, vectors, rows, meta, backend)
            else:
                _write_shards(tmp, work, rows, meta, shard_size, chunk_size, backend)

        _publish(output, claim, check, write)
        shutil.rmtree(work, ignore_errors=True)  # our own chunks, now inside the published index
    _report_cut(dropped, emb.max_length, on_cut)
    if blank:
        report_blank([(n, ident) for _, n, ident in blank], blank[0][0], on_cut)
    return output


def _meta(
    model: Path, emb: Any, source: Any, text_column: str, vector_dtype: str, truncation: str, dropped: Sequence[int]
) -> dict[str, Any]:
    """meta.json's fields that the vectors' shape does not give (``count``, ``dim``)."""
    return {
        "model": str(model.resolve()),
        "model_fingerprint": weights_fingerprint(model),
        "source": source,
        "text_column": text_column,
        "vector_dtype": vector_dtype,
        "dtype": emb.dtype,
        "pooling": emb.pooling,
        "normalized": True,
        "truncation": truncation,
        "truncated_texts": sum(1 for d in dropped if d),
        "truncated_tokens": sum(dropped),
    }


def _publish(output: Path, claim: Any, check: dict[str, Any], write: Callable[[Path], None]) -> None:
    """Publish what ``write(folder)`` writes as the index ``output`` (``claim``, checked dry, is its claim)."""
    if claim.foreign:
        # the folder also holds the user's files: replace ours file by file, keep theirs
        claim = claim_output_dir(output, create=False, **check)
        publish = atomic_update_dir(output)
    else:
        publish = atomic_dir(output, replace=True)  # one rename; an old index stays whole until then
    try:
        with publish as tmp:
            claim.write_marker(tmp)
            write(tmp)
    except BaseException:
        claim.release()
        raise
    claim.finish()


def _write_shards(
    folder: Path,
    work: Path,
    rows: Sequence[tuple[str, str]],
    meta: dict[str, Any],
    shard_size: int,
    chunk_size: int,
    backend: str,
) -> None:
    """Write each shard into ``work`` (one rename each; one finished by a killed run and unchanged since
    is kept, any other redone), then move them all into ``folder`` and write its manifest, last."""
    plan = plan_shards(len(rows), shard_size, lambda s, e: corpus_fingerprint(rows[s:e]))
    entries = []
    for entry in plan:
        shard = work / entry["name"]
        sums = finished_shard(shard, entry) if shard.is_dir() else None
        if sums is None:
            if shard.is_dir() and not shard.is_symlink():  # in our work folder: a damaged shard of ours
                shutil.rmtree(shard)
            elif shard.exists() or shard.is_symlink():
                shard.unlink()
            start, end = entry["first_row"], entry["first_row"] + entry["rows"]
            vectors = _joined_chunks(work, start, end, chunk_size, meta["vector_dtype"])
            with atomic_dir(shard) as tmp:
                shard_meta = {**meta, "count": end - start, "dim": int(vectors.shape[1]), "shard": entry}
                _write_index(tmp, vectors, rows[start:end], shard_meta, backend)
            sums = read_json(shard / "meta.json")["sha256"]
        entries.append({**entry, "sha256": sums})
    meta["dim"] = read_json(work / plan[0]["name"] / "meta.json")["dim"]
    for entry in entries:
        (work / entry["name"]).rename(folder / entry["name"])
    write_manifest(folder, meta, entries)


def report_blank(blank: Sequence[tuple[int, str]], source: Any, on_cut: Callable[[str], None] | None) -> None:
    """Say how many rows with an id and a blank text were skipped (a blank text embeds to noise)."""
    if blank:
        n, ident = blank[0]
        where = f"{source}:{n}, id {ident!r}" if n else f"id {ident!r}"
        line = f"{len(blank)} row(s) with an id and a blank text were skipped (first: {where})"
        warnings.warn(line, stacklevel=3) if on_cut is None else on_cut(line)


def _report_cut(dropped: Sequence[int], limit: int, on_cut: Callable[[str], None] | None) -> None:
    line = cut_summary(dropped, limit)
    if line is not None:
        if on_cut is None:
            warnings.warn(line, stacklevel=3)
        else:
            on_cut(line)


def _write_index(
    folder: Path, vectors: np.ndarray, rows: Sequence[tuple[str, str]], meta: dict[str, Any], backend: str
) -> None:
    with open(folder / "vectors.npy", "wb") as f:
        np.save(f, vectors)
    with open(folder / "texts.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in rows)
    if "shard" in meta:  # a resumed build and a load check the shard's files against these
        meta = {**meta, "sha256": {n: sha256_file(folder / n) for n in ("vectors.npy", "texts.jsonl")}}
    atomic_write_json(folder / "meta.json", meta)
    if backend != "exact":
        faiss = _faiss()
        faiss.write_index(build_faiss(vectors, backend), str(folder / _FAISS_FILES[backend]))


def embed_queries(
    model: str | Path,
    queries: Sequence[str],
    dtype: str = "auto",
    truncation: str = "error",
    on_cut: Callable[[str], None] | None = None,
    device: str | None = None,
) -> np.ndarray:
    """Normalised query vectors with the model an index was built with (on ``device``); a query over
    the model's limit is refused unless ``truncation`` is "cut" (reported through ``on_cut``) or "chunk"."""
    emb = _embedder(resolve_model_arg(model), dtype, device)
    queries = list(queries)
    where = (lambda i: f"query {i + 1}") if len(queries) > 1 else (lambda i: "the query")
    dropped = check_lengths(emb, queries, where, truncation)
    v = embed_texts(emb, queries, truncation)
    _report_cut(dropped, emb.max_length, on_cut)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def mining_corpus(path: str | Path) -> tuple[list[str], np.ndarray | None, str | None]:
    """What ``train-embedder --mine-from`` mines from: a corpus file's texts, or an index folder's texts,
    vectors and the model it was built with (texts, vectors or None, model or None)."""
    if (Path(path) / "meta.json").is_file():
        index = load_index(path)
        return index.texts, index.vectors, str(index.meta["model"])
    return [t for _, t in read_corpus(path)], None, None
