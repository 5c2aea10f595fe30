"""Static embeddings: bertkit's distil against model2vec's, folders loading both ways with model2vec and
sentence-transformers, the SentenceTransformer / pipeline / index paths, and the bad-input errors.

The teacher is a small random BERT with MiniLM's real tokenizer (30,522 tokens), so every vocabulary
token goes through a model in a second or two; the folder layouts and the tokenization are the real ones.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path

TEXTS = [
    "The Bank of England raised interest rates again.",
    "a cat sat on the mat",
    "Zürich's café serves crème brûlée ☕ at 9am!",  # accents, an [UNK] symbol, digits
    "unbelievably long tokenization of antidisestablishmentarianism",
    "x",
    " ".join(["word"] * 700),  # past model2vec's 512-token cut: bertkit reads it whole, as sentence-transformers
]


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    from bertkit import BertConfig, BertModel, BertTokenizer

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("teacher")
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(cfg).save_pretrained(folder)
    BertTokenizer.from_pretrained(asset_path("minilm")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def distilled(teacher, tmp_path_factory):
    from bertkit.sentence.distill_static import distill_static

    out = tmp_path_factory.mktemp("static") / "bk"
    distill_static(teacher, out, dims=16, dtype="fp32")  # fp32, as model2vec runs the teacher
    return out


def test_distilled_folder_loads_in_model2vec_and_sentence_transformers(distilled):
    model2vec = pytest.importorskip("model2vec")
    import sentence_transformers

    from bertkit import SentenceTransformer, pipeline

    ours = SentenceTransformer(str(distilled))
    mine = ours.encode(TEXTS)
    assert mine.shape == (len(TEXTS), 16) and ours.get_embedding_dimension() == 16
    np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)
    st = sentence_transformers.SentenceTransformer(str(distilled), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(mine, st, atol=1e-6)  # bertkit follows sentence-transformers' rule exactly
    m2v = model2vec.StaticModel.from_pretrained(str(distilled)).encode(TEXTS[:-1])
    assert _cos(mine[:-1], m2v).min() >= 0.999
    pipe = pipeline("sentence-embedding", model=str(distilled))
    np.testing.assert_allclose(pipe.embed(TEXTS), mine, atol=1e-6)
    np.testing.assert_allclose(pipe(TEXTS[0]), mine[0], atol=1e-6)
    cfg = json.loads((distilled / "config.json").read_text())
    assert cfg["model_type"] == "model2vec" and cfg["normalize"] and cfg["hidden_dim"] == 16


def _model2vec_inference():
    """model2vec's own PCA and weights (model2vec/distill/inference.py), read without the package's
    ``__init__``, which asks for the distill extra (whose pins hold transformers below 5.4)."""
    import importlib.util

    m2v = pytest.importorskip("model2vec")
    path = Path(m2v.__file__).parent / "distill" / "inference.py"
    if not path.exists():
        pytest.skip(f"model2vec {m2v.__version__} has no distill/inference.py")
    spec = importlib.util.spec_from_file_location("_model2vec_distill_inference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pca_and_weights_equal_model2vecs():
    """bertkit's PCA (float32 products on torch, a float64 eigenproblem) and Zipf weights against
    model2vec's (NumPy), on rows with a fast-falling spectrum like a teacher's: the same scores, each
    axis signed alike."""
    inference = _model2vec_inference()
    from bertkit.sentence.distill_static import pca, zipf_weights

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3000, 48)) * np.geomspace(4.0, 0.1, 48)).astype(np.float32) + 0.5
    theirs = inference._pca_fit_transform(x, 16)[0]
    ours = pca(x, 16)
    np.testing.assert_allclose(ours, theirs, atol=2e-4 * np.abs(theirs).max())
    np.testing.assert_allclose(zipf_weights(1000, 1e-3), inference.compute_weights(1000, 1e-3), rtol=1e-12)


def test_bertkit_reads_model2vecs_distil_and_matches_it(teacher, distilled, tmp_path):
    pytest.importorskip("model2vec")
    pytest.importorskip("skeletoken")
    import sentence_transformers
    from model2vec.distill import distill

    from bertkit import SentenceTransformer

    theirs = distill(str(teacher), pca_dims=16, quantize_to="float32")
    theirs.save_pretrained(tmp_path / "m2v")
    ours = SentenceTransformer(str(tmp_path / "m2v"))
    mine = ours.encode(TEXTS)
    assert _cos(mine[:-1], theirs.encode(TEXTS[:-1])).min() >= 0.999
    st = sentence_transformers.SentenceTransformer(str(tmp_path / "m2v"), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(mine, st, atol=2e-5)  # float rounding of the sums
    # the same method: bertkit's distil of the same teacher ranks sentences as model2vec's does
    bk = SentenceTransformer(str(distilled)).encode(TEXTS[:-1])
    sims_theirs, sims_ours = mine[:-1] @ mine[:-1].T, bk @ bk.T
    assert np.abs(sims_theirs - sims_ours).max() < 0.02
    vocab_theirs = json.loads((tmp_path / "m2v" / "tokenizer.json").read_text())["model"]["vocab"]
    vocab_ours = json.loads((distilled / "tokenizer.json").read_text())["model"]["vocab"]
    # model2vec also drops [CLS], [SEP] and [MASK]; bertkit keeps them so its tokenizer stays a BERT one
    assert set(vocab_ours) - set(vocab_theirs) == {"[CLS]", "[SEP]", "[MASK]"}
    assert not set(vocab_theirs) - set(vocab_ours)


def test_sentence_transformers_layout_round_trip(distilled, tmp_path):
    model2vec = pytest.importorskip("model2vec")
    import sentence_transformers

    from bertkit import SentenceTransformer, models
    from bertkit.sentence.static import StaticEmbedding, StaticSentenceTransformer

    static = StaticEmbedding.from_model2vec(str(distilled))
    model = SentenceTransformer(modules=[static, models.Normalize()])
    assert isinstance(model, StaticSentenceTransformer) and isinstance(model, SentenceTransformer)
    assert list(model.state_dict()) == ["0.embedding.weight"]
    vecs = model.encode(TEXTS)
    model.save(tmp_path / "st")
    assert (tmp_path / "st" / "0_StaticEmbedding" / "model.safetensors").is_file()
    st = sentence_transformers.SentenceTransformer(str(tmp_path / "st"), device="cpu")
    np.testing.assert_allclose(st.encode(TEXTS), vecs, atol=1e-6)
    np.testing.assert_allclose(SentenceTransformer(str(tmp_path / "st")).encode(TEXTS), vecs, atol=1e-6)
    m2v = model2vec.StaticModel.from_pretrained(str(tmp_path / "st")).encode(TEXTS[:-1])
    assert _cos(vecs[:-1], m2v).min() >= 0.999
    # sentence-transformers' own save of its StaticEmbedding loads in bertkit
    st.save(str(tmp_path / "st2"))
    np.testing.assert_allclose(SentenceTransformer(str(tmp_path / "st2")).encode(TEXTS), vecs, atol=1e-6)


def test_index_and_search_on_a_static_folder(distilled, tmp_path, capsys):
    import csv

    from bertkit.cli import main as cli_main
    from bertkit.search import build_index, load_index

    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)][:50]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    build_index(distilled, corpus, tmp_path / "idx", progress=False)
    index = load_index(tmp_path / "idx")
    assert len(index) == len(texts) and index.meta["dim"] == 16 and index.meta["pooling"] == "mean"
    assert cli_main(["search", "--index", str(tmp_path / "idx"), texts[7], "--top-k", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith(f"[8] {texts[7]}")


def test_bad_input_is_one_clear_line(teacher, distilled, tmp_path):
    from bertkit.modeling.static import load_static
    from bertkit.sentence.distill_static import distill_static

    with pytest.raises(ValueError, match=r"--dims 64 is above the model's width 32"):
        distill_static(teacher, None, dims=64)
    with pytest.raises(ValueError, match="not a sentence model folder"):
        distill_static(asset_path("vocab-uncased").parent, tmp_path / "a")
    with pytest.raises(ValueError, match="already a static embedding model"):
        distill_static(distilled, tmp_path / "b")
    broken = tmp_path / "broken"
    shutil.copytree(distilled, broken)
    spec = json.loads((broken / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    spec["model"]["vocab"] = {t: i for t, i in vocab.items() if i < len(vocab) - 10}
    (broken / "tokenizer.json").write_text(json.dumps(spec))
    n = len(vocab)
    said = rf"tokenizer.json has {n - 10} tokens but .*model.safetensors has {n} vectors"
    with pytest.raises(ValueError, match=said):
        load_static(broken)


def test_serve_embeds_with_a_static_folder(distilled):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from bertkit import SentenceTransformer
    from bertkit.serving.process import server_process

    want = SentenceTransformer(str(distilled)).encode(TEXTS)
    with server_process(distilled, ["--max-wait-ms", "5", "--max-input-tokens", "2048"]) as srv:
        r = httpx.post(srv.url + "/embed", json={"inputs": TEXTS}, timeout=60)
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(np.array(r.json()["embeddings"]), want, atol=1e-5)
        r = httpx.post(srv.url + "/v1/embeddings", json={"input": TEXTS[:2], "model": "m", "dimensions": 8}, timeout=60)
        assert r.status_code == 200, r.text
        got = np.array([d["embedding"] for d in r.json()["data"]])
        cut = want[:2, :8] / np.linalg.norm(want[:2, :8], axis=1, keepdims=True)
        np.testing.assert_allclose(got, cut, atol=1e-5)
        assert srv.stop() == 0


def test_vocabulary_extension_adds_whole_words(teacher, tmp_path):
    model2vec = pytest.importorskip("model2vec")
    from bertkit import SentenceTransformer
    from bertkit.sentence.distill_static import distill_static

    words = ["Blockchainify", "hello", "two words", "zorblax"]  # new, known, split by the pre-tokenizer, new
    distill_static(teacher, tmp_path / "words", dims=8, vocabulary=words, dtype="fp32")
    vocab = json.loads((tmp_path / "words" / "tokenizer.json").read_text())["model"]["vocab"]
    assert list(vocab)[-2:] == ["blockchainify", "zorblax"] and "two words" not in vocab
    model = SentenceTransformer(str(tmp_path / "words"))
    assert model.tokenizer.tokenize("Blockchainify zorblax") == ["blockchainify", "zorblax"]
    texts = ["blockchainify the zorblax", "hello"]
    theirs = model2vec.StaticModel.from_pretrained(str(tmp_path / "words"))
    assert theirs.tokenize(["Blockchainify"])[0] == [vocab["blockchainify"]]
    assert _cos(model.encode(texts), theirs.encode(texts)).min() >= 0.999


def test_training_a_static_model_matches_sentence_transformers(distilled, tmp_path):
    """MNRL on a StaticEmbedding: the same loss and gradient as sentence-transformers on the same batch,
    and fit() trains the table that encode() then reads."""
    import sentence_transformers
    from sentence_transformers import losses as st_losses
    from torch.utils.data import DataLoader

    from bertkit import InputExample, SentenceTransformer, losses

    anchors, positives = TEXTS[:4], [t[::-1] for t in TEXTS[:4]]
    ours = SentenceTransformer(str(distilled))
    theirs = sentence_transformers.SentenceTransformer(str(distilled), device="cpu")
    got = []
    for model, loss_cls in (
        (ours, losses.MultipleNegativesRankingLoss),
        (theirs, st_losses.MultipleNegativesRankingLoss),
    ):
        loss = loss_cls(model)([model.tokenize(anchors), model.tokenize(positives)], torch.zeros(4, dtype=torch.long))
        loss.backward()
        got.append((loss.item(), model[0].embedding.weight.grad.clone()))
    assert got[0][0] == pytest.approx(got[1][0], abs=1e-5)
    torch.testing.assert_close(got[0][1], got[1][1], atol=1e-6, rtol=1e-4)

    before = ours.encode(anchors)
    examples = [InputExample(texts=[a, p]) for a, p in zip(anchors, positives)]
    ours.fit(
        [(DataLoader(examples, batch_size=4), losses.MultipleNegativesRankingLoss(ours))],
        epochs=2,
        optimizer_params={"lr": 0.1},
        warmup_steps=0,
        show_progress_bar=False,
    )
    after = ours.encode(anchors)
    assert np.abs(after - before).max() > 1e-3
    ours.save(tmp_path / "trained")
    reread = sentence_transformers.SentenceTransformer(str(tmp_path / "trained"), device="cpu").encode(anchors)
    np.testing.assert_allclose(reread, after, atol=1e-6)
