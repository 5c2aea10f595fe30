"""The tour in Chinese: docs/zh/understanding-bert.md runs as written under docs/run_tour.py (printed
numbers within the runner's stated tolerances, tokens and shapes exactly), and its notebook runs under
nbclient on an ipykernel with its report in Chinese."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_chinese_tour_runs_as_written(tmp_path):
    pytest.importorskip("jieba")
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    r = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "run_tour.py"), str(ROOT / "docs" / "zh" / "understanding-bert.md")]
        + ["--workdir", str(tmp_path)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    assert "0 drifted" in r.stdout


def test_the_chinese_notebook_runs(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("jieba")
    nb = nbformat.read(ROOT / "docs" / "zh" / "understanding-bert.ipynb", as_version=4)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    src = str(ROOT / "src")
    if src not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = src + os.pathsep + os.environ.get("PYTHONPATH", "")
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "北京是中国的首都 -> ['北', '京', '是', '中', '国', '的', '首', '都']" in text
    assert "第 0 层: 两个 bank 向量的余弦 1.000" in text
    assert "jieba: 自然语言 / 处理 / 是 / 人工智能" in text
    pages = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert len(pages) == 1 and "lang=&quot;zh&quot;" in pages[0] and "1. 分词" in pages[0]
