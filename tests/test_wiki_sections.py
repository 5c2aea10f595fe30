"""The Wikipedia section-retrieval asset (BEIR layout, built at set-up from the dump excerpt in
gensim's test data): its queries are the dump's own headings, each passage is the prose under its
heading, and `evaluate-embeddings` on it with the real MiniLM equals sentence-transformers'
InformationRetrievalEvaluator."""

import json
import re

import pytest

from bertkit.assets import asset_path, wiki_to_text
from bertkit.cli import main
from bertkit.sentence.evaluation.metrics import read_beir, read_qrels

MINILM = str(asset_path("minilm"))


def _norm(s: str) -> str:
    return re.sub(r"\W", "", s.lower())


@pytest.fixture(scope="module")
def sections():
    queries = read_beir(asset_path("wiki-sections-queries"))
    corpus = read_beir(asset_path("wiki-sections-corpus"))
    return queries, corpus, read_qrels(asset_path("wiki-sections-qrels"), queries, corpus)


def _raw_articles() -> dict[str, list[str]]:
    """Each article's markup lines, found by scanning the dump line by line."""
    import html

    out, title, lines, inside = {}, None, [], False
    for line in asset_path("wiki-xml").read_text(encoding="utf-8").split("\n"):
        if "<title>" in line:
            title = html.unescape(line.split("<title>")[1].split("</title>")[0]).strip()
        if "<text" in line:
            inside, lines = True, []
            line = line.split(">", 1)[1]
        if inside:
            lines.append(html.unescape(line.split("</text>")[0]))
            if "</text>" in line:
                inside = False
                out[title] = lines
    return out


def test_queries_are_the_dumps_headings_and_passages_their_prose(sections):
    queries, corpus, qrels = sections
    assert len(queries) == len(corpus) > 1000
    assert all(len(rel) == 1 for rel in qrels.values()) and len(qrels) == len(queries)
    articles = _raw_articles()
    for n, (qid, rel) in enumerate(qrels.items()):
        (did,) = rel
        article, *path = queries[qid].split(": ")
        assert article in articles, queries[qid]
        lines = articles[article]
        heads = [i for i, line in enumerate(lines) if re.match(r"^==[^=].*==\s*$|^===[^=].*===\s*$", line)]
        # the query's last heading is one of the article's headings (markup aside); the same words
        # first, then a heading holding them (a link in a heading keeps only its label)
        at = [i for i in heads if _norm(path[-1]) == _norm(lines[i])]
        at = at or [i for i in heads if _norm(path[-1]) in _norm(lines[i])]
        assert at, queries[qid]
        assert path[-1].lower() not in ("references", "external links", "see also", "further reading")
        if n % 7 == 0:  # the passage is the prose between that heading and the next one
            i = at[0]
            end = next((j for j in heads if j > i), len(lines))
            assert corpus[did] == wiki_to_text("\n".join(lines[i + 1 : end])).replace("\n", " "), queries[qid]
        assert len(corpus[did]) >= 200


def test_evaluate_embeddings_equals_information_retrieval_evaluator(sections, tmp_path, capsys):
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    queries, corpus, qrels = sections
    qids = list(queries)[:300]
    dids = [next(iter(qrels[q])) for q in qids]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"_id": q, "text": queries[q]}) + "\n" for q in qids))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"_id": d, "text": corpus[d]}) + "\n" for d in dids))
    qrels_tsv = "".join(f"{q}\t{d}\t1\n" for q, d in zip(qids, dids))
    (tmp_path / "r.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels_tsv)
    args = ["evaluate-embeddings", "--model", MINILM, "--queries", str(tmp_path / "q.jsonl")]
    args += ["--corpus", str(tmp_path / "c.jsonl"), "--qrels", str(tmp_path / "r.tsv"), "--truncation", "cut"]
    assert main([*args, "--output", str(tmp_path / "out.json"), "--no-progress"]) == 0
    got = json.loads((tmp_path / "out.json").read_text())["retrieval"]
    ref = st.SentenceTransformer(MINILM, device="cpu")  # 256 tokens, as the folder says
    want = InformationRetrievalEvaluator(
        {q: queries[q] for q in qids},
        {d: corpus[d] for d in dids},
        {q: {d} for q, d in zip(qids, dids)},
        precision_recall_at_k=[1, 10, 100],
        show_progress_bar=False,
    )(ref)
    # the vectors differ by float rounding only: a rank may swap at a near tie
    for name in ("ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10", "recall@100"):
        assert got[name] == pytest.approx(want["cosine_" + name], abs=5e-3), name
    assert 0.3 < got["mrr@10"] < 0.99  # real, imperfect retrieval
