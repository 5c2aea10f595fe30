"""The OpenAI-compatible /v1/embeddings (through the official `openai` client) and TEI's /rerank on a
real `bertkit serve` process on a free 127.0.0.1 port, against the library's own pipelines."""

import base64
import json
import re

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.pipelines import pipeline
from bertkit.serving.process import server_process

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
MINILM = asset_path("minilm")


def _sentences(n):
    out = []
    for line in open(asset_path("bbcnews-test"), encoding="utf-8"):
        out += [s for s in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(s) > 20][:2]
        if len(out) >= n:
            return out[:n]


@pytest.fixture(scope="module")
def server():
    with server_process(MINILM, ["--dtype", "fp32", "--max-batch-size", "16", "--max-wait-ms", "20"]) as srv:
        yield srv
        assert srv.stop() == 0


@pytest.fixture(scope="module")
def offline():
    return pipeline("sentence-embedding", model=MINILM, dtype="fp32")


def test_openai_client_gets_the_library_vectors(server, offline):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    texts = _sentences(6)
    want = offline(texts, return_tensors=True).numpy()
    for fmt in ("float", "base64"):
        r = client.embeddings.create(model="minilm", input=texts, encoding_format=fmt)
        assert r.object == "list" and r.model == "minilm" and [d.index for d in r.data] == list(range(6))
        assert all(d.object == "embedding" for d in r.data)
        # asked for explicitly, base64 comes back undecoded: little-endian float32 bytes, as OpenAI's
        got = [np.frombuffer(base64.b64decode(d.embedding), "<f4") if fmt == "base64" else d.embedding for d in r.data]
        np.testing.assert_allclose(np.array(got), want, atol=1e-5)
    n_tokens = sum(len(ids) for ids in offline.tokenizer(texts)["input_ids"])
    assert r.usage.prompt_tokens == r.usage.total_tokens == n_tokens
    one = client.embeddings.create(model="minilm", input=texts[2])  # the client asks for base64 and decodes it
    np.testing.assert_allclose(one.data[0].embedding, want[2], atol=1e-5)
    short = client.embeddings.create(model="minilm", input=texts, dimensions=64, encoding_format="float")
    cut = want[:, :64] / np.linalg.norm(want[:, :64], axis=1, keepdims=True)
    np.testing.assert_allclose(np.array([d.embedding for d in short.data]), cut, atol=1e-5)
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="minilm", input=texts, dimensions=385)
    assert "'dimensions' is 385, above the model's embedding size 384" in e.value.message


def test_raw_response_shape_and_embed_alone_and_batched(server, offline):
    texts = _sentences(10)
    want = offline(texts, return_tensors=True).numpy()
    body = httpx.post(server.url + "/v1/embeddings", json={"input": texts, "model": "m"}, timeout=60).json()
    assert set(body) == {"object", "data", "model", "usage"} and set(body["usage"]) == {"prompt_tokens", "total_tokens"}
    assert set(body["data"][0]) == {"object", "index", "embedding"}
    np.testing.assert_allclose([d["embedding"] for d in body["data"]], want, atol=1e-5)
    batched = httpx.post(server.url + "/embed", json={"inputs": texts}, timeout=60).json()["embeddings"]
    np.testing.assert_allclose(batched, want, atol=1e-5)
    for i in (0, 7):
        alone = httpx.post(server.url + "/embed", json={"inputs": texts[i]}, timeout=60).json()["embedding"]
        np.testing.assert_allclose(alone, want[i], atol=1e-5)
        v1 = httpx.post(server.url + "/v1/embeddings", json={"input": texts[i], "model": "m"}, timeout=60).json()
        np.testing.assert_allclose(v1["data"][0]["embedding"], want[i], atol=1e-5)


def test_rerank_on_an_embedding_model_is_refused(server):
    r = httpx.post(server.url + "/rerank", json={"query": "q", "texts": ["a", "b"]}, timeout=60)
    assert r.status_code == 424 and "not a cross-encoder" in r.json()["error"]
    assert "/rerank" not in httpx.get(server.url + "/info", timeout=60).json()["endpoints"]
    r = httpx.post(server.url + "/v1/embeddings", json={"input": [1, 2], "model": "m"}, timeout=60)
    assert r.status_code == 422 and "input[0]" in r.json()["error"]["message"]


def test_rerank_endpoint_matches_the_text_ranking_pipeline(tmp_path):
    from bertkit.cli import main

    sents = _sentences(24)
    rows = [{"query": sents[i], "passage": sents[i + 1], "label": 1} for i in range(0, 16, 2)]
    rows += [{"query": sents[i], "passage": sents[(i + 5) % 16], "label": 0} for i in range(0, 16, 2)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    folder = tmp_path / "ce"
    assert (
        main(
            [
                "train-reranker",
                "--model",
                str(MINILM),
                "--train",
                str(tmp_path / "t.jsonl"),
                "--output",
                str(folder),
                "--max-steps",
                "1",
                "--batch-size",
                "8",
                "--max-length",
                "64",
                "--no-progress",
            ]
        )
        == 0
    )
    query, texts = sents[16], sents[17:24]
    want = pipeline("text-ranking", model=folder)(query, texts)
    with server_process(folder, ["--dtype", "fp32"]) as srv:
        raw = httpx.post(
            srv.url + "/rerank", json={"query": query, "texts": texts, "raw_scores": True}, timeout=60
        ).json()
        top = httpx.post(
            srv.url + "/rerank", json={"query": query, "texts": texts, "top_n": 3, "return_text": True}, timeout=60
        ).json()
        info = httpx.get(srv.url + "/info", timeout=60).json()
        metrics = httpx.get(srv.url + "/metrics", timeout=60).text
        bad_fields = []
        for field in ("raw_scores", "return_text"):
            r = httpx.post(srv.url + "/rerank", json={"query": query, "texts": texts, field: "false"}, timeout=60)
            if field in r.json().get("error", ""):
                bad_fields.append((field, r.status_code))
        assert srv.stop() == 0
    # a reranker scores pairs; its encoder gives no sentence embeddings
    assert "/rerank" in info["endpoints"] and "/v1/embeddings" not in info["endpoints"]
    assert 'endpoint="/rerank",status="200"} 2' in metrics
    assert [r["index"] for r in raw] == [w["index"] for w in want]
    np.testing.assert_allclose([r["score"] for r in raw], [w["score"] for w in want], atol=1e-4)
    assert [r["index"] for r in top] == [w["index"] for w in want[:3]]
    assert [r["text"] for r in top] == [texts[w["index"]] for w in want[:3]]
    np.testing.assert_allclose([r["score"] for r in top], [1 / (1 + np.exp(-w["score"])) for w in want[:3]], atol=1e-5)
    for field in ("raw_scores", "return_text"):  # a string "false" is truthy: it gave raw scores
        assert (field, 422) in bad_fields, bad_fields
