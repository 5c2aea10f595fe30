"""bertkit.evaluation's cross-encoder evaluators against sentence-transformers' own: each library's
evaluator on its own CrossEncoder over the same real folders (MiniLM with a seeded 1-label and 3-label
head), on real text (BBC News first sentence -> rest of the article, the Lee STS pairs, polarity
review pairs); the same keys, values, primary_metric and CSV files."""

import csv
import json
import re

import numpy as np
import pytest

import bertkit
from bertkit import evaluation as bke
from bertkit.assets import asset_path
from bertkit.sentence.evaluation.metrics import (
    average_precision,
    best_accuracy_threshold,
    best_f1_threshold,
    rerank_metrics,
)

st = pytest.importorskip("sentence_transformers")
from conftest import seeded_head_folder  # noqa: E402
from sentence_transformers.cross_encoder.evaluation import (
    CrossEncoderClassificationEvaluator as STClassification,
)
from sentence_transformers.cross_encoder.evaluation import (
    CrossEncoderCorrelationEvaluator as STCorrelation,
)
from sentence_transformers.cross_encoder.evaluation import (
    CrossEncoderRerankingEvaluator as STReranking,
)
from sentence_transformers.sentence_transformer.evaluation import BinaryClassificationEvaluator as STBinary

MINILM = str(asset_path("minilm"))
TOL = 1e-5


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(bertkit, sentence-transformers) CrossEncoders over a 1-label and a 3-label folder; pairs are
    cut at 256 tokens by both, which keeps the long Lee documents quick."""
    d = tmp_path_factory.mktemp("cross-encoders")
    folders = {1: seeded_head_folder(d / "one", 1, seed=0), 3: seeded_head_folder(d / "three", 3, seed=1)}
    return {
        n: (bertkit.CrossEncoder(f, max_length=256), st.CrossEncoder(f, device="cpu", max_length=256))
        for n, f in folders.items()
    }


@pytest.fixture(scope="module")
def bbc():
    """(first sentence, next three sentences) of 16 BBC articles."""
    out = []
    for line in open(asset_path("bbcnews-test"), encoding="utf-8"):
        s = [x for x in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(x) > 20]
        if len(s) >= 7:
            out.append((s[0], " ".join(s[1:4]), " ".join(s[4:7])))
        if len(out) == 16:
            break
    return out


def negative_samples(bbc):
    """Query -> its article's body (positive), four other articles' bodies (negatives)."""
    n = len(bbc)
    return [
        {"query": q, "positive": [body], "negative": [bbc[(i + j) % n][1] for j in (1, 3, 5, 7)]}
        for i, (q, body, _) in enumerate(bbc[:10])
    ]


def document_samples(bbc):
    """First-stage rankings ("documents"): the article's body somewhere among other articles, its later
    sentences a second positive that the first stage missed; one ranking with no positive at all;
    a positive given as a bare text; a positive listed twice in the documents."""
    n = len(bbc)
    samples = []
    for i, (q, body, more) in enumerate(bbc[:10]):
        others = [bbc[(i + j) % n][1] for j in (1, 2, 4, 6)]
        docs = others[: i % 4] + [body] + others[i % 4 :]
        samples.append({"query": q, "positive": [body, more], "documents": docs})
    samples[3]["documents"] = [bbc[12][1], bbc[13][1], bbc[14][1]]
    samples[5]["positive"] = bbc[5][1]
    samples[7]["documents"] = [bbc[7][1], bbc[1][1], bbc[7][1], bbc[2][1]]
    return samples


@pytest.fixture(scope="module")
def lee():
    """24 Lee document pairs (news articles) with their human similarity score."""
    with open(asset_path("sts-lee"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:24]
    return [(r["sentence1"], r["sentence2"]) for r in rows], [float(r["score"]) for r in rows]


@pytest.fixture(scope="module")
def polarity():
    """Pairs of polarity reviews: 1 when both share a sentiment (for a 1-label head), and the number of
    positive reviews in the pair, 0..2 (for a 3-label head)."""
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        rows = [row for row, _ in zip(csv.DictReader(f), range(400))]
    pos = [r["text"] for r in rows if r["label"] == "positive"][:20]
    neg = [r["text"] for r in rows if r["label"] == "negative"][:20]
    texts = [(t, 1) for t in pos] + [(t, 0) for t in neg]
    rng = np.random.default_rng(0)
    order = rng.permutation(len(texts))
    pairs, same, count = [], [], []
    for a, b in zip(order[:20], order[20:]):
        (ta, la), (tb, lb) = texts[a], texts[b]
        pairs.append([ta, tb])
        same.append(int(la == lb))
        count.append(la + lb)
    assert 0 < sum(same) < len(same) and set(count) == {0, 1, 2}
    return pairs, same, count


def assert_same_results(got, want, tol=TOL):
    assert list(got) == list(want)  # the same keys, in the same order
    for key, value in want.items():
        assert isinstance(got[key], float), key
        assert got[key] == pytest.approx(value, abs=tol), key


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def assert_same_csv(got_path, want_path, rows, tol=TOL):
    assert got_path.read_bytes().count(b"\r\n") == want_path.read_bytes().count(b"\r\n") == rows + 1
    got, want = read_csv(got_path), read_csv(want_path)
    assert got[0] == want[0]  # the header
    assert len(got) == len(want) == rows + 1
    for g, w in zip(got[1:], want[1:]):
        assert g[:2] == w[:2]  # epoch, steps
        assert [float(x) for x in g[2:]] == pytest.approx([float(x) for x in w[2:]], abs=tol)


def run_both(ours_ev, ref_ev, ours_model, ref_model, tmp_path):
    """Two calls of each evaluator (epoch 0 and 1), writing CSVs; the second call's results."""
    for epoch, steps in ((0, 5), (1, 10)):
        want = ref_ev(ref_model, output_path=str(tmp_path / "st"), epoch=epoch, steps=steps)
        got = ours_ev(ours_model, output_path=str(tmp_path / "bk"), epoch=epoch, steps=steps)
        assert_same_results(got, want)
        assert ours_ev.primary_metric == ref_ev.primary_metric
    assert ours_ev.csv_file == ref_ev.csv_file
    assert_same_csv(tmp_path / "bk" / ours_ev.csv_file, tmp_path / "st" / ref_ev.csv_file, rows=2)
    return got


@pytest.mark.parametrize(
    "kind, kwargs",
    [
        ("negative", dict(name="bbc")),
        ("negative", dict(at_k=2, batch_size=7)),
        ("documents", dict(name="bbc", at_k=3)),
        ("documents", dict(always_rerank_positives=False)),
    ],
)
def test_reranking_evaluator_equals_sentence_transformers(bbc, models, tmp_path, kind, kwargs):
    samples = negative_samples(bbc) if kind == "negative" else document_samples(bbc)
    ours, ref = models[1]
    ours_ev, ref_ev = bke.CrossEncoderRerankingEvaluator(samples, **kwargs), STReranking(samples, **kwargs)
    got = run_both(ours_ev, ref_ev, ours, ref, tmp_path)
    assert ours_ev.get_config_dict() == ref_ev.get_config_dict()
    k = kwargs.get("at_k", 10)
    primary = got[ours_ev.primary_metric]
    assert ours_ev.primary_metric.endswith(f"ndcg@{k}") and 0.2 < primary < 0.99  # a real, imperfect ranking
    if kind == "documents":
        assert any(key.endswith("base_map") for key in got)
        # the model card's "0.1234 (+0.0123)" strings: the reranked score and its gain over the first stage
        recorded = ours.model_card_data.evaluations[-1]
        assert recorded[0] == "CrossEncoderRerankingEvaluator" and recorded[2:] == (1, 10)
        assert recorded[1] == ref.model_card_data.eval_results_dict[ref_ev]


def test_correlation_evaluator_equals_sentence_transformers(lee, models, tmp_path):
    pairs, gold = lee
    ours, ref = models[1]
    ours_ev = bke.CrossEncoderCorrelationEvaluator(pairs, gold, name="lee", batch_size=5)
    ref_ev = STCorrelation(pairs, gold, name="lee", batch_size=5)
    got = run_both(ours_ev, ref_ev, ours, ref, tmp_path)
    assert list(got) == ["lee_pearson", "lee_spearman"] and ours_ev.primary_metric == "lee_spearman"
    assert got["lee_pearson"] != 0 and got["lee_spearman"] != 0  # constant scores would give 0 (scipy: nan)


@pytest.mark.parametrize("num_labels", [1, 3])
def test_classification_evaluator_equals_sentence_transformers(polarity, models, tmp_path, num_labels):
    pairs, same, count = polarity
    labels = same if num_labels == 1 else count
    ours, ref = models[num_labels]
    ours_ev = bke.CrossEncoderClassificationEvaluator(pairs, labels, name="polarity")
    ref_ev = STClassification(pairs, labels, name="polarity")
    got = run_both(ours_ev, ref_ev, ours, ref, tmp_path)
    assert ours_ev.csv_headers == ref_ev.csv_headers
    want_primary = "average_precision" if num_labels == 1 else "f1_macro"
    assert ours_ev.primary_metric == f"polarity_{want_primary}"
    assert 0.0 < got[ours_ev.primary_metric] < 1.0


def test_sentence_transformers_evaluators_on_bertkit_model(bbc, lee, polarity, models):
    """sentence-transformers' own evaluators take bertkit's CrossEncoder and give its numbers; the
    results land on model_card_data as they do on a sentence-transformers model."""
    ours, ref = models[1]
    pairs, gold = lee
    evaluators = [
        STReranking(document_samples(bbc), name="bbc"),
        STCorrelation(pairs, gold, name="lee"),
        STClassification(polarity[0], polarity[1], name="polarity"),
    ]
    for ev in evaluators:
        want = ev(ref)
        before = len(ours.model_card_data.evaluations)
        assert_same_results(ev(ours), want)
        recorded = ours.model_card_data.evaluations[before:]
        want_card = ref.model_card_data.eval_results_dict[ev]
        assert len(recorded) == 1 and recorded[0][0] == type(ev).__name__ and list(recorded[0][1]) == list(want_card)
        for key, value in want_card.items():
            assert recorded[0][1][key] == (value if isinstance(value, str) else pytest.approx(value, abs=TOL)), key
    # and bertkit's SequentialEvaluator runs bertkit's cross-encoder evaluators together
    seq = bke.SequentialEvaluator(
        [
            bke.CrossEncoderCorrelationEvaluator(pairs, gold, name="lee"),
            bke.CrossEncoderRerankingEvaluator(document_samples(bbc), name="bbc"),
        ]
    )
    got = seq(ours)
    assert got["sequential_score"] == pytest.approx(evaluators[0](ref)["bbc_ndcg@10"], abs=TOL)


def test_equal_scores_count_as_in_sentence_transformers():
    """Runs of equal scores (duplicate documents score alike): MRR, nDCG, MAP, average precision and the
    best accuracy / F1 thresholds equal sentence-transformers' (scikit-learn's) on random tied scores."""
    rng = np.random.default_rng(0)
    ref = STReranking([{"query": "q", "positive": ["a"], "negative": ["b"]}])
    ties = 0
    for trial in range(400):
        n = int(rng.integers(2, 25))
        y = rng.integers(0, 2, n)
        y[rng.integers(n)] = 1
        s = (rng.integers(0, 4, n) / 3).astype(np.float32) if trial % 2 else rng.random(n).astype(np.float32)
        ties += len(np.unique(s)) < n
        k = int(rng.integers(1, 12))
        ref.at_k = k
        mrr, ndcg, ap = ref.compute_metrics(y.tolist(), s)
        got = rerank_metrics(y.tolist(), s, k)
        assert [got[f"mrr@{k}"], got[f"ndcg@{k}"], got["map"]] == pytest.approx([mrr, ndcg, ap], abs=1e-12)
        assert average_precision(y, s) == pytest.approx(ap, abs=1e-12)
        assert best_accuracy_threshold(s, y) == STBinary.find_best_acc_and_threshold(s, y, True)
        assert best_f1_threshold(s, y) == STBinary.find_best_f1_and_threshold(s, y, True)
    assert ties > 150


def test_bad_input_is_refused_by_name(bbc, lee, polarity, models):
    ours = models[1][0]
    q, body, _ = bbc[0]
    rerank = bke.CrossEncoderRerankingEvaluator
    with pytest.raises(ValueError, match=r"samples\[1\] has no 'positive' key"):
        rerank([{"query": q, "positive": body, "negative": [q]}, {"query": q, "negative": [body]}])
    with pytest.raises(ValueError, match=r"samples\[0\] needs exactly one of 'negative' and 'documents'"):
        rerank([{"query": q, "positive": body, "negative": [], "documents": [body]}])
    with pytest.raises(ValueError, match=r"samples\[0\]\['documents'\] is empty"):
        rerank([{"query": q, "positive": body, "documents": []}])
    with pytest.raises(ValueError, match=r"samples\[0\] has 1 documents to rerank"):
        rerank([{"query": q, "positive": body, "negative": []}])
    with pytest.raises(ValueError, match=r"samples\[0\]\['negative'\] must be a text or a list of texts, got \[3\]"):
        rerank([{"query": q, "positive": body, "negative": [3]}])
    with pytest.raises(ValueError, match="at_k must be an integer >= 1, got 0"):
        rerank([{"query": q, "positive": body, "negative": [body]}], at_k=0)
    pairs, gold = lee
    with pytest.raises(ValueError, match="got 24 and 23"):
        bke.CrossEncoderCorrelationEvaluator(pairs, gold[:-1])
    with pytest.raises(ValueError, match=r"scores must be finite numbers, got nan"):
        bke.CrossEncoderCorrelationEvaluator(pairs, [float("nan")] + gold[1:])
    with pytest.raises(ValueError, match=r"sentence_pairs\[2\] must be a pair of texts, got 'just one text'"):
        bke.CrossEncoderCorrelationEvaluator([*pairs[:2], "just one text"], gold[:3])
    cls_pairs, same, count = polarity
    with pytest.raises(ValueError, match=r"labels must be class numbers \(whole numbers >= 0\), got 'yes'"):
        bke.CrossEncoderClassificationEvaluator(cls_pairs, ["yes"] + same[1:])
    with pytest.raises(ValueError, match="label 2 is beyond the model's 1 label"):
        bke.CrossEncoderClassificationEvaluator(cls_pairs, count)(ours)
    with pytest.raises(ValueError, match="needs one score per pair .* shape \\(24, 3\\)"):
        bke.CrossEncoderCorrelationEvaluator(pairs, gold)(models[3][0])
    with pytest.raises(ValueError, match="labels must be 0 or 1, got 2"):
        average_precision([0, 2], [0.1, 0.2])
