"""``CrossEncoderTrainer`` and the cross-encoder losses against sentence-transformers 6 on the real MiniLM
(a seeded classification head) and real STS-Lee text. Its own Trainer cannot run here (it needs
`datasets`), so a run is compared with hand-written AdamW steps of sentence-transformers' own loss
classes on its own CrossEncoder (dropout off) over the batches accelerate's seedable sampler draws,
with transformers' linear schedule and clipping to norm 1: each parameter's change agrees within
2e-3 of its norm (fp32 rounding through AdamW's division by sqrt(v)). Each loss's value and gradients
equal sentence-transformers' on the same model and batch; the evaluator's metrics are logged under
sentence-transformers' names; a killed run resumes bit for bit; the saved folder scores alike there."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import (  # noqa: E402
    Dataset,
    killed_run_resumes_exactly,
    seeded_head_folder,
    sentence_transformers_adamw,
    without_dropout,
)
from test_st_trainer import _logged, _seedable_batches  # noqa: E402

from bertkit import CrossEncoder
from bertkit.assets import asset_path
from bertkit.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments, losses

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.cross_encoder import losses as cel  # noqa: E402
from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator  # noqa: E402
from transformers import TrainingArguments as HFArgs  # noqa: E402
from transformers import get_linear_schedule_with_warmup  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LENGTH = 32  # tokens per pair: the documents' first words, seconds a step on 2 cores


@pytest.fixture(scope="module")
def head1(tmp_path_factory):
    path = tmp_path_factory.mktemp("ce") / "head1"
    seeded_head_folder(path, 1, seed=1)
    return without_dropout(path)  # dropout masks cannot be matched across libraries


@pytest.fixture(scope="module")
def head3(tmp_path_factory):
    path = tmp_path_factory.mktemp("ce") / "head3"
    seeded_head_folder(path, 3, seed=3)
    return without_dropout(path)


def _terciles(rows):
    """Class ids 0, 1, 2 by the rows' score ranks (the lowest third 0)."""
    order = sorted(range(len(rows)), key=lambda i: rows[i][2])
    ids = [0] * len(rows)
    for rank, i in enumerate(order):
        ids[i] = rank * 3 // len(rows)
    return ids


def _args(out, **kw):
    base = dict(output_dir=str(out), num_train_epochs=1, learning_rate=5e-5, seed=12, save_strategy="no")
    return CrossEncoderTrainingArguments(**{**base, **kw})


def _theirs(folder):
    ref = st.CrossEncoder(folder, device="cpu", max_length=LENGTH)
    ref.train()
    return ref


def _ours(folder):
    return CrossEncoder(folder, device="cpu", max_length=LENGTH)


def _reference_steps(ref, steps, lr, warmup_ratio):
    """Hand-written steps on sentence-transformers' CrossEncoder: ``steps`` is [(loss, columns, labels)];
    transformers' AdamW groups (no weight decay), linear warmup schedule, clipping to norm 1."""
    start = {n: p.detach().clone() for n, p in ref.named_parameters()}
    opt = sentence_transformers_adamw(ref.named_parameters(), lr, weight_decay=0.0)
    warmup = HFArgs(output_dir="unused", warmup_steps=warmup_ratio).get_warmup_steps(len(steps))
    schedule = get_linear_schedule_with_warmup(opt, warmup, len(steps))
    for loss_fn, columns, labels in steps:
        loss_fn(columns, None if labels is None else labels.to(ref.device)).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad()
    return start


def _assert_same_changes(start, ref, ours, tol=2e-3):
    got = dict(ours.training_model.named_parameters())
    checked = 0
    for name, p in ref.named_parameters():
        mine = next(k for k in got if name.endswith("." + k))
        if mine.endswith("attention.self.key.bias"):
            # shifts every score of a query alike, which softmax ignores: zero gradient in exact
            # arithmetic, rounding noise that AdamW scales up to a full step
            continue
        want, have = p.detach() - start[name], got[mine].detach() - start[name]
        assert float(want.norm()) > 0, name
        err = float((have - want).norm()) / float(want.norm())
        assert err < tol, (name, err)
        checked += 1
    assert checked >= len(got) - 6, (checked, len(got))  # every parameter but the six key biases


def test_bce_on_a_score_column_equals_hand_written_steps_and_saves_a_folder_scored_alike(head1, lee, tmp_path):
    """The default loss (BinaryCrossEntropyLoss, as sentence-transformers picks for 1 label) on a
    Dataset-like (sentence1, score, sentence2): 16 rows in shuffled batches of 8 (seed 12),
    warmup_ratio 0.5 (1 step at rate 0): the same changes as 2 hand-written steps of
    sentence-transformers' BCE; predict() then uses the trained weights, and the folder save_pretrained
    writes loads in sentence-transformers' CrossEncoder with bertkit's scores."""
    rows = lee[::19][:16]
    lo, hi = min(r[2] for r in lee), max(r[2] for r in lee)
    label = [(r[2] - lo) / (hi - lo) for r in rows]
    lr = 5e-5
    ref = _theirs(head1)
    bce = cel.BinaryCrossEntropyLoss(ref)
    batches = _seedable_batches(16, 8, seed=12)
    steps = [
        (bce, [[rows[i][0] for i in b], [rows[i][1] for i in b]], torch.tensor([label[i] for i in b])) for b in batches
    ]
    start = _reference_steps(ref, steps, lr, 0.5)

    ours = _ours(head1)
    probe = [(r[0], r[1]) for r in lee[1::41][:8]]
    before = ours.predict(probe)
    data = Dataset({"sentence1": [r[0] for r in rows], "score": label, "sentence2": [r[1] for r in rows]})
    args = _args(tmp_path / "run", per_device_train_batch_size=8, warmup_ratio=0.5, logging_steps=1)
    trainer = CrossEncoderTrainer(model=ours, args=args, train_dataset=data)
    assert type(trainer.loss).__name__ == "BinaryCrossEntropyLoss"
    assert [list(b) for b in trainer.batch_sampler] == batches
    trainer.train()
    assert trainer.model is ours and trainer.state.global_step == 2
    assert [r["lr"] for r in _logged(tmp_path / "run") if "loss" in r] == pytest.approx([0.0, lr])
    _assert_same_changes(start, ref, ours)

    after = ours.predict(probe)
    assert np.abs(after - before).max() > 1e-4
    ref.eval()
    np.testing.assert_allclose(after, ref.predict(probe), atol=1e-5)
    ours.save_pretrained(tmp_path / "final")
    loaded = st.CrossEncoder(str(tmp_path / "final"), device="cpu", max_length=LENGTH)
    np.testing.assert_allclose(loaded.predict(probe), after, atol=1e-5)
    # the card's dataset statistics are sentence-transformers' for the same columns and tokenizer:
    # each text alone in tokens (cut to max_length), the score's range
    card = (tmp_path / "final" / "README.md").read_text(encoding="utf-8")
    details = next(line for line in card.splitlines() if line.startswith("  | details |"))
    for column in data.columns:
        stats = loaded.model_card_data._compute_column_stats(data, column)
        assert column == "score" or stats["data"]["max"].endswith(" tokens"), stats
        assert "<ul><li>" + "</li><li>".join(f"{k}: {v}" for k, v in stats["data"].items()) + "</li></ul>" in details


def test_cross_entropy_on_three_labels_equals_hand_written_steps(head3, lee, tmp_path):
    """A 3-label head gets sentence-transformers' default CrossEntropyLoss: class ids in a "label"
    column of row dicts, batches of 4 (the last one of 2), 3 steps as written."""
    rows = lee[::23][:10]
    ids = _terciles(rows)
    assert len(set(ids)) == 3
    lr = 5e-5
    ref = _theirs(head3)
    ce = cel.CrossEntropyLoss(ref)
    batches = _seedable_batches(10, 4, seed=12)
    steps = [
        (ce, [[rows[i][0] for i in b], [rows[i][1] for i in b]], torch.tensor([ids[i] for i in b])) for b in batches
    ]
    start = _reference_steps(ref, steps, lr, 0.0)

    ours = _ours(head3)
    data = [{"query": r[0], "passage": r[1], "label": k} for r, k in zip(rows, ids)]
    trainer = CrossEncoderTrainer(
        model=ours, args=_args(tmp_path / "run", per_device_train_batch_size=4), train_dataset=data
    )
    assert type(trainer.loss).__name__ == "CrossEntropyLoss"
    trainer.train()
    _assert_same_changes(start, ref, ours)


def test_mnrl_with_a_hard_negative_equals_hand_written_steps(head1, lee, tmp_path):
    """The cross-encoder MultipleNegativesRankingLoss on (query, positive, negative) columns, num_negatives=3:
    each step draws its in-batch negatives with torch.multinomial on the global RNG, which both sides
    seed with the training seed (transformers' Trainer sets it when built); 12 rows, batches of 4, 3
    steps equal the hand-written ones (the draws as well, or the changes would differ)."""
    rows = lee[::17][:12]
    negs = [r[1] for r in lee[5::17][:12]]
    lr = 5e-5
    ref = _theirs(head1)
    mnrl = cel.MultipleNegativesRankingLoss(ref, num_negatives=3)
    batches = _seedable_batches(12, 4, seed=12)
    steps = [(mnrl, [[rows[i][0] for i in b], [rows[i][1] for i in b], [negs[i] for i in b]], None) for b in batches]
    torch.manual_seed(12)
    start = _reference_steps(ref, steps, lr, 0.0)

    ours = _ours(head1)
    data = {"query": [r[0] for r in rows], "positive": [r[1] for r in rows], "negative": negs}
    loss = losses.MultipleNegativesRankingLoss(ours, num_negatives=3)
    CrossEncoderTrainer(
        model=ours, args=_args(tmp_path / "run", per_device_train_batch_size=4), train_dataset=data, loss=loss
    ).train()
    _assert_same_changes(start, ref, ours)


def _grads(module_params):
    return {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)) for n, p in module_params}


def _assert_same_value_and_gradients(want, got, ref, ours, slack):
    """The loss values within 1e-5 and every parameter's gradient within 1e-4 of its norm plus
    ``slack`` (for gradients that are zero in exact arithmetic)."""
    assert float(got.detach()) == pytest.approx(float(want.detach()), abs=1e-5)
    theirs = _grads(ref.named_parameters())
    mine = _grads(ours.training_model.named_parameters())
    assert len(theirs) == len(mine)
    for n, g in theirs.items():
        h = mine[next(k for k in mine if n.endswith("." + k))]
        assert float((h - g).norm()) <= 1e-4 * float(g.norm()) + slack, n
    assert sum(float(g.norm()) > 0 for g in mine.values()) > len(mine) - 8


@pytest.mark.parametrize(
    "name,head,columns,labels",
    [
        ("bce_pos_weight", 1, 2, "unit"),
        ("bce_sigmoid", 1, 2, "unit"),
        ("ce", 3, 2, "ids"),
        ("mse", 1, 2, "scores"),
        ("mnrl", 1, 3, None),
        ("mnrl_all", 1, 2, None),
    ],
)
def test_loss_value_and_gradients_equal_sentence_transformers(name, head, columns, labels, head1, head3, lee):
    """Each loss on the same model weights and batch of 6 rows: the value within 1e-5 and every
    parameter's gradient within 1e-4 of its norm (plus 1e-7 for the key biases' zero gradients) of
    sentence-transformers' loss of the same name and settings. MNRL's random in-batch negatives are
    drawn from the global RNG seeded alike on both sides."""
    folder = head1 if head == 1 else head3
    rows = lee[2::31][:6]
    texts = [[r[0] for r in rows], [r[1] for r in rows], [r[1] for r in lee[9::31][:6]]][:columns]
    lab = {
        "unit": torch.tensor([r[2] / 5.0 for r in rows]),
        "ids": torch.tensor(_terciles(rows)),
        "scores": torch.tensor([r[2] for r in rows]),
        None: None,
    }[labels]
    ref, ours = _theirs(folder), _ours(folder)
    ours.training_model.train()
    make = {
        "bce_pos_weight": lambda m, L: L.BinaryCrossEntropyLoss(m, pos_weight=torch.tensor(2.5)),
        "bce_sigmoid": lambda m, L: L.BinaryCrossEntropyLoss(m, activation_fn=torch.nn.Sigmoid()),
        "ce": lambda m, L: L.CrossEntropyLoss(m),
        "mse": lambda m, L: L.MSELoss(m),
        "mnrl": lambda m, L: L.MultipleNegativesRankingLoss(m, num_negatives=4, scale=20.0),
        "mnrl_all": lambda m, L: L.MultipleNegativesRankingLoss(m, num_negatives=None),
    }[name]
    torch.manual_seed(3)
    want = make(ref, cel)(texts, lab)
    want.backward()
    torch.manual_seed(3)
    got = make(ours, losses)(texts, lab)
    got.backward()
    _assert_same_value_and_gradients(want, got, ref, ours, slack=1e-7)


def test_evaluator_metrics_and_eval_loss_logged_as_sentence_transformers_names_them(head1, lee, tmp_path):
    """eval_strategy='steps' every 2 of 4 steps with an eval_dataset and sentence-transformers'
    CrossEncoderCorrelationEvaluator named "lee-dev": metrics.jsonl has eval_loss and
    eval_lee-dev_pearson / eval_lee-dev_spearman at steps 2 and 4; at step 4 (the final weights) they
    equal the evaluator run by sentence-transformers on the saved folder and its BCE over the eval
    batches its sampler draws (mean over rows); trainer.evaluate() gives them again."""
    train, dev = lee[::11][:16], lee[3::13][:12]
    unit = lambda rows: {"s1": [r[0] for r in rows], "s2": [r[1] for r in rows], "label": [r[2] / 5 for r in rows]}  # noqa: E731
    evaluator = CrossEncoderCorrelationEvaluator([(r[0], r[1]) for r in dev], [r[2] for r in dev], name="lee-dev")
    model = _ours(head1)
    args = _args(
        tmp_path / "run",
        per_device_train_batch_size=4,
        per_device_eval_batch_size=5,
        learning_rate=1e-4,
        eval_strategy="steps",
        eval_steps=2,
        logging_steps=2,
    )
    trainer = CrossEncoderTrainer(
        model=model, args=args, train_dataset=unit(train), eval_dataset=unit(dev), evaluator=evaluator
    )
    trainer.train()
    evals = [r for r in _logged(tmp_path / "run") if "eval_loss" in r]
    assert [r["step"] for r in evals] == [2, 4]
    assert evals[0]["eval_lee-dev_pearson"] != evals[1]["eval_lee-dev_pearson"]
    model.save_pretrained(tmp_path / "final")
    loaded = st.CrossEncoder(str(tmp_path / "final"), device="cpu", max_length=LENGTH)
    want = evaluator(loaded)
    assert set(want) == {"lee-dev_pearson", "lee-dev_spearman"}
    for key, value in want.items():
        assert evals[-1][f"eval_{key}"] == pytest.approx(value, abs=1e-4)
    bce = cel.BinaryCrossEntropyLoss(loaded)
    total = 0.0
    with torch.no_grad():
        for b in _seedable_batches(12, 5, seed=12):
            labels = torch.tensor([dev[i][2] / 5 for i in b])
            total += float(bce([[dev[i][0] for i in b], [dev[i][1] for i in b]], labels)) * len(b)
    assert evals[-1]["eval_loss"] == pytest.approx(total / 12, rel=1e-4)
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] == pytest.approx(evals[-1]["eval_loss"], rel=1e-5)
    assert metrics["eval_lee-dev_spearman"] == pytest.approx(evals[-1]["eval_lee-dev_spearman"], abs=1e-6)


# One training run, in a subprocess that can be killed: argv = output_dir resume weights_out
SCRIPT = r"""
import csv, sys
import torch
from bertkit import CrossEncoder
from bertkit.assets import asset_path
from bertkit.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments, losses

out, resume, final, folder = sys.argv[1:5]
lee = [(r["sentence1"], r["sentence2"], float(r["score"])) for r in csv.DictReader(open(asset_path("sts-lee")))]
rows = lee[::13][:16]
model = CrossEncoder(folder, device="cpu", max_length=32)
args = CrossEncoderTrainingArguments(
    output_dir=out, num_train_epochs=2, per_device_train_batch_size=4, learning_rate=5e-5, warmup_ratio=0.2,
    save_strategy="steps", save_steps=3, logging_steps=1, seed=7, batch_sampler="no_duplicates", disable_tqdm=True,
)
data = {"query": [r[0] for r in rows], "positive": [r[1] for r in rows]}
loss = losses.MultipleNegativesRankingLoss(model, num_negatives=2)
trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, loss=loss)
trainer.train(resume_from_checkpoint=resume == "1")
torch.save({k: v.detach().clone() for k, v in model.training_model.state_dict().items()}, final)
"""


@pytest.mark.slow
def test_sigkill_after_a_checkpoint_then_resume_equals_the_uninterrupted_run(tmp_path):
    """Dropout on, MNRL with random in-batch negatives (the global RNG), NO_DUPLICATES batches, 2 epochs
    of 4 steps, a checkpoint every 3 steps: a run killed with SIGKILL after its step-3 checkpoint and
    run again with resume_from_checkpoint=True logs the same per-step losses and ends with the same
    weights as the uninterrupted run, bit for bit (one thread)."""
    folder = seeded_head_folder(tmp_path / "head", 1, seed=5)
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)

    def cmd(out, resume, final):
        return [sys.executable, str(script), str(out), resume, str(final), folder]

    a, b = killed_run_resumes_exactly(cmd, tmp_path, checkpoint=3, steps=8)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the checkpoint folder is one sentence-transformers loads
    ckpt = st.CrossEncoder(str(tmp_path / "cut" / "checkpoints" / "step-0000006"), device="cpu")
    assert ckpt.num_labels == 1


def test_bad_input_is_refused_by_name(head1, head3, lee):
    model, wide = CrossEncoder(head1, device="cpu"), CrossEncoder(head3, device="cpu")
    args = CrossEncoderTrainingArguments(output_dir="unused", per_device_train_batch_size=4)
    pairs = {"q": [r[0] for r in lee[:8]], "p": [r[1] for r in lee[:8]], "label": [r[2] / 5 for r in lee[:8]]}

    def make(data, loss=None, m=model, **kw):
        return CrossEncoderTrainer(model=m, args=args, train_dataset=data, loss=loss, **kw)

    def one_line(match, call):
        with pytest.raises(ValueError, match=match) as e:
            call()
        assert "\n" not in str(e.value)

    one_line(
        r"^CrossEncoderTrainer: train_dataset has 3 text columns \['q', 'p', 'n'\], "
        r"which BinaryCrossEntropyLoss cannot take$",
        lambda: make({**pairs, "n": pairs["p"]}),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset label column 'label' row 2 is 1\.5: not a number in 0\.\.1",
        lambda: make({**pairs, "label": [0.5, 0.2, 1.5, 0.0, 1.0, 0.3, 0.3, 0.3]}),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset label column 'label' row 2 is 3: "
        r"not a class id 0\.\.2 of this 3-label head",
        lambda: make({**pairs, "label": [0, 1, 3, 2, 0, 1, 2, 0]}, m=wide),
    )
    one_line(
        r"label column 'label' row 0 is [\d.]+: not a class id",
        lambda: make(pairs, m=wide),
    )
    one_line(
        r"^CrossEncoderTrainer: train_dataset has no label column \(label, labels, score, scores\), "
        r"which MSELoss needs$",
        lambda: make({"q": pairs["q"], "p": pairs["p"]}, loss=losses.MSELoss(model)),
    )
    one_line(
        r"train_dataset has 1 text columns \['q'\], which MultipleNegativesRankingLoss cannot take",
        lambda: make({"q": pairs["q"]}, loss=losses.MultipleNegativesRankingLoss(model)),
    )
    one_line(
        r"^CrossEncoderTrainer: loss \(BinaryCrossEntropyLoss\) was built on another model object than model=$",
        lambda: make(pairs, loss=losses.BinaryCrossEntropyLoss(CrossEncoder(head1, device="cpu"))),
    )
    one_line(
        r"^BinaryCrossEntropyLoss expects a model with 1 output label, but got a model with 3",
        lambda: losses.BinaryCrossEntropyLoss(wide),
    )
    one_line(r"^MSELoss expects a model of type CrossEncoder", lambda: losses.MSELoss(object()))
    one_line(
        r"^CrossEncoderTrainer: model= must be a bertkit CrossEncoder, got SentenceTransformer$",
        lambda: make(pairs, m=__import__("bertkit").SentenceTransformer(str(asset_path("minilm")), device="cpu")),
    )
    one_line(
        r"^CrossEncoderTrainer: loss is MultipleNegativesRankingLoss, not one of bertkit.cross_encoder.losses$",
        lambda: make(
            pairs,
            loss=__import__("bertkit").losses.MultipleNegativesRankingLoss(
                __import__("bertkit").SentenceTransformer(str(asset_path("minilm")), device="cpu")
            ),
        ),
    )
    one_line(
        r"^CrossEncoderTrainingArguments: batch_sampler='nodup' is not one of",
        lambda: CrossEncoderTrainingArguments(output_dir="unused", batch_sampler="nodup"),
    )
    one_line(
        r"^CrossEncoderTrainingArguments: prompts='query: ' is not supported",
        lambda: CrossEncoderTrainingArguments(output_dir="unused", prompts="query: "),
    )
    one_line(
        r"^CrossEncoderTrainer: args= must be CrossEncoderTrainingArguments, got SentenceTransformerTrainingArguments$",
        lambda: CrossEncoderTrainer(
            model=model,
            args=__import__("bertkit").SentenceTransformerTrainingArguments(output_dir="u"),
            train_dataset=pairs,
        ),
    )
