"""Run ``bertkit serve`` as a child process on a free local port (for tests, benchmarks and scripts)."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["ServerProcess", "exit_with_parent", "free_port", "server_process"]

PARENT_ENV = "BERTKIT_SERVE_PARENT"  # the pid of the `bertkit serve` process that started the workers


def exit_with_parent(parent: int | None = None, poll_s: float = 1.0, grace_s: float = 10.0) -> None:
    """Make this worker process end when its parent (``parent``, else the pid in ``$BERTKIT_SERVE_PARENT``,
    else the current parent) dies, even by ``kill -9``: orphaned workers would keep answering on the port.

    On Linux the kernel sends SIGTERM at the parent's death (``prctl(PR_SET_PDEATHSIG)``); everywhere a
    daemon thread also watches the parent pid, sends SIGTERM (a drain), and exits after ``grace_s``."""
    import threading

    if parent is None:
        parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # the watchdog below still ends the worker

    def orphaned() -> bool:
        return os.getppid() != parent

    def watch() -> None:
        while not orphaned():
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)  # the drain did not finish: leave anyway, nobody is left to stop us

    threading.Thread(target=watch, name="bertkit-parent-watchdog", daemon=True).start()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerProcess:
    """A started server: ``url``, ``proc``; ``stop()`` sends SIGTERM and returns the exit code."""

    def __init__(self, proc: subprocess.Popen, url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise RuntimeError(f"server did not exit within {timeout} s of SIGTERM; log: {self.log}") from None


@contextlib.contextmanager
def server_process(
    model: str | os.PathLike,
    args: Sequence[str] = (),
    log: str | os.PathLike | None = None,
    start_timeout: float = 180.0,
    env: dict[str, str] | None = None,
) -> Iterator[ServerProcess]:
    """Start ``bertkit serve --model MODEL --port <free> ARGS``; yield once GET /health answers; stop on exit.

    Without ``log``, the server's output goes to a new temporary file, removed after a clean stop and
    kept (its path in the error) when anything failed.
    """
    port = free_port()
    if log:
        log_path = Path(log)
    else:
        fd, name = tempfile.mkstemp(prefix=f"bertkit-serve-{port}-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    cmd = [sys.executable, "-m", "bertkit", "serve", "--model", str(model), "--port", str(port), *args]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log_path)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"server exited with {proc.returncode}; log: {log_path}\n{tail}")
            try:
                with urllib.request.urlopen(server.url + "/health", timeout=2) as r:
                    if json.load(r).get("status") == "ok":
                        break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready after {start_timeout} s; log: {log_path}")
            time.sleep(0.25)
        yield server
    except BaseException:
        if proc.poll() is None:
            server.stop()
        raise
    if proc.poll() is None:
        server.stop()
    if not log:
        log_path.unlink(missing_ok=True)
