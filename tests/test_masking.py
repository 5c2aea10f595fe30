"""Dynamic masking statistics on real text: 15% (settable), 80/10/10, never specials or padding,
whole-word masking groups word pieces (checked against the reference tokenizer's word ids)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.data import MaskingCollator, split_sentences
from bertkit.tokenization import load_vocab


@pytest.fixture(scope="module")
def vocab() -> list[str]:
    return list(load_vocab(asset_path("vocab-uncased")))


@pytest.fixture(scope="module")
def items(vocab):
    """Real sentence pairs from Austen, as [CLS] A [SEP] B [SEP] ids with varied lengths."""
    from transformers import BertTokenizerFast

    ref = BertTokenizerFast(str(asset_path("vocab-uncased")), do_lower_case=True)
    lines = [l for l in asset_path("austen").read_text(encoding="utf-8").splitlines() if len(l) > 80]
    sents = [s for l in lines[:400] for s in split_sentences(l)]
    out = []
    for i in range(0, len(sents) - 1, 2):
        enc = ref(sents[i], sents[i + 1], truncation=True, max_length=96)
        out.append(
            {
                "input_ids": np.array(enc["input_ids"]),
                "token_type_ids": np.array(enc["token_type_ids"]),
                "mask_seed": (0, 0, i),
                "next_sentence_label": i % 2,
                "word_ids": enc.word_ids(),
            }
        )
    return out


def _stats(collator, items, vocab):
    batch = collator([{k: v for k, v in it.items() if k != "word_ids"} for it in items])
    ids = torch.nn.utils.rnn.pad_sequence(
        [torch.as_tensor(it["input_ids"]) for it in items], batch_first=True, padding_value=0
    )
    n = ids.shape[1]
    return batch, ids, batch["labels"][:, :n], batch["input_ids"][:, :n]


def test_mask_statistics(items, vocab):
    col = MaskingCollator(vocab, mask_prob=0.15)
    batch, orig, labels, masked = _stats(col, items, vocab)
    special = torch.tensor([vocab.index(t) for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")])
    maskable = ~torch.isin(orig, special) & (batch["attention_mask"][:, : orig.shape[1]] == 1)
    chosen = labels != -100
    assert chosen.sum() > 2000
    # Exactly round(15%) of each sequence's maskable tokens, as in BERT's create_masked_lm_predictions.
    per_seq = chosen.sum(1).float() / maskable.sum(1).float()
    assert abs(per_seq.mean().item() - 0.15) < 0.01
    # Never special tokens or padding; labels hold the original ids.
    assert not (chosen & ~maskable).any()
    assert (batch["labels"][:, orig.shape[1] :] == -100).all()
    assert torch.equal(labels[chosen], orig[chosen])
    # 80% [MASK], 10% random, 10% unchanged.
    is_mask = masked[chosen] == vocab.index("[MASK]")
    same = masked[chosen] == orig[chosen]
    other = ~is_mask & ~same
    n = chosen.sum().item()
    assert abs(is_mask.sum().item() / n - 0.8) < 0.03
    assert abs(same.sum().item() / n - 0.1) < 0.025
    assert abs(other.sum().item() / n - 0.1) < 0.025
    # Random replacements are ordinary tokens, never specials or [unused].
    rand_tokens = [vocab[i] for i in masked[chosen][other].tolist()]
    assert not any(t.startswith("[") and t.endswith("]") for t in rand_tokens)
    # Unchosen positions are untouched.
    assert torch.equal(masked[~chosen], orig[~chosen])
    # Padding, attention mask, token types, NSP labels.
    lengths = torch.tensor([len(it["input_ids"]) for it in items])
    assert torch.equal(batch["attention_mask"].sum(1), lengths)
    assert batch["input_ids"].shape[1] % 8 == 0
    assert (batch["input_ids"][batch["attention_mask"] == 0] == vocab.index("[PAD]")).all()
    assert torch.equal(batch["next_sentence_label"], torch.tensor([it["next_sentence_label"] for it in items]))
    assert torch.equal(batch["token_type_ids"][0, : lengths[0]], torch.as_tensor(items[0]["token_type_ids"]))


def test_mask_prob_is_settable(items, vocab):
    batch, orig, labels, _ = _stats(MaskingCollator(vocab, mask_prob=0.3), items, vocab)
    special = torch.tensor([vocab.index(t) for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")])
    maskable = ~torch.isin(orig, special)
    assert abs((labels != -100).sum().item() / maskable.sum().item() - 0.3) < 0.01
    _, _, none, _ = _stats(MaskingCollator(vocab, mask_prob=0.0), items, vocab)
    assert (none == -100).all()
    with pytest.raises(ValueError, match="mask_prob"):
        MaskingCollator(vocab, mask_prob=1.5)


def test_whole_word_masking_groups_pieces(items, vocab):
    col = MaskingCollator(vocab, mask_prob=0.15, whole_word_masking=True)
    _, orig, labels, _ = _stats(col, items, vocab)
    multi_piece_words = 0
    for i, it in enumerate(items):
        words: dict[int, list[int]] = {}
        for pos, w in enumerate(it["word_ids"]):
            if w is not None:
                words.setdefault((it["token_type_ids"][pos], w), []).append(pos)
        for positions in words.values():
            chosen = [labels[i, p].item() != -100 for p in positions]
            assert all(chosen) or not any(chosen), (i, positions)
            if len(positions) > 1 and all(chosen):
                multi_piece_words += 1
    assert multi_piece_words > 10
    # Still about 15% of the tokens overall (words are added only while they fit the budget).
    special = torch.tensor([vocab.index(t) for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")])
    frac = (labels != -100).sum().item() / (~torch.isin(orig, special)).sum().item()
    assert 0.13 < frac <= 0.155
    # Without whole-word masking, pieces of one word are often split.
    _, _, plain, _ = _stats(MaskingCollator(vocab, mask_prob=0.15), items, vocab)
    split = 0
    for i, it in enumerate(items):
        ids = it["word_ids"]
        for p in range(1, len(ids)):
            if ids[p] is not None and ids[p] == ids[p - 1]:
                split += (plain[i, p] != -100).item() != (plain[i, p - 1] != -100).item()
    assert split > 0


def test_masks_are_dynamic_and_reproducible(items, vocab):
    col = MaskingCollator(vocab)
    strip = lambda it, **kw: {**{k: v for k, v in it.items() if k != "word_ids"}, **kw}
    a = col([strip(it) for it in items[:16]])["labels"]
    b = col([strip(it) for it in items[:16]])["labels"]
    assert torch.equal(a, b)  # same (seed, epoch, index): same mask, whatever else is in the batch
    solo = col([strip(items[3])])["labels"][0]
    assert torch.equal(solo[: len(items[3]["input_ids"])], a[3, : len(items[3]["input_ids"])])
    c = col([strip(it, mask_seed=(0, 1, it["mask_seed"][2])) for it in items[:16]])["labels"]
    assert not torch.equal(a, c)  # another epoch: another mask


def test_out_of_vocab_ids_are_rejected(vocab):
    col = MaskingCollator(vocab)
    with pytest.raises(ValueError, match=f"token id {len(vocab)} is outside the vocabulary of {len(vocab)}"):
        col([{"input_ids": np.array([101, len(vocab), 102])}])
