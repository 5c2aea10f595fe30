"""The HTTP server: FastAPI app over one model folder, dynamic batching, metrics and limits.

Endpoints (JSON, the ``{"inputs": ...}`` shape of the Hugging Face inference API; a string or a list):
``POST /embed``, ``POST /predict`` (the folder's task), ``POST /tokenize``, ``POST /search`` (with an
index), ``GET /health``, ``GET /info``, ``GET /metrics`` (Prometheus text) and the OpenAPI docs at ``/docs``.
Bad requests get a 4xx with ``{"error": "..."}`` naming the field; a full queue gets 503 + Retry-After.
A text over the token limit follows the request's ``truncation`` field or ``--truncate`` (see truncation.py).
"""

import asyncio
import hmac
import ipaddress
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .batcher import Batcher, QueueFull
from .metrics import Metrics
from .requests import _HOW_TO_CUT, ApiError, _field, parse_body
from .truncation import (
    admit_classification,
    admit_fill_mask,
    admit_windowed,
    admit_zero_shot,
    embed_texts,
    run_by_mode,
    tei_truncation_mode,
    truncation_direction,
    truncation_mode,
)

__all__ = ["API_KEY_ENV", "ModelService", "ServeConfig", "create_app", "detect_task", "serve"]

logger = logging.getLogger("bertkit.serve")

API_KEY_ENV = "BERTKIT_API_KEY"

# what a 413 for a long text suggests, on every endpoint

TASKS = (
    "text-classification",
    "token-classification",
    "question-answering",
    "fill-mask",
    "zero-shot-classification",
    "sentence-embedding",
)
# at most this many candidate labels in one zero-shot request: each label is one more pass per text
MAX_CANDIDATE_LABELS = 64
# Runners whose pipelines keep per-call state on themselves: their batches never run beside each other.
SERIAL_KINDS = ("predict", "rerank")
# An embedding batch is cut into one part per core from this many texts per core on.
SPLIT_PER_THREAD = 4


@dataclass
class ServeConfig:
    """Everything ``bertkit serve`` takes (see ``bertkit serve --help``)."""

    model: str
    task: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8080
    dtype: str = "auto"
    device: str | None = None
    max_batch_tokens: int = 8192
    max_batch_size: int = 64
    max_wait_ms: float = 5.0
    max_input_tokens: int = 512
    truncate: bool = False
    workers: int = 1
    index: str | None = None
    lexical_weight: float = 0.0
    api_key: str | None = None
    max_queue: int = 1024
    request_timeout: float = 60.0
    max_body_bytes: int = 1_000_000


def detect_task(folder: str | Path) -> str:
    """The task a model folder serves, from ``config.json``'s architectures through the model registry
    (a sentence-transformers folder, a bare encoder or a head with no served task: sentence-embedding)."""
    from bertkit.modeling import registry
    from bertkit.modeling.static import is_static_folder

    folder = Path(folder)
    if is_static_folder(folder):  # model2vec / StaticEmbedding: vectors only
        return "sentence-embedding"
    try:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{folder / 'config.json'}: cannot read the model config ({e})") from None
    for arch in cfg.get("architectures") or []:
        fam = registry.family_of_architecture(str(arch))
        task = fam.pipeline_task(fam.task_of(str(arch))) if fam is not None else None
        if task in TASKS:
            return task
    return "sentence-embedding"


class ModelService:
    """The loaded model: the task pipeline, an embedding pipeline over the same encoder, the index."""

    def __init__(self, config: ServeConfig) -> None:
        from bertkit.hub import resolve_model_arg
        from bertkit.modeling.sentence import sentence_transformers_pooling
        from bertkit.pipelines import pipeline
        from bertkit.pipelines.pipelines import FeatureExtractionPipeline

        self.config = config
        # config.model stays as given (an id names the served model); the files come from its folder.
        self.folder = folder = resolve_model_arg(config.model)
        self.task = detect_task(folder) if config.task == "auto" else config.task
        if self.task not in TASKS:
            raise ValueError(f"--task must be auto or one of {', '.join(TASKS)}, got {self.task!r}")
        if self.task == "sentence-embedding":
            self.pipe = None
            self.embedder = pipeline(
                "sentence-embedding",
                model=folder,
                dtype=config.dtype,
                device=config.device,
                max_batch_tokens=config.max_batch_tokens,
                batch_size=config.max_batch_size,
            )
        else:
            pooling, normalize, max_len = sentence_transformers_pooling(folder)
            self.pipe = pipeline(
                self.task,
                model=folder,
                dtype=config.dtype,
                device=config.device,
                max_batch_tokens=config.max_batch_tokens,
                batch_size=config.max_batch_size,
            )
            # /embed on a fine-tuned folder: the same encoder weights, no second copy
            self.embedder = FeatureExtractionPipeline(
                self.pipe.model.base_model,
                self.pipe.tokenizer,
                sentence=True,
                pooling=pooling,
                normalize=normalize if normalize is not None else True,
                max_length=max_len,
                max_batch_tokens=config.max_batch_tokens,
                batch_size=config.max_batch_size,
            )
        self.tokenizer = self.embedder.tokenizer
        self.dtype = self.embedder.dtype
        self.index = None
        if config.index:
            self.index = self._load_index()
        self.max_positions = self.embedder.model.config.max_position_embeddings

    def _load_index(self) -> Any:
        """The --index folder (one index, or a sharded one's manifest and shards), refused in one line
        when another model's vectors are in it."""
        from bertkit.search import open_index
        from bertkit.search.index import check_index_model

        config = self.config
        index = open_index(config.index)
        dim = self.embedder.dim
        if index.dim != dim:
            raise ValueError(f"{config.index}: vectors have {index.dim} dimensions but the model gives {dim}")
        check_index_model(index, self.folder)
        if config.lexical_weight:
            if not self.index_is_whole(index):
                raise ValueError(f"{config.index} is a sharded index: {SHARDED_HYBRID}")
            index.lexical  # noqa: B018  (built now, not inside the first request)
        return index

    @staticmethod
    def index_is_whole(index: Any) -> bool:
        """Whether ``index`` is one folder, whose BM25 statistics are its whole collection's."""
        return not hasattr(index, "shards")

    # ----------------------------------------------------------------- runners (the batcher's threads)
    def _vectors(self, features: list[dict], normalize: bool | None = None) -> Any:
        """The embedder's vectors for one server batch. Where this thread has several torch threads (one
        batch at a time), the batch is cut into one length-sorted part per thread and the parts run at
        once, one per core (:func:`bertkit.inference.run_batched`), which beats one part on every core
        (MiniLM bf16, 2 cores, 32 random sentences: 90 against 102 ms); in a batch running beside
        others, on one core of its own, it runs whole."""
        from bertkit.inference import threads_here

        threads = threads_here()
        size = -(-len(features) // threads) if threads > 1 and len(features) >= SPLIT_PER_THREAD * threads else None
        if size is not None and self.embedder.batch_size:
            size = min(size, self.embedder.batch_size)
        return self.embedder.forward_features(features, size, normalize=normalize)

    def run_embed(self, features: list[dict]) -> list[np.ndarray]:
        """One float32 row per text: rows, not Python floats, so that nothing converts them twice."""
        return list(np.asarray(self._vectors(features), np.float32))

    def run_embed_raw(self, features: list[dict]) -> list[np.ndarray]:
        """Unnormalised vectors: the windows of a long text are pooled before normalising."""
        return list(np.asarray(self._vectors(features, normalize=False), np.float32))

    def run_search(self, items: list[tuple[dict, int, str, float]]) -> list[list[dict]]:
        """Each item is (features, top_k, query text, lexical weight); one weight per search call."""
        vecs = self._vectors([f for f, *_ in items])
        out: list[list[dict] | None] = [None] * len(items)
        if self.index.changed():  # an --append or a rebuild since: answer from the new index, never a mix
            self.index = self._load_index()
        index = self.index
        for weight in dict.fromkeys(w for *_, w in items):
            rows = [i for i, item in enumerate(items) if item[3] == weight]
            k = max(items[i][1] for i in rows)
            hits = index.search(vecs[rows], k, [items[i][2] for i in rows], weight)
            for i, row in zip(rows, hits):
                out[i] = row[: items[i][1]]
        return out  # type: ignore[return-value]

    def run_predict(self, items: list[Any]) -> list[Any]:
        t, pipe = self.task, self.pipe
        if t == "text-classification":
            # each item is (input, truncation mode): admission refused what its mode does not allow
            limit = self.classify_limit()
            return run_by_mode(items, lambda xs, mode: pipe(xs, top_k=None, max_length=limit, truncation=mode))
        if t == "token-classification":
            found = pipe(items, aggregation_strategy="first", max_length=self.window_limit())
            found = [found] if len(items) == 1 and found and isinstance(found[0], dict) else found
            # the entity as written in the request (as `bertkit predict` gives it), not the tokens put
            # back together, which an uncased vocabulary lower-cases and which space Chinese characters
            for text, entities in zip(items, found):
                for e in entities:
                    e["word"] = text[e["start"] : e["end"]]
            return found
        if t == "question-answering":
            qs, cs = [x["question"] for x in items], [x["context"] for x in items]
            return pipe(question=qs, context=cs, max_seq_len=self.window_limit())
        if t == "fill-mask":  # admission refused a long text unless its request cuts it
            return pipe(items, max_length=self.classify_limit())
        if t == "zero-shot-classification":
            # each item is (text, ZeroShotAsk); requests asking the same run as one pipeline call
            out: list[Any] = [None] * len(items)
            for ask in dict.fromkeys(a for _, a in items):
                idx = [i for i, (_, a) in enumerate(items) if a == ask]
                found = pipe(
                    [items[i][0] for i in idx],
                    list(ask.labels),
                    hypothesis_template=ask.template,
                    multi_label=ask.multi_label,
                    max_length=self.classify_limit(),
                    truncation=ask.mode,
                )
                for i, r in zip(idx, found):
                    out[i] = r
            return out
        raise ApiError(404, f"this model ({self.task}) has no task head; use /embed")

    def batch_concurrency(self) -> int:
        """How many server batches run at once: one per torch thread on a CPU, each whole on one core,
        where running batches at once is safe (:func:`bertkit.inference.inference_workers`: no hook, not
        training, the CPU); else 1."""
        import sys

        from bertkit.inference import inference_workers

        model = self.embedder.model
        return inference_workers(model, sys.maxsize, self.embedder.device)

    # ----------------------------------------------------------------- admission (event loop)
    def token_limit(self) -> int:
        """The most tokens one embedded text may have: --max-input-tokens or the model's own limit."""
        return min(self.config.max_input_tokens, self.embedder.max_length, self.max_positions)

    def classify_limit(self) -> int:
        """The most tokens one classified text (or pair) may have."""
        return min(self.config.max_input_tokens, self.max_positions)

    def window_limit(self) -> int:
        """Tokens per window of a token-classification or QA input (384 for QA, as transformers')."""
        return min(self.classify_limit(), 384) if self.task == "question-answering" else self.classify_limit()

    def embed_features(
        self, texts: list[str], field: str, cut: bool = False, side: str = "right"
    ) -> tuple[list[dict], int, list[int]]:
        """Features, their token count and the tokens each text lost: over the limit is a 413 unless ``cut``,
        which keeps the first tokens (``side="left"``: the last), between the text's [CLS] and [SEP]."""
        enc = self.tokenizer(texts)
        limit, keep = self.config.max_input_tokens, self.token_limit()
        feats, tokens, dropped = [], 0, []
        for i in range(len(texts)):
            f = {k: list(enc[k][i]) for k in ("input_ids", "token_type_ids", "attention_mask") if k in enc}
            n = len(f["input_ids"])
            if n > keep and not cut:  # never cut silently, not even at the model's own limit
                over = f"--max-input-tokens {limit}" if n > limit else f"the model's limit of {keep}"
                raise ApiError(413, f"{field}[{i}] has {n} tokens, over {over} ({_HOW_TO_CUT})")
            if n > keep and side == "left":
                f = {k: v[:1] + v[n - keep + 1 :] for k, v in f.items()}
            elif n > keep:
                sep = f["input_ids"][-1]
                f = {k: v[:keep] for k, v in f.items()}
                f["input_ids"][-1] = sep
            dropped.append(max(0, n - keep))
            feats.append(f)
            tokens += len(f["input_ids"])
        return feats, tokens, dropped

    def refuse_embedding_a_reranker(self) -> None:
        """A cross-encoder's encoder was never trained to give sentence vectors: /embed would answer noise."""
        if self._is_cross_encoder():
            raise ApiError(
                404,
                f"{self.folder} is a cross-encoder (a reranker): it scores pairs on /rerank and gives no embeddings",
            )

    def _is_cross_encoder(self) -> bool:
        from bertkit.pipelines.text_ranking import check_cross_encoder

        try:
            return self.pipe is not None and check_cross_encoder(self.pipe.model) is None
        except ValueError:
            return False

    def info(self) -> dict[str, Any]:
        from bertkit.inference import cpu_flags

        cfg = self.config
        return {
            "model": str(self.folder.resolve()),
            "task": self.task,
            "dtype": self.dtype,
            "device": str(self.embedder.device),
            "endpoints": ([] if self._is_cross_encoder() else ["/embed", "/v1/embeddings"])
            + ["/tokenize"]
            + (["/predict"] if self.pipe is not None else [])
            + (["/rerank"] if self._is_cross_encoder() else [])
            + (["/search"] if self.index is not None else []),
            "hidden_size": self.embedder.model.config.hidden_size,
            "embedding_size": self.embedder.dim,
            "pooling": self.embedder.pooling,
            "normalize": self.embedder.normalize,
            "limits": {
                "max_batch_tokens": cfg.max_batch_tokens,
                "max_batch_size": cfg.max_batch_size,
                "max_wait_ms": cfg.max_wait_ms,
                # the limit a text meets: --max-input-tokens, or the model's own where that is lower
                "max_input_tokens": self.token_limit() if self.pipe is None else self.classify_limit(),
                "max_input_tokens_flag": cfg.max_input_tokens,
                "truncate": cfg.truncate,
                "max_queue": cfg.max_queue,
                "request_timeout_s": cfg.request_timeout,
                "max_body_bytes": cfg.max_body_bytes,
            },
            "index": None
            if self.index is None
            else {
                "path": cfg.index,
                "size": len(self.index),
                "backend": self.index.backend,
                "lexical_weight": cfg.lexical_weight,
            },
            "cpu_flags": cpu_flags(),
            "pid": os.getpid(),  # with --workers, the worker that answered
        }


# ---------------------------------------------------------------------------------------- validation


def _inputs(payload: Any, max_items: int) -> tuple[list[Any], bool]:
    if not isinstance(payload, dict):
        raise ApiError(422, f"the body must be a JSON object with an 'inputs' field, got {type(payload).__name__}")
    if "inputs" not in payload:
        raise ApiError(422, "missing field 'inputs'")
    x = payload["inputs"]
    if isinstance(x, list):
        if not x:
            raise ApiError(422, "field 'inputs' is an empty list")
        if len(x) > max_items:
            raise ApiError(413, f"field 'inputs' has {len(x)} items, over --max-batch-size {max_items}")
        return x, True
    return [x], False


def _strings(items: list[Any], batched: bool) -> list[str]:
    for i, x in enumerate(items):
        if not isinstance(x, str):
            raise ApiError(422, f"{_field(batched, i)} must be a string, got {type(x).__name__}")
    return items


def _predict_items(task: str, items: list[Any], batched: bool, mask_token: str) -> list[Any]:
    out = []
    for i, x in enumerate(items):
        f = _field(batched, i)
        if task == "question-answering":
            if not isinstance(x, dict):
                raise ApiError(422, f"{f} must be an object with 'question' and 'context', got {type(x).__name__}")
            for key in ("question", "context"):
                if not isinstance(x.get(key), str) or not x.get(key).strip():
                    raise ApiError(422, f"{f}.{key} must be a non-empty string")
            out.append({"question": x["question"], "context": x["context"]})
        elif task == "text-classification" and isinstance(x, dict):
            if not isinstance(x.get("text"), str):
                raise ApiError(422, f"{f}.text must be a string")
            if x.get("text_pair") is not None and not isinstance(x["text_pair"], str):
                raise ApiError(422, f"{f}.text_pair must be a string")
            out.append({"text": x["text"], "text_pair": x.get("text_pair")})
        else:
            if task == "zero-shot-classification" and isinstance(x, str) and not x.strip():
                raise ApiError(422, f"{f} is empty; there is nothing to classify")
            if not isinstance(x, str):
                raise ApiError(422, f"{f} must be a string, got {type(x).__name__}")
            if task == "fill-mask" and mask_token not in x:
                raise ApiError(422, f"{f} has no {mask_token} token")
            out.append(x)
    return out


class ZeroShotAsk(NamedTuple):
    """What a zero-shot request asks, besides its texts; requests asking the same share one call."""

    labels: tuple[str, ...]
    template: str
    multi_label: bool
    mode: str


def zero_shot_ask(payload: dict[str, Any], mode: str) -> ZeroShotAsk:
    """A zero-shot request's ``parameters`` (``candidate_labels``, ``hypothesis_template``,
    ``multi_label``, as transformers' pipeline and the Hugging Face inference API name them), checked;
    a 422 naming the field otherwise."""
    from bertkit.pipelines.zero_shot import DEFAULT_TEMPLATE, check_template, parse_labels

    params = payload.get("parameters", {})
    if not isinstance(params, dict):
        raise ApiError(422, f"field 'parameters' must be an object, got {type(params).__name__}")
    unknown = sorted(set(params) - {"candidate_labels", "hypothesis_template", "multi_label"})
    if unknown:
        raise ApiError(422, f"field 'parameters' has unknown key(s) {unknown}")
    raw = params.get("candidate_labels")
    if raw is None:
        raise ApiError(422, "zero-shot needs field 'parameters.candidate_labels': a list of labels or 'a,b,c'")
    if not isinstance(raw, (str, list)) or (isinstance(raw, list) and not all(isinstance(x, str) for x in raw)):
        raise ApiError(422, f"field 'parameters.candidate_labels' must be a list of strings or 'a,b,c', got {raw!r}")
    labels = parse_labels(raw)
    if not labels or not all(x.strip() for x in labels):
        raise ApiError(422, f"field 'parameters.candidate_labels' needs non-empty labels, got {raw!r}")
    if len(labels) > MAX_CANDIDATE_LABELS:
        raise ApiError(
            413,
            f"field 'parameters.candidate_labels' has {len(labels)} labels, over the limit of {MAX_CANDIDATE_LABELS}",
        )
    template = params.get("hypothesis_template", DEFAULT_TEMPLATE)
    try:
        check_template(template, labels)
    except (TypeError, ValueError) as e:
        raise ApiError(422, f"field 'parameters.hypothesis_template': {e}") from None
    multi = params.get("multi_label", False)
    if not isinstance(multi, bool):
        raise ApiError(422, f"field 'parameters.multi_label' must be true or false, got {multi!r}")
    if mode == "chunk":
        raise ApiError(422, "field 'truncation' must be 'error' or 'cut' for zero-shot classification")
    return ZeroShotAsk(tuple(labels), template, multi, mode)


def _check_contexts(tokenizer: Any, items: list[dict], batched: bool) -> None:
    """A context of only characters the tokenizer drops (control characters) leaves no span to answer."""
    for i, ids in enumerate(tokenizer.encode_batch_ids([x["context"] for x in items])):
        if not ids:
            raise ApiError(422, f"{_field(batched, i)}.context has no tokens (only characters the tokenizer drops)")


async def _client_left(request: Any) -> None:
    """Return when the client disconnects (the body has been read, so only that message can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------- the app

_ENDPOINTS = (
    "/embed",
    "/predict",
    "/tokenize",
    "/search",
    "/v1/embeddings",
    "/rerank",
    "/health",
    "/info",
    "/metrics",
)


class _MetricsMiddleware:
    """Counts every response by endpoint and status (pure ASGI: no body buffering, disconnects seen)."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope.get("path", "")
            self.metrics.count_request(path if path in _ENDPOINTS else "other", status["code"])


# BM25's statistics are per collection, and one shard's are not the whole corpus's
SHARDED_HYBRID = "hybrid search (lexical_weight > 0) needs one index folder"


class _DirectRoutes:
    """POST routes answered by their handler directly, past FastAPI's router, dependency solving and
    exception layers: the same handler functions FastAPI documents and would call, with the same
    ``{"error": ...}`` answers, at under half the event loop's cost a request. On a closed loop of
    clients that cost is the time the model waits between batches. ``routes`` is filled as the
    endpoints are made; any other request goes on to FastAPI."""

    def __init__(self, app: Any, routes: dict[str, Any]) -> None:
        from starlette.requests import Request

        from .responses import JSONResponse

        self.app, self.routes = app, routes
        self._request, self._response = Request, JSONResponse

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        handler = self.routes.get(scope.get("path")) if scope["type"] == "http" else None
        if handler is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        try:
            response = await handler(self._request(scope, receive))
        except ApiError as e:
            response = self._response({"error": e.message}, status_code=e.status, headers=e.headers)
        await response(scope, receive, send)


def _body_schema(inputs_schema: dict, extra: dict | None = None) -> dict:
    props = {"inputs": inputs_schema, **(extra or {})}
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"type": "object", "required": ["inputs"], "properties": props}}
            },
        }
    }


_TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}


class _Server:
    """What the route handlers share: the config, the loaded model, the batcher and the API key."""

    def __init__(self, config: ServeConfig, service: ModelService, batcher: Batcher, metrics: Metrics) -> None:
        self.config, self.service, self.batcher, self.metrics = config, service, batcher, metrics
        self.api_key = config.api_key or os.environ.get(API_KEY_ENV) or None

    def check_auth(self, request: Any) -> None:
        if self.api_key is None:
            return
        scheme, _, got = request.headers.get("authorization", "").strip().partition(" ")
        # the scheme is case-insensitive (bearer, BEARER); the key is compared exactly
        if not (scheme.lower() == "bearer" and hmac.compare_digest(got.strip().encode(), self.api_key.encode())):
            raise ApiError(
                401, "missing or wrong API key (send 'Authorization: Bearer <key>')", {"WWW-Authenticate": "Bearer"}
            )

    async def read_json(self, request: Any) -> Any:
        self.check_auth(request)
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"request body is {int(declared):,} bytes, over the {limit:,}-byte limit")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise ApiError(413, f"request body is over the {limit:,}-byte limit")
        try:
            return parse_body(bytes(body))
        except ValueError as e:
            raise ApiError(400, f"invalid JSON body: {e}") from None

    async def run_job(self, request: Any, kind: str, items: list[Any], tokens: int) -> list[Any]:
        config = self.config
        try:
            job = self.batcher.submit(kind, items, tokens)
        except QueueFull:
            raise ApiError(
                503, f"the server is busy ({config.max_queue} requests queued); retry shortly", {"Retry-After": "1"}
            ) from None
        # Woken by whichever comes first: the result, the client leaving, or the timeout; no polling.
        left = asyncio.ensure_future(_client_left(request))
        try:
            done, _ = await asyncio.wait(
                (job.future, left), timeout=config.request_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            left.cancel()
        if job.future in done:
            try:
                return job.future.result()
            except ValueError as e:  # the pipeline refused this request's input: the client's error
                raise ApiError(422, str(e)) from None
        job.dropped.set()  # the batcher skips it if its batch has not started
        job.future.cancel()
        if left in done:
            raise ApiError(499, "client closed the request")
        raise ApiError(504, f"the request took longer than the {config.request_timeout:g} s timeout")


def _add_error_handlers(app: Any) -> None:
    """Every refusal answers ``{"error": message}`` with its status."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from .responses import JSONResponse

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": str(e)}, status_code=422)


def _add_model_routes(app: Any, srv: _Server) -> None:
    """The endpoints that run the model: /embed, /predict, /tokenize, /search."""
    from fastapi import Request

    from .responses import JSONResponse

    config, service = srv.config, srv.service

    @app.post("/embed", openapi_extra=_body_schema(_TEXTS), summary="Sentence embeddings")
    async def embed(request: Request) -> JSONResponse:
        payload = await srv.read_json(request)
        service.refuse_embedding_a_reranker()
        items, batched = _inputs(payload, config.max_batch_size)
        # text-embeddings-inference's fields: truncate (a boolean) beside bertkit's truncation, normalize
        mode, side = tei_truncation_mode(payload, config.truncate), truncation_direction(payload)
        normalize = payload.get("normalize")
        if normalize is not None and not isinstance(normalize, bool):
            raise ApiError(422, f"field 'normalize' must be true or false, got {normalize!r}")
        if payload.get("prompt_name") is not None:
            raise ApiError(422, "field 'prompt_name' is not supported: this server's model has no prompts")
        texts = _strings(items, batched)
        empty = next((i for i, t in enumerate(texts) if not t.strip()), None)
        if empty is not None:  # an empty text still embeds to a vector that means nothing
            raise ApiError(400, f"{_field(batched, empty)} is empty; give the text to embed")
        res = await embed_texts(
            service, srv.run_job, srv.metrics, request, texts, mode, "inputs", side, normalize=normalize
        )
        vecs = res.vectors  # float32 rows, written by orjson as they are
        body: dict[str, Any] = {"embeddings": vecs} if batched else {"embedding": vecs[0]}
        if any(res.dropped):  # a cut is never silent: the tokens each input lost
            body["truncated_tokens"] = res.dropped if batched else res.dropped[0]
        return JSONResponse(body)

    app.state.direct_routes["/embed"] = embed

    @app.post(
        "/predict",
        openapi_extra=_body_schema(
            {"description": "text, {text, text_pair}, {question, context}, or a list of them"},
            {
                "parameters": {
                    "type": "object",
                    "description": "zero-shot: candidate_labels, hypothesis_template, multi_label",
                }
            },
        ),
        summary="The model's task (classification, token classification, QA, fill-mask, zero-shot)",
    )
    async def predict(request: Request) -> JSONResponse:
        payload = await srv.read_json(request)
        if service.pipe is None:
            raise ApiError(404, f"this model folder has no task head ({service.task}); use /embed")
        items, batched = _inputs(payload, config.max_batch_size)
        items = _predict_items(service.task, items, batched, service.tokenizer.mask_token)
        if service.task == "question-answering":
            _check_contexts(service.tokenizer, items, batched)
        dropped: list[int] = []
        windowed: list[bool] = []
        if service.task == "zero-shot-classification":
            ask = zero_shot_ask(payload, truncation_mode(payload, config.truncate))
            tokens, dropped = admit_zero_shot(service, items, ask, batched)
            items = [(x, ask) for x in items]
        elif service.task in ("token-classification", "question-answering"):
            tokens, windowed = admit_windowed(service, payload, items, batched)
        elif service.task == "fill-mask":
            tokens, dropped = admit_fill_mask(service, items, truncation_mode(payload, config.truncate), batched)
        else:
            mode = truncation_mode(payload, config.truncate)
            tokens, dropped = admit_classification(service, items, mode, batched)
            items = [(x, mode) for x in items]
        srv.metrics.count_truncated(dropped)
        out = await srv.run_job(request, "predict", items, tokens)
        body: dict[str, Any] = {"task": service.task, "predictions": out if batched else out[0]}
        if any(dropped):
            body["truncated_tokens"] = dropped if batched else dropped[0]
        if any(windowed):  # nothing was cut: the long inputs ran as overlapping windows
            body["windowed"] = windowed if batched else windowed[0]
        return JSONResponse(body)

    @app.post("/tokenize", openapi_extra=_body_schema(_TEXTS), summary="WordPiece tokens and ids")
    async def tokenize(request: Request) -> JSONResponse:
        items, batched = _inputs(await srv.read_json(request), config.max_batch_size)
        texts = _strings(items, batched)
        enc = service.tokenizer(texts)
        rows = [{"input_ids": list(enc["input_ids"][i]), "tokens": enc.tokens(i)} for i in range(len(texts))]
        return JSONResponse({"tokens": rows} if batched else rows[0])

    _add_search_route(app, srv)


def _search_settings(payload: dict[str, Any], config: Any) -> tuple[int, float, str]:
    """/search's top_k, lexical weight and truncation mode, each checked, from the request body."""
    top_k = payload.get("top_k", 10)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 1000:
        raise ApiError(422, f"field 'top_k' must be an integer in [1, 1000], got {top_k!r}")
    weight = payload.get("lexical_weight", config.lexical_weight)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 1:
        raise ApiError(422, f"field 'lexical_weight' must be a number in [0, 1] (0: embeddings only), got {weight!r}")
    mode = truncation_mode(payload, config.truncate)
    if mode == "chunk":
        raise ApiError(422, "field 'truncation' must be 'error' or 'cut' for /search")
    return top_k, float(weight), mode


def _add_search_route(app: Any, srv: _Server) -> None:
    """/search: the nearest texts of the loaded index."""
    from fastapi import Request

    from .responses import JSONResponse

    config, service = srv.config, srv.service

    @app.post(
        "/search",
        openapi_extra=_body_schema(
            _TEXTS,
            {
                "top_k": {"type": "integer", "minimum": 1},
                "lexical_weight": {"type": "number", "minimum": 0, "maximum": 1},
            },
        ),
        summary="Nearest texts in the index (hybrid with BM25 when lexical_weight > 0)",
    )
    async def search(request: Request) -> JSONResponse:
        payload = await srv.read_json(request)
        if service.index is None:
            raise ApiError(404, "no index loaded; start the server with --index DIR")
        items, batched = _inputs(payload, config.max_batch_size)
        top_k, weight, mode = _search_settings(payload, config)
        if weight and not service.index_is_whole(service.index):
            raise ApiError(422, f"field 'lexical_weight': {config.index} is a sharded index; {SHARDED_HYBRID}")
        texts = _strings(items, batched)
        for i, t in enumerate(texts):
            if not t.strip():  # it would still embed, and return hits that mean nothing
                raise ApiError(422, f"{_field(batched, i)} is empty; give the text to search for")
        feats, tokens, dropped = service.embed_features(texts, "inputs", cut=mode == "cut")
        srv.metrics.count_truncated(dropped)
        jobs = [(f, top_k, t, weight) for f, t in zip(feats, texts)]
        hits = await srv.run_job(request, "search", jobs, tokens)
        return JSONResponse({"results": hits} if batched else {"results": hits[0]})


def _add_status_routes(app: Any, srv: _Server) -> None:
    """/health, /info and /metrics."""
    from fastapi import Request
    from fastapi.responses import PlainTextResponse, Response

    @app.get("/health", summary="Liveness")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/info", summary="Model, task, dtype and limits")
    async def info(request: Request) -> dict:
        srv.check_auth(request)
        return srv.service.info()

    @app.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
    async def prom(request: Request) -> Response:
        srv.check_auth(request)
        return Response(srv.metrics.render(srv.batcher.depth), media_type="text/plain; version=0.0.4; charset=utf-8")


def create_app(config: ServeConfig, service: ModelService | None = None) -> Any:
    """The FastAPI application for ``config`` (loads the model unless ``service`` is given)."""
    try:
        from fastapi import FastAPI
    except ImportError:
        raise ImportError("bertkit serve needs the serve extra: pip install 'bertkit[serve]'") from None
    from contextlib import asynccontextmanager

    service = service or ModelService(config)
    metrics = Metrics()
    concurrency = service.batch_concurrency()
    runners = {
        "embed": service.run_embed,
        "embed_raw": service.run_embed_raw,
        "predict": service.run_predict,
        "search": service.run_search,
    }
    batcher = Batcher(
        runners,
        metrics,
        config.max_batch_size,
        config.max_batch_tokens,
        config.max_wait_ms,
        config.max_queue,
        concurrency=concurrency,
        serial_kinds=SERIAL_KINDS,
        split_min_items=SPLIT_PER_THREAD * concurrency,
    )

    @asynccontextmanager
    async def lifespan(app: Any):
        yield
        # uvicorn has already waited for in-flight requests; finish whatever is still queued, then stop
        await asyncio.to_thread(batcher.close)

    from .responses import JSONResponse

    app = FastAPI(
        title="bertkit serve",
        default_response_class=JSONResponse,
        version="1",
        lifespan=lifespan,
        description=f"Serving {config.model} ({service.task}, {service.dtype}).",
    )
    app.state.service, app.state.batcher, app.state.metrics = service, batcher, metrics
    app.state.direct_routes = {}  # path -> handler, for _DirectRoutes
    srv = _Server(config, service, batcher, metrics)
    _add_error_handlers(app)
    _add_model_routes(app, srv)
    _add_status_routes(app, srv)
    from .openai_api import mount_embedding_api

    mount_embedding_api(app, config, service, batcher, srv.read_json, srv.run_job)
    app.add_middleware(_DirectRoutes, routes=app.state.direct_routes)
    app.add_middleware(_MetricsMiddleware, metrics=metrics)  # added last: outermost, so it counts both
    return app


def worker_main() -> None:
    """One ``--workers`` process: load the model, then serve on a socket of its own (started by
    :func:`bertkit.serving.workers.run_workers`).

    The workers share the cores: each gets ``cores // workers`` torch threads, because more threads
    than cores leave every worker's parallel regions waiting on threads that are not running."""
    import torch
    import uvicorn

    from .process import exit_with_parent
    from .workers import CONFIG_ENV, listening_socket

    exit_with_parent()  # a worker never outlives `bertkit serve`, even one killed by kill -9
    config = ServeConfig(**json.loads(os.environ[CONFIG_ENV]))
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // config.workers))
    app = create_app(config)
    sock = listening_socket(config.host, config.port, reuse_port=True)  # after the load: ready when listening
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,  # a line per request costs each worker a tenth of a millisecond of its core
            timeout_graceful_shutdown=int(config.request_timeout),
        )
    )
    signal.signal(signal.SIGTERM, lambda *_: None)  # uvicorn drains, then re-raises SIGTERM: end with 0
    server.run(sockets=[sock])


def serve(config: ServeConfig) -> int:
    """Load the model and serve until SIGINT/SIGTERM (which drain in-flight requests); returns 0."""
    try:
        import uvicorn
    except ImportError:
        raise ImportError("bertkit serve needs the serve extra: pip install 'bertkit[serve]'") from None
    api_key = config.api_key or os.environ.get(API_KEY_ENV)
    if not _is_loopback(config.host) and not api_key:
        logger.warning(
            "listening on %s without an API key: anyone who can reach this address can use the "
            "model (pass --api-key or set %s)",
            config.host,
            API_KEY_ENV,
        )
    t0 = time.perf_counter()
    if config.workers > 1:
        from .workers import run_workers

        return run_workers(config)
    app = create_app(config)
    svc = app.state.service
    print(
        f"bertkit serve: {config.model} ({svc.task}, {svc.dtype}) loaded in {time.perf_counter() - t0:.1f} s; "
        f"http://{config.host}:{config.port} (docs at /docs)",
        flush=True,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level="warning",
            timeout_graceful_shutdown=int(config.request_timeout),
        )
    )
    # uvicorn drains on SIGTERM, then re-raises the signal once its own handler is gone; a no-op
    # handler underneath turns that into a normal return, so a drained shutdown exits 0.
    signal.signal(signal.SIGTERM, lambda *_: None)
    server.run()
    return 0
