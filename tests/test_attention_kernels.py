"""bf16 inference attends short length groups with two batched GEMMs instead of SDPA's flash kernel.

The GEMM form must give what SDPA gives: on random heads against fp32 SDPA (padding masked, every
row), and end to end on MiniLM's real checkpoint and real sentences, where the packed bf16 encoder
with the GEMM form stays as close to transformers' fp32 outputs as the one with SDPA.
"""

from __future__ import annotations

import csv

import pytest
import torch
import torch.nn.functional as F

from bertkit.assets import asset_path
from bertkit.modeling import BertModel, layers
from bertkit.modeling.packing import ROW_MULTIPLE, AttentionMask, inference_rows
from bertkit.tokenization import BertTokenizer

transformers = pytest.importorskip("transformers")


def test_gemm_attention_equals_fp32_sdpa_under_a_padding_mask():
    torch.manual_seed(0)
    B, N, h, d = 5, 24, 4, 32
    x = torch.randn(B, N, 3, h, d)
    lengths = torch.tensor([24, 17, 8, 1, 20])
    mask = (torch.arange(N)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, N)
    q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(B * N, h * d)
    with torch.no_grad():
        got = layers._batched_gemm_attention(x.bfloat16(), mask).float()
    # bf16 inputs and scores: relative error of a few 2^-8 on outputs of size ~1
    assert torch.allclose(got, ref, atol=0.05, rtol=0.05), (got - ref).abs().max()
    cos = F.cosine_similarity(got, ref, dim=-1)
    assert cos.min() > 0.999, cos.min()


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_very_short_attention_equals_fp32_sdpa_under_a_padding_mask(n):
    """Up to the elementwise limit (a token framed by [CLS] and [SEP], a one-word query) attention is a
    few broadcast products in float32; past it, the batched GEMMs. Either equals fp32 SDPA."""
    torch.manual_seed(n)
    B, h, d = 6, 4, 32
    x = torch.randn(B, n, 3, h, d)
    lengths = torch.tensor([n, max(n - 1, 1), 1, n, max(n - 2, 1), n])
    mask = (torch.arange(n)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, N)
    q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)
    for m in (mask, None):
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m).transpose(1, 2).reshape(B * n, h * d)
        with torch.no_grad():
            got = layers._batched_gemm_attention(x.bfloat16(), m).float()
            into = layers._batched_gemm_attention(x.bfloat16(), m, out=torch.empty(B * n, h * d).bfloat16())
        assert torch.allclose(got, ref, atol=0.05, rtol=0.05), (got - ref).abs().max()
        assert torch.equal(into.float(), got)
        assert F.cosine_similarity(got, ref, dim=-1).min() > 0.999
    assert (n <= layers._ELEMENTWISE_ATTENTION_MAX_LEN) == (n <= 4)


def test_the_gemm_attention_limit_follows_the_cpu_kind(monkeypatch):
    """AMX moves the switch to SDPA's flash kernel to shorter sequences than AVX-512 BF16 alone, and
    the encoder follows this CPU's limit: one length over it takes SDPA, one at it the GEMMs."""
    from bertkit._cpu import cpu_flags, gemm_attention_max_len

    amx = {"amx_bf16": True, "amx_tile": True, "avx512_bf16": True}
    assert 16 <= gemm_attention_max_len(amx) < gemm_attention_max_len({"avx512_bf16": True})
    limit = gemm_attention_max_len(cpu_flags())
    calls = []
    gemm = layers._batched_gemm_attention
    monkeypatch.setattr(layers, "_batched_gemm_attention", lambda x, m: calls.append(x.shape[1]) or gemm(x, m))
    model = BertModel.from_pretrained(asset_path("minilm")).eval().to(torch.bfloat16)
    with torch.no_grad():
        for n in (limit, limit + 1):
            model(torch.full((1, n), 1996))
    assert calls == [limit] * 6  # six layers at the limit; none over it


def test_the_row_multiple_follows_the_cpu_kind():
    """AMX's tiles hold 16 rows, AVX-512's register tiles 8: packed groups round to this CPU's kind."""
    from bertkit._cpu import attention_row_multiple, cpu_flags

    amx = {"amx_bf16": True, "amx_tile": True, "avx512_bf16": True}
    assert attention_row_multiple(amx) == 16
    assert attention_row_multiple({"avx512_bf16": True, "avx512f": True}) == 8
    assert attention_row_multiple({}) == 8
    assert ROW_MULTIPLE == attention_row_multiple(cpu_flags())


def test_packed_groups_pad_to_whole_row_tiles():
    mask = (torch.arange(30)[None, :] < torch.tensor([30, 29, 3, 11])[:, None]).long()
    model = torch.nn.Linear(1, 1).eval()
    with torch.no_grad():
        built = AttentionMask.build(mask, pack=True, row_multiple=inference_rows(model))
    assert built.groups and all(g.seq_len % ROW_MULTIPLE == 0 for g in built.groups)
    # training mode, or a gradient: each group's own longest, so dropout draws the same masks in a
    # no-grad forward and its replay with a gradient, and a training run does not depend on the trick
    for train, grad in ((True, False), (False, True)):
        with torch.set_grad_enabled(grad):
            rows = inference_rows(model.train(train))
        assert rows == 1
        exact = AttentionMask.build(mask, pack=True, row_multiple=rows)
        assert {g.seq_len for g in exact.groups} <= {30, 29, 11, 3}
    # every real token is kept exactly once, whatever the rounding added
    kept = sum(g.batch * g.seq_len if g.mask is None else int(g.mask.sum()) for g in built.groups)
    assert kept == int(mask.sum())


def test_bf16_encoder_with_gemm_attention_keeps_sdpa_closeness_to_transformers(monkeypatch):
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)][:16]
    folder = asset_path("minilm")
    enc = BertTokenizer.from_pretrained(folder)(
        texts, padding=True, truncation=True, max_length=128, return_tensors="pt"
    )
    ref_model = transformers.BertModel.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        ref = ref_model(**enc).last_hidden_state
    model = BertModel.from_pretrained(folder).eval().to(torch.bfloat16)
    model.pack_padding = True
    real = enc["attention_mask"].bool()

    def min_token_cos() -> float:
        with torch.no_grad():
            out = model(**enc).last_hidden_state.float()
        return F.cosine_similarity(out[real], ref[real], dim=-1).min().item()

    monkeypatch.setattr(layers, "_GEMM_ATTENTION_MAX_LEN", 128)  # every group through the GEMMs
    gemm = min_token_cos()
    monkeypatch.setattr(layers, "_GEMM_ATTENTION_MAX_LEN", 0)  # every group through SDPA
    sdpa = min_token_cos()
    assert gemm > 0.99 and gemm > sdpa - 0.002, (gemm, sdpa)


def test_a_text_alone_gets_in_bf16_what_it_gets_in_a_batch(monkeypatch):
    """A single unpadded text attends with the kernels a packed batch uses (once per layer), so the
    server's lone request and the library's batch agree within bf16's rounding, and stay near fp32."""
    from bertkit.pipelines import pipeline

    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)][:64]
    bf16 = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="bf16")
    monkeypatch.setattr(layers, "_GEMM_ATTENTION_MAX_LEN", 128)  # every text through the GEMMs, on any CPU
    batched = bf16(texts, return_tensors=True)
    calls = []
    gemm = layers._batched_gemm_attention
    monkeypatch.setattr(layers, "_batched_gemm_attention", lambda x, m: calls.append(m) or gemm(x, m))
    alone = torch.stack([bf16(t, return_tensors=True) for t in texts])
    assert len(calls) == 6 * len(texts) and all(m is None for m in calls)  # unpadded: no mask at all
    assert float(F.cosine_similarity(alone, batched).min()) >= 0.9999
    fp32 = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="fp32")(texts, return_tensors=True)
    assert float(F.cosine_similarity(alone, fp32).min()) >= 0.999
