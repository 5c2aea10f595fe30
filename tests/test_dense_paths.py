"""A sentence-transformers folder with a Dense module (MiniLM, mean pooling, a 384 -> 128 Tanh Dense,
Normalize; saved by sentence-transformers itself) on every path that embeds with a folder: the
server's /embed, /v1/embeddings and /search, `bertkit index`, `evaluate-embeddings`; and
`train-embedder`, which cannot train a Dense, names it instead of training without it.

Tolerance: fp32 on both sides, vectors within 1e-5 (the same maths, batched differently).
"""

import csv
import json

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.cli import main

st = pytest.importorskip("sentence_transformers")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

MINILM = str(asset_path("minilm"))
OUT = 128
ATOL = 1e-5


def _lee() -> list[dict]:
    with open(asset_path("sts-lee"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def dense_folder(tmp_path_factory):
    from sentence_transformers import models

    word = models.Transformer(MINILM)
    pooling = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    gen = torch.Generator().manual_seed(0)
    dense = models.Dense(
        384, OUT, activation_function=torch.nn.Tanh(), init_weight=torch.randn(OUT, 384, generator=gen) * 0.05
    )
    model = st.SentenceTransformer(modules=[word, pooling, dense, models.Normalize()], device="cpu")
    folder = tmp_path_factory.mktemp("dense") / "model"
    model.save(str(folder))
    assert (folder / "2_Dense" / "config.json").is_file()
    return str(folder), model


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    texts = list(dict.fromkeys(r["sentence1"] for r in _lee()))[:40]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(t.replace("\n", " ") for t in texts) + "\n", encoding="utf-8")
    return path, [t.replace("\n", " ") for t in texts]


def test_server_embeds_indexes_and_searches_through_the_dense(dense_folder, corpus, tmp_path):
    from bertkit.search import build_index
    from bertkit.serving.process import server_process

    folder, ref = dense_folder
    path, texts = corpus
    index = build_index(folder, path, tmp_path / "index", dtype="fp32", progress=False)
    with server_process(folder, ["--dtype", "fp32", "--index", str(index)]) as srv:
        info = httpx.get(srv.url + "/info", timeout=30).json()
        embed = httpx.post(srv.url + "/embed", json={"inputs": texts[:5]}, timeout=60)
        openai = httpx.post(srv.url + "/v1/embeddings", json={"input": texts[:2], "dimensions": 64}, timeout=60)
        too_wide = httpx.post(srv.url + "/v1/embeddings", json={"input": "a", "dimensions": OUT + 1}, timeout=60)
        search = httpx.post(srv.url + "/search", json={"inputs": texts[7], "top_k": 3}, timeout=60)
        assert srv.stop() == 0
    assert info["embedding_size"] == OUT and info["hidden_size"] == 384
    assert embed.status_code == 200, embed.text
    want = ref.encode(texts[:5], convert_to_numpy=True)
    np.testing.assert_allclose(np.array(embed.json()["embeddings"]), want, atol=ATOL)
    assert openai.status_code == 200, openai.text
    short = want[:2, :64] / np.linalg.norm(want[:2, :64], axis=1, keepdims=True)
    np.testing.assert_allclose([d["embedding"] for d in openai.json()["data"]], short, atol=ATOL)
    assert too_wide.status_code == 400 and f"embedding size {OUT}" in too_wide.json()["error"]["message"]
    assert search.status_code == 200, search.text
    assert search.json()["results"][0]["text"] == texts[7]


def test_evaluate_embeddings_scores_the_dense_vectors_as_sentence_transformers(dense_folder, tmp_path, capsys):
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    folder, ref = dense_folder
    rows = _lee()[:120]
    sts = tmp_path / "sts.csv"
    with open(sts, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["sentence1", "sentence2", "score"])
        w.writeheader()
        w.writerows({k: r[k] for k in ("sentence1", "sentence2", "score")} for r in rows)
    out = tmp_path / "results.json"
    assert (
        main(["evaluate-embeddings", "--model", folder, "--sts", str(sts), "--output", str(out), "--no-progress"]) == 0
    )
    got = json.loads(out.read_text())["sts"]
    want = EmbeddingSimilarityEvaluator(
        [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [float(r["score"]) for r in rows]
    )(ref)
    assert got["pairs"] == len(rows)
    assert got["spearman"] == pytest.approx(want["spearman_cosine"], abs=1e-6)
    assert got["pearson"] == pytest.approx(want["pearson_cosine"], abs=1e-6)


def test_train_embedder_names_the_dense_it_cannot_train(dense_folder, tmp_path, capsys):
    folder, _ = dense_folder
    train = tmp_path / "train.csv"
    train.write_text("anchor,positive\n" + "".join(f"a{i},b{i}\n" for i in range(8)), encoding="utf-8")
    out = tmp_path / "run"
    code = main(["train-embedder", "--model", folder, "--train", str(train), "--output", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    err = [x for x in err.splitlines() if x.startswith("bertkit ")]  # the error, not the --debug hint
    assert code == 1 and len(err) == 1, err
    assert "modules.json" in err[0] and "Dense" in err[0] and "fit" in err[0]
    assert not out.exists()
