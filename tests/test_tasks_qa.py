"""Extractive QA end to end on the hand-written SQuAD v2 fixture: windows, decoding, training."""

import json

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.data.readers import read_squad
from bertkit.tasks import finetune, predict
from bertkit.tasks.qa import decode_qa, prepare_qa_features
from bertkit.tokenization import BertTokenizer

transformers = pytest.importorskip("transformers")
SQUAD = "tests/data/squad_small.json"


@pytest.fixture(scope="module")
def tok():
    return BertTokenizer.from_pretrained(str(asset_path("minilm")))


def test_windows_follow_transformers_and_hold_the_answers(tok):
    ex = read_squad(SQUAD)
    qf = prepare_qa_features(tok, ex, max_length=48, doc_stride=16)
    assert len(qf.features) > 2 * len(ex)  # long contexts really are split
    ref = transformers.BertTokenizerFast.from_pretrained(str(asset_path("minilm")))
    enc = ref(
        [e.question for e in ex],
        [e.context for e in ex],
        truncation="only_second",
        max_length=48,
        stride=16,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    assert [f["input_ids"] for f in qf.features] == enc["input_ids"]
    assert qf.example_index == enc["overflow_to_sample_mapping"]
    found = set()
    for f, i, offs in zip(qf.features, qf.example_index, qf.offsets):
        s, e = f["start_positions"], f["end_positions"]
        if s == 0:
            assert e == 0
            continue
        a = ex[i].answers[0]
        # the labelled tokens cover exactly the answer's characters
        assert ex[i].context[offs[s][0] : offs[e][1]] == a["text"]
        found.add(i)
    assert found == {i for i, e in enumerate(ex) if not e.is_impossible}


def test_decoding_maps_logits_to_char_offsets(tok):
    ex = read_squad(SQUAD)
    qf = prepare_qa_features(tok, ex, max_length=48, doc_stride=16)
    starts, ends = [], []
    for f in qf.features:  # logits that point at the gold span wherever a window holds it
        s = np.zeros(len(f["input_ids"]))
        e = np.zeros(len(f["input_ids"]))
        s[f["start_positions"]] = 10.0
        e[f["end_positions"]] = 10.0
        starts.append(s)
        ends.append(e)
    preds, nbest = decode_qa(ex, qf, starts, ends, max_answer_length=30, version_2_with_negative=True)
    for e in ex:
        if e.is_impossible:
            assert preds[e.id] == ""
        else:
            a = e.answers[0]
            assert preds[e.id] == a["text"]
            top = nbest[e.id][0]
            assert (top.start, top.end) == (a["answer_start"], a["answer_start"] + len(a["text"]))
    # the same logits with max_answer_length 1 cannot return a multi-token answer
    preds1, _ = decode_qa(ex, qf, starts, ends, max_answer_length=1)
    long_q = next(e for e in ex if len(tok.tokenize(e.answers[0]["text"] if e.answers else "")) > 1)
    assert preds1[long_q.id] != long_q.answers[0]["text"]


@pytest.mark.slow
def test_qa_finetune_end_to_end(tmp_path, tok):
    ex = read_squad(SQUAD)
    out = tmp_path / "qa"
    finetune(
        "question-answering",
        asset_path("minilm"),
        SQUAD,
        out,
        SQUAD,
        epochs=2,
        batch_size=8,
        lr=2e-4,
        warmup_ratio=0.0,
        max_length=64,
        doc_stride=24,
        max_answer_length=12,
        progress=False,
        quiet=True,
    )
    results = json.loads((out / "eval_results.json").read_text())
    assert {"exact_match", "f1"} <= set(results) and 0 <= results["f1"] <= 100
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["bertkit_task_options"]["version_2_with_negative"] is True
    # brief training still has to learn: the logged span loss falls
    losses = [json.loads(l)["loss"] for l in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in l]
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
    rows = predict(out, SQUAD, progress=False)
    for r, e in zip(rows, ex):
        if r["answer"]:
            assert e.context[r["start"] : r["end"]] == r["answer"]
    # transformers' QA model on the same folder gives the same logits
    hf = transformers.AutoModelForQuestionAnswering.from_pretrained(str(out)).eval()
    from bertkit.modeling import BertForQuestionAnswering

    ours = BertForQuestionAnswering.from_pretrained(str(out)).eval()
    enc = tok(ex[0].question, ex[0].context, return_tensors="pt")
    with torch.no_grad():
        a, b = ours(**enc), hf(**enc)
    torch.testing.assert_close(a.start_logits, b.start_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.end_logits, b.end_logits, atol=1e-4, rtol=1e-4)
