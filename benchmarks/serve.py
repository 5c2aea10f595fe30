"""Load test of `bertkit serve` on MiniLM beside infinity-emb: closed-loop clients of real single sentences.

Servers, each serving the same MiniLM folder on the same cores, started side by side:
- ``bertkit``: ``bertkit serve`` as it starts by default (one process, dynamic batching);
- ``bertkit --workers N``: one process per core (``--workers``, the core count unless given);
- ``infinity-emb``: michaelfeil/infinity's server from its own virtual environment (``make bench-infinity``
  makes ``.venv-infinity``; its pins clash with the reference libraries'), with the engine, dtype and batch
  size given by ``--infinity-args`` (the fastest CPU settings measured here are the default, and are printed);
- ``bertkit --max-batch-size 1`` with ``--with-bs1``: what dynamic batching buys.

Every request is ``POST /v1/embeddings`` (infinity: ``/embeddings``) with ``{"model", "input": one sentence}``,
sent by a lean asyncio HTTP/1.1 client (keep-alive, one connection per client): the clients share the
servers' CPU, so their cost is printed too. For each client count (``--clients 1,8,32``), rounds alternate
between the servers for a fixed time each; every client loop is bounded in count and time.

Prints requests/s and real tokens/s, p50/p99 latency, errors (must be 0), the server's CPU cores, the
ratio of each server's tokens/s to bertkit's offline pipeline on the same texts (the median over rounds of
each run's ratio to the offline run of its round, since the machine's speed drifts; target >= 0.85 at 32
clients) and to infinity's (target 4x), and whether every returned vector equals the offline pipeline's.
Prints the CPU flags and the load average.

    python benchmarks/serve.py [--clients 1,8,32] [--seconds 8] [--rounds 2] [--dtype auto] [--with-bs1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from bertkit.assets import asset_path
from bertkit.inference import describe_cpu
from bertkit.pipelines import pipeline
from bertkit.serving.process import free_port, server_process

ROOT = Path(__file__).resolve().parent.parent
INFINITY_BIN = ROOT / ".venv-infinity" / "bin" / "infinity_emb"
# infinity's fastest CPU settings on this MiniLM, measured here (32 clients, req/s): its ONNX Runtime engine
# (optimum) with batches of 32, 294 (of 64: 282); its torch engine in bf16 227, in fp32 134. Its optimum
# engine pools the first token unless told to pool by mean, as MiniLM does (its vectors were otherwise
# another model's: median cosine 0.48 to the reference).
INFINITY_ARGS = "--engine optimum --device cpu --batch-size 32 --pooling-method mean"


def sentences(n: int) -> list[str]:
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:n]


class _Conn:
    """One keep-alive HTTP/1.1 connection that POSTs JSON: a load generator as lean as wrk's, because
    the clients share the server's CPU cores and every millisecond they spend is taken from it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        status_and_headers = await self.reader.readuntil(b"\r\n\r\n")
        lines = status_and_headers.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
        if "content-length" not in headers:
            raise ValueError(f"response without Content-Length: {lines[0]}")
        data = await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
            self.reader = self.writer = None


async def load(url: str, path: str, texts: list[str], clients: int, seconds: float, max_requests: int) -> dict:
    """``clients`` concurrent loops, each on its own connection, each bounded in count and in time."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    bodies = [json.dumps({"model": "minilm", "input": t}).encode() for t in texts]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    got: dict[int, list[float]] = {}
    done = 0
    stop_at = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal done
        conn = _Conn(host, int(port))
        i = w
        try:
            for _ in range(max_requests):
                if time.perf_counter() >= stop_at:
                    return
                k = i % len(texts)
                t0 = time.perf_counter()
                try:
                    status, data = await asyncio.wait_for(conn.post(path, bodies[k]), 60)
                except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as e:
                    errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                    await conn.close()
                    continue
                latencies.append(time.perf_counter() - t0)
                if status != 200:
                    errors[str(status)] = errors.get(str(status), 0) + 1
                else:
                    if k not in got:
                        got[k] = json.loads(data)["data"][0]["embedding"]
                    done += 1
                i += clients
        finally:
            await conn.close()

    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    wall = time.perf_counter() - t0
    return {
        "wall": wall,
        "ok": done,
        "latencies": latencies,
        "errors": errors,
        "got": got,
        "client_cpu": time.process_time() - cpu0,
    }


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds so far of a process and every process below it (Linux /proc)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", encoding="ascii") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def export_onnx(folder: Path, out: Path) -> None:
    """transformers' BertModel of ``folder`` as ONNX (inputs input_ids, attention_mask, token_type_ids; output
    last_hidden_state, as optimum names them), by torch's TorchScript exporter: the file infinity's optimum
    engine reads. Exported here, in the reference environment, because optimum's own exporter in infinity's
    environment needs packages whose numpy pins clash with infinity's."""
    import torch
    from transformers import AutoModel

    class Hidden(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001, ANN201
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    ids = torch.ones(2, 8, dtype=torch.long)
    with torch.no_grad():
        torch.onnx.export(
            Hidden(AutoModel.from_pretrained(folder, attn_implementation="eager").eval()),
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(out),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={k: {0: "batch", 1: "sequence"} for k in [*names, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,
        )


@contextlib.contextmanager
def infinity_process(folder: Path, extra: str, work: Path):
    """infinity-emb's server on a free port, from ``.venv-infinity``; yields (url, pid). Its optimum engine
    reads an ONNX file beside the weights, exported into a copy of the folder in ``work``."""
    model = folder
    if "optimum" in extra:
        model = work / "minilm-onnx"
        shutil.copytree(folder, model, dirs_exist_ok=True)
        export_onnx(folder, model / "model.onnx")
    port = free_port()
    log = open(work / f"infinity-{port}.log", "wb")
    cmd = [
        str(INFINITY_BIN),
        "v2",
        "--model-id",
        str(model),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        *extra.split(),
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"infinity-emb exited with {proc.returncode}; log: {log.name}")
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            if time.monotonic() > deadline:
                raise TimeoutError(f"infinity-emb not ready after 300 s; log: {log.name}")
            time.sleep(0.5)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def offline_tokens_per_second(offline: object, texts: list[str], real_tokens: int, repeats: int = 3) -> float:
    """The in-process pipeline's throughput on the same texts: the ceiling the servers are compared to."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        offline(texts)  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return real_tokens / sorted(times)[len(times) // 2]


def summarize(runs: list[dict], lengths: list[int]) -> dict:
    ok, wall = sum(x["ok"] for x in runs), sum(x["wall"] for x in runs)
    lat = sorted(t for x in runs for t in x["latencies"])
    errors: dict[str, int] = {}
    got: dict[int, list[float]] = {}
    for x in runs:
        for k, v in x["errors"].items():
            errors[k] = errors.get(k, 0) + v
        got.update(x["got"])
    # every client walks the texts in steps of the client count: the requests' mean length is the texts'
    per_request = sum(lengths) / len(lengths)
    tokens = ok * per_request
    return {
        # the median over rounds of each run's tokens/s over the offline run's of its round
        "vs_offline": statistics.median(x["ok"] * per_request / x["wall"] / x["offline_tps"] for x in runs),
        "rps": ok / wall,
        "tps": tokens / wall,
        "p50": lat[len(lat) // 2] * 1000 if lat else float("nan"),
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else float("nan"),
        "errors": errors,
        "got": got,
        "server_cores": sum(x["server_cpu"] for x in runs) / wall,
        "client_cores": sum(x["client_cpu"] for x in runs) / wall,
    }


def check_vectors(offline: object, texts: list[str], got: dict[int, list[float]]) -> tuple[int, float]:
    keys = sorted(got)
    if not keys:
        return 0, float("nan")
    want = offline([texts[k] for k in keys], return_tensors=True).numpy()  # type: ignore[operator]
    have = np.asarray([got[k] for k in keys], np.float32)
    cos = np.sum(have * want, 1) / np.linalg.norm(have, axis=1) / np.linalg.norm(want, axis=1)
    return len(keys), float(cos.min())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", default="1,8,32", help="client counts, comma-separated")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sentences", type=int, default=2000)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--max-wait-ms", default="5", help="bertkit's batching window")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes of the second bertkit server")
    p.add_argument("--infinity-args", default=INFINITY_ARGS, help=f"infinity's settings (default: {INFINITY_ARGS})")
    p.add_argument("--no-infinity", action="store_true", help="bertkit's servers only")
    p.add_argument("--with-bs1", action="store_true", help="also bertkit --max-batch-size 1")
    args = p.parse_args(argv)
    counts = [int(x) for x in args.clients.split(",")]
    folder = Path(asset_path("minilm"))
    texts = sentences(args.sentences)
    offline = pipeline("sentence-embedding", model=folder, dtype=args.dtype)
    lengths = [len(x) for x in offline.tokenizer(texts, truncation=True, max_length=offline.max_length)["input_ids"]]
    print(f"CPU flags: {describe_cpu()}; {os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.2f}")
    common = ["--dtype", args.dtype, "--max-wait-ms", args.max_wait_ms]
    configs = {
        "bertkit": common + ["--workers", "1"],
        f"bertkit --workers {args.workers}": common + ["--workers", str(args.workers)],
    }
    if args.with_bs1:
        configs["bertkit --max-batch-size 1"] = common + ["--workers", "1", "--max-batch-size", "1"]
    use_infinity = not args.no_infinity
    if use_infinity and not INFINITY_BIN.exists():
        print(f"infinity-emb is not installed at {INFINITY_BIN} (make bench-infinity): bertkit only")
        use_infinity = False
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-serve-")))
        servers: dict[str, tuple[str, int, str]] = {}  # name -> (url, pid, path)
        for name, cfg in configs.items():
            srv = stack.enter_context(server_process(folder, cfg))
            servers[name] = (srv.url, srv.proc.pid, "/v1/embeddings")
        if use_infinity:
            url, pid = stack.enter_context(infinity_process(folder, args.infinity_args, work))
            servers["infinity-emb"] = (url, pid, "/embeddings")
            print(f"infinity-emb 0.0.78: {args.infinity_args}")
        for url, _, path in servers.values():  # warm-up: every server has run a few batches
            asyncio.run(load(url, path, texts, 8, 2.0, 50))
        results: dict[tuple[str, int], list[dict]] = {(n, c): [] for n in servers for c in counts}
        offline_runs: list[float] = []
        for c in counts:
            for r in range(args.rounds):
                # the offline pipeline once a round, between the servers' runs: the machine's speed drifts
                # (other tenants, clocks), and each server run is compared with the offline run beside it
                off = offline_tokens_per_second(offline, texts, sum(lengths), repeats=1)
                offline_runs.append(off)
                for name in list(servers) if r % 2 == 0 else list(reversed(servers)):
                    url, pid, path = servers[name]
                    c0 = tree_cpu_seconds(pid)
                    res = asyncio.run(load(url, path, texts, c, args.seconds, 100000))
                    res["server_cpu"] = tree_cpu_seconds(pid) - c0
                    res["offline_tps"] = off
                    results[(name, c)].append(res)
    print(
        f"offline pipeline: {statistics.median(offline_runs):,.0f} real tokens/s, median of {len(offline_runs)} runs "
        f"between the servers' rounds ({min(offline_runs):,.0f} to {max(offline_runs):,.0f}; the same {len(texts)} "
        "texts, length-sorted batches), "
        f"dtype {offline.dtype}"
    )
    return report(results, servers, counts, offline, texts, lengths, args)


def report(results, servers, counts, offline, texts, lengths, args) -> int:
    all_ok = True
    print(
        f"{'server':<22}{'clients':>8}{'req/s':>9}{'tokens/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}"
        f"{'server cores':>13}{'/ offline':>10}{'/ infinity':>11}"
    )
    for c in counts:
        base = summarize(results[("infinity-emb", c)], lengths) if ("infinity-emb", c) in results else None
        for name in servers:
            s = summarize(results[(name, c)], lengths)
            n_err = sum(s["errors"].values())
            all_ok &= n_err == 0
            vs_inf = f"{s['rps'] / base['rps']:.2f}x" if base and base["rps"] else "-"
            print(
                f"{name:<22}{c:>8}{s['rps']:>9.1f}{s['tps']:>10,.0f}{s['p50']:>9.1f}{s['p99']:>9.1f}{n_err:>7}"
                f"{s['server_cores']:>13.2f}{s['vs_offline']:>10.2f}{vs_inf:>11}"
            )
            results[(name, c)] = s
    for name in servers:
        got: dict[int, list[float]] = {}
        for c in counts:
            got.update(results[(name, c)]["got"])
        n, cos = check_vectors(offline, texts, got)
        # bertkit serves the offline pipeline's very computation; infinity runs another engine (ONNX fp32
        # or torch), against which bf16's rounding is the difference
        same = cos >= (0.9999 if name.startswith("bertkit") else 0.999)
        all_ok &= same
        print(
            f"  {name}: {n} distinct texts vs the offline pipeline ({offline.dtype}): min cosine {cos:.6f} -> "
            f"{'equal' if same else 'DIFFERENT'}"
        )
    top = max(counts)
    summary = [f"{name} {results[(name, top)]['vs_offline']:.2f}" for name in servers]
    print(
        f"server / offline at {top} clients: {', '.join(summary)} (target >= 0.85); "
        f"{args.rounds} x {args.seconds:g} s per server and client count; load average after: "
        f"{os.getloadavg()[0]:.2f}"
    )
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
