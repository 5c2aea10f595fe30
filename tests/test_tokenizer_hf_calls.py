"""Tokenizer calls transformers code makes, compared with transformers' BertTokenizerFast on the real
minilm vocabulary: added tokens (loading, matching, saving), add_tokens, encode(return_tensors=...),
tokenize with a pair, batched decode, and BatchEncoding's char/token/word alignment calls.
"""

from __future__ import annotations

import json
import random
import shutil

import pytest

from bertkit.assets import asset_path

transformers = pytest.importorskip("transformers")
from transformers import AddedToken as HFAddedToken  # noqa: E402
from transformers import AutoTokenizer as HFAutoTokenizer  # noqa: E402
from transformers import BertTokenizerFast  # noqa: E402

from bertkit import AutoTokenizer  # noqa: E402
from bertkit.tokenization import BertTokenizer  # noqa: E402
from bertkit.tokenization.tokenizer import AddedToken  # noqa: E402

MINILM = asset_path("minilm")


def _pair():
    return BertTokenizerFast.from_pretrained(MINILM), BertTokenizer.from_pretrained(MINILM)


def _same_encoding(tok, ref, texts, **kw):
    """Ids, offsets, word ids, tokens and decodes of ``texts`` agree."""
    got = tok(texts, return_offsets_mapping=True, **kw)
    exp = ref(texts, return_offsets_mapping=True, **kw)
    assert got["input_ids"] == exp["input_ids"]
    assert got["offset_mapping"] == [list(map(tuple, r)) for r in exp["offset_mapping"]]
    for i in range(len(texts)):
        assert got.word_ids(i) == exp.word_ids(i), texts[i]
        assert got.tokens(i) == exp.tokens(i), texts[i]
    for skip in (False, True):
        assert [tok.decode(r, skip_special_tokens=skip) for r in got["input_ids"]] == [
            ref.decode(r, skip_special_tokens=skip) for r in exp["input_ids"]
        ]
    assert [tok.tokenize(t) for t in texts] == [ref.tokenize(t) for t in texts]


# ---------------------------------------------------------------------- encode(return_tensors=...)
def test_encode_return_tensors_like_reference():
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    ref, tok = _pair()
    for args in [("hello world",), ("hello world", "a second text")]:
        exp, got = ref.encode(*args, return_tensors="pt"), tok.encode(*args, return_tensors="pt")
        assert isinstance(got, torch.Tensor) and got.dtype == exp.dtype and got.shape == exp.shape
        assert torch.equal(got, exp)
        exp, got = ref.encode(*args, return_tensors="np"), tok.encode(*args, return_tensors="np")
        assert isinstance(got, np.ndarray) and got.dtype == exp.dtype and got.shape == exp.shape
        assert (got == exp).all()
        assert tok.encode(*args) == ref.encode(*args)
    exp = ref.encode("a b c d e f", return_tensors="pt", truncation=True, max_length=4)
    assert torch.equal(tok.encode("a b c d e f", return_tensors="pt", truncation=True, max_length=4), exp)


# ---------------------------------------------------------------------- added tokens: loading
def test_special_token_added_by_transformers_loads_with_its_id(tmp_path):
    ref = BertTokenizerFast.from_pretrained(MINILM)
    ref.add_special_tokens({"additional_special_tokens": ["<ent>"]})
    ref.save_pretrained(tmp_path)
    assert not (tmp_path / "vocab.txt").exists()  # transformers v5 writes tokenizer.json only
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert tok("a <ent> b")["input_ids"] == ref("a <ent> b")["input_ids"]
    assert len(tok) == len(ref) and tok.all_special_tokens == ref.all_special_tokens
    texts = ["a <ent> b", "x<ent>y <ENT> [CLS]", "<ent><ent>"]
    _same_encoding(tok, ref, texts)


def test_ordinary_added_tokens_load_from_every_file_form(tmp_path):
    ref = BertTokenizerFast.from_pretrained(MINILM)
    ref.add_tokens(["newword", "NewCase", HFAddedToken("<x>", lstrip=True, rstrip=True)])
    ref.add_special_tokens({"additional_special_tokens": ["<ent>"]})
    texts = ["a newword b NEWWORD", "newcase NewCase anewcaseb", "p <x> q\t<x>r <ent> newwords"]
    ref.save_pretrained(tmp_path / "v5")
    _same_encoding(AutoTokenizer.from_pretrained(tmp_path / "v5"), ref, texts)

    # the same tokens in a vocab.txt folder, described by tokenizer_config.json's added_tokens_decoder
    folder = tmp_path / "decoder"
    folder.mkdir()
    shutil.copy(MINILM / "vocab.txt", folder)
    decoder = {str(i): t.__getstate__() for i, t in ref.added_tokens_decoder.items()}
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "added_tokens_decoder": decoder}
    config["extra_special_tokens"] = ["<ent>"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    _same_encoding(BertTokenizer.from_pretrained(folder), HFAutoTokenizer.from_pretrained(folder), texts)

    # transformers v4: added_tokens.json (content -> id), special when the config lists it as special
    v4 = tmp_path / "v4"
    v4.mkdir()
    shutil.copy(MINILM / "vocab.txt", v4)
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "extra_special_tokens": ["<e1>"]}
    (v4 / "tokenizer_config.json").write_text(json.dumps(config))
    (v4 / "added_tokens.json").write_text(json.dumps({"<e1>": 30522, "Newword": 30523}))
    ref4 = HFAutoTokenizer.from_pretrained(v4)
    tok4 = BertTokenizer.from_pretrained(v4)
    assert len(tok4) == len(ref4) == 30524
    _same_encoding(tok4, ref4, ["a <e1> newword NEWWORD b", "<E1> anewwordb"])


# ---------------------------------------------------------------------- added tokens: add_tokens
def test_add_tokens_like_reference():
    ref, tok = _pair()
    for new in (["newword", "Foo Bar"], ["ÉTÉ"], "single", ["hello"], ["newword"], [], ["sp1"]):
        special = new == ["sp1"]
        assert tok.add_tokens(new, special_tokens=special) == ref.add_tokens(new, special_tokens=special), new
        assert len(tok) == len(ref), new
    assert tok.get_vocab() == ref.get_vocab()
    assert tok.vocab_size == ref.vocab_size == 30522
    assert tok.all_special_tokens == ref.all_special_tokens
    ids = list(range(30520, len(ref)))
    assert tok.convert_ids_to_tokens(ids) == ref.convert_ids_to_tokens(ids)
    texts = ["a newword b", "NEWWORD anewwordb newwords", "foo bar FOO  BAR", "été ete ÉTÉ", "single Single", "sp1 SP1"]
    _same_encoding(tok, ref, texts)
    ids = tok("sp1 newword x")["input_ids"]
    assert tok.convert_ids_to_tokens(ids, skip_special_tokens=True) == ref.convert_ids_to_tokens(
        ids, skip_special_tokens=True
    )


def test_add_tokens_then_resize_model_embeddings():
    pytest.importorskip("torch")
    from bertkit import AutoModel

    ref, tok = _pair()
    for t in (ref, tok):
        t.add_tokens(["newword", "other"])
        t.add_special_tokens({"additional_special_tokens": ["<ent>"]})
    assert len(tok) == len(ref) == 30524
    model = AutoModel.from_pretrained(MINILM)
    model.resize_token_embeddings(len(tok))
    enc = tok("a newword <ent> other", return_tensors="pt")
    assert enc["input_ids"].tolist() == ref("a newword <ent> other", return_tensors="pt")["input_ids"].tolist()
    assert int(enc["input_ids"].max()) == len(tok) - 1
    assert model(**enc).last_hidden_state.shape == (1, 6, 384)


def test_add_tokens_and_special_tokens_share_ids_like_reference():
    ref, tok = _pair()
    steps = [
        ("tokens", ["newword"]),
        ("special", {"additional_special_tokens": ["<ent>", "Hello"]}),
        ("tokens", ["other"]),
        ("special", {"additional_special_tokens": ["<q>"]}),
        ("special", {"cls_token": "[CLS]"}),
    ]
    for kind, arg in steps:
        if kind == "tokens":
            assert tok.add_tokens(arg) == ref.add_tokens(arg)
        else:
            assert tok.add_special_tokens(arg) == ref.add_special_tokens(arg)
        assert len(tok) == len(ref)
        assert tok.all_special_tokens == ref.all_special_tokens and tok.all_special_ids == ref.all_special_ids
    _same_encoding(tok, ref, ["Hello hello <ent> newword other <q>", "x<q>y <ENT> HELLO"])


def test_added_token_options_on_random_texts_like_reference():
    ref, tok = _pair()
    specs = [
        ("NewWord", {}),
        ("Foo Bar", {}),
        ("ÉTÉ", {}),
        ("hello", {}),
        ("<x>", {"lstrip": True, "rstrip": True}),
        ("<Y>", {"lstrip": True, "normalized": False}),
        ("sw", {"single_word": True, "normalized": False}),
        ("qq", {"single_word": True, "rstrip": True}),
        ("新词", {}),
        ("ﬁx", {}),
    ]
    for content, kw in specs:
        assert tok.add_tokens([AddedToken(content, **kw)]) == ref.add_tokens([HFAddedToken(content, **kw)])
    tok.add_special_tokens({"additional_special_tokens": ["<ent>", "Hello"]})
    ref.add_special_tokens({"additional_special_tokens": ["<ent>", "Hello"]})
    pieces = ["NewWord", "NEWWORDS", "foo bar", "FOO  BAR", "été", "ÉTÉ", "hello", "Hello", "<x>", "<X>", "\t<x>\t"]
    pieces += ["<Y>", "<y>", "  <Y>", "sw", "swx", "xsw", "sw_", "(sw)", "ésw", "qq", "qq  ", "ﬁx", "fix", "<ent>"]
    pieces += ["[CLS]", "[mask]", "a", "the", ",", " ", "\u00a0", "Café", "\x00"]
    rng = random.Random(7)
    texts = [
        "".join(rng.choice(pieces) + rng.choice(["", " ", "  "]) for _ in range(rng.randint(1, 8))) for _ in range(300)
    ]
    # CJK added tokens, away from lstrip/rstrip tokens (there transformers' offsets take the spaces its
    # normaliser writes around CJK characters, which stand for no character of the text)
    texts += ["我新词了", "新词 新 词 新词a", "a新词b"]
    _same_encoding(tok, ref, texts)


def test_add_tokens_bad_input():
    tok = BertTokenizer.from_pretrained(MINILM)
    with pytest.raises(TypeError, match="3.5"):
        tok.add_tokens(["fine", 3.5])
    assert len(tok) == 30522  # nothing added when one of them is bad
    with pytest.raises(TypeError, match="None"):
        tok.add_tokens([None])
    with pytest.raises(ValueError, match="additional_special_tokens"):
        tok.add_special_tokens({"additional_special_tokens": "<ent>"})
    with pytest.raises(ValueError, match="cls_token"):
        tok.add_special_tokens({"cls_token": 5})
    with pytest.raises(ValueError, match="bos_thing"):
        tok.add_special_tokens({"bos_thing": "<s>"})
    assert tok.add_tokens([]) == 0 and tok.add_tokens([""]) == 0


# ---------------------------------------------------------------------- added tokens: saving
def test_save_pretrained_keeps_added_tokens_both_ways(tmp_path):
    ref, tok = _pair()
    for t, at in ((ref, HFAddedToken), (tok, AddedToken)):
        t.add_tokens(["NewWord", at("<x>", lstrip=True, rstrip=True), "ÉTÉ"])
        t.add_special_tokens({"additional_special_tokens": ["<ent>", "[E1]"]})
        t.add_tokens(["sp1"], special_tokens=True)
    texts = ["a <ent> b NewWord newword", "x<x>y  <x> ÉTÉ été [E1] [e1] hello", "sp1 plain text only"]
    _same_encoding(tok, ref, texts)

    tok.save_pretrained(tmp_path / "ours")
    assert (tmp_path / "ours" / "vocab.txt").read_bytes() == (MINILM / "vocab.txt").read_bytes()
    theirs_of_ours = HFAutoTokenizer.from_pretrained(tmp_path / "ours")
    assert len(theirs_of_ours) == len(ref) and theirs_of_ours.added_tokens_decoder == ref.added_tokens_decoder
    _same_encoding(BertTokenizer.from_pretrained(tmp_path / "ours"), ref, texts)
    _same_encoding(theirs_of_ours, ref, texts)

    ref.save_pretrained(tmp_path / "theirs")
    ours_of_theirs = AutoTokenizer.from_pretrained(tmp_path / "theirs")
    _same_encoding(ours_of_theirs, ref, texts)
    ours_of_theirs.save_pretrained(tmp_path / "again")
    _same_encoding(HFAutoTokenizer.from_pretrained(tmp_path / "again"), ref, texts)


# ---------------------------------------------------------------------- tokenize / decode
def test_tokenize_pair_and_special_tokens_like_reference():
    ref, tok = _pair()
    for args, kw in [
        (("a b", "c d"), {"add_special_tokens": True}),
        (("a b", "c d"), {}),
        (("a b",), {"pair": "c d", "add_special_tokens": True}),
        (("a b", ""), {"add_special_tokens": True}),
        (("Hello [SEP] there",), {"add_special_tokens": True}),
        (("",), {"add_special_tokens": True}),
        (("a b c d e f",), {"truncation": True, "max_length": 3}),
    ]:
        assert tok.tokenize(*args, **kw) == ref.tokenize(*args, **kw), (args, kw)


def test_decode_batch_like_reference():
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    ref, tok = _pair()
    rows = ref(["hello world", "a [MASK] b , c"], padding=True)["input_ids"]
    for ids in (rows, [tuple(r) for r in rows], np.array(rows), torch.tensor(rows), [[]], [rows[0], []]):
        for skip in (False, True):
            assert tok.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)
    assert tok.decode(rows[0]) == ref.decode(rows[0]) and tok.decode([]) == ref.decode([])
    assert tok.decode(torch.tensor(7592)) == ref.decode(torch.tensor(7592))
    assert tok.batch_decode(rows) == ref.batch_decode(rows)
    with pytest.raises(TypeError, match="token ids"):
        tok.decode(["hello"])


# ---------------------------------------------------------------------- BatchEncoding alignment
ALIGNMENT_CASES = [
    (("Hello there supercalifragilistic <ent>NewWord",), {}),
    (("Hello there", "big world wide"), {}),
    ((["a bc <ent>", "de f NEWWORD g h i"],), {"padding": True}),
    ((["a bc", "de f g"],), {"padding": True, "padding_side": "left"}),
    ((["a bc", "de f g"], ["x y z", "w"]), {"padding": True}),
    ((["a bc", "de f g"], ["x y z", "w"]), {"add_special_tokens": False, "padding": True}),
    (("a b c d e f g h i j k",), {"truncation": True, "max_length": 6, "stride": 2, "return_overflowing_tokens": True}),
    (
        ("a b c d e f g", "h i j k l m n o"),
        {"truncation": "only_second", "max_length": 13, "stride": 1, "return_overflowing_tokens": True},
    ),
    ((["Hello", "worlds", "<ent>x"], ["x y", "z"]), {"is_split_into_words": True}),
    (("Café Ölmühle naïve ﬁsh",), {"return_tensors": "pt"}),
    (("x",), {"add_special_tokens": False, "padding": "max_length", "max_length": 4}),
]


def _alignment_answers(enc, rows: int, width: int) -> list:
    def ask(f):
        try:
            r = f()
        except ValueError:
            return "error"
        return (type(r).__name__, tuple(r)) if isinstance(r, tuple) else r

    out = []
    for b in range(rows):
        for t in range(width + 2):
            out += [ask(lambda: enc.token_to_chars(b, t)), ask(lambda: enc.token_to_word(b, t))]
            out.append(ask(lambda: enc.token_to_sequence(b, t)))
        for s in (0, 1, 2):
            for c in range(40):
                out += [ask(lambda: enc.char_to_token(b, c, sequence_index=s))]
                out += [ask(lambda: enc.char_to_word(b, c, sequence_index=s))]
            for w in range(10):
                out += [ask(lambda: enc.word_to_tokens(b, w, sequence_index=s))]
                if enc.word_to_tokens(b, w, sequence_index=s) is not None:
                    out += [ask(lambda: enc.word_to_chars(b, w, sequence_index=s))]
    return out


@pytest.mark.parametrize("args,kw", ALIGNMENT_CASES)
def test_alignment_calls_like_reference(args, kw):
    if kw.get("return_tensors"):
        pytest.importorskip("torch")
    ref, tok = _pair()
    for t in (ref, tok):
        t.add_tokens(["NewWord"])
        t.add_special_tokens({"additional_special_tokens": ["<ent>"]})
    exp, got = ref(*args, **kw), tok(*args, **kw)
    rows = len(exp.encodings)
    width = len(exp.encodings[0].ids)
    assert _alignment_answers(got, rows, width) == _alignment_answers(exp, rows, width)
    # the one-argument forms address row 0
    assert got.char_to_token(1) == exp.char_to_token(1) and got.token_to_word(1) == exp.token_to_word(1)
    assert got.word_to_tokens(0) == exp.word_to_tokens(0) and got.token_to_chars(1) == exp.token_to_chars(1)


@pytest.mark.parametrize("args,kw", ALIGNMENT_CASES)
def test_encodings_like_reference(args, kw):
    """``enc.encodings``: one Encoding per row with the reference's ids, tokens, offsets, word and
    sequence ids, type ids, attention and special-token masks (padding and added tokens included)."""
    if kw.get("return_tensors"):
        pytest.importorskip("torch")
    ref, tok = _pair()
    for t in (ref, tok):
        t.add_tokens(["NewWord"])
        t.add_special_tokens({"additional_special_tokens": ["<ent>"]})
    exp, got = ref(*args, **kw).encodings, tok(*args, **kw).encodings
    assert len(got) == len(exp)
    names = ("ids", "tokens", "offsets", "word_ids", "sequence_ids", "type_ids", "attention_mask")
    for e, g in zip(exp, got):
        for name in (*names, "special_tokens_mask", "n_sequences"):
            assert getattr(g, name) == getattr(e, name), name
        assert len(g) == len(e)


def test_alignment_calls_qa_style_like_reference():
    ref, tok = _pair()
    questions = ["Who wrote it?", "Where is Pemberley?"]
    contexts = ["It was written by Jane Austen in 1813.", "Pemberley is in Derbyshire, England, far away."]
    kw = {"truncation": "only_second", "max_length": 16, "stride": 4, "return_overflowing_tokens": True}
    kw.update(padding="max_length", return_offsets_mapping=True)
    exp, got = ref(questions, contexts, **kw), tok(questions, contexts, **kw)
    assert got["overflow_to_sample_mapping"] == exp["overflow_to_sample_mapping"]
    for row in range(len(exp["input_ids"])):
        for c in range(len(contexts[exp["overflow_to_sample_mapping"][row]]) + 2):
            assert got.char_to_token(row, c, sequence_index=1) == exp.char_to_token(row, c, sequence_index=1)
        for t in range(16):
            assert got.token_to_chars(row, t) == exp.token_to_chars(row, t)


def test_alignment_calls_bad_input():
    tok = BertTokenizer.from_pretrained(MINILM)
    enc = tok(["a b", "c"])
    with pytest.raises(ValueError, match="char_index"):
        enc.char_to_token(0, -1)
    with pytest.raises(TypeError, match="token_index"):
        enc.token_to_chars(0, "1")
    with pytest.raises(IndexError):
        enc.char_to_token(5, 0)
    with pytest.raises(ValueError, match="no tokens"):
        enc.word_to_chars(0, 9)
    padded = tok.pad({"input_ids": [[101, 102]]})
    with pytest.raises(ValueError, match="only available"):
        padded.char_to_token(0)
