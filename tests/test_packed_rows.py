"""Inference rounds a packed batch's row count up to a few hundred sizes (``padded_rows``), so oneDNN
builds a kernel for each once instead of for every new batch; the filler rows are computed and never
read.

The promises: the rounding adds at most about 6% of rows and leaves few distinct counts; an encoder's
outputs on real tokens in inference equal, to 1e-5, what the unrounded packing gives (BERT and
DistilBERT, one length group or several, rows reordered or not), and what the padded computation gives on
MiniLM's real checkpoint and text; training keeps the exact rows.
"""

from __future__ import annotations

import csv

import pytest
import torch

from bertkit.assets import asset_path
from bertkit.modeling import BertConfig, BertModel, packing
from bertkit.modeling.distilbert import DistilBertConfig, DistilBertModel
from bertkit.modeling.packing import AttentionMask, padded_rows
from bertkit.tokenization import BertTokenizer


def test_padded_rows_bounds_the_filler_and_the_number_of_sizes():
    sizes = [padded_rows(t) for t in range(1, 16385)]
    assert all(s >= t for t, s in zip(range(1, 16385), sizes))
    assert all(a <= b for a, b in zip(sizes, sizes[1:]))  # more tokens never get fewer rows
    assert max((s - t) / t for t, s in zip(range(256, 16385), sizes[255:])) <= 1 / 16  # at most 6.25% filler
    assert max(s - t for t, s in zip(range(1, 256), sizes)) < 16  # below that, under 16 rows
    assert len(set(sizes)) <= 128  # kernels for every batch up to 16,384 tokens fit oneDNN's cache of 1,024
    assert padded_rows(0) == 0


def _mask(lengths: list[int], width: int) -> torch.Tensor:
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()


def _reordered(built, tokens: int) -> bool:
    """Whether the packed rows come out of the groups' outputs in another order than they went in."""
    return built.gather is not None and bool((built.gather[:tokens].diff() < 0).any())


CASES = {  # lengths -> (groups, a group keeps a subset of its slots, rows reordered)
    "one group, no padding inside": ([16] * 33, (1, False, False)),  # 528 tokens: 544 rows
    "one group with padding": ([20, 19, 17, 20, 18], (1, True, False)),
    "several groups, rows reordered": ([64, 3, 40, 9, 64, 17, 2, 33, 12, 50, 5, 26], (2, True, True)),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_filler_rows_change_nothing_on_real_tokens(family, case, monkeypatch):
    lengths, (n_groups, keeps, reordered) = case
    torch.manual_seed(0)
    if family == "bert":
        model = BertModel(BertConfig.from_preset("tiny", vocab_size=1000)).eval()
    else:
        model = DistilBertModel(DistilBertConfig(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128)).eval()
    width = max(lengths) + 3  # never all ones, so the batch is packed
    ids = torch.randint(1, 1000, (len(lengths), width))
    mask = _mask(lengths, width)
    built = AttentionMask.build(mask, pack=True, hidden_size=64, row_multiple=packing.ROW_MULTIPLE)
    tokens = int(mask.sum())
    assert built.rows == padded_rows(tokens) > tokens  # each case gets filler rows
    assert len(built.groups) >= n_groups and (n_groups > 1 or len(built.groups) == 1)
    assert any(g.mask is not None for g in built.groups) == keeps  # a group with padding slots
    assert _reordered(built, tokens) == reordered
    with torch.inference_mode():
        bucketed = model(ids, attention_mask=mask).last_hidden_state
        monkeypatch.setattr(packing, "padded_rows", lambda t: t)
        exact = model(ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    # 1e-5: a GEMM may block its sum differently for another row count (a filler row read by a real one
    # would move these outputs by their own size, ~1)
    torch.testing.assert_close(bucketed[real], exact[real], atol=1e-5, rtol=0)
    assert bucketed[~real].abs().max() == 0  # padding positions stay zeros


def test_training_keeps_the_exact_rows():
    mask = _mask([20, 19, 17], 20)
    built = AttentionMask.build(mask, pack=True, row_multiple=1)
    assert built.rows == int(mask.sum()) == len(built.pack_index)


def test_prepared_minilm_with_filler_rows_equals_the_padded_computation():
    """On the real checkpoint and real sentences, fp32: the packed, rounded path against
    ``pack_padding=False`` (every position computed, as transformers does)."""
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)][:24]
    folder = asset_path("minilm")
    enc = BertTokenizer.from_pretrained(folder)(
        texts, padding=True, truncation=True, max_length=128, return_tensors="pt"
    )
    model = BertModel.from_pretrained(folder, dtype="fp32")
    tokens = int(enc["attention_mask"].sum())
    assert padded_rows(tokens) > tokens
    with torch.inference_mode():
        packed = model(**enc).last_hidden_state
        model.pack_padding = False
        full = model(**enc).last_hidden_state
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(packed[real], full[real], atol=1e-5, rtol=0)


def test_inference_packs_on_the_cpu_only_and_training_everywhere():
    """The policy behind every encoder's forward: inference off the CPU pads (faster on a GPU, where the
    packing plan's host work outweighs the padding), training packs on every device, and a model whose
    ``pack_padding`` is off never packs. ``meta`` stands for a device other than the CPU."""
    model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2))
    cpu, other = torch.zeros(2, 3, 16), torch.zeros(2, 3, 16, device="meta")
    model.eval()
    with torch.no_grad():
        assert packing.packs(model, cpu, True) and not packing.packs(model, other, True)
        assert not packing.packs(model, cpu, False)
    model.train()
    assert packing.packs(model, cpu, True) and packing.packs(model, other, True)
    assert not packing.packs(model, other, False)
