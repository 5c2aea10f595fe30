"""bertkit vs transformers (eager attention) on the real all-MiniLM-L6-v2 checkpoint and on every head."""

from __future__ import annotations

import csv

import pytest
import torch

transformers = pytest.importorskip("transformers")

import bertkit
from bertkit.assets import asset_path
from bertkit.modeling import (
    BertConfig,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)

TOL = 1e-5


def _sentences(n: int = 8) -> list[str]:
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        rows = [r["text"] for r in csv.DictReader(f)]
    # Varied lengths so the batch has real padding.
    rows = sorted(rows[:200], key=len)
    step = len(rows) // n
    return [rows[i * step] for i in range(n)]


@pytest.fixture(scope="module")
def minilm_dir():
    return asset_path("minilm")


@pytest.fixture(scope="module")
def hf_tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(str(minilm_dir))


@pytest.fixture(scope="module")
def batch(hf_tokenizer):
    enc = hf_tokenizer(_sentences(), padding=True, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any(), "the parity batch must contain padding"
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.fixture(scope="module")
def hf_minilm(minilm_dir):
    return transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def bk_minilm(minilm_dir):
    return BertModel.from_pretrained(minilm_dir)


def _maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def test_minilm_every_output_matches_transformers_eager(batch, hf_minilm, bk_minilm):
    with torch.no_grad():
        ref = hf_minilm(**batch, output_hidden_states=True, output_attentions=True)
        out = bk_minilm(**batch, output_hidden_states=True, output_attentions=True)
    assert _maxdiff(out.last_hidden_state, ref.last_hidden_state) < TOL
    assert _maxdiff(out.pooler_output, ref.pooler_output) < TOL
    assert len(out.hidden_states) == hf_minilm.config.num_hidden_layers + 1 == len(ref.hidden_states)
    for mine, theirs in zip(out.hidden_states, ref.hidden_states):
        assert _maxdiff(mine, theirs) < TOL
    assert len(out.attentions) == hf_minilm.config.num_hidden_layers
    B, N = batch["input_ids"].shape
    for mine, theirs in zip(out.attentions, ref.attentions):
        assert mine.shape == (B, hf_minilm.config.num_attention_heads, N, N)
        assert _maxdiff(mine, theirs) < TOL
        # probabilities: rows sum to one and padding keys get nothing
        assert torch.allclose(mine.sum(-1), torch.ones(()), atol=1e-5)
        assert mine.masked_select(batch["attention_mask"][:, None, None, :] == 0).abs().max() == 0


def test_minilm_sdpa_path_matches_eager_on_real_tokens(batch, hf_minilm, bk_minilm):
    with torch.no_grad():
        ref = hf_minilm(**batch)
        out = bk_minilm(**batch)  # no probabilities requested: SDPA
    real = batch["attention_mask"].bool()
    assert (out.last_hidden_state - ref.last_hidden_state).abs()[real].max().item() < TOL
    assert _maxdiff(out.pooler_output, ref.pooler_output) < TOL


def test_outputs_by_attribute_key_and_index(batch, bk_minilm):
    with torch.no_grad():
        out = bk_minilm(**batch, output_hidden_states=True)
        as_tuple = bk_minilm(**batch, output_hidden_states=True, return_dict=False)
    assert out[0] is out.last_hidden_state is out["last_hidden_state"]
    assert out[1] is out["pooler_output"]
    assert out[2] is out.hidden_states and len(out) == 3
    assert list(out.keys()) == ["last_hidden_state", "pooler_output", "hidden_states"]
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 3
    assert torch.equal(as_tuple[0], out[0])
    assert torch.equal(out[2][-1], out[0])
    # The tuple positions users index by hand: outputs[1] is the pooler applied to outputs[0], and
    # outputs[2][0] (the first hidden state) is the embedding layer's output.
    with torch.no_grad():
        assert torch.equal(bk_minilm.pooler(out[0]), out[1])
        assert torch.equal(bk_minilm.embeddings(batch["input_ids"], batch["token_type_ids"]), out[2][0])
    with pytest.raises(KeyError):
        out["attentions"]


def test_bert_base_parameter_count():
    model = BertModel(BertConfig())
    assert sum(p.numel() for p in model.parameters()) == 109_482_240
    assert bertkit.count_parameters(model) == 109_482_240


# Google's BERT miniatures and the two original sizes: (layers L, hidden H); heads = H / 64, FFN = 4H.
GOOGLE_SIZES = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}


@pytest.mark.parametrize("name", list(GOOGLE_SIZES))
def test_presets_match_google_miniatures(name):
    layers, hidden = GOOGLE_SIZES[name]
    cfg = BertConfig.from_preset(name)
    ref_cfg = transformers.BertConfig(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=hidden // 64, intermediate_size=4 * hidden
    )
    fields = (
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "type_vocab_size",
        "hidden_act",
    )
    assert {f: getattr(cfg, f) for f in fields} == {f: getattr(ref_cfg, f) for f in fields}
    # The same architecture: transformers' model of that size has exactly as many parameters.
    with torch.device("meta"):
        ours, ref = BertModel(cfg), transformers.BertModel(ref_cfg)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    assert BertConfig.from_preset(name, vocab_size=1000).vocab_size == 1000


# ------------------------------------------------------------------------------------------- every head

HEADS = {
    "BertModel": BertModel,
    "BertForPreTraining": BertForPreTraining,
    "BertForMaskedLM": BertForMaskedLM,
    "BertForNextSentencePrediction": BertForNextSentencePrediction,
    "BertForSequenceClassification": BertForSequenceClassification,
    "BertForTokenClassification": BertForTokenClassification,
    "BertForQuestionAnswering": BertForQuestionAnswering,
    "BertForMultipleChoice": BertForMultipleChoice,
}


def _hf_config(**kw):
    base = dict(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
        num_labels=3,
    )
    base.update(kw)
    return transformers.BertConfig(**base)


def _labels_for(name: str, batch: dict, num_labels: int = 3) -> dict:
    g = torch.Generator().manual_seed(0)
    B, N = batch["input_ids"].shape
    if name in ("BertForPreTraining", "BertForMaskedLM"):
        labels = batch["input_ids"].clone()
        labels[(torch.rand(B, N, generator=g) > 0.3) | (batch["attention_mask"] == 0)] = -100
        extra = {"labels": labels}
        if name == "BertForPreTraining":
            extra["next_sentence_label"] = torch.randint(0, 2, (B,), generator=g)
        return extra
    if name == "BertForNextSentencePrediction":
        return {"labels": torch.randint(0, 2, (B,), generator=g)}
    if name == "BertForSequenceClassification":
        return {"labels": torch.randint(0, num_labels, (B,), generator=g)}
    if name == "BertForTokenClassification":
        labels = torch.randint(0, num_labels, (B, N), generator=g)
        return {"labels": labels.masked_fill(batch["attention_mask"] == 0, -100)}
    if name == "BertForQuestionAnswering":
        lengths = batch["attention_mask"].sum(1)  # answers lie inside the real tokens
        return {
            "start_positions": (torch.rand(B, generator=g) * lengths).long(),
            "end_positions": torch.tensor([N + 5] + [3] * (B - 1)),
        }  # one clamped / ignored position
    if name == "BertForMultipleChoice":
        return {"labels": torch.randint(0, 2, (B // 2,), generator=g)}
    return {}


def _inputs_for(name: str, batch: dict) -> dict:
    if name != "BertForMultipleChoice":
        return dict(batch)
    B, N = batch["input_ids"].shape
    return {k: v.view(B // 2, 2, N) for k, v in batch.items()}  # pairs of real sentences as choices


def _compare_outputs(mine, theirs, real: torch.Tensor | None = None) -> None:
    """Every output within TOL; with ``real`` (B, N), per-token outputs are compared on real tokens only
    (bertkit's fast path leaves padding positions at zero instead of computing them)."""
    keys = [k for k in theirs.keys() if k not in ("past_key_values",)]
    assert keys, "reference produced no outputs"
    for key in keys:
        a, b = mine[key], theirs[key]
        if isinstance(b, tuple):
            for x, y in zip(a, b):
                assert _maxdiff(x, y) < TOL, key
        elif real is not None and b.dim() >= 2 and b.shape[:2] == real.shape:
            assert a.shape == b.shape, key
            assert (a - b).abs()[real].max().item() < TOL, key
        else:
            assert _maxdiff(a, b) < TOL, key


@pytest.mark.parametrize("name", list(HEADS))
def test_every_head_loads_transformers_checkpoint_with_equal_logits_and_loss(name, batch, tmp_path):
    torch.manual_seed(0)
    hf_cls = getattr(transformers, name)
    hf = hf_cls(_hf_config(num_labels=2 if name == "BertForQuestionAnswering" else 3)).eval()
    hf.save_pretrained(tmp_path)
    mine = HEADS[name].from_pretrained(tmp_path)
    assert not mine.training
    inputs, labels = _inputs_for(name, batch), _labels_for(name, batch)
    with torch.no_grad():
        ref = hf(**inputs, **labels, output_hidden_states=True)
        out = mine(**inputs, **labels, output_hidden_states=True)
    if labels:
        assert "loss" in out and torch.isfinite(out["loss"])
    _compare_outputs(out, ref)
    # same parameters, same names
    ref_sd, my_sd = hf.state_dict(), mine.state_dict()
    for k, v in my_sd.items():
        assert torch.equal(v, ref_sd[k]), k


@pytest.mark.parametrize(
    "problem_type,num_labels",
    [("regression", 1), ("multi_label_classification", 4), ("single_label_classification", 3)],
)
def test_sequence_classification_problem_types(problem_type, num_labels, batch, tmp_path):
    torch.manual_seed(1)
    hf = transformers.BertForSequenceClassification(_hf_config(num_labels=num_labels, problem_type=problem_type)).eval()
    hf.save_pretrained(tmp_path)
    mine = BertForSequenceClassification.from_pretrained(tmp_path)
    B = batch["input_ids"].shape[0]
    g = torch.Generator().manual_seed(2)
    if problem_type == "regression":
        labels = torch.rand(B, generator=g) * 5
    elif problem_type == "multi_label_classification":
        labels = (torch.rand(B, num_labels, generator=g) > 0.5).float()
    else:
        labels = torch.randint(0, num_labels, (B,), generator=g)
    with torch.no_grad():
        ref = hf(**batch, labels=labels)
        out = mine(**batch, labels=labels)
    assert mine.config.problem_type == problem_type
    assert abs(out.loss.item() - ref.loss.item()) < TOL
    assert _maxdiff(out.logits, ref.logits) < TOL


# ------------------------------------------------------------------------------------------- round trips


def test_minilm_round_trip_both_ways(minilm_dir, batch, bk_minilm, tmp_path):
    bk_minilm.save_pretrained(tmp_path / "bk")
    hf = transformers.BertModel.from_pretrained(str(tmp_path / "bk"), attn_implementation="eager").eval()
    hf.save_pretrained(tmp_path / "hf")
    again = BertModel.from_pretrained(tmp_path / "hf")
    with torch.no_grad():
        a = bk_minilm(**batch, output_attentions=True)
        b = hf(**batch, output_attentions=True)
        c = again(**batch, output_attentions=True)
    assert _maxdiff(a.last_hidden_state, b.last_hidden_state) < TOL
    assert torch.equal(a.last_hidden_state, c.last_hidden_state)
    with torch.no_grad():  # the fast (packed) path too, on real tokens
        real = batch["attention_mask"].bool()
        assert (bk_minilm(**batch)[0] - hf(**batch)[0]).abs()[real].max().item() < TOL
    for k, v in bk_minilm.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k


# ------------------------------------------------------------------------------------------- sparse MLM


@pytest.mark.parametrize("cls", [BertForMaskedLM, BertForPreTraining])
def test_sparse_mlm_matches_dense_loss_and_gradients(cls, batch):
    torch.manual_seed(4)
    cfg = BertConfig.from_preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = cls(cfg).train()
    labels = _labels_for(cls.__name__, batch)
    masked = int((labels["labels"] != -100).sum())
    dense = model(**batch, **labels)
    dense_grads = torch.autograd.grad(dense.loss, list(model.parameters()))
    sparse = model(**batch, **labels, sparse_mlm=True)
    sparse_grads = torch.autograd.grad(sparse.loss, list(model.parameters()))
    logits = sparse[1]
    assert logits.shape == (masked, cfg.vocab_size)
    assert abs(dense.loss.item() - sparse.loss.item()) < 1e-5
    for (name, _), g1, g2 in zip(model.named_parameters(), dense_grads, sparse_grads):
        assert torch.allclose(g1, g2, atol=1e-6, rtol=1e-4), name
    selected = labels["labels"] != -100
    assert _maxdiff(dense[1][selected], logits) < 1e-5


@pytest.mark.parametrize("cls", [BertForMaskedLM, BertForPreTraining])
def test_sparse_mlm_with_extra_rows_matches_transformers(cls, batch, tmp_path):
    """A (B, N) bool ``sparse_mlm`` predicts the marked positions beside the masked ones, in row-major
    order, and leaves them out of the loss; without NSP labels the sparse path's loss is the masked-LM
    loss (transformers' dense heads of the same weights give the reference)."""
    torch.manual_seed(6)
    cfg = BertConfig.from_preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = cls(cfg).train()
    model.save_pretrained(tmp_path)
    hf = getattr(transformers, cls.__name__).from_pretrained(str(tmp_path), attn_implementation="eager").train()
    labels = _labels_for("BertForMaskedLM", batch)["labels"]
    extra = torch.zeros_like(labels, dtype=torch.bool)
    extra[:, 0] = True  # [CLS], never masked
    extra[1, 3] = True  # an extra row that may also be masked: it is predicted once, scored if masked
    out = model(**batch, labels=labels, sparse_mlm=extra)
    ref = hf(**batch)
    ref_logits = ref.logits if cls is BertForMaskedLM else ref.prediction_logits
    rows = extra | (labels != -100)
    logits = out[1]
    assert logits.shape == (int(rows.sum()), cfg.vocab_size)
    assert _maxdiff(logits, ref_logits[rows]) < 1e-5
    masked = labels != -100
    expected = torch.nn.functional.cross_entropy(ref_logits[masked], labels[masked])
    assert abs(out.loss.item() - expected.item()) < 1e-5
    grads = torch.autograd.grad(out.loss, list(model.parameters()), allow_unused=True)
    ref_grads = torch.autograd.grad(expected, list(hf.parameters()), allow_unused=True)
    named = dict(zip((n for n, _ in hf.named_parameters()), ref_grads))
    for (name, _), g in zip(model.named_parameters(), grads):
        if name in named and named[name] is not None:
            assert torch.allclose(g, named[name], atol=1e-6, rtol=1e-4), name
    with pytest.raises(ValueError, match=r"bool mask of the labels' shape .* of shape \(8, 3\)"):
        model(**batch, labels=labels, sparse_mlm=extra[:, :3])


def test_training_step_under_bf16_autocast(batch):
    """The pretraining path runs under CPU bf16 autocast (sparse MLM + NSP), close to the fp32 loss."""
    torch.manual_seed(5)
    cfg = BertConfig.from_preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(cfg).train()
    labels = _labels_for("BertForPreTraining", batch)
    fp32 = model(**batch, **labels, sparse_mlm=True).loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch, **labels, sparse_mlm=True)
    out.loss.backward()
    assert out.prediction_logits.dtype == torch.bfloat16
    assert abs(out.loss.item() - fp32.item()) < 0.05 * fp32.item()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())


def test_bert_resize_keeps_the_decoder_bias_shared_and_the_pooler_optional():
    """BERT's own resize details; resize parity with transformers is in test_family_contract.py."""
    mine = BertForMaskedLM(BertConfig.from_preset("tiny", vocab_size=1000))
    mine.resize_token_embeddings(1008)
    assert mine.config.vocab_size == 1008 and mine.cls.predictions.bias.shape == (1008,)
    assert mine.cls.predictions.decoder.weight is mine.bert.embeddings.word_embeddings.weight
    assert mine.cls.predictions.decoder.bias is mine.cls.predictions.bias
    base = BertModel.from_pretrained(asset_path("minilm"), add_pooling_layer=False)
    assert base.pooler is None
