"""Readers and batching: real asset files, and bad input (missing columns, unknown labels, broken
lines) reported with the file, line and value."""

import json
import warnings

import pytest

from bertkit.assets import asset_path
from bertkit.data.batching import LengthGroupedBatchSampler, collate_features, padding_fraction
from bertkit.data.readers import (
    build_label_list,
    check_labels,
    read_conll,
    read_squad,
    read_swag,
    read_table,
)


def test_read_real_tables():
    bbc = read_table(asset_path("bbcnews-train"))
    n_lines = sum(1 for l in asset_path("bbcnews-train").read_text().splitlines() if l.strip())
    assert len(bbc) == n_lines  # one JSON object per line
    assert build_label_list([e.label for e in bbc]) == ["business", "entertainment", "politics", "sport", "tech"]
    pol = read_table(asset_path("polarity-train"))
    assert len(pol) == 3200
    assert {e.label for e in pol} == {"positive", "negative"}
    assert pol[0].text.startswith("a film of precious increments")
    assert pol[0].line == 2  # header is line 1


def test_missing_column_lists_available(tmp_path):
    with pytest.raises(ValueError, match=r"no column 'sentence'; available columns: 'label', 'text'"):
        read_table(asset_path("polarity-train"), text_column="sentence")
    p = tmp_path / "d.jsonl"
    p.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": "y"}\n')
    with pytest.raises(ValueError, match="'text', 'label'"):
        read_table(p, label_column="category")


def test_empty_file_and_bad_json(tmp_path):
    p = tmp_path / "empty.csv"
    p.write_text("")
    with pytest.raises(ValueError, match="empty.csv: file is empty"):
        read_table(p)
    q = tmp_path / "bad.jsonl"
    q.write_text('{"text": "a", "label": "x"}\n{"text": "b", label}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        read_table(q)
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        read_table(tmp_path / "nope.tsv")


def test_unseen_validation_label_names_line_and_label(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\ngood film\tpos\nbad film\tneg\n")
    val = tmp_path / "val.tsv"
    val.write_text("sentence\tlabel\nfine film\tpos\nodd film\tneutral\n")
    tr = read_table(train, text_column="sentence")
    label2id = {l: i for i, l in enumerate(build_label_list([e.label for e in tr]))}
    assert label2id == {"neg": 0, "pos": 1}
    with pytest.raises(ValueError, match=r"val.tsv:3: label 'neutral' was never seen in training"):
        check_labels(val, read_table(val, text_column="sentence"), label2id)


def test_pairs_and_multilabel(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text('premise,hypothesis,tags\n"A man, smiling.",A person,a|b\nx,y,b\n')
    ex = read_table(p, text_column="premise", text_pair_column="hypothesis", label_column="tags", label_separator="|")
    assert ex[0].text == "A man, smiling." and ex[0].text_pair == "A person" and ex[0].label == ["a", "b"]
    assert build_label_list(["10", "2", "1"]) == ["1", "2", "10"]  # numeric order


def test_read_conll_real_and_malformed(tmp_path):
    sents = read_conll(asset_path("wnut16-train"))
    assert sents[0].tokens[:3] == ["RT", "@BunBTrillOG", ":"]
    assert all(len(s.tokens) == len(s.tags) for s in sents)
    n_tokens = sum(len(s.tokens) for s in sents)
    raw = [l for l in asset_path("wnut16-train").read_text().splitlines() if l.strip()]
    assert n_tokens == len(raw)
    msra = read_conll(asset_path("msra-test"))
    assert any(t.startswith("M-") or t.startswith("E-") for s in msra for t in s.tags)
    p = tmp_path / "bad.conll"
    p.write_text("John\tB-PER\nlives\tO\n\nin\tO\nParis\n")
    with pytest.raises(ValueError, match=r"bad.conll:5: malformed line 'Paris'"):
        read_conll(p)
    q = tmp_path / "badtag.conll"
    q.write_text("John\tPERSON\n")
    with pytest.raises(ValueError, match=r"badtag.conll:1: tag 'PERSON'"):
        read_conll(q)


def test_read_squad_fixture_and_mismatch_warning(tmp_path):
    ex = read_squad("tests/data/squad_small.json")
    assert len(ex) == 20
    assert sum(e.is_impossible for e in ex) == 3
    for e in ex:
        for a in e.answers:
            assert e.context[a["answer_start"] : a["answer_start"] + len(a["text"])] == a["text"]
    data = json.load(open("tests/data/squad_small.json"))
    qas = data["data"][0]["paragraphs"][0]["qas"]
    qas[0]["answers"][0]["answer_start"] += 3
    qas[1]["answers"][0]["answer_start"] += 1
    p = tmp_path / "bad_squad.json"
    p.write_text(json.dumps(data))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ex2 = read_squad(p)
    msgs = [str(x.message) for x in w]
    assert len(msgs) == 1 and "2 answer(s) do not match" in msgs[0]
    assert len(ex2) == 18


def test_read_swag(tmp_path):
    p = tmp_path / "swag.jsonl"
    rows = [
        {
            "sent1": "She opens the fridge.",
            "sent2": "She",
            "ending0": "takes out milk.",
            "ending1": "flies away.",
            "label": 0,
        },
        {
            "sent1": "He kicks the ball.",
            "sent2": "The ball",
            "ending0": "sings.",
            "ending1": "rolls into the goal.",
            "label": 1,
        },
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    ex = read_swag(p)
    assert ex[0].endings == ["She takes out milk.", "She flies away."] and ex[1].label == 1
    p.write_text(json.dumps({"sent1": "x", "ending0": "a", "ending1": "b", "label": 2}))
    with pytest.raises(ValueError, match="swag.jsonl:1: label 2 out of range"):
        read_swag(p)


def test_length_grouped_batches_cut_padding():
    import random

    rng = random.Random(0)
    lengths = [rng.randint(5, 120) for _ in range(2000)]
    s = LengthGroupedBatchSampler(lengths, 32, seed=1, bucket_batches=50)
    b0 = s.batches()
    flat = sorted(i for b in b0 for i in b)
    assert flat == list(range(2000))  # every example exactly once
    s.set_epoch(1)
    assert s.batches() != b0  # reshuffled per epoch
    s.set_epoch(0)
    assert s.batches() == b0  # deterministic per (seed, epoch)
    random_batches = [list(range(i, min(i + 32, 2000))) for i in range(0, 2000, 32)]
    assert padding_fraction(lengths, b0) < 0.05 < 0.3 < padding_fraction(lengths, random_batches)
    # not sorted globally: the batch order is shuffled
    maxes = [max(lengths[i] for i in b) for b in b0]
    assert maxes != sorted(maxes, reverse=True)


def test_collate_dynamic_padding():
    feats = [
        {
            "input_ids": [101, 5, 102],
            "token_type_ids": [0, 0, 0],
            "attention_mask": [1, 1, 1],
            "labels": [-100, 3, -100],
        },
        {
            "input_ids": [101, 5, 6, 7, 102],
            "token_type_ids": [0] * 5,
            "attention_mask": [1] * 5,
            "labels": [-100, 1, 2, 2, -100],
        },
    ]
    b = collate_features(feats)
    assert b["input_ids"].shape == (2, 5)
    assert b["input_ids"][0].tolist() == [101, 5, 102, 0, 0]
    assert b["attention_mask"][0].tolist() == [1, 1, 1, 0, 0]
    assert b["labels"][0].tolist() == [-100, 3, -100, -100, -100]
    c = collate_features(
        [
            {"input_ids": [1, 2], "attention_mask": [1, 1], "labels": 1},
            {"input_ids": [1], "attention_mask": [1], "labels": 0},
        ]
    )
    assert c["labels"].tolist() == [1, 0] and c["input_ids"].shape == (2, 2)
