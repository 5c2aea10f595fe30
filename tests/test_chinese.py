"""Chinese end to end: whole-word masking from jieba words, MSRA NER windows and entities.

* Word boundaries stored at data-preparation time follow jieba's own segmentation of each real
  news sentence (CJK characters of one jieba word form one word; other tokens keep WordPiece ``##``
  grouping, taken from the reference tokenizer's word ids), and the masking collator masks every
  character of a chosen jieba word together, at the 15% rate and 80/10/10.
* A tiny model pretrained with whole-word masking on Chinese text loads in transformers with the
  same logits.
* Long MSRA sentences are split into character windows that are real encodings of their characters
  (the reference tokenizer's), every character is labelled and predicted; predicted entities carry
  character offsets into the sentence text.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.data import MaskingCollator, ShardedCorpus, prepare_corpus
from bertkit.data.readers import read_conll
from bertkit.tokenization import load_tokenizer, load_vocab

transformers = pytest.importorskip("transformers")
jieba = pytest.importorskip("jieba")

ROOT = Path(__file__).resolve().parents[1]
CJK = __import__("re").compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@pytest.fixture(scope="module")
def vocab() -> list[str]:
    return list(load_vocab(asset_path("vocab-chinese")))


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    """Real news sentences, plus a few from the same corpus with English words spliced in."""
    lines = [l for l in asset_path("news-zh").read_text(encoding="utf-8").splitlines() if 20 < len(l) < 120][:600]
    mixed = [f"{a[:15]} the unbelievable transformers {a[15:]}" for a in lines[:20]]
    return lines + mixed


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sentences, vocab) -> Path:
    d = tmp_path_factory.mktemp("zh")
    text = d / "news.txt"
    # one sentence a line, a blank line every 8 sentences: documents for the held-out split / NSP
    text.write_text(
        "".join(s + "\n" + ("\n" if (i + 1) % 8 == 0 else "") for i, s in enumerate(sentences)), encoding="utf-8"
    )
    out = d / "shards"
    prepare_corpus(
        [text],
        load_tokenizer(asset_path("vocab-chinese"), True),
        out,
        vocab,
        fmt="bert",
        progress=False,
        word_boundaries=True,
    )
    return out


@functools.lru_cache(maxsize=1)
def _reference_tokenizer():
    return transformers.BertTokenizerFast(str(asset_path("vocab-chinese")), do_lower_case=True)


@functools.cache
def _reference_words(text: str) -> tuple[list[int], list[int]]:
    """(ids, word index per token) from the reference tokenizer and jieba, independently of bertkit."""
    enc = _reference_tokenizer()(text, add_special_tokens=False, return_offsets_mapping=True)
    jieba_word = np.empty(len(text), np.int64)
    pos = 0
    for k, w in enumerate(jieba.lcut(text)):
        jieba_word[pos : pos + len(w)] = k
        pos += len(w)
    assert pos == len(text)
    words, prev_key, n = [], None, -1
    for (s, e), wid in zip(enc["offset_mapping"], enc.word_ids()):
        # a CJK character belongs to its jieba word; anything else to its reference word (## pieces)
        key = ("jieba", int(jieba_word[s])) if e - s == 1 and CJK.match(text[s]) else ("piece", wid)
        if key != prev_key:
            n += 1
        words.append(n)
        prev_key = key
    return enc["input_ids"], words


def _items(corpus: ShardedCorpus, sentences: list[str]) -> list[dict]:
    """[CLS] sentence [SEP] items with the stored word starts, one per sentence of the corpus."""
    cls_id, sep_id = 101, 102
    items = []
    for k in range(corpus.num_sentences):
        a, b = int(corpus.sentence_starts[k]), int(corpus.sentence_starts[k + 1])
        ids = np.concatenate([[cls_id], corpus.tokens(a, b), [sep_id]])
        ws = np.concatenate([[True], corpus.word_starts(a, b), [True]])
        items.append({"input_ids": ids, "word_starts": ws, "mask_seed": (0, 0, k), "text": sentences[k]})
    return items


def test_stored_word_starts_follow_jieba(shards, sentences):
    corpus = ShardedCorpus(shards)
    assert corpus.has_word_starts and corpus.num_sentences == len(sentences)
    multi = 0
    for k, text in enumerate(sentences):
        a, b = int(corpus.sentence_starts[k]), int(corpus.sentence_starts[k + 1])
        ids, words = _reference_words(text)
        assert corpus.tokens(a, b).tolist() == ids
        expected = np.r_[True, np.diff(words) != 0]
        assert corpus.word_starts(a, b).tolist() == expected.tolist(), text
        multi += int((np.bincount(words) > 1).sum())
    assert multi > 1000  # most jieba words of news text have two or more characters


def test_whole_word_masking_masks_jieba_words_together(shards, sentences, vocab):
    items = _items(ShardedCorpus(shards), sentences)
    col = MaskingCollator(vocab, mask_prob=0.15, whole_word_masking=True)
    batch = col([{k: v for k, v in it.items() if k != "text"} for it in items])
    labels, masked = batch["labels"], batch["input_ids"]
    whole, chosen_total, maskable_total = 0, 0, 0
    for i, it in enumerate(items):
        _, words = _reference_words(it["text"])
        chosen = (labels[i, 1 : len(words) + 1] != -100).numpy()
        maskable = it["input_ids"][1:-1] != vocab.index("[UNK]")  # [UNK] is never masked
        for w in range(max(words) + 1):
            picked = chosen[(np.asarray(words) == w) & maskable]
            assert picked.all() or not picked.any(), (it["text"], w)
            whole += int(len(picked) > 1 and picked.all())
        chosen_total += int(chosen.sum())
        maskable_total += int(maskable.sum())
    assert whole > 300  # many multi-character words were masked as a whole
    # 15% of the maskable tokens, words added only while they fit: a little under, never over
    assert 0.13 < chosen_total / maskable_total <= 0.155
    # 80/10/10 on the chosen characters (binomial 3-sigma bounds for n > 3,000)
    sel = labels != -100
    n = int(sel.sum())
    assert n > 3000
    orig = torch.where(sel, labels, torch.zeros_like(labels))
    is_mask = (masked[sel] == vocab.index("[MASK]")).float().mean().item()
    same = (masked[sel] == orig[sel]).float().mean().item()
    for p, want in ((is_mask, 0.8), (same, 0.1), (1 - is_mask - same, 0.1)):
        assert abs(p - want) < 3 * (want * (1 - want) / n) ** 0.5 + 1e-3, (p, want)
    # without the stored boundaries, characters of one word are masked independently
    plain = MaskingCollator(vocab, mask_prob=0.15, whole_word_masking=True)(
        [{k: v for k, v in it.items() if k not in ("text", "word_starts")} for it in items]
    )["labels"]
    split = 0
    for i, it in enumerate(items[:200]):
        _, words = _reference_words(it["text"])
        ch = (plain[i, 1 : len(words) + 1] != -100).numpy()
        split += sum(ch[p] != ch[p - 1] for p in range(1, len(words)) if words[p] == words[p - 1])
    assert split > 0


def test_missing_jieba_names_the_extra(monkeypatch, tmp_path, vocab):
    from bertkit.data.words import load_jieba

    monkeypatch.setitem(sys.modules, "jieba", None)  # `import jieba` now fails as if not installed
    with pytest.raises(ImportError, match=r"bertkit\[zh\]"):
        load_jieba()
    f = tmp_path / "t.txt"
    f.write_text("今天天气很好。\n", encoding="utf-8")
    with pytest.raises(ImportError, match=r"bertkit\[zh\]"):
        prepare_corpus(
            [f],
            load_tokenizer(asset_path("vocab-chinese"), True),
            tmp_path / "o",
            vocab,
            progress=False,
            word_boundaries=True,
        )
    # English text needs no segmenter
    e = tmp_path / "e.txt"
    e.write_text("An English sentence only.\n", encoding="utf-8")
    prepare_corpus(
        [e],
        load_tokenizer(asset_path("vocab-chinese"), True),
        tmp_path / "o2",
        vocab,
        progress=False,
        word_boundaries=True,
    )
    assert (tmp_path / "o2" / "shard-00000.words.bin").is_file()


def test_wwm_pretrained_model_loads_in_transformers(tmp_path, shards):
    from bertkit.modeling import BertForPreTraining
    from bertkit.training.pretraining import PretrainingArguments, pretrain

    out = tmp_path / "m"
    pretrain(
        PretrainingArguments(
            output=str(out),
            data=str(shards),
            vocab=str(asset_path("vocab-chinese")),
            config="tiny",
            whole_word_masking=True,
            seq_len=64,
            batch_size=8,
            max_steps=6,
            lr=5e-4,
            eval_instances=16,
            progress=False,
            threads=1,
            seed=3,
        )
    )
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 6 and "eval_mlm_accuracy" in rows[-1]
    tok = transformers.BertTokenizerFast(str(out / "vocab.txt"))
    enc = tok(["今天天气真[MASK]啊", "中国的首都是[MASK]京。"], padding=True, return_tensors="pt")
    ours = BertForPreTraining.from_pretrained(out).eval()
    ref = transformers.BertForPreTraining.from_pretrained(out).eval()
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        a, b = ours(**enc), ref(**enc)
    torch.testing.assert_close(a.prediction_logits[real], b.prediction_logits[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.seq_relationship_logits, b.seq_relationship_logits, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def msra_long() -> list:
    sents = read_conll(asset_path("msra-test"))
    return [s for s in sents if len(s.tokens) >= 90][:6]


def test_msra_long_sentences_windows(msra_long):
    import warnings

    from bertkit.tasks.tasks import TaskOptions, TokenClassificationTask

    assert len(msra_long) == 6
    task = TokenClassificationTask(TaskOptions(max_length=32, doc_stride=8))
    task.setup_labels(read_conll(asset_path("msra-train"))[:2000])
    assert task.options.label_scheme == "BMES"
    tok = load_tokenizer(asset_path("vocab-chinese"), True)
    ref = transformers.BertTokenizerFast(str(asset_path("vocab-chinese")), do_lower_case=True)
    enc = task.encode(tok, msra_long)
    for k, s in enumerate(msra_long):
        feats = [(f, w) for f, (i, w, *_) in zip(enc.features, enc.aux) if i == k]
        assert len(feats) >= 3  # 90+ characters in 30-token windows
        labelled = set()
        for f, wids in feats:
            ws = [w for w in wids if w is not None]
            assert len(f["input_ids"]) <= 32
            hf = ref(s.tokens[ws[0] : ws[-1] + 1], is_split_into_words=True)
            assert f["input_ids"] == hf["input_ids"]
            for w, lab in zip(wids, f["labels"]):
                if w is not None:
                    assert task.labels[lab] == s.tags[w]
                    labelled.add(w)
        assert labelled == set(range(len(s.tokens)))
    from bertkit.modeling import BertConfig, BertForTokenClassification

    cfg = BertConfig(
        vocab_size=len(tok.get_vocab()),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=len(task.labels),
    )

    torch.manual_seed(0)
    model = BertForTokenClassification(cfg).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no character may be dropped and tagged O
        rows = task.predict(model, tok, msra_long)
    for s, r in zip(msra_long, rows):
        assert len(r["tags"]) == len(s.tokens)
        assert r["text"] == "".join(s.tokens)


def test_entities_carry_character_offsets():
    """Gold MSRA tags through the entity aggregation: every entity's word is the text it spans."""
    from bertkit.tasks.tasks import tagged_entities

    sents = read_conll(asset_path("msra-test"))[:300]
    n = 0
    for s in sents:
        text, ents = tagged_entities(s.tokens, s.tags, None, "BMES")
        assert text == "".join(s.tokens)
        # the gold spans, read off the tag definition: B-X M-X* E-X or S-X
        spans, i = [], 0
        while i < len(s.tags):
            t = s.tags[i]
            if t.startswith("S-"):
                spans.append((t[2:], i, i + 1))
            elif t.startswith("B-"):
                j = i + 1
                while j < len(s.tags) and s.tags[j] == "M-" + t[2:]:
                    j += 1
                if j < len(s.tags) and s.tags[j] == "E-" + t[2:]:
                    spans.append((t[2:], i, j + 1))
                    i = j
            i += 1
        assert [(e["entity"], e["start"], e["end"]) for e in ents] == spans
        for e in ents:
            assert e["word"] == text[e["start"] : e["end"]]
        n += len(ents)
    assert n > 150
    text, ents = tagged_entities(
        ["John", "lives", "in", "北", "京", "."], ["S-PER", "O", "O", "B-LOC", "E-LOC", "O"], None, "BIOES"
    )
    assert text == "John lives in北京." and [(e["word"], e["start"], e["end"]) for e in ents] == [
        ("John", 0, 4),
        ("北京", 13, 15),
    ]


@pytest.mark.slow
def test_predict_cli_on_a_chinese_ner_model(tmp_path):
    """Fine-tune a tiny random-init Chinese model on MSRA for a few steps; `bertkit predict` prints
    entities with character offsets and words."""
    from bertkit.modeling import BertConfig, BertForPreTraining
    from bertkit.tasks import finetune

    init = tmp_path / "init"
    torch.manual_seed(0)
    BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=21128)).save_pretrained(
        str(init), tokenizer=load_tokenizer(asset_path("vocab-chinese"), True)
    )
    train = tmp_path / "train.txt"
    blocks = asset_path("msra-train").read_text(encoding="utf-8").strip().split("\n\n")[:120]
    train.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    test = tmp_path / "test.txt"
    test.write_text(
        "\n\n".join(asset_path("msra-test").read_text(encoding="utf-8").strip().split("\n\n")[:10]) + "\n",
        encoding="utf-8",
    )
    finetune(
        "token-classification",
        init,
        train,
        tmp_path / "ner",
        epochs=1,
        batch_size=16,
        lr=1e-3,
        max_length=64,
        progress=False,
        quiet=True,
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertkit",
            "predict",
            "--model",
            str(tmp_path / "ner"),
            "--input",
            str(test),
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(rows) == 10
    for row in rows:
        assert row["text"] == "".join(row["tokens"])
        for e in row["entities"]:
            assert {"entity", "word", "start", "end", "score"} <= set(e)
            assert row["text"][e["start"] : e["end"]] == e["word"]
