"""`bertkit evaluate-embeddings` against sentence-transformers' evaluators and scipy, on the real
MiniLM checkpoint and real BBC News text (BEIR layout files written from the articles)."""

import csv
import json
import re

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.cli import main
from bertkit.sentence.evaluation.metrics import retrieval_metrics, sts_metrics

st = pytest.importorskip("sentence_transformers")
MINILM = str(asset_path("minilm"))


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    """Query = an article's first sentence; its relevant documents = the next sentences, split in two
    for every third article (two relevant documents); 60 more articles are distractors."""
    d = tmp_path_factory.mktemp("beir")
    arts = [json.loads(x) for x in open(asset_path("bbcnews-test"), encoding="utf-8")][:120]
    queries, corpus, qrels = {}, {}, []
    for i, a in enumerate(arts):
        s = [x for x in re.split(r"(?<=[.!?])\s+", a["text"]) if len(x) > 20]
        if len(s) < 5:
            continue
        body = s[1:5]
        if i >= 60:
            corpus[f"d{i}"] = " ".join(body)
            continue
        queries[f"q{i}"] = s[0]
        if i % 3 == 0:
            corpus[f"d{i}a"], corpus[f"d{i}b"] = " ".join(body[:2]), " ".join(body[2:])
            qrels += [(f"q{i}", f"d{i}a", 1), (f"q{i}", f"d{i}b", 1)]
        else:
            corpus[f"d{i}"] = " ".join(body)
            qrels.append((f"q{i}", f"d{i}", 1))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in corpus.items())
    )
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{c}\t{s}\n" for q, c, s in qrels))
    rel = {}
    for q, c, _ in qrels:
        rel.setdefault(q, set()).add(c)
    return d, queries, corpus, rel


@pytest.fixture(scope="module")
def ref():
    return st.SentenceTransformer(MINILM, device="cpu")


@pytest.fixture(scope="module")
def ir_reference(beir, ref):
    """sentence-transformers' InformationRetrievalEvaluator on the files' queries, corpus and qrels."""
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    _, queries, corpus, rel = beir
    ev = InformationRetrievalEvaluator(
        queries, corpus, rel, precision_recall_at_k=[1, 10, 100], show_progress_bar=False
    )
    return ev(ref)


def test_retrieval_metrics_equal_information_retrieval_evaluator(beir, ref, ir_reference):
    _, queries, corpus, rel = beir
    want = ir_reference
    qids, cids = list(queries), list(corpus)
    q = ref.encode([queries[i] for i in qids], convert_to_numpy=True)
    c = ref.encode([corpus[i] for i in cids], convert_to_numpy=True)
    qrels = {k: {c_: 1.0 for c_ in v} for k, v in rel.items()}
    got = retrieval_metrics(q, qids, c, cids, qrels, query_block=7, corpus_chunk=13)  # chunks must not matter
    for name in ("ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10", "recall@100"):
        assert got[name] == pytest.approx(want["cosine_" + name], abs=1e-9), name
    assert 0.3 < got["mrr@10"] < 1.0  # real, imperfect retrieval: the metrics are not all 1


def test_cli_retrieval_and_sts(beir, ref, ir_reference, tmp_path, capsys):
    from scipy.stats import pearsonr, spearmanr
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    d, queries, corpus, rel = beir
    out = tmp_path / "results.json"
    # pairs of real sentences; gold = 1 for a query and its own document, 0.5 for the next article's, 0 else
    qids, cids = list(queries)[:30], list(corpus)
    s1 = [queries[q] for q in qids for _ in range(3)]
    own = [sorted(rel[q])[0] for q in qids]
    s2 = [corpus[x] for i, q in enumerate(qids) for x in (own[i], own[(i + 1) % 30], cids[-1 - i])]
    gold = [g for _ in qids for g in (1.0, 0.5, 0.0)]
    sts = tmp_path / "sts.csv"
    with open(sts, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["sentence1", "sentence2", "score"], *zip(s1, s2, gold)])
    assert (
        main(
            [
                "evaluate-embeddings",
                "--model",
                MINILM,
                "--sts",
                str(sts),
                "--queries",
                str(d / "queries.jsonl"),
                "--corpus",
                str(d / "corpus.jsonl"),
                "--qrels",
                str(d / "qrels.tsv"),
                "--output",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    want = ir_reference
    # our vectors differ from sentence-transformers' by float rounding only: a rank may swap at a near tie
    for name in ("ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10", "recall@100"):
        assert res["retrieval"][name] == pytest.approx(want["cosine_" + name], abs=5e-3), name
    e1, e2 = ref.encode(s1), ref.encode(s2)
    cos = (e1 * e2).sum(1) / np.linalg.norm(e1, axis=1) / np.linalg.norm(e2, axis=1)
    assert res["sts"]["spearman"] == pytest.approx(spearmanr(cos, gold)[0], abs=1e-4)
    assert res["sts"]["pearson"] == pytest.approx(pearsonr(cos, gold)[0], abs=1e-4)
    ev = EmbeddingSimilarityEvaluator(s1, s2, gold)(ref)
    assert res["sts"]["spearman"] == pytest.approx(ev["spearman_cosine"], abs=1e-4)
    assert sts_metrics(e1, e2, gold)["spearman"] == pytest.approx(spearmanr(cos, gold)[0], abs=1e-9)
    # no overwrite without --overwrite: the earlier results stay
    before = out.read_text()
    assert (
        main(["evaluate-embeddings", "--model", MINILM, "--sts", str(sts), "--output", str(out), "--no-progress"]) == 1
    )
    assert "already exists" in capsys.readouterr().err and out.read_text() == before


def test_qrels_naming_an_unknown_id_is_one_line(beir, tmp_path, capsys):
    d = beir[0]
    bad = tmp_path / "qrels.tsv"
    bad.write_text("query-id\tcorpus-id\tscore\nq0\td0a\t1\nq1\tnope\t1\n")
    assert (
        main(
            [
                "evaluate-embeddings",
                "--model",
                MINILM,
                "--queries",
                str(d / "queries.jsonl"),
                "--corpus",
                str(d / "corpus.jsonl"),
                "--qrels",
                str(bad),
                "--no-progress",
            ]
        )
        == 1
    )
    assert f"{bad}:3: corpus-id 'nope' is not in the corpus" in capsys.readouterr().err


def test_output_never_replaces_an_input_even_with_overwrite(beir, tmp_path, capsys):
    d = beir[0]
    qrels = tmp_path / "qrels.tsv"
    qrels.write_bytes((d / "qrels.tsv").read_bytes())
    before = qrels.read_bytes()
    args = [
        "evaluate-embeddings",
        "--model",
        MINILM,
        "--queries",
        str(d / "queries.jsonl"),
        "--corpus",
        str(d / "corpus.jsonl"),
        "--qrels",
        str(qrels),
        "--output",
        str(qrels),
        "--overwrite",
        "--no-progress",
    ]
    assert main(args) == 1
    assert f"--output {qrels} is the input file --qrels" in capsys.readouterr().err
    assert qrels.read_bytes() == before
    assert main([*args[:-4], "--output", f"{MINILM}/results.json", "--no-progress"]) == 1
    assert "inside the input model folder" in capsys.readouterr().err


def test_exact_copies_are_reported_and_credited_on_request(beir, ref, tmp_path, capsys):
    """A relevant document gets a copy under another id (its spaces doubled); the qrels name the
    original. The CLI says so, and --credit-copies scores the copy as relevant."""
    d, queries, corpus, rel = beir
    corpus = {"copy": corpus["d1"].replace(" ", "  "), **corpus}
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in corpus.items()))
    args = ["evaluate-embeddings", "--model", MINILM, "--queries", str(d / "queries.jsonl")]
    args += ["--corpus", str(tmp_path / "corpus.jsonl"), "--qrels", str(d / "qrels.tsv"), "--no-progress"]
    results = {}
    for credit in (False, True):
        out = tmp_path / f"credit-{credit}.json"
        assert main([*args, "--output", str(out), *(["--credit-copies"] if credit else [])]) == 0
        err = capsys.readouterr().err
        assert f"{tmp_path / 'corpus.jsonl'}: 1 queries have a relevant document with an exact copy" in err
        assert ("counts it as relevant" in err) != credit
        results[credit] = json.loads(out.read_text())["retrieval"]
    assert results[False]["uncredited_copies"] == 1 and results[True]["uncredited_copies"] == 0
    qids, cids = list(queries), list(corpus)
    q = ref.encode([queries[i] for i in qids], convert_to_numpy=True)
    c = ref.encode([corpus[i] for i in cids], convert_to_numpy=True)
    plain = {k: {x: 1.0 for x in v} for k, v in rel.items()}
    extended = {**plain, "q1": {"d1": 1.0, "copy": 1.0}}
    for credit, qrels in ((False, plain), (True, extended)):
        want = retrieval_metrics(q, qids, c, cids, qrels)
        for name in ("ndcg@10", "mrr@10", "recall@1", "recall@10"):
            assert results[credit][name] == pytest.approx(want[name], abs=5e-3), (credit, name)
    # q1 ranks its document and the copy first and second, in either order: its recall@1 is 1 or 0
    # with the plain qrels and 1/2 with the copy credited
    assert abs(results[True]["recall@1"] - results[False]["recall@1"]) == pytest.approx(0.5 / len(plain), abs=1e-9)
