"""``SentenceTransformerTrainer``'s GROUP_BY_LABEL batches, ``load_best_model_at_end`` and callbacks,
against sentence-transformers 6 (its GroupByLabelBatchSampler, CoSENTLoss and evaluator) and
transformers (its best-metric rule and EarlyStoppingCallback, run on the logged evaluations) on the
real MiniLM and real polarity / STS-Lee text."""

import csv
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import Dataset, without_dropout  # noqa: E402
from test_st_trainer import _assert_same_changes, _reference_steps, _theirs  # noqa: E402

import bertkit
from bertkit import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses
from bertkit.assets import asset_path
from bertkit.training_args import BatchSamplers

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")
from sentence_transformers.base import sampler as st_sampler  # noqa: E402
from sentence_transformers.sentence_transformer import losses as stl  # noqa: E402
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator  # noqa: E402

LENGTH = 32  # tokens per text: a step in about a second on 2 cores


@pytest.fixture(scope="module")
def polarity() -> list[tuple[str, int]]:
    """Real polarity sentences with their labels (1 positive, 0 negative)."""
    rows = list(csv.DictReader(open(asset_path("polarity-test"), encoding="utf-8")))
    return [(r["text"], int(r["label"] == "positive")) for r in rows[:120]]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("minilm") / "minilm-no-dropout"
    shutil.copytree(asset_path("minilm"), out)
    return without_dropout(out)  # dropout masks cannot be matched across libraries


def _model(folder: str) -> SentenceTransformer:
    model = SentenceTransformer(folder, device="cpu")
    model.max_seq_length = LENGTH
    return model


def _logged(out: Path) -> list[dict]:
    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _weights(model: SentenceTransformer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.training_model.state_dict().items()}


def _same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- GROUP_BY_LABEL --------------------------------------------------------------------------------


def _pairs_with_labels(polarity: list[tuple[str, int]], n: int) -> dict[str, list]:
    """n (sentence1, sentence2) rows of polarity text; the label is the pair's two polarities (0..3),
    so four groups of unequal sizes."""
    a, b = polarity[:n], polarity[n : 2 * n]
    return {
        "sentence1": [t for t, _ in a],
        "sentence2": [t for t, _ in b],
        "label": [2 * x + y for (_, x), (_, y) in zip(a, b)],
    }


@pytest.mark.parametrize("drop_last", [False, True])
def test_group_by_label_batches_are_sentence_transformers(polarity: list, drop_last: bool) -> None:
    """50 polarity pairs in 4 label groups of unequal sizes, batches of 6: epochs 0 and 1 are
    sentence-transformers' GroupByLabelBatchSampler's index for index (built as its Trainer builds it:
    a generator and the seed), and its length; each batch holds 2 labels or more, 2 rows of each."""
    data = _pairs_with_labels(polarity, 50)
    sizes = sorted(data["label"].count(k) for k in range(4))
    assert len(set(sizes)) > 1 and sizes[0] >= 2, sizes  # unequal groups: the stream ends before some do
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    args = SentenceTransformerTrainingArguments(
        output_dir="unused",
        per_device_train_batch_size=6,
        seed=3,
        batch_sampler=BatchSamplers.GROUP_BY_LABEL,
        dataloader_drop_last=drop_last,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=losses.CoSENTLoss(model))
    theirs = st_sampler.GroupByLabelBatchSampler(
        Dataset(data), 6, drop_last, ["label", "score"], torch.Generator().manual_seed(3), 3
    )
    seen = []
    for epoch in (0, 1):
        trainer.batch_sampler.set_epoch(epoch)
        theirs.set_epoch(epoch)
        ours, want = [list(b) for b in trainer.batch_sampler], [list(b) for b in theirs]
        assert ours == want, epoch
        assert len(trainer.batch_sampler) == len(theirs) == len(ours), epoch
        for b in ours:
            labels = [data["label"][i] for i in b]
            assert len(set(labels)) >= 2 and all(labels.count(x) >= 2 for x in labels), labels
        seen.append(ours)
    assert seen[0] != seen[1]  # the epoch reseeds the shuffle


def test_group_by_label_training_equals_hand_written_steps(folder: str, polarity: list, tmp_path: Path) -> None:
    """CoSENTLoss on polarity pairs labelled 1 (same polarity) or 0, GROUP_BY_LABEL batches of 4:
    the run's weight changes equal hand-written steps of sentence-transformers' CoSENTLoss over the
    batches its GroupByLabelBatchSampler draws (seed 12), labels passed to the loss."""
    a, b = polarity[:12], polarity[12:24]
    data = {
        "sentence1": [t for t, _ in a],
        "sentence2": [t for t, _ in b],
        "label": [float(x == y) for (_, x), (_, y) in zip(a, b)],
    }
    lr = 5e-5
    sampler = st_sampler.GroupByLabelBatchSampler(
        Dataset(data), 4, False, ["label"], torch.Generator().manual_seed(12), 12
    )
    batches = [list(x) for x in sampler]
    assert len(batches) >= 2
    ref = _theirs(folder)
    cosent = stl.CoSENTLoss(ref)
    steps = [
        (
            cosent,
            [[data["sentence1"][i] for i in x], [data["sentence2"][i] for i in x]],
            torch.tensor([data["label"][i] for i in x]),
        )
        for x in batches
    ]
    start, enc = _reference_steps(ref, steps, lr, 0.0)

    ours = _model(folder)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"),
        num_train_epochs=1,
        learning_rate=lr,
        seed=12,
        save_strategy="no",
        per_device_train_batch_size=4,
        batch_sampler="group_by_label",
        logging_steps=1,
    )
    trainer = SentenceTransformerTrainer(model=ours, args=args, train_dataset=data, loss=losses.CoSENTLoss(ours))
    assert [list(x) for x in trainer.batch_sampler] == batches
    trainer.train()
    assert [r["step"] for r in _logged(tmp_path / "run") if "loss" in r] == list(range(1, len(batches) + 1))
    _assert_same_changes(start, enc, ours)


# -- load_best_model_at_end ------------------------------------------------------------------------


def _hf_best(evals: list[dict], metric: str, greater: bool) -> tuple[float, int]:
    """(best_metric, best_global_step) by transformers' own Trainer._determine_best_metric, fed the
    logged evaluations in order."""
    args = transformers.TrainingArguments(
        output_dir="unused", metric_for_best_model=metric, greater_is_better=greater, save_strategy="steps"
    )
    fake = SimpleNamespace(args=args, state=transformers.TrainerState())
    for row in evals:
        fake.state.global_step = row["step"]
        transformers.Trainer._determine_best_metric(fake, metrics=row, trial=None)
    return fake.state.best_metric, fake.state.best_global_step


def _sts_run(folder: str, lee: list, out: Path, callbacks: list | None = None, **kw) -> tuple:
    """CoSENT on 24 STS-Lee pairs, batches of 4, an eval every 2 steps (eval_dataset and an
    EmbeddingSimilarityEvaluator "sts-dev") and a checkpoint at each; returns (trainer, evaluator, dev)."""
    train, dev = lee[::7][:24], lee[5::11][:16]
    model = _model(folder)
    evaluator = EmbeddingSimilarityEvaluator(
        [r[0] for r in dev], [r[1] for r in dev], [r[2] for r in dev], name="sts-dev"
    )

    def cols(rows: list) -> dict:
        return {"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows], "score": [r[2] for r in rows]}

    base = dict(
        output_dir=str(out),
        num_train_epochs=1,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        seed=4,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        logging_steps=1,
        disable_tqdm=True,
    )
    args = SentenceTransformerTrainingArguments(**{**base, **kw})
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=cols(train),
        eval_dataset=cols(dev),
        loss=losses.CoSENTLoss(model),
        evaluator=evaluator,
        callbacks=callbacks,
    )
    return trainer, evaluator, dev


@pytest.mark.parametrize(
    ("metric", "greater", "lr"),
    [("eval_sts-dev_spearman_cosine", None, 3e-4), ("eval_loss", None, 3e-4), ("sts-dev_pearson_cosine", False, 1e-4)],
)
def test_load_best_model_at_end_keeps_the_best_checkpoint(
    folder: str, lee: list, tmp_path: Path, metric: str, greater: bool | None, lr: float
) -> None:
    """6 steps, an evaluation and a checkpoint every 2: after train() the model's weights are those of
    the checkpoint of the step transformers' rule picks from the logged evaluations (greater_is_better
    defaulting as transformers defaults it, by the metric's name), trainer.state names that step and
    value, the evaluator on the final model gives the best logged value, and sentence-transformers
    loads the saved output folder with the model's vectors."""
    out = tmp_path / "run"
    trainer, evaluator, dev = _sts_run(
        folder,
        lee,
        out,
        learning_rate=lr,
        load_best_model_at_end=True,
        metric_for_best_model=metric,
        greater_is_better=greater,
    )
    trainer.train()
    model = trainer.model
    evals = [r for r in _logged(out) if "eval_loss" in r]
    assert [r["step"] for r in evals] == [2, 4, 6]
    key = metric if metric.startswith("eval_") else f"eval_{metric}"
    want_greater = greater if greater is not None else not key.endswith("loss")
    best, best_step = _hf_best(evals, key, want_greater)
    assert best_step != evals[-1]["step"], evals  # else the last weights are the best: nothing to prove

    assert trainer.state.best_metric == pytest.approx(best, abs=1e-12)
    assert trainer.state.best_global_step == best_step
    assert trainer.state.global_step == 6
    checkpoint = out / "checkpoints" / f"step-{best_step:07d}"
    best_folder = Path(trainer.state.best_model_checkpoint)
    assert best_folder.is_dir() and checkpoint.is_dir()
    final = _weights(model)
    assert _same_weights(final, _weights(SentenceTransformer(str(checkpoint), device="cpu")))
    assert _same_weights(final, _weights(SentenceTransformer(str(best_folder), device="cpu")))
    last = _weights(SentenceTransformer(str(out / "checkpoints" / "step-0000006"), device="cpu"))
    assert not _same_weights(final, last)

    # the evaluator and the eval loss on the kept weights give the best logged evaluation again
    again = trainer.evaluate()
    best_row = next(r for r in evals if r["step"] == best_step)
    assert again[key] == pytest.approx(best_row[key], abs=1e-6)

    loaded = st.SentenceTransformer(str(out), device="cpu")  # the run's saved final model
    texts = [r[0] for r in dev]
    torch.testing.assert_close(
        loaded.encode(texts, convert_to_tensor=True), torch.as_tensor(model.encode(texts)), atol=1e-5, rtol=0
    )
    if key == "eval_sts-dev_spearman_cosine":
        assert evaluator(loaded)["sts-dev_spearman_cosine"] == pytest.approx(best, abs=1e-4)


# -- callbacks ---------------------------------------------------------------------------------------


def _hf_stop_step(evals: list[dict], metric: str, greater: bool, patience: int) -> int | None:
    """The evaluation step at which transformers' own EarlyStoppingCallback stops the run, fed the
    logged evaluations as its Trainer feeds them (on_evaluate, then the best metric updated)."""
    args = transformers.TrainingArguments(
        output_dir="unused",
        metric_for_best_model=metric,
        greater_is_better=greater,
        eval_strategy="steps",
        save_strategy="steps",
        load_best_model_at_end=True,
    )
    cb = transformers.EarlyStoppingCallback(early_stopping_patience=patience)
    fake = SimpleNamespace(args=args, state=transformers.TrainerState())
    for row in evals:
        control = transformers.TrainerControl()
        fake.state.global_step = row["step"]
        cb.on_evaluate(args, fake.state, control, metrics=row)
        transformers.Trainer._determine_best_metric(fake, metrics=row, trial=None)
        if control.should_training_stop:
            return row["step"]
    return None


@pytest.mark.parametrize("kind", ["bertkit", "transformers"])
def test_early_stopping_stops_where_transformers_rule_says(folder: str, lee: list, tmp_path: Path, kind: str) -> None:
    """EarlyStoppingCallback(early_stopping_patience=2), bertkit's and transformers' own class, on
    eval_sts-dev_spearman_cosine with a learning rate that spoils it: the run ends at the evaluation
    where transformers' callback, fed the run's logged evaluations, sets should_training_stop, before
    the last of the 12 steps; the model ends on the best checkpoint's weights."""
    cls = bertkit.EarlyStoppingCallback if kind == "bertkit" else transformers.EarlyStoppingCallback
    out = tmp_path / "run"
    trainer, _, _ = _sts_run(
        folder,
        lee,
        out,
        callbacks=[cls(early_stopping_patience=2)],
        num_train_epochs=2,
        eval_steps=1,
        save_steps=1,
        learning_rate=1e-3,
        load_best_model_at_end=True,
        metric_for_best_model="eval_sts-dev_spearman_cosine",
    )
    result = trainer.train()
    evals = [r for r in _logged(out) if "eval_loss" in r]
    stop = _hf_stop_step(evals, "eval_sts-dev_spearman_cosine", True, 2)
    assert stop is not None and stop < 12, evals
    assert result.global_step == trainer.state.global_step == stop
    assert evals[-1]["step"] == stop
    best, best_step = _hf_best(evals, "eval_sts-dev_spearman_cosine", True)
    assert trainer.state.best_global_step == best_step and trainer.state.best_metric == pytest.approx(best)
    assert _same_weights(
        _weights(trainer.model),
        _weights(SentenceTransformer(str(out / "checkpoints" / f"step-{best_step:07d}"), device="cpu")),
    )


class _Printer(transformers.TrainerCallback):
    """A user's callback: transformers' hooks, printing each row it is given."""

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201, D102
        print("row", state.global_step, sorted(logs))


def test_callbacks_run_and_bad_early_stops_are_refused_by_name(
    folder: str, lee: list, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A TrainerCallback subclass (instance or class) runs: on_log gets the training rows and the
    evaluations under sentence-transformers' names, at the steps they are logged. An early stop with a
    threshold or without a metric to watch is refused in one line naming it."""
    for callback in (_Printer(), _Printer):
        capsys.readouterr()
        trainer, _, _ = _sts_run(folder, lee, tmp_path / "p", callbacks=[callback])
        trainer.train()
        rows = [line.split(" ", 2) for line in capsys.readouterr().out.splitlines() if line.startswith("row ")]
        steps = trainer.state.global_step
        assert [int(r[1]) for r in rows if "'loss'" in r[2]] == list(range(1, steps + 1))
        assert [int(r[1]) for r in rows if "'eval_sts-dev_spearman_cosine'" in r[2]] == list(range(2, steps + 1, 2))
        shutil.rmtree(tmp_path / "p")
    with pytest.raises(
        ValueError, match=r"EarlyStoppingCallback\(early_stopping_threshold=0.01\) is not supported"
    ) as e:
        _sts_run(
            folder,
            lee,
            tmp_path / "x",
            callbacks=[transformers.EarlyStoppingCallback(2, 0.01)],
            load_best_model_at_end=True,
            metric_for_best_model="eval_loss",
        )
    assert "\n" not in str(e.value)
    for cls in (bertkit.EarlyStoppingCallback, transformers.EarlyStoppingCallback):
        with pytest.raises(ValueError, match=r"EarlyStoppingCallback needs metric_for_best_model") as e:
            _sts_run(folder, lee, tmp_path / "y", callbacks=[cls(early_stopping_patience=1)])
        assert "\n" not in str(e.value)


# -- a loss with weights of its own -------------------------------------------------------------------


def test_softmax_loss_classifier_is_checkpointed_and_resumed(folder, polarity, tmp_path):
    """SoftmaxLoss trains a classifier of its own: each checkpoint holds it beside the model's folder,
    and a run resumed from the step-2 checkpoint ends with the uninterrupted run's model and classifier
    weights (one process, dropout off: the same arithmetic, tolerance 0)."""
    rows = _pairs_with_labels(polarity, 12)

    def run(out: Path, resume: bool) -> tuple[dict, dict]:
        model = _model(folder)
        loss = losses.SoftmaxLoss(model, model.get_sentence_embedding_dimension(), num_labels=4)
        args = SentenceTransformerTrainingArguments(
            output_dir=str(out), max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3,
            save_strategy="steps", save_steps=2, logging_steps=1, seed=5, disable_tqdm=True,
        )  # fmt: skip
        SentenceTransformerTrainer(model=model, args=args, train_dataset=rows, loss=loss).train(
            resume_from_checkpoint=resume
        )
        return _weights(model), {k: v.detach().clone() for k, v in loss.state_dict().items()}

    full = run(tmp_path / "full", False)
    step2 = tmp_path / "full" / "checkpoints" / "step-0000002"
    assert (step2 / "trainer_losses.safetensors").is_file()
    # a second output folder holding only the step-2 checkpoint: the resumed run starts there
    cut = tmp_path / "cut"
    (cut / "checkpoints").mkdir(parents=True)
    shutil.copytree(step2, cut / "checkpoints" / "step-0000002")
    resumed = run(cut, True)
    assert _same_weights(full[0], resumed[0])
    assert _same_weights(full[1], resumed[1])
    start = SentenceTransformer(folder, device="cpu")
    key = next(k for k in full[0] if k.endswith("encoder.layer.0.attention.self.query.weight"))
    assert not torch.equal(start.training_model.state_dict()[key], full[0][key])  # it trained
