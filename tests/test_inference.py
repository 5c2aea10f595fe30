"""The inference path: CPU detection, precisions and their quality gates, the shared batched forward,
long-text windows in the NER pipeline, and ONNX export checked in onnxruntime."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.inference import cpu_flags, describe_cpu, has_fast_bf16, resolve_dtype, run_batched
from bertkit.modeling import BertModel
from bertkit.pipelines import pipeline

transformers = pytest.importorskip("transformers")


def _polarity(split: str, n: int | None = None) -> list[dict]:
    with open(asset_path(f"polarity-{split}"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return rows[:n] if n else rows


def test_cpu_flags_and_auto_choice(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512_vnni amx_tile amx_bf16\n")
    flags = cpu_flags(str(info))
    assert flags == {
        "amx_bf16": True,
        "amx_int8": False,
        "amx_tile": True,
        "avx512_bf16": True,
        "avx512_vnni": True,
        "avx512f": True,
        "avx2": True,
    }
    assert resolve_dtype("auto", flags) == "bf16"
    plain = cpu_flags(str(tmp_path / "missing"))
    assert not any(plain.values()) and resolve_dtype("auto", plain) == "fp32"
    assert resolve_dtype("int8") == "int8" and resolve_dtype(torch.bfloat16) == "bf16"
    with pytest.raises(ValueError, match="fp16"):
        resolve_dtype("fp16")
    assert "avx2=" in describe_cpu()


def _run_as_another_cpu(code: str, hidden: str):
    """The JSON ``code`` prints last, run in a child process with ``hidden`` CPU flags hidden from bertkit."""
    env = {**os.environ, "BERTKIT_HIDE_CPU_FLAGS": hidden}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_hidden_cpu_flags_make_bertkit_take_another_cpu_kinds_paths(tmp_path, monkeypatch):
    """``BERTKIT_HIDE_CPU_FLAGS`` is how one machine runs another CPU kind's paths (``make test-cpu-kinds``):
    with AMX and AVX-512 BF16 hidden, every choice is the one a CPU without them makes, on any CPU."""
    code = (
        "import json\n"
        "from bertkit._cpu import attention_row_multiple, gemm_attention_max_len\n"
        "from bertkit.inference import cpu_flags, describe_cpu, resolve_dtype\n"
        "print(json.dumps([cpu_flags(), resolve_dtype('auto'), gemm_attention_max_len(), attention_row_multiple(),"
        " describe_cpu()]))"
    )
    flags, auto, gemm_len, rows, line = _run_as_another_cpu(code, "amx_bf16, amx_tile amx_int8 avx512_bf16")
    hidden = ("amx_bf16", "amx_tile", "amx_int8", "avx512_bf16")
    assert not any(flags[f] for f in hidden)
    here = cpu_flags("/proc/cpuinfo")  # this machine's flags as its cpuinfo lists them, nothing hidden
    assert all(flags[f] == here[f] for f in ("avx512_vnni", "avx512f", "avx2"))  # the others stay this machine's
    assert (auto, gemm_len, rows) == ("fp32", 128, 8)
    assert line.endswith("(hidden by BERTKIT_HIDE_CPU_FLAGS: amx_bf16 amx_int8 amx_tile avx512_bf16)")
    # hiding is about this machine: a cpuinfo file named by path is read as it is
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: avx2 avx512f amx_tile amx_bf16\n")
    monkeypatch.setenv("BERTKIT_HIDE_CPU_FLAGS", "amx_bf16")
    assert cpu_flags(str(info))["amx_bf16"] and not cpu_flags()["amx_bf16"]


def test_bf16_inference_on_a_cpu_that_emulates_it_warns():
    """Where bf16 products are emulated (no AMX, no AVX-512 BF16; hidden here, so on any CPU) a model
    prepared at an explicit bf16 warns once that it runs slower than fp32, and ``auto`` prepares fp32
    without a word."""
    code = (
        "import json, warnings\n"
        "from bertkit.modeling import BertModel\n"
        "from bertkit.inference import inference_dtype\n"
        f"folder = {str(asset_path('minilm'))!r}\n"
        "out = []\n"
        "for dtype in ('bf16', 'auto'):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        model = BertModel.from_pretrained(folder, dtype=dtype)\n"
        "    param = str(next(model.parameters()).dtype)\n"
        "    out.append([inference_dtype(model), param, [str(w.message) for w in caught]])\n"
        "print(json.dumps(out))"
    )
    runs = _run_as_another_cpu(code, "amx_bf16 amx_tile amx_int8 avx512_bf16")
    (bf16, bf16_param, bf16_warned), (auto, auto_param, auto_warned) = runs
    assert (bf16, bf16_param, auto, auto_param) == ("bf16", "torch.bfloat16", "fp32", "torch.float32")
    emulated = [w for w in bf16_warned if "emulated" in w]
    assert len(emulated) == 1 and "neither AMX nor AVX-512 BF16" in emulated[0] and "fp32" in emulated[0]
    assert not [w for w in auto_warned if "emulated" in w]


def test_prepared_fp32_stays_exact_vs_transformers():
    folder = str(asset_path("minilm"))
    texts = [r["text"] for r in _polarity("test", 12)]
    ref = transformers.BertModel.from_pretrained(folder, attn_implementation="sdpa").eval()
    ours = BertModel.from_pretrained(folder, dtype="fp32")  # prepared: cached fused QKV
    assert ours.encoder.layer[0].attention.self._inference_qkv is not None
    assert not ours.encoder.layer[0].attention.self._inference_qkv.training  # else the packed kernel is skipped
    assert not any("inference_qkv" in k for k in ours.state_dict())  # checkpoint keys unchanged
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        a = ours(**enc).last_hidden_state
        b = ref(**enc).last_hidden_state
    m = enc["attention_mask"].bool()
    torch.testing.assert_close(a[m], b[m], atol=2e-5, rtol=1e-4)


def test_precision_choice_follows_the_device():
    """int8 is a CPU path: asked for on a GPU it is refused by name, before any weight moves; auto on a
    device other than the CPU never reads the CPU's flags."""
    with pytest.raises(ValueError, match=r"'int8' runs on the CPU only.*on cuda:0 choose bf16, fp32 or auto"):
        resolve_dtype("int8", device="cuda:0")
    assert resolve_dtype("bf16", device="cuda") == "bf16" and resolve_dtype("fp32", device="mps") == "fp32"
    assert resolve_dtype("auto", device="mps") == "fp32"
    expected = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    assert resolve_dtype("auto", device="cuda") == expected


def test_a_prepared_model_follows_a_cast():
    """``.to(dtype)`` on a prepared model rebuilds its fused and packed weights at the new precision:
    the same outputs as a model prepared at that precision from the start."""
    folder = str(asset_path("minilm"))
    enc = transformers.AutoTokenizer.from_pretrained(folder)(
        [r["text"] for r in _polarity("test", 6)], padding=True, return_tensors="pt"
    )
    direct = BertModel.from_pretrained(folder, dtype="bf16")
    moved = BertModel.from_pretrained(folder, dtype="fp32").to(torch.bfloat16)
    fused = moved.encoder.layer[0].attention.self._inference_qkv
    assert moved.dtype == torch.bfloat16 and fused.weight.dtype == torch.bfloat16
    assert resolve_dtype(moved.__dict__["_bertkit_inference_dtype"]) == "bf16"
    with torch.inference_mode():
        a = moved(**enc).last_hidden_state.float()
        b = direct(**enc).last_hidden_state.float()
    m = enc["attention_mask"].bool()
    torch.testing.assert_close(a[m], b[m], atol=1e-6, rtol=0)
    half = moved.half()  # no inference precision names float16: the model runs as a plain one
    assert "_bertkit_inference_dtype" not in half.__dict__
    assert half.encoder.layer[0].attention.self._inference_qkv is None


def test_an_int8_model_refuses_to_move_before_anything_moves():
    model = BertModel.from_pretrained(str(asset_path("minilm")), dtype="int8")
    before = {k: (v.dtype, v.device) for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"prepared for int8 inference, which runs on the CPU only.*torch.bfloat16"):
        model.to(torch.bfloat16)
    assert {k: (v.dtype, v.device) for k, v in model.state_dict().items()} == before


def test_run_batched_restores_input_order_and_lengths():
    folder = asset_path("minilm")
    model = BertModel.from_pretrained(folder)
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer.from_pretrained(folder)
    texts = [r["text"] for r in _polarity("test", 20)]
    enc = tok(texts)
    feats = [{k: enc[k][i] for k in ("input_ids", "attention_mask", "token_type_ids")} for i in range(len(texts))]
    res = run_batched(model, feats, batch_size=4, outputs=("last_hidden_state",), max_batch_tokens=200)
    for f, r, t in zip(feats, res, texts):
        assert r["last_hidden_state"].shape == (len(f["input_ids"]), 384)
        alone = model(**tok(t, return_tensors="pt")).last_hidden_state[0].detach().numpy()
        np.testing.assert_allclose(r["last_hidden_state"], alone, atol=2e-5)


def test_bf16_sentence_embeddings_gate():
    """bf16 vs fp32 sentence embeddings on real text: cosine >= 0.999 for every sentence."""
    texts = [r["text"] for r in _polarity("test", 64)]
    fp32 = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="fp32")(texts, return_tensors=True)
    bf16 = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="bf16")
    assert bf16.model.dtype == torch.bfloat16 and bf16.dtype == "bf16"
    cos = torch.nn.functional.cosine_similarity(fp32, bf16(texts, return_tensors=True), dim=-1)
    assert float(cos.min()) >= 0.999, float(cos.min())


def test_int8_sentence_embeddings_gate():
    """int8 vs fp32 sentence embeddings on 256 real sentences: min cosine >= 0.99 on every CPU; mean
    >= 0.998 with 8-bit weights, >= 0.997 with the 7-bit weights of a CPU without VNNI (see weight_qmax).

    Every encoder Linear is int8, the feed-forward down-projection included (with asymmetric codes). The
    int8 products are exact integer sums on every CPU (weight_qmax keeps them so); what differs between
    CPUs is the weights' bits, the float rescaling and the bf16 or fp32 kernel of the layers kept in float.
    """
    from bertkit.inference.int8 import Int8Linear, weight_qmax

    texts = [r["text"] for r in _polarity("test", 256)]
    fp32 = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="fp32")(texts, return_tensors=True)
    q = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="int8")
    layer = q.model.encoder.layer[0]
    assert isinstance(layer.intermediate.dense, Int8Linear) and isinstance(
        layer.attention.self._inference_qkv, Int8Linear
    )
    assert isinstance(layer.output.dense, Int8Linear) and isinstance(layer.attention.output.dense, Int8Linear)
    # the down-projection reads a GELU output: asymmetric codes; the others symmetric
    assert layer.output.dense.asymmetric and not layer.attention.output.dense.asymmetric
    assert not layer.intermediate.dense.asymmetric and not layer.attention.self._inference_qkv.asymmetric
    assert not isinstance(q.model.pooler.dense, Int8Linear)  # outside the encoder layers: float
    assert isinstance(q.model.embeddings.word_embeddings, torch.nn.Embedding)  # never quantized
    cos = torch.nn.functional.cosine_similarity(fp32, q(texts, return_tensors=True), dim=-1)
    mean_gate = 0.998 if weight_qmax() == 127 else 0.997
    assert float(cos.min()) >= 0.99 and float(cos.mean()) >= mean_gate, (float(cos.min()), float(cos.mean()))


def test_int8_vector_alone_and_in_a_batch():
    """A sentence's int8 vector alone and in a length-sorted batch of 32: an int8 product treats every row
    on its own, so what differs is attention's float rounding in another length group, now and then one
    code apart: min cosine >= 0.995 (measured 0.9990 on AVX2; where the CPU has bf16, attention runs in
    bf16 and rounds coarser), where fp32 agrees to 1e-5. One scale per batch would tie it to the others."""
    texts = [r["text"] for r in _polarity("test", 32)]
    for dtype, gate in (("fp32", 0.99999), ("int8", 0.995)):
        pipe = pipeline("sentence-embedding", model=asset_path("minilm"), dtype=dtype, batch_size=32)
        batch = pipe(texts, return_tensors=True).float()
        alone = torch.cat([pipe([t], return_tensors=True).float() for t in texts])
        cos = torch.nn.functional.cosine_similarity(batch, alone, dim=-1)
        assert float(cos.min()) >= gate, (dtype, float(cos.min()))
        if dtype == "fp32":
            torch.testing.assert_close(batch, alone, atol=1e-5, rtol=0)


def test_int8_linear_equals_its_dequantized_product():
    """Int8Linear is exactly (round(x/s_tok) * s_tok) @ (round(W/s_ch) * s_ch)^T + b, short inputs included,
    with s_ch = max|W_ch| / weight_qmax(): 127, or 63 on a CPU whose int8 products would saturate."""
    from bertkit.inference.int8 import Int8Linear, weight_qmax

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    sw = lin.weight.abs().amax(1) / weight_qmax()
    w = (torch.round(lin.weight / sw[:, None]) * sw[:, None]).detach()
    for asymmetric in (False, True):
        q = Int8Linear(lin, asymmetric=asymmetric)
        for kernel in dict.fromkeys(
            (q.kernel, "int_mm")
        ):  # oneDNN's u8 x s8 kernel where this torch has it, and the fallback
            q.kernel = kernel
            for rows in (1, 16, 17, 40):
                x = torch.randn(rows, 64) * torch.linspace(0.1, 5, 64)
                if asymmetric:  # x's range [min, max] on 256 codes: x ~ s * (code + 128) + min
                    x = torch.nn.functional.gelu(x)
                    lo, hi = x.amin(1, keepdim=True), x.amax(1, keepdim=True)
                    sx = (hi - lo) / 255
                    xd = torch.round((x - lo) / sx) * sx + lo
                else:
                    sx = x.abs().amax(1, keepdim=True) / 127
                    xd = torch.round(x / sx) * sx
                want = (xd @ w.T + lin.bias).detach()
                torch.testing.assert_close(q(x), want, atol=1e-4, rtol=1e-4, msg=f"{kernel} {asymmetric}")
                assert (q(x) - lin(x)).abs().max() < 0.05 * lin(x).abs().max()  # and close to the float product


def test_int8_asymmetric_codes_halve_the_error_on_gelu_outputs():
    """On a GELU output (nothing under -0.17) the asymmetric codes, the down-projection's, spread the row's
    range over all 256 codes where the symmetric ones use about half: the product's largest error against the
    float product, with the same int8 weights, falls by at least a third on real MiniLM activations
    (measured: to 0.52 of the symmetric codes' error)."""
    from bertkit.inference.int8 import Int8Linear
    from bertkit.tokenization import BertTokenizer

    model = BertModel.from_pretrained(asset_path("minilm"))
    dense = model.encoder.layer[3].output.dense
    seen: list[torch.Tensor] = []
    hook = dense.register_forward_pre_hook(lambda m, inp: seen.append(inp[0].reshape(-1, inp[0].shape[-1])))
    enc = BertTokenizer.from_pretrained(asset_path("minilm"))(
        [r["text"] for r in _polarity("test", 8)], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        model(**enc)
        hook.remove()
        x = seen[0]
        assert float(x.min()) > -0.2  # a GELU output
        sym, asym = Int8Linear(dense), Int8Linear(dense, asymmetric=True)
        assert torch.equal(sym.weight_t, asym.weight_t)
        # the same int8 weights, so the difference is the activations' codes
        w = (sym.weight_t.float() * sym.weight_scale).t()
        exact = x @ w.T + dense.bias
        err_sym, err_asym = ((q(x) - exact).abs().max(1).values.mean() for q in (sym, asym))
    assert float(err_asym) < float(err_sym) * 2 / 3, (float(err_asym), float(err_sym))


def test_int8_products_sum_exactly_on_real_weights_and_activations():
    """Whichever int8 product this CPU runs, every Int8Linear of a prepared MiniLM gives, on the activations
    real sentences give it, the exact integer sums of its int8 activations and weights, rescaled (stated
    tolerance: 1e-5 of the largest output). A kernel that saturates or rounds its sums is caught here: on an
    AVX2 CPU oneDNN's u8 x s8 kernel missed MiniLM's sums by up to 4x. Where that kernel passes its trial,
    every Int8Linear runs it, and its output equals the torch._int_mm path's."""
    from bertkit.inference.int8 import Int8Linear, _quantize_rows, onednn_int8_available

    q = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="int8")
    layers = q.model.encoder.layer
    mods = [layers[i].attention.self._inference_qkv for i in (0, 5)]
    mods += [m for i in (0, 5) for m in layers[i].modules() if isinstance(m, Int8Linear)]
    seen: dict[int, torch.Tensor] = {}

    def keep_first_input(m: torch.nn.Module, inp: tuple) -> None:
        seen.setdefault(id(m), inp[0].clone())

    hooks = [m.register_forward_pre_hook(keep_first_input) for m in mods]
    q([r["text"] for r in _polarity("test", 16)])
    for h in hooks:
        h.remove()
    assert len(seen) == len(mods) >= 6
    kernels = {"onednn", "int_mm"} if onednn_int8_available() else {"int_mm"}
    for m in mods:
        assert m.kernel == ("onednn" if onednn_int8_available() else "int_mm"), m
        x = seen[id(m)].reshape(-1, m.in_features).float()
        xq, sx, offset = _quantize_rows(x, m.inv_smooth, m.asymmetric)
        want = (xq.double() @ m.weight_t.double()) * sx.double() * m.weight_scale.double()
        if offset is not None:  # x ~ s * xq + offset: the offset times each output's weight sum
            want = want + offset.double() * (m.weight_t.double().sum(0) * m.weight_scale.double())
        if m.bias is not None:
            want = want + m.bias.double()
        # the products in float32 and before any fused GELU: a bf16 q/k/v output would round them apart
        kept = m.kernel, m.out_dtype, m._activate
        m.out_dtype, m._activate = None, None
        for kernel in kernels:
            m.kernel = kernel
            got = m(x).double()
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()), msg=kernel)
        m.kernel, m.out_dtype, m._activate = kept
    qkv = layers[0].attention.self._inference_qkv
    assert qkv(seen[id(qkv)]).dtype == (torch.bfloat16 if has_fast_bf16() else torch.float32)


def test_int8_up_projection_applies_its_gelu_unless_hooked():
    """The int8 up-projection applies its GELU in place and the GELU module passes that tensor through;
    with a hook on the projection they run apart: the hook sees the pre-activation output (GELU's
    minimum is -0.17) and the hidden states are the same as without the hook (1e-5)."""
    from bertkit.inference.int8 import Int8Linear
    from bertkit.tokenization import BertTokenizer

    model = BertModel.from_pretrained(asset_path("minilm"), dtype="int8")
    enc = BertTokenizer.from_pretrained(asset_path("minilm"))(
        [r["text"] for r in _polarity("test", 8)], padding=True, return_tensors="pt"
    )
    inter = model.encoder.layer[2].intermediate
    assert isinstance(inter.dense, Int8Linear)
    with torch.inference_mode():
        fused = model(**enc).last_hidden_state
        seen = {}
        handle = inter.dense.register_forward_hook(lambda m, inp, out: seen.update(x=inp[0], y=out.clone()))
        try:
            hooked = model(**enc).last_hidden_state
        finally:
            handle.remove()
        assert float(seen["y"].min()) < -0.5  # not activated
        torch.testing.assert_close(inter(seen["x"]), torch.nn.functional.gelu(seen["y"]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hooked, fused, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_int8_classifier_gate(polarity_clf):
    """int8 keeps polarity test accuracy within 0.5 points of fp32 (4 of 800 sentences)."""
    rows = _polarity("test")
    texts, gold = [r["text"] for r in rows], [r["label"] for r in rows]
    acc = {}  # sentences right, counted: a float difference of 0.005 can come out a hair over 0.005
    for dtype in ("fp32", "int8"):
        clf = pipeline("text-classification", model=polarity_clf, dtype=dtype)
        acc[dtype] = sum(p["label"] == g for p, g in zip(clf(texts), gold))
    from bertkit.inference.int8 import Int8Linear

    q = clf.model
    assert isinstance(q.bert.encoder.layer[0].intermediate.dense, Int8Linear)
    assert q.bert.embeddings.LayerNorm.weight.dtype == torch.float32
    assert acc["fp32"] > 0.7 * len(rows), acc  # the fine-tune learned something, so the comparison means something
    assert abs(acc["int8"] - acc["fp32"]) <= 0.005 * len(rows), acc


def test_ner_pipeline_tags_every_word_of_a_long_text(tmp_path):
    """A text far over 512 tokens: every word gets a tag (windows as in fine-tuning), none is cut."""
    import bertkit.modeling as bm
    from bertkit.tokenization import BertTokenizer

    torch.manual_seed(0)
    folder = tmp_path / "ner"
    m = bm.BertForTokenClassification.from_pretrained(
        str(asset_path("minilm")), num_labels=2, id2label={0: "B-X", 1: "B-Y"}, label2id={"B-X": 0, "B-Y": 1}
    )
    m.save_pretrained(str(folder), tokenizer=BertTokenizer.from_pretrained(str(asset_path("minilm"))))
    words = " ".join(r["text"] for r in _polarity("train", 60)).replace(",", "").replace(".", "").split()
    text = " ".join(w for w in words if w.isalpha())
    ner = pipeline("ner", model=folder, aggregation_strategy="first")  # one label per word
    ents = ner(text)
    n_words = len(text.split())
    assert len(ner.tokenizer(text, verbose=False)["input_ids"]) > 700
    # labels B-X / B-Y only: each word is its own entity, so every word must come back
    assert len(ents) == n_words
    assert [text[e["start"] : e["end"]] for e in ents] == text.split()
    # each word as the tokenizer puts its tokens back together (lower-cased, accents stripped), as transformers
    assert [e["word"] for e in ents] == [
        ner.tokenizer.decode(ner.tokenizer.encode(w, add_special_tokens=False)) for w in text.split()
    ]
    assert ents[-1]["end"] == len(text)
    # the per-token view covers the tail as well
    tokens = ner(text, aggregation_strategy="none")
    assert max(t["index"] for t in tokens) == len(ner.tokenizer(text, verbose=False)["input_ids"]) - 2


@pytest.mark.slow
def test_onnx_export_matches_bertkit_in_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from bertkit.cli import main as cli_main
    from bertkit.tokenization import BertTokenizer

    out = tmp_path / "model.onnx"
    assert cli_main(["export", "onnx", "--model", str(asset_path("minilm")), "--output", str(out)]) == 0
    sess = ort.InferenceSession(str(out))
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    model = BertModel.from_pretrained(asset_path("minilm"))
    for texts in ([r["text"] for r in _polarity("test", 7)], ["one short sentence ."]):  # other batch and length
        enc = tok(texts, padding=True, return_tensors="np")
        feed = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
        got = sess.run(["last_hidden_state"], feed)[0]
        with torch.inference_mode():
            want = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).last_hidden_state.numpy()
        mask = feed["attention_mask"].astype(bool)
        np.testing.assert_allclose(got[mask], want[mask], atol=1e-4)


@pytest.mark.parametrize("dtype,min_cos", [("bf16", 0.99), ("int8", 0.99)])
def test_electra_takes_the_fused_bf16_and_int8_paths(electra_clf, dtype, min_cos):
    """ELECTRA's attention is BERT's, so prepare_for_inference fuses its q/k/v (and int8 quantizes the
    fused projection); embeddings_project stays in float. Sentence vectors of 64 real sentences keep
    min cosine >= 0.99 against fp32 (bf16 kernels differ between CPUs, far inside that margin)."""
    from bertkit.inference.int8 import Int8Linear

    texts = [r["text"] for r in _polarity("test", 64)]
    fp32 = pipeline("sentence-embedding", model=electra_clf, dtype="fp32")(texts, return_tensors=True)
    low = pipeline("sentence-embedding", model=electra_clf, dtype=dtype)
    attn = low.model.encoder.layer[0].attention.self
    assert getattr(attn, "_inference_qkv", None) is not None  # q, k, v fused into one projection
    assert isinstance(attn._inference_qkv, Int8Linear) == (dtype == "int8")
    assert not isinstance(low.model.embeddings_project, Int8Linear)
    cos = torch.nn.functional.cosine_similarity(fp32, low(texts, return_tensors=True).float(), dim=-1)
    assert float(cos.min()) >= min_cos, float(cos.min())
