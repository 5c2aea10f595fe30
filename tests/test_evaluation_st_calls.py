"""bertkit.evaluation against sentence-transformers' own evaluators: each library's evaluator on its
own SentenceTransformer (the real MiniLM checkpoint), on real text (the Lee STS pairs, BBC News
headline -> article retrieval); the same keys, values, primary_metric and CSV files."""

import csv
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import bertkit
from bertkit import evaluation as bke
from bertkit.assets import asset_path

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.base.evaluation import SequentialEvaluator as STSequential
from sentence_transformers.sentence_transformer.evaluation import (
    EmbeddingSimilarityEvaluator as STSimilarity,
)
from sentence_transformers.sentence_transformer.evaluation import (
    InformationRetrievalEvaluator as STRetrieval,
)

MINILM = str(asset_path("minilm"))
TOL = 1e-5


@pytest.fixture(scope="module")
def ref():
    return st.SentenceTransformer(MINILM, device="cpu")


@pytest.fixture(scope="module")
def ours():
    return bertkit.SentenceTransformer(MINILM)


@pytest.fixture(scope="module")
def lee():
    """64 Lee document pairs (news articles) with their human similarity score."""
    with open(asset_path("sts-lee"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:64]
    return [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [float(r["score"]) for r in rows]


@pytest.fixture(scope="module")
def bbc():
    """Query = an article's first sentence; relevant = its next sentences, split in two documents for
    every third article; articles 100.. are distractors. About 230 documents."""
    arts = [json.loads(x) for x in open(asset_path("bbcnews-test"), encoding="utf-8")][:200]
    queries, corpus, rel = {}, {}, {}
    for i, a in enumerate(arts):
        s = [x for x in re.split(r"(?<=[.!?])\s+", a["text"]) if len(x) > 20]
        if len(s) < 5:
            continue
        body = s[1:5]
        if i >= 100:
            corpus[f"d{i}"] = " ".join(body)
            continue
        queries[f"q{i}"] = s[0]
        if i % 3 == 0:
            corpus[f"d{i}a"], corpus[f"d{i}b"] = " ".join(body[:2]), " ".join(body[2:])
            rel[f"q{i}"] = {f"d{i}a", f"d{i}b"}
        else:
            corpus[f"d{i}"] = " ".join(body)
            rel[f"q{i}"] = {f"d{i}"}
    return queries, corpus, rel


def assert_same_results(got, want, tol=TOL):
    assert list(got) == list(want)  # the same keys, in the same order
    for key, value in want.items():
        assert isinstance(got[key], float), key
        assert got[key] == pytest.approx(value, abs=tol), key


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def assert_same_csv(got_path, want_path, rows, tol=TOL):
    got, want = read_csv(got_path), read_csv(want_path)
    assert got[0] == want[0]  # the header
    assert len(got) == len(want) == rows + 1
    for g, w in zip(got[1:], want[1:]):
        assert g[:2] == w[:2]  # epoch, steps
        assert [float(x) for x in g[2:]] == pytest.approx([float(x) for x in w[2:]], abs=tol)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(name="lee"),
        dict(similarity_fn_names=["cosine", "dot", "euclidean", "manhattan"]),
        dict(similarity_fn_names=["dot", "manhattan"], main_similarity="manhattan", truncate_dim=128, name="lee"),
    ],
)
def test_embedding_similarity_evaluator_equals_sentence_transformers(lee, ref, ours, tmp_path, kwargs):
    s1, s2, gold = lee
    want_ev, got_ev = STSimilarity(s1, s2, gold, **kwargs), bke.EmbeddingSimilarityEvaluator(s1, s2, gold, **kwargs)
    want = want_ev(ref, output_path=str(tmp_path / "st"), epoch=0, steps=10)
    got = got_ev(ours, output_path=str(tmp_path / "bk"), epoch=0, steps=10)
    assert_same_results(got, want)
    assert got_ev.primary_metric == want_ev.primary_metric and got_ev.greater_is_better
    assert 0.3 < got[got_ev.primary_metric] < 0.95  # real, imperfect correlation
    assert got_ev.csv_file == want_ev.csv_file
    # a second call (the next epoch) appends a row under the same header, as there
    assert_same_results(got_ev(ours, output_path=str(tmp_path / "bk"), epoch=1), want_ev(ref, str(tmp_path / "st"), 1))
    assert_same_csv(tmp_path / "bk" / got_ev.csv_file, tmp_path / "st" / want_ev.csv_file, rows=2)


def test_embedding_similarity_quantized(lee, ref, ours, tmp_path):
    """int8 (both sides calibrated together) and binary (unpacked bits): the evaluator's own steps."""
    s1, s2, gold = lee
    for precision in ("int8", "binary"):
        want_ev = STSimilarity(s1, s2, gold, precision=precision, similarity_fn_names=["cosine", "dot"])
        got_ev = bke.EmbeddingSimilarityEvaluator(
            s1, s2, gold, precision=precision, similarity_fn_names=["cosine", "dot"]
        )
        # a bucket edge may fall between the two libraries' float32 vectors: one quantum of slack
        assert_same_results(got_ev(ours), want_ev(ref), tol=2e-3)
        assert got_ev.csv_file == want_ev.csv_file == f"similarity_evaluation_{precision}_results.csv"


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(name="bbc"),
        dict(
            mrr_at_k=[1, 5, 10],
            ndcg_at_k=[3, 10],
            accuracy_at_k=[2],
            precision_recall_at_k=[1, 20, 100],
            map_at_k=[10, 100],
            corpus_chunk_size=37,  # chunking must not change the results
            main_score_function="cosine",
        ),
        dict(query_prompt="query: ", corpus_prompt="passage: ", truncate_dim=96, name="p"),
    ],
)
def test_information_retrieval_evaluator_equals_sentence_transformers(bbc, ref, ours, tmp_path, kwargs):
    queries, corpus, rel = bbc
    want_ev, got_ev = (
        STRetrieval(queries, corpus, rel, **kwargs),
        bke.InformationRetrievalEvaluator(queries, corpus, rel, **kwargs),
    )
    want = want_ev(ref, output_path=str(tmp_path / "st"), epoch=2, steps=7)
    got = got_ev(ours, output_path=str(tmp_path / "bk"), epoch=2, steps=7)
    assert_same_results(got, want)
    assert got_ev.primary_metric == want_ev.primary_metric
    assert 0.3 < got[got_ev.primary_metric] < 0.99  # real, imperfect retrieval
    assert got_ev.csv_file == want_ev.csv_file
    got_ev(ours, output_path=str(tmp_path / "bk"))
    want_ev(ref, output_path=str(tmp_path / "st"))
    assert_same_csv(tmp_path / "bk" / got_ev.csv_file, tmp_path / "st" / want_ev.csv_file, rows=2)


def test_information_retrieval_score_functions(bbc, ref, ours):
    """Several score functions, each library's own functions: keys per function; the primary metric
    the one with the best nDCG, or main_score_function's."""
    queries, corpus, rel = bbc
    for main in (None, "manhattan"):
        want_ev = STRetrieval(
            queries,
            corpus,
            rel,
            score_functions={"cosine": st.util.cos_sim, "manhattan": st.util.manhattan_sim},
            main_score_function=main,
        )
        got_ev = bke.InformationRetrievalEvaluator(
            queries,
            corpus,
            rel,
            score_functions={"cosine": bertkit.util.cos_sim, "manhattan": bertkit.util.manhattan_sim},
            main_score_function=main,
        )
        assert_same_results(got_ev(ours), want_ev(ref))
        assert got_ev.primary_metric == want_ev.primary_metric == f"{main or 'cosine'}_ndcg@10"


def test_exact_copies_rank_by_corpus_id(bbc, ref, ours):
    """A relevant document's exact copy, added last under a lower id, ties with it: both libraries
    rank the lower id first (not the earlier corpus entry), so the copy (not relevant) takes rank 1
    and the metrics agree."""
    queries, corpus, rel = bbc
    corpus = {**corpus, "a-copy": corpus["d1"]}  # last in the corpus, first in id order
    want = STRetrieval(queries, corpus, rel, mrr_at_k=[1, 10])(ref)
    got = bke.InformationRetrievalEvaluator(queries, corpus, rel, mrr_at_k=[1, 10])(ours)
    assert_same_results(got, want)
    plain = bke.InformationRetrievalEvaluator(
        queries, {k: v for k, v in corpus.items() if k != "a-copy"}, rel, mrr_at_k=[1]
    )
    assert got["cosine_mrr@1"] < plain(ours)["cosine_mrr@1"]  # the copy took q1's first place


class FixedVectors:
    """A model whose texts have given vectors, for both libraries' evaluators."""

    similarity_fn_name = "cosine"
    model_card_data = SimpleNamespace(set_evaluation_metrics=lambda *args: None)

    def __init__(self, vectors):
        self.vectors = vectors

    def similarity(self, a, b):
        return st.util.cos_sim(a, b)

    def encode(self, texts, convert_to_tensor=False, **kwargs):
        out = np.stack([self.vectors[t] for t in texts])
        return torch.from_numpy(out) if convert_to_tensor else out

    encode_query = encode_document = encode


def test_ties_across_chunks_rank_like_sentence_transformers():
    """Vectors in a few directions only, so scores tie inside and across corpus chunks and at every
    cut-off: equal scores rank in ascending corpus id whatever the chunking, as there."""
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(4, 8)).astype(np.float32)
    corpus = {f"c{int(i):03d}": f"doc {n}" for n, i in enumerate(rng.permutation(60))}
    queries = {f"q{n}": f"query {n}" for n in range(12)}
    vectors = {t: directions[rng.integers(4)] for t in [*corpus.values(), *queries.values()]}
    ids = list(corpus)
    rel = {q: set(rng.choice(ids, size=int(rng.integers(1, 6)), replace=False)) for q in queries}
    ks = dict(mrr_at_k=[3], ndcg_at_k=[5], accuracy_at_k=[1, 3], precision_recall_at_k=[1, 2, 7], map_at_k=[9])
    model = FixedVectors(vectors)
    want = STRetrieval(queries, corpus, rel, **ks)(model)
    for chunk in (60, 7, 1):
        got = bke.InformationRetrievalEvaluator(queries, corpus, rel, corpus_chunk_size=chunk, **ks)(model)
        assert_same_results(got, want, tol=1e-12)


def test_sequential_evaluator_equals_sentence_transformers(lee, bbc, ref, ours):
    s1, s2, gold = lee
    queries, corpus, rel = bbc
    want_ev = STSequential([STSimilarity(s1, s2, gold, name="sts"), STRetrieval(queries, corpus, rel, name="ir")])
    got_ev = bke.SequentialEvaluator(
        [
            bke.EmbeddingSimilarityEvaluator(s1, s2, gold, name="sts"),
            bke.InformationRetrievalEvaluator(queries, corpus, rel, name="ir"),
        ]
    )
    want, got = want_ev(ref), got_ev(ours)
    assert_same_results(got, want)
    assert got["sequential_score"] == got["ir_cosine_ndcg@10"]
    assert got_ev.primary_metric == want_ev.primary_metric == "sequential_score"


def test_sentence_transformers_evaluators_on_bertkit_model(lee, bbc, ref, ours):
    """sentence-transformers' own evaluators run on bertkit's model (encode, encode_query,
    encode_document, similarity, the model-card record) and give their own numbers."""
    queries, corpus, rel = bbc
    model = bertkit.SentenceTransformer(MINILM)
    assert_same_results(
        STRetrieval(queries, corpus, rel, name="x")(model), STRetrieval(queries, corpus, rel, name="x")(ref)
    )
    s1, s2, gold = lee
    assert_same_results(STSimilarity(s1, s2, gold)(model), STSimilarity(s1, s2, gold)(ref))
    assert [e[0] for e in model.model_card_data.evaluations] == [
        "InformationRetrievalEvaluator",
        "EmbeddingSimilarityEvaluator",
    ]


def test_qrels_beyond_the_queries_and_corpus_score_as_sentence_transformers(bbc, ref, ours):
    """A relevant document missing from the corpus counts as a miss, a query missing from the queries
    is not scored, as in sentence-transformers; a warning counts them."""
    queries, corpus, rel = bbc
    first = sorted(rel)[:5]
    wider = {**rel, "q-gone": {next(iter(corpus))}, **{q: {*rel[q], f"d-gone-{q}"} for q in first}}
    with pytest.warns(UserWarning, match="5 corpus id"):
        got = bke.InformationRetrievalEvaluator(queries, corpus, wider, name="w")(ours)
    want = STRetrieval(queries, corpus, wider, name="w")(ref)
    assert_same_results(got, want)
    assert (
        got["w_cosine_recall@10"]
        < bke.InformationRetrievalEvaluator(queries, corpus, rel, name="w")(ours)["w_cosine_recall@10"]
    )


def test_results_csv_with_other_columns_is_refused_and_kept(lee, ours, tmp_path):
    s1, s2, gold = lee
    ev = bke.EmbeddingSimilarityEvaluator(s1[:8], s2[:8], gold[:8], name="x")
    path = tmp_path / ev.csv_file
    path.write_text("epoch,steps,accuracy\n0,0,0.5\n", encoding="utf-8")
    with pytest.raises(ValueError, match="other columns"):
        ev(ours, output_path=str(tmp_path))
    assert path.read_text(encoding="utf-8") == "epoch,steps,accuracy\n0,0,0.5\n"
    # its own file, without a final newline (cut by hand): the new row still starts a line
    ev(ours, output_path=str(tmp_path / "own"))
    own = tmp_path / "own" / ev.csv_file
    own.write_bytes(own.read_bytes().rstrip(b"\r\n"))
    ev(ours, output_path=str(tmp_path / "own"), epoch=3)
    rows = read_csv(own)
    assert len(rows) == 3 and rows[2][0] == "3" and len(rows[1]) == len(rows[2]) == len(rows[0])


def test_bad_input_is_refused_by_name(lee, bbc):
    s1, s2, gold = lee
    with pytest.raises(ValueError, match="got 5, 4 and 5"):
        bke.EmbeddingSimilarityEvaluator(s1[:5], s2[:4], gold[:5])
    with pytest.raises(ValueError, match="got 5, 5 and 3"):
        bke.EmbeddingSimilarityEvaluator(s1[:5], s2[:5], gold[:3])
    with pytest.raises(ValueError, match="'cosin' is not one of cosine, dot, euclidean, manhattan"):
        bke.EmbeddingSimilarityEvaluator(s1[:5], s2[:5], gold[:5], similarity_fn_names=["cosine", "cosin"])
    with pytest.raises(ValueError, match="main_similarity 'l2'"):
        bke.EmbeddingSimilarityEvaluator(s1[:5], s2[:5], gold[:5], main_similarity="l2")
    queries, corpus, rel = bbc
    with pytest.warns(UserWarning, match=r"1 corpus id\(s\) not in the corpus \(e.g. 'd-gone'\).*count as misses"):
        bke.InformationRetrievalEvaluator(queries, corpus, {**rel, "q1": {"d1", "d-gone"}})
    with pytest.warns(UserWarning, match=r"1 query id\(s\) not in queries \(e.g. 'q-gone'\); they are not scored"):
        bke.InformationRetrievalEvaluator(queries, corpus, {**rel, "q-gone": {"d1"}})
    with pytest.raises(ValueError, match="main_score_function 'cos'"):
        bke.InformationRetrievalEvaluator(queries, corpus, rel, main_score_function="cos")
    # sentence-transformers takes this and names a primary metric ("dot_ndcg@10") its results lack
    with pytest.raises(ValueError, match=r"main_score_function 'dot' is not among the score functions \(cosine\)"):
        bke.InformationRetrievalEvaluator(queries, corpus, rel, main_score_function="dot")(
            SimpleNamespace(similarity_fn_name="cosine")
        )
    with pytest.raises(ValueError, match="no query has a relevant document"):
        bke.InformationRetrievalEvaluator(queries, corpus, {})
    with pytest.raises(ValueError, match=r"ndcg_at_k\[1\] must be an integer >= 1, got 0"):
        bke.InformationRetrievalEvaluator(queries, corpus, rel, ndcg_at_k=[5, 0])
    with pytest.raises(ValueError, match=r"map_at_k must list at least one k, got \[\]"):
        bke.InformationRetrievalEvaluator(queries, corpus, rel, map_at_k=[])
    with pytest.raises(ValueError, match=r"corpus_chunk_size must be an integer >= 1, got 2.5 \(float\)"):
        bke.InformationRetrievalEvaluator(queries, corpus, rel, corpus_chunk_size=2.5)
