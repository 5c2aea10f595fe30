"""Embedding losses against sentence-transformers' on the real MiniLM checkpoint and real BBC text:
loss values and every parameter's gradient of bertkit's loss classes (the ones ``fit``, the trainer and,
through the same formulas, ``train-embedder`` train with); GradCache against the full batch, for the
classes and for train-embedder's ``make_loss``; the sentence-embedding folder loaded by both libraries."""

import json
import re

import pytest
import torch

from bertkit import SentenceTransformer, losses
from bertkit.assets import asset_path
from bertkit.modeling.sentence import load_sentence_encoder
from bertkit.sentence.losses import functional as L

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.sentence_transformer import losses as stl  # noqa: E402

N = 8  # rows per batch: small enough for seconds on 2 cores, large enough for in-batch negatives


@pytest.fixture(scope="module")
def texts():
    """anchor = an article's first sentence, positive = its second, negative = another article's third."""
    rows = [json.loads(line) for line in open(asset_path("bbcnews-test"), encoding="utf-8")]
    sents = [[s for s in re.split(r"(?<=[.!?])\s+", r["text"]) if len(s) > 20] for r in rows[:40]]
    sents = [s for s in sents if len(s) >= 3][:N]
    return ([s[0][:200] for s in sents], [s[1][:200] for s in sents], [sents[(i + 1) % N][2][:200] for i in range(N)])


@pytest.fixture(scope="module")
def models():
    path = str(asset_path("minilm"))
    ref = st.SentenceTransformer(path, device="cpu")
    ours = SentenceTransformer(path, device="cpu")
    ref.eval()
    ours.training_model.eval()  # no dropout: both sides must see the same function
    return ref, ours


def _grads(params):
    return {n: p.grad.detach().clone() for n, p in params if p.grad is not None}


def _run_both(models, texts_cols, ours_loss, ref_loss, labels=None):
    ref, ours = models
    ref.zero_grad()
    ours.training_model.zero_grad()
    feats_ref = [ref.preprocess(c) for c in texts_cols]
    lab = labels if labels is not None else torch.zeros(len(texts_cols[0]))
    lr = ref_loss(feats_ref, lab)
    lr.backward()
    g_ref = _grads(ref[0].auto_model.named_parameters())
    lo = ours_loss([ours.preprocess(c) for c in texts_cols], labels)
    lo.backward()
    g_ours = _grads(ours.training_model.named_parameters())
    return float(lo.detach()), float(lr.detach()), g_ours, g_ref


def _assert_same(lo, lr, g_ours, g_ref):
    assert abs(lo - lr) <= 1e-4 * max(1.0, abs(lr)), (lo, lr)
    assert set(g_ref) <= set(g_ours), sorted(set(g_ref) - set(g_ours))[:3]
    _close_grads(g_ours, g_ref)


def _close_grads(got, want):
    """Each parameter's gradient within 1e-3 of its norm (fp32, another reduction order). The floor
    at 1e-4 of the whole gradient's norm is for gradients that are zero in exact arithmetic (a key
    bias shifts every attention score of a row alike) and hold rounding noise only."""
    floor = 1e-4 * float(torch.sqrt(sum((g.double() ** 2).sum() for g in want.values())))
    for name, g in want.items():
        if name.startswith("pooler."):  # not on the sentence-embedding path
            continue
        err = float((got[name] - g).norm()) / max(float(g.norm()), floor)
        assert err < 1e-3, (name, err)


@pytest.mark.parametrize("symmetric", [False, True])
def test_mnrl_equals_sentence_transformers(models, texts, symmetric):
    a, p, n = texts
    ref_loss = (
        stl.MultipleNegativesRankingLoss(models[0], scale=20.0)
        if not symmetric
        else stl.MultipleNegativesRankingLoss(
            models[0], scale=20.0, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
        )
    )
    cols = [a, p, n] if not symmetric else [a, p]
    kind = losses.MultipleNegativesSymmetricRankingLoss if symmetric else losses.MultipleNegativesRankingLoss
    _assert_same(*_run_both(models, cols, kind(models[1], scale=20.0), ref_loss))


def test_cosent_equals_sentence_transformers(models, texts):
    a, p, _ = texts
    scores = torch.tensor([0.9, 0.2, 0.75, 0.1, 0.5, 0.5, 0.33, 1.0])[: len(a)]
    ours_loss = losses.CoSENTLoss(models[1], scale=20.0)
    _assert_same(*_run_both(models, [a, p], ours_loss, stl.CoSENTLoss(models[0]), labels=scores))


def test_triplet_equals_sentence_transformers(models, texts):
    ours_loss = losses.TripletLoss(models[1], triplet_margin=5.0)
    _assert_same(*_run_both(models, list(texts), ours_loss, stl.TripletLoss(models[0])))


def test_matryoshka_mnrl_equals_sentence_transformers(models, texts):
    a, p, _ = texts
    dims = [384, 128, 32]
    ref_loss = stl.MatryoshkaLoss(models[0], stl.MultipleNegativesRankingLoss(models[0]), dims)
    ours_loss = losses.MatryoshkaLoss(models[1], losses.MultipleNegativesRankingLoss(models[1]), dims)
    _assert_same(*_run_both(models, [a, p], ours_loss, ref_loss))


def _loss_and_grads(ours, loss, feats, seed=0):
    """A loss class's ``loss(feats)``, or a ``make_loss`` function's ``loss(embed, feats)``."""
    torch.manual_seed(seed)
    ours.training_model.zero_grad()
    v = loss(feats) if isinstance(loss, torch.nn.Module) else loss(lambda f: ours(f)["sentence_embedding"], feats)
    v.backward()
    return float(v.detach()), _grads(ours.training_model.named_parameters())


def _assert_grads_equal(r1, r2):
    assert abs(r1[0] - r2[0]) < 1e-5, (r1[0], r2[0])
    _close_grads(r2[1], r1[1])


def test_cached_mnrl_equals_full_batch(models, texts):
    """GradCache in uneven mini-batches of 3 gives the full batch's loss and gradients."""
    _, ours = models
    feats = [ours.preprocess(c) for c in texts]
    _assert_grads_equal(
        _loss_and_grads(ours, losses.MultipleNegativesRankingLoss(ours), feats),
        _loss_and_grads(ours, losses.CachedMultipleNegativesRankingLoss(ours, mini_batch_size=3), feats),
    )


def test_cached_replays_dropout(models, texts):
    """With dropout on, one mini-batch per column draws the plain loss's dropout masks in its first
    forward; equal gradients show that the second forward (with grad) replays those same masks."""
    _, ours = models
    feats = [ours.preprocess(c) for c in texts[:2]]
    mnrl = losses.MultipleNegativesRankingLoss(ours)
    ours.training_model.train()
    try:
        plain = _loss_and_grads(ours, mnrl, feats)
        cached = losses.CachedMultipleNegativesRankingLoss(ours, mini_batch_size=N)
        _assert_grads_equal(plain, _loss_and_grads(ours, cached, feats))
        ours.training_model.eval()
        with torch.no_grad():  # and dropout was really on
            assert abs(float(mnrl(feats)) - plain[0]) > 1e-4
    finally:
        ours.training_model.eval()


def test_cached_matryoshka_equals_plain(models, texts):
    _, ours = models
    feats = [ours.preprocess(c) for c in texts[:2]]
    plain = _loss_and_grads(ours, L.make_loss("mnrl", [384, 64]), feats)
    _assert_grads_equal(plain, _loss_and_grads(ours, L.make_loss("cached-mnrl", [384, 64], mini_batch_size=3), feats))
    cached = losses.CachedMultipleNegativesRankingLoss(ours, mini_batch_size=3)
    _assert_grads_equal(plain, _loss_and_grads(ours, losses.MatryoshkaLoss(ours, cached, [384, 64]), feats))


def test_sentence_folder_loads_in_both(models, texts, tmp_path):
    """A folder bertkit writes (mean/cls pooling, with and without normalisation) is loaded by
    sentence-transformers as is, and both libraries give the same embeddings."""
    from bertkit import pipeline

    _, ours = models
    a, p, _ = texts
    for pooling, normalize in (("cls", False), ("mean", True)):
        folder = tmp_path / f"{pooling}-{normalize}"
        enc = load_sentence_encoder(asset_path("minilm"), pooling=pooling, normalize=normalize, max_seq_length=128)
        enc.save(folder)
        assert json.loads((folder / "1_Pooling" / "config.json").read_text())[
            f"pooling_mode_{pooling}_token" + ("s" if pooling == "mean" else "")
        ]
        ref = st.SentenceTransformer(str(folder), device="cpu")
        assert ref.max_seq_length == 128
        want = ref.encode(a + p, convert_to_tensor=True)
        got = torch.tensor(pipeline("sentence-embedding", model=folder)(a + p))
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(enc.encode(a + p), want, atol=2e-5, rtol=1e-4)
        if normalize:
            torch.testing.assert_close(got.norm(dim=1), torch.ones(len(got)), atol=1e-5, rtol=0)
