"""Unigram (SentencePiece's model, as XLM-RoBERTa uses it) against the `tokenizers` library.

The reference is tokenizers' Rust engine on sentencepiece's own test models (English and Japanese,
their Precompiled charsmaps included), converted by transformers' SpmConverter on the reference side
only, and on a vocabulary tokenizers' Unigram trainer learns from the assets' English and Chinese
text. bertkit reads the ``.model`` files itself.
"""

from __future__ import annotations

import json

import pytest

tokenizers = pytest.importorskip("tokenizers")
convert = pytest.importorskip("transformers.convert_slow_tokenizer")
from tokenizers import decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

from bertkit.assets import asset_path  # noqa: E402
from bertkit.tokenization.unigram import UnigramTokenizer, XLMRobertaTokenizer  # noqa: E402

try:
    SPM = {n: asset_path(f"spm-{n}") for n in ("botchan-unigram", "kyoto-unigram")}
except FileNotFoundError as e:  # fetched by `bertkit fetch-assets`
    pytest.skip(str(e), allow_module_level=True)

TRICKY = [
    "Hello world  x",
    "It's   a test\n\nof émoji 👍🏽 and 中文字 123.45 ,,, done",
    "  leading and trailing  ",
    "ﬁ ligature, Ⅻ roman, ² super, ① circled, ﬁ\u0301 mark",
    "tabs\tand\r\nlines \u00a0nbsp\u3000ideographic",
    "<s>special</s> x <unk>",
    "",
    " ",
    "ｶﾞ ﾊﾟ halfwidth, ＡＢＣ fullwidth",
    "Ünïcödé ñ Åström e\u0301 x\u0301\u0302y",
    "日本語のテキストです。東京都",
    "\x00\x01 control \ufeff bom \u200d zwj 👨\u200d👩\u200d👧 🇯🇵",
]


def _lines(name: str, n: int) -> list[str]:
    try:
        path = asset_path(name)
    except FileNotFoundError:
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(line.rstrip("\n"))
            if len(out) >= n:
                break
    return out


TEXTS = TRICKY + _lines("botchan", 200) + _lines("news-zh", 100) + _lines("austen", 100)


class _Slow:
    """What transformers' converter reads from a slow tokenizer: the .model path."""

    def __init__(self, path):
        self.vocab_file = str(path)


def _reference(name: str):
    return convert.SpmConverter(_Slow(SPM[name])).converted()


def _same(ours, ref, texts, pairs=None):
    unk = ours._unk_model_id
    for i, text in enumerate(texts):
        pair = None if pairs is None else pairs[i]
        exp = ref.encode(text, pair)
        got = ours(text, pair, return_offsets_mapping=True, return_token_type_ids=True)
        assert got["input_ids"] == exp.ids, text
        assert got["offset_mapping"] == exp.offsets, text
        assert got["token_type_ids"] == exp.type_ids, text
        assert got.word_ids() == exp.word_ids, text
        # tokenizers shows an unknown piece as its text; transformers' convert_ids_to_tokens gives <unk>
        shown = [t for t, i in zip(got.tokens(), exp.ids) if i != unk]
        assert shown == [t for t, i in zip(exp.tokens, exp.ids) if i != unk], text
        for skip in (False, True):
            assert ours.decode(exp.ids, skip_special_tokens=skip) == ref.decode(exp.ids, skip_special_tokens=skip)
    assert ours.encode_batch_ids(texts) == [ref.encode(t, add_special_tokens=False).ids for t in texts]
    if pairs is None:  # the batch path with offsets, on pieces the cache now holds
        got = ours(list(texts), return_offsets_mapping=True)
        exp_batch = ref.encode_batch(list(texts))
        assert got["input_ids"] == [e.ids for e in exp_batch]
        assert got["offset_mapping"] == [e.offsets for e in exp_batch]


@pytest.mark.parametrize("name", sorted(SPM))
def test_sentencepiece_models_read_directly_match_tokenizers(name):
    ours, ref = UnigramTokenizer.from_pretrained(SPM[name]), _reference(name)
    assert len(ours) == ref.get_vocab_size()
    _same(ours, ref, TEXTS)


def test_xlm_roberta_layout_from_tokenizer_json(tmp_path):
    ref = _reference("botchan-unigram")
    # transformers' XLM-R registers every named special token, <unk> included
    ref.add_special_tokens(["<unk>", "<pad>", tokenizers.AddedToken("<mask>", lstrip=True, special=True)])
    sep, cls = ("</s>", ref.token_to_id("</s>")), ("<s>", ref.token_to_id("<s>"))
    ref.post_processor = processors.RobertaProcessing(sep, cls, trim_offsets=True, add_prefix_space=True)
    ref.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "XLMRobertaTokenizer"}))
    ours = XLMRobertaTokenizer.from_pretrained(tmp_path)
    texts = TEXTS[:40] + ["a <mask> b", "the  <mask>"]
    _same(ours, ref, texts)
    _same(ours, ref, texts, pairs=[p or "x" for p in texts[::-1]])  # transformers reads "" as no pair
    ours.save_pretrained(tmp_path / "saved")
    again = tokenizers.Tokenizer.from_file(str(tmp_path / "saved" / "tokenizer.json"))
    _same(XLMRobertaTokenizer.from_pretrained(tmp_path / "saved"), again, texts)


@pytest.mark.parametrize("scheme", ["always", "first", "never"])
@pytest.mark.parametrize("split", [True, False])
def test_metaspace_prepend_schemes_and_no_split(tmp_path, scheme, split):
    ref = _reference("botchan-unigram")
    meta = {"replacement": "\u2581", "prepend_scheme": scheme, "split": split}
    ref.pre_tokenizer = pre_tokenizers.Metaspace(**meta)
    ref.decoder = decoders.Metaspace(**meta)
    ref.save(str(tmp_path / "tokenizer.json"))
    # ASCII and non-ASCII text (two paths to the pieces), spaces and a literal ▁ at either end
    texts = TRICKY + [" lead", "trail ", "a\u2581b c", "\u2581x", "x  \u2581 y"] + TEXTS[12:40]
    _same(UnigramTokenizer.from_pretrained(tmp_path), ref, texts)


def test_vocabulary_tokenizers_trains_on_english_and_chinese(tmp_path):
    ref = tokenizers.Tokenizer(models.Unigram())
    ref.normalizer = tokenizers.normalizers.NFKC()
    ref.pre_tokenizer = pre_tokenizers.Metaspace()
    ref.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=1200, special_tokens=["<unk>"], unk_token="<unk>")
    ref.train_from_iterator(TEXTS[12:], trainer=trainer)
    ref.save(str(tmp_path / "tokenizer.json"))
    _same(UnigramTokenizer.from_pretrained(tmp_path), ref, TEXTS)


def test_bad_input_names_the_file(tmp_path):
    bad = tmp_path / "broken.model"
    bad.write_bytes(b"\x0f\xff\xff")
    with pytest.raises(ValueError, match="broken.model: not a SentencePiece model"):
        UnigramTokenizer.from_pretrained(bad)
    ref = tokenizers.Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    ref.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match=r"tokenizer.json: model type 'WordLevel' is not one bertkit reads"):
        UnigramTokenizer.from_pretrained(tmp_path)
