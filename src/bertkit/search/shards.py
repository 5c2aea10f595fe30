"""A sharded index: ``OUT/shard-00000/``, ``OUT/shard-00001/``... each an index folder of consecutive
rows, and ``OUT/manifest.json``, written last, which lists them.

``bertkit index --shard-size N`` writes one (:func:`bertkit.search.index.build_index`); ``bertkit
search --index OUT`` searches each shard exactly and merges their best hits, so the answers are those
of the one-folder index of the same rows. The manifest holds the model, its weights' fingerprint, the
dimension, the precisions, the input files, the row count, and per shard its first row, its row count,
the fingerprint of its (id, text) rows and the SHA-256 of its files. Each shard's own ``meta.json``
repeats its entry: a killed build keeps a shard only when its entry and its files' checksums match
what the run would write, and redoes the others; a load refuses a shard that does not match the
manifest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit._io import atomic_write_json
from bertkit._text import read_json

__all__ = ["MANIFEST", "ShardedIndex", "finished_shard", "plan_shards", "read_manifest", "sha256_file"]

MANIFEST = "manifest.json"
FORMAT = "bertkit-sharded-index"
SHARD_FILES = ("vectors.npy", "texts.jsonl")  # checksummed; meta.json holds the checksums
# what the manifest repeats of the shards' meta.json: the same for every shard
_SHARED = ("model", "model_fingerprint", "dim", "vector_dtype", "dtype", "pooling", "normalized", "truncation")


def sha256_file(file: Path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def plan_shards(rows: int, shard_size: int, fingerprint: Callable[[int, int], str]) -> list[dict[str, Any]]:
    """The shards of ``rows`` rows, ``shard_size`` each (the last fewer): name, first row, row count and
    ``fingerprint(start, end)`` of their rows."""
    if shard_size < 1:
        raise ValueError(f"the shard size must be at least 1 row, got {shard_size}")
    return [
        {
            "name": f"shard-{k:05d}",
            "first_row": start,
            "rows": min(shard_size, rows - start),
            "content_sha256": fingerprint(start, min(start + shard_size, rows)),
        }
        for k, start in enumerate(range(0, rows, shard_size))
    ]


def finished_shard(folder: Path, entry: dict[str, Any]) -> dict[str, str] | None:
    """The files' checksums when ``folder`` holds the finished shard ``entry`` plans, its files unchanged
    since they were written; None otherwise (no shard, another one, or a damaged one)."""
    try:
        meta = read_json(folder / "meta.json")
        sums = meta.get("sha256") if isinstance(meta, dict) and meta.get("shard") == entry else None
        if not isinstance(sums, dict) or any(sha256_file(folder / n) != sums.get(n) for n in SHARD_FILES):
            return None
    except (OSError, ValueError):
        return None
    return {n: sums[n] for n in SHARD_FILES}


def write_manifest(folder: Path, meta: dict[str, Any], shards: Sequence[dict[str, Any]]) -> None:
    """Write ``folder``'s manifest.json (atomically) for ``shards``, the planned entries with their checksums."""
    manifest = {
        "format": FORMAT,
        "version": 1,
        **{k: meta[k] for k in _SHARED},
        "source": meta["source"],
        "count": sum(int(s["rows"]) for s in shards),
        "shards": list(shards),
    }
    atomic_write_json(folder / MANIFEST, manifest, indent=1)


def read_manifest(path: Path) -> dict[str, Any]:
    """``path``'s manifest, checked for the fields a load reads; a damaged one is a ValueError naming it."""
    file = path / MANIFEST
    manifest = read_json(file)
    shards = manifest.get("shards") if isinstance(manifest, dict) else None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("model"), str)
        or not isinstance(shards, list)
        or not shards
        or not all(isinstance(s, dict) and isinstance(s.get("name"), str) and "/" not in s["name"] for s in shards)
    ):
        raise ValueError(f"{file}: not the manifest of a sharded bertkit index (damaged?); rebuild the index")
    return manifest


def check_shard(path: Path, entry: dict[str, Any], shard: Any, manifest: dict[str, Any]) -> None:
    """Refuse a loaded shard that is not the one ``manifest`` lists (another build's, or edited since)."""
    planned = {k: v for k, v in entry.items() if k != "sha256"}
    sums = entry.get("sha256") if isinstance(entry.get("sha256"), dict) else {}
    why = (
        "its meta.json names another shard"
        if shard.meta.get("shard") != planned
        else f"{len(shard)} rows, the manifest says {entry.get('rows')}"
        if len(shard) != entry.get("rows")
        else "texts.jsonl's checksum differs"
        if shard.texts_sha256 != sums.get("texts.jsonl")
        else f"dimension {shard.dim}, the manifest says {manifest.get('dim')}"
        if shard.dim != manifest.get("dim")
        else "another model's vectors"
        if shard.meta.get("model_fingerprint") != manifest.get("model_fingerprint")
        else None
    )
    if why is not None:
        raise ValueError(f"{path / entry['name']} does not match {path / MANIFEST} ({why}); rebuild the index")


@dataclass
class ShardedIndex:
    """A loaded sharded index (:func:`bertkit.search.index.load_index`): each query searches every shard
    and keeps the best ``k`` hits of all; ``meta`` is the manifest."""

    path: Path
    meta: dict[str, Any]
    shards: list[Any]  # bertkit.search.index.Index, in row order
    backend: str = "exact"

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)

    def changed(self) -> bool:
        """Whether a shard's files changed since the load (a rebuild since)."""
        return any(s.changed() for s in self.shards)

    def search_ids(
        self, queries: np.ndarray, k: int = 10, texts: Sequence[str] | None = None, lexical_weight: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row numbers over all shards), each (Q, k), best first."""
        if lexical_weight:  # BM25's statistics are per collection: one shard's are not the whole corpus's
            raise ValueError(f"{self.path} is a sharded index: hybrid search (--lexical-weight) needs one index folder")
        scores, rows, start = [], [], 0
        for shard in self.shards:
            s, i = shard.search_ids(queries, k)
            scores.append(np.where(i < 0, -np.inf, s).astype(np.float32))
            rows.append(np.where(i < 0, -1, i + start))
            start += len(shard)
        s, i = np.concatenate(scores, 1), np.concatenate(rows, 1)
        keep = np.argsort(-s, axis=1, kind="stable")[:, : min(k, len(self))]
        return np.take_along_axis(s, keep, 1), np.take_along_axis(i, keep, 1)

    def search(
        self, queries: np.ndarray, k: int = 10, texts: Sequence[str] | None = None, lexical_weight: float = 0.0
    ) -> list[list[dict[str, Any]]]:
        """Per query, hits ``{"score", "id", "text"}``, best first (as :meth:`Index.search`)."""
        scores, rows = self.search_ids(queries, k, texts, lexical_weight)
        starts = np.cumsum([0] + [len(s) for s in self.shards])
        out = []
        for srow, irow in zip(scores, rows):
            hits = []
            for s, i in zip(srow, irow):
                if i < 0:
                    continue
                k_ = int(np.searchsorted(starts, i, side="right")) - 1
                shard, j = self.shards[k_], int(i - starts[k_])
                hits.append({"score": float(s), "id": shard.ids[j], "text": shard.texts[j]})
            out.append(hits)
        return out
