"""The cross-encoder learning-to-rank losses (ListNetLoss, LambdaLoss and its weighting schemes,
RankNetLoss, ListMLELoss, PListMLELoss, ADRMSELoss), MarginMSELoss and listwise datasets in
``CrossEncoderTrainer``, against sentence-transformers 6 on the real MiniLM with a seeded one-label head
(dropout off) and real STS-Lee text: a query is a document's first sentence, its documents the documents
it was compared with, its labels their human similarity scores (graded 0..4, with ties, or as given).
Lists differ in length within a batch, one holds a single document.

Each loss's value agrees within 1e-5 and every parameter's gradient within 1e-4 of its norm (plus 1e-6
for the gradients that are zero in exact arithmetic: the attention key biases', and the head bias's
under a loss that sees only differences of a query's scores) with sentence-transformers' loss of the same name and
settings on its own CrossEncoder loaded from the same folder: fp32 sums in a different order, nothing
more. A CrossEncoderTrainer run equals hand-written AdamW steps of sentence-transformers' loss (each
parameter's change within 2e-3 of its norm, as in test_cross_encoder_trainer), and the saved folder
scores alike in sentence-transformers' CrossEncoder."""

from collections import defaultdict

import numpy as np
import pytest
import torch
from test_cross_encoder_trainer import (  # noqa: F401 (head1 is a fixture used by name)
    LENGTH,
    _args,
    _assert_same_changes,
    _assert_same_value_and_gradients,
    _ours,
    _reference_steps,
    _theirs,
    head1,
)
from test_st_trainer import _seedable_batches

from bertkit import CrossEncoder
from bertkit.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments, losses
from bertkit.cross_encoder.losses import LambdaLoss, NDCGLoss2PPScheme

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.cross_encoder import losses as cel  # noqa: E402


def _short(text, words=16):
    return " ".join(text.split(". ")[0].split()[:words])


def _listwise(lee, start, sizes, graded=True):
    """Rows (query, documents, labels) from STS-Lee: for the ``start``-th document and on, the query is
    its first sentence; its documents are ``sizes[i]`` of the documents it was scored against, spread
    over the score range and interleaved so that the list is not sorted; the labels are the human
    scores times 4 rounded (graded, with ties), or the scores themselves."""
    by_doc = defaultdict(list)
    for a, b, score in lee:
        by_doc[a].append((b, score))
    firsts = [a for a in by_doc if len(by_doc[a]) >= 12]
    out = []
    for a, n in zip(firsts[start:], sizes):
        pairs = sorted(by_doc[a], key=lambda p: p[1])
        picked = [pairs[round(i * (len(pairs) - 1) / max(1, n - 1))] for i in range(n)]
        picked = picked[1::2] + picked[0::2]
        labels = [round(s * 4) if graded else s for _, s in picked]
        out.append((_short(a), [_short(b) for b, _ in picked], labels))
    return out


class _Labels(list):
    """A list of per-query label tensors that moves to a device, as the reference steps move a label tensor."""

    def to(self, device):
        return _Labels(t.to(device) for t in self)


def _inputs(rows):
    return [[r[0] for r in rows], [r[1] for r in rows]], _Labels(torch.tensor(r[2]) for r in rows)


def _fn(mask):
    return 1.0 / (torch.arange(1, mask.size(1) + 1, device=mask.device).float()[None, :] + 1.0) * mask


# name: (constructor of the loss given the model and the losses module, graded labels)
CASES = {
    "listnet": (lambda m, L: L.ListNetLoss(m), True),
    "listnet_sigmoid_mini3_scores": (
        lambda m, L: L.ListNetLoss(m, activation_fn=torch.nn.Sigmoid(), mini_batch_size=3),
        False,
    ),
    "lambda_ndcg2pp": (lambda m, L: L.LambdaLoss(m), True),
    "lambda_ndcg2pp_mu3_k2": (lambda m, L: L.LambdaLoss(m, weighting_scheme=L.NDCGLoss2PPScheme(mu=3.0), k=2), True),
    "lambda_ndcg1": (lambda m, L: L.LambdaLoss(m, weighting_scheme=L.NDCGLoss1Scheme()), True),
    "lambda_ndcg2": (lambda m, L: L.LambdaLoss(m, weighting_scheme=L.NDCGLoss2Scheme()), True),
    "lambda_lambdarank_natural_sigma2": (
        lambda m, L: L.LambdaLoss(m, weighting_scheme=L.LambdaRankScheme(), reduction_log="natural", sigma=2.0),
        True,
    ),
    "lambda_noweighting_mini0_scores": (
        lambda m, L: L.LambdaLoss(m, weighting_scheme=L.NoWeightingScheme(), mini_batch_size=0),
        False,
    ),
    "ranknet": (lambda m, L: L.RankNetLoss(m), True),
    "listmle": (lambda m, L: L.ListMLELoss(m), True),
    "plistmle": (lambda m, L: L.PListMLELoss(m), True),
    "plistmle_by_labels_fn": (
        lambda m, L: L.PListMLELoss(m, lambda_weight=L.PListMLELambdaWeight(_fn), respect_input_order=False),
        False,
    ),
    "adrmse": (lambda m, L: L.ADRMSELoss(m), True),
    "adrmse_alpha3_scores": (lambda m, L: L.ADRMSELoss(m, alpha=3.0, mini_batch_size=5), False),
}


@pytest.fixture(scope="module")
def pair(head1):
    """sentence-transformers' CrossEncoder and bertkit's on the same folder, both in training mode; the
    gradient tests only read their gradients (zeroed before each), so one pair serves them all."""
    ref, ours = _theirs(head1), _ours(head1)
    ours.training_model.train()
    return ref, ours


def _zero(ref, ours):
    ref.zero_grad(set_to_none=True)
    ours.training_model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("name", list(CASES))
def test_listwise_loss_value_and_gradients_equal_sentence_transformers(name, pair, lee):
    """Four queries with 4, 2, 3 and 1 documents (the labels tie within lists): the value within 1e-5
    and each gradient within 1e-4 of its norm of sentence-transformers' loss with the same settings."""
    make, graded = CASES[name]
    rows = _listwise(lee, 0, [4, 2, 3, 1], graded)
    assert not graded or any(len(set(r[2])) < len(r[2]) for r in rows)  # graded labels tie
    inputs, labels = _inputs(rows)
    ref, ours = pair
    _zero(ref, ours)
    want = make(ref, cel)(inputs, labels)
    want.backward()
    got = make(ours, losses)(inputs, labels)
    got.backward()
    assert float(want.detach()) != 0.0
    _assert_same_value_and_gradients(want, got, ref, ours, slack=1e-6)


@pytest.mark.parametrize("negatives,kind", [(2, "scores"), (1, "margin")])
def test_margin_mse_value_and_gradients_equal_sentence_transformers(negatives, kind, pair, lee):
    """MarginMSELoss on (query, positive, negative...) columns of six STS-Lee rows: the labels the
    teacher's scores (positive first), one margin per negative, or one margin as a number."""
    rows = lee[4::37][:6]
    negs = [[r[1] for r in lee[k::37][:6]] for k in (11, 23)][:negatives]
    texts = [[_short(r[0]) for r in rows], [_short(r[1]) for r in rows]] + [[_short(t) for t in c] for c in negs]
    teacher = [[r[2] * 5] + [lee[k + 37 * i][2] * 5 for k in (11, 23)][:negatives] for i, r in enumerate(rows)]
    labels = {
        "scores": [torch.tensor(t) for t in teacher],
        "margins": [torch.tensor([t[0] - x for x in t[1:]]) for t in teacher],
        "margin": torch.tensor([t[0] - t[1] for t in teacher]),
    }[kind]
    ref, ours = pair
    _zero(ref, ours)
    want = cel.MarginMSELoss(ref)(texts, labels)
    want.backward()
    got = losses.MarginMSELoss(ours)(texts, labels)
    got.backward()
    _assert_same_value_and_gradients(want, got, ref, ours, slack=1e-6)


def test_config_dicts_name_the_settings_as_sentence_transformers_does(pair):
    """Each loss's get_config_dict has sentence-transformers' keys and values (class paths aside), and
    bertkit.cross_encoder.losses names every loss sentence-transformers' does."""
    assert set(losses.__all__) == set(cel.__all__)
    ref, ours = pair
    for name, (make, _) in CASES.items():
        want, got = make(ref, cel).get_config_dict(), make(ours, losses).get_config_dict()
        assert list(got) == list(want), name
        for key, value in want.items():
            if isinstance(value, str) and "." in value:
                assert got[key].rsplit(".", 1)[1] == value.rsplit(".", 1)[1], (name, key)
            else:
                assert got[key] == value, (name, key)


def test_lambda_loss_trainer_steps_equal_hand_written_steps_and_the_folder_scores_alike(head1, lee, tmp_path):
    """CrossEncoderTrainer with LambdaLoss (NDCGLoss2PPScheme, a sigmoid on the scores) on a listwise
    dataset of four queries (columns query, docs, labels; 1 to 4 documents each), batches of 2 as the
    seeded sampler draws them: the same changes as 2 hand-written AdamW steps of sentence-transformers'
    LambdaLoss on its CrossEncoder; then predict() uses the trained weights and agrees with
    sentence-transformers' CrossEncoder on the saved folder within 1e-5. The sigmoid gives the head's
    bias a gradient: on raw scores the loss sees only their differences, the bias's exact gradient is
    zero, and AdamW would scale its rounding noise up to a full step on either side."""
    rows = _listwise(lee, 4, [4, 2, 3, 1])
    lr = 5e-5
    ref = _theirs(head1)
    lam = cel.LambdaLoss(ref, activation_fn=torch.nn.Sigmoid())
    batches = _seedable_batches(4, 2, seed=12)
    steps = [(lam, *_inputs([rows[i] for i in b])) for b in batches]
    start = _reference_steps(ref, steps, lr, 0.0)

    ours = _ours(head1)
    probe = [(rows[0][0], d) for d in rows[2][1]] + [(rows[3][0], rows[1][1][0])]
    before = ours.predict(probe)
    data = {"query": [r[0] for r in rows], "docs": [r[1] for r in rows], "labels": [r[2] for r in rows]}
    loss = LambdaLoss(ours, weighting_scheme=NDCGLoss2PPScheme(), activation_fn=torch.nn.Sigmoid())
    trainer = CrossEncoderTrainer(
        model=ours, args=_args(tmp_path / "run", per_device_train_batch_size=2), train_dataset=data, loss=loss
    )
    assert [list(b) for b in trainer.batch_sampler] == batches
    trainer.train()
    assert trainer.state.global_step == 2
    _assert_same_changes(start, ref, ours)

    after = ours.predict(probe)
    assert np.abs(after - before).max() > 1e-4
    ours.save_pretrained(tmp_path / "final")
    loaded = st.CrossEncoder(str(tmp_path / "final"), device="cpu", max_length=LENGTH)
    np.testing.assert_allclose(loaded.predict(probe), after, atol=1e-5)


def test_listnet_eval_loss_over_row_dicts_and_no_duplicate_batches(head1, lee, tmp_path):
    """Listwise row dicts as an eval_dataset: evaluate()'s eval_loss is sentence-transformers' ListNetLoss
    over the eval batches (mean over rows) on the same weights; with batch_sampler='no_duplicates' rows
    holding equal lists of documents never share a batch (a list compared whole, by its text, as
    sentence-transformers compares it)."""
    rows = _listwise(lee, 2, [3, 5, 2, 4, 1])
    data = [{"query": q, "docs": d, "labels": y} for q, d, y in rows]
    model = _ours(head1)
    args = _args(tmp_path / "run", per_device_eval_batch_size=2)
    trainer = CrossEncoderTrainer(
        model=model, args=args, train_dataset=data, eval_dataset=data, loss=losses.ListNetLoss(model)
    )
    ref = _theirs(head1)
    ref.eval()
    total = 0.0
    with torch.no_grad():
        for b in _seedable_batches(5, 2, seed=12):
            total += float(cel.ListNetLoss(ref)(*_inputs([rows[i] for i in b]))) * len(b)
    assert trainer.evaluate()["eval_loss"] == pytest.approx(total / 5, rel=1e-5)

    # five queries, each with its own copy of one list of documents: no two may share a batch
    same_docs = [{"query": q, "docs": list(rows[0][1]), "labels": rows[0][2]} for q, _, _ in rows]
    nodup = CrossEncoderTrainer(
        model=model,
        args=_args(tmp_path / "nodup", per_device_train_batch_size=2, batch_sampler="no_duplicates"),
        train_dataset=same_docs,
        loss=losses.ListNetLoss(model),
    )
    batches = [list(b) for b in nodup.batch_sampler]
    assert sorted(i for b in batches for i in b) == list(range(5))
    assert all(len(b) == 1 for b in batches)


def test_bad_listwise_input_is_refused_by_name(head1, lee):
    """One-line ValueErrors naming the loss, the column, the row and the value: before training for a
    dataset, at the call for a batch given to the loss directly."""
    model = CrossEncoder(head1, device="cpu")
    args = CrossEncoderTrainingArguments(output_dir="unused", per_device_train_batch_size=2)
    rows = _listwise(lee, 0, [3, 2, 4])
    good = {"query": [r[0] for r in rows], "docs": [r[1] for r in rows], "labels": [r[2] for r in rows]}

    def make(data, loss):
        return CrossEncoderTrainer(model=model, args=args, train_dataset=data, loss=loss)

    def one_line(match, call):
        with pytest.raises(ValueError, match=match) as e:
            call()
        assert "\n" not in str(e.value)

    listnet = losses.ListNetLoss(model)
    one_line(
        r"^CrossEncoderTrainer: train_dataset column 'docs' row 1 is [\"'].+: not a list of documents: "
        r"ListNetLoss reads rows \(query, \[documents\]\) with a list of labels \(ListNetLoss\)$",
        lambda: make({**good, "docs": [good["docs"][0], good["docs"][1][0], good["docs"][2]]}, listnet),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset label column 'labels' row 2 is \[\d, \d, \d\]: "
        r"3 labels for the row's 4 documents \(LambdaLoss\)$",
        lambda: make({**good, "labels": [*good["labels"][:2], good["labels"][2][:3]]}, losses.LambdaLoss(model)),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset column 'docs' row 0 is \[\]: an empty list of documents: "
        r"PListMLELoss needs at least one document per query \(PListMLELoss\)$",
        lambda: make(
            {**good, "docs": [[], *good["docs"][1:]], "labels": [[], *good["labels"][1:]]}, losses.PListMLELoss(model)
        ),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset column 'docs' row 0 is \['.+: "
        r"a list whose item 1 is int \(7\), not a document text \(RankNetLoss\)$",
        lambda: make(
            {**good, "docs": [[good["docs"][0][0], 7, good["docs"][0][2]], *good["docs"][1:]]},
            losses.RankNetLoss(model),
        ),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset label column 'labels' row 0 is 1: not a list of labels, "
        r"one per document of the row \(ADRMSELoss\)$",
        lambda: make({**good, "labels": [1, *good["labels"][1:]]}, losses.ADRMSELoss(model)),
    )
    # a pairwise dataset given to a listwise loss, and the reverse
    pairs = {"q": [r[0] for r in lee[:4]], "p": [r[1] for r in lee[:4]], "label": [r[2] for r in lee[:4]]}
    one_line(
        r"^CrossEncoderTrainer: train_dataset column 'p' row 0 is [\"'].+: not a list of documents: "
        r"ListMLELoss reads rows \(query, \[documents\]\) with a list of labels \(ListMLELoss\)$",
        lambda: make(pairs, losses.ListMLELoss(model)),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset column 'docs' row 0 is \['.+: not a "
        r"text: BinaryCrossEntropyLoss reads one text per column \(a list of documents is for the listwise "
        r"losses, ListNetLoss, LambdaLoss and the like\) \(BinaryCrossEntropyLoss\)$",
        lambda: make(good, None),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset has 3 text columns \['query', 'docs', 'more'\], which "
        r"ListNetLoss cannot take$",
        lambda: make({**good, "more": good["docs"]}, listnet),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset has no label column \(label, labels, score, scores\), which "
        r"ListNetLoss needs$",
        lambda: make({"query": good["query"], "docs": good["docs"]}, listnet),
    )
    # straight calls of the loss
    inputs, labels = _inputs(rows)
    one_line(
        r"^ListNetLoss expects a list of labels for each sample, but got a single value for each sample\.$",
        lambda: listnet(inputs, torch.ones(3)),
    )
    one_line(
        r"^LambdaLoss: number of documents per query in inputs \(\[3, 2, 4\]\) does not match number of labels "
        r"per query \(\[3, 2, 3\]\)\.$",
        lambda: losses.LambdaLoss(model)(inputs, [labels[0], labels[1], labels[2][:3]]),
    )
    one_line(
        r"^ADRMSELoss: documents of query 1 are 'x', not a non-empty list of texts$",
        lambda: losses.ADRMSELoss(model)([inputs[0], [inputs[1][0], "x", inputs[1][2]]], labels),
    )
    one_line(
        r"^MarginMSELoss: labels of shape \(3, 3\) do not match \(3, 1\)",
        lambda: losses.MarginMSELoss(model)([inputs[0], inputs[0], inputs[0]], torch.ones(3, 3)),
    )


def test_cached_mnrl_value_and_gradients_equal_sentence_transformers(pair, lee):
    """CachedMultipleNegativesRankingLoss on (query, positive, negative) columns of four rows, three
    drawn negatives: the value and gradients of sentence-transformers' cached loss (the draws from the
    global RNG seeded alike), in mini-batches of 5 pairs that straddle the candidate slots of 4; the
    value is the uncached loss's too."""
    mini_batch_size = 5
    rows = lee[6::29][:4]
    texts = [[_short(r[0]) for r in rows], [_short(r[1]) for r in rows], [_short(r[1]) for r in lee[13::29][:4]]]
    ref, ours = pair
    _zero(ref, ours)
    torch.manual_seed(5)
    want = cel.CachedMultipleNegativesRankingLoss(ref, num_negatives=3, mini_batch_size=mini_batch_size)(texts)
    want.backward()
    torch.manual_seed(5)
    got = losses.CachedMultipleNegativesRankingLoss(ours, num_negatives=3, mini_batch_size=mini_batch_size)(texts)
    got.backward()
    _assert_same_value_and_gradients(want, got, ref, ours, slack=1e-6)
    torch.manual_seed(5)
    with torch.no_grad():
        plain = losses.MultipleNegativesRankingLoss(ours, num_negatives=3)(texts)
    assert float(plain) == pytest.approx(float(got.detach()), abs=1e-5)


def test_cached_mnrl_trainer_steps_equal_hand_written_steps(head1, lee, tmp_path):
    """CrossEncoderTrainer with CachedMultipleNegativesRankingLoss (mini-batches of 5 pairs, one drawn
    negative): the backward pass runs from the hook on the loss, and 2 steps over 6 rows in batches of
    3 make the same changes as hand-written steps of sentence-transformers' cached loss (the draws
    from the global RNG, which both sides seed with the training seed)."""
    rows = lee[7::23][:6]
    negs = [_short(r[1]) for r in lee[15::23][:6]]
    columns = [[_short(r[0]) for r in rows], [_short(r[1]) for r in rows], negs]
    ref = _theirs(head1)
    cached = cel.CachedMultipleNegativesRankingLoss(ref, num_negatives=1, mini_batch_size=5)
    batches = _seedable_batches(6, 3, seed=12)
    steps = [(cached, [[c[i] for i in b] for c in columns], None) for b in batches]
    torch.manual_seed(12)
    start = _reference_steps(ref, steps, 5e-5, 0.0)

    ours = _ours(head1)
    data = {"query": columns[0], "positive": columns[1], "negative": columns[2]}
    loss = losses.CachedMultipleNegativesRankingLoss(ours, num_negatives=1, mini_batch_size=5)
    CrossEncoderTrainer(
        model=ours, args=_args(tmp_path / "run", per_device_train_batch_size=3), train_dataset=data, loss=loss
    ).train()
    _assert_same_changes(start, ref, ours)
