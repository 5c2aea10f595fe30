"""Metrics against known values: hand-derived cases, seqeval's published examples, scipy.stats."""

import math

import numpy as np
import pytest
import scipy.stats

from bertkit.tasks.metrics import (
    accuracy,
    entity_scores,
    f1_score,
    get_entities,
    matthews_corrcoef,
    multilabel_scores,
    normalize_answer,
    pearsonr,
    precision_recall_f1,
    spearmanr,
    squad_f1,
    squad_scores,
)


def test_accuracy_and_f1_by_hand():
    y = [0, 0, 1, 1, 2, 2]
    p = [0, 1, 1, 1, 2, 0]
    assert accuracy(p, y) == pytest.approx(4 / 6)
    # class 0: P=1/2 R=1/2 F=1/2; class 1: P=2/3 R=1 F=4/5; class 2: P=1 R=1/2 F=2/3
    prec, rec, f1 = precision_recall_f1(p, y, "macro")
    assert prec == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    assert rec == pytest.approx((1 / 2 + 1 + 1 / 2) / 3)
    assert f1 == pytest.approx((1 / 2 + 4 / 5 + 2 / 3) / 3)
    # micro F1 on single-label data is accuracy
    assert f1_score(p, y, "micro") == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="shape"):
        accuracy([0, 1], [0])


def test_mcc_binary_formula_and_extremes():
    y = [1, 1, 1, 0, 0, 0, 0, 0]
    p = [1, 1, 0, 1, 0, 0, 0, 0]
    # TP=2 FN=1 FP=1 TN=4: (2*4 - 1*1) / sqrt(3*3*5*5) = 7/15
    assert matthews_corrcoef(p, y) == pytest.approx(7 / 15)
    assert matthews_corrcoef(y, y) == pytest.approx(1.0)
    assert matthews_corrcoef([1 - v for v in y], y) == pytest.approx(-1.0)
    assert matthews_corrcoef([0] * 8, y) == 0.0  # undefined -> 0


def test_mcc_multiclass_by_hand():
    # confusion (rows true, cols pred): [[2,1,0],[0,2,0],[1,0,1]]; s=7, c=5
    y = [0, 0, 0, 1, 1, 2, 2]
    p = [0, 0, 1, 1, 1, 0, 2]
    t = np.array([3, 2, 2])
    q = np.array([3, 3, 1])
    expected = (5 * 7 - t @ q) / math.sqrt((49 - q @ q) * (49 - t @ t))
    assert matthews_corrcoef(p, y) == pytest.approx(expected)


def test_pearson_spearman_match_scipy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    y = 0.5 * x + rng.normal(size=50)
    assert pearsonr(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0])
    xt = np.round(x, 0)  # many ties
    yt = np.round(y, 0)
    assert spearmanr(xt, yt) == pytest.approx(scipy.stats.spearmanr(xt, yt)[0])
    assert spearmanr(x, np.exp(x)) == pytest.approx(1.0)


def test_seqeval_readme_example_default_bio():
    # seqeval README: f1_score of these is 0.50
    y_true = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    y_pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    s = entity_scores(y_true, y_pred)
    assert s["f1"] == pytest.approx(0.5)
    assert s["precision"] == pytest.approx(0.5)
    assert s["recall"] == pytest.approx(0.5)
    assert s["per_type"]["PER"]["f1"] == 1.0 and s["per_type"]["MISC"]["f1"] == 0.0


def test_seqeval_strict_mode_example():
    # seqeval README, strict mode with IOB2: a span starting with I- is no entity -> F1 0
    s = entity_scores([["B-NP", "I-NP", "O"]], [["I-NP", "I-NP", "O"]], scheme="BIO")
    assert s["f1"] == 0.0


def test_bioes_and_bmes_strict_spans():
    tags = ["B-PER", "I-PER", "E-PER", "O", "S-LOC", "B-ORG", "I-ORG", "O", "B-LOC", "E-ORG"]
    ents = [(e.type, e.start, e.end) for e in get_entities(tags, "BIOES")]
    # unterminated B-ORG I-ORG and type-mismatched B-LOC E-ORG are not entities
    assert ents == [("PER", 0, 3), ("LOC", 4, 5)]
    bmes = ["B-NS", "M-NS", "E-NS", "S-NR", "O", "B-NT", "E-NT"]
    assert [(e.type, e.start, e.end) for e in get_entities(bmes, "BMES")] == [("NS", 0, 3), ("NR", 3, 4), ("NT", 5, 7)]
    # gold 3 entities, predicted 2 of which 1 correct: P=1/2 R=1/3 F=0.4
    pred = ["B-NS", "M-NS", "E-NS", "S-NT", "O", "B-NT", "O"]  # B-NT unterminated
    s = entity_scores([bmes], [pred])
    assert (s["precision"], s["recall"]) == (pytest.approx(1 / 2), pytest.approx(1 / 3))
    assert s["f1"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="X-PER"):
        get_entities(["X-PER"], "BIO")


def test_squad_normalisation_and_scores():
    assert normalize_answer("The  Cat!") == "cat"
    assert normalize_answer("an apple a day, the end.") == "apple day end"
    assert normalize_answer("Theatre") == "theatre"  # articles only as whole words
    # pred [cat, sat] vs gold [cat, sat, on, mat]: P=1 R=1/2 -> F1 2/3
    assert squad_f1("the cat sat", "a cat sat on the mat") == pytest.approx(2 / 3)
    refs = {"q1": ["Denver Broncos", "The Denver Broncos"], "q2": [], "q3": ["Paris"]}
    preds = {"q1": "denver broncos.", "q2": "", "q3": "London"}
    s = squad_scores(preds, refs)
    assert s["exact_match"] == pytest.approx(200 / 3)
    assert s["f1"] == pytest.approx(200 / 3)
    # answering an unanswerable question scores 0
    assert squad_scores({"q2": "something"}, {"q2": []})["f1"] == 0.0


def test_multilabel_scores_by_hand():
    probs = np.array([[0.9, 0.2, 0.7], [0.1, 0.8, 0.4]])
    y = np.array([[1, 0, 0], [0, 1, 1]])
    # pred [[1,0,1],[0,1,0]]: tp=2 fp=1 fn=1 -> micro F1 = 4/6
    s = multilabel_scores(probs, y)
    assert s["micro_f1"] == pytest.approx(4 / 6)
    assert s["macro_f1"] == pytest.approx((1 + 1 + 0) / 3)
    assert s["subset_accuracy"] == 0.0
