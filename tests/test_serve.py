"""`bertkit serve` as a real server process on a free 127.0.0.1 port, talked to over HTTP."""

import csv
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.pipelines import pipeline
from bertkit.serving.process import server_process

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}


def _sentences(n: int, split: str = "test") -> list[str]:
    with open(asset_path(f"polarity-{split}"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:n]


@pytest.fixture(scope="module")
def minilm_server(tmp_path_factory):
    """MiniLM, fp32 (so results compare exactly), small limits to exercise them, an index, an API key."""
    from bertkit.search import build_index

    corpus = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    corpus.write_text("\n".join(_sentences(200, "train")) + "\n", encoding="utf-8")
    index = build_index(asset_path("minilm"), corpus, corpus.parent / "index", dtype="fp32", progress=False)
    args = [
        "--dtype",
        "fp32",
        "--max-batch-size",
        "8",
        "--max-input-tokens",
        "64",
        "--max-wait-ms",
        "30",
        "--index",
        str(index),
        "--api-key",
        KEY,
    ]
    with server_process(asset_path("minilm"), args) as srv:
        srv.index_path = index
        yield srv
        code = srv.stop()
    assert code == 0


def test_embed_equals_offline_pipeline_and_sentence_transformers(minilm_server):
    texts = _sentences(8)
    r = httpx.post(minilm_server.url + "/embed", json={"inputs": texts}, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    got = np.array(r.json()["embeddings"])
    offline = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="fp32")(texts, return_tensors=True)
    np.testing.assert_allclose(got, offline.numpy(), atol=1e-5)
    st = pytest.importorskip("sentence_transformers")
    ref = st.SentenceTransformer(str(asset_path("minilm")), device="cpu").encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(got, ref, atol=1e-4)
    one = httpx.post(minilm_server.url + "/embed", json={"inputs": texts[0]}, headers=AUTH, timeout=60).json()
    np.testing.assert_allclose(one["embedding"], got[0], atol=1e-5)


def test_embed_takes_text_embeddings_inference_fields(minilm_server):
    """TEI's ``normalize`` and ``truncate`` were ignored (a unit vector for normalize false; a 413 for
    truncate true): each now does what TEI does, and ``prompt_name`` is refused rather than ignored."""
    transformers = pytest.importorskip("transformers")
    texts, url = _sentences(4), minilm_server.url + "/embed"
    r = httpx.post(url, json={"inputs": texts, "normalize": False}, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    tok = transformers.AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():  # the folder's mean pooling without its Normalize module
        hidden = transformers.AutoModel.from_pretrained(str(asset_path("minilm")))(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    raw = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(np.array(r.json()["embeddings"]), raw, atol=1e-4)
    assert np.abs(np.linalg.norm(raw, axis=1) - 1).max() > 0.1  # the check can tell the two apart
    long = "word " * 100
    r = httpx.post(url, json={"inputs": long, "truncate": True}, headers=AUTH, timeout=60)
    assert r.status_code == 200 and r.json()["truncated_tokens"] > 0, r.text
    cut = httpx.post(url, json={"inputs": long, "truncation": "cut"}, headers=AUTH, timeout=60).json()
    np.testing.assert_allclose(r.json()["embedding"], cut["embedding"], atol=1e-6)
    for body, field in (
        ({"inputs": "a", "normalize": "no"}, "normalize"),
        ({"inputs": "a", "prompt_name": "q"}, "prompt_name"),
    ):
        r = httpx.post(url, json=body, headers=AUTH, timeout=60)
        assert r.status_code == 422 and field in r.json()["error"], r.text


def test_concurrent_requests_are_batched_and_each_gets_its_own_result(minilm_server):
    texts = _sentences(24)
    results: dict[int, list] = {}

    def call(i: int) -> None:
        r = httpx.post(minilm_server.url + "/embed", json={"inputs": texts[i]}, headers=AUTH, timeout=60)
        results[i] = [r.status_code, r.json()]

    before = _metric(minilm_server, "bertkit_batch_size_count")
    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(results[i][0] == 200 for i in range(len(texts))), results
    offline = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="fp32")(texts, return_tensors=True)
    for i in range(len(texts)):
        np.testing.assert_allclose(results[i][1]["embedding"], offline[i].numpy(), atol=1e-5)
    forwards = _metric(minilm_server, "bertkit_batch_size_count") - before
    assert forwards < len(texts)  # several requests shared a forward


def _metric(srv, name: str) -> float:
    text = httpx.get(srv.url + "/metrics", headers=AUTH, timeout=30).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics:\n{text}")


@pytest.mark.parametrize(
    "body,status,field",
    [
        (b"{not json", 400, "invalid JSON"),
        (b'{"input": "x"}', 422, "'inputs'"),
        (b'{"inputs": []}', 422, "empty list"),
        (b'{"inputs": ["ok", 3]}', 422, "inputs[1]"),
        (b'{"inputs": 5}', 422, "inputs"),
        (b'{"inputs": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]}', 413, "--max-batch-size 8"),
        (('{"inputs": ["short", "' + "word " * 100 + '"]}').encode(), 413, "inputs[1] has"),
        (b'{"inputs": "' + b"x" * 1_100_000 + b'"}', 413, "limit"),
    ],
)
def test_bad_requests_get_4xx_json_naming_the_problem(minilm_server, body, status, field):
    r = httpx.post(
        minilm_server.url + "/embed", content=body, headers={**AUTH, "content-type": "application/json"}, timeout=60
    )
    assert r.status_code == status, r.text
    assert field in r.json()["error"]


def test_auth_tokenize_info_metrics_and_missing_task(minilm_server):
    url = minilm_server.url
    assert httpx.post(url + "/embed", json={"inputs": "x"}, timeout=30).status_code == 401
    assert httpx.get(url + "/health", timeout=30).json() == {"status": "ok"}
    tok = httpx.post(url + "/tokenize", json={"inputs": "Hello world"}, headers=AUTH, timeout=30).json()
    assert tok["tokens"] == ["[CLS]", "hello", "world", "[SEP]"] and tok["input_ids"][0] == 101
    info = httpx.get(url + "/info", headers=AUTH, timeout=30).json()
    assert info["task"] == "sentence-embedding" and info["dtype"] == "fp32"
    assert info["limits"]["max_batch_size"] == 8 and info["index"]["size"] == 200
    r = httpx.post(url + "/predict", json={"inputs": "x"}, headers=AUTH, timeout=30)
    assert r.status_code == 404 and "no task head" in r.json()["error"]
    metrics = httpx.get(url + "/metrics", headers=AUTH, timeout=30).text
    assert 'bertkit_requests_total{endpoint="/embed",status="401"}' in metrics
    assert "bertkit_inference_seconds_bucket" in metrics and "bertkit_queue_seconds_count" in metrics
    assert httpx.get(url + "/docs", timeout=30).status_code == 200


def test_search_endpoint_finds_the_sentence(minilm_server):
    corpus = _sentences(200, "train")
    r = httpx.post(
        minilm_server.url + "/search", json={"inputs": [corpus[17], corpus[150]], "top_k": 3}, headers=AUTH, timeout=60
    )
    assert r.status_code == 200, r.text
    hits = r.json()["results"]
    assert [h[0]["text"] for h in hits] == [corpus[17], corpus[150]]
    assert hits[0][0]["score"] == pytest.approx(1.0, abs=2e-3) and len(hits[0]) == 3
    assert hits[0][0]["score"] >= hits[0][1]["score"] >= hits[0][2]["score"]
    bad = httpx.post(minilm_server.url + "/search", json={"inputs": "x", "top_k": 0}, headers=AUTH, timeout=30)
    assert bad.status_code == 422 and "top_k" in bad.json()["error"]
    empty = httpx.post(minilm_server.url + "/search", json={"inputs": ["x", "  "]}, headers=AUTH, timeout=30)
    assert empty.status_code == 422 and "inputs[1] is empty" in empty.json()["error"]


def test_hybrid_search_over_http_equals_the_library_per_request_weight(minilm_server):
    """Requests with different lexical weights, sent at once, share server batches; each must get the
    hits the library gives for its own weight."""
    from bertkit.search import embed_queries, load_index

    queries = ["a funny and touching film", "boring plot , bad acting", "the best movie of the year", "tedious"]
    weights = [0.0, 0.3, 1.0, 0.6]
    index = load_index(minilm_server.index_path)
    want = []
    for q, w in zip(queries, weights):
        vec = embed_queries(asset_path("minilm"), [q], dtype="fp32")
        want.append(index.search(vec, 4, [q], w)[0])
    got = [None] * len(queries)

    def ask(i: int) -> None:
        body = {"inputs": queries[i], "top_k": 4, "lexical_weight": weights[i]}
        got[i] = httpx.post(minilm_server.url + "/search", json=body, headers=AUTH, timeout=60)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    for r, w, hits in zip(got, weights, want):
        assert r is not None and r.status_code == 200, r and r.text
        res = r.json()["results"]
        assert [h["id"] for h in res] == [h["id"] for h in hits], w
        np.testing.assert_allclose([h["score"] for h in res], [h["score"] for h in hits], atol=1e-4)
        assert ("bm25" in res[0]) == (w > 0)
    bad = httpx.post(minilm_server.url + "/search", json={"inputs": "x", "lexical_weight": 2}, headers=AUTH, timeout=30)
    assert bad.status_code == 422 and "lexical_weight" in bad.json()["error"] and "[0, 1]" in bad.json()["error"]


@pytest.mark.slow
def test_classifier_folder_predict_embed_backpressure_and_drain(polarity_clf):
    texts = _sentences(4)
    offline = pipeline("text-classification", model=polarity_clf, dtype="fp32")(texts, top_k=None)
    args = ["--dtype", "fp32", "--max-queue", "2", "--max-batch-size", "4", "--max-wait-ms", "1"]
    with server_process(polarity_clf, args) as srv:
        r = httpx.post(srv.url + "/predict", json={"inputs": texts}, timeout=60)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["task"] == "text-classification"
        for got, want in zip(body["predictions"], offline):
            assert [x["label"] for x in got] == [x["label"] for x in want]
            np.testing.assert_allclose([x["score"] for x in got], [x["score"] for x in want], atol=1e-5)
        assert httpx.post(srv.url + "/embed", json={"inputs": texts[0]}, timeout=60).status_code == 200
        bad = httpx.post(srv.url + "/predict", json={"inputs": {"question": "q"}}, timeout=60)
        assert bad.status_code == 422 and "inputs.text" in bad.json()["error"]

        # a flood over the 2-deep queue: some are refused with 503 + Retry-After, none fails otherwise
        long_texts = [" ".join(_sentences(40)[i : i + 12])[:1500] for i in range(4)]
        codes: list[tuple[int, str | None]] = []

        def flood() -> None:
            r = httpx.post(srv.url + "/predict", json={"inputs": long_texts}, timeout=120)
            codes.append((r.status_code, r.headers.get("retry-after")))

        threads = [threading.Thread(target=flood) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert {c for c, _ in codes} <= {200, 503} and (200, None) in codes
        assert any(c == 503 and ra == "1" for c, ra in codes), codes

        # SIGTERM while a request is in flight: it still completes, then the server exits 0
        done: list[int] = []
        t = threading.Thread(
            target=lambda: done.append(
                httpx.post(srv.url + "/predict", json={"inputs": long_texts}, timeout=120).status_code
            )
        )
        t.start()
        time.sleep(0.3)
        code = srv.stop()
        t.join(120)
        assert done == [200] and code == 0


def _status_count(srv, endpoint: str, status: str) -> int:
    """Responses counted by /metrics for ``endpoint`` with ``status`` (0 before the first)."""
    text = httpx.get(srv.url + "/metrics", headers=AUTH, timeout=30).text
    found = re.search(rf'endpoint="{re.escape(endpoint)}",status="{status}"}} (\d+)', text)
    return int(found.group(1)) if found else 0


def test_a_client_that_leaves_or_times_out_has_its_work_dropped():
    """A 2.5 s batching window: a client that hangs up inside it, and one whose 1.5 s timeout runs
    out inside it, both cost no model forward; a full batch still runs at once. Two requests at once
    come first: a server whose requests come further apart than the window does not wait at all."""
    import json
    import socket
    from concurrent.futures import ThreadPoolExecutor

    args = ["--dtype", "fp32", "--max-batch-size", "4", "--max-wait-ms", "2500", "--request-timeout", "1.5"]
    with server_process(asset_path("minilm"), args) as srv:
        with ThreadPoolExecutor(2) as pool:  # answered (200) or timed out in the window (504): either
            list(pool.map(lambda t: httpx.post(srv.url + "/embed", json={"inputs": t}, timeout=30), "ab"))
        deadline = time.monotonic() + 20
        while _metric(srv, "bertkit_dropped_total") + _metric(srv, "bertkit_batch_size_sum") < 2:
            assert time.monotonic() < deadline, "the two first requests were neither run nor dropped"
            time.sleep(0.2)
        ran, dropped = _metric(srv, "bertkit_batch_size_count"), _metric(srv, "bertkit_dropped_total")
        left = _status_count(srv, "/embed", "499")
        host, port = srv.url.rsplit("/", 1)[1].split(":")
        body = json.dumps({"inputs": "a request whose client hangs up"}).encode()
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(
                b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            time.sleep(0.3)  # the request is in the batch window, waiting for company
        deadline = time.monotonic() + 20
        while _metric(srv, "bertkit_dropped_total") < dropped + 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _metric(srv, "bertkit_dropped_total") == dropped + 1
        assert _status_count(srv, "/embed", "499") == left + 1

        r = httpx.post(srv.url + "/embed", json={"inputs": "a request that times out"}, timeout=30)
        assert r.status_code == 504 and "1.5 s timeout" in r.json()["error"]
        deadline = time.monotonic() + 20
        while _metric(srv, "bertkit_dropped_total") < dropped + 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _metric(srv, "bertkit_dropped_total") == dropped + 2
        assert _metric(srv, "bertkit_batch_size_count") == ran  # neither reached the model

        full = httpx.post(srv.url + "/embed", json={"inputs": _sentences(4)}, timeout=30)
        assert full.status_code == 200 and len(full.json()["embeddings"]) == 4
        assert _metric(srv, "bertkit_batch_size_count") == ran + 1
        code = srv.stop()
    assert code == 0


@pytest.mark.slow
def test_two_worker_processes_answer_and_drain():
    """--workers 2: each process loads the model; answers equal the offline pipeline; SIGTERM exits 0."""
    texts = _sentences(12)
    with server_process(asset_path("minilm"), ["--dtype", "fp32", "--workers", "2", "--device", "cpu"]) as srv:
        results: dict[int, list[float]] = {}

        def call(i: int) -> None:
            r = httpx.post(srv.url + "/embed", json={"inputs": texts[i]}, timeout=120)
            assert r.status_code == 200, r.text
            results[i] = r.json()["embedding"]

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(texts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert sorted(results) == list(range(len(texts)))
        offline = pipeline("sentence-embedding", model=asset_path("minilm"), dtype="fp32")(texts, return_tensors=True)
        np.testing.assert_allclose(np.asarray([results[i] for i in range(len(texts))]), offline.numpy(), atol=1e-5)
        info = httpx.get(srv.url + "/info", timeout=30).json()
        assert info["dtype"] == "fp32" and info["device"] == "cpu"  # --device reaches every worker
        # each worker listens on its own socket, so the kernel spreads connections over both (a shared
        # socket once gave 31 of 32 clients to one worker); all 16 on one is a 1-in-32,768 chance
        pids = set()
        for _ in range(16):
            with httpx.Client(timeout=30) as client:  # a new connection each
                pids.add(client.get(srv.url + "/info").json()["pid"])
        assert len(pids) == 2 and srv.proc.pid not in pids, pids
        port = srv.url.rsplit(":", 1)[1]  # taken: refused at once, in one line, before any model loads
        cmd = [sys.executable, "-m", "bertkit", "serve", "--model", str(asset_path("minilm")), "--workers", "2"]
        r = subprocess.run([*cmd, "--port", port], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and f"cannot listen on 127.0.0.1:{port}: Address already in use" in r.stderr
        code = srv.stop()
    assert code == 0


@pytest.mark.parametrize("family", ["distilbert", "electra"])
def test_classifier_folder_of_another_family_predicts_label_names_as_transformers(family, request):
    """A DistilBERT or ELECTRA folder is served by its head, like a BERT one: /predict answers with the
    label names and the scores transformers' own class for the family gives on the same folder."""
    import torch
    import transformers

    folder = request.getfixturevalue(f"{family}_clf")
    texts = _sentences(3)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert (
        type(hf).__name__
        == {"distilbert": "DistilBertForSequenceClassification", "electra": "ElectraForSequenceClassification"}[family]
    )
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    enc = hf_tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    if family == "distilbert":
        enc.pop("token_type_ids", None)
    with torch.no_grad():
        want = hf(**enc).logits.softmax(-1)
    with server_process(folder, ["--dtype", "fp32", "--max-input-tokens", "64", "--truncate"]) as srv:
        info = httpx.get(srv.url + "/info", timeout=30).json()
        r = httpx.post(srv.url + "/predict", json={"inputs": texts}, timeout=60)
        emb = httpx.post(srv.url + "/embed", json={"inputs": texts[0]}, timeout=60)
        assert srv.stop() == 0
    assert info["task"] == "text-classification" and "/predict" in info["endpoints"]
    assert r.status_code == 200, r.text
    assert r.json()["task"] == "text-classification"
    for got, row in zip(r.json()["predictions"], want):
        scores = {x["label"]: x["score"] for x in got}
        assert set(scores) == {"negative", "positive"}
        # fp32 on both sides; 1e-5 absorbs the different summation orders of the two kernels
        np.testing.assert_allclose([scores["negative"], scores["positive"]], row.numpy(), atol=1e-5)
    assert emb.status_code == 200 and len(emb.json()["embedding"]) == 64


def test_electra_discriminator_folder_serves_embeddings_as_transformers(tmp_path):
    """An ELECTRA pretraining run's folder holds the discriminator, whose head fills no mask: it is
    served as sentence-embedding, /embed the mean-pooled, normalised vector of transformers' ElectraModel."""
    import torch
    import transformers

    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    cfg = transformers.ElectraConfig(
        vocab_size=len(tok.vocab),
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    transformers.ElectraForPreTraining(cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    texts = _sentences(3)
    hf = transformers.ElectraModel.from_pretrained(tmp_path).eval()
    enc = transformers.AutoTokenizer.from_pretrained(str(tmp_path))(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = hf(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).float()
    want = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)
    with server_process(tmp_path, ["--dtype", "fp32"]) as srv:
        info = httpx.get(srv.url + "/info", timeout=30).json()
        r = httpx.post(srv.url + "/embed", json={"inputs": texts}, timeout=60)
        assert srv.stop() == 0
    assert info["task"] == "sentence-embedding"
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(np.array(r.json()["embeddings"]), want.numpy(), atol=1e-5)
    assert not srv.log.exists()  # the helper's own log, removed after a clean stop


def test_a_server_that_fails_to_start_keeps_its_log_and_names_it(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(RuntimeError, match="server exited with") as err:
        with server_process(tmp_path, ["--dtype", "fp32"], start_timeout=120):
            pass
    log = Path(re.search(r"log: (\S+)", str(err.value)).group(1))
    assert "config.json" in log.read_text() and "config.json" in str(err.value)
    log.unlink()
