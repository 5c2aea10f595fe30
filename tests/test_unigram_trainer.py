"""UnigramTrainer against tokenizers' UnigramTrainer on the same English and Chinese text.

The Rust trainer's exact vocabulary is out of reach (it seeds from a suffix array's maximal repeats and
prunes with an inverted index), so the test measures how close bertkit comes and holds the measure:
the share of pieces both vocabularies hold, and the share of held-out words cut the same way.
"""

from __future__ import annotations

import json

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from bertkit.assets import asset_path  # noqa: E402
from bertkit.tokenization.unigram_trainer import UnigramTrainer  # noqa: E402


def _lines(name: str, start: int, n: int) -> list[str]:
    try:
        path = asset_path(name)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    with open(path, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if ln.strip()]
    return lines[start : start + n]


def test_unigram_trainer_close_to_tokenizers(capsys):
    texts = _lines("austen", 0, 800) + _lines("news-zh", 0, 150)
    held = _lines("austen", 5000, 300) + _lines("news-zh", 3000, 100)
    ref = tokenizers.Tokenizer(models.Unigram())
    ref.normalizer = normalizers.NFKC()
    ref.pre_tokenizer = pre_tokenizers.Metaspace()
    ref.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=2000, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False)
    ref.train_from_iterator(texts, trainer=trainer)
    ours = UnigramTrainer(vocab_size=2000)
    vocab = ours.train(texts)
    exp = [p for p, _ in json.loads(ref.to_str())["model"]["vocab"]]
    got = [p for p, _ in vocab]
    assert len(got) == len(exp) == 2000 and got[0] == exp[0] == "<unk>"
    shared = len(set(got) & set(exp)) / len(exp)
    tok = ours.tokenizer()

    def cut(w):
        e = ref.encode(w)
        return ["<unk>" if i == 0 else t for i, t in zip(e.ids, e.tokens)]

    words = [w for t in held for w in t.split()]
    same = sum(tok.convert_ids_to_tokens(tok(w)["input_ids"]) == cut(w) for w in words) / len(words)
    with capsys.disabled():
        print(f"\nUnigramTrainer vs tokenizers: {shared:.1%} pieces shared, {same:.1%} held-out words cut alike")
    assert shared >= 0.90
    assert same >= 0.80


def test_cli_train_vocab_unigram_writes_a_folder_tokenizers_loads(tmp_path):
    from bertkit.cli import main
    from bertkit.tokenization import UnigramTokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(_lines("austen", 0, 300) + _lines("news-zh", 0, 40)) + "\n")
    out = tmp_path / "uni"
    argv = ["train-vocab", "--model", "unigram", "--corpus", str(corpus), "--vocab-size", "1500", "--output", str(out)]
    assert main([*argv, "--quiet"]) == 0
    ours = UnigramTokenizer.from_pretrained(out)
    ref = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in _lines("austen", 6000, 20) + ["a <mask> b <s>", "ﬁ ①  x"]:
        assert ours(text)["input_ids"] == ref.encode(text).ids
    assert main([*argv, "--quiet"]) == 1  # the folder is there: --overwrite replaces it
