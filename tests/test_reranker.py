"""Cross-encoder rerankers on the real MiniLM checkpoint and real BBC text: `bertkit train-reranker`
writes a folder transformers and sentence-transformers' CrossEncoder load, whose logits equal
`pipeline("text-ranking")`'s scores; `bertkit search --rerank` reorders the first hits by them."""

import json
import re

import numpy as np
import pytest
import torch
from conftest import Dataset, card_log_table

from bertkit.assets import asset_path
from bertkit.cli import main

MINILM = str(asset_path("minilm"))


@pytest.fixture(scope="module")
def pairs():
    """query = an article's first sentence; relevant passage = its next two; irrelevant = another's."""
    out = []
    for line in open(asset_path("bbcnews-test"), encoding="utf-8"):
        s = [x for x in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(x) > 20]
        if len(s) >= 3:
            out.append((s[0], " ".join(s[1:3])))
        if len(out) == 40:
            break
    return out


@pytest.fixture(scope="module")
def reranker(pairs, tmp_path_factory):
    d = tmp_path_factory.mktemp("rerank")
    rows = []
    for i, (q, p) in enumerate(pairs[:24]):
        rows += [{"query": q, "passage": p, "label": 1}, {"query": q, "passage": pairs[(i + 7) % 24][1], "label": 0}]
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = [
        "train-reranker",
        "--model",
        MINILM,
        "--train",
        str(d / "train.jsonl"),
        "--validation",
        str(d / "train.jsonl"),
        "--batch-size",
        "8",
        "--max-length",
        "96",
        "--no-progress",
    ]
    assert main([*common, "--max-steps", "3", "--lr", "5e-5", "--output", str(d / "bce")]) == 0
    assert (
        main([*common, "--loss", "listwise", "--group-size", "3", "--max-steps", "1", "--output", str(d / "listwise")])
        == 0
    )
    return d


def test_scores_equal_transformers_logits_and_cross_encoder(reranker, pairs):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from bertkit import pipeline

    folder = reranker / "bce"
    metrics = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert "eval_mrr@10" in metrics[-1]
    assert (
        json.loads((folder / "config.json").read_text())["num_labels"] == 1
        or len(json.loads((folder / "config.json").read_text())["id2label"]) == 1
    )
    query = pairs[30][0]
    passages = [p for _, p in pairs[28:36]]
    hf = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    tok = AutoTokenizer.from_pretrained(str(folder))
    with torch.no_grad():
        logits = (
            hf(**tok([query] * len(passages), passages, padding=True, truncation=True, return_tensors="pt"))
            .logits.view(-1)
            .numpy()
        )
    rank = pipeline("text-ranking", model=folder)
    got = rank(query, passages)
    assert [r["index"] for r in got] == list(np.argsort(-logits, kind="stable"))
    np.testing.assert_allclose([r["score"] for r in got], logits[[r["index"] for r in got]], atol=1e-4, rtol=1e-4)
    assert got[0]["text"] == passages[got[0]["index"]]
    top = rank(query, passages, top_k=3, sigmoid=True)
    np.testing.assert_allclose(
        [r["score"] for r in top], 1 / (1 + np.exp(-logits[[r["index"] for r in top]])), atol=1e-5
    )
    st = pytest.importorskip("sentence_transformers")
    ce = st.CrossEncoder(str(folder), device="cpu")
    np.testing.assert_allclose(ce.predict([(query, p) for p in passages]), 1 / (1 + np.exp(-logits)), atol=1e-5)
    for d in ("listwise",):
        hf2 = AutoModelForSequenceClassification.from_pretrained(str(reranker / d))
        assert hf2.config.num_labels == 1


def test_not_a_cross_encoder_is_refused():
    from bertkit import pipeline

    with pytest.raises(ValueError, match="not a cross-encoder"):
        pipeline("text-ranking", model=MINILM)


def test_search_rerank_reorders_first_hits(reranker, pairs, tmp_path, capsys):
    from bertkit import pipeline
    from bertkit.search.index import build_index

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(p for _, p in pairs) + "\n")
    build_index(MINILM, corpus, tmp_path / "idx", progress=False)
    query = pairs[5][0]
    assert (
        main(
            [
                "search",
                "--index",
                str(tmp_path / "idx"),
                "--rerank",
                str(reranker / "bce"),
                "--rerank-depth",
                "6",
                "--top-k",
                "4",
                "--dtype",
                "fp32",
                query,
            ]
        )
        == 0
    )
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  ")]
    # each reranked hit says its score is the reranker's: "  3.2100 (reranked: logit; retrieval 0.81)  [7] text"
    shown = [re.match(r"\s+(-?[\d.]+)(?: \(reranked: [^)]*\))?\s+\[(\d+)\] (.*)", x).groups() for x in lines]
    assert len(shown) == 4
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "idx"), "--top-k", "6", "--dtype", "fp32", query]) == 0
    first6 = [
        re.match(r"\s+(-?[\d.]+)\s+\[(\d+)\] (.*)", x).group(3)
        for x in capsys.readouterr().out.splitlines()
        if x.startswith("  ")
    ]
    want = pipeline("text-ranking", model=reranker / "bce")(query, first6, top_k=4)
    assert [s[2] for s in shown] == [w["text"] for w in want]
    np.testing.assert_allclose([float(s[0]) for s in shown], [w["score"] for w in want], atol=1e-3)


def test_listwise_trained_a_different_head(reranker, pairs):
    from bertkit import pipeline

    q, passages = pairs[0][0], [p for _, p in pairs[:6]]
    a = [
        r["score"]
        for r in sorted(pipeline("text-ranking", model=reranker / "bce")(q, passages), key=lambda r: r["index"])
    ]
    b = [
        r["score"]
        for r in sorted(pipeline("text-ranking", model=reranker / "listwise")(q, passages), key=lambda r: r["index"])
    ]
    assert not np.allclose(a, b, atol=1e-4)


def _beir_files(pairs, tmp_path) -> tuple[dict, dict, list[str]]:
    """20 queries (first sentences) over 40 passages in BEIR's layout; the evaluate-embeddings flags."""
    qs = {f"q{i}": q for i, (q, _) in enumerate(pairs[:20])}
    docs = {f"d{i}": p for i, (_, p) in enumerate(pairs)}
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in qs.items()))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in docs.items()))
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(20)))
    args = ["evaluate-embeddings", "--model", MINILM, "--queries", str(tmp_path / "q.jsonl")]
    return qs, docs, [*args, "--corpus", str(tmp_path / "c.jsonl"), "--qrels", str(tmp_path / "qrels.tsv")]


def _mrr_by_hand(qs: dict, docs: dict, reranker_dir, depth: int, fusion: str = "none") -> float:
    """MRR@10 from the two pipelines: cosine order, the first ``depth`` reordered by the cross-encoder's
    logits, or by the sum of both lists' scipy z-scores (``fusion="zscore"``)."""
    from scipy.stats import zscore

    from bertkit import pipeline

    emb = pipeline("sentence-embedding", model=MINILM)
    rank = pipeline("text-ranking", model=reranker_dir)
    cids = list(docs)
    c = np.asarray(emb([docs[k] for k in cids]))
    total = 0.0
    for i, q in enumerate(qs.values()):
        cos = c @ np.asarray(emb(q))
        order = list(np.argsort(-cos, kind="stable"))
        logits = np.zeros(depth)
        for r in rank(q, [docs[cids[j]] for j in order[:depth]]):
            logits[r["index"]] = r["score"]
        key = logits if fusion == "none" else zscore(cos[order[:depth]]) + zscore(logits)
        head = [order[k] for k in np.argsort(-key, kind="stable")]
        ids = [cids[j] for j in head + order[depth:10]]
        total += next((1 / (r + 1) for r, d in enumerate(ids) if d == f"d{i}"), 0.0)
    return total / len(qs)


def test_evaluate_embeddings_with_rerank(reranker, pairs, tmp_path):
    """MRR@10 after reranking the first 5 hits equals the one computed by hand from the pipelines."""
    qs, docs, args = _beir_files(pairs, tmp_path)
    out = tmp_path / "r.json"
    rerank = ["--rerank", str(reranker / "bce"), "--rerank-depth", "5", "--output", str(out), "--no-progress"]
    assert main([*args, *rerank]) == 0
    got = json.loads(out.read_text())["retrieval"]["mrr@10"]
    assert got == pytest.approx(_mrr_by_hand(qs, docs, reranker / "bce", 5), abs=1e-6)


def test_bad_rows_get_one_line_and_leave_no_folder(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q", "passage": "p", "label": 1}\n{"query": "q", "passage": "r", "label": 3}\n')
    out = tmp_path / "o"
    assert main(["train-reranker", "--model", MINILM, "--train", str(bad), "--output", str(out), "--no-progress"]) == 1
    assert f"{bad}:2: label 3 is outside [0, 1]" in capsys.readouterr().err
    assert not out.exists()


def test_fused_scores_equal_scipy_ranks_and_zscores():
    """Reciprocal-rank and z-score fusion against scipy's own ranks and standard scores."""
    from scipy.stats import rankdata, zscore

    from bertkit.search.rerank import RRF_K, fuse_scores

    rng = np.random.default_rng(0)
    retrieval, rerank = rng.uniform(0.2, 0.9, 20), rng.normal(0, 4, 20)
    want_rrf = 1 / (RRF_K + rankdata(-retrieval, method="ordinal")) + 1 / (RRF_K + rankdata(-rerank, method="ordinal"))
    np.testing.assert_allclose(fuse_scores(retrieval, rerank, "rrf"), want_rrf, rtol=1e-12)
    np.testing.assert_allclose(fuse_scores(retrieval, rerank, "zscore"), zscore(retrieval) + zscore(rerank), rtol=1e-9)
    assert fuse_scores(retrieval, rerank, "none") == pytest.approx(list(rerank))
    with pytest.raises(ValueError, match="fusion 'borda' is not one of none, rrf, zscore"):
        fuse_scores(retrieval, rerank, "borda")


def test_evaluate_embeddings_with_fused_rerank(reranker, pairs, tmp_path, capsys):
    """--fusion zscore: MRR@10 equals the one computed by hand from both pipelines' scores."""
    qs, docs, args = _beir_files(pairs, tmp_path)
    args.append("--no-progress")
    assert main([*args, "--fusion", "zscore"]) == 1  # fusion without a cross-encoder to fuse
    assert "--fusion zscore fuses a cross-encoder's scores: give --rerank DIR" in capsys.readouterr().err
    out = tmp_path / "r.json"
    fused = ["--rerank", str(reranker / "bce"), "--rerank-depth", "6", "--fusion", "zscore", "--output", str(out)]
    assert main([*args, *fused]) == 0
    got = json.loads(out.read_text())["retrieval"]["mrr@10"]
    assert got == pytest.approx(_mrr_by_hand(qs, docs, reranker / "bce", 6, "zscore"), abs=1e-6)


def test_rerank_metrics_per_fusion_scores_each_pair_once(reranker, pairs):
    """Several fusions from one scoring of each query's head, each equal to its own by-hand MRR@10,
    with the ranker given as a callable (as another library's cross-encoder is measured)."""
    from bertkit import pipeline
    from bertkit.search.rerank import rerank_metrics_per_fusion

    qs = {f"q{i}": q for i, (q, _) in enumerate(pairs[:20])}
    docs = {f"d{i}": p for i, (_, p) in enumerate(pairs)}
    qrels = {f"q{i}": {f"d{i}": 1.0} for i in range(20)}
    emb = pipeline("sentence-embedding", model=MINILM)
    # the vectors _mrr_by_hand uses (each query alone, the passages as one call), so both sides rank the
    # very same cosines on any CPU
    q = np.stack([np.asarray(emb(x)) for x in qs.values()])
    c = np.asarray(emb(list(docs.values())))
    ranker, calls = pipeline("text-ranking", model=str(reranker / "bce")), []

    def counted(query, passages, **kw):
        calls.append(query)
        return ranker(query, passages, **kw)

    per = rerank_metrics_per_fusion(counted, q, list(qs), qs, c, list(docs), docs, qrels, ("none", "zscore"), 6, False)
    assert len(calls) == 20 and sorted(per) == ["none", "zscore"]
    for fusion in ("none", "zscore"):
        assert per[fusion]["queries"] == 20
        assert per[fusion]["mrr@10"] == pytest.approx(_mrr_by_hand(qs, docs, reranker / "bce", 6, fusion), abs=1e-6)
    with pytest.raises(ValueError, match="fusion 'borda' is not one of none, rrf, zscore"):
        rerank_metrics_per_fusion(counted, q, list(qs), qs, c, list(docs), docs, qrels, ("none", "borda"))
    assert len(calls) == 20  # refused before any query was scored


def test_train_reranker_writes_the_model_card_sentence_transformers_writes(reranker):
    """README.md in the trained folder: the loss's parameters are sentence-transformers' own
    BinaryCrossEntropyLoss.get_config_dict() for the same model, the data size is the rows trained
    on, the flags that differ from their defaults are listed, and the training-log table holds the
    losses the run logged."""
    yaml = pytest.importorskip("yaml")
    from sentence_transformers.cross_encoder import CrossEncoder
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    folder = reranker / "bce"
    text = (folder / "README.md").read_text(encoding="utf-8")
    head = yaml.safe_load(text.split("---\n", 2)[1])
    assert head["library_name"] == "sentence-transformers" and head["pipeline_tag"] == "text-ranking"
    for tag in ("cross-encoder", "generated_from_trainer", "dataset_size:48", "loss:BinaryCrossEntropyLoss"):
        assert tag in head["tags"], tag
    config = re.search(r"`BinaryCrossEntropyLoss` with these parameters:\n  ```json\n(.*?)\n  ```", text, re.S)
    ref = BinaryCrossEntropyLoss(CrossEncoder(str(folder), device="cpu")).get_config_dict()
    assert config and json.loads(config.group(1)) == json.loads(json.dumps(ref))
    assert "- `max_steps`: 3" in text and "- `lr`: 5e-05" in text and "- `batch_size`: 8" in text
    logged = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
    losses = {r["step"]: r["loss"] for r in logged if "loss" in r}
    table = text.split("### Training Logs", 1)[1]
    rows = re.findall(r"^\| [\d.]+ \| (\d+) \| ([\d.]+) \|", table, re.M)
    assert [int(s) for s, _ in rows] == sorted(losses) == [1, 2, 3]
    assert all(abs(float(v) - losses[int(s)]) <= 6e-5 for s, v in rows)
    # The Evaluation section: sentence-transformers' reranking evaluator over the validation rows
    # grouped by query, on the saved model, gives the same scores (to the card's 4 decimals).
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    val = [json.loads(x) for x in (reranker / "train.jsonl").read_text().splitlines()]
    groups: dict = {}
    for r in val:
        groups.setdefault(r["query"], {"positive": [], "negative": []})[
            "positive" if r["label"] else "negative"
        ].append(r["passage"])
    samples = [{"query": q, **g} for q, g in groups.items()]
    ref = CrossEncoderRerankingEvaluator(samples, name="train", write_csv=False)(
        CrossEncoder(str(folder), device="cpu")
    )
    section = text.split("## Evaluation", 1)[1].split("## Training Details", 1)[0]
    shown = {k: float(v) for k, v in re.findall(r"^\| \**([a-z0-9_@]+)\** \| \**([\d.]+)\** \|$", section, re.M)}
    assert {"map", "mrr@10", "ndcg@10"} <= set(shown)
    for key, value in shown.items():
        assert abs(value - ref[f"train_{key}"]) <= 1e-3, key
    # The log table shows each evaluation's nDCG@10 under the evaluator's name, as sentence-transformers'
    # trainer logs it; the last one is the final model's, which the Evaluation section shows too.
    evals = {r["step"]: r["eval_ndcg@10"] for r in logged if "eval_ndcg@10" in r}
    table = {int(r["Step"]): r["train_ndcg@10"] for r in card_log_table(text)}
    assert evals and {s for s, v in table.items() if v != "-"} == set(evals)
    assert all(abs(float(table[s]) - v) <= 6e-5 for s, v in evals.items())
    assert max(evals) == 3 and abs(evals[3] - shown["ndcg@10"]) <= 1e-3
    # The training data's statistics (its 48 rows, under 100) and first 3 rows, as sentence-transformers'
    # own card code computes them from the file's columns with the saved model's tokenizer: the
    # query and passage alone in tokens, the 0/1 labels as each value's share.
    cols = {k: [r[k] for r in val] for k in ("query", "passage", "label")}
    theirs = CrossEncoder(str(folder), device="cpu").model_card_data
    training = text.split("### Training Dataset", 1)[1].split("### Training Hyperparameters", 1)[0]
    assert "* Approximate statistics based on the first 48 samples:" in training
    details = [line for line in training.splitlines() if line.startswith("  | details |")]
    assert len(details) == 1
    for column in cols:
        stats = theirs._compute_column_stats(Dataset(cols), column)
        if column != "label":
            assert stats["data"]["min"].endswith(" tokens"), stats
        listed = "<ul><li>" + "</li><li>".join(f"{k}: {v}" for k, v in stats["data"].items()) + "</li></ul>"
        assert listed in details[0], (column, stats)
    samples = training.split("* Samples:", 1)[1]
    for r in val[:3]:
        assert f"| <code>{r['query']}</code> | <code>{r['passage']}</code> | <code>{r['label']}</code> |" in samples
    # listwise has no sentence-transformers loss of its own: the card names the flag instead
    listwise = (reranker / "listwise" / "README.md").read_text(encoding="utf-8")
    assert "- `loss`: listwise" in listwise and "BinaryCrossEntropyLoss" not in listwise
    assert "<li>size: 3 elements</li>" in listwise  # each group's passages: the positive and 2 negatives
