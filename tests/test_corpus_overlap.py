"""A pretraining corpus that holds the evaluation data is refused (`bertkit pretrain --eval-data`).

* A test sentence inside a longer corpus line is found whatever its case and spacing; a short one
  only as a whole line (short phrases recur by chance).
* On the real assets: BBC News repeats articles across the seeded splits, and every repeated
  article (found here by plain string equality) is found; the polarity reviews hold none of the
  polarity test sentences.
* The command refuses such a corpus with one line naming the corpus file and line and the
  evaluation file and line, and writes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bertkit.assets import asset_path
from bertkit.data.overlap import MIN_WORDS, eval_texts, find_overlap

ROOT = Path(__file__).resolve().parents[1]


def _polarity_test_texts() -> list[str]:
    from bertkit.data.readers import read_table

    return [e.text for e in read_table(asset_path("polarity-test"))]


def test_containment_and_short_lines(tmp_path):
    texts = _polarity_test_texts()
    long = next(t for t in texts if len(t.split()) >= 2 * MIN_WORDS)
    short = next(t for t in texts if 2 <= len(t.split()) < MIN_WORDS - 2 and t.isascii())
    index = eval_texts([str(asset_path("polarity-test"))])
    assert index.find("Some words before.  " + long.upper().replace(" ", "  ") + " and after") is not None
    assert index.find(" ".join(long.split()[1:])) is None  # a test sentence missing its first word
    assert index.find(short) is not None
    assert index.find("a line that merely holds " + short + " in it") is None

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("an unrelated first line .\n\nintro : " + long + " (end)\n", encoding="utf-8")
    found = find_overlap([str(corpus)], [str(asset_path("polarity-test"))])
    assert found and f"{corpus} line 3" in found and "polarity" in found


def test_real_assets():
    def articles(name: str) -> list[str]:
        return [json.loads(line)["text"] for line in asset_path(name).read_text(encoding="utf-8").splitlines()]

    train, test = articles("bbcnews-train"), articles("bbcnews-test")
    repeated = set(train) & set(test)
    assert repeated  # the data set itself repeats articles; the split does not dedupe them
    index = eval_texts([str(asset_path("bbcnews-test"))])
    assert all(index.find(a) is not None for a in repeated)

    from bertkit.data.readers import read_table

    pol = eval_texts([str(asset_path("polarity-test"))])
    reviews = [e.text for e in read_table(asset_path("polarity-reviews"))]
    assert len(reviews) == 1500 and not any(pol.find(r) for r in reviews)


def test_pretrain_refuses_overlapping_corpus(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "bertkit", "pretrain", "--corpus", str(asset_path("bbcnews-train"))]
    cmd += ["--eval-data", str(asset_path("bbcnews-test")), "--vocab", str(asset_path("vocab-uncased"))]
    cmd += ["--config", "tiny", "--max-steps", "2", "--output", str(out), "--no-progress"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = next(x for x in r.stderr.splitlines() if "error:" in x)
    assert str(asset_path("bbcnews-train")) in line and "line" in line and str(asset_path("bbcnews-test")) in line
    assert not out.exists()
