"""WordPieceTrainer vs tokenizers' WordPieceTrainer on real text; CLI and bad input."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from bertkit.assets import asset_path
from bertkit.tokenization import BertTokenizer, WordPieceTrainer

pytest.importorskip("tokenizers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import train_vocab  # noqa: E402  (benchmarks/train_vocab.py: same comparison, bigger setting)


def test_fertility_within_3_percent_of_tokenizers():
    t0 = time.perf_counter()
    r = train_vocab.compare(vocab_size=3000, min_frequency=2, max_chars=600_000)
    assert r["size_ours"] == r["size_ref"] == 3000
    assert abs(r["fert_ours"] / r["fert_ref"] - 1) <= 0.03, r
    assert 1.0 < r["fert_ours"] < 3.0  # a real subword vocabulary, not characters or whole words
    assert time.perf_counter() - t0 < 120


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    text = asset_path("austen").read_text(encoding="utf-8")[:300_000]
    p = d / "austen.txt"
    p.write_text(text, encoding="utf-8")
    return p


def test_vocab_layout_and_streaming(small_corpus, tmp_path):
    tr = WordPieceTrainer(vocab_size=800, lowercase=True, show_progress=False)
    vocab = tr.train(files=[small_corpus])
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(vocab) == len(set(vocab)) == 800
    assert all(t == t.lower() for t in vocab[5:])
    # every merged token is reachable: its prefix chain is in the vocabulary
    assert "##e" in vocab and "the" in vocab
    # files and an iterator of lines give the same vocabulary
    tr2 = WordPieceTrainer(vocab_size=800, lowercase=True, show_progress=False)
    with open(small_corpus, encoding="utf-8") as f:
        assert tr2.train(texts=f) == vocab
    out = tr.save(tmp_path / "vocab.txt")
    tok = BertTokenizer(out)
    assert tok.vocab_size == 800 and tok.pad_token_id == 0
    ids = tok.encode("It is a truth universally acknowledged", add_special_tokens=False)
    assert tok.unk_token_id not in ids


def test_jsonl_corpus_counts_its_text_fields(small_corpus, tmp_path):
    """A .jsonl corpus (as pretrain --corpus takes it) trains on its records' text, not on the JSON:
    the same vocabulary as the same paragraphs in a plain file, and no token of the JSON syntax."""
    import json

    lines = small_corpus.read_text(encoding="utf-8").splitlines()
    paras = ["\n".join(lines[i : i + 40]) for i in range(0, len(lines), 40)]
    plain, records = tmp_path / "c.txt", tmp_path / "c.jsonl"
    plain.write_text("\n\n".join(paras), encoding="utf-8")
    rows = [json.dumps({"record_number": i, "text": p}) + "\n" for i, p in enumerate(paras)]
    records.write_text("".join(rows), encoding="utf-8")
    want = WordPieceTrainer(vocab_size=700, lowercase=True, show_progress=False)
    got = WordPieceTrainer(vocab_size=700, lowercase=True, show_progress=False)
    assert len(paras) > 10 and got.train(files=[records]) == want.train(files=[plain])
    assert got.word_counts == want.word_counts  # no key, brace or quote of the JSON was counted
    assert "record_number" not in got.word_counts
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text field"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: no 'text' field"):
        WordPieceTrainer(vocab_size=100, show_progress=False).train(files=[bad])


def test_cased_training_keeps_case(small_corpus):
    vocab = WordPieceTrainer(vocab_size=600, lowercase=False, show_progress=False).train(files=[small_corpus])
    assert any(t[:1].isupper() for t in vocab[5:])


def test_cli_train_vocab(small_corpus, tmp_path, capsys):
    from bertkit.cli import main

    out = tmp_path / "v.txt"
    rc = main(
        [
            "train-vocab",
            "--corpus",
            str(small_corpus),
            "--vocab-size",
            "500",
            "--output",
            str(out),
            "--lowercase",
            "--min-frequency",
            "3",
            "--quiet",
        ]
    )
    assert rc == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 500 and lines[0] == "[PAD]"
    assert (
        main(["train-vocab", "--corpus", str(tmp_path / "none.txt"), "--vocab-size", "50", "--output", str(out)]) == 1
    )
    assert "none.txt" in capsys.readouterr().err


def test_bad_corpus(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\nsecond\n\xff\xfe broken\n")
    with pytest.raises(ValueError, match=r"bad.txt:3: invalid UTF-8"):
        WordPieceTrainer(vocab_size=100, show_progress=False).train(files=[bad])
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n")
    with pytest.raises(ValueError, match="empty"):
        WordPieceTrainer(vocab_size=100, show_progress=False).train(files=[empty])
    with pytest.raises(ValueError, match="vocab_size"):
        WordPieceTrainer(vocab_size=3)


def test_cli_special_tokens_a_tokenizer_can_use(small_corpus, tmp_path, capsys):
    """A special-token list without [UNK] wrote a vocabulary whose unknown words had no id (the
    tokenizer gave None), and pretraining on one without [CLS] failed late on "'[CLS]' is not in list":
    now train-vocab refuses the first, warns for the others, and pretrain names the file at once."""
    from bertkit.cli import main

    out = tmp_path / "v.txt"
    base = ["train-vocab", "--corpus", str(small_corpus), "--vocab-size", "300", "--output", str(out), "--quiet"]
    assert main([*base, "--special-tokens", "[PAD]"]) == 1
    assert "--special-tokens must include [UNK]" in capsys.readouterr().err and not out.exists()
    assert main([*base, "--special-tokens", "[PAD]", "[PAD]", "[UNK]"]) == 1
    assert "lists [PAD] more than once" in capsys.readouterr().err and not out.exists()
    assert main([*base, "--special-tokens", "[PAD]", "[UNK]"]) == 0
    assert "leaves out [CLS], [SEP], [MASK]" in capsys.readouterr().err
    argv = ["pretrain", "--corpus", str(small_corpus), "--vocab", str(out), "--config", "tiny", "--max-steps", "1"]
    assert main([*argv, "--output", str(tmp_path / "run"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"{out}: the vocabulary lacks [CLS], [SEP], [MASK]" in err and not (tmp_path / "run").exists()
