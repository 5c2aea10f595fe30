"""Every reader of user files, fed random and mutated bytes: a result or a ValueError / OSError
whose message names the file, never another exception (which the CLI would print as a traceback).

Inputs are random bytes and valid files with random edits (bytes inserted, cut, truncated), so
the fuzz reaches past the first parse error into the field checks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SEEDS = {
    "csv": b'text,label\n"a good film",positive\nbad one,negative\n',
    "tsv": b"text\tlabel\nfine\tpositive\nnot fine\tnegative\n",
    "jsonl": b'{"text": "a good film", "label": "positive"}\n{"text": "bad", "label": ["x", "y"]}\n',
    "conll": b"-DOCSTART- O\n\nTom\tB-PER\nruns\tO\n\nParis\tB-LOC\n",
    "squad": json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "Paris is big.", "qas": [
        {"id": "1", "question": "What?", "answers": [{"text": "Paris", "answer_start": 0}]},
        {"id": "2", "question": "Why?", "answers": [], "is_impossible": True}]}]}]}).encode(),
    "swag": b'{"sent1": "He sat.", "sent2": "Then", "ending0": "a", "ending1": "b", "label": 1}\n'
            b'{"context": "c", "endings": ["x", "y"], "label": 0}\n',
    "corpus": b"One sentence. Two sentences here.\n\nA new document.\n",
    "vocab": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\nfilm\n",
    "meta": json.dumps({"format": "bertkit-shards-v1", "dtype": "uint16", "vocab_size": 8,
                        "shards": [{"name": "shard-00000", "num_tokens": 3, "num_sentences": 1,
                                    "num_documents": 1}]}).encode(),
    "config": json.dumps({"model_type": "bert", "vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "intermediate_size": 16}).encode(),
}


@st.composite
def mutated(draw, kind: str) -> bytes:
    data = bytearray(SEEDS[kind])
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["insert", "delete", "truncate", "replace"]))
        pos = draw(st.integers(0, len(data)))
        if op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[pos:]
        else:
            data[pos:pos + 1] = draw(st.sampled_from([b'"', b"\n", b"\t", b",", b"{", b"]", b"\xff", b"\xe9", b"0",
                                                      b"-1", b"null", b"[]", b"\r", b"\xe2\x80\xa8"]))
    return bytes(data)


def inputs(kind: str):
    return st.one_of(st.binary(max_size=200), mutated(kind))


def _read(kind: str, path: Path):
    from bertkit.data.corpus import ShardedCorpus, read_documents
    from bertkit.modeling import BertConfig
    from bertkit.tasks import data as D
    from bertkit.tokenization import BertTokenizer, WordPieceTrainer, load_vocab

    if kind in ("csv", "tsv", "jsonl"):
        D.read_table(path, label_separator="|")
        D.read_table(path, require_label=False)
    elif kind == "conll":
        D.read_conll(path)
        D.read_conll(path, require_tags=False)
    elif kind == "squad":
        D.read_squad(path)
        D.read_squad(path, require_answers=False)
    elif kind == "swag":
        D.read_swag(path)
    elif kind == "corpus":
        for fmt in ("prose", "bert"):
            list(read_documents(path, fmt))
        WordPieceTrainer(vocab_size=30, show_progress=False).feed_files([path])
    elif kind == "vocab":
        load_vocab(path)
        BertTokenizer(path)
    elif kind == "meta":
        ShardedCorpus(path.parent)
    elif kind == "config":
        BertConfig.from_pretrained(path.parent)


SUFFIX = {"csv": "data.csv", "tsv": "data.tsv", "jsonl": "data.jsonl", "conll": "data.conll",
          "squad": "squad.json", "swag": "swag.jsonl", "corpus": "corpus.txt", "vocab": "vocab.txt",
          "meta": "meta.json", "config": "config.json"}


@pytest.mark.parametrize("kind", sorted(SEEDS))
def test_seed_files_are_valid(tmp_path, kind):
    if kind == "meta":
        pytest.skip("a shard folder also needs its .bin files")
    path = tmp_path / SUFFIX[kind]
    path.write_bytes(SEEDS[kind])
    _read(kind, path)


@pytest.mark.parametrize("kind", sorted(SEEDS))
def test_random_bytes_never_escape_as_another_exception(tmp_path_factory, kind):
    folder = tmp_path_factory.mktemp(kind)
    path = folder / SUFFIX[kind]

    @settings(max_examples=120, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(data=inputs(kind))
    def check(data: bytes) -> None:
        path.write_bytes(data)
        try:
            _read(kind, path)
        except (ValueError, OSError) as e:
            msg = str(e)
            assert path.name in msg or str(folder) in msg, f"{type(e).__name__} without the file: {msg}"
            assert "Traceback" not in msg

    check()


def test_deeply_nested_json_is_a_value_error(tmp_path):
    """json's RecursionError on very deep nesting must not escape a reader."""
    from bertkit.tasks.data import read_squad, read_table

    deep = b"[" * 100_000 + b"]" * 100_000
    for name, fn in (("squad.json", read_squad), ("data.jsonl", read_table)):
        p = tmp_path / name
        p.write_bytes(deep)
        with pytest.raises(ValueError, match=name):
            fn(p)
