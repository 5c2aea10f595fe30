"""`bertkit pretrain` across two nodes: two torchrun agents on 127.0.0.1, one process each, c10d rendezvous.

This is how a cluster launches it (one agent per machine, one shared rendezvous endpoint); here both
"machines" are this one, so the test checks the multi-node path (two agents, two rendezvous participants,
ranks handed out by the rendezvous) rather than multi-process on one agent, which tests/test_ddp.py covers.

* The losses equal one process over the same global batch (2 x 4 sequences vs 1 x 8) within the
  tolerance tests/test_ddp.py uses, and so does the final model.
* Both agents killed after a checkpoint, then both relaunched with --resume: the final model equals
  the uninterrupted two-node run's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.assets import asset_path

pytestmark = pytest.mark.slow  # multi-process runs: `make test-fast` skips them

ROOT = Path(__file__).resolve().parents[1]
STEPS = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun() -> list[str]:
    exe = Path(sys.executable).parent / "torchrun"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("multinode")
    corpus = d / "text.txt"
    corpus.write_text(
        "\n".join(asset_path("austen").read_text(encoding="utf-8").splitlines()[:300])
        + "\n\n"
        + "\n".join(asset_path("wiki").read_text(encoding="utf-8").splitlines()[:100])
        + "\n"
    )
    # CPU over gloo on the loopback only: nothing here may reach another address.
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        BERTKIT_CACHE=str(d / "cache"),
        CUDA_VISIBLE_DEVICES="",
        GLOO_SOCKET_IFNAME="lo",
    )
    prep = [sys.executable, "-m", "bertkit", "prepare-data", "--corpus", str(corpus)]
    prep += ["--vocab", str(asset_path("vocab-uncased")), "--output", str(d / "data"), "--no-progress"]
    subprocess.run(prep, env=env, cwd=ROOT, check=True, capture_output=True)
    return d, env


def _args(d: Path, out: str, batch: int, *extra: str) -> list[str]:
    return [
        *("--data", str(d / "data"), "--vocab", str(asset_path("vocab-uncased")), "--config", "tiny"),
        *("--eval-instances", "16", "--eval-every", "0", "--threads", "1", "--no-progress"),
        *("--output", str(d / out), "--seq-len", "32", "--batch-size", str(batch)),
        *("--max-steps", str(STEPS), "--lr", "1e-3", "--warmup-steps", "0", "--dropout", "0.0"),
        *("--precision", "fp32", "--seed", "3", "--save-every", "5", *extra),
    ]


def _start_nodes(args: list[str], env: dict, logs: Path) -> list[subprocess.Popen]:
    """Two agents, as two machines would start them: the same rendezvous endpoint and id, one process each."""
    port = _free_port()
    procs = []
    for node in (0, 1):
        launcher = [
            *_torchrun(),
            *("--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node)),
            *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "bertkit-test"),
            *("--local-addr", "127.0.0.1", "--max-restarts", "0"),
        ]
        with open(logs / f"node{node}.err", "w") as err, open(logs / f"node{node}.out", "w") as out:
            procs.append(
                subprocess.Popen(
                    [*launcher, "-m", "bertkit", "pretrain", *args],
                    env=env,
                    cwd=ROOT,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            )
    return procs


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it (torchrun starts its workers in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def _wait(procs: list[subprocess.Popen], logs: Path) -> None:
    for node, p in enumerate(procs):
        try:
            code = p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            for pid in [pid for q in procs for pid in _tree(q.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise
        assert code == 0, (logs / f"node{node}.err").read_text()[-3000:]


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def two_nodes(setup) -> Path:
    d, env = setup
    logs = d / "logs-full"
    logs.mkdir()
    _wait(_start_nodes(_args(d, "nodes", 4), env, logs), logs)
    assert "2 process(es)" in (logs / "node0.err").read_text() + (logs / "node1.err").read_text()
    return d / "nodes"


def test_two_nodes_match_one_process_with_the_same_global_batch(setup, two_nodes):
    d, env = setup
    single = subprocess.run(
        [sys.executable, "-m", "bertkit", "pretrain", *_args(d, "single", 8)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    rows, single_rows = (
        [r for r in _rows(two_nodes) if "loss" in r],
        [r for r in _rows(d / "single") if "loss" in r],
    )
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # only one rank logged, each step once
    # The same tolerances as tests/test_ddp.py: NSP means are over equal-sized halves; MLM is
    # token-weighted per rank, so only approximately the plain mean of the global batch.
    assert [r["nsp_loss"] for r in rows] == pytest.approx([r["nsp_loss"] for r in single_rows], rel=1e-4)
    assert [r["mlm_loss"] for r in rows] == pytest.approx([r["mlm_loss"] for r in single_rows], rel=2e-2)
    two, one = load_file(two_nodes / "model.safetensors"), load_file(d / "single" / "model.safetensors")
    assert two.keys() == one.keys()
    for name in two:
        torch.testing.assert_close(two[name], one[name], atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    # Both nodes took part: each checkpoint holds both ranks' RNG states.
    assert {p.name for p in (two_nodes / "checkpoints" / f"step-{STEPS:07d}").glob("rng_rank*.pt")} == {
        "rng_rank0.pt",
        "rng_rank1.pt",
    }


def test_killed_two_node_run_resumes_to_the_same_model(setup, two_nodes):
    d, env = setup
    out = d / "nodes-killed"
    logs = d / "logs-killed"
    logs.mkdir()
    procs = _start_nodes(_args(d, out.name, 4), env, logs)
    ckpt = out / "checkpoints" / "step-0000005"
    deadline = time.time() + 300
    while not (ckpt / "rng_rank1.pt").exists():
        assert all(p.poll() is None for p in procs), (logs / "node0.err").read_text()[-3000:]
        assert time.time() < deadline
        time.sleep(0.02)
    pids = [pid for p in procs for pid in _tree(p.pid)]
    for pid in pids:  # both machines lost at once: agents and workers, no chance to clean up
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for p in procs:
        p.wait()
    killed_at = max(r["step"] for r in _rows(out) if "loss" in r)
    assert 5 <= killed_at < STEPS and not (out / "model.safetensors").exists(), killed_at  # really interrupted

    logs2 = d / "logs-resumed"
    logs2.mkdir()
    _wait(_start_nodes(_args(d, out.name, 4, "--resume"), env, logs2), logs2)
    err = (logs2 / "node0.err").read_text() + (logs2 / "node1.err").read_text()
    assert "resumed from" in err  # the newest checkpoint the kill left, step 5 or later
    a, b = load_file(two_nodes / "model.safetensors"), load_file(out / "model.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")
    assert [r["step"] for r in _rows(out) if "loss" in r] == list(range(1, STEPS + 1))
