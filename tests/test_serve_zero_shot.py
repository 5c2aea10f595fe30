"""`bertkit serve --task zero-shot-classification` as a real server on a free 127.0.0.1 port: /predict
answers with transformers' zero-shot pipeline's labels and scores for the same NLI-shaped folder
(MiniLM with a seeded 3-label head) and the same real sentences.

Tolerance: the server runs fp32, as transformers does; scores within 1e-5 (the same float32 maths,
batched and padded differently).
"""

import csv
import json
import re
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.serving.app import MAX_CANDIDATE_LABELS
from bertkit.serving.process import server_process

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
transformers = pytest.importorskip("transformers")

from conftest import seeded_head_folder  # noqa: E402
from test_zero_shot import NLI  # noqa: E402  (after the skips: it imports transformers too)

ATOL = 1e-5
LIMIT = 64  # --max-input-tokens: small, so that real reviews go over it
TOPICS = ["sport", "politics", "business", "entertainment", "technology"]


def _reviews(n: int) -> list[str]:
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:n]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return seeded_head_folder(tmp_path_factory.mktemp("nli") / "nli", NLI, seed=1)


@pytest.fixture(scope="module")
def reference(folder):
    return transformers.pipeline("zero-shot-classification", model=folder, device="cpu")


@pytest.fixture(scope="module")
def server(folder):
    args = ["--task", "zero-shot-classification", "--dtype", "fp32", "--max-input-tokens", str(LIMIT)]
    args += ["--max-batch-size", "8", "--max-wait-ms", "50"]
    with server_process(folder, args) as srv:
        yield srv
        code = srv.stop()
    assert code == 0


def _short(n: int) -> list[str]:
    """Reviews' first sentences, short enough that every pair fits LIMIT tokens."""
    out = []
    for review in _reviews(40):
        first = re.split(r"(?<=[.!?])\s+", review)[0]
        if 20 < len(first) < 120:
            out.append(first)
    assert len(out) >= n
    return out[:n]


def _same(got: dict, want: dict) -> None:
    assert got["sequence"] == want["sequence"]
    assert got["labels"] == want["labels"]
    np.testing.assert_allclose(got["scores"], want["scores"], atol=ATOL)


def test_predict_answers_as_transformers_zero_shot_pipeline(server, reference):
    texts = _short(3)
    info = httpx.get(server.url + "/info", timeout=30).json()
    assert info["task"] == "zero-shot-classification" and "/predict" in info["endpoints"]

    r = httpx.post(
        server.url + "/predict", json={"inputs": texts[0], "parameters": {"candidate_labels": TOPICS}}, timeout=60
    )
    assert r.status_code == 200, r.text
    assert r.json()["task"] == "zero-shot-classification"
    _same(r.json()["predictions"], reference(texts[0], candidate_labels=TOPICS))

    # a batch, labels as "a,b,c", another template, multi-label scores
    params = {
        "candidate_labels": "good, bad, boring",
        "hypothesis_template": "The review is {}.",
        "multi_label": True,
    }
    r = httpx.post(server.url + "/predict", json={"inputs": texts, "parameters": params}, timeout=60)
    assert r.status_code == 200, r.text
    want = reference(
        texts, candidate_labels=["good", "bad", "boring"], hypothesis_template="The review is {}.", multi_label=True
    )
    assert len(r.json()["predictions"]) == len(texts)
    for got, w in zip(r.json()["predictions"], want):
        _same(got, w)


def test_concurrent_requests_with_other_labels_each_get_their_own(server, reference):
    """Requests that share a server batch but ask for other labels or templates are scored apart."""
    texts = _short(6)
    asks = [
        {"candidate_labels": TOPICS},
        {"candidate_labels": ["positive", "negative"]},
        {"candidate_labels": TOPICS, "hypothesis_template": "This text is about {}."},
        {"candidate_labels": ["positive", "negative"], "multi_label": True},
    ]
    results: dict[int, httpx.Response] = {}

    def call(i: int) -> None:
        results[i] = httpx.post(
            server.url + "/predict", json={"inputs": texts[i % 6], "parameters": asks[i % 4]}, timeout=120
        )

    threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert len(results) == 12
    for i, r in results.items():
        assert r.status_code == 200, r.text
        ask = asks[i % 4]
        want = reference(
            texts[i % 6],
            candidate_labels=ask["candidate_labels"],
            hypothesis_template=ask.get("hypothesis_template", "This example is {}."),
            multi_label=ask.get("multi_label", False),
        )
        _same(r.json()["predictions"], want)


def test_a_long_text_is_refused_or_cut_from_its_end_as_transformers(server, reference, folder):
    # a news article's first 80 words: over LIMIT tokens with any hypothesis (checked below)
    with open(asset_path("bbcnews-test"), encoding="utf-8") as f:
        long = " ".join(json.loads(f.readline())["text"].split()[:80])
    body = {"inputs": [_short(1)[0], long], "parameters": {"candidate_labels": TOPICS}}
    r = httpx.post(server.url + "/predict", json=body, timeout=60)
    assert r.status_code == 413, r.text
    assert "inputs[1]" in r.json()["error"] and f"--max-input-tokens {LIMIT}" in r.json()["error"]

    r = httpx.post(server.url + "/predict", json={**body, "truncation": "cut"}, timeout=60)
    assert r.status_code == 200, r.text
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    hyp = max(len(tok(f"This example is {x}.", add_special_tokens=False)["input_ids"]) for x in TOPICS)
    n = len(tok(long, add_special_tokens=False)["input_ids"])
    assert n + hyp + 3 > LIMIT
    # the text loses what its longest pair ([CLS] text [SEP] hypothesis [SEP]) has over the limit
    assert r.json()["truncated_tokens"] == [0, n + hyp + 3 - LIMIT]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' own truncation notice
        want = reference.__class__(
            model=reference.model, tokenizer=reference.tokenizer, device=reference.device
        )  # its own copy, so its tokenizer's max length can be set to the server's limit
        want.tokenizer = transformers.AutoTokenizer.from_pretrained(folder, model_max_length=LIMIT)
        ref = want([_short(1)[0], long], candidate_labels=TOPICS)
    for got, w in zip(r.json()["predictions"], ref):
        _same(got, w)


@pytest.mark.parametrize(
    "params, extra, status, needle",
    [
        ({}, {}, 422, "parameters.candidate_labels"),
        ({"candidate_labels": []}, {}, 422, "parameters.candidate_labels"),
        ({"candidate_labels": ["a", 3]}, {}, 422, "parameters.candidate_labels"),
        ({"candidate_labels": ["a", " "]}, {}, 422, "non-empty labels"),
        ({"candidate_labels": [f"l{i}" for i in range(MAX_CANDIDATE_LABELS + 1)]}, {}, 413, "over the limit of"),
        ({"candidate_labels": TOPICS, "hypothesis_template": "no slot"}, {}, 422, "hypothesis_template"),
        ({"candidate_labels": TOPICS, "hypothesis_template": "{label}"}, {}, 422, "hypothesis_template"),
        ({"candidate_labels": TOPICS, "multi_label": "yes"}, {}, 422, "parameters.multi_label"),
        ({"candidate_labels": TOPICS, "top_k": 2}, {}, 422, "top_k"),
        ({"candidate_labels": TOPICS}, {"truncation": "chunk"}, 422, "'error' or 'cut'"),
        ({"candidate_labels": TOPICS}, {"inputs": "  "}, 422, "nothing to classify"),
        ({"candidate_labels": TOPICS}, {"inputs": {"text": "a"}}, 422, "must be a string"),
        (["sport"], {}, 422, "field 'parameters' must be an object"),
        ({"candidate_labels": TOPICS, "hypothesis_template": "word " * 70 + "{}"}, {}, 413, "leaving no room"),
    ],
)
def test_bad_zero_shot_requests_get_one_line_naming_the_field(server, params, extra, status, needle):
    body = {"inputs": "the striker scored twice", "parameters": params, **extra}
    r = httpx.post(server.url + "/predict", json=body, timeout=60)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"] and "\n" not in r.json()["error"]


def test_a_folder_that_is_no_nli_classifier_is_refused_at_start():
    with pytest.raises(RuntimeError, match="server exited with") as err:
        with server_process(asset_path("minilm"), ["--task", "zero-shot-classification", "--dtype", "fp32"]):
            pass
    assert "zero-shot-classification needs" in str(err.value)
    Path(re.search(r"log: (\S+)", str(err.value)).group(1)).unlink()


def test_random_zero_shot_bodies_never_get_a_5xx(server):
    """Random inputs and random ``parameters`` (labels of every JSON type, templates with stray braces,
    lone surrogates, long texts): a 2xx, or a 4xx with a JSON error naming the problem; never a 5xx."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import HealthCheck, settings
    from hypothesis import strategies as st
    from test_fuzz_readers import _body

    # A valid request with one or two fields replaced by random values (never a lone surrogate,
    # which is a 400 before any field is read): each bad value reaches the code behind the checks
    # of the fields before it.
    clean = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20)
    scalar = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | clean
    value = st.one_of(
        scalar,
        st.lists(scalar, max_size=3),
        st.lists(clean, max_size=4),
        st.sampled_from(["{}", "{0}", "{label}", "{", "}{", "{} {}", "cut", "error", "chunk", "word " * 80]),
        st.sampled_from([["good", "bad"], "good, bad", ["{}", "}{"], {"candidate_labels": ["x"]}]),
    )
    fields = ("inputs", "truncation", "candidate_labels", "hypothesis_template", "multi_label", "top_k", "parameters")

    def build(changes: list) -> bytes:
        body = {"inputs": "the striker scored twice", "parameters": {"candidate_labels": TOPICS}}
        for field, v in changes:
            if field in ("inputs", "truncation"):
                body[field] = v
            elif field == "parameters":
                body["parameters"] = v
            elif isinstance(body["parameters"], dict):
                body["parameters"][field] = v
        return _body(body)

    bodies = st.lists(st.tuples(st.sampled_from(fields), value), min_size=1, max_size=2).map(build)
    with httpx.Client(base_url=server.url, timeout=60) as client:

        @settings(
            max_examples=150,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @hypothesis.given(body=bodies)
        def check(body: bytes) -> None:
            r = client.post("/predict", content=body, headers={"content-type": "application/json"})
            if r.status_code >= 500:
                log = server.log.read_text(errors="replace")[-3000:]
                pytest.fail(f"{body[:300]!r}: {r.status_code} {r.text[:300]}\nserver log:\n{log}")
            if r.status_code >= 400:
                assert isinstance(r.json().get("error"), str)

        check()
