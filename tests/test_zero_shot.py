"""pipeline("zero-shot-classification") against transformers' pipeline on the same NLI-shaped folders
(MiniLM with a seeded 3-label head) and the same real sentences (polarity reviews, BBC news).

Tolerances: fp32 scores within 1e-5 of transformers' (the same float32 maths, batched and padded
differently); bf16 scores within 0.03 of transformers' fp32 ones (bf16 keeps 8 bits of mantissa, and
each pair's rounding moves its logits by up to a few hundredths).
"""

import csv
import json
import re
import warnings

import numpy as np
import pytest
from conftest import seeded_head_folder  # noqa: E402

from bertkit.assets import asset_path
from bertkit.pipelines import pipeline

transformers = pytest.importorskip("transformers")

MINILM = asset_path("minilm")
ATOL = 1e-5
BF16_ATOL = 0.03
NLI = {0: "contradiction", 1: "neutral", 2: "entailment"}
NLI_ENTAILMENT_FIRST = {0: "ENTAILMENT", 1: "neutral", 2: "contradiction"}
NO_ENTAILMENT = {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
TOPICS = ["sport", "politics", "business", "entertainment", "technology"]
TEMPLATES = ["This example is {}.", "The topic of this text is {}", "{} news: yes or no?"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    d = tmp_path_factory.mktemp("nli")
    return {
        "nli": seeded_head_folder(d / "nli", NLI, seed=1),
        "entailment-first": seeded_head_folder(d / "entailment-first", NLI_ENTAILMENT_FIRST, seed=2),
        "no-entailment": seeded_head_folder(d / "no-entailment", NO_ENTAILMENT, seed=3),
    }


@pytest.fixture(scope="module")
def pipes(folders):
    """(bertkit, transformers) zero-shot pipelines over each folder."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the no-entailment folder's warning has its own test
        for name, folder in folders.items():
            out[name] = (
                pipeline("zero-shot-classification", model=folder),
                transformers.pipeline("zero-shot-classification", model=folder, device="cpu"),
            )
    return out


@pytest.fixture(scope="module")
def texts():
    """BBC articles' first sentences and polarity reviews, short and long mixed, unsorted."""
    out = []
    for line in open(asset_path("bbcnews-test"), encoding="utf-8"):
        first = [x for x in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(x) > 20]
        if first:
            out.append(first[0])
        if len(out) == 4:
            break
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        out += [row["text"] for row, _ in zip(csv.DictReader(f), range(4))]
    return out


def _assert_same(got, want, atol=ATOL):
    """Same shape, sequences, label order and scores; and scores that differ between labels, so that
    the order is a real check."""
    assert type(got) is type(want)
    got, want = (got, want) if isinstance(got, list) else ([got], [want])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert set(g) == {"sequence", "labels", "scores"}
        assert g["sequence"] == w["sequence"]
        assert g["labels"] == w["labels"], (g, w)
        assert all(isinstance(x, float) for x in g["scores"])
        np.testing.assert_allclose(g["scores"], w["scores"], atol=atol, rtol=0)
    assert max(np.ptp(w["scores"]) for w in want) > 100 * atol or all(len(w["scores"]) == 1 for w in want)


@pytest.mark.parametrize("folder", ["nli", "entailment-first"])
@pytest.mark.parametrize("template", TEMPLATES)
def test_single_label_equals_transformers(pipes, texts, folder, template):
    ours, ref = pipes[folder]
    got = ours(texts, candidate_labels=TOPICS, hypothesis_template=template)
    want = ref(texts, candidate_labels=TOPICS, hypothesis_template=template)
    _assert_same(got, want)
    for g in got:  # one softmax across the labels
        assert sum(g["scores"]) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("folder", ["nli", "entailment-first"])
@pytest.mark.parametrize("template", TEMPLATES[:2])
def test_multi_label_equals_transformers(pipes, texts, folder, template):
    ours, ref = pipes[folder]
    got = ours(texts, candidate_labels=TOPICS, hypothesis_template=template, multi_label=True)
    want = ref(texts, candidate_labels=TOPICS, hypothesis_template=template, multi_label=True)
    _assert_same(got, want)
    assert any(sum(g["scores"]) > 1.05 for g in got)  # each label on its own: no common softmax


def test_one_text_one_label_and_label_strings_as_transformers(pipes, texts):
    ours, ref = pipes["nli"]
    # one text: a dict; a list of one: a list
    _assert_same(ours(texts[4], TOPICS[:3]), ref(texts[4], TOPICS[:3]))
    _assert_same(ours(texts[4:5], candidate_labels=TOPICS[:3]), ref(texts[4:5], candidate_labels=TOPICS[:3]))
    # one candidate label is scored as multi-label (entailment against contradiction), as transformers does
    one = ours(texts, candidate_labels=["politics"])
    _assert_same(one, ref(texts, candidate_labels=["politics"]))
    multi = ours(texts, candidate_labels=["politics"], multi_label=True)
    assert [g["scores"] for g in one] == [g["scores"] for g in multi]
    # a comma-separated string is split and stripped, empty parts dropped
    labels = " sport,politics ,, business,"
    got = ours(texts[:3], labels)
    assert got[0]["labels"] and sorted(got[0]["labels"]) == ["business", "politics", "sport"]
    _assert_same(got, ref(texts[:3], labels))
    # a template that names the label's position, and labels repeated
    _assert_same(
        ours(texts[:2], ["sport", "sport", "tech"], hypothesis_template="It is about {0}."),
        ref(texts[:2], ["sport", "sport", "tech"], hypothesis_template="It is about {0}."),
    )


def test_a_model_without_an_entailment_label_warns_and_answers_as_transformers(folders, pipes, texts):
    with pytest.warns(UserWarning, match="Failed to determine 'entailment' label id"):
        pipeline("zero-shot-classification", model=folders["no-entailment"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a named entailment label: no warning
        pipeline("zero-shot-classification", model=folders["entailment-first"])
    ours, ref = pipes["no-entailment"]
    assert ours.entailment_id == -1
    for multi in (False, True):
        _assert_same(
            ours(texts, candidate_labels=TOPICS, multi_label=multi),
            ref(texts, candidate_labels=TOPICS, multi_label=multi),
        )
    assert pipes["entailment-first"][0].entailment_id == 0 and pipes["nli"][0].entailment_id == 2


@pytest.mark.parametrize(
    "built",
    [
        {"candidate_labels": TOPICS[:3]},
        {"candidate_labels": "sport, politics", "multi_label": True, "hypothesis_template": "About {}."},
    ],
)
def test_keywords_given_when_built_are_defaults_of_every_call(folders, texts, built):
    ours = pipeline("zero-shot-classification", model=folders["nli"], **built)
    ref = transformers.pipeline("zero-shot-classification", model=folders["nli"], device="cpu", **built)
    _assert_same(ours(texts[:3]), ref(texts[:3]))
    _assert_same(ours(texts[0]), ref(texts[0]))
    call = {"candidate_labels": ["business", "tech", "film"], "multi_label": False}  # the call's own win
    _assert_same(ours(texts[:3], **call), ref(texts[:3], **call))


def test_a_long_text_loses_its_end_not_its_hypothesis_as_in_transformers(pipes, texts):
    ours, ref = pipes["nli"]
    article = next(
        json.loads(line)["text"]
        for line in open(asset_path("bbcnews-test"), encoding="utf-8")
        if len(ref.tokenizer(json.loads(line)["text"])["input_ids"]) > 600
    )
    labels = ["sport", "the economy of a country"]
    with pytest.warns(UserWarning, match="1 sequence\\(s\\) were cut to fit 512 tokens"):
        got = ours([article, "a short one"], candidate_labels=labels)
    _assert_same(got, ref([article, "a short one"], candidate_labels=labels))
    longest = max(len(ref.tokenizer(article, "This example is {}.".format(x))["input_ids"]) for x in labels)
    assert ours.last_dropped_tokens == [longest - 512, 0]
    # a limit that a long hypothesis nearly fills: only the text gives way (cutting the longer of the two
    # first would cut the hypothesis too); transformers reads its limit from the tokenizer
    template = "This long article, which we read from its start to its end, is mostly about {} and nothing else."
    ref.tokenizer.model_max_length = 32
    try:
        want = ref([article, texts[4]], candidate_labels=labels, hypothesis_template=template)
    finally:
        ref.tokenizer.model_max_length = 512
    with pytest.warns(UserWarning, match="2 sequence\\(s\\) were cut to fit 32 tokens"):
        got = ours([article, texts[4]], candidate_labels=labels, hypothesis_template=template, max_length=32)
    _assert_same(got, want)
    with pytest.raises(ValueError, match=r"sequences\[0\] and its hypothesis make \d+ tokens, over the model's limit"):
        ours([article, "a short one"], candidate_labels=labels, truncation="error")
    with pytest.raises(ValueError, match="the hypothesis 'This example is .*' alone fills it"):
        ours("short", candidate_labels=["a label of many words " * 3], max_length=12)


def test_batch_size_and_order_do_not_change_answers(pipes, texts):
    ours, _ = pipes["nli"]
    whole = ours(texts, candidate_labels=TOPICS)
    _close(ours(texts, candidate_labels=TOPICS, batch_size=3), whole)
    one_by_one = [ours(t, candidate_labels=TOPICS) for t in texts[::-1]][::-1]
    _close(one_by_one, whole)


def _close(a, b):
    for x, y in zip(a, b, strict=True):
        assert x["labels"] == y["labels"]
        np.testing.assert_allclose(x["scores"], y["scores"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("dtype", ["bf16", "auto"])
def test_reduced_precision_stays_close_to_transformers_fp32(folders, pipes, texts, dtype):
    from bertkit.inference import resolve_dtype

    ours = pipeline("zero-shot-classification", model=folders["nli"], dtype=dtype)
    assert ours.dtype == resolve_dtype(dtype)
    _, ref = pipes["nli"]
    for multi in (False, True):
        got = ours(texts, candidate_labels=TOPICS, multi_label=multi)
        want = ref(texts, candidate_labels=TOPICS, multi_label=multi)
        for g, w in zip(got, want):
            assert sorted(g["labels"]) == sorted(w["labels"])
            by_label = dict(zip(g["labels"], g["scores"]))
            np.testing.assert_allclose([by_label[x] for x in w["labels"]], w["scores"], atol=BF16_ATOL, rtol=0)


def test_bad_input_is_one_clear_error(pipes, texts):
    ours, ref = pipes["nli"]
    for labels in (None, [], "", " , "):
        with pytest.raises(
            ValueError,
            match=f"needs .*candidate_labels.*{re.escape(repr(labels))}" if labels is not None else "none were",
        ):
            ours(texts[0], candidate_labels=labels)
    with pytest.raises(ValueError) as theirs:
        ref(texts[0], candidate_labels=["a"], hypothesis_template="no slot here")
    with pytest.raises(ValueError) as mine:
        ours(texts[0], candidate_labels=["a"], hypothesis_template="no slot here")
    assert str(mine.value) == str(theirs.value)  # transformers' own words
    with pytest.raises(ValueError, match=r"hypothesis_template 'about \{label\}' cannot be formatted.*KeyError"):
        ours(texts[0], candidate_labels=["a"], hypothesis_template="about {label}")
    with pytest.raises(ValueError, match="sequence is an empty string"):
        ours("", candidate_labels=["a"])
    with pytest.raises(ValueError, match=r"sequences\[1\] is an empty string"):
        ours([texts[0], ""], candidate_labels=["a"])
    with pytest.raises(ValueError, match="at least one sequence, got an empty list"):
        ours([], candidate_labels=["a"])
    with pytest.raises(TypeError, match=r"sequences\[1\] must be a string, got int"):
        ours([texts[0], 3], candidate_labels=["a"])
    with pytest.raises(TypeError, match="multi_label must be True or False, got 'yes'"):
        ours(texts[0], candidate_labels=["a"], multi_label="yes")
    with pytest.raises(ValueError, match="truncation must be 'cut' or 'error', got 'chunk'"):
        ours(texts[0], candidate_labels=["a"], truncation="chunk")
    with pytest.raises(TypeError, match="unexpected argument candidate_label="):
        pipeline("zero-shot-classification", model=ours.model, tokenizer=ours.tokenizer, candidate_label=["a"])


def test_a_folder_that_is_no_nli_classifier_is_refused_by_name(tmp_path):
    one = seeded_head_folder(tmp_path / "one-label", {0: "score"}, seed=4)
    with pytest.raises(ValueError, match=r"one-label has 1 output label\(s\); zero-shot-classification needs"):
        pipeline("zero-shot-classification", model=one)
    tagger = seeded_head_folder(tmp_path / "tagger", NLI, seed=5, cls="AutoModelForTokenClassification")
    with pytest.raises(ValueError, match=r"tagger is not a sequence classifier \(BertForTokenClassification\)"):
        pipeline("zero-shot-classification", model=tagger)
    with pytest.raises(ValueError, match=r"minilm is not a sequence classifier \(BertModel\)"):
        pipeline("zero-shot-classification", model=MINILM)
