"""sentence-transformers' training calls on bertkit: ``bertkit.losses`` against sentence-transformers'
loss classes on the real MiniLM checkpoint and real STS-Lee / polarity text (loss values and named
gradients), and ``SentenceTransformer.fit`` by behaviour (its own fit cannot run without `datasets`):
a short fit on part of STS-Lee raises sentence-transformers' own Spearman on held-out documents, its
folder loads in sentence-transformers with bertkit's vectors, and its first steps equal hand-written
AdamW steps of sentence-transformers' loss on sentence-transformers' model."""

import csv
import json
import shutil

import pytest
import torch
from conftest import sentence_transformers_adamw, without_dropout  # noqa: E402
from torch.utils.data import DataLoader

from bertkit import InputExample, SentenceTransformer, losses
from bertkit.assets import asset_path

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.sentence_transformer import losses as stl  # noqa: E402
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator  # noqa: E402

N = 8  # rows per loss batch: seconds on 2 cores, enough for in-batch negatives
LENGTH = 32  # tokens per text in the loss checks (the documents' first sentence or so)
NAMED = (
    "embeddings.word_embeddings.weight",
    "encoder.layer.0.attention.self.query.weight",
    "encoder.layer.3.intermediate.dense.bias",
    "encoder.layer.5.output.dense.weight",
)


@pytest.fixture(scope="module")
def polarity():
    rows = list(csv.DictReader(open(asset_path("polarity-test"), encoding="utf-8")))
    return [(r["text"], r["label"]) for r in rows[:64]]


@pytest.fixture(scope="module")
def models():
    path = str(asset_path("minilm"))
    ref = st.SentenceTransformer(path, device="cpu")
    ours = SentenceTransformer(path, device="cpu")
    ref.max_seq_length = ours.max_seq_length = LENGTH
    ref.eval()
    ours.training_model.eval()  # no dropout: both sides compute the same function
    return ref, ours


def _named_grads(params):
    return {n: p.grad.detach().clone() for n, p in params if n in NAMED or n.startswith("classifier.")}


def _run(models, cols, make_ours, make_ref, labels, sync=None):
    ref, ours = models
    ref_loss, our_loss = make_ref(ref), make_ours(ours)
    if sync is not None:
        sync(our_loss, ref_loss)
    ref.zero_grad()
    ours.training_model.zero_grad()
    want = ref_loss([ref.preprocess(c) for c in cols], labels)
    want.backward()
    got = our_loss([ours.preprocess(c) for c in cols], labels)
    got.backward()
    g_ref = _named_grads(ref[0].auto_model.named_parameters())
    g_ref.update(_named_grads(ref_loss.named_parameters()))
    g_ours = _named_grads(ours.training_model.named_parameters())
    g_ours.update(_named_grads(our_loss.named_parameters()))
    return float(got.detach()), float(want.detach()), g_ours, g_ref


def _pairs(lee):
    rows = lee[::37][:N]  # pairs of different documents, scores from 0 to 1
    return [r[0] for r in rows], [r[1] for r in rows], torch.tensor([r[2] for r in rows])


CASES = {
    "MultipleNegativesRankingLoss": (
        "triplet",
        lambda m: losses.MultipleNegativesRankingLoss(m),
        lambda m: stl.MultipleNegativesRankingLoss(m),
    ),
    "MultipleNegativesRankingLoss-dot": (
        "pair",
        lambda m: losses.MultipleNegativesRankingLoss(m, scale=1.0, similarity_fct=st.util.dot_score),
        lambda m: stl.MultipleNegativesRankingLoss(m, scale=1.0, similarity_fct=st.util.dot_score),
    ),
    "MultipleNegativesRankingLoss-symmetric": (
        "pair",
        lambda m: losses.MultipleNegativesSymmetricRankingLoss(m),
        lambda m: stl.MultipleNegativesRankingLoss(
            m, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
        ),
    ),
    "CachedMultipleNegativesRankingLoss": (
        "triplet",
        lambda m: losses.CachedMultipleNegativesRankingLoss(m, mini_batch_size=3),
        lambda m: stl.CachedMultipleNegativesRankingLoss(m, mini_batch_size=3),
    ),
    "CoSENTLoss": ("scored", lambda m: losses.CoSENTLoss(m), lambda m: stl.CoSENTLoss(m)),
    "CosineSimilarityLoss": ("scored", lambda m: losses.CosineSimilarityLoss(m), lambda m: stl.CosineSimilarityLoss(m)),
    "TripletLoss": ("triplet", lambda m: losses.TripletLoss(m), lambda m: stl.TripletLoss(m)),
    "TripletLoss-cosine": (
        "triplet",
        lambda m: losses.TripletLoss(m, losses.TripletDistanceMetric.COSINE, triplet_margin=0.5),
        lambda m: stl.TripletLoss(m, stl.TripletDistanceMetric.COSINE, triplet_margin=0.5),
    ),
    "MatryoshkaLoss": (
        "scored",
        lambda m: losses.MatryoshkaLoss(m, losses.CoSENTLoss(m), [384, 128, 32], [1.0, 0.5, 0.25]),
        lambda m: stl.MatryoshkaLoss(m, stl.CoSENTLoss(m), [384, 128, 32], [1.0, 0.5, 0.25]),
    ),
    "MatryoshkaLoss-cached": (
        "pair",
        lambda m: losses.MatryoshkaLoss(m, losses.CachedMultipleNegativesRankingLoss(m, mini_batch_size=3), [384, 64]),
        lambda m: stl.MatryoshkaLoss(m, stl.CachedMultipleNegativesRankingLoss(m, mini_batch_size=3), [384, 64]),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_loss_equals_sentence_transformers(models, lee, polarity, case):
    """Loss within 1e-5 (relative above 1) and the named parameters' gradients within 1e-4 of their
    norm, fp32, on real text: STS-Lee pairs (with their scores) and polarity reviews as negatives."""
    kind, make_ours, make_ref = CASES[case]
    a, b, scores = _pairs(lee)
    negatives = [t for t, _ in polarity[:N]]
    cols = {"pair": [a, b], "scored": [a, b], "triplet": [a, b, negatives]}[kind]
    labels = scores if kind == "scored" else torch.zeros(N)
    got, want, g_ours, g_ref = _run(models, cols, make_ours, make_ref, labels)
    assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (got, want)
    assert set(g_ref) == set(NAMED), sorted(g_ref)
    for name, g in g_ref.items():
        err = float((g_ours[name] - g).norm()) / float(g.norm())
        assert err < 1e-4, (name, err)


def test_softmax_loss_equals_sentence_transformers(models, polarity):
    """SoftmaxLoss on polarity review pairs labelled same/different sentiment, with the classifier's
    weights copied from sentence-transformers' (both start random): the loss and the encoder's and
    classifier's gradients agree."""
    a = [t for t, _ in polarity[:N]]
    b = [t for t, _ in polarity[N : 2 * N]]
    labels = torch.tensor([int(x[1] == y[1]) for x, y in zip(polarity[:N], polarity[N : 2 * N])])

    def copy(ours, ref):
        ours.classifier.load_state_dict(ref.classifier.state_dict())

    got, want, g_ours, g_ref = _run(
        models,
        [a, b],
        lambda m: losses.SoftmaxLoss(m, embedding_dimension=384, num_labels=2),
        lambda m: stl.SoftmaxLoss(m, embedding_dimension=384, num_labels=2),
        labels,
        sync=copy,
    )
    assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (got, want)
    assert {"classifier.weight", "classifier.bias"} <= set(g_ref)
    for name, g in g_ref.items():
        assert float((g_ours[name] - g).norm()) / float(g.norm()) < 1e-4, name


def _split_by_document(lee):
    """Train on pairs among the first 30 documents, hold out pairs among the last 20: no held-out
    text is seen in training."""
    docs = list(dict.fromkeys([t for r in lee for t in r[:2]]))
    train_docs = set(docs[:30])
    train = [r for r in lee if r[0] in train_docs and r[1] in train_docs]
    held = [r for r in lee if r[0] not in train_docs and r[1] not in train_docs]
    return train, held


def _evaluator(rows, name):
    return EmbeddingSimilarityEvaluator([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], name=name)


def test_fit_improves_held_out_spearman_and_saves_the_best(lee, tmp_path, capfd):
    """CoSENT on STS-Lee pairs of 30 documents raises sentence-transformers' own Spearman on pairs of
    the other 20; with an evaluator, each better score is saved into output_path: the folder, loaded
    by sentence-transformers, scores the best of the scores fit reported and gives bertkit's vectors."""
    path = str(asset_path("minilm"))
    train, held = _split_by_document(lee)
    evaluator = _evaluator(held, "lee-held")
    base = st.SentenceTransformer(path, device="cpu")
    base.max_seq_length = 64  # the documents' first sentences: seconds a step on 2 cores
    before = evaluator(base)[evaluator.primary_metric]

    model = SentenceTransformer(path, device="cpu")
    model.max_seq_length = 64
    examples = [InputExample(texts=[a, b], label=s) for a, b, s in train[:192]]
    reported = []
    out, ckpt = tmp_path / "out", tmp_path / "run"
    model.fit(
        train_objectives=[(DataLoader(examples, shuffle=True, batch_size=16), losses.CoSENTLoss(model))],
        evaluator=evaluator,
        epochs=1,
        warmup_steps=2,
        optimizer_params={"lr": 3e-4},
        evaluation_steps=6,
        output_path=str(out),
        callback=lambda score, epoch, steps: reported.append((score, epoch, steps)),
        checkpoint_path=str(ckpt),
        checkpoint_save_steps=6,
        checkpoint_save_total_limit=1,
    )
    assert [s for _, _, s in reported] == [6, 12], reported  # every 6 steps, and at the epoch's end
    assert "fit" in capfd.readouterr().err  # the progress bar
    best = max(score for score, _, _ in reported)

    loaded = st.SentenceTransformer(str(out), device="cpu")
    after = evaluator(loaded)[evaluator.primary_metric]
    assert after == pytest.approx(best, abs=1e-3)
    assert after > before + 0.02, (before, after)
    assert (out / "eval" / "similarity_evaluation_lee-held_results.csv").is_file()

    texts = [r[0] for r in held[:16]]
    want = loaded.encode(texts, convert_to_tensor=True)
    torch.testing.assert_close(torch.as_tensor(SentenceTransformer(str(out)).encode(texts)), want, atol=2e-5, rtol=1e-4)
    if reported[-1][0] == best:  # the model in memory is the one saved
        torch.testing.assert_close(torch.as_tensor(model.encode(texts)), want, atol=2e-5, rtol=1e-4)

    rows = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, 13))
    assert [p.name for p in (ckpt / "checkpoints").iterdir()] == ["step-0000012"]  # the limit of 1: the final one


def _no_dropout_minilm(tmp_path):
    folder = tmp_path / "minilm-no-dropout"
    shutil.copytree(asset_path("minilm"), folder)
    return without_dropout(folder)


def reference_cosent_steps(ref, rows, lr: float) -> None:
    """Two steps of sentence-transformers' CoSENTLoss on its model ``ref``, written out as its fit takes
    them: batches of 8 (text, text, score) rows, AdamW in two weight-decay groups, the second step at
    half the rate (the linear schedule of a 2-step fit), gradients clipped to norm 1."""
    opt = sentence_transformers_adamw(ref.named_parameters(), lr)
    ref_loss = stl.CoSENTLoss(ref)
    for i, factor in enumerate((1.0, 0.5)):
        batch = rows[8 * i : 8 * i + 8]
        for g in opt.param_groups:
            g["lr"] = lr * factor
        loss = ref_loss(
            [ref.preprocess([r[0] for r in batch]), ref.preprocess([r[1] for r in batch])],
            torch.tensor([r[2] for r in batch]),
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        opt.zero_grad()


def test_first_steps_equal_hand_written_adamw_steps(lee, tmp_path):
    """Two fit steps (batches in order, no warmup: the rate at step 1 is lr, at step 2 lr/2) equal two
    hand-written steps on sentence-transformers' model: its CoSENTLoss, torch's AdamW over its two
    parameter groups (weight decay 0.01, none on biases and LayerNorm), clipping to norm 1."""
    folder = _no_dropout_minilm(tmp_path)  # dropout masks cannot be matched across libraries
    rows = lee[::23][:16]
    lr = 5e-5

    ref = st.SentenceTransformer(folder, device="cpu")
    ref.max_seq_length = 32
    ref.train()
    enc = ref[0].auto_model
    start = {n: p.detach().clone() for n, p in enc.named_parameters()}
    reference_cosent_steps(ref, rows, lr)

    ours = SentenceTransformer(folder, device="cpu")
    ours.max_seq_length = 32
    examples = [InputExample(texts=[a, b], label=s) for a, b, s in rows]
    ours.fit(
        [(DataLoader(examples, shuffle=False, batch_size=8), losses.CoSENTLoss(ours))],
        warmup_steps=0,
        optimizer_params={"lr": lr},
        show_progress_bar=False,
    )
    got = dict(ours.training_model.named_parameters())
    for name, p in enc.named_parameters():
        if name.startswith("pooler."):  # not on the sentence-embedding path: no gradient on either side
            continue
        if name.endswith("attention.self.key.bias"):
            # shifts every score of a query alike, which softmax ignores: its gradient is zero in exact
            # arithmetic, and AdamW scales either side's rounding noise up to a full step
            continue
        want_delta, got_delta = p.detach() - start[name], got[name].detach() - start[name]
        assert float(want_delta.norm()) > 0, name
        err = float((got_delta - want_delta).norm()) / float(want_delta.norm())
        assert err < 2e-3, (name, err)
    # a step of a hand-written loop over bertkit's loss (plain SGD on both sides), then encode():
    # the inference path takes the weights the loop changed
    batch = [ours.preprocess([r[0] for r in rows[:8]]), ours.preprocess([r[1] for r in rows[:8]])]
    scores = torch.tensor([r[2] for r in rows[:8]])
    for model, loss in ((ours.training_model, losses.CoSENTLoss(ours)), (ref, stl.CoSENTLoss(ref))):
        loss(batch, scores).backward()
        torch.optim.SGD(model.parameters(), lr=1e-2).step()
    torch.testing.assert_close(
        torch.as_tensor(ours.encode([r[0] for r in rows[:4]])),
        ref.encode([r[0] for r in rows[:4]], convert_to_tensor=True),
        atol=1e-5,
        rtol=1e-4,
    )


def test_fit_refuses_bad_input_by_name(models, lee):
    _, model = models
    pairs = [InputExample(texts=[a, b], label=s) for a, b, s in lee[:4]]
    loader = DataLoader(pairs, batch_size=2)
    with pytest.raises(ValueError, match=r"train_objectives\[0\]'s DataLoader holds no examples"):
        model.fit([(DataLoader([], batch_size=2), losses.CoSENTLoss(model))], show_progress_bar=False)
    other = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    with pytest.raises(ValueError, match=r"train_objectives\[0\]'s CoSENTLoss was built on another model object"):
        model.fit([(loader, losses.CoSENTLoss(other))], show_progress_bar=False)
    with pytest.raises(ValueError, match=r"epochs must be an integer of at least 1, got 0"):
        model.fit([(loader, losses.CoSENTLoss(model))], epochs=0)
    with pytest.raises(ValueError, match=r"TripletLoss takes 3 texts per InputExample, got 2"):
        model.fit([(loader, losses.TripletLoss(model))], show_progress_bar=False)
    with pytest.raises(TypeError, match=r"texts must be a list of strings, got 'one text'"):
        InputExample(texts="one text")
    with pytest.raises(ValueError, match=r"scheduler 'WarmupExp' is not one of"):
        model.fit([(loader, losses.CoSENTLoss(model))], scheduler="WarmupExp")
    with pytest.raises(ValueError, match=r"hardness_mode='hard_negatives' is not supported"):
        losses.MultipleNegativesRankingLoss(model, hardness_mode="hard_negatives")
