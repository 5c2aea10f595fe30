"""The sentence-transformers losses bertkit added beyond MNRL/CoSENT/triplet, against sentence-transformers
6's own loss classes on its own SentenceTransformer, both loaded from the real MiniLM folder with dropout
off (eval mode), on real text cut to 32 tokens: STS-Lee pairs (scores, and 1/0 labels for similar or
not), polarity reviews (and their two classes), STS-Lee documents in four score buckets. The loss
value agrees within 1e-5 (relative above 1); every parameter's gradient within 1e-4 of its norm (fp32,
another reduction order), the floor of that norm at 1e-3 of the whole gradient's norm, for gradients
zero in exact arithmetic (a key bias shifts every attention score of a row alike) that hold rounding
noise only. The teachers' vectors and scores are sentence-transformers' model's own embeddings.

MSELoss with vector labels trains through ``fit`` (InputExample labels: NumPy vectors) and through
``SentenceTransformerTrainer`` (a label column of lists): two steps equal two hand-written AdamW steps
of sentence-transformers' MSELoss on its model (each parameter's change within 2e-3 of its norm, as in
test_st_trainer). Bad input is refused with one ValueError naming the loss, the value and the limit."""

import csv
import functools
import re
import shutil

import numpy as np
import pytest
import torch
from conftest import without_dropout  # noqa: E402
from test_sentence_transformer_fit import models  # noqa: E402, F401  (both models in eval mode, 32 tokens)
from test_st_trainer import _assert_same_changes, _ours, _reference_steps, _seedable_batches, _theirs  # noqa: E402
from torch.utils.data import DataLoader

from bertkit import InputExample, SentenceTransformer, SentenceTransformerTrainer, losses
from bertkit.assets import asset_path
from bertkit.training_args import SentenceTransformerTrainingArguments

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.sentence_transformer import losses as stl  # noqa: E402

N = 8  # rows per batch of the pair losses: seconds on 2 cores, enough for in-batch negatives
LENGTH = 32  # tokens per text: a document's first sentence or so


@pytest.fixture(scope="module")
def polarity():
    rows = list(csv.DictReader(open(asset_path("polarity-test"), encoding="utf-8")))
    return [(r["text"], int(r["label"] == "positive")) for r in rows]


@pytest.fixture(scope="module")
def data(lee, polarity):
    """The columns and labels of every case, from real text; teachers are sentence-transformers' model."""
    rows = lee[::37][:N]  # pairs of different documents, scores from 0 to 1
    a, b, scores = [r[0] for r in rows], [r[1] for r in rows], torch.tensor([r[2] for r in rows])
    neg = [t for t, _ in polarity[:N]]
    neg2 = [t for t, _ in polarity[N : 2 * N]]
    # one column with a class per row: polarity reviews of both classes, STS-Lee documents in 4 buckets
    mixed = polarity[:6] + [r for r in polarity if r[1] != polarity[0][1]][:6]
    docs = sorted({r[0] for r in lee})[:12]
    bucket_of = {}
    for s1, s2, score in lee:
        bucket_of.setdefault(s1, min(3, int(score * 4)))
    # the teacher reads the whole texts (the student their first 32 tokens); sentence-transformers
    # encodes in inference mode: clones are tensors autograd may read
    teacher = st.SentenceTransformer(str(asset_path("minilm")), device="cpu")
    enc = {
        k: teacher.encode(v, convert_to_tensor=True).clone()
        for k, v in {"a": a, "b": b, "neg": neg, "neg2": neg2}.items()
    }
    dot = st.util.pairwise_dot_score
    margin = dot(enc["a"], enc["b"]) - dot(enc["a"], enc["neg"])
    three = torch.stack([dot(enc["a"], enc["b"]), dot(enc["a"], enc["neg"]), dot(enc["a"], enc["neg2"])], 1)
    # matched pairs: a document's first sentence and its second (each anchor's positive is its own)
    sentences = [re.split(r"(?<=[.!?])\s+", d) for d in sorted({r[0] for r in lee})]
    matched = [s for s in sentences if len(s) >= 2][:N]
    return {
        "matched": ([[s[0] for s in matched], [s[1] for s in matched]], None),
        "teacher": ([a], enc["b"]),
        "teacher-per-col": ([a, b], torch.stack([enc["b"], enc["a"]], 1)),
        "margin": ([a, b, neg], margin),
        "margin-scores": ([a, b, neg, neg2], three),
        "kl": ([a, b, neg, neg2], three),
        "binary": ([a, b], (scores >= 0.5).long()),  # similar pairs: those scored 0.5 or more
        "scored": ([a, b], scores),
        "pair": ([a, b], None),
        "triplet": ([a, b, neg], None),
        "classes": ([[t for t, _ in mixed]], torch.tensor([c for _, c in mixed])),
        "buckets": ([docs], torch.tensor([bucket_of.get(d, 0) for d in docs])),
    }


def _copy_projection(ours, ref):
    ours.projection.load_state_dict(ref.projection.state_dict())


@functools.cache  # a guide is not trained: the cases share each one
def _guide(kind, length):
    path = str(asset_path("minilm"))
    guide = st.SentenceTransformer(path, device="cpu") if kind == "st" else SentenceTransformer(path, device="cpu")
    guide.max_seq_length = length
    if kind == "st":
        guide.eval()
    else:
        guide.training_model.eval()
    return guide


# case -> (data key, bertkit loss of the model, sentence-transformers' loss of its model, sync of weights)
CASES = {
    "MSELoss": ("teacher", lambda m: losses.MSELoss(m), lambda m: stl.MSELoss(m), None),
    "MSELoss-per-column": ("teacher-per-col", lambda m: losses.MSELoss(m), lambda m: stl.MSELoss(m), None),
    "MatryoshkaLoss-MSELoss": (
        "teacher",
        lambda m: losses.MatryoshkaLoss(m, losses.MSELoss(m), [384, 128, 32], [1.0, 0.5, 0.25]),
        lambda m: stl.MatryoshkaLoss(m, stl.MSELoss(m), [384, 128, 32], [1.0, 0.5, 0.25]),
        None,
    ),
    "EmbedDistillLoss-l2": (
        "teacher",
        lambda m: losses.EmbedDistillLoss(m, "l2"),
        lambda m: stl.EmbedDistillLoss(m, "l2"),
        None,
    ),
    "EmbedDistillLoss-cosine-projection": (
        "teacher",
        lambda m: losses.EmbedDistillLoss(m, projection_dim=384),
        lambda m: stl.EmbedDistillLoss(m, projection_dim=384),
        _copy_projection,
    ),
    "MarginMSELoss": ("margin", lambda m: losses.MarginMSELoss(m), lambda m: stl.MarginMSELoss(m), None),
    "MarginMSELoss-scores-cosine": (
        "margin-scores",
        lambda m: losses.MarginMSELoss(m, st.util.pairwise_cos_sim),
        lambda m: stl.MarginMSELoss(m, st.util.pairwise_cos_sim),
        None,
    ),
    "DistillKLDivLoss": ("kl", lambda m: losses.DistillKLDivLoss(m), lambda m: stl.DistillKLDivLoss(m), None),
    "DistillKLDivLoss-temperatures": (
        "kl",
        lambda m: losses.DistillKLDivLoss(m, temperature=2.0, teacher_temperature=0.5),
        lambda m: stl.DistillKLDivLoss(m, temperature=2.0, teacher_temperature=0.5),
        None,
    ),
    "ContrastiveLoss": ("binary", lambda m: losses.ContrastiveLoss(m), lambda m: stl.ContrastiveLoss(m), None),
    "ContrastiveLoss-euclidean-sum": (
        "binary",
        lambda m: losses.ContrastiveLoss(m, losses.SiameseDistanceMetric.EUCLIDEAN, margin=5.0, size_average=False),
        lambda m: stl.ContrastiveLoss(m, stl.SiameseDistanceMetric.EUCLIDEAN, margin=5.0, size_average=False),
        None,
    ),
    "OnlineContrastiveLoss": (
        "binary",
        lambda m: losses.OnlineContrastiveLoss(m, margin=0.8),
        lambda m: stl.OnlineContrastiveLoss(m, margin=0.8),
        None,
    ),
    "OnlineContrastiveLoss-euclidean": (
        "binary",
        lambda m: losses.OnlineContrastiveLoss(m, losses.SiameseDistanceMetric.EUCLIDEAN, margin=5.0),
        lambda m: stl.OnlineContrastiveLoss(m, stl.SiameseDistanceMetric.EUCLIDEAN, margin=5.0),
        None,
    ),
    "BatchHardTripletLoss": (
        "classes",
        lambda m: losses.BatchHardTripletLoss(m),
        lambda m: stl.BatchHardTripletLoss(m),
        None,
    ),
    "BatchHardTripletLoss-cosine-buckets": (
        "buckets",
        lambda m: losses.BatchHardTripletLoss(m, losses.BatchHardTripletLossDistanceFunction.cosine_distance, 0.5),
        lambda m: stl.BatchHardTripletLoss(m, stl.BatchHardTripletLossDistanceFunction.cosine_distance, 0.5),
        None,
    ),
    "BatchAllTripletLoss": (
        "classes",
        lambda m: losses.BatchAllTripletLoss(m),
        lambda m: stl.BatchAllTripletLoss(m),
        None,
    ),
    "BatchAllTripletLoss-cosine-buckets": (
        "buckets",
        lambda m: losses.BatchAllTripletLoss(m, losses.BatchHardTripletLossDistanceFunction.cosine_distance, 0.3),
        lambda m: stl.BatchAllTripletLoss(m, stl.BatchHardTripletLossDistanceFunction.cosine_distance, 0.3),
        None,
    ),
    "BatchSemiHardTripletLoss": (
        "classes",
        lambda m: losses.BatchSemiHardTripletLoss(m),
        lambda m: stl.BatchSemiHardTripletLoss(m),
        None,
    ),
    "BatchSemiHardTripletLoss-cosine-buckets": (
        "buckets",
        lambda m: losses.BatchSemiHardTripletLoss(m, losses.BatchHardTripletLossDistanceFunction.cosine_distance, 0.3),
        lambda m: stl.BatchSemiHardTripletLoss(m, stl.BatchHardTripletLossDistanceFunction.cosine_distance, 0.3),
        None,
    ),
    "BatchHardSoftMarginTripletLoss": (
        "buckets",
        lambda m: losses.BatchHardSoftMarginTripletLoss(m),
        lambda m: stl.BatchHardSoftMarginTripletLoss(m),
        None,
    ),
    "AnglELoss": ("scored", lambda m: losses.AnglELoss(m), lambda m: stl.AnglELoss(m), None),
    "AnglELoss-triplets": ("triplet", lambda m: losses.AnglELoss(m), lambda m: stl.AnglELoss(m), None),
    "CachedMultipleNegativesSymmetricRankingLoss": (
        "pair",
        lambda m: losses.CachedMultipleNegativesSymmetricRankingLoss(m, mini_batch_size=4),
        lambda m: stl.CachedMultipleNegativesSymmetricRankingLoss(m, mini_batch_size=4),
        None,
    ),
    "MegaBatchMarginLoss": (
        "matched",
        lambda m: losses.MegaBatchMarginLoss(m, mini_batch_size=3),
        lambda m: stl.MegaBatchMarginLoss(m, mini_batch_size=3),
        None,
    ),
    "MegaBatchMarginLoss-whole-batch": (
        "matched",
        lambda m: losses.MegaBatchMarginLoss(m, 0.9, 0.1, use_mini_batched_version=False),
        lambda m: stl.MegaBatchMarginLoss(m, 0.9, 0.1, use_mini_batched_version=False),
        None,
    ),
    "GlobalOrthogonalRegularizationLoss": (
        "pair",
        lambda m: losses.GlobalOrthogonalRegularizationLoss(m),
        lambda m: stl.GlobalOrthogonalRegularizationLoss(m),
        None,
    ),
    "GlobalOrthogonalRegularizationLoss-dot-sum": (
        "triplet",
        lambda m: losses.GlobalOrthogonalRegularizationLoss(m, st.util.dot_score, 0.5, 2.0, "sum"),
        lambda m: stl.GlobalOrthogonalRegularizationLoss(m, st.util.dot_score, 0.5, 2.0, "sum"),
        None,
    ),
    "GISTEmbedLoss": (
        "pair",
        lambda m: losses.GISTEmbedLoss(m, _guide("ours", LENGTH)),
        lambda m: stl.GISTEmbedLoss(m, _guide("st", LENGTH)),
        None,
    ),
    # a guide of 12 tokens re-tokenizes the texts: its similarities differ from the model's
    "GISTEmbedLoss-retokenized-relative": (
        "triplet",
        lambda m: losses.GISTEmbedLoss(m, _guide("ours", 12), 0.05, "relative", 0.1),
        lambda m: stl.GISTEmbedLoss(m, _guide("st", 12), 0.05, "relative", 0.1),
        None,
    ),
    "CachedGISTEmbedLoss": (
        "triplet",
        lambda m: losses.CachedGISTEmbedLoss(m, _guide("ours", 12), mini_batch_size=4, margin=0.05),
        lambda m: stl.CachedGISTEmbedLoss(m, _guide("st", 12), mini_batch_size=4, margin=0.05),
        None,
    ),
}


def _all_grads(module, but=None):
    """Parameter name -> gradient, leaving out the parameters of ``but`` (a loss's model)."""
    skip = {id(p) for p in but.parameters()} if but is not None else set()
    return {
        n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None and id(p) not in skip
    }


@pytest.mark.filterwarnings("ignore:The CachedMultipleNegativesSymmetricRankingLoss is deprecated")
@pytest.mark.parametrize("case", list(CASES))
def test_loss_equals_sentence_transformers(models, data, case):
    """Loss within 1e-5 (relative above 1); every gradient within 1e-4 of its norm (module docs)."""
    key, make_ours, make_ref, sync = CASES[case]
    cols, labels = data[key]
    ref, ours = models
    ref_loss, our_loss = make_ref(ref), make_ours(ours)
    if sync is not None:
        sync(our_loss, ref_loss)
    ref.zero_grad()
    ours.training_model.zero_grad()
    want = ref_loss([ref.preprocess(c) for c in cols], labels)
    if isinstance(want, dict):  # GlobalOrthogonalRegularizationLoss: terms its trainer sums
        want = sum(want.values())
    want.backward()
    got = our_loss([ours.preprocess(c) for c in cols], labels)
    got.backward()
    got, want = float(got.detach()), float(want.detach())
    assert want > 0, case  # a case whose loss is 0 would check nothing
    assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (got, want)
    g_ref = {**_all_grads(ref[0].auto_model), **{f"loss.{n}": g for n, g in _all_grads(ref_loss, ref).items()}}
    g_ours = {
        **_all_grads(ours.training_model),
        **{f"loss.{n}": g for n, g in _all_grads(our_loss, ours.training_model).items()},
    }
    g_ref = {n: g for n, g in g_ref.items() if not n.startswith("pooler.")}  # off the sentence-embedding path
    assert sorted(g_ref) == sorted(n for n in g_ours if not n.startswith("pooler.")), case
    total = float(torch.sqrt(sum((g.double() ** 2).sum() for g in g_ref.values())))
    assert total > 0, case
    for name, g in g_ref.items():
        err = float((g_ours[name] - g).norm()) / max(float(g.norm()), 1e-3 * total)
        assert err < 1e-4, (case, name, err)


# -- training with vector labels -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm") / "minilm-no-dropout"
    shutil.copytree(asset_path("minilm"), out)
    return without_dropout(out)  # dropout masks cannot be matched across libraries


@pytest.fixture(scope="module")
def distill_rows(lee, folder):
    """16 (student text, teacher vector) rows: each STS-Lee first document is trained towards
    sentence-transformers' vector of its partner document."""
    rows = lee[::23][:16]
    teacher = st.SentenceTransformer(folder, device="cpu")
    vectors = teacher.encode([r[1] for r in rows], convert_to_numpy=True)
    return [r[0] for r in rows], vectors


def test_mse_fit_with_vector_labels_equals_hand_written_steps(folder, distill_rows):
    """fit on InputExamples labelled with NumPy teacher vectors, batches of 8 in order, no warmup or
    weight decay: the same changes as two hand-written steps of sentence-transformers' MSELoss."""
    texts, vectors = distill_rows
    lr = 5e-5
    ref = _theirs(folder)
    mse = stl.MSELoss(ref)
    steps = [(mse, [texts[s : s + 8]], torch.from_numpy(vectors[s : s + 8])) for s in (0, 8)]
    start, enc = _reference_steps(ref, steps, lr, 0.0)

    ours = _ours(folder)
    examples = [InputExample(texts=[t], label=v) for t, v in zip(texts, vectors)]
    ours.fit(
        [(DataLoader(examples, shuffle=False, batch_size=8), losses.MSELoss(ours))],
        warmup_steps=0,
        weight_decay=0.0,
        optimizer_params={"lr": lr},
        show_progress_bar=False,
    )
    _assert_same_changes(start, enc, ours)


def test_mse_trainer_with_a_label_column_of_lists_equals_hand_written_steps(folder, distill_rows, tmp_path):
    """SentenceTransformerTrainer on a dict with a text column and a "label" column of lists (the teacher
    vectors), batches of 8 as sentence-transformers' sampler draws them (seed 12): two steps as written."""
    texts, vectors = distill_rows
    lr = 5e-5
    ref = _theirs(folder)
    mse = stl.MSELoss(ref)
    batches = _seedable_batches(16, 8, seed=12)
    steps = [(mse, [[texts[i] for i in b]], torch.from_numpy(vectors[b])) for b in batches]
    start, enc = _reference_steps(ref, steps, lr, 0.0)

    ours = _ours(folder)
    data = {"english": texts, "label": [v.tolist() for v in vectors]}
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"),
        num_train_epochs=1,
        per_device_train_batch_size=8,
        learning_rate=lr,
        seed=12,
        save_strategy="no",
    )
    SentenceTransformerTrainer(model=ours, args=args, train_dataset=data, loss=losses.MSELoss(ours)).train()
    _assert_same_changes(start, enc, ours)


# -- bad input -----------------------------------------------------------------------------------------


def _fit(model, examples, loss):
    model.fit([(DataLoader(examples, batch_size=4), loss)], show_progress_bar=False)


def test_bad_input_is_refused_by_name(models, lee, tmp_path):
    """Wrong column counts, labels of the wrong shape, a teacher of the wrong width, an unknown distance
    metric: one ValueError naming the loss, the value and the limit, before any step."""
    _, model = models
    texts = [r[0] for r in lee[:8]]
    vec = np.zeros(384, dtype=np.float32)
    with pytest.raises(ValueError, match=r"MSELoss: the teacher's vectors are 100 wide, the student's embeddings 384"):
        _fit(model, [InputExample(texts=[t], label=np.zeros(100, np.float32)) for t in texts], losses.MSELoss(model))
    with pytest.raises(ValueError, match=r"MSELoss: labels must be teacher vectors, \(batch, 384\).*got shape \(8,\)"):
        _fit(model, [InputExample(texts=[t], label=0.5) for t in texts], losses.MSELoss(model))
    with pytest.raises(ValueError, match=r"MSELoss: .*3 teacher vectors per row for 2 text column"):
        _fit(model, [InputExample(texts=[t, t], label=np.stack([vec] * 3)) for t in texts], losses.MSELoss(model))
    with pytest.raises(ValueError, match=r"MSELoss: the teacher's vectors are 384 wide, the student's projected"):
        _fit(model, [InputExample(texts=[t], label=vec) for t in texts], losses.MSELoss(model, projection_dim=64))
    with pytest.raises(ValueError, match=r"labels do not stack into one tensor for MSELoss"):
        ragged = [InputExample(texts=[t], label=np.zeros(384 - i % 2, np.float32)) for i, t in enumerate(texts)]
        _fit(model, ragged, losses.MSELoss(model))
    with pytest.raises(ValueError, match=r"MarginMSELoss takes at least 3 texts per InputExample, got 2"):
        _fit(model, [InputExample(texts=[t, t], label=0.1) for t in texts], losses.MarginMSELoss(model))
    with pytest.raises(ValueError, match=r"MarginMSELoss: labels must be .* \(8, 1\) or .* \(8, 2\) for 1 negative"):
        _fit(model, [InputExample(texts=[t, t, t], label=[0.1, 0.2, 0.3]) for t in texts], losses.MarginMSELoss(model))
    with pytest.raises(ValueError, match=r"DistillKLDivLoss: labels must be the teacher's scores \(8, 2\).*\(8, 3\)"):
        _fit(model, [InputExample(texts=[t] * 3, label=[1.0, 2.0, 3.0]) for t in texts], losses.DistillKLDivLoss(model))
    with pytest.raises(ValueError, match=r"DistillKLDivLoss takes at least 3 texts per InputExample, got 2"):
        _fit(model, [InputExample(texts=[t, t], label=[1.0]) for t in texts], losses.DistillKLDivLoss(model))
    with pytest.raises(ValueError, match=r"DistillKLDivLoss: temperature=0 must be a positive finite number"):
        losses.DistillKLDivLoss(model, temperature=0)
    with pytest.raises(ValueError, match=r"BatchHardTripletLoss takes 1 text per InputExample, got 2"):
        _fit(model, [InputExample(texts=[t, t], label=1) for t in texts], losses.BatchHardTripletLoss(model))
    with pytest.raises(ValueError, match=r"BatchAllTripletLoss: each row's label must be one number .its class."):
        _fit(model, [InputExample(texts=[t], label=[1, 2]) for t in texts], losses.BatchAllTripletLoss(model))
    with pytest.raises(ValueError, match=r"ContrastiveLoss takes 2 texts per InputExample, got 3"):
        _fit(model, [InputExample(texts=[t] * 3, label=1) for t in texts], losses.ContrastiveLoss(model))
    with pytest.raises(ValueError, match=r"GISTEmbedLoss takes 2 to 3 texts per InputExample, got 4"):
        _fit(model, [InputExample(texts=[t] * 4) for t in texts], losses.GISTEmbedLoss(model, model))
    for make, metric in (
        (losses.ContrastiveLoss, "euclidean"),
        (losses.OnlineContrastiveLoss, 2),
        (losses.BatchHardTripletLoss, "cosine"),
        (losses.BatchSemiHardTripletLoss, None),
    ):
        with pytest.raises(ValueError, match=rf"{make.__name__}: distance_metric={metric!r} is not a distance"):
            make(model, distance_metric=metric)
    with pytest.raises(ValueError, match=r"EmbedDistillLoss: distance_metric='kl' is not one of mse, l2, cosine"):
        losses.EmbedDistillLoss(model, "kl")
    with pytest.raises(ValueError, match=r"GISTEmbedLoss: margin_strategy='percent' is not 'absolute' or 'relative'"):
        losses.GISTEmbedLoss(model, model, margin_strategy="percent")
    with pytest.raises(ValueError, match=r"GlobalOrthogonalRegularizationLoss: aggregation='max' is not"):
        losses.GlobalOrthogonalRegularizationLoss(model, aggregation="max")
    # the trainer: a label column of teacher vectors of the wrong width, and of different widths
    args = SentenceTransformerTrainingArguments(output_dir=str(tmp_path / "run"), save_strategy="no")
    wide = {"text": texts, "label": [[0.0] * 100 for _ in texts]}
    with pytest.raises(
        ValueError, match=r"train_dataset \(label column 'label'\): MSELoss: the teacher's vectors are 100"
    ):
        SentenceTransformerTrainer(model=model, args=args, train_dataset=wide, loss=losses.MSELoss(model))
    ragged = {"text": texts, "label": [[0.0] * (384 - i % 2) for i in range(len(texts))]}
    with pytest.raises(ValueError, match=r"label column 'label' row 1 has the shape \(383,\), row 0 \(384,\)"):
        SentenceTransformerTrainer(model=model, args=args, train_dataset=ragged, loss=losses.MSELoss(model))
    no_label = {"anchor": texts, "positive": texts, "negative": texts}
    with pytest.raises(ValueError, match=r"\(no label column\): DistillKLDivLoss: labels must be .* got none"):
        SentenceTransformerTrainer(model=model, args=args, train_dataset=no_label, loss=losses.DistillKLDivLoss(model))


@pytest.mark.parametrize(
    "name",
    [
        "DenoisingAutoEncoderLoss",
        "ContrastiveTensionLoss",
        "ContrastiveTensionLossInBatchNegatives",
        "ContrastiveTensionDataLoader",
        "AdaptiveLayerLoss",
        "Matryoshka2dLoss",
    ],
)
def test_losses_bertkit_does_not_compute_refuse_by_name(models, name):
    """Importable under sentence-transformers' names (so a script's imports work); constructing one says
    which loss and why, in one line."""
    assert name in losses.__all__ and hasattr(stl, name)
    with pytest.raises(NotImplementedError, match=rf"^bertkit\.losses\.{name} is not supported: [^\n]+$"):
        getattr(losses, name)(models[1])


def test_every_sentence_transformers_loss_has_a_name_here():
    """Every name of sentence-transformers' losses module is one of bertkit.losses' (computed or refused)."""
    assert sorted(set(stl.__all__) - set(losses.__all__)) == []
