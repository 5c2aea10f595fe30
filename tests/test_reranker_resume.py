"""`bertkit train-reranker` killed with SIGKILL after a checkpoint and resumed with `--resume` ends with
the same weights and the same per-step losses as a run that was never interrupted: bit for bit
(tolerance 0), on the real MiniLM checkpoint and real BBC sentences, one thread."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import kill_when_written, logged_losses
from safetensors.torch import load_file

from bertkit.assets import asset_path

ROOT = Path(__file__).resolve().parents[1]
MINILM = str(asset_path("minilm"))


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    """query = an article's first sentence; label 1 for its next sentence, 0 for another article's."""
    heads, nexts = [], []
    for line in open(asset_path("bbcnews-test"), encoding="utf-8"):
        s = [x for x in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(x) > 20]
        if len(s) >= 2:
            heads.append(s[0])
            nexts.append(s[1])
        if len(heads) == 24:
            break
    rows = []
    for i, q in enumerate(heads):
        other = nexts[(i + 7) % 24]
        rows += [{"query": q, "passage": nexts[i], "label": 1}, {"query": q, "passage": other, "label": 0}]
    path = tmp_path_factory.mktemp("rerank-data") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cmd(train: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bertkit",
        "train-reranker",
        "--model",
        MINILM,
        "--train",
        str(train),
        "--output",
        str(out),
        "--loss",
        "listwise",
        "--group-size",
        "3",
        "--batch-size",
        "4",
        "--max-length",
        "48",
        "--max-steps",
        "8",
        "--save-every",
        "2",
        "--no-progress",
        *extra,
    ]


@pytest.mark.slow
def test_sigkill_after_a_checkpoint_then_resume_equals_the_uninterrupted_run(train_file, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full = tmp_path / "full"
    r = subprocess.run(_cmd(train_file, full), env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]

    out = tmp_path / "cut"
    kill_when_written(_cmd(train_file, out), out / "checkpoints" / "step-0000002", env)
    assert not (out / "model.safetensors").exists()  # really interrupted before the end
    assert max(s for s, _ in logged_losses(out)) < 8

    r = subprocess.run(_cmd(train_file, out, "--resume"), env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resumed from" in r.stderr
    assert logged_losses(out) == logged_losses(full) and [s for s, _ in logged_losses(full)] == list(range(1, 9))
    a, b = load_file(str(full / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(str(asset_path("minilm") / "model.safetensors"))
    key = "bert.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(start[key.removeprefix("bert.")], a[key])  # it trained
