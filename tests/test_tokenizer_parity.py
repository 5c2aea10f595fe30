"""Parity of bertkit's BertTokenizer with transformers' BertTokenizerFast on real vocabularies and text.

Every expected value comes from the reference (tokenizers' Rust engine via transformers), never
from bertkit. Note: in transformers 5 ``BertTokenizerFast`` *is* ``BertTokenizer`` (tokenizers
backend), and its constructor takes ``vocab=`` (a path or dict): ``vocab_file=`` is silently
ignored and yields a 5-token vocabulary, so the reference here is built from the parsed vocab.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from bertkit.assets import asset_path

transformers = pytest.importorskip("transformers")
from transformers import BertTokenizerFast  # noqa: E402

from bertkit.tokenization import BertTokenizer  # noqa: E402

try:
    asset_path("vocab-uncased")
    asset_path("vocab-chinese")
except FileNotFoundError as e:  # pragma: no cover - the assets are fetched by `make test`
    pytest.skip(str(e), allow_module_level=True)

CONFIGS = [("vocab-uncased", True), ("vocab-chinese", True), ("vocab-chinese", False)]
CONFIG_IDS = ["uncased-lower", "chinese-lower", "chinese-cased"]


def _vocab_dict(path: Path) -> dict[str, int]:
    with open(path, encoding="utf-8") as f:
        return {line.rstrip("\n"): i for i, line in enumerate(f)}


@lru_cache(maxsize=None)
def reference(asset: str, lower: bool) -> BertTokenizerFast:
    return BertTokenizerFast(
        vocab=_vocab_dict(asset_path(asset)), do_lower_case=lower, tokenize_chinese_chars=True, strip_accents=None
    )


@lru_cache(maxsize=None)
def ours(asset: str, lower: bool) -> BertTokenizer:
    # the reference has no length limit (model_max_length is "infinite" without a config)
    return BertTokenizer(
        asset_path(asset), do_lower_case=lower, tokenize_chinese_chars=True, strip_accents=None, model_max_length=10**9
    )


# ---------------------------------------------------------------- real corpora
def _lines(name: str, n: int, max_chars: int = 2_000_000) -> list[str]:
    with open(asset_path(name), encoding="utf-8") as f:
        text = f.read(max_chars)
    out = [ln for ln in text.split("\n") if ln.strip()]
    step = max(1, len(out) // n)
    return out[::step][:n]


def _tweets(n: int) -> list[str]:
    tweets, cur = [], []
    with open(asset_path("wnut16-train"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if cur:
                    tweets.append(" ".join(cur))
                cur = []
            else:
                cur.append(line.split("\t")[0])
    return tweets[:n]


@lru_cache(maxsize=None)
def corpus(name: str) -> tuple[str, ...]:
    if name == "tweets":
        return tuple(_tweets(600))
    if name == "wiki-xml":
        # raw markup, including its blank/indented lines and very long lines
        with open(asset_path("wiki-xml"), encoding="utf-8") as f:
            return tuple(f.read(300_000).split("\n"))
    return tuple(_lines(name, 800))


HANDWRITTEN = [
    "",
    " ",
    "   \t\n  ",
    "\n",
    "\u3000\u00a0\u2028",
    "Hello, world!",
    "unheard 124443286539",
    "Don't stop—it's 3.14 (approx.)...",
    "café Café CAFÉ cafe\u0301 Ångström naïve façade résumé",
    "ΣΑΣ σας ς İstanbul ǅ ß ẞ ﬁ",
    "a\u0301b\u0300\u0301c \u0301leading a.\u0301b",
    "e\u0308\u0323 \u1e9b\u0323",
    "zero\u200bwidth\u200cjoin\u200d non\ufeffbreak \u2060x",
    "soft\u00adhyphen",
    "ctrl\x00nul\x01\x02\x1f\x7f \x0bvt\x0cff \x85nel \ufffdrepl",
    "tab\there\r\nnewline",
    "bidi \u202eevil\u202c \u200e\u200f",
    "private \ue000\uf8ff use",
    "\U0010fffd plane16",
    "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷 #hashtag @user http://t.co/x?a=1&b=2",
    "한국어 텍스트 한글",
    "日本語のテキスト、カタカナ ｶﾀｶﾅ",
    "中文，标点。“引号”《书名》",
    "\uf900\ufa6a\U0002f800 compat ideographs \u2f00\u2e80 radicals",
    "Привет, мир! Ёж",
    "مرحبا بالعالم",
    "שלום",
    "नमस्ते दुनिया",
    "ภาษาไทย",
    "Ελληνικά",
    "x" * 99,
    "y" * 100,
    "z" * 101,
    "supercalifragilisticexpialidocious" * 4,
    "é" * 101,
    "한" * 40,
    "[CLS] [SEP] [PAD] [MASK] [UNK]",
    "x[MASK]y",
    "[mask] [Mask] [CLS[SEP]] [[CLS]]",
    "Hello [CLS] world",
    "##ing ## # unaffable",
    "1,000,000.50 $ € £ ¥ 10% ½ ² ①",
    "\u00bf\u00a1 \u2018quotes\u2019 \u201cdouble\u201d \u2026 \u2013 \u2014 \u00b7 \u2022",
    "a\u0000b",
    "\u0000",
    "\ufffd",
    "\u200b",
    "\u0301",
    "\u0301\u0301a",
    "𝐀𝐁𝐂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 Ｆｕｌｌｗｉｄｔｈ",
    "\ud7a3\u1100\u1161\u11a8",
]


def _assert_same(ref_tok, our_tok, texts, pairs=None, **kw):
    kw = dict(return_offsets_mapping=True, return_special_tokens_mask=True, **kw)
    expected = ref_tok(list(texts), None if pairs is None else list(pairs), **kw)
    got = our_tok(list(texts), None if pairs is None else list(pairs), **kw)
    assert sorted(got.keys()) == sorted(expected.keys())
    for key in expected:
        exp = (
            [list(map(tuple, r)) if key == "offset_mapping" else r for r in expected[key]]
            if isinstance(expected[key][0], list)
            else expected[key]
        )
        if got[key] != exp:
            bad = next(i for i, (a, b) in enumerate(zip(got[key], exp)) if a != b)
            src = (
                texts[expected["overflow_to_sample_mapping"][bad]]
                if "overflow_to_sample_mapping" in expected
                else texts[bad]
            )
            raise AssertionError(
                f"{key} differs on row {bad} ({src[:120]!r}):\n ours {got[key][bad][:40]}\n"
                f"  ref {exp[bad][:40]}\n ours tokens {got.tokens(bad)[:40]}\n"
                f"  ref tokens {expected.tokens(bad)[:40]}"
            )
    for i in range(len(expected["input_ids"])):
        assert got.tokens(i) == expected.tokens(i)
        assert got.word_ids(i) == expected.word_ids(i), (i, texts[i % len(texts)][:100])
        assert got.sequence_ids(i) == expected.sequence_ids(i)
    return got


@pytest.mark.parametrize("asset,lower", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("name", ["austen", "wiki", "wiki-xml", "news-zh", "tweets", "wordnet", "fortunes"])
def test_corpus_parity(name, asset, lower):
    texts = corpus(name)
    assert len(texts) > 100
    _assert_same(reference(asset, lower), ours(asset, lower), texts)


@pytest.mark.parametrize("asset,lower", CONFIGS, ids=CONFIG_IDS)
def test_handwritten_parity(asset, lower):
    _assert_same(reference(asset, lower), ours(asset, lower), HANDWRITTEN)
    # also one at a time (single-text output shape) and through tokenize()
    ref, tok = reference(asset, lower), ours(asset, lower)
    for text in HANDWRITTEN:
        assert tok(text, return_offsets_mapping=True) == {
            k: (list(map(tuple, v)) if k == "offset_mapping" else v)
            for k, v in ref(text, return_offsets_mapping=True).items()
        }, text
        assert tok.tokenize(text) == ref.tokenize(text), text


@pytest.mark.parametrize("asset,lower", CONFIGS, ids=CONFIG_IDS)
def test_pairs_padding_truncation(asset, lower):
    ref, tok = reference(asset, lower), ours(asset, lower)
    texts = list(corpus("austen")[:40]) + list(corpus("news-zh")[:40])
    pairs = list(corpus("wiki")[:40]) + list(corpus("tweets")[:40])
    for kw in [
        dict(),
        dict(padding=True),
        dict(padding="max_length", max_length=64, truncation=True),
        dict(truncation="longest_first", max_length=40),
        dict(truncation=True, max_length=32, padding="longest", pad_to_multiple_of=8),
        dict(add_special_tokens=False, padding=True),
        dict(padding=True, padding_side="left"),
        dict(max_length=24),
        dict(padding=True, max_length=24),
    ]:
        _assert_same(ref, tok, texts, pairs, **kw)
        _assert_same(ref, tok, texts, None, **kw)


@pytest.mark.parametrize("asset,lower", CONFIGS[:2], ids=CONFIG_IDS[:2])
def test_overflow_windows(asset, lower):
    """Sliding windows (QA over long documents) with stride, and overflow_to_sample_mapping."""
    ref, tok = reference(asset, lower), ours(asset, lower)
    questions = [t[:60] for t in corpus("tweets")[:12]]
    contexts = [" ".join(corpus("wiki")[i : i + 3]) for i in range(12)]
    for kw in [
        dict(truncation="only_second", max_length=64, stride=16),
        dict(truncation="only_second", max_length=100, stride=0, padding="max_length"),
    ]:
        got = _assert_same(ref, tok, questions, contexts, return_overflowing_tokens=True, **kw)
        assert len(got["input_ids"]) > len(questions)  # windows really overflowed
    for kw in [dict(truncation=True, max_length=32, stride=8), dict(truncation=True, max_length=50, stride=0)]:
        _assert_same(ref, tok, contexts, None, return_overflowing_tokens=True, **kw)
    # a single text with overflow comes back batched, like the reference
    e_ref = ref(contexts[0], truncation=True, max_length=20, stride=5, return_overflowing_tokens=True)
    e_our = tok(contexts[0], truncation=True, max_length=20, stride=5, return_overflowing_tokens=True)
    assert dict(e_our) == dict(e_ref)


@pytest.mark.parametrize("asset,lower", CONFIGS, ids=CONFIG_IDS)
def test_decode_parity(asset, lower):
    ref, tok = reference(asset, lower), ours(asset, lower)
    texts = list(corpus("austen")[:50]) + list(corpus("news-zh")[:50]) + list(corpus("tweets")[:50]) + HANDWRITTEN
    for text in texts:
        ids = ref(text)["input_ids"]
        for skip in (False, True):
            assert tok.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), text
        assert tok.decode(ids, clean_up_tokenization_spaces=True) == ref.decode(ids, clean_up_tokenization_spaces=True)
    batch = [ref(t)["input_ids"] for t in texts[:10]]
    assert tok.batch_decode(batch, skip_special_tokens=True) == ref.batch_decode(batch, skip_special_tokens=True)
    # ids that do not come from a text: continuation pieces first, specials in the middle
    odd = [tok.vocab["##s"] if "##s" in tok.vocab else 5, tok.cls_token_id, 200, tok.pad_token_id, 300, 301]
    assert tok.decode(odd) == ref.decode(odd)


def test_split_into_words_parity():
    ref, tok = reference("vocab-uncased", True), ours("vocab-uncased", True)
    words = [t.split(" ") for t in corpus("tweets")[:100]]
    _assert_same(ref, tok, words, None, is_split_into_words=True)
    _assert_same(ref, tok, words[:50], words[50:], is_split_into_words=True, truncation=True, max_length=24)


def test_encode_and_convert_parity():
    ref, tok = reference("vocab-uncased", True), ours("vocab-uncased", True)
    for text in list(corpus("austen")[:30]) + HANDWRITTEN:
        assert tok.encode(text) == ref.encode(text)
        assert tok.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False)
        toks = ref.tokenize(text)
        assert tok.convert_tokens_to_ids(toks) == ref.convert_tokens_to_ids(toks)
        ids = ref.encode(text)
        assert tok.convert_ids_to_tokens(ids) == ref.convert_ids_to_tokens(ids)
    assert tok.encode("a b", "c d e", truncation=True, max_length=6) == ref.encode(
        "a b", "c d e", truncation=True, max_length=6
    )
    assert tok.encode_batch_ids(list(corpus("wiki")[:50])) == [
        ref.encode(t, add_special_tokens=False) for t in corpus("wiki")[:50]
    ]


def test_special_token_properties():
    ref, tok = reference("vocab-uncased", True), ours("vocab-uncased", True)
    assert tok.special_tokens_map == ref.special_tokens_map
    assert tok.all_special_tokens == ref.all_special_tokens
    assert tok.all_special_ids == ref.all_special_ids
    for name in ("cls", "sep", "pad", "mask", "unk"):
        assert getattr(tok, f"{name}_token") == getattr(ref, f"{name}_token")
        assert getattr(tok, f"{name}_token_id") == getattr(ref, f"{name}_token_id")
    assert tok.vocab_size == ref.vocab_size == len(tok) == len(ref)
    assert tok.vocab == ref.get_vocab()
    assert all(tok.ids_to_tokens[i] == t for t, i in ref.get_vocab().items())


@pytest.mark.parametrize("asset,lower", CONFIGS[:2], ids=CONFIG_IDS[:2])
def test_lazy_word_ids_without_offsets(asset, lower):
    """word_ids()/tokens()/sequence_ids() computed on demand after a plain (ids-only) call."""
    ref, tok = reference(asset, lower), ours(asset, lower)
    texts = [t[:30] for t in list(corpus("tweets")[:20]) + list(corpus("news-zh")[:20]) + HANDWRITTEN[:20]]
    pairs = list(corpus("austen")[:60])
    for kw in [
        dict(),
        dict(padding=True),
        dict(truncation="only_second", max_length=64, stride=5, return_overflowing_tokens=True, padding="max_length"),
    ]:
        exp, got = ref(texts, pairs, **kw), tok(texts, pairs, **kw)
        assert got["input_ids"] == exp["input_ids"]
        for i in range(len(exp["input_ids"])):
            assert got.word_ids(i) == exp.word_ids(i)
            assert got.tokens(i) == exp.tokens(i)
            assert got.sequence_ids(i) == exp.sequence_ids(i)


@pytest.mark.parametrize("truncation,max_length", [(True, 12), ("only_second", 24), ("longest_first", 20)])
def test_left_truncation_keeps_the_same_tokens_as_transformers(truncation, max_length):
    """``truncation_side = "left"`` keeps each text's last tokens, on MiniLM's tokenizer and real reviews."""
    import csv

    folder = asset_path("minilm")
    ref = transformers.AutoTokenizer.from_pretrained(str(folder), truncation_side="left")
    ours = BertTokenizer.from_pretrained(folder)
    ours.truncation_side = "left"
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)][:40]
    queries = [" ".join(t.split()[:4]) for t in texts]  # short first texts: room left for only_second
    args = (texts,) if truncation is True else (queries, texts)
    want = ref(*args, truncation=truncation, max_length=max_length)
    got = ours(*args, truncation=truncation, max_length=max_length)
    assert got["input_ids"] == want["input_ids"] and got["token_type_ids"] == want["token_type_ids"]
    assert any(len(ref(t)["input_ids"]) > max_length for t in texts)  # some texts were cut
    with pytest.raises(ValueError, match="truncation_side='left' keeps one window"):
        ours(texts, truncation=True, max_length=12, return_overflowing_tokens=True)
    ours.truncation_side = "middle"
    with pytest.raises(ValueError, match="truncation_side must be 'right' or 'left', got 'middle'"):
        ours(texts[0])
