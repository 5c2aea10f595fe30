"""One truncation rule for every endpoint of a real `bertkit serve` on a free 127.0.0.1 port: the
request's ``truncation`` field ("error" | "cut" | "chunk"), else the server's ``--truncate`` flag.
A cut is never silent: the response and ``/metrics`` report the dropped tokens, checked against
counts made here with transformers' tokenizer on real MiniLM and real BBC articles."""

import json

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.pipelines import pipeline
from bertkit.serving.process import server_process

httpx = pytest.importorskip("httpx")
transformers = pytest.importorskip("transformers")
pytest.importorskip("fastapi")
MINILM = asset_path("minilm")
TIMEOUT = 120


@pytest.fixture(scope="module")
def hf_tok():
    return transformers.AutoTokenizer.from_pretrained(str(MINILM))


@pytest.fixture(scope="module")
def article(hf_tok):
    """A real article between MiniLM's 256-token embedding limit and its 512 positions, and its length."""
    for line in open(asset_path("bbcnews-test"), encoding="utf-8"):
        text = json.loads(line)["text"]
        n = len(hf_tok(text)["input_ids"])
        if 300 < n <= 512:
            return text, n
    raise AssertionError("no BBC test article of 300-512 tokens")


def _counter(srv, name: str) -> float:
    for line in httpx.get(srv.url + "/metrics", timeout=TIMEOUT).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def _counters(srv) -> tuple[float, float]:
    return _counter(srv, "bertkit_truncated_inputs_total"), _counter(srv, "bertkit_truncated_tokens_total")


def test_embed_takes_truncation_and_cut_tokens_are_counted(article):
    text, n = article
    both = [text, "A short sentence about the weather."]
    emb = pipeline("sentence-embedding", model=MINILM, dtype="fp32")
    with server_process(MINILM, ["--dtype", "fp32"]) as srv:
        refused = httpx.post(srv.url + "/embed", json={"inputs": both}, timeout=TIMEOUT)
        v1_refused = httpx.post(srv.url + "/v1/embeddings", json={"input": both, "model": "m"}, timeout=TIMEOUT)
        bad = httpx.post(srv.url + "/embed", json={"inputs": both, "truncation": "middle"}, timeout=TIMEOUT)
        before = _counters(srv)
        cut = httpx.post(srv.url + "/embed", json={"inputs": both, "truncation": "cut"}, timeout=TIMEOUT).json()
        after_embed = _counters(srv)
        v1 = httpx.post(
            srv.url + "/v1/embeddings", json={"input": both, "model": "m", "truncation": "cut"}, timeout=TIMEOUT
        ).json()
        after_v1 = _counters(srv)
        one = httpx.post(srv.url + "/embed", json={"inputs": text, "truncation": "cut"}, timeout=TIMEOUT).json()
        chunk = httpx.post(srv.url + "/embed", json={"inputs": both, "truncation": "chunk"}, timeout=TIMEOUT).json()
        after_chunk = _counters(srv)
        assert srv.stop() == 0
    # "error" (the default without --truncate): the same 413 wording on /embed and /v1/embeddings
    want = f"inputs[0] has {n} tokens, over the model's limit of 256"
    assert refused.status_code == 413 and want in refused.json()["error"], refused.text
    assert v1_refused.status_code == 413
    assert f"input[0] has {n} tokens, over the model's limit of 256" in v1_refused.json()["error"]["message"]
    assert bad.status_code == 422 and "field 'truncation'" in bad.json()["error"]
    # "cut": the dropped count is the tokenizer's count minus the limit, in the body and in /metrics
    dropped = n - 256
    assert cut["truncated_tokens"] == [dropped, 0] and one["truncated_tokens"] == dropped
    assert v1["usage"]["truncated_tokens"] == [dropped, 0]
    assert after_embed[0] - before[0] == 1 and after_embed[1] - before[1] == dropped
    assert after_v1[0] - after_embed[0] == 1 and after_v1[1] - after_embed[1] == dropped
    # the single-text cut counts once more; chunking drops nothing, so it counts nothing
    assert after_chunk[0] - after_v1[0] == 1 and after_chunk[1] - after_v1[1] == dropped
    np.testing.assert_allclose(cut["embeddings"], emb(both, truncation="cut"), atol=1e-5)
    np.testing.assert_allclose(one["embedding"], cut["embeddings"][0], atol=1e-6)
    np.testing.assert_allclose(chunk["embeddings"], emb(both, truncation="chunk"), atol=1e-5)
    assert "truncated_tokens" not in chunk


def test_truncate_flag_sets_the_default_and_the_field_overrides_it(article):
    text, n = article
    with server_process(MINILM, ["--dtype", "fp32", "--truncate", "--max-input-tokens", "128"]) as srv:
        default = httpx.post(srv.url + "/embed", json={"inputs": [text]}, timeout=TIMEOUT).json()
        strict = httpx.post(srv.url + "/embed", json={"inputs": [text], "truncation": "error"}, timeout=TIMEOUT)
        counted = _counters(srv)
        assert srv.stop() == 0
    assert default["truncated_tokens"] == [n - 128]
    assert strict.status_code == 413 and f"inputs[0] has {n} tokens, over --max-input-tokens 128" in strict.text
    assert counted == (1, n - 128)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """MiniLM with a seeded two-label head, saved by transformers: a text-classification folder."""
    folder = tmp_path_factory.mktemp("clf") / "model"
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(MINILM), num_labels=2)
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(str(MINILM)).save_pretrained(folder)
    return folder


def test_predict_follows_the_request_truncation(classifier, article, hf_tok):
    text, n = article
    with server_process(classifier, ["--dtype", "fp32", "--max-input-tokens", "128"]) as srv:
        refused = httpx.post(srv.url + "/predict", json={"inputs": [text]}, timeout=TIMEOUT)
        cut = httpx.post(srv.url + "/predict", json={"inputs": [text], "truncation": "cut"}, timeout=TIMEOUT).json()
        counted = _counters(srv)
        assert srv.stop() == 0
    assert refused.status_code == 413 and f"inputs[0] has {n} tokens, over --max-input-tokens 128" in refused.text
    assert cut["truncated_tokens"] == [n - 128] and counted == (1, n - 128)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(classifier)).eval()
    with torch.no_grad():
        probs = hf(**hf_tok([text], truncation=True, max_length=128, return_tensors="pt")).logits.softmax(-1)[0]
    got = {p["label"]: p["score"] for p in cut["predictions"][0]}
    np.testing.assert_allclose([got[hf.config.id2label[i]] for i in range(2)], probs.numpy(), atol=1e-4)


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    """MiniLM with a seeded one-logit head, saved by transformers: the cross-encoder folder /rerank serves."""
    folder = tmp_path_factory.mktemp("ce") / "model"
    torch.manual_seed(1)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(MINILM), num_labels=1)
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(str(MINILM)).save_pretrained(folder)
    return folder


def test_rerank_follows_the_one_truncation_rule(cross_encoder, article, hf_tok):
    text, _ = article
    query, texts = "Which figures did the report give?", [text, "A short sentence about the weather."]
    n = len(hf_tok(query, text)["input_ids"])  # [CLS] query [SEP] text [SEP], counted by the reference
    body = {"query": query, "texts": texts, "raw_scores": True}

    def rerank(srv, **extra):
        return httpx.post(srv.url + "/rerank", json={**body, **extra}, timeout=TIMEOUT)

    with server_process(cross_encoder, ["--dtype", "fp32", "--max-input-tokens", "128"]) as srv:
        refused = [rerank(srv), rerank(srv, truncate=False), rerank(srv, truncate=True, truncation="error")]
        bad = rerank(srv, truncate="yes")
        before = _counters(srv)
        cut = rerank(srv, truncate=True).json()
        after_cut = _counters(srv)
        field_wins = rerank(srv, truncate=False, truncation="cut").json()
        after_field = _counters(srv)
        chunk = rerank(srv, truncation="chunk").json()
        after_chunk = _counters(srv)
        assert srv.stop() == 0
    # "error" (TEI's default truncate=false, and the server's without --truncate): the text's index,
    # its exact pair length and the limit
    for r in refused:
        assert r.status_code == 413 and f"texts[0] has {n} tokens with the query, over --max-input-tokens 128" in r.text
    assert bad.status_code == 422 and "field 'truncate'" in bad.text
    # "cut" drops tokens of the text only: transformers' only_second cut at the limit gives the same logits
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(cross_encoder)).eval()
    enc = hf_tok([query] * 2, texts, truncation="only_second", max_length=128, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = hf(**enc).logits[:, 0].numpy()
    for got in (cut, field_wins):
        by_index = {r["index"]: r for r in got}
        np.testing.assert_allclose([by_index[i]["score"] for i in (0, 1)], want, atol=1e-4)
        assert [by_index[i]["truncated_tokens"] for i in (0, 1)] == [n - 128, 0]
    assert after_cut[0] - before[0] == 1 and after_cut[1] - before[1] == n - 128
    assert after_field[0] - after_cut[0] == 1 and after_field[1] - after_cut[1] == n - 128
    # "chunk": the best window's logit, as the library pipeline scores it; its first window is the cut
    # pair, so it is never below the cut score; nothing is dropped, nothing counted
    rank = pipeline("text-ranking", model=cross_encoder, dtype="fp32")
    lib = {r["index"]: r["score"] for r in rank(query, texts, truncation="chunk", max_length=128, return_text=False)}
    got = {r["index"]: r["score"] for r in chunk}
    np.testing.assert_allclose([got[0], got[1]], [lib[0], lib[1]], atol=1e-4)
    assert got[0] >= want[0] - 1e-4 and "truncated_tokens" not in chunk[0]
    assert after_chunk == after_field


def _save_head(tmp_path_factory, name: str, auto: str, **kwargs):
    """MiniLM with a seeded ``auto`` head, saved by transformers with its tokenizer."""
    folder = tmp_path_factory.mktemp(name) / "model"
    torch.manual_seed(2)
    getattr(transformers, auto).from_pretrained(str(MINILM), **kwargs).save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(str(MINILM)).save_pretrained(folder)
    return folder


def test_fill_mask_counts_exactly_and_refuses_or_cuts(tmp_path_factory, article, hf_tok):
    folder = _save_head(tmp_path_factory, "mlm", "AutoModelForMaskedLM")
    words = article[0].split()
    early = " ".join(words[:6] + ["[MASK]"] + words[7:])  # the mask survives a cut at 128 tokens
    late = " ".join(words[:-3] + ["[MASK]"] + words[-2:])  # the mask is past it
    n = len(hf_tok(early)["input_ids"])
    with server_process(folder, ["--dtype", "fp32", "--max-input-tokens", "128"]) as srv:
        refused = httpx.post(srv.url + "/predict", json={"inputs": [early]}, timeout=TIMEOUT)
        before = _counters(srv)
        cut = httpx.post(srv.url + "/predict", json={"inputs": [early], "truncation": "cut"}, timeout=TIMEOUT)
        counted = _counters(srv)
        masked_off = httpx.post(srv.url + "/predict", json={"inputs": [late], "truncation": "cut"}, timeout=TIMEOUT)
        chunk = httpx.post(srv.url + "/predict", json={"inputs": [early], "truncation": "chunk"}, timeout=TIMEOUT)
        assert srv.stop() == 0
    assert refused.status_code == 413 and f"inputs[0] has {n} tokens, over --max-input-tokens 128" in refused.text
    assert cut.status_code == 200, cut.text
    assert cut.json()["truncated_tokens"] == [n - 128]
    assert counted[0] - before[0] == 1 and counted[1] - before[1] == n - 128
    assert masked_off.status_code == 422 and "no [MASK] in its first 128 tokens" in masked_off.text
    assert chunk.status_code == 422 and "'error' or 'cut' for fill-mask" in chunk.text
    # the cut text's top tokens and probabilities are transformers' on the same cut
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(folder)).eval()
    enc = hf_tok([early], truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        probs = hf(**enc).logits[0, enc["input_ids"][0].tolist().index(hf_tok.mask_token_id)].softmax(-1)
    top = probs.topk(5)
    got = cut.json()["predictions"][0]
    assert [r["token"] for r in got] == top.indices.tolist()
    np.testing.assert_allclose([r["score"] for r in got], top.values.numpy(), atol=1e-4)


def test_token_classification_windows_a_long_text_and_says_so(tmp_path_factory, article, hf_tok):
    text, n = article
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    folder = _save_head(
        tmp_path_factory,
        "ner",
        "AutoModelForTokenClassification",
        num_labels=5,
        id2label=dict(enumerate(labels)),
        label2id={k: i for i, k in enumerate(labels)},
    )
    with server_process(folder, ["--dtype", "fp32", "--max-input-tokens", "128"]) as srv:
        long = httpx.post(srv.url + "/predict", json={"inputs": text}, timeout=TIMEOUT)
        short = httpx.post(srv.url + "/predict", json={"inputs": ["A short one.", text]}, timeout=TIMEOUT)
        strict = httpx.post(srv.url + "/predict", json={"inputs": text, "truncation": "error"}, timeout=TIMEOUT)
        cut = httpx.post(srv.url + "/predict", json={"inputs": text, "truncation": "cut"}, timeout=TIMEOUT)
        assert srv.stop() == 0
    assert long.status_code == 200, long.text
    body = long.json()
    assert body["windowed"] is True and "truncated_tokens" not in body
    assert short.json()["windowed"] == [False, True]
    # the library pipeline on the same text, with the same 128-token windows
    ner = pipeline("token-classification", model=folder, dtype="fp32")
    want = ner(text, aggregation_strategy="first", max_length=128)  # the server's word groups
    got = body["predictions"]
    assert [(e["entity_group"], e["start"], e["end"]) for e in got] == [
        (e["entity_group"], e["start"], e["end"]) for e in want
    ]
    np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], atol=1e-4)
    assert got and all(e["word"] == text[e["start"] : e["end"]] for e in got)  # as written, as `predict` gives it
    # entities come from beyond the first window: past the character where the reference tokenizer's
    # first 126 text tokens end
    first_end = hf_tok(text, return_offsets_mapping=True)["offset_mapping"][126][1]
    assert n > 128 and max(e["start"] for e in got) > first_end
    assert strict.status_code == 413 and f"inputs has {n} tokens, over one window of 128" in strict.text
    assert cut.status_code == 422 and "windows long texts" in cut.text


def test_question_answering_windows_a_long_context_and_says_so(tmp_path_factory, article):
    text, _ = article
    folder = _save_head(tmp_path_factory, "qa", "AutoModelForQuestionAnswering")
    item = {"question": "What did the report say?", "context": text}
    long_question = {"question": " ".join(text.split()[:80]), "context": text}
    with server_process(folder, ["--dtype", "fp32", "--max-input-tokens", "128"]) as srv:
        r = httpx.post(srv.url + "/predict", json={"inputs": [item, {**item, "context": "Short."}]}, timeout=TIMEOUT)
        crowded = httpx.post(srv.url + "/predict", json={"inputs": long_question}, timeout=TIMEOUT)
        assert srv.stop() == 0
    assert r.status_code == 200, r.text
    assert r.json()["windowed"] == [True, False]
    qa = pipeline("question-answering", model=folder, dtype="fp32")
    want = qa(question=item["question"], context=text, max_seq_len=128)
    got = r.json()["predictions"][0]
    assert (got["start"], got["end"], got["answer"]) == (want["start"], want["end"], want["answer"])
    np.testing.assert_allclose(got["score"], want["score"], atol=1e-4)
    assert crowded.status_code == 413 and "inputs.question has" in crowded.text and "windows of 128" in crowded.text


def test_truncation_direction_left_keeps_the_last_tokens(cross_encoder, article):
    """text-embeddings-inference's ``truncation_direction``: "Left" cuts drop a text's first tokens. The
    references cut the same way: sentence-transformers with a left-truncating tokenizer (/embed), and
    transformers' logits on pairs cut ``only_second`` from the left (/rerank)."""
    st = pytest.importorskip("sentence_transformers")
    text, n = article
    left_tok = transformers.AutoTokenizer.from_pretrained(str(MINILM), truncation_side="left")
    query, texts = "Which figures did the report give?", [text, "A short sentence about the weather."]
    with server_process(MINILM, ["--dtype", "fp32"]) as srv:
        emb = {
            side: httpx.post(
                srv.url + "/embed",
                json={"inputs": text, "truncation": "cut", "truncation_direction": side},
                timeout=TIMEOUT,
            )
            for side in ("Left", "right", "Middle")
        }
        assert srv.stop() == 0
    with server_process(cross_encoder, ["--dtype", "fp32", "--max-input-tokens", "128"]) as srv:
        body = {"query": query, "texts": texts, "raw_scores": True, "truncate": True, "truncation_direction": "Left"}
        ranked = httpx.post(srv.url + "/rerank", json=body, timeout=TIMEOUT).json()
        assert srv.stop() == 0
    assert emb["Middle"].status_code == 422 and "field 'truncation_direction'" in emb["Middle"].text
    model = st.SentenceTransformer(str(MINILM), device="cpu")
    model.tokenizer.truncation_side = "left"
    want_left = model.encode(text, normalize_embeddings=True)
    model.tokenizer.truncation_side = "right"
    want_right = model.encode(text, normalize_embeddings=True)
    got_left, got_right = (np.asarray(emb[s].json()["embedding"]) for s in ("Left", "right"))
    assert emb["Left"].json()["truncated_tokens"] == n - 256
    np.testing.assert_allclose(got_left, want_left, atol=1e-4)
    np.testing.assert_allclose(got_right, want_right, atol=1e-4)
    assert float(got_left @ got_right) < 0.99  # the two ends of the article are different text
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(cross_encoder)).eval()
    enc = left_tok([query] * 2, texts, truncation="only_second", max_length=128, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = hf(**enc).logits[:, 0].numpy()
    by_index = {r["index"]: r["score"] for r in ranked}
    np.testing.assert_allclose([by_index[0], by_index[1]], want, atol=1e-4)
