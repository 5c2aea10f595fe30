"""Index add/delete without a rebuild and `bertkit index --append`, on the real MiniLM checkpoint and
real polarity sentences: only new rows are embedded, and the result equals a fresh build."""

import csv
import json

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.cli import main
from bertkit.search.index import build_index, load_index
from bertkit.search.index_update import add_to_index, delete_from_index

MINILM = str(asset_path("minilm"))


@pytest.fixture(scope="module")
def sentences():
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:40]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in rows))
    return path


def test_append_embeds_only_new_rows_and_equals_a_fresh_build(sentences, tmp_path, monkeypatch, capsys):
    from bertkit.pipelines.pipelines import FeatureExtractionPipeline

    rows = [(f"s{i}", t) for i, t in enumerate(sentences)]
    build_index(MINILM, _jsonl(tmp_path / "a.jsonl", rows[:30]), tmp_path / "idx", dtype="fp32", progress=False)
    build_index(MINILM, _jsonl(tmp_path / "all.jsonl", rows), tmp_path / "fresh", dtype="fp32", progress=False)
    embedded = []
    original = FeatureExtractionPipeline.forward_features

    def counting(self, features, batch_size=None):
        embedded.append(len(features))
        return original(self, features, batch_size)

    monkeypatch.setattr(FeatureExtractionPipeline, "forward_features", counting)
    assert (
        main(
            [
                "index",
                "--model",
                MINILM,
                "--input",
                str(tmp_path / "all.jsonl"),
                "--output",
                str(tmp_path / "idx"),
                "--append",
            ]
        )
        == 0
    )
    assert "10 new row(s)" in capsys.readouterr().out and embedded == [10]
    got, want = load_index(tmp_path / "idx"), load_index(tmp_path / "fresh")
    assert got.ids == want.ids and got.texts == want.texts and got.meta["count"] == 40
    np.testing.assert_allclose(got.vectors, want.vectors, atol=2e-3)  # float16 storage
    assert (
        main(
            [
                "index",
                "--model",
                MINILM,
                "--input",
                str(tmp_path / "all.jsonl"),
                "--output",
                str(tmp_path / "idx"),
                "--append",
            ]
        )
        == 0
    )
    assert "0 new row(s)" in capsys.readouterr().out


def test_delete_and_add_ids(sentences, tmp_path):
    rows = [(f"s{i}", t) for i, t in enumerate(sentences[:20])]
    build_index(MINILM, _jsonl(tmp_path / "c.jsonl", rows), tmp_path / "idx", dtype="fp32", progress=False)
    index = load_index(tmp_path / "idx")
    q = index.vectors[3:4]
    assert index.search(q, 1)[0][0]["id"] == "s3"
    assert delete_from_index(tmp_path / "idx", ["s3", "s7"]) == 2
    index = load_index(tmp_path / "idx")
    assert len(index) == 18 and "s3" not in index.ids
    assert all(h["id"] != "s3" for h in index.search(q, 18)[0])
    with pytest.raises(ValueError, match="id 's3' is not in"):
        delete_from_index(tmp_path / "idx", ["s3"])
    assert add_to_index(tmp_path / "idx", [("s3", sentences[3])]) == 1
    assert load_index(tmp_path / "idx").search(q, 1)[0][0]["id"] == "s3"
    with pytest.raises(ValueError, match="already in"):
        add_to_index(tmp_path / "idx", [("s3", "another text")])
    with pytest.raises(ValueError, match="was built with"):
        add_to_index(tmp_path / "idx", [("new", "x")], model=tmp_path)
    # the folder stays a claimed index: its marker survives, so a later rebuild over it is still refused
    # without --overwrite, and a file of the user's beside the index is kept through a change
    assert (tmp_path / "idx" / ".bertkit-output.json").is_file()
    (tmp_path / "idx" / "notes.txt").write_text("mine")
    assert delete_from_index(tmp_path / "idx", ["s3"]) == 1
    assert (tmp_path / "idx" / "notes.txt").read_text() == "mine" and len(load_index(tmp_path / "idx")) == 18
    assert (tmp_path / "idx" / ".bertkit-output.json").is_file()
    with pytest.raises(FileExistsError, match="overwrite"):
        build_index(MINILM, tmp_path / "c.jsonl", tmp_path / "idx", dtype="fp32", progress=False)


def test_append_refuses_a_known_id_with_new_text_and_reads_beir_ids(sentences, tmp_path, capsys):
    """An id the index holds with another text was skipped silently, leaving the old text searchable
    and the new one lost: now it is an error naming the line, and the index is unchanged. A BEIR corpus
    (``_id``) keeps its own ids instead of line numbers."""
    first = tmp_path / "a.txt"
    first.write_text(f"{sentences[0]}\n{sentences[1]}\n", encoding="utf-8")
    build_index(MINILM, first, tmp_path / "idx", dtype="fp32", progress=False)
    before = (tmp_path / "idx" / "texts.jsonl").read_bytes()
    second = tmp_path / "b.txt"
    second.write_text(f"{sentences[0]}\n{sentences[2]}\n{sentences[3]}\n", encoding="utf-8")
    argv = ["index", "--model", MINILM, "--input", str(second), "--output", str(tmp_path / "idx"), "--append"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"1 row(s) of {second} have an id the index already holds with another text" in err
    assert f"{second}:2, id '2'" in err
    assert (tmp_path / "idx" / "texts.jsonl").read_bytes() == before
    beir = tmp_path / "corpus.jsonl"
    beir.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(sentences[:3])))
    build_index(MINILM, beir, tmp_path / "beir", dtype="fp32", progress=False)
    assert load_index(tmp_path / "beir").ids == ["d0", "d1", "d2"]


def test_an_id_names_one_row(sentences, tmp_path):
    """Two rows with one id (also 1 and "1", or a line number that meets an explicit id) were indexed
    both, and a later --append of the same file failed: the reader refuses them, naming both lines."""
    dup = tmp_path / "dup.jsonl"
    dup.write_text(json.dumps({"id": "a", "text": "one"}) + "\n" + json.dumps({"id": "a", "text": "two"}) + "\n")
    with pytest.raises(ValueError, match=r"dup\.jsonl:2: id 'a' is already the id of line 1"):
        build_index(MINILM, dup, tmp_path / "idx", dtype="fp32", progress=False)
    assert not (tmp_path / "idx").exists()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps({"id": 1, "text": "one"}) + "\n" + json.dumps({"id": "1", "text": "two"}) + "\n")
    with pytest.raises(ValueError, match="id '1' is already the id of line 1"):
        build_index(MINILM, mixed, tmp_path / "idx", dtype="fp32", progress=False)
    build_index(
        MINILM, _jsonl(tmp_path / "a.jsonl", [("s0", sentences[0])]), tmp_path / "ok", dtype="fp32", progress=False
    )
    with pytest.raises(ValueError, match="'n1' is already in"):
        add_to_index(tmp_path / "ok", [("n1", sentences[1]), ("n1", sentences[2])])
    assert load_index(tmp_path / "ok").ids == ["s0"]
