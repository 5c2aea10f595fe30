"""`bertkit serve --model DIR [--task auto] [--host 127.0.0.1 --port 8080] [--dtype auto] ...`."""

from __future__ import annotations

import argparse

from bertkit import _args as A
from bertkit.inference import DTYPES


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .app import API_KEY_ENV, TASKS

    p.add_argument("--model", required=True, help="model folder (config.json, weights, vocab.txt) or cached model id")
    p.add_argument(
        "--task", default="auto", choices=("auto", *TASKS), help="what /predict does (auto: from config.json)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=A.int_range(0, 65535), default=8080)
    p.add_argument("--dtype", default="auto", choices=DTYPES, help="auto = bf16 where the CPU has AMX/AVX-512 BF16")
    A.add_device_flag(p)
    p.add_argument("--max-batch-tokens", type=A.positive_int, default=8192, help="tokens per model forward")
    p.add_argument("--max-batch-size", type=A.int_range(1, 4096), default=64, help="texts per forward, and per request")
    p.add_argument(
        "--max-wait-ms", type=A.float_range(0, 10000), default=5.0, help="how long a batch waits for more requests"
    )
    p.add_argument(
        "--max-input-tokens",
        type=A.int_range(2, 100000),
        default=512,
        help="tokens per text, or per window where a token-classification or QA text is windowed",
    )
    p.add_argument(
        "--truncate",
        action="store_true",
        help="cut texts over the token limit instead of refusing them, for requests without a 'truncation' "
        "field (or, on /rerank, 'truncate')",
    )
    p.add_argument("--workers", type=A.int_range(1, 64), default=1, help="server processes (each loads the model)")
    p.add_argument(
        "--index", default=None, help="a `bertkit index` folder (one index, or a sharded one) to answer POST /search"
    )
    p.add_argument(
        "--lexical-weight",
        type=A.fraction_0_1,
        default=0.0,
        help="/search's hybrid weight of BM25 against the embedding for requests without a 'lexical_weight' "
        "field (0: embeddings only)",
    )
    p.add_argument("--api-key", default=None, help=f"require 'Authorization: Bearer KEY' (or set {API_KEY_ENV})")
    p.add_argument(
        "--max-queue", type=A.int_range(1, 1_000_000), default=1024, help="waiting requests before 503 Retry-After"
    )
    p.add_argument("--request-timeout", type=A.float_range(0.1, 3600), default=60.0, help="seconds per request")


def _check_encoder(model: str) -> None:
    """Every endpoint runs an encoder: refuse a text generator before loading it (and a model id
    that is not in the cache, with every place looked in)."""
    from bertkit._text import read_json
    from bertkit.hub import resolve_model_arg

    folder = resolve_model_arg(model)
    cfg = folder / "config.json"
    kind = read_json(cfg).get("model_type") if cfg.is_file() else None
    if kind == "gpt2":
        raise ValueError(
            f"--model {model} is a gpt2 model (a text generator), not an encoder: `bertkit serve` "
            "serves BERT-family folders (embeddings, classification, QA, fill-mask)"
        )


def _check_address(host: str, port: int) -> None:
    """Bind ``host:port`` once before the model loads, so a busy port or an unknown host fails at once
    in one line (and not after the load, in uvicorn's words)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ValueError(f"--host {host}: cannot resolve this address ({e.strerror})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            s.bind(address)
        except OSError as e:
            hint = " (another server listens there; choose another --port)" if e.errno == errno.EADDRINUSE else ""
            raise ValueError(f"cannot listen on {host}:{port}: {e.strerror}{hint}") from None


def run(args: argparse.Namespace) -> int:
    from bertkit._extras import require

    for module in ("fastapi", "uvicorn"):
        require(module, "serve", "bertkit serve")
    _check_encoder(args.model)
    _check_address(args.host, args.port)
    from .app import ServeConfig, serve

    return serve(
        ServeConfig(
            model=args.model,
            task=args.task,
            host=args.host,
            port=args.port,
            dtype=args.dtype,
            device=args.device,
            max_batch_tokens=args.max_batch_tokens,
            max_batch_size=args.max_batch_size,
            max_wait_ms=args.max_wait_ms,
            max_input_tokens=args.max_input_tokens,
            truncate=args.truncate,
            workers=args.workers,
            index=args.index,
            lexical_weight=args.lexical_weight,
            api_key=args.api_key,
            max_queue=args.max_queue,
            request_timeout=args.request_timeout,
        )
    )
