"""A keyword given when a pipeline is built is a default of every call, as in transformers:
``pipeline("text-classification", model=m, top_k=None)`` scores every label. The call's own keyword
wins, and a keyword no call of the task takes is refused when the pipeline is built."""

import numpy as np
import pytest
import torch

import bertkit
from bertkit.assets import asset_path
from bertkit.pipelines import pipeline

transformers = pytest.importorskip("transformers")


def _tiny(folder, cls, **kw):
    tok = bertkit.BertTokenizer.from_pretrained(asset_path("minilm"))
    torch.manual_seed(0)
    config = bertkit.BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        **kw,
    )
    cls(config).save_pretrained(folder, tokenizer=tok)
    return str(folder)


TEXTS = ["a gorgeous, witty film", "the plot goes nowhere and takes its time"]


def _shape(v):
    return type(v).__name__ + (f"[{_shape(v[0])}]" if isinstance(v, list) and v else "")


def _scores(v):
    if isinstance(v, dict):
        return [(v["label"], v["score"])]
    return [pair for x in v for pair in _scores(x)]


@pytest.mark.parametrize("built", [{}, {"top_k": None}, {"top_k": 1}, {"top_k": 2}, {"function_to_apply": "none"}])
def test_text_classification_answers_in_transformers_shape_whichever_way_top_k_comes(tmp_path, built):
    """transformers shapes the answer by whether top_k was given at all, and for one text by whether
    it came with the call or when the pipeline was built; bertkit gives the same shapes and scores."""
    folder = _tiny(tmp_path, bertkit.BertForSequenceClassification, num_labels=3)
    ours = pipeline("text-classification", model=folder, **built)
    theirs = transformers.pipeline("text-classification", model=folder, device="cpu", **built)
    for call in ({}, {"top_k": 1}, {"top_k": None}):
        for inputs in (TEXTS, TEXTS[0], {"text": TEXTS[0], "text_pair": TEXTS[1]}):
            got, want = ours(inputs, **call), theirs(inputs, **call)
            assert _shape(got) == _shape(want), (built, call, inputs)
            assert [label for label, _ in _scores(got)] == [label for label, _ in _scores(want)]
            np.testing.assert_allclose([x for _, x in _scores(got)], [x for _, x in _scores(want)], atol=1e-5)


def test_fill_mask_and_question_answering_take_top_k_when_built(tmp_path):
    mlm = _tiny(tmp_path / "mlm", bertkit.BertForMaskedLM)
    got = pipeline("fill-mask", model=mlm, top_k=2)("paris is the [MASK] of france.")
    want = transformers.pipeline("fill-mask", model=mlm, top_k=2, device="cpu")("paris is the [MASK] of france.")
    assert [d["token"] for d in got] == [d["token"] for d in want] and len(got) == 2

    # transformers 5 has no question-answering pipeline left to compare with: built equals called
    qa = _tiny(tmp_path / "qa", bertkit.BertForQuestionAnswering)
    question, context = "who directed it?", "the film was directed by jane campion in new zealand in 1993."
    got = pipeline("question-answering", model=qa, top_k=3)(question=question, context=context)
    want = pipeline("question-answering", model=qa)(question=question, context=context, top_k=3)
    assert isinstance(got, list) and len(got) == 3 and got == want


def test_a_keyword_no_call_takes_is_refused(tmp_path):
    mlm = _tiny(tmp_path / "mlm", bertkit.BertForMaskedLM)
    with pytest.raises(TypeError, match="unexpected argument topk=3; a call takes inputs, max_length, targets, top_k"):
        pipeline("fill-mask", model=mlm, topk=3)  # refused when built: no call of fill-mask takes it
    clf = _tiny(tmp_path / "clf", bertkit.BertForSequenceClassification, num_labels=2)
    built = pipeline("text-classification", model=clf, topk=3)  # a call takes more keywords: refused there
    with pytest.raises(TypeError, match="unexpected argument topk=3"):
        built(TEXTS)
