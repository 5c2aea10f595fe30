"""The prepared inference path's fused feed-forward: the up-projection and its GELU in one oneDNN call.

Every family is checked against transformers on the same weights (MiniLM's real checkpoint, random
DistilBERT, ELECTRA and GPT-2 saved by transformers) and real polarity sentences: fp32 stays within
1e-5 of the reference, bf16 keeps the cosine of fp32's outputs, GPT-2's greedy tokens are the same,
and its transposed Conv1D weights keep transformers' layout in state_dict() and saves.
"""

from __future__ import annotations

import csv

import pytest
import torch

from bertkit.assets import asset_path
from bertkit.modeling import BertModel
from bertkit.modeling.distilbert import DistilBertModel
from bertkit.modeling.electra import ElectraModel
from bertkit.modeling.gpt2 import Conv1D, GPT2LMHeadModel
from bertkit.tokenization import BertTokenizer

transformers = pytest.importorskip("transformers")

FP32_ATOL = 1e-5  # on hidden states of magnitude ~1: the fused GELU is oneDNN's, not PyTorch's
TOKEN_COS = 0.999  # bf16 vs fp32, every real token (bf16 without fusion measures 0.99988 on MiniLM)
SENTENCE_COS = 0.9999  # bf16 vs fp32, mean-pooled sentence vectors


def _polarity(n: int) -> list[str]:
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:n]


def fused_gelu_missing(dtype: torch.dtype) -> str | None:
    """Why this CPU's oneDNN cannot run a linear with a GELU post-op in ``dtype`` (None when it can)."""
    if not torch.backends.mkldnn.is_available():
        return "PyTorch is built without oneDNN"
    try:
        w = torch.randn(8, 16).to(dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 64)
        torch.ops.mkldnn._linear_pointwise(torch.randn(2, 16).to(dtype), packed, None, "gelu", [], "none")
    except (RuntimeError, AttributeError) as e:
        return f"oneDNN has no {dtype} linear with a GELU post-op on this CPU ({str(e).splitlines()[0]})"
    return None


def fused_count(model: torch.nn.Module) -> int:
    return sum(1 for m in model.modules() if getattr(m, "_inference_gelu", None) is not None)


@pytest.fixture(scope="module")
def batch():
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    return tok(_polarity(8), padding=True, truncation=True, max_length=96, return_tensors="pt")


def _random_family(folder, family: str, hidden_act: str):
    """A transformers model with random weights, saved; returns (reference, bertkit class, layers). The
    weights are wide enough that the GELU sees inputs of size ~1, where erf and tanh GELU differ."""
    torch.manual_seed(0)
    if family == "distilbert":
        cfg = transformers.DistilBertConfig(
            n_layers=2, dim=64, n_heads=4, hidden_dim=256, activation=hidden_act, initializer_range=0.15
        )
        ref, ours = transformers.DistilBertModel(cfg), DistilBertModel
    else:
        cfg = transformers.ElectraConfig(
            embedding_size=32,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            hidden_act=hidden_act,
            initializer_range=0.15,
        )
        ref, ours = transformers.ElectraModel(cfg), ElectraModel
    ref.eval().save_pretrained(folder)
    return ref, ours, 2


FAMILIES = [
    ("bert", "gelu"),  # the MiniLM checkpoint
    ("distilbert", "gelu"),
    ("electra", "gelu"),
    ("electra", "gelu_new"),  # tanh GELU
    ("electra", "gelu_pytorch_tanh"),
    ("distilbert", "relu"),  # no GELU: nothing fused, the plain product stays
]


@pytest.fixture(scope="module", params=FAMILIES, ids=["-".join(p) for p in FAMILIES])
def family(request, tmp_path_factory):
    name, act = request.param
    if name == "bert":
        folder = asset_path("minilm")
        ref = transformers.BertModel.from_pretrained(str(folder)).eval()
        return ref, BertModel, folder, 6, act
    folder = tmp_path_factory.mktemp(f"{name}-{act}")
    ref, ours, layers = _random_family(folder, name, act)
    return ref, ours, folder, layers, act


def _hidden(model, batch, dtype=torch.float32):
    kw = {k: batch[k] for k in ("input_ids", "attention_mask")}
    with torch.inference_mode():
        return model(**kw).last_hidden_state.float()


def test_prepared_fp32_equals_transformers_with_the_gelu_fused(family, batch):
    ref, cls, folder, layers, act = family
    ours = cls.from_pretrained(folder, dtype="fp32")
    if act.startswith("gelu") and fused_gelu_missing(torch.float32) is None:
        assert fused_count(ours) == layers  # every feed-forward up-projection runs fused
    if not act.startswith("gelu"):
        assert fused_count(ours) == 0
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(_hidden(ours, batch)[real], _hidden(ref, batch)[real], atol=FP32_ATOL, rtol=0)
    assert set(ours.state_dict()) == set(cls.from_pretrained(folder).state_dict())  # checkpoint keys unchanged


def test_prepared_bf16_keeps_the_fp32_direction(family, batch):
    ref, cls, folder, layers, act = family
    ours = cls.from_pretrained(folder, dtype="bf16")
    real = batch["attention_mask"].bool()
    a, b = _hidden(ours, batch), _hidden(ref, batch)
    cos = torch.nn.functional.cosine_similarity
    assert float(cos(a[real], b[real]).min()) >= TOKEN_COS
    m = real.unsqueeze(-1).float()
    assert float(cos((a * m).sum(1), (b * m).sum(1)).min()) >= SENTENCE_COS


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_fused_gelu_is_taken_where_onednn_has_it(dtype):
    missing = fused_gelu_missing(dtype)
    if missing:
        pytest.skip(missing)
    model = BertModel.from_pretrained(asset_path("minilm"), dtype="fp32" if dtype == torch.float32 else "bf16")
    assert fused_count(model) == 6
    layer = model.encoder.layer[0].intermediate
    assert layer._modules.keys() == {"dense", "intermediate_act_fn"}  # the module tree is unchanged
    x = torch.randn(3, 384).to(dtype)
    with torch.inference_mode():
        out = layer(x)
    want = torch.nn.functional.gelu(x.float() @ layer.dense.weight.float().T + layer.dense.bias.float())
    torch.testing.assert_close(out.float(), want, atol=1e-5 if dtype == torch.float32 else 0.05, rtol=0.02)


def test_preparing_again_in_bf16_replaces_the_fp32_snapshot(batch):
    from bertkit.inference import prepare_for_inference

    folder = asset_path("minilm")
    ref = transformers.BertModel.from_pretrained(str(folder)).eval()
    model = prepare_for_inference(BertModel.from_pretrained(folder, dtype="fp32"), "bf16")
    real = batch["attention_mask"].bool()
    a, b = _hidden(model, batch), _hidden(ref, batch)
    assert float(torch.nn.functional.cosine_similarity(a[real], b[real]).min()) >= TOKEN_COS
    if fused_gelu_missing(torch.bfloat16) is None:
        assert fused_count(model) == 6


def test_a_hook_on_the_projection_sees_it_before_the_gelu(batch):
    """Fusion never changes what a hook observes: with a hook, the projection and the GELU run apart."""
    model = BertModel.from_pretrained(asset_path("minilm"), dtype="fp32")
    inter = model.encoder.layer[2].intermediate
    seen = {}
    handle = inter.dense.register_forward_hook(lambda m, inp, out: seen.update(x=inp[0], y=out))
    try:
        hooked = _hidden(model, batch)
    finally:
        handle.remove()
    want = torch.nn.functional.linear(seen["x"], inter.dense.weight, inter.dense.bias)
    torch.testing.assert_close(seen["y"], want, atol=1e-5, rtol=1e-5)  # pre-activation, negatives included
    assert float(seen["y"].min()) < -0.5
    torch.testing.assert_close(_hidden(model, batch), hooked, atol=1e-5, rtol=0)


def test_a_prepared_model_still_trains_as_it_is(batch):
    """train() and autograd use the eager modules: gradients flow through the real GELU."""
    model = BertModel.from_pretrained(asset_path("minilm"), dtype="fp32")
    ref = BertModel.from_pretrained(asset_path("minilm"))
    kw = {k: batch[k] for k in ("input_ids", "attention_mask")}
    model.train()
    model.requires_grad_(True)
    torch.manual_seed(0)
    out = model(**kw).last_hidden_state
    torch.manual_seed(0)
    want = ref.train()(**kw).last_hidden_state
    torch.testing.assert_close(out, want, atol=1e-5, rtol=0)
    out.sum().backward()
    assert model.encoder.layer[0].intermediate.dense.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", ["fp32", "int8"])
def test_a_deep_copy_of_a_prepared_model_runs_its_own_modules(dtype, batch):
    """copy.deepcopy of a prepared model (a teacher, an EMA or a fork to fine-tune) gives a model whose
    inference, training and hooks are its own: its outputs equal the original's, its own weights get
    the gradients when it trains (the original's none), and a hook on its projection sees the
    pre-activation output. Forwards bound to the original's modules would give the copy none of that."""
    import copy

    model = BertModel.from_pretrained(asset_path("minilm"), dtype=dtype)
    clone = copy.deepcopy(model)
    torch.testing.assert_close(_hidden(clone, batch), _hidden(model, batch), atol=1e-6, rtol=0)

    inter = clone.encoder.layer[2].intermediate
    seen = {}
    handle = inter.dense.register_forward_hook(lambda m, inp, out: seen.update(y=out.clone()))
    try:
        _hidden(clone, batch)
    finally:
        handle.remove()
    assert float(seen["y"].min()) < -0.5  # GELU's minimum is -0.17: the hook saw the projection alone

    if dtype == "fp32":
        kw = {k: batch[k] for k in ("input_ids", "attention_mask")}
        clone.train()
        clone.requires_grad_(True)
        clone(**kw).last_hidden_state.sum().backward()
        assert clone.encoder.layer[0].intermediate.dense.weight.grad.abs().sum() > 0
        assert clone.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
        assert all(p.grad is None for p in model.parameters())
        # and the original still serves its own, unchanged, prepared path
        torch.testing.assert_close(_hidden(model, batch), _hidden(copy.deepcopy(model), batch), atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------- GPT-2


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A random GPT-2 (MiniLM's vocabulary, tanh GELU) saved by transformers, and left-padded real text."""
    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=30522,
        n_positions=128,
        initializer_range=0.1,
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
    )
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    ref.save_pretrained(folder)
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    enc = tok(_polarity(3), truncation=True, max_length=24)
    width = max(len(ids) for ids in enc["input_ids"])
    ids = torch.zeros(3, width, dtype=torch.long)
    mask = torch.zeros(3, width, dtype=torch.long)
    for i, row in enumerate(enc["input_ids"]):
        ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    return ref, folder, {"input_ids": ids, "attention_mask": mask}


def test_gpt2_prepared_runs_every_conv1d_on_onednn_and_generates_the_same_tokens(gpt2):
    ref, folder, kw = gpt2
    plain = GPT2LMHeadModel.from_pretrained(folder)
    ours = GPT2LMHeadModel.from_pretrained(folder, dtype="fp32")
    convs = [m for m in ours.modules() if isinstance(m, Conv1D)]
    if fused_gelu_missing(torch.float32) is None:
        assert len(convs) == 8 and all("forward" in m.__dict__ for m in convs)  # every projection prepared
        assert fused_count(ours) == 2 and all(ours.transformer.h[i].mlp.c_fc._inference_gelu == "tanh" for i in (0, 1))
    real = kw["attention_mask"].bool()
    with torch.inference_mode():
        got, want = ours(**kw).logits, ref(**kw).logits
    torch.testing.assert_close(got[real], want[real], atol=1e-4, rtol=1e-5)  # logits of size ~10
    expected = ref.generate(**kw, max_new_tokens=24, do_sample=False)
    assert torch.equal(ours.generate(**kw, max_new_tokens=24), expected)
    assert torch.equal(plain.generate(**kw, max_new_tokens=24), expected)


def test_gpt2_prepared_bf16_logits_keep_the_fp32_direction(gpt2):
    ref, folder, kw = gpt2
    ours = GPT2LMHeadModel.from_pretrained(folder, dtype="bf16")
    real = kw["attention_mask"].bool()
    with torch.inference_mode():
        got, want = ours(**kw).logits.float()[real], ref(**kw).logits[real]
    assert float(torch.nn.functional.cosine_similarity(got, want).min()) >= TOKEN_COS


def test_gpt2_prepared_state_dict_and_save_keep_transformers_layout(gpt2, tmp_path):
    """Preparing replaces forwards only: the Conv1D parameters stay (in, out), so a prepared model's
    state_dict() and save_pretrained() are transformers' checkpoint, tensor for tensor."""
    ref, folder, kw = gpt2
    ours = GPT2LMHeadModel.from_pretrained(folder, dtype="fp32")
    sd, ref_sd = ours.state_dict(), ref.state_dict()
    assert set(sd) == set(ref_sd)
    for k, v in ref_sd.items():
        assert torch.equal(sd[k], v), k
    assert sd["transformer.h.0.attn.c_attn.weight"].shape == (64, 192)  # (in, out)
    ours.save_pretrained(tmp_path)
    back = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path)).eval()
    with torch.inference_mode():
        torch.testing.assert_close(back(**kw).logits, ref(**kw).logits, atol=0, rtol=0)


def residual_add_missing(dtype: torch.dtype) -> str | None:
    """Why this CPU's oneDNN cannot add a residual as a linear's post-op in ``dtype`` (None when it can)."""
    if not torch.backends.mkldnn.is_available():
        return "PyTorch is built without oneDNN"
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(torch.randn(8, 16).to(dtype), 64)
        torch.ops.mkldnn._linear_pointwise.binary(
            torch.randn(2, 16).to(dtype), torch.randn(2, 8).to(dtype), packed, None, "add"
        )
    except (RuntimeError, AttributeError) as e:
        return f"oneDNN has no {dtype} linear with an add post-op on this CPU ({str(e).splitlines()[0]})"
    return None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_residual_add_runs_inside_the_output_projections(dtype, batch, monkeypatch):
    """Both output projections of every BERT layer add their residual as oneDNN's post-op, and give
    what the product and a separate add give: exactly in fp32 (to float rounding), and within bf16's
    rounding in bf16, where the fused form rounds once instead of twice."""
    from bertkit.inference import fused as precision

    missing = residual_add_missing(dtype)
    if missing:
        pytest.skip(missing)
    model = BertModel.from_pretrained(asset_path("minilm"), dtype="fp32" if dtype == torch.float32 else "bf16")
    calls = []
    fused = precision._PackedLinear.add_residual
    monkeypatch.setattr(precision._PackedLinear, "add_residual", lambda s, x, r: calls.append(1) or fused(s, x, r))
    got = _hidden(model, batch)
    assert len(calls) == 2 * 6  # attention output and feed-forward output, six layers
    monkeypatch.setattr(precision._PackedLinear, "add_residual", lambda s, x, r: None)  # the separate add
    want = _hidden(model, batch)
    real = batch["attention_mask"].bool()
    if dtype == torch.float32:
        torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=0)
    else:
        assert float(torch.nn.functional.cosine_similarity(got[real], want[real]).min()) >= TOKEN_COS


def test_a_hook_on_the_output_projection_or_its_dropout_sees_its_call(batch):
    """With a hook on the projection or on the dropout after it, the residual is added apart, so the
    hook sees the projection's own output (and the dropout its input) as without the fusion."""
    model = BertModel.from_pretrained(asset_path("minilm"), dtype="fp32")
    out = model.encoder.layer[1].output
    plain = _hidden(model, batch)
    for module in (out.dense, out.dropout):
        seen = {}
        handle = module.register_forward_hook(lambda m, inp, y: seen.update(x=inp[0], y=y))
        try:
            hooked = _hidden(model, batch)
        finally:
            handle.remove()
        x = seen["x"] if module is out.dense else None
        if x is not None:  # the projection's output, before any residual
            want = torch.nn.functional.linear(x, out.dense.weight, out.dense.bias)
            torch.testing.assert_close(seen["y"], want, atol=1e-5, rtol=1e-5)
        assert "y" in seen
        torch.testing.assert_close(hooked, plain, atol=1e-5, rtol=0)


def test_distilbert_adds_both_residuals_in_its_projections_and_hooks_see_the_modules_outputs(
    tmp_path, batch, monkeypatch
):
    """DistilBERT's block adds its residuals after its attention and feed-forward modules: prepared for
    inference, both enter out_lin's and lin2's products instead, matching transformers; a hook on
    either module makes the block add apart, so the hook sees the module's own output."""
    from bertkit.inference import fused as precision

    missing = residual_add_missing(torch.float32)
    if missing:
        pytest.skip(missing)
    ref, _, layers = _random_family(tmp_path, "distilbert", "gelu")
    model = DistilBertModel.from_pretrained(tmp_path, dtype="fp32")
    calls = []
    fused = precision._PackedLinear.add_residual
    monkeypatch.setattr(precision._PackedLinear, "add_residual", lambda s, x, r: calls.append(1) or fused(s, x, r))
    real = batch["attention_mask"].bool()
    plain = _hidden(model, batch)
    assert len(calls) == 2 * layers
    torch.testing.assert_close(plain[real], _hidden(ref, batch)[real], atol=FP32_ATOL, rtol=0)

    block = model.transformer.layer[1]
    seen = {}
    hooks = [
        block.attention.register_forward_hook(lambda m, inp, out: seen.update(att_in=inp[0], att_out=out[0])),
        block.sa_layer_norm.register_forward_hook(lambda m, inp, out: seen.update(norm_in=inp[0])),
        block.ffn.register_forward_hook(lambda m, inp, out: seen.update(ffn_in=inp[0], ffn_out=out)),
    ]
    try:
        hooked = _hidden(model, batch)
    finally:
        for h in hooks:
            h.remove()
    torch.testing.assert_close(seen["norm_in"], seen["att_out"] + seen["att_in"], atol=1e-5, rtol=0)
    ffn, x = block.ffn, seen["ffn_in"]
    want = torch.nn.functional.linear(torch.nn.functional.gelu(ffn.lin1(x)), ffn.lin2.weight, ffn.lin2.bias)
    torch.testing.assert_close(seen["ffn_out"], want, atol=1e-5, rtol=1e-5)  # no residual in it
    torch.testing.assert_close(hooked, plain, atol=1e-5, rtol=0)
