"""Byte-level BPE (GPT-2, RoBERTa, ModernBERT's template) against the `tokenizers` library.

The reference is tokenizers' Rust engine, built from the same files: GPT-2's real ranks (openai-whisper's
gpt2.tiktoken, written as vocab.json + merges.txt by the assets set-up) and vocabularies that
tokenizers' own BPE trainer learns on the assets' text, Chinese included. Ids, offsets, word ids,
tokens and decode must be equal.
"""

from __future__ import annotations

import json

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

from bertkit.assets import asset_path  # noqa: E402
from bertkit.tokenization.bpe import ByteLevelBPETokenizer, GPT2Tokenizer, RobertaTokenizer  # noqa: E402

try:
    GPT2 = asset_path("gpt2-bpe")
except FileNotFoundError as e:  # fetched by `bertkit fetch-assets`
    pytest.skip(str(e), allow_module_level=True)

TRICKY = [
    "Hello world  x",
    "It's   a test\n\nof émoji 👍🏽 and 中文字 123.45 ,,, done",
    "  leading and trailing  ",
    "tabs\tand\r\nlines \u00a0nbsp\u3000ideographic\u2028sep",
    "I'll we've they're DON'T 'quoted' ''",
    "ﬁ ligature, Ⅻ roman, ² super, ٣ arabic digit, _under_score",
    "\x00\x01 control \x1c\x1f seps \ufeff bom \u200d zwj",
    "",
    " ",
    "a" * 300,
    "Ünïcödé ñ Åström ΣΑΣ İstanbul ß",
    "<|endoftext|>between<|endoftext|> specials <|endoftext|>",
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


TEXTS = TRICKY + _lines("austen", 400) + _lines("wiki", 150) + _lines("news-zh", 150)


def _byte_level(model, add_prefix_space: bool = False):
    ref = tokenizers.Tokenizer(model)
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    ref.decoder = decoders.ByteLevel()
    return ref


def _gpt2_ref():
    ref = _byte_level(models.BPE.from_file(str(GPT2 / "vocab.json"), str(GPT2 / "merges.txt")))
    ref.add_special_tokens(["<|endoftext|>"])
    return ref


def _roberta_ref():
    ref = _gpt2_ref()
    ref.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>"])
    ref.add_special_tokens([tokenizers.AddedToken("<mask>", lstrip=True, special=True)])
    # as transformers' RobertaTokenizer writes it (add_prefix_space=False)
    sep, cls = ("</s>", ref.token_to_id("</s>")), ("<s>", ref.token_to_id("<s>"))
    ref.post_processor = processors.RobertaProcessing(sep, cls, trim_offsets=True, add_prefix_space=False)
    return ref


def _same(ours, ref, texts, pairs=None):
    """Ids, offsets, word ids, tokens, type ids and decodes of every text (or pair) agree."""
    for i, text in enumerate(texts):
        pair = None if pairs is None else pairs[i]
        exp = ref.encode(text, pair)
        got = ours(text, pair, return_offsets_mapping=True, return_token_type_ids=True)
        assert got["input_ids"] == exp.ids, text
        assert got["offset_mapping"] == exp.offsets, text
        assert got["token_type_ids"] == exp.type_ids, text
        assert got.word_ids() == exp.word_ids, text
        assert got.tokens() == exp.tokens, text
        for skip in (False, True):
            assert ours.decode(exp.ids, skip_special_tokens=skip) == ref.decode(exp.ids, skip_special_tokens=skip)
    batch = ours(list(texts), return_offsets_mapping=False)["input_ids"]
    assert batch == [e.ids for e in ref.encode_batch(list(texts) if pairs is None else list(zip(texts, pairs)))] or (
        pairs is not None
    )
    assert ours.encode_batch_ids(texts) == [ref.encode(t, add_special_tokens=False).ids for t in texts]
    if pairs is None:  # the batch path with offsets, on pieces the cache now holds
        got = ours(list(texts), return_offsets_mapping=True)
        exp_batch = ref.encode_batch(list(texts))
        assert got["input_ids"] == [e.ids for e in exp_batch]
        assert got["offset_mapping"] == [e.offsets for e in exp_batch]


def test_gpt2_real_ranks_match_tokenizers():
    ours, ref = GPT2Tokenizer(GPT2 / "vocab.json", GPT2 / "merges.txt"), _gpt2_ref()
    assert len(ours) == ref.get_vocab_size() == 50257
    _same(ours, ref, TEXTS)


def test_roberta_pairs_specials_offsets_and_mask_lstrip(tmp_path):
    ref = _roberta_ref()
    ref.save(str(tmp_path / "tokenizer.json"))
    ours = RobertaTokenizer.from_pretrained(tmp_path)
    assert (ours.cls_token_id, ours.sep_token_id, ours.pad_token_id) == (50257, 50259, 50258)
    texts = TEXTS[:60] + ["a <mask> b", "x<mask>y", "the  <mask>"]
    _same(ours, ref, texts)
    _same(ours, ref, texts, pairs=[p or "x" for p in texts[::-1]])  # transformers reads "" as no pair


@pytest.mark.parametrize("prefix", [True, False])
def test_add_prefix_space_and_bytelevel_trim(tmp_path, prefix):
    ref = _gpt2_ref()
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    ref.post_processor = processors.ByteLevel(trim_offsets=True, add_prefix_space=prefix)
    ref.save(str(tmp_path / "tokenizer.json"))
    ours = ByteLevelBPETokenizer.from_pretrained(tmp_path)
    _same(ours, ref, TEXTS[:80])


def test_template_processing_as_modernbert_declares(tmp_path):
    ref = _gpt2_ref()
    ref.add_special_tokens(["[CLS]", "[SEP]", "[PAD]", "[MASK]"])
    ref.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ref.token_to_id("[CLS]")), ("[SEP]", ref.token_to_id("[SEP]"))],
    )
    ref.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "cls_token": "[CLS]", "sep_token": "[SEP]"})
    )
    ours = ByteLevelBPETokenizer.from_pretrained(tmp_path)
    _same(ours, ref, TEXTS[:40], pairs=[p or "x" for p in TEXTS[40:80]])


def test_padding_truncation_tensors_like_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    ref = _roberta_ref()
    ref.save(str(tmp_path / "tokenizer.json"))
    ours = RobertaTokenizer.from_pretrained(tmp_path)
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "tokenizer.json"), pad_token="<pad>", cls_token="<s>", sep_token="</s>"
    )
    texts, pairs = TEXTS[12:40], [p or "x" for p in TEXTS[40:68]]
    for kw in (
        dict(padding=True),
        dict(padding="max_length", max_length=24, truncation=True),
        dict(truncation="longest_first", max_length=32, padding=True, pad_to_multiple_of=8),
        dict(truncation=True, max_length=16, stride=4, return_overflowing_tokens=True, padding=True),
    ):
        got = ours(texts, pairs, return_offsets_mapping=True, **kw)
        exp = hf(texts, pairs, return_offsets_mapping=True, **kw)
        for key in ("input_ids", "attention_mask", "offset_mapping"):
            assert got[key] == [list(map(tuple, r)) if key == "offset_mapping" else r for r in exp[key]], (kw, key)
    pt = ours(texts[:3], padding=True, return_tensors="pt")
    assert pt["input_ids"].tolist() == hf(texts[:3], padding=True)["input_ids"]


def test_saved_folder_loads_in_tokenizers_and_back(tmp_path):
    ref = _roberta_ref()
    ref.save(str(tmp_path / "tokenizer.json"))
    ours = RobertaTokenizer.from_pretrained(tmp_path)
    ours.add_tokens(["newword", "<e1>"])
    ours.save_pretrained(tmp_path / "saved")
    again = tokenizers.Tokenizer.from_file(str(tmp_path / "saved" / "tokenizer.json"))
    texts = TEXTS[:30] + ["a newword <e1> b <mask>"]
    _same(ours, again, texts, pairs=[p or "x" for p in texts[::-1]])
    _same(RobertaTokenizer.from_pretrained(tmp_path / "saved"), again, texts)


def test_vocabularies_tokenizers_trains_on_english_and_chinese():
    ref = _byte_level(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    ref.train_from_iterator(TEXTS[12:], trainer=trainer)
    spec = json.loads(ref.to_str())
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in spec["model"]["merges"]]
    ours = GPT2Tokenizer(vocab=spec["model"]["vocab"], merges=merges, unk_token=None, bos_token=None, eos_token=None)
    ours.add_special_tokens({"additional_special_tokens": ["<|endoftext|>"]})
    _same(ours, ref, TEXTS)


def test_bad_input_names_the_file(tmp_path):
    vocab = {"a": 0, "b": 1}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    with pytest.raises(ValueError, match=r"merges.txt: merge 1 \(a b\) needs 'ab', which is not in the vocabulary"):
        GPT2Tokenizer(tmp_path / "vocab.json", tmp_path / "merges.txt")
    (tmp_path / "merges.txt").write_text("#version: 0.2\nab\n")
    with pytest.raises(ValueError, match=r"merges.txt:2: a merge is two tokens"):
        GPT2Tokenizer(tmp_path / "vocab.json", tmp_path / "merges.txt")
    word_level = tokenizers.Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    word_level.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match=r"tokenizer.json: model type 'WordLevel' is not one bertkit reads"):
        ByteLevelBPETokenizer.from_pretrained(tmp_path)
