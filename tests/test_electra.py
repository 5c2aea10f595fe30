"""ELECTRA against transformers on real text, beyond the family contract (tests/test_family_contract.py,
which covers every head in both load directions with ``embedding_size < hidden_size``, the round trip,
input errors, vocabulary resize and the pipelines).

Here: every head with ``embedding_size == hidden_size`` (no ``embeddings_project``), both load directions;
the discriminator's and generator's losses, hidden states and attentions; the tied generator head and
the base model read from a head's folder; inputs_embeds at the embedding width. Random weights drawn
by one library, saved, and loaded by the other, on a padded batch of real polarity reviews.
"""

from __future__ import annotations

import csv

import pytest
import torch

import bertkit
from bertkit.assets import asset_path
from bertkit.modeling import electra as E
from bertkit.tokenization import BertTokenizer

transformers = pytest.importorskip("transformers")

TOL = 1e-5
CLASSES = [
    "ElectraModel",
    "ElectraForPreTraining",
    "ElectraForMaskedLM",
    "ElectraForSequenceClassification",
    "ElectraForTokenClassification",
    "ElectraForQuestionAnswering",
    "ElectraForMultipleChoice",
]
SIZES = {"projected": dict(embedding_size=32, hidden_size=64), "same": dict(embedding_size=64, hidden_size=64)}


def _polarity(n: int) -> list[str]:
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        rows = [r for r in csv.reader(f) if len(r) >= 2]
    return [r[1] for r in rows if r[1] and r[0] != "label"][:n]


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer.from_pretrained(asset_path("minilm"))


@pytest.fixture(scope="module")
def batch(tokenizer):
    enc = tokenizer(_polarity(4), padding=True, truncation=True, max_length=48, return_tensors="pt")
    assert not bool(enc["attention_mask"].all()), "the batch must be padded"
    return enc


def _kwargs(name: str, sizes: str) -> dict:
    return dict(
        vocab_size=30522,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        num_labels=2 if "Question" in name else 3,
        **SIZES[sizes],
    )


def _inputs(name: str, batch) -> dict:
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    if "MultipleChoice" in name:  # (B, C, N): the four reviews as two questions of two choices
        inputs = {k: v.reshape(2, 2, -1) for k, v in inputs.items()}
    return inputs


def _compare(name: str, a, b, batch) -> None:
    """Logits (or hidden states) of both models; per-token outputs on real tokens only."""

    def pick(out):
        if "start_logits" in out:
            return torch.stack([out["start_logits"], out["end_logits"]], -1)
        return out["logits"] if "logits" in out else out["last_hidden_state"]

    x, y = pick(a), pick(b)
    assert x.shape == y.shape
    if x.dim() >= 2 and x.shape[:2] == batch["input_ids"].shape and "Question" not in name:
        real = batch["attention_mask"].bool()  # bertkit leaves padding outputs at zero
        x, y = x[real], y[real]
    assert torch.allclose(x, y, atol=TOL), (x - y).abs().max()


@pytest.mark.parametrize("name", CLASSES)
def test_parity_both_directions_without_projection(name, batch, tmp_path):
    sizes = "same"  # the projected layout is the family contract's
    inputs = _inputs(name, batch)
    torch.manual_seed(0)  # transformers' random weights, loaded by bertkit
    ref = getattr(transformers, name)(transformers.ElectraConfig(**_kwargs(name, sizes))).eval()
    ref.save_pretrained(tmp_path / "hf")
    ours, info = getattr(E, name).from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    assert set(ours.state_dict()) == {k for k in ref.state_dict() if not k.endswith(("position_ids", "token_type_ids"))}
    assert ("embeddings_project.weight" in "".join(ours.state_dict())) == (sizes == "projected")
    with torch.no_grad():
        _compare(name, ref(**inputs), ours(**inputs), batch)

    torch.manual_seed(1)  # bertkit's random weights, loaded by transformers
    ours = getattr(E, name)(E.ElectraConfig(**_kwargs(name, sizes))).eval()
    ours.save_pretrained(tmp_path / "bk")
    back = getattr(transformers, name).from_pretrained(tmp_path / "bk").eval()
    with torch.no_grad():
        _compare(name, back(**inputs), ours(**inputs), batch)


def test_losses_hidden_states_and_attentions_match(batch, tmp_path):
    torch.manual_seed(2)
    kw = _kwargs("ElectraForPreTraining", "projected")
    disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(**kw)).eval()
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(**kw)).eval()
    disc.save_pretrained(tmp_path / "d")
    gen.save_pretrained(tmp_path / "g")
    ours_d, ours_g = (
        E.ElectraForPreTraining.from_pretrained(tmp_path / "d"),
        E.ElectraForMaskedLM.from_pretrained(tmp_path / "g"),
    )
    ids, mask = batch["input_ids"], batch["attention_mask"]
    replaced = (torch.rand(ids.shape) < 0.3).long()
    mlm = torch.where((torch.rand(ids.shape) < 0.2) & mask.bool(), ids, torch.full_like(ids, -100))
    with torch.no_grad():
        a, b = disc(ids, attention_mask=mask, labels=replaced), ours_d(ids, attention_mask=mask, labels=replaced)
        assert abs(a.loss.item() - b.loss.item()) < TOL
        a, b = gen(ids, attention_mask=mask, labels=mlm), ours_g(ids, attention_mask=mask, labels=mlm)
        assert abs(a.loss.item() - b.loss.item()) < TOL
        sparse = ours_g(ids, attention_mask=mask, labels=mlm, sparse_mlm=True)
        assert abs(sparse.loss.item() - b.loss.item()) < TOL and sparse.logits.shape[0] == int((mlm != -100).sum())
        kw = {"attention_mask": mask, "output_hidden_states": True, "output_attentions": True}
        a, b = disc.electra(ids, **kw), ours_d.electra(ids, **kw)
    real = mask.bool()
    assert len(a.hidden_states) == len(b.hidden_states) == 3
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert torch.allclose(x[real], y[real], atol=TOL)
    for x, y in zip(a.attentions, b.attentions):
        assert torch.allclose(x, y, atol=TOL)


def test_generator_head_is_tied_and_the_base_model_reads_a_heads_folder(batch, tmp_path):
    torch.manual_seed(3)
    m = E.ElectraForMaskedLM(E.ElectraConfig(**_kwargs("ElectraForMaskedLM", "projected"))).eval()
    assert m.generator_lm_head.weight is m.electra.embeddings.word_embeddings.weight
    m.save_pretrained(tmp_path)
    back = E.ElectraForMaskedLM.from_pretrained(tmp_path).eval()
    assert back.generator_lm_head.weight is back.electra.embeddings.word_embeddings.weight
    # a base model loads from the head's folder (prefix stripped) and gives the same hidden states
    base = E.ElectraModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(
            base(**_inputs("", batch)).last_hidden_state, m.electra(**_inputs("", batch)).last_hidden_state
        )
    with pytest.raises(ValueError, match="'electra' model"):  # another family's class says which it is
        bertkit.BertModel.from_pretrained(tmp_path)


def test_inputs_embeds_have_the_embedding_width(batch, tmp_path):
    """inputs_embeds enter before embeddings_project: (B, N, embedding_size), as in transformers."""
    torch.manual_seed(4)
    ref = transformers.ElectraModel(transformers.ElectraConfig(**_kwargs("", "projected"))).eval()
    ref.save_pretrained(tmp_path)
    ours = E.ElectraModel.from_pretrained(tmp_path).eval()
    embeds = ref.embeddings.word_embeddings(batch["input_ids"]).detach()  # (B, N, 32)
    mask = batch["attention_mask"]
    with torch.no_grad():
        a = ref(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
        b = ours(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert torch.allclose(a[real], b[real], atol=TOL)
    with pytest.raises(ValueError, match=r"inputs_embeds must have shape \(batch, seq_len, 32\)"):
        ours(inputs_embeds=torch.zeros(1, 3, 64))


def test_config_bad_sizes_name_the_values():
    with pytest.raises(ValueError, match=r"hidden_size \(64\) is not a multiple of num_attention_heads \(5\)"):
        E.ElectraModel(E.ElectraConfig(hidden_size=64, num_attention_heads=5))
