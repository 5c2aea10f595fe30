"""One batched, length-sorted forward path shared by tasks, pipelines and the server, plus the two
post-processing helpers every head needs (softmax, and merging overlapping windows of a long text)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from bertkit.modeling.layers import hooked

__all__ = [
    "MODEL_INPUTS",
    "first_subtokens",
    "inference_workers",
    "length_batches",
    "merge_windows",
    "run_batched",
    "softmax",
    "threads_here",
    "window_features",
    "worker_pool",
    "word_windows",
]

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax of a float array along ``axis``."""
    x = np.asarray(x, dtype=np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _feature_len(f: dict) -> int:
    ids = f["input_ids"]
    return max(len(c) for c in ids) if len(ids) and isinstance(ids[0], (list, tuple)) else len(ids)


def length_batches(
    lengths: Sequence[int], batch_size: int = 64, max_batch_tokens: int | None = None
) -> list[list[int]]:
    """Indices sorted longest first and cut into batches of at most ``batch_size`` rows and (when
    given) at most ``max_batch_tokens`` padded tokens, so each batch pads to nearly its own length."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = lengths[cur[0]] if cur else lengths[i]  # longest first: the first row sets the padding
        if cur and (len(cur) >= batch_size or (max_batch_tokens and (len(cur) + 1) * width > max_batch_tokens)):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def _collate(features: Sequence[dict], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    from bertkit.data.batching import collate_features

    return collate_features([{k: f[k] for k in MODEL_INPUTS if k in f} for f in features], pad_token_id)


def _get(out: Any, name: str) -> torch.Tensor:
    return out[name] if isinstance(out, dict) else getattr(out, name)


# Batches per worker from which whole batches per thread win. Measured on MiniLM at 2 threads (bf16,
# batches of 32 sentences): 2 batches 147 ms against 177 ms, 3 batches 195 against 236, 4 batches 251
# against 312; the batches are longest first, so a worker left alone at the end has the shortest.
_BATCHES_PER_WORKER = 1

_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}  # (process id, threads): a forked child starts its own
_pools_lock = threading.Lock()


_worker_state = threading.local()


def _one_thread() -> None:
    torch.set_num_threads(1)
    _worker_state.one_core = True


def threads_here() -> int:
    """The torch threads a forward started on this thread runs with: 1 in a :func:`worker_pool`
    thread (``torch.get_num_threads()`` there still reports the process's count), else the count."""
    return 1 if getattr(_worker_state, "one_core", False) else torch.get_num_threads()


def worker_pool(n: int) -> ThreadPoolExecutor:
    """``n`` threads that each run torch on one core, started once and kept for the process."""
    with _pools_lock:
        pool = _pools.get((os.getpid(), n))
        if pool is None:
            main_threads = torch.get_num_threads()
            pool = ThreadPoolExecutor(n, thread_name_prefix="bertkit-infer")
            # Each worker sets its own OpenMP team to one thread; that call also moves torch's default
            # for threads started later, so the caller's count is put back once every worker has run it.
            barrier = threading.Barrier(n)
            for f in [pool.submit(lambda: (_one_thread(), barrier.wait())) for _ in range(n)]:
                f.result()
            torch.set_num_threads(main_threads)
            _pools[(os.getpid(), n)] = pool
        return pool


def inference_workers(model: Any, n_batches: int, device: torch.device) -> int:
    """How many threads should forward whole batches at once: ``torch.get_num_threads()`` when the
    batches are many and each is best run on one core, else 1 (one batch at a time, each product
    using every thread).

    Small products scale poorly across cores (the non-matrix work runs between synchronisations), so
    on a CPU whole batches in parallel, one per core, go faster. It stays 1 where running at once is
    not safe or not the same: a training-mode module, a hook (it sees calls in order),
    a compiled model (its compiler is not thread-safe), or a device other than the CPU.
    """
    threads = threads_here()  # 1 in a worker already: its forwards never wait on the pool it runs in
    if threads < 2 or n_batches < _BATCHES_PER_WORKER * threads or device.type != "cpu":
        return 1
    if not isinstance(model, torch.nn.Module) or model.training:
        return 1
    if torch.nn.modules.module._global_forward_hooks or torch.nn.modules.module._global_forward_pre_hooks:
        return 1
    if hooked(*model.modules()):
        return 1
    return threads


# Outputs with a value per token are (B, N, ...), and the QA heads' start and end logits (B, N); a
# (B, C) output (a text's logits or vector) is one value per text, however wide, and is never cut.
_PER_TOKEN_2D = ("start_logits", "end_logits")


def _per_token(name: str, arr: np.ndarray, seq_len: int) -> bool:
    """Whether ``arr`` (a batch's output ``name``) holds a row per token, to be cut to each text's length."""
    if arr.ndim >= 3 or (arr.ndim == 2 and name in _PER_TOKEN_2D):
        return arr.shape[1] == seq_len
    return False


def run_batched(
    model: torch.nn.Module | Callable[..., Any],
    features: Sequence[dict],
    batch_size: int = 64,
    outputs: Sequence[str] = ("logits",),
    progress: bool = False,
    desc: str = "predict",
    max_batch_tokens: int | None = None,
    postprocess: Callable[[Any, dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
    workers: int | None = None,
) -> list[dict[str, np.ndarray]]:
    """Forward ``features`` (dicts of input_ids / token_type_ids / attention_mask lists) in length-sorted
    batches and return, per feature and in input order, each requested output as a float32 numpy array,
    token-level outputs cut back to the feature's own length.

    ``postprocess(out, batch)`` may replace the named outputs with its own per-row tensors (for
    example pooled sentence vectors), computed inside the batch. ``workers``: threads forwarding
    whole batches at once, each on one core; None decides by :func:`inference_workers`.
    """
    from tqdm.auto import tqdm

    module = model if isinstance(model, torch.nn.Module) else getattr(model, "_orig_mod", None)
    params = list(module.parameters()) if module is not None else []
    device = params[0].device if params else torch.device("cpu")
    was_training = bool(module is not None and module.training)
    if module is not None:
        module.eval()
    lengths = [_feature_len(f) for f in features]
    results: list[dict[str, np.ndarray] | None] = [None] * len(features)
    batches = length_batches(lengths, batch_size, max_batch_tokens)

    def forward(b: list[int]) -> tuple[list[int], dict[str, np.ndarray], torch.Tensor]:
        with torch.inference_mode():
            batch = {k: v.to(device) for k, v in _collate([features[i] for i in b]).items()}
            out = model(**batch)
            if postprocess is not None:
                got = {k: v.float().cpu().numpy() for k, v in postprocess(out, batch).items()}
            else:
                got = {name: _get(out, name).float().cpu().numpy() for name in outputs}
        return b, got, batch["input_ids"]

    try:
        n = workers if workers is not None else inference_workers(model, len(batches), device)
        done: Iterator[tuple[list[int], dict[str, np.ndarray], torch.Tensor]]
        # Longest batches first on either path, so the workers' last batches are the shortest.
        done = map(forward, batches) if n <= 1 else worker_pool(n).map(forward, batches)
        for b, got, input_ids in tqdm(
            done, total=len(batches), desc=desc, disable=not progress, leave=False, dynamic_ncols=True
        ):
            per_token = {
                name: input_ids.ndim == 2 and _per_token(name, arr, input_ids.shape[-1]) for name, arr in got.items()
            }
            for row, i in enumerate(b):
                results[i] = {
                    name: arr[row][: lengths[i]] if per_token[name] else arr[row] for name, arr in got.items()
                }
    finally:
        if module is not None:
            module.train(was_training)
    return results  # type: ignore[return-value]


def word_windows(counts: Sequence[int], max_length: int, doc_stride: int = 128) -> list[tuple[int, int]]:
    """Word ranges [start, end) of at most ``max_length - 2`` tokens each (``counts`` = tokens per word),
    overlapping by up to ``min(doc_stride, room // 2)`` tokens of whole words, so a long text is covered
    without cutting a word (a word longer than the overlap is not repeated; a word longer than a window
    is truncated inside its own window)."""
    room = max_length - 2
    overlap = min(doc_stride, room // 2)
    windows, start, n = [], 0, len(counts)
    while True:
        end, used = start, 0
        while end < n and (end == start or used + counts[end] <= room):
            used += counts[end]
            end += 1
        windows.append((start, end))
        if end >= n:
            return windows
        nxt, back = end, 0  # step back over whole words until the overlap is reached
        while nxt - 1 > start and back + counts[nxt - 1] <= overlap:
            nxt -= 1
            back += counts[nxt]
        start = nxt


def window_features(
    ids: Sequence[int],
    word_ids: Sequence[int | None],
    n_words: int,
    cls_id: int,
    sep_id: int,
    max_length: int,
    doc_stride: int = 128,
    token_types: bool = False,
) -> list[tuple[int, int, dict[str, list[int]]]]:
    """One text's tokens (encoded without special tokens) as ``[CLS] window [SEP]`` features along
    :func:`word_windows`: ``(first token, end token, feature)`` per window. Words with no tokens
    start where the next word does; a text with no words gives one empty window."""
    counts = [0] * n_words
    first = [len(ids)] * (n_words + 1)  # token index where each word starts
    for t in reversed(range(len(word_ids))):
        w = word_ids[t]
        if w is not None:
            counts[w] += 1
            first[w] = t
    for w in reversed(range(n_words)):
        first[w] = min(first[w], first[w + 1])
    room = max_length - 2
    out = []
    for a, b in word_windows(counts, max_length, doc_stride) if n_words else [(0, 0)]:
        t0, t1 = first[a], min(first[b], first[a] + room)
        f = {"input_ids": [cls_id, *ids[t0:t1], sep_id], "attention_mask": [1] * (t1 - t0 + 2)}
        if token_types:
            f["token_type_ids"] = [0] * (t1 - t0 + 2)
        out.append((t0, t1, f))
    return out


def merge_windows(n_tokens: int, windows: Sequence[tuple[int, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per token of a text, the row from the window where it is most central.

    ``windows``: (first token index, rows) where ``rows`` covers ``[CLS] tokens... [SEP]`` of that window.
    A token seen by several windows takes the one furthest from a window edge (it saw the most
    context on both sides). Returns (rows (n_tokens, ...), covered bool (n_tokens,)).
    """
    if not windows:
        return np.zeros((n_tokens, 0), np.float32), np.zeros(n_tokens, bool)
    width = windows[0][1].shape[1:]
    merged = np.zeros((n_tokens, *width), np.float32)
    margin = np.full(n_tokens, -1)
    for t0, rows in windows:
        n = rows.shape[0]
        pos = np.arange(1, n - 1)  # the window's own tokens, between [CLS] and [SEP]
        tok, m = t0 + pos - 1, np.minimum(pos, n - 1 - pos)
        keep = tok < n_tokens
        pos, tok, m = pos[keep], tok[keep], m[keep]
        better = m > margin[tok]
        margin[tok[better]] = m[better]
        merged[tok[better]] = rows[pos[better]]
    return merged, margin >= 0


def first_subtokens(word_ids: Sequence[int | None], covered: Sequence[bool] | None = None) -> dict[int, int]:
    """word -> index of its first sub-token (the token that carries a word's label in fine-tuning and
    prediction); tokens not ``covered`` by any window are skipped."""
    first: dict[int, int] = {}
    for t, w in enumerate(word_ids):
        if w is not None and w not in first and (covered is None or covered[t]):
            first[w] = t
    return first
