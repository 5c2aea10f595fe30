"""Corpus preparation and BERT pretraining instances, on real text from the assets.

Token ids are checked against transformers' BertTokenizerFast (the reference), instance rules
against BERT's create_pretraining_data (NSP 50/50, lengths, truncation of the longer segment).
"""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.data import (
    PretrainingDataset,
    ShardedCorpus,
    create_nsp_instances,
    create_single_segment_instances,
    prepare_corpus,
    read_documents,
    split_documents,
    split_sentences,
)
from bertkit.data.instances import _truncate_pair
from bertkit.tokenization import load_vocab

SEQ = 64


def _excerpt(src: Path, dst: Path, max_lines: int) -> Path:
    lines = src.read_text(encoding="utf-8").splitlines()[:max_lines]
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dst


@pytest.fixture(scope="module")
def vocab() -> list[str]:
    return list(load_vocab(asset_path("vocab-uncased")))


@pytest.fixture(scope="module")
def tokenizer():
    from bertkit.tokenization import BertTokenizer

    return BertTokenizer(str(asset_path("vocab-uncased")), do_lower_case=True)


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("raw")
    austen = _excerpt(asset_path("austen"), d / "austen.txt", 600)
    wiki = _excerpt(asset_path("wiki"), d / "wiki.txt", 300)
    bbc = d / "bbc.jsonl"
    bbc.write_text(
        "".join(asset_path("bbcnews-train").read_text(encoding="utf-8").splitlines(True)[:40]), encoding="utf-8"
    )
    return [austen, wiki, bbc]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, corpus_files, tokenizer, vocab) -> ShardedCorpus:
    out = tmp_path_factory.mktemp("shards") / "data"
    prepare_corpus(corpus_files, tokenizer, out, vocab, progress=False, shard_tokens=20_000)
    return ShardedCorpus(out)


# ---------------------------------------------------------------------------------------- splitter


@pytest.mark.parametrize(
    "text,expected",
    [
        ("It was late. Emma sat down.", ["It was late.", "Emma sat down."]),
        ("Mr. Knightley came in. He smiled!", ["Mr. Knightley came in.", "He smiled!"]),
        ("Prices rose 2.5 percent. Markets fell.", ["Prices rose 2.5 percent.", "Markets fell."]),
        # A lower-case word does not start a sentence: the quote keeps its speech tag.
        ('"Are you ill?" asked she. "No."', ['"Are you ill?" asked she.', '"No."']),
        ("It was J. R. Smith who left. Then rain.", ["It was J. R. Smith who left.", "Then rain."]),
        ("Wait... what happened", ["Wait... what happened"]),
        ("See e.g. the U.S. report. It helps.", ["See e.g. the U.S. report.", "It helps."]),
        ("no terminator at all", ["no terminator at all"]),
        ("   ", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_bert_layout_keeps_lines(tmp_path):
    f = tmp_path / "bert.txt"
    f.write_text("First sentence. Still first line.\nSecond line.\n\nOther doc.\n", encoding="utf-8")
    docs = list(read_documents(f, fmt="bert"))
    assert docs == [["First sentence. Still first line.", "Second line."], ["Other doc."]]
    prose = list(read_documents(f, fmt="prose"))
    assert prose[0] == ["First sentence.", "Still first line.", "Second line."]


# ---------------------------------------------------------------------------------------- shards


def test_shards_match_reference_tokenizer(shards, corpus_files):
    from transformers import BertTokenizerFast

    ref = BertTokenizerFast(str(asset_path("vocab-uncased")), do_lower_case=True)
    meta = shards.meta
    assert meta["num_documents"] == shards.num_documents > 3
    assert len(meta["shards"]) > 1  # small shard size forces several shards
    # Re-read the documents and compare every sentence with the reference ids.
    docs = [d for f in corpus_files for d in read_documents(f)]
    assert len(docs) == shards.num_documents
    rng = random.Random(0)
    for di in rng.sample(range(len(docs)), 8):
        bounds = shards.document_sentences(di)
        assert len(bounds) - 1 == len(docs[di])
        for si in rng.sample(range(len(docs[di])), min(5, len(docs[di]))):
            want = ref(docs[di][si], add_special_tokens=False)["input_ids"]
            got = shards.tokens(int(bounds[si]), int(bounds[si + 1])).tolist()
            assert got == want
    assert shards.num_tokens == sum(int(s["num_tokens"]) for s in meta["shards"])
    assert (shards.folder / "vocab.txt").read_text(encoding="utf-8").split("\n")[:5] == [
        "[PAD]",
        "[unused0]",
        "[unused1]",
        "[unused2]",
        "[unused3]",
    ]


def test_jsonl_documents(tmp_path, tokenizer, vocab):
    f = tmp_path / "news.jsonl"
    f.write_text(
        json.dumps({"text": "Shares rose. Banks gained.", "label": 1})
        + "\n\n"
        + json.dumps({"text": "Rain fell."})
        + "\n",
        encoding="utf-8",
    )
    c = ShardedCorpus(prepare_corpus([f], tokenizer, tmp_path / "d", vocab, progress=False))
    assert c.num_documents == 2 and c.num_sentences == 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 1: no 'text' field"):
        prepare_corpus([bad], tokenizer, tmp_path / "e", vocab, progress=False)


# ---------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("content", [b"", b"\n\n   \n", b"\xe2\x80\x8b\n"])
def test_empty_corpus_names_file(tmp_path, tokenizer, vocab, content):
    f = tmp_path / "empty_corpus.txt"
    f.write_bytes(content)
    with pytest.raises(ValueError, match="empty_corpus.txt"):
        prepare_corpus([f], tokenizer, tmp_path / "out", vocab, progress=False)
    assert not (tmp_path / "out").exists()


def test_existing_output_folder_is_refused_and_kept(tmp_path, tokenizer, vocab):
    f = tmp_path / "c.txt"
    f.write_text("The cat sat on the mat. It was happy.\n", encoding="utf-8")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(FileExistsError, match="mine"):
        prepare_corpus([f], tokenizer, out, vocab, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert (out / "notes.txt").read_text(encoding="utf-8") == "keep me"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp folder left
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ShardedCorpus(prepare_corpus([f], tokenizer, empty, vocab, progress=False)).num_documents == 1


def test_cli_error_names_file(tmp_path, capsys):
    from bertkit.cli import main

    f = tmp_path / "blank.txt"
    f.write_text("\n\n", encoding="utf-8")
    rc = main(
        [
            "prepare-data",
            "--corpus",
            str(f),
            "--vocab",
            str(asset_path("vocab-uncased")),
            "--output",
            str(tmp_path / "o"),
            "--no-progress",
        ]
    )
    assert rc == 1
    assert "blank.txt" in capsys.readouterr().err
    rc = main(
        [
            "prepare-data",
            "--corpus",
            str(tmp_path / "missing.txt"),
            "--vocab",
            str(asset_path("vocab-uncased")),
            "--output",
            str(tmp_path / "o"),
            "--no-progress",
        ]
    )
    assert rc == 1


def test_invalid_utf8_replaced_and_counted_once(tmp_path, tokenizer, vocab):
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    a.write_bytes(b"Caf\xe9 au lait. It was \xff\xfe good.\n\nAnother doc here.\n")
    b.write_bytes("Plain text, no problem. Fine.\n".encode() + b"Bad \x80 byte.\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = prepare_corpus([a, b], tokenizer, tmp_path / "o", vocab, progress=False)
    msgs = [str(w.message) for w in caught if "UTF-8" in str(w.message)]
    assert len(msgs) == 1
    assert "replaced 4 byte(s)" in msgs[0] and "a.txt: 3" in msgs[0] and "b.txt: 1" in msgs[0]
    meta = json.loads((out / "meta.json").read_text())
    assert sum(meta["replaced_bytes"].values()) == 4
    c = ShardedCorpus(out)
    assert c.num_documents == 3


# ---------------------------------------------------------------------------------------- instances


def test_truncate_longer_segment_first():
    rng = random.Random(0)
    a, b = [0, 100], [200, 260]
    _truncate_pair(a, b, 125, rng)
    assert (a[1] - a[0], b[1] - b[0]) == (65, 60)
    assert 0 < a[0] and a[1] < 100  # cut from both ends at random
    a, b = [0, 10], [50, 200]
    _truncate_pair(a, b, 61, rng)
    assert (a[1] - a[0], b[1] - b[0]) == (10, 51)


def test_nsp_instances(shards):
    docs = np.arange(shards.num_documents)
    inst = create_nsp_instances(shards, docs, SEQ, short_seq_prob=0.1, seed=3)
    assert len(inst) > 200
    a_len = inst[:, 1] - inst[:, 0]
    b_len = inst[:, 3] - inst[:, 2]
    assert (a_len > 0).all() and (b_len > 0).all()
    assert (a_len + b_len <= SEQ - 3).all()
    frac_random = inst[:, 4].mean()
    assert 0.42 < frac_random < 0.62, frac_random
    doc_of = lambda pos: int(np.searchsorted(shards.sentence_starts[shards.document_starts], pos, side="right")) - 1
    for a0, a1, b0, b1, label in inst[:300]:
        if label == 0:  # true continuation: same document, B after A
            assert doc_of(a0) == doc_of(b0) and a1 <= b0
        else:
            assert doc_of(a0) != doc_of(b0)
    # Most instances are filled close to the limit; short_seq_prob makes some shorter.
    full = (a_len + b_len >= SEQ - 3 - 8).mean()
    assert full > 0.5
    # Short targets still take whole sentences (as in BERT), so they show as more short instances.
    never = create_nsp_instances(shards, docs, SEQ, short_seq_prob=0.0, seed=3)
    always = create_nsp_instances(shards, docs, SEQ, short_seq_prob=1.0, seed=3)
    frac_short = lambda x: ((x[:, 1] - x[:, 0] + x[:, 3] - x[:, 2]) < SEQ // 2).mean()
    assert frac_short(always) > max(0.02, 10 * frac_short(never))
    again = create_nsp_instances(shards, docs, SEQ, short_seq_prob=0.1, seed=3)
    assert np.array_equal(inst, again)


def test_single_segment_instances_cover_every_token(shards):
    train, held = split_documents(shards, 0.1, seed=0)
    assert len(held) > 0 and not set(train) & set(held)
    inst = create_single_segment_instances(shards, train, SEQ)
    lengths = inst[:, 1] - inst[:, 0]
    assert (lengths <= SEQ - 2).all() and (lengths > 0).all()
    assert (inst[:, 4] == -100).all()
    assert lengths.sum() == shards.document_tokens()[train].sum()
    # Packed close to the limit: only document ends and long next sentences leave room.
    assert lengths.mean() > 0.7 * (SEQ - 2)
    assert (lengths < (SEQ - 2) // 2).mean() < 0.15


def test_dataset_items(shards, vocab):
    inst = create_nsp_instances(shards, np.arange(shards.num_documents), SEQ, seed=1)
    ds = PretrainingDataset(shards, inst, vocab.index("[CLS]"), vocab.index("[SEP]"), seed=5)
    item = ds[7]
    a0, a1, b0, b1, label = inst[7]
    ids, types = item["input_ids"], item["token_type_ids"]
    n_a = a1 - a0
    assert ids[0] == vocab.index("[CLS]") and ids[n_a + 1] == ids[-1] == vocab.index("[SEP]")
    assert len(ids) == (a1 - a0) + (b1 - b0) + 3 <= SEQ
    assert (types[: n_a + 2] == 0).all() and (types[n_a + 2 :] == 1).all()
    assert item["next_sentence_label"] == label
    assert tuple(item["mask_seed"]) == (5, 0, 7)


def test_named_cache_dir_is_not_reused_for_another_corpus(tmp_path):
    """The automatic cache folders are keyed by their inputs; a --cache-dir given by name is not,
    so a second corpus must not silently train on the first one's shards."""
    from bertkit.data import ensure_prepared

    vocab_file = asset_path("vocab-uncased")
    a = _excerpt(asset_path("austen"), tmp_path / "a.txt", 300)
    b = _excerpt(asset_path("wiki"), tmp_path / "b.txt", 300)
    cache = tmp_path / "prep"
    assert ensure_prepared([a], vocab_file, progress=False, cache_dir=cache) == cache
    assert ensure_prepared([a], vocab_file, progress=False, cache_dir=cache) == cache  # the same corpus: reused
    with pytest.raises(ValueError, match=r"holds data prepared from .*a\.txt.*not from .*b\.txt"):
        ensure_prepared([b], vocab_file, progress=False, cache_dir=cache)
