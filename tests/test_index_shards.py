"""`bertkit index` over many input files, and sharded indexes (`--shard-size`), in one process, with the real
MiniLM checkpoint and real polarity sentences.

* Several files (listed, a folder, a glob) are read in file order, then line order; a row without an id
  is named FILE_NAME:LINE; a bad row names its own file and line; an id given in two files is refused.
* A sharded index holds the one-folder index's rows and fp32 vectors, bit for bit, and `bertkit search`
  answers it as it answers the one-folder index; so does `bertkit serve --index` over HTTP.
* A build killed while it writes its shards resumes: the finished shards are kept (the same folders),
  a damaged one is redone, none is written twice; a shard that does not match the manifest is refused.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.cli import main

MINILM = str(asset_path("minilm"))
ROOT = Path(__file__).resolve().parents[1]
ROWS, SHARD = 60, 7  # 9 shards, the last of 4 rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three files of polarity sentences (.jsonl with ids, .txt, .csv without ids) and the one-folder index."""
    import torch

    from bertkit.search.index import build_index, load_index

    d = tmp_path_factory.mktemp("shards")
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        texts = [r["text"].replace("\n", " ") for r in csv.DictReader(f)][:ROWS]
    (d / "in").mkdir()
    files = [d / "in" / "a.jsonl", d / "in" / "b.txt", d / "in" / "c.csv"]
    files[0].write_text("".join(json.dumps({"id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(texts[:20])))
    files[1].write_text("".join(t + "\n" for t in texts[20:40]))
    with open(files[2], "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text"])
        w.writerows([t] for t in texts[40:])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        build_index(MINILM, files, d / "one", dtype="fp32", vector_dtype="float32", chunk_size=16, progress=False)
    finally:
        torch.set_num_threads(threads)
    return files, texts, load_index(d / "one")


def test_many_files_keep_file_then_line_order(corpus, tmp_path, capsys):
    from bertkit.search.index import corpus_files, read_corpus_files

    files, texts, one = corpus
    assert one.texts == texts
    assert one.ids == [f"p{i}" for i in range(20)] + [f"b.txt:{n}" for n in range(1, 21)] + [
        f"c.csv:{n}" for n in range(2, 22)
    ]
    folder = files[0].parent
    assert corpus_files(folder) == corpus_files(str(folder / "*.*")) == files  # a folder's files by name
    assert corpus_files([files[2], files[0]]) == [files[2], files[0]]  # listed: in the order given
    rows = read_corpus_files([files[1]])
    assert [r[2] for r in rows[:2]] == ["1", "2"]  # one file: its ids as `index` of one file names them

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x1", "text": "fine"}\n{"id": "x2", "body": "no text field"}\n')
    base = ["index", "--model", MINILM, "--output", str(tmp_path / "o")]
    assert main([*base, "--input", str(files[0]), str(bad)]) == 1
    assert capsys.readouterr().err.splitlines()[0].endswith(f"{bad}:2: no string field 'text' (use --text-column)")
    again = tmp_path / "again.jsonl"
    again.write_text('{"id": "q", "text": "new"}\n{"id": "p3", "text": "fine"}\n')
    assert main([*base, "--input", str(files[0]), str(again)]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"bertkit index: error: {again}:2: id 'p3' is already the id of {files[0]}:4; ids must be unique"
    )
    assert main([*base, "--input", str(tmp_path / "none-*.jsonl")]) == 1
    assert capsys.readouterr().err.splitlines()[0].endswith(f"{tmp_path}/none-*.jsonl: no file matches this pattern")
    assert not (tmp_path / "o").exists()


def _sharded(out: Path):
    from bertkit.search.index import open_index

    index = open_index(out)
    return index, np.concatenate([s.vectors for s in index.shards]), [i for s in index.shards for i in s.ids]


def test_a_sharded_index_equals_the_one_folder_index(corpus, tmp_path, capsys):
    import torch

    from bertkit.search.index import build_index, load_index

    files, texts, one = corpus
    torch.set_num_threads(1)
    out = tmp_path / "sharded"
    build_index(
        MINILM, files, out, dtype="fp32", vector_dtype="float32", chunk_size=16, progress=False, shard_size=SHARD
    )
    index, vectors, ids = _sharded(out)
    assert [len(s) for s in index.shards] == [SHARD] * (ROWS // SHARD) + [ROWS % SHARD]
    assert ids == one.ids and np.array_equal(vectors, one.vectors)  # fp32: bit for bit
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["count"], manifest["dim"], manifest["model"]) == (ROWS, 384, one.meta["model"])
    assert manifest["source"] == [str(f) for f in files]
    with pytest.raises(ValueError, match="is a sharded index"):
        load_index(out)  # --append and delete change one folder

    queries = [texts[3][:40], texts[45][:30], "a dull film"]
    assert main(["search", "--index", str(one.path), *queries]) == 0
    want = capsys.readouterr().out
    assert main(["search", "--index", str(out), *queries]) == 0
    assert capsys.readouterr().out == want and sum(line.startswith("  ") for line in want.splitlines()) == 30
    assert main(["search", "--index", str(out), "--lexical-weight", "0.5", "x"]) == 1
    assert "hybrid search (--lexical-weight) needs one index folder" in capsys.readouterr().err

    shard = out / "shard-00002" / "texts.jsonl"
    shard.write_text(shard.read_text().replace('"id": "p14"', '"id": "P14"'))
    assert main(["search", "--index", str(out), "x"]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"bertkit search: error: {out / 'shard-00002'} does not match {out / 'manifest.json'} "
        "(texts.jsonl's checksum differs); rebuild the index"
    )


_DRIVER = """
import sys, torch
from bertkit.search.index import build_index
torch.set_num_threads(1)
build_index(sys.argv[1], sys.argv[2:-1], sys.argv[-1], dtype="fp32", vector_dtype="float32", chunk_size=16,
            progress=False, shard_size=1)
"""


def test_a_build_killed_while_writing_shards_keeps_the_finished_ones(corpus, tmp_path):
    from bertkit.search.index import build_index

    files, texts, one = corpus
    out = tmp_path / "sharded"
    work = out.with_name(out.name + ".partial")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER, MINILM, *map(str, files), str(out)], env=env, cwd=ROOT)
    deadline = time.time() + 120
    while not (work / "shard-00004").exists():  # one row a shard: 60 shards, written one after another
        assert driver.poll() is None and time.time() < deadline
        time.sleep(0.001)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    done = sorted(p.name for p in work.glob("shard-[0-9]*"))
    assert 5 <= len(done) < ROWS and not out.exists()
    kept = {n: (work / n).stat().st_ino for n in done}
    damaged = work / done[1] / "vectors.npy"
    damaged.write_bytes(damaged.read_bytes()[:-4] + b"\1\2\3\4")  # changed since written: redone

    build_index(
        MINILM, files, out, dtype="fp32", vector_dtype="float32", chunk_size=16, progress=False, shard_size=1
    )  # fmt: skip
    assert sorted(p.name for p in out.glob("shard-*")) == [f"shard-{k:05d}" for k in range(ROWS)]
    del kept[done[1]]
    assert {n: (out / n).stat().st_ino for n in kept} == kept  # moved into the index, not written again
    assert not work.exists()
    _, vectors, ids = _sharded(out)
    assert ids == one.ids and np.array_equal(vectors, one.vectors)


def test_serve_answers_a_sharded_index_as_the_one_folder_index(corpus, tmp_path):
    """`bertkit serve --index SHARDED` over real HTTP: /search gives the library's hits on the one-folder
    index; hybrid search, whose BM25 statistics need the whole collection, is refused by name."""
    import httpx
    import torch

    from bertkit.search import embed_queries
    from bertkit.search.index import build_index
    from bertkit.serving.process import server_process

    files, texts, one = corpus
    torch.set_num_threads(1)
    out = tmp_path / "sharded"
    build_index(
        MINILM, files, out, dtype="fp32", vector_dtype="float32", chunk_size=16, progress=False, shard_size=SHARD
    )
    queries = [texts[3][:40], texts[45][:30], "a dull film"]
    want = one.search(embed_queries(MINILM, queries, dtype="fp32"), 5, queries)
    with server_process(MINILM, ["--dtype", "fp32", "--index", str(out)]) as srv:
        r = httpx.post(srv.url + "/search", json={"inputs": queries, "top_k": 5}, timeout=60)
        assert r.status_code == 200, r.text
        got = r.json()["results"]
        assert [[h["id"] for h in hits] for hits in got] == [[h["id"] for h in hits] for hits in want]
        for g, w in zip(got, want):
            assert [h["score"] for h in g] == pytest.approx([h["score"] for h in w], abs=1e-5)
        info = httpx.get(srv.url + "/info", timeout=30).json()
        assert info["index"]["size"] == ROWS
        r = httpx.post(srv.url + "/search", json={"inputs": "x", "lexical_weight": 0.5}, timeout=30)
        assert r.status_code == 422 and r.json()["error"] == (
            f"field 'lexical_weight': {out} is a sharded index; "
            "hybrid search (lexical_weight > 0) needs one index folder"
        )
    with pytest.raises(RuntimeError, match="is a sharded index: hybrid search"):
        with server_process(MINILM, ["--dtype", "fp32", "--index", str(out), "--lexical-weight", "0.3"]):
            pass
