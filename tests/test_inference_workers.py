"""Whole batches forwarded by several threads at once (one core each) give what one batch at a time
gives, on the real MiniLM checkpoint and real text, and only where running at once is safe."""

from __future__ import annotations

import csv
import threading

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.inference import inference_workers, prepare_for_inference, run_batched
from bertkit.inference.fused import FusedOutput
from bertkit.modeling import BertModel
from bertkit.pipelines import pipeline
from bertkit.tokenization import BertTokenizer


def _texts(n: int) -> list[str]:
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:n]


@pytest.fixture(scope="module")
def features():
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    enc = tok(_texts(96), truncation=True, max_length=256)
    return [{k: enc[k][i] for k in ("input_ids", "attention_mask", "token_type_ids")} for i in range(96)]


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_workers_give_what_one_batch_at_a_time_gives(features, dtype, two_threads):
    model = prepare_for_inference(BertModel.from_pretrained(asset_path("minilm")), dtype)
    assert inference_workers(model, 12, torch.device("cpu")) == 2
    one = run_batched(model, features, 8, outputs=("last_hidden_state",), workers=1)
    two = run_batched(model, features, 8, outputs=("last_hidden_state",), workers=2)
    for f, a, b in zip(features, one, two):
        assert a["last_hidden_state"].shape == b["last_hidden_state"].shape == (len(f["input_ids"]), 384)
        x, y = b["last_hidden_state"], a["last_hidden_state"]
        if dtype == "fp32":
            np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-5)
        else:
            # bf16 outputs: a oneDNN that splits a product by thread count (AMX) may round one bf16
            # step apart; a batch put back in the wrong place would be far from every row it meets
            cos = (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
            assert float(cos.min()) >= 0.9999, float(cos.min())


def test_the_pipeline_takes_the_workers_and_matches_transformers(two_threads):
    transformers = pytest.importorskip("transformers")
    texts = _texts(128)
    pipe = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="fp32", batch_size=16)
    assert inference_workers(pipe.model, len(texts) // 16, torch.device("cpu")) == 2  # 8 batches, two workers
    got = pipe(texts, return_tensors=True)
    tok = transformers.AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    ref_model = transformers.BertModel.from_pretrained(str(asset_path("minilm"))).eval()
    with torch.no_grad():
        enc = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        hidden = ref_model(**enc).last_hidden_state
        m = enc["attention_mask"][..., None].float()
        ref = torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-4)


def test_threads_are_put_back_after_the_pool_starts(features, two_threads):
    model = BertModel.from_pretrained(asset_path("minilm")).eval()
    run_batched(model, features[:40], 4, outputs=("last_hidden_state",), workers=2)
    assert torch.get_num_threads() == 2
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert seen == [2]  # a thread started later gets the caller's count, not the workers' one


def test_workers_stay_one_where_running_at_once_is_not_safe(two_threads):
    model = BertModel.from_pretrained(asset_path("minilm")).eval()
    cpu = torch.device("cpu")
    assert inference_workers(model, 1, cpu) == 1  # one batch: its products take both cores
    assert inference_workers(model, 40, torch.device("meta")) == 1
    assert inference_workers(lambda **kw: None, 40, cpu) == 1  # a compiled or foreign callable
    handle = model.encoder.layer[0].output.register_forward_hook(lambda *a: None)
    assert inference_workers(model, 40, cpu) == 1  # a hook sees its calls in order
    handle.remove()
    assert inference_workers(model.train(), 40, cpu) == 1
    torch.set_num_threads(1)
    assert inference_workers(model.eval(), 40, cpu) == 1


def test_a_fused_output_is_recognised_only_in_its_own_thread():
    """Thread A's projection marks its activated output, thread B's marks another, then A's
    activation must still pass A's output through (a shared slot would run GELU on it twice)."""
    fused = FusedOutput()
    ya, yb = torch.ones(2), torch.ones(2)
    a_marked, b_marked = threading.Event(), threading.Event()
    result = {}

    def thread_a() -> None:
        fused.mark(ya)
        a_marked.set()
        b_marked.wait(5)
        result["a"] = fused.take(ya)

    def thread_b() -> None:
        a_marked.wait(5)
        fused.mark(yb)
        result["b_other"] = fused.take(ya)  # A's output is not B's
        b_marked.set()

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert result == {"a": True, "b_other": False}
    assert not fused.take(ya)  # taken once, then forgotten
