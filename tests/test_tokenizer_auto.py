"""AutoTokenizer picks the tokenizer class from a folder as transformers does (tokenizer_class, the
model type, then the files), and the class it picks encodes as transformers' AutoTokenizer does."""

from __future__ import annotations

import json
import shutil

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
from tokenizers import decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

from bertkit import AutoTokenizer  # noqa: E402
from bertkit.assets import asset_path  # noqa: E402
from bertkit.tokenization import (  # noqa: E402
    ByteLevelBPETokenizer,
    GPT2Tokenizer,
    RobertaTokenizer,
    UnigramTokenizer,
    XLMRobertaTokenizer,
)

TEXTS = ["Hello world, it's a test.", "  two  spaces and 中文 text", "a <mask> b"]


def _bpe_json(path):
    ref = tokenizers.Tokenizer(models.BPE())
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    ref.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    ref.train_from_iterator(TEXTS * 20 + ["the quick brown fox jumps over the lazy dog"] * 20, trainer=trainer)
    ref.add_special_tokens([tokenizers.AddedToken("<mask>", lstrip=True, special=True)])
    sep, cls = ("</s>", ref.token_to_id("</s>")), ("<s>", ref.token_to_id("<s>"))
    ref.post_processor = processors.RobertaProcessing(sep, cls, trim_offsets=True, add_prefix_space=False)
    ref.save(str(path / "tokenizer.json"))
    return ref


def _unigram_json(path):
    ref = tokenizers.Tokenizer(models.Unigram())
    ref.pre_tokenizer = pre_tokenizers.Metaspace()
    ref.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=120, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    ref.train_from_iterator(TEXTS * 20, trainer=trainer)
    ref.save(str(path / "tokenizer.json"))
    return ref


def _config(path, name, data):
    (path / name).write_text(json.dumps(data))


def test_tokenizer_class_then_model_type_then_files(tmp_path):
    roberta = tmp_path / "roberta"
    roberta.mkdir()
    _bpe_json(roberta)
    _config(roberta, "tokenizer_config.json", {"tokenizer_class": "RobertaTokenizerFast", "mask_token": "<mask>"})
    ours, ref = AutoTokenizer.from_pretrained(roberta), transformers.AutoTokenizer.from_pretrained(roberta)
    assert type(ours) is RobertaTokenizer
    assert ours(TEXTS, padding=True)["input_ids"] == ref(TEXTS, padding=True)["input_ids"]
    assert ours(TEXTS[0], TEXTS[1])["input_ids"] == ref(TEXTS[0], TEXTS[1])["input_ids"]

    generic = tmp_path / "modernbert"
    shutil.copytree(roberta, generic)
    _config(generic, "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast"})
    assert type(AutoTokenizer.from_pretrained(generic)) is ByteLevelBPETokenizer

    xlmr = tmp_path / "xlmr"
    xlmr.mkdir()
    _unigram_json(xlmr)
    _config(xlmr, "tokenizer_config.json", {"tokenizer_class": "XLMRobertaTokenizer"})
    ours, ref = AutoTokenizer.from_pretrained(xlmr), transformers.AutoTokenizer.from_pretrained(xlmr)
    assert type(ours) is XLMRobertaTokenizer
    # (transformers' XLM-R class puts its own whitespace normalizer over a file that declares none)
    texts = [t for t in TEXTS if "  " not in t]
    assert ours(texts)["input_ids"] == ref(texts)["input_ids"]

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(xlmr / "tokenizer.json", bare)
    assert type(AutoTokenizer.from_pretrained(bare)) is UnigramTokenizer


def test_files_alone(tmp_path):
    try:
        gpt2 = asset_path("gpt2-bpe")
        spm = asset_path("spm-botchan-unigram")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    folder = tmp_path / "gpt2"
    shutil.copytree(gpt2, folder)
    _config(folder, "config.json", {"model_type": "gpt2"})
    assert type(AutoTokenizer.from_pretrained(folder)) is GPT2Tokenizer
    sp = tmp_path / "sp"
    sp.mkdir()
    shutil.copy(spm, sp / "sentencepiece.bpe.model")
    assert type(AutoTokenizer.from_pretrained(sp)) is UnigramTokenizer


def test_unknown_model_type_names_the_file(tmp_path):
    ref = tokenizers.Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    ref.save(str(tmp_path / "tokenizer.json"))
    _config(tmp_path, "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast"})
    with pytest.raises(ValueError, match=r"tokenizer.json: model type 'WordLevel' is not one bertkit reads"):
        AutoTokenizer.from_pretrained(tmp_path)
