"""Indexes in Milvus: ``bertkit index --store milvus://FILE_OR_URI`` and ``bertkit search --store ...``.

One code path serves both engines. ``milvus://PATH`` opens Milvus Lite, the embedded engine, in a
local file (nothing to set up); ``milvus://http://HOST:PORT`` (or ``milvus://HOST:PORT``) reaches a
Milvus server. Query parameters choose the collection and its vector index:
``?collection=NAME&index=FLAT|HNSW|IVF_FLAT`` and the index's own parameters (``M``,
``efConstruction``, ``ef`` for HNSW; ``nlist``, ``nprobe`` for IVF_FLAT).

A collection holds one row per text: ``id`` (the primary key), ``vector`` (float32, L2-normalised,
inner product) and ``text``; its properties record the model's folder, a SHA-256 of the model's
weights (their fingerprint, as an index folder records it), the dimension and the pooling. Search refuses a collection
built by another model, and one of another dimension, by name.

Writes are upserts by id, a batch at a time: a run killed half way leaves whole rows, and running
the same command again embeds only the rows the collection lacks, so nothing is written twice.
``index --append`` upserts the rows whose id is new or whose text changed; :func:`delete_from_store`
deletes by id.

Hybrid search (a lexical weight above 0) ranks the store's ``max(100, 10 k)`` nearest candidates by
the fused score, with BM25 statistics and the standardisation taken over those candidates (the folder
index takes them over the whole corpus, so the two agree where the lexical hits are among the
candidates).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from bertkit import _args as A
from bertkit.hub import resolve_model_arg

from .index import weights_fingerprint
from .long_texts import check_lengths, embed_texts

__all__ = [
    "PREFIX",
    "MilvusIndex",
    "StoreSpec",
    "delete_from_store",
    "index_to_store",
    "is_store",
    "load_store",
    "parse_store",
]

PREFIX = "milvus://"
INDEX_TYPES = ("FLAT", "HNSW", "IVF_FLAT")
_META = "bertkit.meta"  # the collection property holding what bertkit needs to search it
_MAX_TEXT_BYTES = 65535  # Milvus' largest VARCHAR
_MAX_ID_BYTES = 512
_BUILD_PARAMS = {"FLAT": {}, "HNSW": {"M": 16, "efConstruction": 200}, "IVF_FLAT": {"nlist": 128}}
_SEARCH_PARAMS = {"FLAT": {}, "HNSW": {"ef": 128}, "IVF_FLAT": {"nprobe": 32}}


@dataclass(frozen=True)
class StoreSpec:
    """A parsed ``milvus://`` address: what to connect to, the collection and its vector index."""

    given: str
    uri: str  # a local file for Milvus Lite, http(s)://host:port for a server
    lite: bool
    collection: str = "bertkit"
    index_type: str = "FLAT"
    build_params: dict[str, Any] = field(default_factory=dict)
    search_params: dict[str, Any] = field(default_factory=dict)


def is_store(value: str | None) -> bool:
    """Whether ``value`` names a store (``milvus://...``) rather than an index folder."""
    return isinstance(value, str) and value.startswith(PREFIX)


def _number(key: str, value: str, given: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise ValueError(f"{given}: {key}={value!r} must be a positive integer")
    return n


def parse_store(value: str) -> StoreSpec:
    """``milvus://PATH`` (Milvus Lite), ``milvus://http://HOST:PORT`` or ``milvus://HOST:PORT`` (a server),
    each with optional ``?collection=...&index=...`` and index parameters; a bad one names itself."""
    if not is_store(value):
        raise ValueError(f"{value!r} is not a store address; give milvus://FILE or milvus://http://HOST:PORT")
    rest = value[len(PREFIX) :]
    rest, _, query = rest.partition("?")
    if not rest:
        raise ValueError(f"{value}: no file or server after {PREFIX}")
    opts = dict(parse_qsl(query, keep_blank_values=True))
    collection = opts.pop("collection", "bertkit")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,254}", collection):
        raise ValueError(f"{value}: collection {collection!r} must be letters, digits and _, not starting with a digit")
    kind = opts.pop("index", "FLAT").upper()
    if kind not in INDEX_TYPES:
        raise ValueError(f"{value}: index {kind!r} is not one of {', '.join(INDEX_TYPES)}")
    build, search = dict(_BUILD_PARAMS[kind]), dict(_SEARCH_PARAMS[kind])
    for key, v in opts.items():
        if key in build:
            build[key] = _number(key, v, value)
        elif key in search:
            search[key] = _number(key, v, value)
        else:
            known = ", ".join(["collection", "index", *build, *search])
            raise ValueError(f"{value}: unknown parameter {key!r} for index {kind} (known: {known})")
    if rest.startswith(("http://", "https://")):
        uri, lite = rest, False
    elif re.fullmatch(r"[A-Za-z0-9.\-]+:\d+", rest):
        uri, lite = f"http://{rest}", False
    else:
        uri, lite = str(Path(rest).expanduser()), True
    return StoreSpec(value, uri, lite, collection, kind, build, search)


def _check_reachable(spec: StoreSpec, timeout: float = 3.0) -> None:
    """A server that does not answer is one line naming it, before any model is loaded or text read."""
    parts = urlsplit(spec.uri)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 19530)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConnectionError(f"Milvus server {spec.uri} ({spec.given}) is unreachable: {reason}") from None


def _connect(spec: StoreSpec) -> Any:
    from bertkit._extras import require

    pymilvus = require("pymilvus", "milvus", "a Milvus store (milvus://)")
    if spec.lite:
        require("milvus_lite", "milvus", "a Milvus Lite file (milvus://FILE)")
        path = Path(spec.uri)
        if not path.parent.is_dir():
            raise FileNotFoundError(f"{path.parent}: no such folder for the Milvus Lite file of {spec.given}")
    else:
        _check_reachable(spec)
    return pymilvus.MilvusClient(uri=spec.uri)


def _read_meta(client: Any, spec: StoreSpec) -> dict[str, Any] | None:
    """The collection's bertkit metadata, None when it does not exist; a foreign collection is refused."""
    if not client.has_collection(spec.collection):
        return None
    props = client.describe_collection(spec.collection).get("properties") or {}
    try:
        meta = json.loads(props[_META])
    except (KeyError, ValueError):
        meta = None
    if not isinstance(meta, dict) or not {"model", "model_fingerprint", "dim"} <= set(meta):
        raise ValueError(
            f"collection {spec.collection!r} of {spec.given} was not written by `bertkit index`; "
            "choose another ?collection=NAME"
        )
    client.load_collection(spec.collection)  # a reopened collection is released until loaded
    return meta


def _refuse_other_model(spec: StoreSpec, meta: dict[str, Any], model: Path, fingerprint: str, dim: int | None) -> None:
    if dim is not None and int(meta["dim"]) != dim:
        raise ValueError(
            f"collection {spec.collection!r} of {spec.given} holds {meta['dim']}-dimensional vectors but "
            f"{model} makes {dim}-dimensional ones; use the model it was built with ({meta['model']})"
        )
    if meta["model_fingerprint"] != fingerprint:
        raise ValueError(
            f"collection {spec.collection!r} of {spec.given} was built with the model {meta['model']} "
            f"(fingerprint {meta['model_fingerprint'][:12]}), not {model} (fingerprint {fingerprint[:12]}); "
            "vectors of two models cannot be compared"
        )


def _create(client: Any, spec: StoreSpec, meta: dict[str, Any]) -> None:
    from pymilvus import DataType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=_MAX_ID_BYTES)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=int(meta["dim"]))
    schema.add_field("text", DataType.VARCHAR, max_length=_MAX_TEXT_BYTES)
    params = client.prepare_index_params()
    params.add_index("vector", index_type=spec.index_type, metric_type="IP", params=spec.build_params)
    client.create_collection(spec.collection, schema=schema, index_params=params, properties={_META: json.dumps(meta)})


def _stored_rows(client: Any, spec: StoreSpec, ids: Sequence[str], batch: int = 1000) -> dict[str, str]:
    """id -> text of the rows among ``ids`` that the collection holds (fetched by key, a batch at a time)."""
    out: dict[str, str] = {}
    for start in range(0, len(ids), batch):
        found = client.get(spec.collection, ids=list(ids[start : start + batch]), output_fields=["id", "text"])
        out.update((r["id"], r["text"]) for r in found)
    return out


def _count(client: Any, spec: StoreSpec) -> int:
    return int(client.query(spec.collection, filter="", output_fields=["count(*)"])[0]["count(*)"])


def _check_sizes(lines: Sequence[tuple[int, str, str]], input: str | Path) -> None:
    for n, ident, text in lines:
        if len(ident.encode("utf-8")) > _MAX_ID_BYTES:
            raise ValueError(f"{input}:{n}: id {ident[:40]!r}... is over Milvus' limit of {_MAX_ID_BYTES} bytes")
        if len(text.encode("utf-8")) > _MAX_TEXT_BYTES:
            raise ValueError(f"{input}:{n} (id {ident!r}): the text is over Milvus' limit of {_MAX_TEXT_BYTES} bytes")


def index_to_store(
    model: str | Path,
    input: str | Path,
    store: str,
    text_column: str = "text",
    dtype: str = "auto",
    truncation: str = "error",
    append: bool = False,
    overwrite: bool = False,
    batch_size: int = 256,
    on_cut: Callable[[str], None] | None = None,
    device: str | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Embed the texts of ``input`` with ``model`` and upsert them into the Milvus collection ``store``
    (``milvus://...``). Returns (rows written, rows the collection already held and kept).

    A new collection is created; an existing one is refused unless it holds only rows of ``input``
    (an unfinished run of the same command, which this one finishes), ``append`` (rows with a new id or
    a changed text are upserted) or ``overwrite`` (the collection is dropped first). ``on_batch(n)`` is
    called after each upsert with the rows written so far."""
    from .index import _embedder, _report_cut, read_corpus_lines

    spec = parse_store(store)
    client = _connect(spec)  # an unreachable server fails here, before any text is read
    try:
        model = resolve_model_arg(model)
        lines = read_corpus_lines(input, text_column)
        _check_sizes(lines, input)
        emb = _embedder(model, dtype, device)
        fingerprint = weights_fingerprint(model)
        meta = _read_meta(client, spec)
        if meta is not None and overwrite:
            client.drop_collection(spec.collection)
            meta = None
        stored: dict[str, str] = {}
        if meta is not None:
            probe = embed_texts(emb, [lines[0][2]], "cut")  # the dimension this model gives
            _refuse_other_model(spec, meta, model, fingerprint, int(probe.shape[1]))
            stored = _stored_rows(client, spec, [i for _, i, _ in lines])
            changed = [i for _, i, t in lines if i in stored and stored[i] != t]
            foreign = _count(client, spec) - len(stored) + len(changed)
            if foreign and not append:
                first = f" (first: id {changed[0]!r}, whose text differs)" if changed else ""
                raise ValueError(
                    f"collection {spec.collection!r} of {spec.given} holds {foreign} row(s) that are not rows "
                    f"of {input}{first}; pass {A.switch('append')} to add to it or "
                    f"{A.switch('overwrite')} to replace it"
                )
        todo = [(n, i, t) for n, i, t in lines if stored.get(i) != t]
        texts = [t for _, _, t in todo]
        dropped = check_lengths(emb, texts, lambda k: f"{input}:{todo[k][0]} (id {todo[k][1]!r})", truncation)
        for start in range(0, len(todo), batch_size):
            part = todo[start : start + batch_size]
            vecs = embed_texts(emb, [t for _, _, t in part], truncation).astype(np.float32)
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            if meta is None:  # created once the dimension is known, before the first write
                meta = {
                    "format": 1,
                    "model": str(model.resolve()),
                    "model_fingerprint": fingerprint,
                    "dim": int(vecs.shape[1]),
                    "dtype": emb.dtype,
                    "pooling": emb.pooling,
                    "normalized": True,
                    "index_type": spec.index_type,
                    "index_params": spec.build_params,
                }
                _create(client, spec, meta)
            _refuse_other_model(spec, meta, model, fingerprint, int(vecs.shape[1]))
            rows = [{"id": i, "vector": v.tolist(), "text": t} for (_, i, t), v in zip(part, vecs)]
            client.upsert(spec.collection, rows)
            if on_batch is not None:
                on_batch(start + len(part))
        if todo:
            client.flush(spec.collection)
    finally:
        client.close()
    _report_cut(dropped, emb.max_length, on_cut)
    return len(todo), len(lines) - len(todo)


def delete_from_store(store: str, ids: Sequence[str]) -> int:
    """Delete the rows with these ids from the collection; an id it does not hold is an error. Returns
    the number deleted."""
    spec = parse_store(store)
    client = _connect(spec)
    try:
        if _read_meta(client, spec) is None:
            raise FileNotFoundError(f"{spec.given}: no collection {spec.collection!r}; build it with `bertkit index`")
        ids = [str(i) for i in ids]
        have = {r["id"] for r in client.get(spec.collection, ids=ids, output_fields=["id"])}
        missing = [i for i in ids if i not in have]
        if missing:
            raise ValueError(f"id {missing[0]!r} is not in collection {spec.collection!r} of {spec.given}")
        if ids:
            client.delete(spec.collection, ids=ids)
            client.flush(spec.collection)
    finally:
        client.close()
    return len(ids)


class MilvusIndex:
    """A Milvus collection written by :func:`index_to_store`, searched like :class:`bertkit.search.Index`:
    ``search(queries, k, texts, lexical_weight)`` -> per query, hits ``{"score", "id", "text"}``."""

    def __init__(self, spec: StoreSpec, client: Any, meta: dict[str, Any]) -> None:
        self.spec, self.client, self.meta = spec, client, meta
        self.path = spec.given

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    def __len__(self) -> int:
        return int(self.client.get_collection_stats(self.spec.collection)["row_count"])

    def close(self) -> None:
        self.client.close()

    def _nearest(self, q: np.ndarray, k: int) -> list[list[dict[str, Any]]]:
        params = dict(self.spec.search_params)
        if "ef" in params:
            params["ef"] = max(params["ef"], k)  # HNSW cannot return more than ef hits
        found = self.client.search(
            self.spec.collection,
            data=[row.tolist() for row in q],
            limit=k,
            output_fields=["text"],
            search_params={"metric_type": "IP", "params": params},
        )
        return [[{"score": float(h["distance"]), "id": h["id"], "text": h["entity"]["text"]} for h in r] for r in found]

    def search(
        self,
        queries: np.ndarray,
        k: int = 10,
        texts: Sequence[str] | None = None,
        lexical_weight: float = 0.0,
    ) -> list[list[dict[str, Any]]]:
        """Per query, hits ``{"score", "id", "text"}``, best first; hybrid hits (``lexical_weight`` > 0)
        also carry ``cosine`` and ``bm25``, fused over the store's nearest candidates."""
        q = np.atleast_2d(np.asarray(queries, np.float32))
        if q.shape[1] != self.dim:
            raise ValueError(f"queries have {q.shape[1]} dimensions but {self.path} holds {self.dim}")
        if not lexical_weight:
            return self._nearest(q, k)
        if texts is None or len(texts) != len(q):
            raise ValueError("hybrid search (a lexical weight above 0) needs the queries' texts")
        from .lexical import BM25, _standardized

        out = []
        for query, hits in zip(texts, self._nearest(q, max(100, 10 * k))):
            if not hits:
                out.append([])
                continue
            dense = np.array([[h["score"] for h in hits]], np.float32)
            lex = BM25([h["text"] for h in hits]).scores([query])
            fused = ((1.0 - lexical_weight) * _standardized(dense) + lexical_weight * _standardized(lex))[0]
            order = np.argsort(-fused, kind="stable")[:k]
            out.append(
                [
                    {**hits[j], "score": float(fused[j]), "cosine": float(dense[0, j]), "bm25": float(lex[0, j])}
                    for j in order
                ]
            )
        return out


def load_store(store: str, model: str | Path | None = None) -> MilvusIndex:
    """Open the collection ``store`` for search. ``model`` (default: the one it was built with) must be
    the very model that built it, by fingerprint; another is refused."""
    spec = parse_store(store)
    client = _connect(spec)
    try:
        meta = _read_meta(client, spec)
        if meta is None:
            raise FileNotFoundError(f"{spec.given}: no collection {spec.collection!r}; build it with `bertkit index`")
        folder = resolve_model_arg(model) if model is not None else Path(meta["model"])
        if not folder.is_dir():
            raise FileNotFoundError(
                f"{folder}: the model collection {spec.collection!r} was built with is gone; "
                f"give its copy with {A.flag('model')}"
            )
        _refuse_other_model(spec, meta, folder, weights_fingerprint(folder), None)
    except BaseException:
        client.close()
        raise
    return MilvusIndex(spec, client, {**meta, "model": str(folder)})
