"""`bertkit index` / `bertkit search`: exact search against brute force, resume after a kill, faiss."""

import csv
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main
from bertkit.search import build_index, load_index, read_corpus, top_k_exact


def _sentences(n: int) -> list[str]:
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:n]


def test_top_k_exact_chunked_equals_brute_force():
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((5000, 32)).astype(np.float32)
    q = rng.standard_normal((7, 32)).astype(np.float32)
    s, i = top_k_exact(vecs, q, 10, chunk=333)
    want = np.argsort(-(q @ vecs.T), axis=1)[:, :10]
    np.testing.assert_array_equal(i, want)
    np.testing.assert_allclose(s, np.take_along_axis(q @ vecs.T, want, 1), rtol=1e-5)


def test_read_corpus_formats_and_errors(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": "x1", "body": "first"}\n\n{"id": "x2", "body": "second"}\n')
    assert read_corpus(tmp_path / "a.jsonl", "body") == [("x1", "first"), ("x2", "second")]
    (tmp_path / "b.csv").write_text("label,text\npos,good film\nneg,bad film\n")
    assert read_corpus(tmp_path / "b.csv") == [("2", "good film"), ("3", "bad film")]
    with pytest.raises(ValueError, match=r"a\.jsonl:1: no string field 'text'"):
        read_corpus(tmp_path / "a.jsonl")
    (tmp_path / "c.jsonl").write_text('{"text": "ok"}\n{broken\n')
    with pytest.raises(ValueError, match=r"c\.jsonl:2: not valid JSON"):
        read_corpus(tmp_path / "c.jsonl")
    with pytest.raises(ValueError, match="no column 'body'"):
        read_corpus(tmp_path / "b.csv", "body")


def test_index_resumes_after_kill_and_search_cli(tmp_path, capsys):
    texts = _sentences(400)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "idx"
    work = tmp_path / "idx.partial"
    code = (
        f"from bertkit.search import build_index; build_index({str(asset_path('minilm'))!r}, {str(corpus)!r}, "
        f"{str(out)!r}, dtype='fp32', chunk_size=64, progress=False)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 120
    while not (work / "000001.npy").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.kill()
    proc.wait(30)
    assert not out.exists() and (work / "000000.npy").exists()
    # mark the finished chunk: a resumed run must keep it rather than embed it again
    first = np.load(work / "000000.npy")
    np.save(work / "000000.npy", -first)
    build_index(asset_path("minilm"), corpus, out, dtype="fp32", chunk_size=64, progress=False)
    assert not work.exists()
    index = load_index(out)
    assert len(index) == 400 and index.meta["dim"] == 384 and index.meta["vector_dtype"] == "float16"
    assert np.load(out / "vectors.npy").dtype == np.float16
    np.testing.assert_allclose(index.vectors[:64].astype(np.float32), -first.astype(np.float32), atol=1e-3)
    with pytest.raises(FileExistsError, match="output of an earlier `bertkit index`; pass overwrite=True"):
        build_index(asset_path("minilm"), corpus, out, progress=False)

    assert cli_main(["search", "--index", str(out), texts[200], "--top-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"query: {texts[200]}" and lines[1].endswith(f"[201] {texts[200]}")
    assert float(lines[1].split()[0]) == pytest.approx(1.0, abs=3e-3)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["count"] == 400 and meta["normalized"]


def test_faiss_backends_agree_with_exact(tmp_path):
    pytest.importorskip("faiss")
    texts = _sentences(300)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"s{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    out = build_index(
        asset_path("minilm"), corpus, tmp_path / "idx", dtype="fp32", progress=False, vector_dtype="float32"
    )
    exact = load_index(out)
    q = np.asarray(exact.vectors[:50], np.float32)
    _, want = exact.search_ids(q, 10)
    for backend in ("faiss", "faiss-ivf"):
        idx = load_index(out, backend=backend)
        _, got = idx.search_ids(q, 10)
        assert (got[:, 0] == np.arange(50)).mean() >= 0.95, backend  # each vector finds itself
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want)])
        assert recall >= 0.8, (backend, recall)
        assert idx.search(q[:1], 1)[0][0]["id"] == "s0"
