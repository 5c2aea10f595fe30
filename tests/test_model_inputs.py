"""Bad input gets clear errors naming the value and the limit; unsupported features say so."""

from __future__ import annotations

import pytest
import torch

from bertkit.modeling import BertConfig, BertForMultipleChoice, BertForTokenClassification, BertModel


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return BertModel(BertConfig.from_preset("tiny", vocab_size=1000, max_position_embeddings=64)).eval()


def test_out_of_range_segment_ids(model):
    """BERT's own limit; the checks every family shares are in test_family_contract.py."""
    with pytest.raises(ValueError, match=r"token_type_ids contains 2.*type_vocab_size=2"):
        model(torch.tensor([[1, 2, 3]]), token_type_ids=torch.tensor([[0, 1, 2]]))


def test_head_labels_of_the_wrong_shape_are_named():
    ids = torch.ones(2, 5, dtype=torch.long)
    tok = BertForTokenClassification(BertConfig.from_preset("tiny", vocab_size=1000))
    with pytest.raises(ValueError, match=r"labels has shape \(2, 4\).*\(2, 5\)"):
        tok(ids, labels=torch.zeros(2, 4, dtype=torch.long))
    mc = BertForMultipleChoice(BertConfig.from_preset("tiny", vocab_size=1000))
    with pytest.raises(ValueError, match=r"num_choices.*\(2, 5\)"):
        mc(ids)


@pytest.mark.parametrize(
    "change",
    [
        dict(position_embedding_type="relative_key"),
        dict(position_embedding_type="relative_key_query"),
        dict(is_decoder=True),
        dict(add_cross_attention=True),
    ],
)
def test_unsupported_features_raise_not_implemented(change):
    with pytest.raises(NotImplementedError):
        BertModel(BertConfig.from_preset("tiny", **change))


def test_bad_sizes_and_activation():
    with pytest.raises(ValueError, match="not a multiple"):
        BertModel(BertConfig(hidden_size=100, num_attention_heads=12))
    with pytest.raises(ValueError, match="hidden_act"):
        BertModel(BertConfig.from_preset("tiny", hidden_act="nope"))


def test_padding_does_not_change_real_tokens(model):
    """A sentence alone and the same sentence padded in a batch give the same states (SDPA mask)."""
    ids = torch.tensor([[101, 7, 8, 9, 102]])
    padded = torch.tensor([[101, 7, 8, 9, 102, 0, 0], [101, 5, 6, 7, 8, 9, 102]])
    mask = (padded != 0).long()
    with torch.no_grad():
        alone = model(ids).last_hidden_state
        both = model(padded, attention_mask=mask).last_hidden_state
        explicit = model(padded, attention_mask=mask, output_attentions=True).last_hidden_state
    assert torch.allclose(alone[0], both[0, :5], atol=1e-5)
    assert torch.allclose(both[:, :5], explicit[:, :5], atol=1e-5)


def _assert_packed_equals_full(model, ids: torch.Tensor, mask: torch.Tensor) -> None:
    """Logits, loss and every gradient of the packed path equal the padded computation's on real tokens."""
    labels = torch.randint(0, 2, ids.shape).masked_fill(mask == 0, -100)
    results = []
    for pack in (True, False):
        model.bert.pack_padding = pack
        out = model(ids, attention_mask=mask, labels=labels)
        results.append((out, torch.autograd.grad(out.loss, list(model.parameters()))))
    (packed, g1), (full, g2) = results
    real = mask.bool()
    assert torch.allclose(packed.logits[real], full.logits[real], atol=1e-5)
    assert torch.allclose(packed.loss, full.loss, atol=1e-6)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_packed_fast_path_equals_full_computation_on_real_tokens():
    torch.manual_seed(1)
    model = BertForTokenClassification(
        BertConfig.from_preset("tiny", vocab_size=1000, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ).train()
    ids = torch.randint(1, 1000, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[0, 4:] = 0
    mask[2, 7:] = 0
    _assert_packed_equals_full(model, ids, mask)
    real = mask.bool()
    with torch.no_grad():
        model.bert.pack_padding = True
        hidden = model.bert(ids, attention_mask=mask).last_hidden_state
    assert hidden[~real].abs().max() == 0  # padding positions are left at zero, not computed


def test_packed_attention_in_length_groups_equals_full_computation():
    """Mixed lengths (one left-padded, one with a hole): the packed path attends in several length
    groups, and its outputs and gradients equal the padded computation's on real tokens."""
    from bertkit.modeling.packing import AttentionMask, length_groups

    torch.manual_seed(2)
    cfg = BertConfig.from_preset("tiny", vocab_size=1000, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForTokenClassification(cfg).train()
    lengths = [64, 3, 40, 9, 64, 17, 2, 33, 12, 50, 5, 26]
    ids = torch.randint(1, 1000, (len(lengths), 64))
    mask = (torch.arange(64)[None, :] < torch.tensor(lengths)[:, None]).long()
    mask[3] = mask[3].flip(0)  # left padding
    mask[5, 4:8] = 0  # a hole inside the sequence
    built = AttentionMask.build(mask, pack=True, hidden_size=cfg.hidden_size)
    assert len(built.groups) >= 3 and bool((built.gather.diff() < 0).any())  # several groups, rows reordered
    groups = length_groups(mask.sum(1).tolist(), cfg.hidden_size)
    assert sorted(b for g in groups for b in g) == list(range(len(lengths)))
    _assert_packed_equals_full(model, ids, mask)


def test_bert_initialization():
    torch.manual_seed(0)
    cfg = BertConfig.from_preset("mini", vocab_size=5000, initializer_range=0.05)
    model = BertForTokenClassification(cfg)
    w = model.bert.encoder.layer[1].intermediate.dense.weight
    assert abs(w.std().item() - 0.05) < 0.002 and abs(w.mean().item()) < 0.002
    assert model.bert.encoder.layer[1].intermediate.dense.bias.abs().max() == 0
    ln = model.bert.encoder.layer[0].output.LayerNorm
    assert torch.equal(ln.weight, torch.ones_like(ln.weight)) and ln.bias.abs().max() == 0
    assert model.bert.embeddings.word_embeddings.weight[cfg.pad_token_id].abs().max() == 0
    emb = model.bert.embeddings.word_embeddings.weight
    assert abs(emb.std().item() - 0.05) < 0.002


def test_compiled_graph_has_no_host_sync_and_matches_eager(model):
    # fullgraph=True fails on any graph break, and every host read of a tensor (id-range checks,
    # the all-ones mask shortcut, packing's nonzero) is one; the eager backend keeps this fast.
    ids = torch.randint(1, 1000, (2, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        got = compiled(ids, attention_mask=mask).last_hidden_state
        model.pack_padding = False
        want = model(ids, attention_mask=mask).last_hidden_state
        model.pack_padding = True
    assert torch.allclose(got, want, atol=1e-6)
