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
    "squad": json.dumps(
        {
            "data": [
                {
                    "title": "t",
                    "paragraphs": [
                        {
                            "context": "Paris is big.",
                            "qas": [
                                {"id": "1", "question": "What?", "answers": [{"text": "Paris", "answer_start": 0}]},
                                {"id": "2", "question": "Why?", "answers": [], "is_impossible": True},
                            ],
                        }
                    ],
                }
            ]
        }
    ).encode(),
    "swag": b'{"sent1": "He sat.", "sent2": "Then", "ending0": "a", "ending1": "b", "label": 1}\n'
    b'{"context": "c", "endings": ["x", "y"], "label": 0}\n',
    "corpus": b"One sentence. Two sentences here.\n\nA new document.\n",
    "vocab": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\nfilm\n",
    "meta": json.dumps(
        {
            "format": "bertkit-shards-v1",
            "dtype": "uint16",
            "vocab_size": 8,
            "shards": [{"name": "shard-00000", "num_tokens": 3, "num_sentences": 1, "num_documents": 1}],
        }
    ).encode(),
    "config": json.dumps(
        {
            "model_type": "bert",
            "vocab_size": 8,
            "hidden_size": 8,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 16,
        }
    ).encode(),
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
            del data[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[pos:]
        else:
            data[pos : pos + 1] = draw(
                st.sampled_from(
                    [
                        b'"',
                        b"\n",
                        b"\t",
                        b",",
                        b"{",
                        b"]",
                        b"\xff",
                        b"\xe9",
                        b"0",
                        b"-1",
                        b"null",
                        b"[]",
                        b"\r",
                        b"\xe2\x80\xa8",
                    ]
                )
            )
    return bytes(data)


def inputs(kind: str):
    return st.one_of(st.binary(max_size=200), mutated(kind))


def _read(kind: str, path: Path):
    from bertkit.data import readers as D
    from bertkit.data.corpus import ShardedCorpus, read_documents
    from bertkit.modeling import BertConfig
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


SUFFIX = {
    "csv": "data.csv",
    "tsv": "data.tsv",
    "jsonl": "data.jsonl",
    "conll": "data.conll",
    "squad": "squad.json",
    "swag": "swag.jsonl",
    "corpus": "corpus.txt",
    "vocab": "vocab.txt",
    "meta": "meta.json",
    "config": "config.json",
}


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

    @settings(
        max_examples=120,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
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
    from bertkit.data.readers import read_squad, read_table

    deep = b"[" * 100_000 + b"]" * 100_000
    for name, fn in (("squad.json", read_squad), ("data.jsonl", read_table)):
        p = tmp_path / name
        p.write_bytes(deep)
        with pytest.raises(ValueError, match=name):
            fn(p)


# ------------------------------------------------------------------- `index` inputs and index files

CORPUS_SEEDS = {
    "corpus.txt": b"a good film\r\nbad one\rstill bad\n\n\xe2\x80\xa8odd\n",
    "corpus.jsonl": b'{"id": "a", "text": "a good film"}\n{"id": 2, "text": "bad"}\n',
    "corpus.csv": b'\xef\xbb\xbfid,text\n1,"a good film"\n2,"multi\nline"\n',
}


@pytest.mark.parametrize("name", sorted(CORPUS_SEEDS))
def test_index_corpus_reader_fuzz(tmp_path_factory, name):
    """`bertkit index`'s reader: a result or a ValueError / OSError naming the file."""
    from bertkit.search import read_corpus

    folder = tmp_path_factory.mktemp("corpus")
    path = folder / name
    SEEDS[name] = CORPUS_SEEDS[name]
    try:

        @settings(
            max_examples=150,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(data=inputs(name))
        def check(data: bytes) -> None:
            path.write_bytes(data)
            try:
                rows = read_corpus(path)
            except (ValueError, OSError) as e:
                assert path.name in str(e), f"{type(e).__name__} without the file: {e}"
                return
            for ident, text in rows:  # what the model gets is text UTF-8 can carry
                (ident + text).encode("utf-8")

        check()
    finally:
        del SEEDS[name]


def _tiny_index(folder: Path) -> Path:
    """A real index folder (4 random unit vectors), written as `bertkit index` writes one."""
    import numpy as np

    from bertkit._io import atomic_write_json

    folder.mkdir()
    v = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float16)
    with open(folder / "vectors.npy", "wb") as f:
        np.save(f, v)
    (folder / "texts.jsonl").write_text(
        "".join(json.dumps({"id": str(i), "text": f"t{i}"}) + "\n" for i in range(4)), encoding="utf-8"
    )
    atomic_write_json(folder / "meta.json", {"model": "m", "count": 4, "dim": 8, "vector_dtype": "float16"})
    return folder


@pytest.mark.parametrize("name", ["meta.json", "texts.jsonl", "vectors.npy"])
def test_search_index_files_fuzz(tmp_path_factory, name):
    """`bertkit search`'s index loader: each of the three files mutated; an Index, or an error naming the file."""
    from bertkit.search import load_index

    folder = _tiny_index(tmp_path_factory.mktemp("idx") / "index")
    path = folder / name
    SEEDS[name] = path.read_bytes()
    try:

        @settings(
            max_examples=150,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(data=inputs(name))
        def check(data: bytes) -> None:
            path.write_bytes(data)
            try:
                index = load_index(folder)
            except (ValueError, OSError) as e:
                assert name in str(e), f"{type(e).__name__} without the file: {e}"
                return
            index.search(index.vectors[:1], 2)

        check()
    finally:
        del SEEDS[name]


# ------------------------------------------------------------------------------ the server's bodies

_HEADS = {
    "token-classification": "BertForTokenClassification",
    "question-answering": "BertForQuestionAnswering",
    "text-classification": "BertForSequenceClassification",
    "fill-mask": "BertForMaskedLM",
}


@pytest.fixture(scope="module", params=sorted(_HEADS))
def tiny_server(request, tmp_path_factory):
    """`bertkit serve` (a real child process on a free port) over a random tiny model with the task's
    head and an index, so every endpoint answers."""
    import torch

    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from bertkit import modeling
    from bertkit.assets import asset_path
    from bertkit.search import build_index
    from bertkit.serving.process import server_process
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer(asset_path("vocab-uncased"))
    torch.manual_seed(0)
    cfg = modeling.BertConfig.from_preset("tiny", vocab_size=len(tok), id2label={0: "O", 1: "B-PER", 2: "I-PER"})
    d = tmp_path_factory.mktemp("serve")
    getattr(modeling, _HEADS[request.param])(cfg).save_pretrained(d / "model", tokenizer=tok)
    (d / "c.txt").write_text("a good film\nbad one\nParis is big\n", encoding="utf-8")
    index = build_index(d / "model", d / "c.txt", d / "index", progress=False, dtype="fp32")
    args = ["--dtype", "fp32", "--max-batch-size", "8", "--max-input-tokens", "64", "--index", str(index)]
    with server_process(d / "model", args, log=d / "serve.log") as srv:
        yield srv


_TEXT = st.one_of(
    st.text(max_size=30),
    st.text(max_size=10).map(lambda s: s + "\ud800"),
    st.sampled_from(["[MASK]", "a [MASK] film", "Tom lives in Paris", "", " "]),
    st.integers(0, 400).map(lambda n: "word " * n),
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _TEXT,
    lambda c: (
        st.lists(c, max_size=4)
        | st.dictionaries(
            st.one_of(st.sampled_from(["text", "text_pair", "question", "context", "inputs", "top_k"]), _TEXT),
            c,
            max_size=4,
        )
    ),
    max_leaves=10,
)
_INPUTS = st.one_of(
    _TEXT,
    st.lists(_TEXT, max_size=10),
    _JSON,
    st.fixed_dictionaries({"question": _TEXT, "context": _TEXT}),
    st.lists(st.fixed_dictionaries({"text": _TEXT}, optional={"text_pair": _JSON}), max_size=3),
)


def _body(value) -> bytes:
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode()


_BODIES = st.one_of(
    st.builds(lambda x, k: _body({"inputs": x, "top_k": k}), _INPUTS, st.one_of(st.integers(-2, 2000), _JSON)),
    st.builds(lambda x: _body({"inputs": x}), _INPUTS),
    _JSON.map(_body),
    st.binary(max_size=64),
    st.integers(1, 3000).map(lambda n: b'{"inputs": ' + b"[" * n + b"]" * n + b"}"),
    st.integers(1, 3000).map(lambda n: b'{"inputs": ' + b'{"a":' * n + b"1" + b"}" * n + b"}"),
)


def test_server_bodies_fuzz_never_5xx(tiny_server):
    """Every POST endpoint fed random JSON, deep nesting, lone surrogates, over-long texts and raw
    bytes over real HTTP: a 2xx, or a 4xx with a JSON error; never a 5xx."""
    httpx = pytest.importorskip("httpx")

    with httpx.Client(base_url=tiny_server.url, timeout=60) as client:

        @settings(
            max_examples=150,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(endpoint=st.sampled_from(["/embed", "/predict", "/tokenize", "/search"]), body=_BODIES)
        def check(endpoint: str, body: bytes) -> None:
            r = client.post(endpoint, content=body, headers={"content-type": "application/json"})
            if r.status_code >= 500:
                log = tiny_server.log.read_text(errors="replace")[-3000:]
                pytest.fail(f"{endpoint} {body[:200]!r}: {r.status_code} {r.text[:300]}\nserver log:\n{log}")
            if r.status_code >= 400:
                assert isinstance(r.json().get("error"), str)

        check()


def test_server_deep_json_and_lone_surrogate_are_4xx(tiny_server):
    httpx = pytest.importorskip("httpx")

    deep = b'{"inputs": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    for endpoint in ("/embed", "/predict", "/tokenize", "/search"):
        r = httpx.post(tiny_server.url + endpoint, content=deep, timeout=60)
        assert r.status_code == 400 and "nested" in r.json()["error"], (endpoint, r.text)
        r = httpx.post(tiny_server.url + endpoint, content=b'{"inputs": ["fine", "bad \\ud800"]}', timeout=60)
        assert r.status_code == 400 and "body.inputs[1]" in r.json()["error"] and "surrogate" in r.text, r.text
    if httpx.get(tiny_server.url + "/info", timeout=30).json()["task"] == "question-answering":
        # a context of characters the tokenizer drops leaves nothing to answer from
        r = httpx.post(
            tiny_server.url + "/predict", json={"inputs": {"question": "q", "context": "\x00\x01"}}, timeout=60
        )
        assert r.status_code == 422 and "inputs.context has no tokens" in r.json()["error"], r.text
