"""`bertkit index --ray [ADDRESS]`: the embedding of `bertkit index` spread over a Ray cluster.

The corpus (one file or many: :func:`bertkit.search.index.corpus_files`) is read as a Ray dataset of
its files: each file is read on a node of the cluster by bertkit's own readers (so a bad row names its
file and line, as ``index`` does), which needs the files at the same path on every node, as Ray Data's
own readers do. The driver gathers the rows in file order, checks the ids are unique over all the files,
cuts them into the chunks ``index`` keeps in ``<output>.partial/``, and the chunks not done yet become a
second Ray dataset. ``map_batches`` sends them, one at a time, to a pool of actors, each holding one
bertkit encoder (``auto`` precision unless told, its torch threads set to the CPUs it was given).
The vectors come back through Ray's object store and the driver saves each chunk atomically as it
arrives, so the cluster needs no shared file system. The index folder is then finished exactly as
the one-process ``index`` finishes it: the same files, ids and order, and in fp32 the same vectors;
with ``shard_size``, the same sharded index (:mod:`bertkit.search.shards`).

* An actor that dies (its process killed, its node lost) is restarted by Ray, and its chunk is
  embedded again; the driver writes each chunk once, so nothing is lost or written twice.
* A job that is stopped resumes: run the same command again and only the missing chunks are
  embedded (the chunk files of a one-process run count too, and the other way round).
* No address starts a local Ray cluster on this machine; an address that does not answer is one
  line naming it, before the corpus is read or a model loaded.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit._extras import require

__all__ = ["build_index_ray", "connect", "ray_map_files"]


def _ray() -> Any:
    ray = require("ray", "ray", "bertkit index --ray")
    require("ray.data", "ray", "bertkit index --ray")
    return ray


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise ConnectionError(f"Ray cluster at {address} is unreachable: {reason}") from None


def connect(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join the Ray cluster at ``address`` (``HOST:PORT``, ``ray://HOST:PORT`` or ``auto``), or start a
    local one on this machine when ``address`` is None or ``local``. Already connected: nothing to do."""
    ray = _ray()
    if address not in (None, "", "local", "auto"):
        _check_reachable(address)
    if ray.is_initialized():
        return
    if address in (None, "", "local"):
        # a local cluster reports no usage to anyone, and is this process's own
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        return
    ray.init(address=address, log_to_driver=False)


class _ChunkEmbedder:
    """One actor of the pool: one encoder, kept loaded across the chunks it is sent."""

    def __init__(self, model: str, dtype: str, threads: int, truncation: str) -> None:
        import torch

        from .index import _embedder

        torch.set_num_threads(threads)
        self.emb = _embedder(Path(model), dtype)
        self.truncation = truncation

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        from .long_texts import embed_texts

        chunks, data, shapes = [], [], []
        for c, texts in zip(batch["chunk"], batch["texts"]):
            v = np.ascontiguousarray(embed_texts(self.emb, [str(t) for t in texts], self.truncation), np.float32)
            chunks.append(int(c))
            data.append(v.tobytes())
            shapes.append(np.array(v.shape, np.int64))
        return {"chunk": np.array(chunks, np.int64), "shape": np.stack(shapes), "data": np.array(data, dtype=object)}


def _data_context(ray: Any, progress: bool) -> None:
    """Ray Data's progress bars and per-dataset log lines only where bertkit shows its own progress."""
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.INFO if progress else logging.WARNING)


# a file's pickled rows go back in pieces of at most this many bytes: a large file's rows in one value
# would pass the 2 GiB a binary value of an Arrow block may hold
_PIECE_BYTES = 64 * 2**20


def _read_file_batch(
    batch: dict[str, np.ndarray], read: Callable[[Path], Any], piece_bytes: int
) -> Iterator[dict[str, np.ndarray]]:
    """One Ray task's share of the corpus files, each read by ``read`` on this node and pickled whole with
    its outcome, in pieces: the rows, or the reader's own error (a bad row naming its file and line),
    which Ray would otherwise turn into a generic failure of the task."""
    for k, name in zip(batch["k"], batch["file"]):
        path = Path(str(name))
        try:
            if not path.exists():
                raise FileNotFoundError(
                    f"{path}: no such corpus file on the Ray node {socket.gethostname()} (the corpus files must "
                    "be at the same path on every node of the cluster)"
                )
            outcome: tuple[bool, Any] = (True, read(path))
        except Exception as e:
            outcome = (False, e)
        data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        pieces = [data[i : i + piece_bytes] for i in range(0, len(data), piece_bytes)]
        for part, piece in enumerate(pieces):
            yield {
                "k": np.array([k], np.int64),
                "part": np.array([part], np.int64),
                "parts": np.array([len(pieces)], np.int64),
                "data": np.array([piece], dtype=object),
            }


def ray_map_files(read: Callable[[Path], Any], files: Sequence[Path], piece_bytes: int = _PIECE_BYTES) -> list[Any]:
    """``read`` over ``files`` as a Ray dataset of the files, one read task per file on the connected
    cluster; the results in file order, each sent back in pieces of at most ``piece_bytes``. The first
    file's error, in file order, is raised as its reader raised it."""
    ray = _ray()
    _data_context(ray, False)  # a read per file: quick, and the embedding that follows shows progress
    items = [{"k": k, "file": str(Path(f).resolve())} for k, f in enumerate(files)]
    ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        _read_file_batch, fn_kwargs={"read": read, "piece_bytes": piece_bytes}, batch_size=1, batch_format="numpy"
    )
    pieces: dict[int, dict[int, bytes]] = {k: {} for k in range(len(files))}
    expected: dict[int, int] = {}
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for k, part, parts, data in zip(batch["k"], batch["part"], batch["parts"], batch["data"]):
            pieces[int(k)][int(part)] = data  # a retried task's piece replaces its own, never adds one
            expected[int(k)] = int(parts)
    results = []
    for k in range(len(files)):
        got, parts = pieces.pop(k), expected.get(k)
        if len(got) != parts:
            raise RuntimeError(f"{files[k]}: {len(got)} of {parts or '?'} pieces of its rows came back from Ray")
        ok, value = pickle.loads(b"".join(got[p] for p in range(len(got))))
        if not ok:
            raise value
        results.append(value)
    return results


class RayChunks:
    """The chunk step of :func:`bertkit.search.index.build_index`, run on the connected Ray cluster."""

    def __init__(
        self,
        model: Path,
        actors: int = 1,
        threads: int = 1,
        dtype: str = "auto",
        say: Callable[[str], None] | None = None,
    ) -> None:
        if actors < 1 or threads < 1:
            raise ValueError(f"--actors and --threads must be at least 1, got {actors} and {threads}")
        self.model, self.actors, self.threads, self.dtype, self.say = model, actors, threads, dtype, say
        self.written: list[int] = []  # chunk numbers, in the order this run saved them

    def __call__(
        self,
        emb: Any,
        rows: Sequence[tuple[str, str]],
        work: Path,
        chunk_size: int,
        vector_dtype: str,
        truncation: str,
        progress: bool,
    ) -> None:
        from bertkit._io import atomic_path

        ray = _ray()
        n_chunks = (len(rows) + chunk_size - 1) // chunk_size
        todo = [c for c in range(n_chunks) if not (work / f"{c:06d}.npy").exists()]
        if self.say is not None:
            self.say(
                f"{n_chunks - len(todo)} of {n_chunks} chunk(s) already done; embedding {len(todo)} on "
                f"{self.actors} Ray actor(s) of {self.threads} thread(s)"
            )
        if not todo:
            return
        _data_context(ray, progress)
        items = [{"chunk": c, "texts": [t for _, t in rows[c * chunk_size : (c + 1) * chunk_size]]} for c in todo]
        ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            _ChunkEmbedder,
            fn_constructor_kwargs={
                "model": str(self.model),
                "dtype": self.dtype,
                "threads": self.threads,
                "truncation": truncation,
            },
            batch_size=1,
            batch_format="numpy",
            concurrency=min(self.actors, len(todo)),
            num_cpus=self.threads,
        )
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for c, shape, data in zip(batch["chunk"], batch["shape"], batch["data"]):
                file = work / f"{int(c):06d}.npy"
                vecs = np.frombuffer(data, np.float32).reshape(tuple(shape)).astype(vector_dtype)
                with atomic_path(file) as tmp, open(tmp, "wb") as f:
                    np.save(f, vecs)
                self.written.append(int(c))


def build_index_ray(
    model: str | Path,
    input: str | Path | Sequence[str | Path],
    output: str | Path,
    address: str | None = None,
    actors: int = 1,
    threads: int = 1,
    chunk_size: int = 2048,
    say: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> Path:
    """:func:`bertkit.search.index.build_index` with the embedding done by ``actors`` Ray actors of
    ``threads`` CPUs each, on the cluster at ``address`` (a local one when None). The other keyword
    arguments are :func:`~bertkit.search.index.build_index`'s; the result is the same index folder."""
    from bertkit.hub import resolve_model_arg

    from .index import build_index

    connect(address)  # before any work: an unreachable address fails here
    model = resolve_model_arg(model)
    step = RayChunks(model, actors, threads, kwargs.get("dtype", "auto"), say)
    return build_index(
        model, input, output, chunk_size=chunk_size, chunk_embedder=step, map_files=ray_map_files, **kwargs
    )
