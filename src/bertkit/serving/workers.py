"""``bertkit serve --workers N``: N server processes on one port, each with a listening socket of its own.

One socket shared by the workers (uvicorn's own ``--workers``) hands each new connection to whichever
worker wakes first, so a burst of keep-alive connections piles onto one of them: 31 of 32 benchmark
clients were seen on one worker while the other idled, and throughput was a lottery between runs.
Here every worker binds the port with ``SO_REUSEPORT``, and the kernel spreads new connections over the
listening sockets by a hash of their addresses. The parent only supervises: it starts the workers, starts
a new one when one dies, and on SIGTERM or SIGINT tells each to drain and waits for them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

from .process import PARENT_ENV

__all__ = ["CONFIG_ENV", "listening_socket", "run_workers"]

logger = logging.getLogger("bertkit.serve")

CONFIG_ENV = "BERTKIT_SERVE_CONFIG"  # the ServeConfig of the workers, as JSON
_WORKER = "from bertkit.serving.app import worker_main; worker_main()"  # see app.worker_main


def listening_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``SO_REUSEPORT``: beside the other workers'); a taken port
    or an address that cannot be bound fails in one line naming it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


def run_workers(config: Any) -> int:  # config: bertkit.serving.app.ServeConfig
    """Serve ``config`` with ``config.workers`` processes until SIGTERM or SIGINT; returns 0.

    The port is checked before any model loads, so a taken one fails in one line at once."""
    listening_socket(config.host, config.port, reuse_port=False).close()
    env = {**os.environ, CONFIG_ENV: json.dumps(asdict(config)), PARENT_ENV: str(os.getpid())}
    stopping = threading.Event()

    def start() -> subprocess.Popen:
        # a fresh interpreter, not a fork: torch's threads and the model are never copied half-made
        return subprocess.Popen([sys.executable, "-c", _WORKER], env=env)

    procs = [start() for _ in range(config.workers)]

    def stop(signum: int, frame: Any) -> None:
        stopping.set()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # each drains its in-flight requests

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(
        f"bertkit serve: {config.model} in {config.workers} worker processes (pids "
        f"{', '.join(str(p.pid) for p in procs)}); http://{config.host}:{config.port} (docs at /docs)",
        flush=True,
    )
    started = time.monotonic()
    while not stopping.wait(0.5):
        for i, p in enumerate(procs):
            if p.poll() is not None and not stopping.is_set():
                if time.monotonic() - started < 60 and p.returncode != 0:
                    # one that fails while starting (a bad folder, a taken port) would fail again
                    stop(signal.SIGTERM, None)
                    break
                logger.warning("worker %d (pid %d) exited with %s; starting another", i, p.pid, p.returncode)
                procs[i] = start()
    deadline = time.monotonic() + config.request_timeout + 10
    code = 0
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
        code = code or (p.returncode if p.returncode not in (0, -signal.SIGTERM) else 0)
    return code
