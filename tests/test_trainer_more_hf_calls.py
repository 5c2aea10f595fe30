"""More of transformers' Trainer calls run unchanged on bertkit and give transformers' numbers.

``model_init`` (a seeded new model at every ``train()``), ``state.total_flos`` and the ``total_flos`` of
``train()``'s metrics, ``include_num_input_tokens_seen``, the keys of ``train()`` / ``evaluate()`` /
``predict()`` metrics, ``log_history``'s ``epoch`` / ``learning_rate`` / ``grad_norm``, and a dict of
evaluation datasets. Each test makes the same call to transformers' Trainer in the same process, on
the same weights and the same real sentences, and compares what comes out.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' Trainer needs it

from test_trainer_hf_calls import setup  # noqa: E402, F401  (the same tiny classifier and sentences)

import bertkit  # noqa: E402
from bertkit.assets import asset_path  # noqa: E402

# Trained weights of the two libraries agree to float32 rounding over a few AdamW steps; the tolerance
# leaves room for another CPU's kernels (AVX2, AVX-512, AMX) summing in another order.
WEIGHTS = dict(atol=2e-5, rtol=1e-4)


def _call(output_dir, **kw) -> dict:
    # One call, written for transformers, made to both libraries: 4 batches an epoch, the last one short.
    base = dict(
        output_dir=str(output_dir),
        num_train_epochs=2,
        per_device_train_batch_size=5,
        per_device_eval_batch_size=3,
        learning_rate=1e-3,
        logging_steps=2,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    return {**base, **kw}


def _loss_rows(history: list[dict]) -> list[dict]:
    return [r for r in history if "loss" in r]


def test_model_init_builds_a_seeded_model_at_every_train_as_transformers(setup, tmp_path):
    """model_init is called once when the Trainer is built and again at each train(), right after seeding
    with args.seed: its random draws (noise on the classifier) are transformers', and a second train()
    trains a fresh model to the same weights."""
    folder, train, held_out = setup

    def run(lib, out):
        calls = []

        def model_init():
            calls.append(1)
            model = lib.AutoModelForSequenceClassification.from_pretrained(folder)
            with torch.no_grad():  # drawn from the global generator: only the same seed gives the same noise
                model.classifier.weight.add_(torch.randn_like(model.classifier.weight))
            return model

        trainer = lib.Trainer(
            model_init=model_init,
            args=lib.TrainingArguments(**_call(out, seed=7, max_grad_norm=0.0)),
            train_dataset=train,
            processing_class=lib.AutoTokenizer.from_pretrained(folder),
        )
        counts = [len(calls)]
        torch.manual_seed(123)  # the generator moved on; train() must seed again before building
        first = trainer.train()
        weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        counts.append(len(calls))
        torch.manual_seed(456)
        second = trainer.train()
        counts.append(len(calls))
        return trainer, first, second, weights, counts

    theirs, their_first, their_second, their_weights, their_counts = run(transformers, tmp_path / "hf")
    ours, our_first, our_second, our_weights, our_counts = run(bertkit, tmp_path / "bk")
    assert our_counts == their_counts == [1, 2, 3]
    for key, value in our_weights.items():
        torch.testing.assert_close(value, their_weights[key], **WEIGHTS, msg=key)
    start = bertkit.AutoModelForSequenceClassification.from_pretrained(folder).state_dict()
    assert (our_weights["classifier.weight"] - start["classifier.weight"]).abs().max() > 0.1  # the noise is there
    # the second run starts from a new model: the same weights and losses as the first, in both libraries
    for key, value in ours.model.state_dict().items():
        torch.testing.assert_close(value, our_weights[key], atol=1e-6, rtol=0, msg=key)
        torch.testing.assert_close(value, theirs.model.state_dict()[key], **WEIGHTS, msg=key)
    assert our_second.global_step == their_second.global_step == our_first.global_step == 8
    assert our_second.training_loss == pytest.approx(their_second.training_loss, rel=1e-4)
    assert our_first.training_loss == pytest.approx(our_second.training_loss, rel=1e-6)
    # max_grad_norm=0: transformers still logs the (unclipped) gradient norm
    want = [r["grad_norm"] for r in _loss_rows(theirs.state.log_history)]
    assert [r["grad_norm"] for r in _loss_rows(ours.state.log_history)] == pytest.approx(want, rel=1e-3)


def test_model_and_model_init_are_checked_as_transformers(setup, tmp_path):
    """Neither, both, and model_init with optimizers: refused by both libraries with the same exception."""
    folder, train, _ = setup
    for lib in (transformers, bertkit):
        args = lib.TrainingArguments(**_call(tmp_path / lib.__name__))
        model = lib.AutoModelForSequenceClassification.from_pretrained(folder)

        def init():
            return lib.AutoModelForSequenceClassification.from_pretrained(folder)

        with pytest.raises(RuntimeError, match="model"):
            lib.Trainer(args=args, train_dataset=train)
        with pytest.raises(ValueError, match="model_init"):
            lib.Trainer(model=model, model_init=init, args=args, train_dataset=train)
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(RuntimeError, match="model_init"):
            lib.Trainer(model_init=init, args=args, train_dataset=train, optimizers=(sgd, None))


@pytest.mark.parametrize("tokens_seen", [True, "non_padding", "non_padding without a mask", False])
def test_total_flos_tokens_seen_and_metrics_keys_as_transformers(setup, tmp_path, tokens_seen):
    """total_flos (6 x tokens x non-embedding parameters, per micro-batch), include_num_input_tokens_seen
    (every position, or the attention mask's, or the positions that are not the tokenizer's pad id), and
    the keys and values of train() / evaluate() / predict() metrics and of log_history's rows."""
    folder, train, held_out = setup
    data = train
    if tokens_seen == "non_padding without a mask":
        tokens_seen = "non_padding"
        data = [{k: v for k, v in item.items() if k != "attention_mask"} for item in train]

    def run(lib, out):
        trainer = lib.Trainer(
            model=lib.AutoModelForSequenceClassification.from_pretrained(folder),
            args=lib.TrainingArguments(**_call(out, include_num_input_tokens_seen=tokens_seen)),
            train_dataset=data,
            processing_class=lib.AutoTokenizer.from_pretrained(folder),
        )
        result = trainer.train()
        last_row = dict(trainer.state.log_history[-1])
        return trainer, result, last_row, trainer.evaluate(held_out), trainer.predict(held_out)

    theirs, want, final, want_eval, want_pred = run(transformers, tmp_path / "hf")
    ours, got, _, got_eval, got_pred = run(bertkit, tmp_path / "bk")

    assert theirs.state.total_flos > 0
    assert ours.state.total_flos == theirs.state.total_flos
    assert ours.state.num_input_tokens_seen == theirs.state.num_input_tokens_seen
    # transformers' last log row is train()'s metrics (its printing callback takes total_flos out of the
    # returned dict as it prints; the row keeps it)
    final.pop("step")
    assert list(got.metrics) == list(final)
    assert got.metrics["total_flos"] == final["total_flos"]
    assert got.metrics["train_loss"] == pytest.approx(final["train_loss"], rel=1e-4)
    assert got.metrics["epoch"] == final["epoch"]
    assert got.metrics.get("num_input_tokens_seen") == final.get("num_input_tokens_seen")
    # the rates are of the same examples and steps: rate x runtime gives them back (up to the rounding)
    for key in ("train_samples_per_second", "train_steps_per_second"):
        assert got.metrics[key] * got.metrics["train_runtime"] == pytest.approx(
            final[key] * final["train_runtime"], rel=2e-2
        ), key

    our_rows, their_rows = _loss_rows(ours.state.log_history), _loss_rows(theirs.state.log_history)
    assert len(our_rows) == len(their_rows) == 4
    for mine, their in zip(our_rows, their_rows):
        assert mine["step"] == their["step"]
        assert mine["epoch"] == pytest.approx(their["epoch"])
        assert mine["learning_rate"] == pytest.approx(their["learning_rate"])
        assert mine["loss"] == pytest.approx(their["loss"], rel=1e-4)
        # a norm over every gradient, after updates: float32 sums in either library's order
        assert mine["grad_norm"] == pytest.approx(their["grad_norm"], rel=1e-3)
        assert mine.get("num_input_tokens_seen") == their.get("num_input_tokens_seen")

    assert list(got_eval) == list(want_eval)
    assert got_eval["eval_loss"] == pytest.approx(want_eval["eval_loss"], rel=1e-4)
    assert got_eval.get("num_input_tokens_seen") == want_eval.get("num_input_tokens_seen")
    assert got_eval["eval_samples_per_second"] * got_eval["eval_runtime"] == pytest.approx(
        want_eval["eval_samples_per_second"] * want_eval["eval_runtime"], rel=5e-2
    )
    assert list(got_pred.metrics) == list(want_pred.metrics)
    assert got_pred.metrics["test_loss"] == pytest.approx(want_pred.metrics["test_loss"], rel=1e-4)


def test_flos_count_the_parameters_transformers_counts_on_minilm():
    """num_parameters(exclude_embeddings=True) and the Trainer's floating_point_ops on the real MiniLM
    checkpoint, under a plain encoder, a classifier and a masked LM whose decoder is tied to the words."""
    folder = asset_path("minilm")
    tok = bertkit.BertTokenizer.from_pretrained(folder)
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        texts = [row["text"] for row in list(csv.DictReader(f))[:4]]
    batch = dict(tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt"))
    for head in ("AutoModel", "AutoModelForSequenceClassification", "AutoModelForMaskedLM"):
        ours = getattr(bertkit, head).from_pretrained(folder)
        theirs = getattr(transformers, head).from_pretrained(folder)
        for exclude in (False, True):
            for trainable in (False, True):
                want = theirs.num_parameters(only_trainable=trainable, exclude_embeddings=exclude)
                assert ours.num_parameters(only_trainable=trainable, exclude_embeddings=exclude) == want, head
        if head == "AutoModel":
            continue  # no loss to train
        args = dict(output_dir="unused", report_to="none", use_cpu=True, save_strategy="no")
        got = bertkit.Trainer(model=ours, args=bertkit.TrainingArguments(**args), train_dataset=[1])
        want = transformers.Trainer(model=theirs, args=transformers.TrainingArguments(**args))
        assert got.floating_point_ops(batch) == want.floating_point_ops(batch) > 0, head
        assert got.floating_point_ops({"labels": batch["input_ids"]}) == want.floating_point_ops({"labels": 0}) == 0


def test_a_dict_of_eval_datasets_as_transformers(setup, tmp_path):
    """eval_dataset={"a": ..., "b": ...}: evaluate() answers each under eval_{name}_, during training and
    after, with transformers' values; metric_for_best_model names one of them."""
    folder, train, held_out = setup
    sets = {"first": held_out[:5], "rest": held_out[5:]}

    def run(lib, out):
        trainer = lib.Trainer(
            model=lib.AutoModelForSequenceClassification.from_pretrained(folder),
            args=lib.TrainingArguments(
                **_call(out, eval_strategy="epoch", metric_for_best_model="eval_rest_loss", num_train_epochs=1)
            ),
            train_dataset=train,
            eval_dataset=sets,
            processing_class=lib.AutoTokenizer.from_pretrained(folder),
        )
        trainer.train()
        logged = [r for r in trainer.state.log_history if "eval_rest_loss" in r]  # while training
        return trainer, trainer.evaluate(), logged

    theirs, want, logged = run(transformers, tmp_path / "hf")
    ours, got, mine = run(bertkit, tmp_path / "bk")
    assert list(got) == list(want)
    for key in ("eval_first_loss", "eval_rest_loss"):
        assert got[key] == pytest.approx(want[key], rel=1e-4), key
    assert len(mine) == len(logged) == 1
    assert mine[0]["eval_rest_loss"] == pytest.approx(logged[0]["eval_rest_loss"], rel=1e-4)
    assert ours.state.best_metric == pytest.approx(theirs.state.best_metric, rel=1e-4)


def test_include_num_input_tokens_seen_values_as_transformers(tmp_path):
    """True / False / "all" / "non_padding" / "no" read as transformers reads them; anything else is refused
    by name (transformers would count every token for a misspelt value)."""
    for value in (True, False, "all", "non_padding", "no"):
        want = transformers.TrainingArguments(output_dir=str(tmp_path), include_num_input_tokens_seen=value)
        got = bertkit.TrainingArguments(output_dir=str(tmp_path), include_num_input_tokens_seen=value)
        assert got.include_num_input_tokens_seen == want.include_num_input_tokens_seen, value
    with pytest.raises(ValueError, match="include_num_input_tokens_seen='non-padding' must be"):
        bertkit.TrainingArguments(output_dir=str(tmp_path), include_num_input_tokens_seen="non-padding")


def test_total_flos_and_tokens_seen_survive_a_resume(setup, tmp_path):
    """Resumed from the checkpoint after the first step, the run ends with the totals of transformers'
    run that was never stopped."""
    folder, train, _ = setup
    call = _call(tmp_path / "bk", include_num_input_tokens_seen=True, save_strategy="steps", save_steps=1)
    whole = transformers.Trainer(
        model=transformers.AutoModelForSequenceClassification.from_pretrained(folder),
        args=transformers.TrainingArguments(**{**call, "output_dir": str(tmp_path / "hf"), "save_strategy": "no"}),
        train_dataset=train,
        processing_class=transformers.AutoTokenizer.from_pretrained(folder),
    )
    whole.train()
    bertkit.Trainer(
        model=bertkit.AutoModelForSequenceClassification.from_pretrained(folder),
        args=bertkit.TrainingArguments(**call),
        train_dataset=train,
        processing_class=bertkit.AutoTokenizer.from_pretrained(folder),
    ).train()
    again = bertkit.Trainer(
        model=bertkit.AutoModelForSequenceClassification.from_pretrained(folder),
        args=bertkit.TrainingArguments(**call),
        train_dataset=train,
        processing_class=bertkit.AutoTokenizer.from_pretrained(folder),
    )
    out = again.train(resume_from_checkpoint=tmp_path / "bk" / "checkpoints" / "step-0000001")
    assert out.global_step == 8
    assert again.state.total_flos == whole.state.total_flos
    assert again.state.num_input_tokens_seen == whole.state.num_input_tokens_seen
    assert out.metrics["num_input_tokens_seen"] == whole.state.num_input_tokens_seen
    assert np.isfinite(out.metrics["train_steps_per_second"])


def test_ignore_keys_leave_outputs_out_of_the_predictions_as_transformers(setup, tmp_path):
    """A model that also returns its hidden states and attentions: ``predict(ds, ignore_keys)``,
    ``evaluate(ds, ignore_keys, prefix)`` (transformers' positional order) and
    ``train(ignore_keys_for_eval=...)`` hand compute_metrics the logits alone, with transformers' values."""
    folder, train, held_out = setup
    ignore = ["hidden_states", "attentions"]

    def run(lib, out):
        seen = []

        def metrics(p):
            seen.append(type(p.predictions).__name__)
            return {"acc": float((np.asarray(p.predictions).argmax(-1) == p.label_ids).mean())}

        model = lib.AutoModelForSequenceClassification.from_pretrained(
            folder, output_hidden_states=True, output_attentions=True
        )
        trainer = lib.Trainer(
            model=model,
            args=lib.TrainingArguments(**_call(out, eval_strategy="epoch", num_train_epochs=1)),
            train_dataset=train,
            eval_dataset=held_out,
            processing_class=lib.AutoTokenizer.from_pretrained(folder),
            compute_metrics=metrics,
        )
        trainer.train(ignore_keys_for_eval=ignore)
        pred = trainer.predict(held_out, ignore)
        return pred, trainer.evaluate(held_out, ignore, "dev"), seen

    want, want_eval, their_seen = run(transformers, tmp_path / "hf")
    got, got_eval, our_seen = run(bertkit, tmp_path / "bk")
    assert our_seen == their_seen == ["ndarray"] * 3  # during training, predict, evaluate
    assert isinstance(got.predictions, np.ndarray) and got.predictions.shape == want.predictions.shape == (8, 2)
    np.testing.assert_allclose(got.predictions, want.predictions, **WEIGHTS)
    assert sorted(got_eval) == sorted(want_eval) and "dev_loss" in got_eval and "dev_acc" in got_eval
    assert got_eval["dev_loss"] == pytest.approx(want_eval["dev_loss"], rel=1e-4)


def test_bad_ignore_keys_and_a_search_trial_are_named(setup, tmp_path):
    folder, train, held_out = setup
    trainer = bertkit.Trainer(
        model=bertkit.AutoModelForSequenceClassification.from_pretrained(folder),
        args=bertkit.TrainingArguments(**_call(tmp_path)),
        train_dataset=train,
    )
    with pytest.raises(TypeError, match="ignore_keys must be a list of output names.*'hidden_states'"):
        trainer.predict(held_out, "hidden_states")
    with pytest.raises(TypeError, match="metric_key_prefix must be a string"):
        trainer.evaluate(held_out, None, ["eval"])
    with pytest.raises(ValueError, match=r"train\(trial=...\) is not supported"):
        trainer.train(trial={"learning_rate": 1e-3})


def test_a_trainer_without_train_dataset_predicts_every_output_as_transformers(setup, tmp_path):
    """Trainer(model, args) with no train_dataset evaluates and predicts (train() is refused by name);
    without ignore_keys the predictions hold every output, hidden states and attentions as nested
    tuples, equal to transformers' (one batch: transformers cannot join attentions of batches of
    different lengths, which bertkit pads with -100 on every axis)."""
    folder, _, held_out = setup

    def run(lib):
        model = lib.AutoModelForSequenceClassification.from_pretrained(
            folder, output_hidden_states=True, output_attentions=True
        )
        trainer = lib.Trainer(
            model=model,
            args=lib.TrainingArguments(**_call(tmp_path / lib.__name__)),
            processing_class=lib.AutoTokenizer.from_pretrained(folder),
        )
        return trainer, trainer.predict(held_out[:3])

    _, want = run(transformers)
    ours, got = run(bertkit)

    def check(a, b, where="predictions"):
        assert isinstance(a, tuple) == isinstance(b, tuple), where
        if isinstance(b, tuple):
            assert len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b)):
                check(x, y, f"{where}[{i}]")
        else:
            np.testing.assert_allclose(a, b, err_msg=where, **WEIGHTS)

    check(got.predictions, want.predictions)
    assert len(got.predictions) == 3 and len(got.predictions[1]) == 3 and len(got.predictions[2]) == 2
    np.testing.assert_array_equal(got.label_ids, want.label_ids)
    assert got.metrics["test_loss"] == pytest.approx(want.metrics["test_loss"], rel=1e-4)
    # batches of different lengths: each batch's part of the padded whole is that batch's own output
    full = ours.predict(held_out).predictions[2][0]  # the first layer's attentions, (8, H, N, N)
    widths = []
    for start in range(0, len(held_out), 3):  # per_device_eval_batch_size=3
        part = ours.predict(held_out[start : start + 3]).predictions[2][0]
        n = part.shape[-1]
        widths.append(n)
        np.testing.assert_allclose(full[start : start + 3, :, :n, :n], part, **WEIGHTS)
        assert (full[start : start + 3, :, n:, :] == -100).all() and (full[start : start + 3, :, :, n:] == -100).all()
    assert len(set(widths)) > 1 and full.shape[-1] == max(widths)
    with pytest.raises(ValueError, match="Trainer.train needs a train_dataset"):
        ours.train()


def test_a_warmup_share_rounds_up_as_transformers(setup, tmp_path):
    """warmup_steps=0.3 of 8 steps is 2.4: transformers warms up over 3 steps (rounded up), and so
    does a call in its names; the learning rates logged at every step are transformers'."""
    folder, train, _ = setup

    def run(lib, out):
        trainer = lib.Trainer(
            model=lib.AutoModelForSequenceClassification.from_pretrained(folder),
            args=lib.TrainingArguments(**_call(out, warmup_steps=0.3, logging_steps=1, max_grad_norm=0.0)),
            train_dataset=train,
            processing_class=lib.AutoTokenizer.from_pretrained(folder),
        )
        trainer.train()
        return [r["learning_rate"] for r in _loss_rows(trainer.state.log_history)]

    want, got = run(transformers, tmp_path / "hf"), run(bertkit, tmp_path / "bk")
    assert len(got) == len(want) == 8
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert want[0] < want[1] < want[2] < want[3] == max(want)  # 3 warmup steps: 2.4 rounded up
