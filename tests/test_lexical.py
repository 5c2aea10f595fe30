"""Hybrid search: BM25 against a textbook implementation, its words against transformers' BERT
pre-tokenizer, the fusion against plain numpy, and `search`, `evaluate-embeddings` and `/search`
giving the same ranking as the library."""

import hashlib
import json
import math
import re
from collections import Counter

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main
from bertkit.search import build_index, load_index
from bertkit.search.lexical import BM25, hybrid_top_k, words
from bertkit.sentence.evaluation.metrics import retrieval_metrics


def _articles(n: int, split: str = "test") -> list[str]:
    with open(asset_path(f"bbcnews-{split}"), encoding="utf-8") as f:
        return [json.loads(line)["text"] for line, _ in zip(f, range(n))]


def _pairs(n: int) -> list[tuple[str, str]]:
    """(first sentence, rest of the article): a headline-to-article retrieval task on real news. The
    split repeats a few articles; each is kept once, so that no two documents tie."""
    out, seen = [], set()
    for text in _articles(n):
        parts = re.split(r"(?<=[.!?])\s+", text, maxsplit=1)
        if len(parts) == 2 and len(parts[1]) > 100 and parts[1] not in seen:
            seen.add(parts[1])
            out.append((parts[0], parts[1]))
    return out


def test_words_are_berts_pre_tokenized_words_without_punctuation():
    tokenizers = pytest.importorskip("tokenizers")
    norm = tokenizers.normalizers.BertNormalizer(lowercase=True)
    pre = tokenizers.pre_tokenizers.BertPreTokenizer()
    texts = _articles(40) + asset_path("news-zh").read_text(encoding="utf-8").splitlines()[:40]
    texts.append("Café Ünïcode, e-mail: x@y.com -- 3.5% of ＡＢＣ; 東京タワー!")
    for text in texts:
        ref = [w for w, _ in pre.pre_tokenize_str(norm.normalize_str(text))]
        assert words(text) == [w for w in ref if any(c.isalnum() or c == "_" for c in w)], text[:80]


def _textbook_bm25(docs: list[list[str]], query: list[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """Okapi BM25 written from its definition, one document at a time (Lucene's idf)."""
    n, avg = len(docs), sum(map(len, docs)) / len(docs)
    df = Counter(w for d in docs for w in set(d))
    out = np.zeros(n)
    for j, d in enumerate(docs):
        tf = Counter(d)
        for w in query:
            if tf[w]:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                out[j] += idf * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(d) / avg))
    return out


@pytest.mark.parametrize("k1,b", [(1.2, 0.75), (2.0, 0.3)])
def test_bm25_equals_the_textbook_formula_on_real_news(k1, b):
    pairs = _pairs(120)
    docs = [p[1] for p in pairs]
    queries = [p[0] for p in pairs[:25]] + ["the the of", "wordzzz qqqxx", ""]
    got = BM25(docs, k1, b).scores(queries)
    assert got.shape == (len(queries), len(docs))
    tokenized = [words(d) for d in docs]
    for i, q in enumerate(queries):
        np.testing.assert_allclose(got[i], _textbook_bm25(tokenized, words(q), k1, b), rtol=1e-5, atol=1e-6)
    assert not got[-2].any() and not got[-1].any()  # no shared word: every score is 0
    with pytest.raises(ValueError, match="b in \\[0, 1\\]"):
        BM25(docs, 1.2, 1.5)


@pytest.fixture(scope="module")
def news_index(tmp_path_factory):
    """An index of 150 real articles' bodies, and their first sentences as queries."""
    tmp = tmp_path_factory.mktemp("hybrid")
    pairs = _pairs(160)[:150]
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": p[1]}) + "\n" for i, p in enumerate(pairs)), "utf-8")
    build_index(asset_path("minilm"), corpus, tmp / "idx", dtype="fp32", progress=False, truncation="cut")
    return tmp, pairs, load_index(tmp / "idx")


def _numpy_hybrid(index, qvecs: np.ndarray, queries: list[str], w: float) -> np.ndarray:
    dense = qvecs @ index.vectors.T
    lex = BM25(index.texts).scores(queries)
    z = [(s - s.mean(1, keepdims=True)) / s.std(1, keepdims=True) for s in (dense, lex)]
    return (1 - w) * z[0] + w * z[1]


def test_hybrid_top_k_is_the_fused_ranking_and_its_ends_are_each_retriever(news_index):
    from bertkit.search import embed_queries

    _, pairs, index = news_index
    queries = [p[0] for p in pairs]
    qvecs = embed_queries(index.meta["model"], queries, dtype="fp32", truncation="cut")
    for w in (0.3, 0.7):
        fused, idx, cos, bm = hybrid_top_k(index.vectors, qvecs, index.lexical, queries, 10, w, block_bytes=4000)
        want = _numpy_hybrid(index, qvecs, queries, w)
        np.testing.assert_allclose(fused, np.take_along_axis(want, idx, 1), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(fused[:, 0], want.max(1), rtol=1e-4, atol=1e-4)  # the best is first
        assert (np.diff(fused, axis=1) <= 1e-6).all()
        np.testing.assert_allclose(cos, np.take_along_axis(qvecs @ index.vectors.T, idx, 1), atol=1e-5)
        np.testing.assert_allclose(bm, np.take_along_axis(index.lexical.scores(queries), idx, 1), rtol=1e-5)
    # weight 1 ranks by BM25 alone, and hits carry both scores
    hits = index.search(qvecs[:5], 3, queries[:5], 1.0)
    lex = index.lexical.scores(queries[:5])
    for row, h in zip(lex, hits):
        assert h[0]["id"] == index.ids[int(row.argmax())] and h[0]["bm25"] == pytest.approx(row.max(), rel=1e-5)
    with pytest.raises(ValueError, match="needs the queries' texts"):
        index.search(qvecs[:1], 3, None, 0.5)
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        index.search(qvecs[:1], 3, queries[:1], 1.5)


def test_hybrid_beats_each_retriever_alone_on_real_news(news_index):
    """First sentence -> rest of the article: names and rare words are BM25's, paraphrase is the
    embedding's; their fusion must rank better than either (a wrong standardisation or sign breaks it)."""
    from bertkit.search import embed_queries

    _, pairs, index = news_index
    queries = [p[0] for p in pairs]
    qvecs = embed_queries(index.meta["model"], queries, dtype="fp32", truncation="cut")
    ids = index.ids
    qrels = {f"q{i}": {ids[i]: 1.0} for i in range(len(pairs))}
    qids = list(qrels)

    def mrr(w: float) -> float:
        m = retrieval_metrics(
            qvecs, qids, index.vectors, ids, qrels, query_texts=queries, corpus_texts=index.texts, lexical_weight=w
        )
        return m["mrr@10"]

    dense, lexical, hybrid = mrr(0.0), mrr(1.0), mrr(0.3)
    assert hybrid > max(dense, lexical) + 0.01, (dense, lexical, hybrid)
    assert dense == pytest.approx(retrieval_metrics(qvecs, qids, index.vectors, ids, qrels)["mrr@10"])


def test_search_and_evaluate_embeddings_take_the_lexical_weight(news_index, capsys):
    tmp, pairs, index = news_index
    query = pairs[7][0]
    assert cli_main(["search", "--index", str(tmp / "idx"), query, "--top-k", "3", "--lexical-weight", "0.4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    from bertkit.search import embed_queries

    want = index.search(embed_queries(index.meta["model"], [query], dtype="auto"), 3, [query], 0.4)[0]
    assert [ln.split("[")[1].split("]")[0] for ln in lines[1:]] == [h["id"] for h in want]
    assert "(cosine " in lines[1] and ", bm25 " in lines[1]
    with pytest.raises(SystemExit):
        cli_main(["search", "--index", str(tmp / "idx"), query, "--lexical-weight", "1.5"])
    assert "--lexical-weight: must be" in capsys.readouterr().err

    (tmp / "q.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": p[0]}) + "\n" for i, p in enumerate(pairs))
    )
    (tmp / "c.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": p[1]}) + "\n" for i, p in enumerate(pairs))
    )
    (tmp / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(len(pairs)))
    )
    out = tmp / "res.json"
    args = ["evaluate-embeddings", "--model", str(asset_path("minilm")), "--queries", str(tmp / "q.jsonl")]
    args += ["--corpus", str(tmp / "c.jsonl"), "--qrels", str(tmp / "qrels.tsv"), "--truncation", "cut"]
    assert cli_main([*args, "--lexical-weight", "0.3", "--output", str(out), "--no-progress"]) == 0
    got = json.loads(out.read_text())["retrieval"]["mrr@10"]
    # the command embeds the corpus in fp32 (the index holds float16): the reference does the same
    qv = embed_queries(index.meta["model"], [p[0] for p in pairs], dtype="fp32", truncation="cut")
    cv = embed_queries(index.meta["model"], [p[1] for p in pairs], dtype="fp32", truncation="cut")
    z = [
        (s - s.mean(1, keepdims=True)) / s.std(1, keepdims=True)
        for s in (qv @ cv.T, index.lexical.scores([p[0] for p in pairs]))
    ]
    fused = 0.7 * z[0] + 0.3 * z[1]
    ranks = [int((fused[i] > fused[i, i]).sum()) for i in range(len(pairs))]
    assert got == pytest.approx(np.mean([1 / (r + 1) if r < 10 else 0.0 for r in ranks]), abs=2e-3)


def test_an_index_keeps_its_bm25_postings_for_its_own_texts_only(news_index):
    """The first hybrid search saves the postings in the folder (the index's own file, in its marker);
    a later load reads them; texts edited by hand, a damaged file, or a delete make them built anew."""
    import shutil

    from bertkit._folders import MARKER
    from bertkit.search.index import BM25_FILE
    from bertkit.search.index_update import delete_from_index

    tmp, pairs, _ = news_index
    folder = tmp / "bm25-idx"
    shutil.copytree(tmp / "idx", folder)
    (folder / BM25_FILE).unlink(missing_ok=True)
    queries = [p[0] for p in pairs[:20]]
    first = load_index(folder)
    assert np.array_equal(first.lexical.scores(queries), BM25(first.texts).scores(queries))
    assert (folder / BM25_FILE).is_file()
    assert BM25_FILE in json.loads((folder / MARKER).read_text())["files"]

    # the file is what a later load uses: postings saved with doubled weights come back doubled
    digest = hashlib.sha256((folder / "texts.jsonl").read_bytes()).hexdigest()
    doubled = BM25(first.texts)
    doubled._weights = doubled._weights * 2
    doubled.save(folder / BM25_FILE, digest)
    np.testing.assert_allclose(load_index(folder).lexical.scores(queries), 2 * first.lexical.scores(queries))

    # texts edited by hand (same count): the saved postings are not theirs, so they are built anew
    rows = [json.loads(line) for line in (folder / "texts.jsonl").read_text("utf-8").splitlines()]
    rows[3]["text"] = "zanzibar zanzibar marmalade " + rows[3]["text"]
    (folder / "texts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    edited = load_index(folder)
    got = edited.lexical.scores(["zanzibar marmalade"])
    assert np.array_equal(got, BM25([r["text"] for r in rows]).scores(["zanzibar marmalade"]))
    assert int(got[0].argmax()) == 3 and got[0, 3] > 0

    # a damaged file is rebuilt, not an error
    (folder / BM25_FILE).write_bytes((folder / BM25_FILE).read_bytes()[:100])
    assert np.array_equal(load_index(folder).lexical.scores(queries), BM25(edited.texts).scores(queries))

    # a delete publishes new texts without the old postings; a user's file in the folder stays
    (folder / "notes.txt").write_text("mine")
    assert delete_from_index(folder, [rows[0]["id"]]) == 1
    assert not (folder / BM25_FILE).exists() and (folder / "notes.txt").read_text() == "mine"
    after = load_index(folder)
    assert len(after.lexical) == len(rows) - 1
    assert np.array_equal(after.lexical.scores(queries), BM25(after.texts).scores(queries))
