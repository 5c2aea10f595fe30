"""The same promises on a CUDA GPU: parity with transformers and sentence-transformers on the GPU, the
packed inference path, the precisions a GPU offers, training and generation. Skipped without CUDA (CI
has none); run where a GPU is lent.

Tolerances: fp32 outputs within 1e-4 of transformers' (GPU kernels sum in other orders than the CPU's;
TF32 stays off, as torch's default for matrix products), bf16 embeddings at min cosine 0.999.
"""

from __future__ import annotations

import csv

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device here", allow_module_level=True)

transformers = pytest.importorskip("transformers")

from conftest import finetune_polarity  # noqa: E402
from test_family_contract import TASK_CLASSES, _config, _inputs  # noqa: E402  (the CPU contract's set-up)

from bertkit.assets import asset_path  # noqa: E402
from bertkit.inference import prepare_for_inference  # noqa: E402
from bertkit.modeling import registry  # noqa: E402
from bertkit.modeling.auto import auto_class_for_task  # noqa: E402
from bertkit.pipelines import pipeline  # noqa: E402
from bertkit.tokenization import BertTokenizer  # noqa: E402

CUDA = torch.device("cuda")
TOL = 1e-4


def _polarity(split: str, n: int) -> list[dict]:
    with open(asset_path(f"polarity-{split}"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))[:n]


@pytest.fixture(scope="module")
def batch() -> dict[str, torch.Tensor]:
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    texts = [r["text"] for r in _polarity("test", 4)]
    enc = tok(texts, padding=True, truncation=True, max_length=40, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any(), "the batch must contain padding"
    return dict(enc)


def _close(ours, theirs, mask: torch.Tensor) -> None:
    real = mask.bool()
    keys = [k for k in theirs.keys() if k not in ("past_key_values", "cache", "loss")]
    assert keys
    for key in keys:
        a, b = ours[key], theirs[key]
        for x, y in zip(a, b) if isinstance(b, tuple) else [(a, b)]:
            assert x.device.type == "cuda" and x.shape == y.shape, key
            if y.dim() >= 2 and tuple(y.shape[:2]) == tuple(real.shape):
                x, y = x[real], y[real]
            diff = (x.float() - y.float()).abs().max().item()
            assert diff < TOL, (key, diff)


@pytest.mark.parametrize("model_type,task", TASK_CLASSES, ids=[f"{m}-{t}" for m, t in TASK_CLASSES])
def test_every_family_matches_transformers_on_the_gpu(model_type, task, batch, tmp_path):
    """Each family and task class: outputs in eval mode and, prepared for inference, on the packed path;
    then one training step's gradients against transformers' (dropout off so both compute the same)."""
    name = registry.family(model_type).class_name(task)
    torch.manual_seed(0)
    drop = {"dropout": 0.0, "attention_dropout": 0.0, "seq_classif_dropout": 0.0, "qa_dropout": 0.0}
    if model_type == "gpt2":
        drop = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "summary_first_dropout": 0.0}
    elif model_type in ("bert", "electra"):
        drop = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "summary_last_dropout": 0.0}
    hf = getattr(transformers, name)(_config(model_type, task, 30522, **drop)).eval()
    hf.save_pretrained(tmp_path)
    hf = hf.to(CUDA)
    ours = auto_class_for_task(task).from_pretrained(tmp_path).to(CUDA)
    inputs = {k: v.to(CUDA) for k, v in _inputs(model_type, task, batch).items()}
    mask = inputs["attention_mask"]
    with torch.no_grad():
        _close(ours(**inputs, output_hidden_states=True), hf(**inputs, output_hidden_states=True), mask)

    # Training: the gradients of one fixed random readout of the first output (real tokens only).
    ours.train()
    hf.train()
    a = _readout(ours(**inputs)[0], mask)
    b = _readout(hf(**inputs)[0], mask)
    assert abs(a.item() - b.item()) < TOL * max(1.0, abs(b.item())), (a.item(), b.item())
    a.backward()
    b.backward()
    theirs = dict(hf.named_parameters())
    for k, p in ours.named_parameters():
        g = theirs[k].grad
        if p.grad is None:
            assert g is None or not g.any(), k
            continue
        assert (p.grad - g).abs().max().item() < 10 * TOL * max(1.0, g.abs().max().item()), k

    # Prepared for inference: fused projections, and batches padded rather than packed on the GPU.
    ours.eval()
    prepare_for_inference(ours, "fp32")
    with torch.no_grad():
        _close(ours(**inputs, output_hidden_states=True), hf.eval()(**inputs, output_hidden_states=True), mask)


def _readout(out: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A scalar from ``out`` through fixed random weights, zero on padding for per-token outputs."""
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out.device)
    if out.dim() >= 2 and tuple(out.shape[:2]) == tuple(mask.shape):
        w = w * mask.reshape(*mask.shape, *([1] * (out.dim() - 2)))
    return (out.float() * w).sum()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [r["text"] for r in _polarity("test", 256)]


@pytest.fixture(scope="module")
def reference(texts) -> torch.Tensor:
    """sentence-transformers' fp32 embeddings of ``texts`` on the GPU."""
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(asset_path("minilm")), device="cuda", model_kwargs={"dtype": torch.float32})
    return torch.as_tensor(model.encode(texts, batch_size=32, normalize_embeddings=True)).float()


@pytest.mark.parametrize("dtype,min_cos", [("fp32", 0.99999), ("bf16", 0.999), ("auto", 0.999)])
def test_sentence_embeddings_on_the_gpu(dtype, min_cos, texts, reference):
    emb = pipeline("sentence-embedding", model=asset_path("minilm"), device="cuda", dtype=dtype, truncation="cut")
    assert emb.device.type == "cuda"
    assert emb.dtype == ("bf16" if dtype == "auto" else dtype)  # a GPU with bf16 takes it for auto
    got = emb(texts, return_tensors=True).float().cpu()
    cos = torch.nn.functional.cosine_similarity(got, reference, dim=-1)
    assert cos.min().item() >= min_cos, cos.min().item()


def test_int8_on_the_gpu_is_refused_by_name():
    with pytest.raises(ValueError, match=r"int8.*CPU.*cuda"):
        pipeline("sentence-embedding", model=asset_path("minilm"), device="cuda", dtype="int8")


def test_finetune_on_the_gpu_learns_and_loads_on_the_cpu(tmp_path, capsys):
    """A real fine-tune on the GPU (the Trainer's bf16 autocast there): better than chance on held-out
    sentences, and the saved folder gives the same predictions on the CPU."""
    out = finetune_polarity(tmp_path / "model", device="cuda")
    rows = _polarity("test", 400)
    texts = [r["text"] for r in rows]
    gpu = pipeline("text-classification", model=out, device="cuda")
    cpu = pipeline("text-classification", model=out, device="cpu")
    a = [p["label"] for p in gpu(texts)]
    b = [p["label"] for p in cpu(texts)]
    labels = gpu.model.config.id2label
    gold = [labels[int(r["label"])] if r["label"].isdigit() else r["label"] for r in rows]
    accuracy = sum(x == y for x, y in zip(a, gold)) / len(gold)
    assert accuracy >= 0.65, accuracy  # chance is 0.5; one epoch of 1,600 sentences reaches ~0.75 on the CPU
    assert sum(x == y for x, y in zip(a, b)) >= 0.99 * len(a)

    # `bertkit evaluate --device cuda`: the CPU's metrics within half a point.
    from bertkit.cli import main

    scores = {}
    for device in ("cuda", "cpu"):
        capsys.readouterr()
        argv = ["evaluate", "--model", str(out), "--data", str(asset_path("polarity-test"))]
        assert main([*argv, "--device", device, "--no-progress"]) == 0
        scores[device] = dict(line.split("\t") for line in capsys.readouterr().out.splitlines() if "\t" in line)
    assert abs(float(scores["cuda"]["accuracy"]) - float(scores["cpu"]["accuracy"])) <= 0.005, scores


def test_gpt2_greedy_generation_is_the_same_on_the_gpu(tmp_path):
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=500)
    ).eval()
    hf.save_pretrained(tmp_path)
    ours = auto_class_for_task("causal-lm").from_pretrained(tmp_path)
    prompt = torch.tensor([[5, 17, 42, 7], [0, 0, 9, 11]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    cpu = ours.generate(prompt, attention_mask=mask, max_new_tokens=12)
    ours = ours.to(CUDA)
    gpu = ours.generate(prompt.to(CUDA), attention_mask=mask.to(CUDA), max_new_tokens=12)
    ref = hf.to(CUDA).generate(
        prompt.to(CUDA), attention_mask=mask.to(CUDA), max_new_tokens=12, do_sample=False, pad_token_id=0
    )
    assert gpu.device.type == "cuda"
    assert torch.equal(gpu.cpu(), cpu)
    assert torch.equal(gpu.cpu(), ref.cpu())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_model_prepared_on_the_cpu_runs_after_moving_to_the_gpu(dtype, texts, reference):
    """``from_pretrained(folder, dtype=...)`` prepares on the CPU (oneDNN-packed weights, fused
    projections); ``.to("cuda")`` afterwards must give a model that runs there, at the same precision."""
    from bertkit.modeling import BertModel

    folder = asset_path("minilm")
    model = BertModel.from_pretrained(folder, dtype=dtype).to("cuda")
    tok = BertTokenizer.from_pretrained(folder)
    enc = tok(texts[:64], padding=True, truncation=True, max_length=128, return_tensors="pt")
    enc = {k: v.to(CUDA) for k, v in enc.items()}
    with torch.inference_mode():
        h = model(**enc).last_hidden_state.float()
    m = enc["attention_mask"].unsqueeze(-1).float()
    v = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).cpu()
    cos = torch.nn.functional.cosine_similarity(v, reference[:64], dim=-1)
    assert cos.min().item() >= (0.99999 if dtype == "fp32" else 0.999), cos.min().item()


def test_an_int8_model_moved_to_the_gpu_is_refused_by_name():
    from bertkit.modeling import BertModel

    model = BertModel.from_pretrained(asset_path("minilm"), dtype="int8")
    with pytest.raises(ValueError, match=r"int8.*CPU"):
        model.to("cuda")


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_pretraining_on_the_gpu_resumes_and_loads_in_transformers(objective, tmp_path, monkeypatch):
    """``pretrain`` on the GPU at the default precision (bf16 autocast there): the loss falls, a run
    killed after its step-10 checkpoint resumes to the same losses (within the GPU's nondeterministic
    gradient sums), and the output folder gives transformers' logits on the GPU."""
    import json
    import shutil

    from bertkit.training.pretraining import PretrainingArguments, pretrain

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "polarity.txt"  # real sentences, one per line, the labels left out
    corpus.write_text("\n".join(r["text"] for r in _polarity("train", 3000)) + "\n", encoding="utf-8")

    def args(out, **kw):
        extra = {"generator_size": 0.5} if objective == "electra" else {}
        base = dict(
            output=str(out),
            corpus=[str(corpus)],
            vocab=str(asset_path("vocab-uncased")),
            config="tiny",
            objective=objective,
            seq_len=64,
            batch_size=32,
            max_steps=20,
            lr=1e-3,
            warmup_steps=4,
            save_every=10,
            eval_every=10,
            eval_instances=64,
            seed=0,
            progress=False,
            device="cuda",
        )
        return PretrainingArguments(**{**base, **extra, **kw})

    full = tmp_path / "full"
    pretrain(args(full))
    rows = [json.loads(x) for x in (full / "metrics.jsonl").read_text().splitlines() if x.strip()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 20 and sum(losses[-5:]) < sum(losses[:5]), losses

    killed = tmp_path / "killed"
    shutil.copytree(full, killed)
    shutil.rmtree(killed / "checkpoints" / "step-0000020")
    for p in killed.iterdir():
        if p.name not in ("checkpoints", "metrics.jsonl", "run.json") and not p.name.startswith("."):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    assert pretrain(args(killed, resume=True)).step == 20
    again = [json.loads(x) for x in (killed / "metrics.jsonl").read_text().splitlines() if x.strip()]
    resumed = [r["loss"] for r in again if "loss" in r]
    assert [r["step"] for r in again if "loss" in r] == list(range(1, 21))
    torch.testing.assert_close(torch.tensor(resumed), torch.tensor(losses), rtol=2e-2, atol=0)

    name = "ElectraForPreTraining" if objective == "electra" else "BertForMaskedLM"
    ours = auto_class_for_task("pretraining" if objective == "electra" else "masked-lm").from_pretrained(full)
    theirs = getattr(transformers, name).from_pretrained(str(full)).to(CUDA).eval()
    tok = BertTokenizer.from_pretrained(full)
    enc = tok([r["text"] for r in _polarity("test", 8)], padding=True, return_tensors="pt")
    enc = {k: v.to(CUDA) for k, v in enc.items()}
    with torch.no_grad():
        a = ours.to(CUDA).eval()(**enc).logits
        b = theirs(**enc).logits
    real = enc["attention_mask"].bool()
    assert (a[real] - b[real]).abs().max().item() < TOL


def test_serving_on_the_gpu_over_http(texts, reference):
    """``bertkit serve --device cuda`` on a free local port: /info names the GPU, and /embed answers
    sentence-transformers' vectors."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from bertkit.serving.process import server_process

    with server_process(asset_path("minilm"), ["--dtype", "fp32", "--device", "cuda"]) as srv:
        info = httpx.get(srv.url + "/info", timeout=30).json()
        r = httpx.post(srv.url + "/embed", json={"inputs": texts[:32]}, timeout=120)
        assert srv.stop() == 0
    assert info["device"] == "cuda:0" and info["dtype"] == "fp32"
    assert r.status_code == 200, r.text
    got = torch.tensor(r.json()["embeddings"])
    cos = torch.nn.functional.cosine_similarity(got, reference[:32], dim=-1)
    assert cos.min().item() >= 0.99999, cos.min().item()


def test_index_and_search_on_the_gpu(texts, tmp_path, capsys):
    """``bertkit index --device cuda`` stores the vectors the CPU would (float16 storage), and
    ``bertkit search --device cuda`` finds a corpus sentence first for itself."""
    from bertkit.cli import main
    from bertkit.search import load_index

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts[:200]) + "\n", encoding="utf-8")
    vectors = {}
    for n, device in enumerate(("cuda", "cpu")):
        out = tmp_path / f"index-{n}"
        argv = ["index", "--model", str(asset_path("minilm")), "--input", str(corpus), "--output", str(out)]
        assert main([*argv, "--dtype", "fp32", "--device", device]) == 0
        vectors[device] = torch.as_tensor(load_index(out).vectors).float()
    cos = torch.nn.functional.cosine_similarity(vectors["cuda"], vectors["cpu"], dim=-1)
    assert cos.min().item() >= 0.9999, cos.min().item()
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "index-0"), "--device", "cuda", texts[7]]) == 0
    hits = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert hits and hits[0].endswith(texts[7]), hits[:2]


def test_sentence_transformer_class_on_the_gpu(texts, reference):
    """``bertkit.SentenceTransformer(..., device="cuda")``, sentence-transformers' call: its vectors on
    the GPU in fp32, and in bf16 (``model_kwargs={"dtype": torch.bfloat16}``) within the bf16 gate."""
    from bertkit import SentenceTransformer

    model = SentenceTransformer(str(asset_path("minilm")), device="cuda")
    got = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_tensor=True)
    assert got.device.type == "cuda"
    cos = torch.nn.functional.cosine_similarity(got.float().cpu(), reference, dim=-1)
    assert cos.min().item() >= 0.99999, cos.min().item()
    # the list form and token vectors stay on the model's device too, as sentence-transformers' do
    assert all(v.device.type == "cuda" for v in model.encode(texts[:4], convert_to_numpy=False))
    assert model.encode(texts[0], output_value="token_embeddings").device.type == "cuda"
    assert model.encode(texts[:4], convert_to_tensor=True, precision="int8").dtype == torch.int8
    sims = model.similarity(got[:8], got[:8])
    assert torch.allclose(sims.float().cpu(), reference[:8] @ reference[:8].T, atol=1e-4)

    half = SentenceTransformer(str(asset_path("minilm")), device="cuda", model_kwargs={"dtype": torch.bfloat16})
    got = half.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_tensor=True)
    cos = torch.nn.functional.cosine_similarity(got.float().cpu(), reference, dim=-1)
    assert cos.min().item() >= 0.999, cos.min().item()


def test_cross_encoder_on_the_gpu_scores_as_sentence_transformers(texts, tmp_path):
    """``bertkit.CrossEncoder(..., device="cuda")`` against sentence-transformers' ``CrossEncoder`` on the
    same GPU, for a seeded one-label head (sigmoid scores) and ``rank``'s order."""
    st = pytest.importorskip("sentence_transformers")
    from bertkit import CrossEncoder
    from bertkit.modeling.auto import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(asset_path("minilm"), num_labels=1)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.randn(model.classifier.weight.shape, generator=gen) * 0.5)
        model.classifier.bias.copy_(torch.randn(model.classifier.bias.shape, generator=gen) * 0.5)
    model.save_pretrained(tmp_path / "ce", tokenizer=AutoTokenizer.from_pretrained(asset_path("minilm")))
    pairs = [(texts[i], texts[i + 1]) for i in range(0, 64, 2)]
    ours = CrossEncoder(str(tmp_path / "ce"), device="cuda")
    theirs = st.CrossEncoder(str(tmp_path / "ce"), device="cuda")
    a = torch.as_tensor(ours.predict(pairs, batch_size=16))
    b = torch.as_tensor(theirs.predict(pairs, batch_size=16))
    assert a.shape == b.shape == (32,)
    assert (a - b).abs().max().item() < TOL
    assert b.std().item() > 0.01  # the seeded head spreads the scores, so the order below means something
    query, docs = texts[0], texts[1:21]
    assert [r["corpus_id"] for r in ours.rank(query, docs)] == [r["corpus_id"] for r in theirs.rank(query, docs)]


def test_activation_checkpointing_on_the_gpu_gives_the_same_gradients(batch):
    """Recomputed blocks replay the GPU's dropout masks: the gradients with checkpointing equal those
    without, from the same seed, for every family (the CPU test's contract, on CUDA)."""
    from test_activation_checkpointing import _grads_and_saved_bytes, _models
    from test_activation_checkpointing import _inputs as _ckpt_inputs

    for name, model in _models().items():
        model = model.to(CUDA)
        inputs = {k: v.to(CUDA) for k, v in _ckpt_inputs(name, model, batch).items()}
        plain, plain_bytes = _grads_and_saved_bytes(model, inputs)
        model.activation_checkpointing_enable()
        ckpt, ckpt_bytes = _grads_and_saved_bytes(model, inputs)
        assert plain.keys() == ckpt.keys() and len(plain) > 10, name
        for key in plain:
            torch.testing.assert_close(ckpt[key], plain[key], atol=1e-5, rtol=1e-4, msg=f"{name} {key}")
        assert ckpt_bytes < plain_bytes * 2 / 3, (name, ckpt_bytes, plain_bytes)
        other, _ = _grads_and_saved_bytes(model, inputs, seed=1)
        assert any(not torch.allclose(other[k], ckpt[k]) for k in ckpt), name  # dropout is on


@pytest.mark.parametrize(
    "kwargs",
    [{"num_beams": 3}, {"num_beams": 4, "num_return_sequences": 2, "length_penalty": 0.5, "no_repeat_ngram_size": 2}],
)
def test_gpt2_beam_search_is_transformers_on_the_gpu(kwargs, tmp_path):
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=500)
    ).eval()
    hf.save_pretrained(tmp_path)
    ours = auto_class_for_task("causal-lm").from_pretrained(tmp_path).to(CUDA)
    prompt = torch.tensor([[5, 17, 42, 7], [0, 0, 9, 11]], device=CUDA)
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]], device=CUDA)
    got = ours.generate(prompt, attention_mask=mask, max_new_tokens=10, **kwargs)
    ref = hf.to(CUDA).generate(
        prompt, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0, **kwargs
    )
    assert got.device.type == "cuda"
    assert torch.equal(got.cpu(), ref.cpu())


def test_sentence_transformer_fit_on_the_gpu(tmp_path):
    """``fit`` on a model loaded with ``device="cuda"``: it trains there, the vectors move, and the
    saved folder, loaded by sentence-transformers on the GPU, gives the vectors bertkit gives."""
    st = pytest.importorskip("sentence_transformers")
    from torch.utils.data import DataLoader

    from bertkit import InputExample, SentenceTransformer, losses

    with open(asset_path("sts-lee"), newline="", encoding="utf-8") as f:
        rows = [(r["sentence1"], r["sentence2"], float(r["score"])) for r in csv.DictReader(f)][:96]
    texts = [r[0] for r in rows[:16]]
    model = SentenceTransformer(str(asset_path("minilm")), device="cuda")
    model.max_seq_length = 64
    before = model.encode(texts, convert_to_tensor=True)
    examples = [InputExample(texts=[a, b], label=s) for a, b, s in rows]
    out = tmp_path / "out"
    model.fit(
        train_objectives=[(DataLoader(examples, shuffle=True, batch_size=16), losses.CoSENTLoss(model))],
        epochs=1,
        warmup_steps=1,
        optimizer_params={"lr": 3e-4},
        output_path=str(out),
        show_progress_bar=False,
    )
    assert all(p.device.type == "cuda" for p in model.training_model.parameters())
    after = model.encode(texts, convert_to_tensor=True)
    assert after.device.type == "cuda"
    assert (after - before).abs().max().item() > 1e-3  # it trained
    want = st.SentenceTransformer(str(out), device="cuda").encode(texts, convert_to_tensor=True)
    torch.testing.assert_close(after.float().cpu(), want.float().cpu(), atol=1e-4, rtol=1e-3)


def test_sentence_transformer_trainer_on_the_gpu_equals_hand_written_steps(lee, tmp_path):
    """``SentenceTransformerTrainer`` picks the GPU as sentence-transformers' Trainer does and trains in
    fp32 there (transformers' names, no ``bf16=True``): 3 MNRL steps change every weight as 3
    hand-written AdamW steps of sentence-transformers' loss on its model on the same GPU do (the CPU
    test's contract and tolerance); encode() then gives the trained vectors on the GPU, and the saved
    folder gives them in sentence-transformers."""
    import shutil

    st = pytest.importorskip("sentence_transformers")
    from conftest import without_dropout
    from sentence_transformers.sentence_transformer import losses as stl
    from test_st_trainer import LENGTH, _args, _assert_same_changes, _reference_steps, _seedable_batches

    from bertkit import SentenceTransformer, SentenceTransformerTrainer, losses

    folder = without_dropout(shutil.copytree(asset_path("minilm"), tmp_path / "minilm"))
    rows = lee[::23][:12]
    ref = st.SentenceTransformer(str(folder), device=CUDA.type)
    ref.max_seq_length = LENGTH
    ref.train()
    batches = _seedable_batches(12, 4, seed=12)
    mnrl = stl.MultipleNegativesRankingLoss(ref)
    steps = [(mnrl, [[rows[i][0] for i in b], [rows[i][1] for i in b]], None) for b in batches]
    start, enc = _reference_steps(ref, steps, 5e-5, 0.25)

    ours = SentenceTransformer(str(folder), device=CUDA.type)
    ours.max_seq_length = LENGTH
    data = {"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows]}
    args = _args(tmp_path / "run", per_device_train_batch_size=4, warmup_ratio=0.25, logging_steps=1)
    SentenceTransformerTrainer(
        model=ours, args=args, train_dataset=data, loss=losses.MultipleNegativesRankingLoss(ours)
    ).train()
    assert all(p.device.type == CUDA.type for p in ours.training_model.parameters())
    _assert_same_changes(start, enc, ours)

    probe = [r[0] for r in lee[1::41][:8]]
    got = ours.encode(probe, convert_to_tensor=True)
    assert got.device.type == CUDA.type
    ref.eval()
    want = ref.encode(probe, convert_to_tensor=True)
    torch.testing.assert_close(got.float().cpu(), want.float().cpu(), atol=1e-4, rtol=1e-3)
    ours.save_pretrained(str(tmp_path / "final"))
    back = st.SentenceTransformer(str(tmp_path / "final"), device=CUDA.type)
    back.max_seq_length = LENGTH
    torch.testing.assert_close(
        back.encode(probe, convert_to_tensor=True).float().cpu(), got.float().cpu(), atol=1e-4, rtol=1e-3
    )


def test_cross_encoder_trainer_on_the_gpu_equals_hand_written_steps(lee, tmp_path):
    """``CrossEncoderTrainer`` with its default BCE loss on the GPU: 2 steps change every weight as 2
    hand-written steps of sentence-transformers' loss on its CrossEncoder on the same GPU do; predict()
    and the saved folder loaded by sentence-transformers give the same scores."""
    import numpy as np

    st = pytest.importorskip("sentence_transformers")
    from conftest import seeded_head_folder, without_dropout
    from sentence_transformers.cross_encoder import losses as cel
    from test_cross_encoder_trainer import LENGTH, _args, _assert_same_changes, _reference_steps
    from test_st_trainer import _seedable_batches

    from bertkit.cross_encoder import CrossEncoder, CrossEncoderTrainer

    head = tmp_path / "head1"
    seeded_head_folder(head, 1, seed=1)
    without_dropout(head)
    # documents cut to 8 words, so no pair is truncated: tokenizers 0.23.2 and 0.23.3 split an odd
    # truncation budget between a pair's two texts differently, and that is not what this test checks
    rows = [(" ".join(a.split()[:8]), " ".join(b.split()[:8]), s) for a, b, s in lee[::19][:16]]
    lo, hi = min(r[2] for r in lee), max(r[2] for r in lee)
    label = [(r[2] - lo) / (hi - lo) for r in rows]
    ref = st.CrossEncoder(str(head), device=CUDA.type, max_length=LENGTH)
    ref.train()
    bce = cel.BinaryCrossEntropyLoss(ref)
    batches = _seedable_batches(16, 8, seed=12)
    steps = [
        (bce, [[rows[i][0] for i in b], [rows[i][1] for i in b]], torch.tensor([label[i] for i in b])) for b in batches
    ]
    start = _reference_steps(ref, steps, 5e-5, 0.5)

    ours = CrossEncoder(str(head), device=CUDA.type, max_length=LENGTH)
    data = {"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows], "score": label}
    args = _args(tmp_path / "run", per_device_train_batch_size=8, warmup_ratio=0.5, logging_steps=1)
    CrossEncoderTrainer(model=ours, args=args, train_dataset=data).train()
    assert all(p.device.type == CUDA.type for p in ours.training_model.parameters())
    _assert_same_changes(start, ref, ours)

    probe = [(" ".join(r[0].split()[:8]), " ".join(r[1].split()[:8])) for r in lee[1::41][:8]]
    ref.eval()
    got = ours.predict(probe)
    np.testing.assert_allclose(got, ref.predict(probe), atol=1e-4)
    ours.save_pretrained(str(tmp_path / "final"))
    back = st.CrossEncoder(str(tmp_path / "final"), device=CUDA.type, max_length=LENGTH)
    np.testing.assert_allclose(back.predict(probe), got, atol=1e-4)


def test_object_calls_move_a_model_to_the_gpu_as_sentence_transformers(texts, reference, tmp_path):
    """sentence-transformers' moves on a model loaded on the CPU: ``.cuda()`` and ``.to("cuda")`` put the
    weights (``model[0].auto_model``, ``state_dict()``) and the vectors on the GPU with fp32 vectors;
    ``.bfloat16()`` there stays within the bf16 gate; ``.cpu()`` brings it back. A CrossEncoder's
    ``.cuda()`` scores as sentence-transformers' on the GPU."""
    import numpy as np

    st = pytest.importorskip("sentence_transformers")
    from conftest import seeded_head_folder

    from bertkit import CrossEncoder, SentenceTransformer

    def cos_min(vectors):
        got = torch.as_tensor(vectors).float().cpu()
        return torch.nn.functional.cosine_similarity(got, reference, dim=-1).min().item()

    for move in ("cuda", "to"):
        model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
        moved = model.cuda() if move == "cuda" else model.to(CUDA.type)
        assert moved is model and model.device.type == CUDA.type
        assert next(model[0].auto_model.parameters()).device.type == CUDA.type
        assert model.state_dict()["0.model.embeddings.word_embeddings.weight"].device.type == CUDA.type
        got = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_tensor=True)
        assert got.device.type == CUDA.type and cos_min(got) >= 0.99999, (move, cos_min(got))
    assert model.bfloat16() is model
    got = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_tensor=True)
    assert got.device.type == CUDA.type and cos_min(got) >= 0.999, cos_min(got)
    model.float().cpu()
    assert model.device.type == "cpu"
    got = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_tensor=True)
    assert got.device.type == "cpu" and cos_min(got) >= 0.999  # bf16-rounded weights stay rounded, as there

    seeded_head_folder(tmp_path / "ce", 1, seed=0)
    pairs = [(texts[i], texts[i + 1]) for i in range(0, 32, 2)]
    ours = CrossEncoder(str(tmp_path / "ce"), device="cpu")
    assert ours.cuda() is ours
    theirs = st.CrossEncoder(str(tmp_path / "ce"), device=CUDA.type)
    np.testing.assert_allclose(ours.predict(pairs), theirs.predict(pairs), atol=TOL)


def test_a_dense_folder_on_the_gpu_embeds_as_sentence_transformers(texts, tmp_path):
    """A folder sentence-transformers saved with a Dense after pooling: bertkit on the GPU gives its
    vectors on the GPU (fp32), and ``fit`` trains it there (the Dense moves)."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers import models as st_models
    from torch import nn

    from bertkit import SentenceTransformer

    tf = st_models.Transformer(str(asset_path("minilm")), max_seq_length=128)
    pool = st_models.Pooling(384, pooling_mode="mean")
    gen = torch.Generator().manual_seed(0)
    dense = st_models.Dense(
        384,
        256,
        activation_function=nn.Tanh(),
        init_weight=torch.randn(256, 384, generator=gen) * 0.05,
        init_bias=torch.randn(256, generator=gen) * 0.05,
    )
    ref = st.SentenceTransformer(modules=[tf, pool, dense, st_models.Normalize()], device=CUDA.type)
    ref.save(str(tmp_path / "dense"))
    want = ref.encode(texts[:32], convert_to_tensor=True)
    ours = SentenceTransformer(str(tmp_path / "dense"), device=CUDA.type)
    got = ours.encode(texts[:32], convert_to_tensor=True)
    assert got.device.type == CUDA.type and got.shape == (32, 256)
    torch.testing.assert_close(got.float().cpu(), want.float().cpu(), atol=1e-4, rtol=1e-3)
