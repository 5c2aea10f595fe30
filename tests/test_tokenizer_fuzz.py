"""Property tests: on random Unicode text bertkit never crashes and matches BertTokenizerFast.

Expected values come from the reference (transformers' BertTokenizerFast, tokenizers' Rust engine).
"""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_tokenizer_parity import CONFIG_IDS, CONFIGS, ours, reference  # noqa: E402

# Mix fully random code points with an alphabet that stresses the tricky classes: ASCII,
# accents and combining marks, controls/format characters, Unicode spaces, CJK and Hangul,
# punctuation, emoji, and the literal special tokens.
_TRICKY = list("aAzZ09 .,!?'\"-_#[]\t\n\r") + [
    "\u0301",
    "\u0308",
    "\u0323",
    "\u00e9",
    "\u00c9",
    "\u0130",
    "\u03a3",
    "\u00df",
    "\u1e9e",
    "\ufb01",
    "\x00",
    "\x01",
    "\x0b",
    "\x0c",
    "\x1f",
    "\x7f",
    "\x85",
    "\u200b",
    "\u200d",
    "\ufeff",
    "\u00ad",
    "\ufffd",
    "\u00a0",
    "\u2003",
    "\u2028",
    "\u3000",
    "\u1680",
    "\u4e2d",
    "\u6587",
    "\uf900",
    "\ud55c",
    "\u1100",
    "\u3001",
    "\u3002",
    "\uff0c",
    "\u2014",
    "\u00bf",
    "\U0001f600",
    "\U0001f44d\U0001f3fd",
    "\ue000",
    "\U0002a700",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "[UNK]",
    "[PAD]",
    "##",
    "un",
    "##able",
    "hello",
    "Hello",
    # CJK compatibility ideographs whose NFD leaves the BMP (U+FA6C -> U+242EE, ...)
    "\ufa6c",
    "\ufacf",
    "\ufad0",
    "\ufad1",
    "\ufad5",
    "\ufad6",
    "\ufad7",
]
# The reference cannot take lone surrogates (not UTF-8), so parity runs without them;
# test_fuzz_no_crash feeds them to bertkit alone.
_chars = st.characters(exclude_categories=["Cs"])
texts = st.one_of(
    st.text(alphabet=_chars, max_size=60),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=60),
    st.lists(st.sampled_from(_TRICKY), max_size=30).map("".join),
    st.lists(st.one_of(st.sampled_from(_TRICKY), _chars), max_size=40).map("".join),
)


def _check(asset, lower, text, pair=None):
    ref, tok = reference(asset, lower), ours(asset, lower)
    kw = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    exp = ref(text, pair, **kw)
    got = tok(text, pair, **kw)
    assert got["input_ids"] == exp["input_ids"], (text, got.tokens(), exp.tokens())
    assert got["offset_mapping"] == [tuple(o) for o in exp["offset_mapping"]], (text, got.tokens())
    assert got["token_type_ids"] == exp["token_type_ids"]
    assert got["special_tokens_mask"] == exp["special_tokens_mask"]
    assert got.word_ids() == exp.word_ids(), text
    assert tok.decode(got["input_ids"]) == ref.decode(exp["input_ids"])


@pytest.mark.parametrize("asset,lower", CONFIGS, ids=CONFIG_IDS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts)
def test_fuzz_parity(asset, lower, text):
    _check(asset, lower, text)


@settings(max_examples=150, deadline=None)
@given(text=texts, pair=texts)
def test_fuzz_pair_parity(text, pair):
    _check("vocab-uncased", True, text, pair)


@settings(max_examples=150, deadline=None)
@given(text=texts, max_length=st.integers(min_value=3, max_value=24), stride=st.integers(min_value=0, max_value=4))
def test_fuzz_windows(text, max_length, stride):
    ref, tok = reference("vocab-uncased", True), ours("vocab-uncased", True)
    kw = dict(
        truncation=True,
        max_length=max_length,
        stride=min(stride, max_length - 3),
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )
    if kw["stride"] >= max_length - 2:
        kw["stride"] = 0
    exp = ref(text, **kw)
    got = tok(text, **kw)
    assert got["input_ids"] == exp["input_ids"]
    assert got["overflow_to_sample_mapping"] == exp["overflow_to_sample_mapping"]
    assert got["offset_mapping"] == [[tuple(o) for o in row] for row in exp["offset_mapping"]]


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(), max_size=80), pair=st.text(max_size=20))
def test_fuzz_no_crash(text, pair):
    """Any str, lone surrogates included, encodes and decodes; offsets stay inside the text."""
    tok = ours("vocab-chinese", True)
    enc = tok(
        text,
        pair,
        return_offsets_mapping=True,
        truncation=True,
        max_length=16,
        stride=2,
        return_overflowing_tokens=True,
    )
    for row, offs in zip(enc["input_ids"], enc["offset_mapping"]):
        assert len(row) == len(offs) <= 16
        assert all(0 <= a <= b <= max(len(text), len(pair)) for a, b in offs)
        assert isinstance(tok.decode(row), str)
    assert len(tok.encode_batch_ids([text, pair])) == 2
