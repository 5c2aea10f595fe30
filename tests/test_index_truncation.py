"""`bertkit index` and `bertkit search` never cut a long text silently (``--truncation error|cut|chunk``),
on real MiniLM and real BBC articles; token counts are made here with transformers' tokenizer and the
cut vectors compared with sentence-transformers' (which cuts at the same 256 tokens)."""

import json

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main
from bertkit.pipelines import pipeline

transformers = pytest.importorskip("transformers")
st = pytest.importorskip("sentence_transformers")
MINILM = asset_path("minilm")
SHORT = ["Shares in the company rose sharply on Monday.", "The match ended in a goalless draw."]


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = cli_main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


@pytest.fixture(scope="module")
def long_article():
    tok = transformers.AutoTokenizer.from_pretrained(str(MINILM))
    for line in open(asset_path("bbcnews-test"), encoding="utf-8"):
        text = json.loads(line)["text"]
        n = len(tok(text)["input_ids"])
        if 300 < n <= 512:
            return text, n
    raise AssertionError("no BBC test article of 300-512 tokens")


@pytest.fixture()
def corpus(tmp_path, long_article):
    """JSONL corpus: two short texts, then the long article on line 3 with id 'art-7'."""
    rows = [{"id": f"s{i}", "text": t} for i, t in enumerate(SHORT)] + [{"id": "art-7", "text": long_article[0]}]
    path = tmp_path / "news.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_index_refuses_cuts_or_chunks_a_long_text(capsys, tmp_path, corpus, long_article):
    text, n = long_article
    out = tmp_path / "idx"
    base = ["index", "--model", MINILM, "--input", corpus, "--dtype", "fp32", "--vector-dtype", "float32"]
    rc, _, err = run(capsys, *base, "--output", out)
    lines = [x for x in err.splitlines() if x.startswith("bertkit ")]
    assert rc == 1 and len(lines) == 1, err
    assert f"{corpus}:3 (id 'art-7') has {n} tokens, over the model's limit of 256" in lines[0]
    assert not out.exists() and not (tmp_path / "idx.partial").exists()

    rc, stdout, _ = run(capsys, *base, "--output", out, "--truncation", "cut")
    assert rc == 0 and f"index: 1 text(s) over 256 tokens were cut: {n - 256:,} tokens dropped" in stdout
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["truncation"], meta["truncated_texts"], meta["truncated_tokens"]) == ("cut", 1, n - 256)
    want = st.SentenceTransformer(str(MINILM), device="cpu").encode([*SHORT, text], normalize_embeddings=True)
    np.testing.assert_allclose(np.load(out / "vectors.npy"), want, atol=1e-5)

    rc, stdout, _ = run(capsys, *base, "--output", tmp_path / "chunked", "--truncation", "chunk")
    assert rc == 0 and "were cut" not in stdout
    emb = pipeline("sentence-embedding", model=MINILM, dtype="fp32")
    np.testing.assert_allclose(
        np.load(tmp_path / "chunked" / "vectors.npy"), emb([*SHORT, text], truncation="chunk"), atol=1e-5
    )

    # --append follows the same rule, naming the appended file's line
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "long-2", "text": text + " " + text}) + "\n", encoding="utf-8")
    rc, _, err = run(capsys, "index", "--model", MINILM, "--input", more, "--output", out, "--append")
    assert rc == 1 and f"{more}:1 (id 'long-2') has" in err and "over the model's limit of 256" in err


def test_search_refuses_or_cuts_a_long_query(capsys, tmp_path, corpus, long_article):
    text, n = long_article
    out = tmp_path / "idx"
    assert run(capsys, "index", "--model", MINILM, "--input", corpus, "--output", out, "--truncation", "cut")[0] == 0
    rc, _, err = run(capsys, "search", "--index", out, text, "--dtype", "fp32")
    lines = [x for x in err.splitlines() if x.startswith("bertkit ")]
    assert rc == 1 and len(lines) == 1 and f"the query has {n} tokens, over the model's limit of 256" in lines[0]
    rc, _, err = run(capsys, "search", "--index", out, "short one", text, "--dtype", "fp32")
    assert rc == 1 and f"query 2 has {n} tokens" in err
    rc, stdout, err = run(capsys, "search", "--index", out, text, "--top-k", "1", "--truncation", "cut")
    assert rc == 0 and f"search: 1 text(s) over 256 tokens were cut: {n - 256:,} tokens dropped" in err
    assert "[art-7]" in stdout  # the article finds itself
