"""Long texts are never cut silently: truncation="error" | "cut" | "chunk" in the embedding,
classification and ranking pipelines, checked against transformers / sentence-transformers on the
real MiniLM checkpoint and real BBC articles (most are longer than MiniLM's 256 tokens)."""

import json
import warnings

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.pipelines import pipeline

transformers = pytest.importorskip("transformers")
MINILM = asset_path("minilm")


@pytest.fixture(scope="module")
def articles():
    rows = [json.loads(x) for x in open(asset_path("bbcnews-test"), encoding="utf-8")]
    return [r["text"] for r in rows[:3]]


@pytest.fixture(scope="module")
def hf():
    return transformers.AutoTokenizer.from_pretrained(str(MINILM)), transformers.AutoModel.from_pretrained(
        str(MINILM)
    ).eval()


def _windows(n, room):
    """The window rule stated in bertkit.pipelines.long_text: a quarter of a window overlaps the next."""
    overlap = room // 4
    starts = list(range(0, max(n - overlap, 1), room - overlap))
    if starts[-1] + room < n:
        starts.append(n - room)
    return [(s, min(n, s + room)) for s in starts]


def test_embedding_error_cut_and_chunk(articles, hf):
    tok, model = hf
    emb = pipeline("sentence-embedding", model=MINILM)
    n = len(tok(articles[0])["input_ids"])
    assert n > 256
    with pytest.raises(ValueError, match=f"has {n} tokens, over the model's limit of 256"):
        emb(articles[0])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cut = np.asarray(emb(articles, truncation="cut"))
    assert emb.last_dropped_tokens[0] == n - 256 and any("tokens dropped" in str(x.message) for x in w)
    st = pytest.importorskip("sentence_transformers")
    np.testing.assert_allclose(cut, st.SentenceTransformer(str(MINILM), device="cpu").encode(articles), atol=2e-5)
    chunked = np.asarray(emb(articles, truncation="chunk"))
    for text, got in zip(articles, chunked):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        vecs, weights = [], []
        for a, b in _windows(len(ids), 254):
            x = torch.tensor([[tok.cls_token_id, *ids[a:b], tok.sep_token_id]])
            with torch.no_grad():
                vecs.append(model(input_ids=x).last_hidden_state[0].mean(0).numpy())
            weights.append(b - a)
        want = np.average(vecs, axis=0, weights=weights)
        np.testing.assert_allclose(got, want / np.linalg.norm(want), atol=2e-5)
    assert not np.allclose(chunked[0], cut[0], atol=1e-3)  # the rest of the article counts
    short = "A short sentence stays one window."
    np.testing.assert_allclose(emb(short, truncation="chunk"), emb(short), atol=1e-6)


def test_embedding_cut_follows_the_tokenizers_truncation_side(articles):
    """``tokenizer.truncation_side = "left"`` keeps a long text's last tokens, as sentence-transformers
    does with the same setting on its tokenizer."""
    st = pytest.importorskip("sentence_transformers")
    emb = pipeline("sentence-embedding", model=MINILM)
    right = np.asarray(emb(articles, truncation="cut"))
    emb.tokenizer.truncation_side = "left"
    left = np.asarray(emb(articles, truncation="cut"))
    ref = st.SentenceTransformer(str(MINILM), device="cpu")
    ref.tokenizer.truncation_side = "left"
    np.testing.assert_allclose(left, ref.encode(articles), atol=2e-5)
    assert not np.allclose(left[0], right[0], atol=1e-3)  # the other end of the article


def test_classification_chunk_pools_window_logits(articles, hf, tmp_path):
    from bertkit.modeling import BertForSequenceClassification

    tok, _ = hf
    torch.manual_seed(0)
    clf = BertForSequenceClassification.from_pretrained(str(MINILM), num_labels=3)
    clf.save_pretrained(tmp_path / "clf", tokenizer=None)
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (tmp_path / "clf" / f).write_bytes((MINILM / f).read_bytes())
    ref = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "clf")).eval()
    pipe = pipeline("text-classification", model=tmp_path / "clf")
    with pytest.raises(ValueError, match="over the model's limit of 128"):
        pipe(articles[1], max_length=128)
    got = pipe(articles[1], max_length=128, truncation="chunk", top_k=None)
    ids = tok(articles[1], add_special_tokens=False)["input_ids"]
    logits, weights = [], []
    for a, b in _windows(len(ids), 126):
        x = torch.tensor([[tok.cls_token_id, *ids[a:b], tok.sep_token_id]])
        with torch.no_grad():
            logits.append(ref(input_ids=x).logits[0].numpy())
        weights.append(b - a)
    p = torch.softmax(torch.tensor(np.average(logits, axis=0, weights=weights)), -1).numpy()
    assert [r["label"] for r in got] == [ref.config.id2label[int(k)] for k in np.argsort(-p)]
    np.testing.assert_allclose([r["score"] for r in got], np.sort(p)[::-1], atol=1e-5)


def test_server_413_at_the_model_limit(articles):
    """The server refuses a text over the model's own 256 tokens (below --max-input-tokens 512) with
    a 413 that states the token count and the limit, for /embed and /v1/embeddings alike."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from bertkit.serving.process import server_process

    tok = transformers.AutoTokenizer.from_pretrained(str(MINILM))
    text = next(a for a in articles if 256 < len(tok(a)["input_ids"]) <= 512)
    n = len(tok(text)["input_ids"])
    with server_process(MINILM, ["--dtype", "fp32"]) as srv:
        r1 = httpx.post(srv.url + "/embed", json={"inputs": [text]}, timeout=60)
        r2 = httpx.post(srv.url + "/v1/embeddings", json={"input": text, "model": "m"}, timeout=60)
        both = [text, "a short one"]
        cut = httpx.post(
            srv.url + "/v1/embeddings", json={"input": both, "model": "m", "truncation": "cut"}, timeout=60
        ).json()
        chunk = httpx.post(
            srv.url + "/v1/embeddings", json={"input": both, "model": "m", "truncation": "chunk"}, timeout=60
        ).json()
        assert srv.stop() == 0
    assert r1.status_code == 413 and f"has {n} tokens, over the model's limit of 256" in r1.json()["error"]
    assert r2.status_code == 413 and f"has {n} tokens" in r2.json()["error"]["message"]
    emb = pipeline("sentence-embedding", model=MINILM, dtype="fp32")
    assert cut["usage"]["truncated_tokens"] == [n - 256, 0]
    np.testing.assert_allclose([d["embedding"] for d in cut["data"]], emb(both, truncation="cut"), atol=1e-5)
    np.testing.assert_allclose([d["embedding"] for d in chunk["data"]], emb(both, truncation="chunk"), atol=1e-5)
