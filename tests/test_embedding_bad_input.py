"""Bad input to the embedding commands ends with exit code 1 and exactly one line naming the file, the
line and the value, with no traceback and no output folder left behind (real MiniLM, real BBC text).
The server's refusals (`/v1/embeddings` `dimensions` above the model's size: 400; `/rerank` on a model
that is not a cross-encoder: 424) are checked over HTTP in tests/test_embedding_api.py."""

import csv
import json

import pytest

from bertkit.assets import asset_path
from bertkit.cli import main

MINILM = str(asset_path("minilm"))


def _one_line(capsys, argv: list[str]) -> str:
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("bertkit ")]
    assert rc == 1 and len(lines) == 1, (rc, err)
    return lines[0]


@pytest.fixture(scope="module")
def texts():
    return [json.loads(x)["text"][:200] for x in open(asset_path("bbcnews-test"), encoding="utf-8")][:6]


def test_train_embedder_row_without_positive(tmp_path, capsys, texts):
    bad = tmp_path / "pairs.jsonl"
    rows = [{"anchor": texts[0], "positive": texts[1]}, {"anchor": texts[2], "postive": texts[3]}]
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o"
    line = _one_line(capsys, ["train-embedder", "--model", MINILM, "--train", str(bad), "--output", str(out)])
    assert f"{bad}:2: no text in column 'positive'" in line and not out.exists()


def test_cosent_score_outside_its_range(tmp_path, capsys, texts):
    bad = tmp_path / "sts.csv"
    with open(bad, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows([["sentence1", "sentence2", "score"], [texts[0], texts[1], 3.5]])
    out = tmp_path / "o"
    argv = ["train-embedder", "--model", MINILM, "--train", str(bad), "--loss", "cosent", "--output", str(out)]
    assert f"{bad}:2: score 3.5 is outside [0, 1]" in _one_line(capsys, argv) and not out.exists()
    argv += ["--score-range", "0,5"]
    capsys.readouterr()
    assert main([*argv, "--max-steps", "1", "--batch-size", "1", "--no-progress"]) == 0  # the range given: accepted


def test_qrels_naming_an_id_not_in_the_corpus(tmp_path, capsys, texts):
    queries, corpus, qrels = tmp_path / "q.jsonl", tmp_path / "c.jsonl", tmp_path / "qrels.tsv"
    queries.write_text(json.dumps({"_id": "q1", "text": texts[0][:60]}) + "\n")
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td9\t1\n")
    argv = ["evaluate-embeddings", "--model", MINILM, "--queries", str(queries), "--corpus", str(corpus)]
    line = _one_line(capsys, [*argv, "--qrels", str(qrels), "--no-progress"])
    assert f"{qrels}:3: corpus-id 'd9' is not in the corpus" in line


@pytest.mark.parametrize(
    "command, flags, named",
    [
        ("train-embedder", ["--loss", "cosent", "--symmetric"], ["--symmetric", "--loss cosent"]),
        ("train-embedder", ["--loss", "triplet", "--scale", "30"], ["--scale 30", "--loss triplet"]),
        ("train-embedder", ["--mini-batch-size", "8"], ["--mini-batch-size 8", "--loss mnrl"]),
        ("train-embedder", ["--score-range", "0,5"], ["--score-range 0,5", "--loss mnrl"]),
        ("train-embedder", ["--mining-margin", "0.1"], ["--mining-margin 0.1", "--hard-negatives"]),
        ("train-reranker", ["--group-size", "3"], ["--group-size 3", "--loss bce"]),
    ],
)
def test_a_flag_the_loss_would_ignore_is_refused(tmp_path, capsys, texts, command, flags, named):
    """A flag of another loss (--scale with the triplet loss, --group-size without listwise) was silently unused."""
    train = tmp_path / "rows.jsonl"
    train.write_text(json.dumps({"anchor": texts[0], "positive": texts[1]}) + "\n")
    out = tmp_path / "o"
    line = _one_line(capsys, [command, "--model", MINILM, "--train", str(train), "--output", str(out), *flags])
    assert all(n in line for n in named), line
    assert not out.exists()
