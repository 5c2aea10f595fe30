"""`bertkit index --ray` on a real Ray cluster that the test starts on 127.0.0.1 (`ray start --head` and a
worker node, `ray start --address HEAD`, one CPU and a 300 MB object store each, each in its own temp
folder), with the real MiniLM checkpoint and real polarity sentences.

* Two actors, one on each node; the worker node's one killed as the first chunks come back: Ray
  restarts it and its chunk is embedded again; every chunk is saved once, and the index equals the
  one-process `index` (the same ids and order, fp32 vectors equal to the bit).
* The corpus in two files, written as a sharded index: its shards hold the one-process index's rows
  and vectors, and a search of it answers as the one-process index does.
* A job stopped (its driver killed) resumes: the rerun embeds only the missing chunks.
* The corpus files are read as a Ray dataset, each in a worker process of the cluster, and come back in
  file order.
* A bad row names its file and line (the second of two files, read on the cluster); an unreachable
  address is one line naming it; a missing extra is the one-line hint.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("ray") is None:  # the ray extra; not imported here, see the cluster fixture
    pytest.skip("the ray extra is not installed", allow_module_level=True)

from bertkit.assets import asset_path  # noqa: E402
from bertkit.cli import main  # noqa: E402

pytestmark = pytest.mark.slow  # starts a Ray cluster: `make test-fast` skips it

MINILM = str(asset_path("minilm"))
ROOT = Path(__file__).resolve().parents[1]
ROWS, CHUNK = 300, 5  # 60 chunks: the kills below land while most are still to come


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# `ray start`, except that it starts a worker node while multi-node clusters are off: off, every process
# keeps 127.0.0.1 as it is (on, Ray swaps it for the machine's outward address, where nothing of this
# cluster listens), and only `ray start --address` itself checks the switch, to refuse
_RAY_START = """
import sys, types
import ray._private.ray_constants as constants
import ray.scripts.scripts as scripts
scripts.ray_constants = types.ModuleType("ray_constants")
scripts.ray_constants.__dict__.update(vars(constants), ENABLE_RAY_CLUSTER=True)
sys.argv[0] = "ray"
sys.exit(scripts.main())
"""


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _RAY_START, "start", "--block", "--node-ip-address", "127.0.0.1", *args],
        env=env,
        stdout=open(log, "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _started(node: subprocess.Popen, log: Path, deadline: float) -> None:
    while "Ray runtime started" not in log.read_text():
        assert node.poll() is None and time.time() < deadline, log.read_text()[-2000:]
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A two-node Ray cluster on 127.0.0.1 (a head and a worker node, one CPU each), this process its
    driver; every process it started is ended after. Yields (address, env, log folder, [head, worker])."""
    d = tmp_path_factory.mktemp("ray")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "RAY_USAGE_STATS_ENABLED": "0",
        # Ray picks the machine's outward address for its nodes unless told this is a one-machine cluster
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        # a cluster on the loopback, this test's own: no token, whatever ~/.ray/auth_token another run left
        "RAY_AUTH_MODE": "disabled",
        "OMP_NUM_THREADS": "1",
    }
    port = _free_port()
    # Ray's sockets live under --temp-dir, and a Unix socket's path holds at most 107 bytes: pytest's
    # folders are too deep for it, so the cluster's files go in a short folder of their own
    short = [Path(tempfile.mkdtemp(prefix="rk", dir="/tmp")) for _ in range(2)]
    node = ("--num-cpus", "1", "--object-store-memory", str(300 * 2**20), "--disable-usage-stats")
    head = _start(
        ["--head", "--port", str(port), "--include-dashboard", "false", "--temp-dir", str(short[0]), *node],
        d / "head.log",
        env,
    )
    nodes = [head]
    with pytest.MonkeyPatch.context() as mp:
        # read when ray is first imported: a driver imported without them resolves 127.0.0.1 to the
        # machine's outward address, where this cluster does not listen
        for key in ("RAY_USAGE_STATS_ENABLED", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_MODE"):
            mp.setenv(key, env[key])
        assert "ray" not in sys.modules, "ray was imported before this fixture set its environment"
        import ray

        address = f"127.0.0.1:{port}"
        deadline = time.time() + 120
        try:
            # joined only once the head says it is up: a driver that comes too early can wait on its GCS for ever
            _started(head, d / "head.log", deadline)
            nodes.append(_start(["--address", address, "--temp-dir", str(short[1]), *node], d / "worker.log", env))
            _started(nodes[1], d / "worker.log", deadline)
            ray.init(address=address, log_to_driver=False)
            while sum(n["Alive"] for n in ray.nodes()) < 2:  # the worker node registered with the head
                assert time.time() < deadline, (d / "worker.log").read_text()[-2000:]
                time.sleep(0.2)
            yield address, env, d, nodes
        finally:
            ray.shutdown()
            for pid in [p for n in nodes for p in _tree(n.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for n in nodes:
                n.wait()
            for folder in short:
                shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The corpus and its one-process index (fp32, one thread: what each actor runs)."""
    import torch

    from bertkit.search.index import build_index, load_index

    d = tmp_path_factory.mktemp("ray-corpus")
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)][:ROWS]
    path = d / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        build_index(MINILM, path, d / "one", dtype="fp32", vector_dtype="float32", chunk_size=CHUNK, progress=False)
    finally:
        torch.set_num_threads(threads)
    return path, load_index(d / "one")


def _same(folder: Path, one) -> None:
    from bertkit.search.index import load_index

    got = load_index(folder)
    assert got.ids == one.ids and got.texts == one.texts
    assert np.array_equal(got.vectors, one.vectors)  # fp32: bit for bit
    assert {k: v for k, v in got.meta.items() if k != "source"} == {k: v for k, v in one.meta.items() if k != "source"}


def _chunks(work: Path) -> int:
    return len(list(work.glob("[0-9]*.npy"))) if work.is_dir() else 0


def test_a_killed_actor_is_retried_and_the_index_equals_one_process(cluster, corpus, tmp_path):
    from bertkit.search.index import build_index
    from bertkit.search.ray_index import RayChunks

    address, env, d, nodes = cluster
    path, one = corpus
    out = tmp_path / "ray"
    step = RayChunks(Path(MINILM), actors=2, threads=1, dtype="fp32")
    failed: list[BaseException] = []

    def job() -> None:
        try:
            build_index(
                MINILM, path, out, dtype="fp32", vector_dtype="float32", chunk_size=CHUNK, progress=False,
                chunk_embedder=step,
            )  # fmt: skip
        except BaseException as e:  # noqa: BLE001
            failed.append(e)

    worker = threading.Thread(target=job)
    worker.start()
    work = out.with_name(out.name + ".partial")
    deadline = time.time() + 240
    while _chunks(work) == 0:
        assert worker.is_alive() and time.time() < deadline, failed
        time.sleep(0.01)
    actors = [[p for p in _tree(n.pid) if "MapWorker(MapBatches(_ChunkEmbedder))" in _cmdline(p)] for n in nodes]
    assert actors[0] and actors[1], f"an actor on each node: {actors}"
    done_at_kill = len(step.written)
    os.kill(actors[1][0], signal.SIGKILL)  # the worker node's
    worker.join(300)
    assert not worker.is_alive() and not failed, failed
    assert done_at_kill < ROWS // CHUNK  # the kill landed mid-job
    assert sorted(step.written) == list(range(ROWS // CHUNK))  # every chunk saved once, none lost
    _same(out, one)


_DRIVER = """
import sys
from bertkit.search.ray_index import build_index_ray
build_index_ray(sys.argv[1], sys.argv[2], sys.argv[3], address=sys.argv[4], actors=1, chunk_size=int(sys.argv[5]),
                dtype="fp32", vector_dtype="float32", progress=False)
"""


def test_a_stopped_job_resumes_with_the_missing_chunks(cluster, corpus, tmp_path):
    from bertkit.search.ray_index import build_index_ray

    address, env, d, nodes = cluster
    path, one = corpus
    out = tmp_path / "ray"
    work = out.with_name(out.name + ".partial")
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, MINILM, str(path), str(out), address, str(CHUNK)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    while _chunks(work) < 3:
        assert driver.poll() is None and time.time() < deadline
        time.sleep(0.01)
    driver.send_signal(signal.SIGKILL)  # the job stopped: its driver gone, its actors with it
    driver.wait()
    left = _chunks(work)
    assert 3 <= left < ROWS // CHUNK
    said: list[str] = []
    build_index_ray(
        MINILM, path, out, address=address, chunk_size=CHUNK, say=said.append,
        dtype="fp32", vector_dtype="float32", progress=False,
    )  # fmt: skip
    assert said == [
        f"{left} of {ROWS // CHUNK} chunk(s) already done; "
        f"embedding {ROWS // CHUNK - left} on 1 Ray actor(s) of 1 thread(s)"
    ]
    _same(out, one)


def test_bad_input_and_faults_are_one_line(cluster, tmp_path, monkeypatch, capsys):
    address, *_ = cluster
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text('{"id": 0, "text": "fine"}\n')
    bad.write_text('{"id": 1, "text": "fine"}\n{"id": 2, "body": "no text field"}\n')
    base = ["index", "--model", MINILM, "--input", str(good), str(bad), "--output", str(tmp_path / "o")]
    assert main([*base, "--ray", address]) == 1
    assert f"{bad}:2: no string field 'text'" in capsys.readouterr().err.splitlines()[0]

    port = _free_port()  # nothing listens there
    assert main([*base, "--ray", f"127.0.0.1:{port}"]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"bertkit index: error: Ray cluster at 127.0.0.1:{port} is unreachable: Connection refused"
    )
    monkeypatch.setitem(sys.modules, "ray", None)  # as if `bertkit[ray]` were not installed
    assert main([*base, "--ray", address]) == 2
    assert capsys.readouterr().err.strip() == (
        "bertkit index: error: bertkit index --ray needs ray, which is not installed: pip install 'bertkit[ray]'"
    )
    assert not (tmp_path / "o").exists()


def test_the_corpus_files_are_read_by_the_cluster_in_file_order(cluster, tmp_path):
    """Each file is read in a Ray worker process, not in the driver, and the results come back in file
    order whichever task finishes first, whole when sent in many pieces."""
    from bertkit.search.ray_index import ray_map_files

    files = [tmp_path / f"{k}.txt" for k in range(5)]
    for k, f in enumerate(files):
        f.write_text("x\n" * (k + 1))
    got = ray_map_files(lambda p: (p.name, len(p.read_text().splitlines()), os.getpid()), files)
    assert [(name, n) for name, n, _ in got] == [(f.name, k + 1) for k, f in enumerate(files)]
    assert os.getpid() not in {pid for *_, pid in got}
    # a file's result comes back in pieces (of 64 MiB unless told): 7 bytes a piece here, put back in order
    big = ray_map_files(lambda p: [p.name] * 50, files[:2], piece_bytes=7)
    assert big == [[f.name] * 50 for f in files[:2]]


def test_many_files_to_a_sharded_index(cluster, corpus, tmp_path):
    from bertkit.search.index import open_index, top_k_exact
    from bertkit.search.ray_index import build_index_ray

    address, *_ = cluster
    path, one = corpus
    lines = path.read_text().splitlines(keepends=True)
    files = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]  # the same rows, ids and order as the one file
    files[0].write_text("".join(lines[:45]))
    files[1].write_text("".join(lines[45:100]))
    out = tmp_path / "sharded"
    build_index_ray(
        MINILM, files, out, address=address, actors=2, chunk_size=CHUNK, shard_size=30,
        dtype="fp32", vector_dtype="float32", progress=False,
    )  # fmt: skip
    index = open_index(out)
    assert [len(s) for s in index.shards] == [30, 30, 30, 10]
    assert [i for s in index.shards for i in s.ids] == one.ids[:100]
    vectors = np.concatenate([s.vectors for s in index.shards])
    assert np.array_equal(vectors, one.vectors[:100])  # fp32: bit for bit (the same chunks)
    queries = one.vectors[[3, 50, 99]] + 0.01
    got = index.search_ids(queries, 5)
    want = top_k_exact(vectors, queries, 5)
    assert np.array_equal(got[1], want[1]) and np.allclose(got[0], want[0], rtol=0, atol=1e-6)
