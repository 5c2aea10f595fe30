"""The endpoints embedding clients already speak, mounted on the `bertkit serve` app.

* ``POST /v1/embeddings``, as OpenAI defines it: ``{"input": str | [str], "model", "dimensions",
  "encoding_format": "float" | "base64"}`` -> ``{"object": "list", "data": [{"object": "embedding",
  "index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}``. ``dimensions``
  keeps the first N dimensions and renormalises them (Matryoshka truncation); base64 is the
  little-endian float32 bytes, as OpenAI sends them. A bertkit field ``truncation`` ("error", the
  default unless the server runs with ``--truncate``; "cut"; "chunk") decides what happens to a text
  over the limit; cut tokens are reported in ``usage.truncated_tokens``.
* ``POST /rerank``, as text-embeddings-inference defines it: ``{"query", "texts", "top_n",
  "raw_scores", "return_text"}`` -> ``[{"index", "score"[, "text"]}]`` best first. The score is the
  cross-encoder's logit with ``raw_scores``, else its sigmoid. Served from a cross-encoder folder (a
  one-logit sequence classifier); any other model answers 424. A (query, text) pair over the limit
  follows bertkit's ``truncation`` field, else TEI's ``truncate`` (true: cut the text, never the
  query; false, its default: 413), else ``--truncate``; "chunk" scores the text's best window. A cut
  adds ``truncated_tokens`` to every item and counts in ``/metrics``.

Both go through the server's batcher, token limits and API key like ``/embed``. (No ``from __future__
import annotations`` here: FastAPI reads the handlers' ``Request`` annotation as a real class.)
"""

import base64
from pathlib import Path
from typing import Any

import numpy as np

from .requests import ApiError
from .truncation import (
    admit_pairs,
    embed_texts,
    run_by_mode,
    tei_truncation_mode,
    truncation_direction,
    truncation_mode,
)

__all__ = ["mount_embedding_api"]


def _error(status: int, message: str) -> Exception:

    return ApiError(status, message)


def _texts(payload: dict[str, Any], max_items: int) -> tuple[list[str], bool]:
    x = payload.get("input")
    if isinstance(x, str):
        if not x.strip():  # OpenAI answers 400 here too: an empty text embeds to a vector that means nothing
            raise _error(400, "field 'input' is an empty string; give the text to embed")
        return [x], False
    if not isinstance(x, list) or not x:
        raise _error(422, "field 'input' must be a string or a non-empty list of strings")
    if len(x) > max_items:
        raise _error(413, f"field 'input' has {len(x)} items, over --max-batch-size {max_items}")
    for i, t in enumerate(x):
        if not isinstance(t, str):
            raise _error(422, f"input[{i}] must be a string, got {type(t).__name__} (token-id input is not supported)")
        if not t.strip():
            raise _error(400, f"input[{i}] is an empty string; give the text to embed")
    return x, True


def _dimensions(payload: dict[str, Any], size: int) -> int | None:
    d = payload.get("dimensions")
    if d is None:
        return None
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise _error(422, f"field 'dimensions' must be a positive integer, got {d!r}")
    if d > size:
        raise _error(400, f"field 'dimensions' is {d}, above the model's embedding size {size}")
    return d


def truncate_embeddings(vectors: np.ndarray, dims: int | None) -> np.ndarray:
    """The first ``dims`` dimensions of each row, renormalised to unit length (all when None)."""
    v = np.asarray(vectors, np.float32)
    if dims is None or dims == v.shape[1]:
        return v
    v = v[:, :dims]
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def _ranker(service: Any) -> Any:
    """A text-ranking pipeline over the served model when it is a cross-encoder, else None."""
    from bertkit.pipelines.text_ranking import TextRankingPipeline, check_cross_encoder

    pipe = getattr(service, "pipe", None)
    if pipe is None:
        return None
    try:
        check_cross_encoder(pipe.model)
    except ValueError:
        return None
    return TextRankingPipeline(
        pipe.model, pipe.tokenizer, batch_size=pipe.batch_size, max_batch_tokens=pipe.max_batch_tokens
    )


def mount_embedding_api(app: Any, config: Any, service: Any, batcher: Any, read_json: Any, run_job: Any) -> None:
    """Add ``/v1/embeddings`` and ``/rerank`` to ``app`` (helpers are the app's own request plumbing)."""
    from fastapi import Request

    from .responses import JSONResponse

    size = int(service.embedder.dim)  # the vectors' width: a Dense module may change the encoder's
    served = Path(config.model).name
    ranker = _ranker(service)

    if ranker is not None:  # items are ((query, text), (truncation mode, side)); admission refused the rest
        limit = service.classify_limit()
        batcher.runners["rerank"] = lambda items: run_by_mode(
            items,
            lambda pairs, how: ranker.score_pairs(
                pairs, limit, how[0], keep_query=True, truncation_side=how[1]
            ).tolist(),
        )

    @app.post("/v1/embeddings", summary="Embeddings, OpenAI-compatible")
    async def embeddings(request: Request) -> JSONResponse:

        try:
            return await _embeddings(request)
        except ApiError as e:  # OpenAI's error shape, which its clients read the message from
            kind = "authentication_error" if e.status == 401 else "invalid_request_error"
            return JSONResponse(
                {"error": {"message": e.message, "type": kind, "param": None, "code": None}},
                status_code=e.status,
                headers=e.headers,
            )

    app.state.direct_routes["/v1/embeddings"] = embeddings

    async def _embeddings(request: Request) -> JSONResponse:
        payload = await read_json(request)
        if not isinstance(payload, dict):
            raise _error(422, "the body must be a JSON object with an 'input' field")
        service.refuse_embedding_a_reranker()
        texts, _ = _texts(payload, config.max_batch_size)
        dims = _dimensions(payload, size)
        fmt = payload.get("encoding_format", "float") or "float"
        if fmt not in ("float", "base64"):
            raise _error(422, f"field 'encoding_format' must be 'float' or 'base64', got {fmt!r}")
        mode = truncation_mode(payload, config.truncate)
        res = await embed_texts(service, run_job, batcher.metrics, request, texts, mode, "input")
        vecs, tokens, dropped = res.vectors, res.tokens, res.dropped
        vecs = truncate_embeddings(vecs, dims)
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") if fmt == "base64" else v,
            }
            for i, v in enumerate(vecs)
        ]
        model = payload.get("model") if isinstance(payload.get("model"), str) else served
        usage: dict[str, Any] = {"prompt_tokens": tokens, "total_tokens": tokens}
        if any(dropped):  # a cut is never silent: the tokens each input lost
            usage["truncated_tokens"] = dropped
        return JSONResponse({"object": "list", "data": data, "model": model, "usage": usage})

    _mount_rerank(app, config, service, ranker, read_json, run_job, batcher.metrics)


def _mount_rerank(app: Any, config: Any, service: Any, ranker: Any, read_json: Any, run_job: Any, metrics: Any) -> None:
    """``POST /rerank`` as text-embeddings-inference defines it, served from a cross-encoder folder."""
    from fastapi import Request

    from .responses import JSONResponse

    @app.post("/rerank", summary="Rerank texts for a query (text-embeddings-inference)")
    async def rerank(request: Request) -> JSONResponse:
        payload = await read_json(request)
        if ranker is None:
            raise _error(
                424,
                f"this model ({service.task}) is not a cross-encoder (a sequence classifier with one "
                "output); serve a `bertkit train-reranker` folder for /rerank",
            )
        if not isinstance(payload, dict) or not isinstance(payload.get("query"), str):
            raise _error(422, "field 'query' must be a string")
        texts = payload.get("texts")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise _error(422, "field 'texts' must be a non-empty list of strings")
        if len(texts) > config.max_batch_size:
            raise _error(413, f"field 'texts' has {len(texts)} items, over --max-batch-size {config.max_batch_size}")
        top_n = payload.get("top_n")
        if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
            raise _error(422, f"field 'top_n' must be a positive integer, got {top_n!r}")
        for name in ("raw_scores", "return_text"):
            if payload.get(name) is not None and not isinstance(payload.get(name), bool):
                raise _error(422, f"field {name!r} must be true or false, got {payload.get(name)!r}")
        query = payload["query"]
        mode = tei_truncation_mode(payload, config.truncate)
        side = truncation_direction(payload)
        tokens, dropped = admit_pairs(service, query, texts, mode)
        metrics.count_truncated(dropped)
        items = [((query, t), (mode, side)) for t in texts]
        scores = np.asarray(await run_job(request, "rerank", items, tokens), np.float32)
        if not payload.get("raw_scores", False):
            scores = 1.0 / (1.0 + np.exp(-scores))
        order = np.argsort(-scores, kind="stable")[: top_n or len(texts)]
        text = bool(payload.get("return_text", False))
        rows = [{"index": int(i), "score": float(scores[i]), **({"text": texts[i]} if text else {})} for i in order]
        if any(dropped):  # a cut is never silent; TEI's answer is a list, so each item says its own
            for r in rows:
                r["truncated_tokens"] = dropped[r["index"]]
        return JSONResponse(rows)
