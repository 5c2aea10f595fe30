"""`bertkit train-vocab --model bpe` and ByteLevelBPETrainer give the vocabulary and merges that tokenizers'
BpeTrainer (ByteLevel pre-tokenizer, byte alphabet) gives on the same English and Chinese text."""

from __future__ import annotations

import json

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import models, pre_tokenizers, trainers  # noqa: E402

from bertkit.assets import asset_path  # noqa: E402
from bertkit.tokenization.bpe_trainer import ByteLevelBPETrainer  # noqa: E402

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _lines(name: str, n: int) -> list[str]:
    try:
        path = asset_path(name)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    with open(path, encoding="utf-8") as f:
        return [ln.rstrip("\n") for ln, _ in zip(f, range(n))]


def _reference(vocab_size: int, min_frequency: int):
    ref = tokenizers.Tokenizer(models.BPE())
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    return ref, trainer


def _model(ref):
    model = json.loads(ref.to_str())["model"]
    return model["vocab"], [tuple(m) for m in model["merges"]]


def test_trainer_on_texts_equals_tokenizers():
    texts = _lines("austen", 1500) + _lines("news-zh", 800) + ["  spaces\tand\ttabs  ", "", "ﬁ 👍🏽 ①"]
    ref, trainer = _reference(1200, 2)
    ref.train_from_iterator(texts, trainer=trainer)
    ours = ByteLevelBPETrainer(vocab_size=1200, min_frequency=2, special_tokens=SPECIALS, show_progress=False)
    vocab = ours.train(texts=texts)
    exp_vocab, exp_merges = _model(ref)
    assert {t: i for i, t in enumerate(vocab)} == exp_vocab
    assert ours.merges == exp_merges


def test_cli_train_vocab_bpe_on_files_equals_tokenizers(tmp_path, capsys):
    from bertkit.cli import main
    from bertkit.tokenization import ByteLevelBPETokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(_lines("wiki", 400) + ["", "", "  indented  ", *_lines("news-zh", 300)]) + "\n")
    out = tmp_path / "bpe"
    argv = ["train-vocab", "--model", "bpe", "--corpus", str(corpus), "--vocab-size", "900", "--output", str(out)]
    assert main([*argv, "--min-frequency", "1", "--quiet"]) == 0
    ref, trainer = _reference(900, 1)
    ref.train([str(corpus)], trainer=trainer)
    exp_vocab, exp_merges = _model(ref)
    assert json.loads((out / "vocab.json").read_text()) == exp_vocab
    merges = (out / "merges.txt").read_text().splitlines()[1:]
    assert [tuple(m.split(" ")) for m in merges] == exp_merges
    tok = ByteLevelBPETokenizer.from_pretrained(out)  # the folder loads, specials whole
    assert tok("a <mask> b")["input_ids"] == ref.encode("a <mask> b").ids
    # the folder is the command's own output: a second run needs --overwrite
    assert main([*argv, "--quiet"]) == 1
    assert "overwrite" in capsys.readouterr().err
