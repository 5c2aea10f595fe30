"""docs/understanding-bert.md runs as written: every code block, with the output the page shows."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _runner():
    spec = importlib.util.spec_from_file_location("run_tour", ROOT / "docs" / "run_tour.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_output_comparison_catches_drift():
    m = _runner()
    assert m.output_matches("accuracy 56.2%\n", "accuracy 56.3%\n")  # last printed digit
    assert m.output_matches("accuracy 56%\n", "accuracy 58%\n")  # 2 points on a trained model's rate
    assert not m.output_matches("accuracy 56.2%\n", "accuracy 58.3%\n")
    assert not m.output_matches("accuracy 56%\n", "accuracy 0.56\n")
    # a loss after 40 bf16 steps on another CPU's kernel: relative 1e-3, not the last digit
    assert m.output_matches("MLM loss 7.5803\n", "MLM loss 7.5781\n")
    assert not m.output_matches("MLM loss 7.5803\n", "MLM loss 7.5603\n")
    assert m.output_matches("|sum| 3.34\n", "|sum| 3.35\n")  # 1.5 units of the last digit
    assert not m.output_matches("|sum| 3.34\n", "|sum| 3.37\n")
    # integers are ids, counts and shapes: exact
    assert not m.output_matches("[101, 7592, 1010]\n", "[101, 7593, 1010]\n")
    assert not m.output_matches("tables: (30522, 384)\n", "tables: (30522, 385)\n")
    assert not m.output_matches("['un', '##heard']\n", "['unheard']\n")
    assert m.output_matches("ok  max|diff| 9.54e-07  x\n", "ok  max|diff| 3.10e-07  x\n")  # rounding noise
    assert not m.output_matches("ok  max|diff| 9.54e-07  x\n", "FAIL  max|diff| 2.00e-02  x\n")
    assert m.output_matches("a\n...\nz\n", "a\nb\nc\nz\n")
    assert not m.output_matches("a\n...\nz\n", "a\nb\nc\n")
    assert not m.output_matches("a\nb\n", "a\nb\nc\n")


@pytest.mark.slow
def test_understanding_bert_runs_as_written(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    r = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "run_tour.py"), "--workdir", str(tmp_path)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    assert "0 drifted" in r.stdout
    assert (tmp_path / "runs" / "tour" / "hello.html").stat().st_size > 10_000
