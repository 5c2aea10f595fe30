"""ELECTRA against transformers on real text: every head in both directions, both embedding layouts.

Each comparison uses random weights drawn by one library, saved, and loaded by the other (transformers'
save loaded by bertkit, and bertkit's save loaded by transformers), on a padded batch of real polarity
reviews. ``embedding_size`` both equal to and smaller than ``hidden_size`` (``embeddings_project``).
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

import bertkit
from bertkit.assets import asset_path
from bertkit.modeling import electra as E
from bertkit.pipelines import pipeline
from bertkit.tokenization import BertTokenizer

transformers = pytest.importorskip("transformers")

TOL = 1e-5
CLASSES = ["ElectraModel", "ElectraForPreTraining", "ElectraForMaskedLM", "ElectraForSequenceClassification",
           "ElectraForTokenClassification", "ElectraForQuestionAnswering", "ElectraForMultipleChoice"]
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
    return dict(vocab_size=30522, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                num_labels=2 if "Question" in name else 3, **SIZES[sizes])


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


@pytest.mark.parametrize("sizes", list(SIZES))
@pytest.mark.parametrize("name", CLASSES)
def test_parity_both_directions(name, sizes, batch, tmp_path):
    inputs = _inputs(name, batch)
    torch.manual_seed(0)  # transformers' random weights, loaded by bertkit
    ref = getattr(transformers, name)(transformers.ElectraConfig(**_kwargs(name, sizes))).eval()
    ref.save_pretrained(tmp_path / "hf")
    ours, info = getattr(E, name).from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    assert set(ours.state_dict()) == {k for k in ref.state_dict() if not k.endswith(("position_ids",
                                                                                       "token_type_ids"))}
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
    ours_d, ours_g = E.ElectraForPreTraining.from_pretrained(tmp_path / "d"), E.ElectraForMaskedLM.from_pretrained(
        tmp_path / "g")
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


def test_generator_head_is_tied_and_round_trip_is_exact(batch, tmp_path):
    torch.manual_seed(3)
    m = E.ElectraForMaskedLM(E.ElectraConfig(**_kwargs("ElectraForMaskedLM", "projected"))).eval()
    assert m.generator_lm_head.weight is m.electra.embeddings.word_embeddings.weight
    m.save_pretrained(tmp_path)
    back = E.ElectraForMaskedLM.from_pretrained(tmp_path).eval()
    assert back.generator_lm_head.weight is back.electra.embeddings.word_embeddings.weight
    for k, v in m.state_dict().items():
        assert torch.equal(v, back.state_dict()[k]), k
    with torch.no_grad():
        assert torch.equal(m(**_inputs("", batch)).logits, back(**_inputs("", batch)).logits)
    # a base model loads from the head's folder (prefix stripped) and gives the same hidden states
    base = E.ElectraModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(base(**_inputs("", batch)).last_hidden_state,
                           m.electra(**_inputs("", batch)).last_hidden_state)


def test_auto_classes_pick_electra(tmp_path):
    transformers.ElectraForPreTraining(transformers.ElectraConfig(**_kwargs("", "projected"))).save_pretrained(
        tmp_path)
    assert type(bertkit.AutoConfig.from_pretrained(tmp_path)) is E.ElectraConfig
    for auto, cls in ((bertkit.AutoModel, E.ElectraModel), (bertkit.AutoModelForPreTraining, E.ElectraForPreTraining),
                      (bertkit.AutoModelForMaskedLM, E.ElectraForMaskedLM),
                      (bertkit.AutoModelForSequenceClassification, E.ElectraForSequenceClassification),
                      (bertkit.AutoModelForTokenClassification, E.ElectraForTokenClassification),
                      (bertkit.AutoModelForMultipleChoice, E.ElectraForMultipleChoice)):
        assert type(auto.from_pretrained(tmp_path)) is cls
    assert type(bertkit.AutoModelForQuestionAnswering.from_pretrained(tmp_path, num_labels=2)) is \
        E.ElectraForQuestionAnswering
    with pytest.raises(ValueError, match="bidirectional encoder"):
        bertkit.AutoModelForCausalLM.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="'electra' model"):
        bertkit.BertModel.from_pretrained(tmp_path)


def test_pipelines_on_electra_folders(tokenizer, tmp_path):
    torch.manual_seed(4)
    kw = _kwargs("", "projected")
    E.ElectraForMaskedLM(E.ElectraConfig(**kw)).save_pretrained(tmp_path / "gen", tokenizer=tokenizer)
    text = "paris is the [MASK] of france."
    ours = pipeline("fill-mask", model=tmp_path / "gen")(text, top_k=5)
    ref = transformers.pipeline("fill-mask", model=str(tmp_path / "gen"), device="cpu")(text, top_k=5)
    assert [r["token"] for r in ours] == [r["token"] for r in ref]
    np.testing.assert_allclose([r["score"] for r in ours], [r["score"] for r in ref], atol=1e-5)

    kw.update(num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    E.ElectraForSequenceClassification(E.ElectraConfig(**kw)).save_pretrained(tmp_path / "clf", tokenizer=tokenizer)
    texts = _polarity(3)
    a = pipeline("text-classification", model=tmp_path / "clf")(texts, top_k=None)
    b = transformers.pipeline("text-classification", model=str(tmp_path / "clf"), device="cpu")(texts, top_k=None)
    for x, y in zip(a, b):
        assert [d["label"] for d in x] == [d["label"] for d in y]
        np.testing.assert_allclose([d["score"] for d in x], [d["score"] for d in y], atol=1e-5)


def test_config_bad_sizes_name_the_values():
    with pytest.raises(ValueError, match=r"hidden_size \(64\) is not a multiple of num_attention_heads \(5\)"):
        E.ElectraModel(E.ElectraConfig(hidden_size=64, num_attention_heads=5))


def test_generator_resize_token_embeddings_keeps_old_logits_and_saves_for_transformers(batch, tmp_path):
    torch.manual_seed(5)
    ref = transformers.ElectraForMaskedLM(transformers.ElectraConfig(**_kwargs("", "projected"))).eval()
    ref.save_pretrained(tmp_path / "hf")
    ours = E.ElectraForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    n = ref.config.vocab_size
    ours.resize_token_embeddings(n + 3)
    assert ours.generator_lm_head.weight is ours.electra.embeddings.word_embeddings.weight
    assert ours.generator_lm_head.weight.shape == (n + 3, 32)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        a, b = ref(**_inputs("", batch)).logits[real], ours(**_inputs("", batch)).logits[real]
    assert torch.allclose(a, b[:, :n], atol=TOL)
    ours.save_pretrained(tmp_path / "bk")
    back = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "bk").eval()
    with torch.no_grad():
        assert torch.allclose(back(**_inputs("", batch)).logits[real], b, atol=TOL)
