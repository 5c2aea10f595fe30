"""BertTokenizer API: loading/saving, tensors, errors, CLI, the seeds' examples.

Expected values come from transformers' BertTokenizerFast on the same files.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stdout

import pytest

from bertkit.assets import asset_path

transformers = pytest.importorskip("transformers")
from test_tokenizer_parity import corpus, ours, reference  # noqa: E402
from transformers import BertTokenizerFast  # noqa: E402

from bertkit.tokenization import BatchEncoding, BertTokenizer  # noqa: E402

SEED_TEXTS = [
    "albums sold 124443286539 copies",
    "technically perfect, melodically correct",
    "featuring a previously unheard track",
    "best-selling music artist",
    "s1 d1 o1 and o2",
    "asbofwheohwbeif",
]


def test_seed_examples_match_reference():
    ref, tok = reference("vocab-uncased", True), ours("vocab-uncased", True)
    for s in SEED_TEXTS:
        assert tok(s) == ref(s)
        assert tok.tokenize(s) == ref.tokenize(s)
        assert tok.convert_ids_to_tokens(tok(s)["input_ids"]) == ref.convert_ids_to_tokens(ref(s)["input_ids"])
    assert tok.tokenize("unheard") == ref.tokenize("unheard")
    assert len(tok.tokenize("unheard")) == 2  # the seeds' un ##heard


def test_public_exports_and_torch_free_import():
    import bertkit

    assert bertkit.BertTokenizer is BertTokenizer and bertkit.BatchEncoding is BatchEncoding
    assert bertkit.WordPieceTrainer.__name__ == "WordPieceTrainer"
    code = "import sys, bertkit.tokenization as t; t.BertTokenizer; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_from_pretrained_real_checkpoint_folder():
    folder = asset_path("minilm")
    ref = BertTokenizerFast.from_pretrained(folder)
    tok = BertTokenizer.from_pretrained(folder)
    assert tok.model_max_length == ref.model_max_length
    assert tok.do_lower_case == ref.do_lower_case
    texts = list(corpus("austen")[:30]) + SEED_TEXTS
    kw = {"padding": True, "truncation": True}
    assert tok(texts, **kw)["input_ids"] == ref(texts, **kw)["input_ids"]


def test_save_pretrained_roundtrip_and_transformers_can_read_it(tmp_path):
    tok = BertTokenizer(asset_path("vocab-chinese"), do_lower_case=False, model_max_length=256)
    written = tok.save_pretrained(tmp_path / "tok")
    names = sorted(p.split("/")[-1] for p in written)
    assert names == ["special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]
    assert not list((tmp_path / "tok").glob("*.tmp"))
    assert (tmp_path / "tok" / "vocab.txt").read_bytes() == asset_path("vocab-chinese").read_bytes()
    back = BertTokenizer.from_pretrained(tmp_path / "tok")
    assert back.do_lower_case is False and back.model_max_length == 256
    ref = BertTokenizerFast.from_pretrained(tmp_path / "tok")
    texts = list(corpus("news-zh")[:30]) + ["ÉCOLE Café 中文"]
    assert back(texts)["input_ids"] == tok(texts)["input_ids"] == ref(texts)["input_ids"]
    assert json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())["do_lower_case"] is False


def test_hub_cache_layout(tmp_path):
    snap = tmp_path / "models--bert-base-uncased" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "vocab.txt").write_bytes(asset_path("vocab-uncased").read_bytes())
    (tmp_path / "models--bert-base-uncased" / "refs").mkdir()
    (tmp_path / "models--bert-base-uncased" / "refs" / "main").write_text("abc123")
    tok = BertTokenizer.from_pretrained("bert-base-uncased", cache_dir=tmp_path)
    assert tok.tokenize("unheard") == reference("vocab-uncased", True).tokenize("unheard")
    with pytest.raises(FileNotFoundError, match="never downloads"):
        BertTokenizer.from_pretrained("no-such-model", cache_dir=tmp_path)


def test_tensors_and_batch_encoding():
    torch = pytest.importorskip("torch")
    ref, tok = reference("vocab-uncased", True), ours("vocab-uncased", True)
    texts = SEED_TEXTS
    got = tok(texts, padding=True, return_tensors="pt")
    exp = ref(texts, padding=True, return_tensors="pt")
    assert isinstance(got, dict) and set(got) == set(exp)
    for k in exp:
        assert got[k].dtype == torch.long and torch.equal(got[k], exp[k])
    one = tok(texts[0], return_tensors="pt")
    assert one["input_ids"].shape == ref(texts[0], return_tensors="pt")["input_ids"].shape
    assert one.input_ids is one["input_ids"]
    npd = tok(texts, padding="max_length", max_length=20, return_tensors="np")
    assert npd["input_ids"].shape == (len(texts), 20)
    want = ref(texts, padding="max_length", max_length=20, return_tensors="np")["attention_mask"]
    assert (npd["attention_mask"] == want).all()
    with pytest.raises(ValueError, match="padding"):
        tok(texts, return_tensors="pt")
    assert got.to("cpu") is got
    enc = tok(texts[:2], return_length=True, return_special_tokens_mask=True)
    assert enc["length"] == ref(texts[:2], return_length=True)["length"]
    assert enc.tokens(1) == ref(texts[:2]).tokens(1)


def test_bad_text_types():
    tok = ours("vocab-uncased", True)
    for bad in (123, None, 4.5, b"bytes"):
        with pytest.raises((TypeError, ValueError), match=type(bad).__name__ if bad is not None else "text"):
            tok(bad)
    with pytest.raises(TypeError, match="int"):
        tok(["ok", 7])
    with pytest.raises(TypeError, match="int"):
        tok.tokenize(7)
    with pytest.raises(TypeError, match="bytes"):
        tok.encode_batch_ids([b"x"])


def test_bad_vocab_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        BertTokenizer(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.txt.*empty"):
        BertTokenizer(empty)
    dup = tmp_path / "dup.txt"
    dup.write_text("[PAD]\n[UNK]\nhello\nworld\nhello\n")
    with pytest.raises(ValueError, match=r"dup.txt:5: duplicate token 'hello' \(first on line 3\)"):
        BertTokenizer(dup)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"[PAD]\n[UNK]\nok\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"bad.txt:4: invalid UTF-8"):
        BertTokenizer(bad)
    blank = tmp_path / "blank.txt"
    blank.write_text("[PAD]\n\n[UNK]\n")
    with pytest.raises(ValueError, match=r"blank.txt:2: empty token"):
        BertTokenizer(blank)


def test_length_limits():
    tok = BertTokenizer(asset_path("vocab-uncased"), model_max_length=16)
    with pytest.raises(ValueError, match="max_length=1 is smaller than the 2 special tokens"):
        tok("a b c d", truncation=True, max_length=1)
    with pytest.raises(ValueError, match="max_length=2 is smaller than the 3 special tokens"):
        tok("a b", "c d", truncation=True, max_length=2)
    with pytest.warns(UserWarning, match=r"longer than the specified maximum sequence length .*\(22 > 16\)"):
        tok("a " * 20)
    enc = tok("a " * 20, truncation=True)
    assert len(enc["input_ids"]) == 16
    with pytest.raises(ValueError, match="stride"):
        tok("a " * 40, truncation=True, max_length=10, stride=8, return_overflowing_tokens=True)


def test_cli_tokenize_matches_reference(tmp_path):
    from bertkit.cli import main

    ref = reference("vocab-uncased", True)
    buf = io.StringIO()
    with redirect_stdout(buf):
        vocab = str(asset_path("vocab-uncased"))
        assert main(["tokenize", "--vocab", vocab, "featuring a previously unheard track"]) == 0
    out = buf.getvalue()
    enc = ref("featuring a previously unheard track")
    assert f"tokens: {enc.tokens()}" in out
    assert f"ids:    {enc['input_ids']}" in out
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["tokenize", "--vocab", str(asset_path("vocab-chinese")), "--cased", "Café 中文"]) == 0
    assert str(reference("vocab-chinese", False)("Café 中文").tokens()) in buf.getvalue()
    assert main(["tokenize", "--vocab", str(tmp_path / "nope.txt"), "x"]) == 1


def test_pad_like_reference():
    torch = pytest.importorskip("torch")
    ref, tok = reference("vocab-uncased", True), ours("vocab-uncased", True)
    feats = [dict(ref(t)) for t in SEED_TEXTS]
    for kw in [
        dict(),
        dict(padding="max_length", max_length=24),
        dict(pad_to_multiple_of=8),
        dict(padding_side="left"),
    ]:
        exp, got = ref.pad(feats, **kw), tok.pad(feats, **kw)
        assert dict(got) == dict(exp), kw
    exp, got = ref.pad(feats, return_tensors="pt"), tok.pad(feats, return_tensors="pt")
    assert all(torch.equal(got[k], exp[k]) for k in exp)
    no_mask = [{"input_ids": f["input_ids"]} for f in feats]
    assert dict(tok.pad(no_mask)) == dict(ref.pad(no_mask))


def test_from_pretrained_tokenizer_json_only(tmp_path):
    import shutil

    src = asset_path("minilm")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, tmp_path / name)
    tok = BertTokenizer.from_pretrained(tmp_path)
    ref = BertTokenizerFast.from_pretrained(src)
    texts = list(corpus("wiki")[:20]) + ["Café 中文 unheard"]
    assert tok(texts, return_offsets_mapping=True)["offset_mapping"] == [
        list(map(tuple, r)) for r in ref(texts, return_offsets_mapping=True)["offset_mapping"]
    ]
    assert tok(texts)["input_ids"] == ref(texts)["input_ids"]


def test_add_special_tokens_like_reference(tmp_path):
    ref = BertTokenizerFast.from_pretrained(asset_path("minilm"))
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    markers = {"additional_special_tokens": ["[E1]", "[/E1]", "<ent>"]}
    assert tok.add_special_tokens(markers) == ref.add_special_tokens(markers) == 3
    assert len(tok) == len(ref) and tok.vocab_size == ref.vocab_size
    assert tok.all_special_tokens == ref.all_special_tokens and tok.all_special_ids == ref.all_special_ids
    texts = ["[E1] Elizabeth [/E1] met [E1]Darcy[/E1] at <ent>Pemberley<ent>.", "x[E1]y [e1] <ENT>"]
    exp = ref(texts, return_offsets_mapping=True, return_special_tokens_mask=True)
    got = tok(texts, return_offsets_mapping=True, return_special_tokens_mask=True)
    assert got["input_ids"] == exp["input_ids"]
    assert got["offset_mapping"] == [list(map(tuple, r)) for r in exp["offset_mapping"]]
    assert got["special_tokens_mask"] == exp["special_tokens_mask"]
    for skip in (False, True):
        assert tok.decode(got["input_ids"][0], skip_special_tokens=skip) == ref.decode(
            exp["input_ids"][0], skip_special_tokens=skip
        )
    tok.save_pretrained(tmp_path)
    again = BertTokenizer.from_pretrained(tmp_path)
    assert again(texts)["input_ids"] == exp["input_ids"]
