"""transformers' TrainingArguments and Trainer calls run unchanged on bertkit, and train the same way.

Each test makes the same call to transformers and to bertkit, on the same weights and the same real
sentences, and compares what comes out: the settings a call resolves to, the trained weights, the
logged losses, and what ``evaluate`` / ``predict`` / ``compute_metrics`` return.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' Trainer needs it

import bertkit  # noqa: E402
from bertkit.assets import asset_path  # noqa: E402


def _accuracy(eval_pred) -> dict[str, float]:
    logits, labels = eval_pred
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny BERT classifier without dropout (saved once, loaded by both libraries) and 24 real
    polarity sentences tokenized by the MiniLM vocabulary, as tokenizer outputs of different lengths."""
    folder = tmp_path_factory.mktemp("tiny")
    tok = bertkit.BertTokenizer.from_pretrained(asset_path("minilm"))
    torch.manual_seed(0)
    config = bertkit.BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=2,
    )
    bertkit.BertForSequenceClassification(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    with open(asset_path("polarity-train"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:24]
    assert {r["label"] for r in rows} == {"positive", "negative"}
    items = []
    for row in rows:
        enc = tok(row["text"], truncation=True, max_length=48)
        items.append(
            {
                "input_ids": list(enc["input_ids"]),
                "attention_mask": list(enc["attention_mask"]),
                "token_type_ids": list(enc["token_type_ids"]),
                "labels": int(row["label"] == "positive"),
            }
        )
    assert len({len(i["input_ids"]) for i in items}) > 1  # padding is part of what is compared
    return folder, items[:16], items[16:]


def _call(output_dir) -> dict:
    # One call, written for transformers, made to both libraries.
    return dict(
        output_dir=str(output_dir),
        num_train_epochs=3,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=3,
        learning_rate=1e-3,
        warmup_steps=2,  # transformers' warmup starts at learning rate 0
        weight_decay=0.01,
        logging_steps=1,
        eval_strategy="epoch",
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )


def test_transformers_defaults_are_transformers_own(tmp_path):
    """A call in transformers' names leaves out settings; each one resolves to transformers' default."""
    ours = bertkit.TrainingArguments(output_dir=str(tmp_path / "a"))
    theirs = transformers.TrainingArguments(output_dir=str(tmp_path / "a"))
    pairs = {
        "num_train_epochs": ours.epochs,
        "per_device_train_batch_size": ours.batch_size,
        "per_device_eval_batch_size": ours.per_device_eval_batch_size,
        "learning_rate": ours.lr,
        "weight_decay": ours.weight_decay,
        "adam_epsilon": ours.adam_eps,
        "adam_beta1": ours.adam_betas[0],
        "adam_beta2": ours.adam_betas[1],
        "max_grad_norm": ours.max_grad_norm,
        "gradient_accumulation_steps": ours.grad_accum_steps,
        "warmup_steps": ours.warmup_steps,
        "seed": ours.seed,
        "logging_steps": ours.log_every,
        "save_steps": ours.save_every,
        "dataloader_drop_last": ours.drop_last,
    }
    for name, value in pairs.items():
        assert value == getattr(theirs, name), name
    assert ours.output_dir == theirs.output_dir
    assert ours.precision == "fp32" and not theirs.bf16 and not theirs.fp16  # transformers trains fp32 on a CPU
    # bertkit's own names keep bertkit's defaults
    assert bertkit.TrainingArguments(output=str(tmp_path / "c")).epochs == 1.0


def test_the_same_trainer_call_trains_the_same_weights(setup, tmp_path, capsys):
    folder, train, held_out = setup
    hf_model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    hf = transformers.Trainer(
        model=hf_model,
        args=transformers.TrainingArguments(**_call(tmp_path / "hf")),
        train_dataset=train,
        eval_dataset=held_out,
        processing_class=hf_tok,
        compute_metrics=_accuracy,
    )
    hf_out = hf.train()

    model = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    ours = bertkit.Trainer(
        model=model,
        args=bertkit.TrainingArguments(**_call(tmp_path / "bk")),
        train_dataset=train,
        eval_dataset=held_out,
        processing_class=bertkit.BertTokenizer.from_pretrained(folder),
        compute_metrics=_accuracy,
    )
    our_out = ours.train()

    # train() answers as transformers' TrainOutput
    assert our_out.global_step == hf_out.global_step == 3
    assert our_out.training_loss == pytest.approx(hf_out.training_loss, rel=1e-4)
    assert our_out.metrics["train_loss"] == pytest.approx(hf_out.metrics["train_loss"], rel=1e-4)
    assert our_out.metrics["epoch"] == pytest.approx(hf_out.metrics["epoch"])
    assert our_out.metrics["train_runtime"] > 0

    # 3 epochs of one batch of 16: 3 AdamW steps at a linearly decaying rate, gradients clipped at 1
    theirs = hf_model.state_dict()
    moved = max((model.state_dict()[k] - start[k]).abs().max().item() for k in start)
    assert moved > 1e-3  # it trained at all
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, theirs[key], atol=2e-5, rtol=1e-4, msg=key)

    hf_losses = [row["loss"] for row in hf.state.log_history if "loss" in row]
    rows = [json.loads(line) for line in (tmp_path / "bk" / "metrics.jsonl").read_text().splitlines()]
    our_losses = [row["loss"] for row in rows if "loss" in row]
    assert len(our_losses) == len(hf_losses) == 3
    np.testing.assert_allclose(our_losses, hf_losses, rtol=1e-4)
    # eval_strategy="epoch": both evaluated after each epoch, on the same held-out sentences
    hf_evals = [row for row in hf.state.log_history if "eval_loss" in row]
    our_evals = [row for row in rows if "eval_loss" in row and row.get("step", 0) > 0]
    assert [round(r["eval_loss"], 4) for r in our_evals[: len(hf_evals)]] == pytest.approx(
        [round(r["eval_loss"], 4) for r in hf_evals], abs=2e-4
    )

    # evaluate / predict / compute_metrics answer as transformers' do
    want, got = hf.evaluate(), ours.evaluate()
    assert got["eval_loss"] == pytest.approx(want["eval_loss"], rel=1e-4)
    assert got["eval_accuracy"] == want["eval_accuracy"]
    assert got["epoch"] == pytest.approx(want["epoch"])
    want_pred, got_pred = hf.predict(held_out), ours.predict(held_out)
    np.testing.assert_allclose(got_pred.predictions, want_pred.predictions, atol=1e-4)
    np.testing.assert_array_equal(got_pred.label_ids, want_pred.label_ids)
    assert set(got_pred.metrics) >= {"test_loss", "test_accuracy"}
    assert got_pred.metrics["test_accuracy"] == want_pred.metrics["test_accuracy"]

    # log_metrics / save_metrics as transformers' (the same metrics, the same lines and files)
    capsys.readouterr()
    for split, metrics in (("train", hf_out.metrics), ("eval", want)):
        hf.log_metrics(split, metrics)
        theirs_printed = capsys.readouterr().out
        ours.log_metrics(split, metrics)
        assert capsys.readouterr().out == theirs_printed
        hf.save_metrics(split, metrics)
        ours.save_metrics(split, metrics)
    for name in ("train_results.json", "eval_results.json", "all_results.json"):
        assert json.loads((tmp_path / "bk" / name).read_text()) == json.loads((tmp_path / "hf" / name).read_text())
    ours.save_state()
    state = json.loads((tmp_path / "bk" / "trainer_state.json").read_text())
    assert state["global_step"] == hf.state.global_step
    assert [r["loss"] for r in state["log_history"] if "loss" in r] == pytest.approx(hf_losses, rel=1e-4)

    # save_model writes a folder both libraries load, with the trained weights
    ours.save_model(tmp_path / "saved")
    back = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved")
    torch.testing.assert_close(back.state_dict()["classifier.weight"], model.state_dict()["classifier.weight"])


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        (dict(lr_scheduler_type="cosine"), "lr_scheduler_type='cosine'"),
        (dict(save_strategy="best"), "save_strategy='best'"),
        (dict(logging_strategy="epoch"), "logging_strategy='epoch'"),
        (dict(report_to="wandb"), "report_to='wandb'"),
        (dict(optim="adafactor"), "optim='adafactor'"),
        (dict(bf16=True, fp16=True), "fp16"),
        (dict(learning_rate=-1.0), "learning_rate (lr)"),
        (dict(num_train_epochs=0), "num_train_epochs (epochs)"),
    ],
)
def test_transformers_settings_bertkit_cannot_honour_are_refused_by_name(tmp_path, kwargs, named):
    with pytest.raises(ValueError) as info:
        bertkit.TrainingArguments(output_dir=str(tmp_path), **kwargs)
    assert named in str(info.value)


def test_a_name_and_its_transformers_name_together_are_refused(tmp_path):
    with pytest.raises(TypeError, match="lr or transformers' name learning_rate"):
        bertkit.TrainingArguments(output_dir=str(tmp_path), lr=1e-3, learning_rate=1e-3)
    args = bertkit.TrainingArguments(output_dir=str(tmp_path))
    with pytest.raises(TypeError, match="config= or transformers' args="):
        bertkit.Trainer(torch.nn.Linear(2, 2), args, [1], args=args)
    with pytest.raises(ValueError, match="eval_strategy asks for evaluations and the Trainer has no eval_dataset"):
        bertkit.Trainer(torch.nn.Linear(2, 2), args=bertkit.TrainingArguments(**_call(tmp_path)), train_dataset=[1])
    with pytest.raises(TypeError, match="compute_metrics needs an eval_dataset"):
        bertkit.Trainer(torch.nn.Linear(2, 2), args=args, train_dataset=[1], compute_metrics=_accuracy)


def test_resume_from_checkpoint_continues_exactly(setup, tmp_path):
    """transformers' ``train(resume_from_checkpoint=...)``: from a named checkpoint the run ends on the
    weights of the run that was never stopped; True on a finished run changes nothing."""
    from bertkit.training.checkpoint_folders import checkpoints_newest_first

    folder, train, _ = setup
    call = {**_call(tmp_path / "run"), "save_strategy": "steps", "save_steps": 1, "eval_strategy": "no"}
    whole = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
    bertkit.Trainer(model=whole, args=bertkit.TrainingArguments(**call), train_dataset=train).train()
    steps = checkpoints_newest_first(tmp_path / "run")
    assert len(steps) == 3

    again = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():  # other starting weights: only the checkpoint's can give the same end
        for p in again.parameters():
            p.add_(0.05)
    trainer = bertkit.Trainer(model=again, args=bertkit.TrainingArguments(**call), train_dataset=train)
    out = trainer.train(resume_from_checkpoint=steps[-1])  # after the first of 3 steps
    assert out.global_step == 3
    for key, value in again.state_dict().items():
        torch.testing.assert_close(value, whole.state_dict()[key], atol=1e-6, rtol=0, msg=key)

    before = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    done = bertkit.Trainer(
        model=bertkit.AutoModelForSequenceClassification.from_pretrained(folder),
        args=bertkit.TrainingArguments(**call),
        train_dataset=train,
    )
    assert done.train(resume_from_checkpoint=True).global_step == 3
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == before

    with pytest.raises(ValueError, match="resume_from_checkpoint .*nowhere: not a checkpoint"):
        done.train(resume_from_checkpoint=tmp_path / "nowhere")


def test_data_collators_pad_as_transformers_does():
    """DataCollatorWithPadding and DataCollatorForTokenClassification on the same real examples:
    the same tensors as transformers' (right and left padding, a multiple of 8, label columns)."""
    folder = asset_path("minilm")
    ours_tok, hf_tok = bertkit.BertTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        texts = [row["text"] for row in list(csv.DictReader(f))[:6]]

    def features(tok, labels):
        out = []
        for i, text in enumerate(texts):
            enc = {k: list(v) for k, v in tok(text, truncation=True, max_length=40).items()}
            if labels == "label":
                enc["label"] = i % 2
            elif labels == "labels":
                enc["labels"] = [-100] + [j % 5 for j in range(len(enc["input_ids"]) - 2)] + [-100]
            out.append(enc)
        return out

    for side in ("right", "left"):
        ours_tok.padding_side = hf_tok.padding_side = side
        for ours, theirs, labels in (
            (
                bertkit.DataCollatorWithPadding(ours_tok, pad_to_multiple_of=8),
                transformers.DataCollatorWithPadding(hf_tok, pad_to_multiple_of=8),
                "label",
            ),
            (
                bertkit.DataCollatorForTokenClassification(ours_tok),
                transformers.DataCollatorForTokenClassification(hf_tok),
                "labels",
            ),
            (
                bertkit.DataCollatorForTokenClassification(ours_tok, pad_to_multiple_of=8, label_pad_token_id=-1),
                transformers.DataCollatorForTokenClassification(hf_tok, pad_to_multiple_of=8, label_pad_token_id=-1),
                "labels",
            ),
        ):
            got, want = ours(features(ours_tok, labels)), theirs(features(hf_tok, labels))
            assert sorted(got.keys()) == sorted(want.keys()), (side, labels)
            for key in want:
                torch.testing.assert_close(got[key], want[key], msg=f"{side} {labels} {key}")
    with pytest.raises(ValueError, match="return_tensors='np'"):
        bertkit.DataCollatorWithPadding(ours_tok, return_tensors="np")


def test_early_stopping_and_the_best_model_at_end_as_transformers(setup, tmp_path):
    """EarlyStoppingCallback with load_best_model_at_end (checkpoints and evaluations each epoch): both
    Trainers stop at the same step and end on the same best weights, not the last ones."""
    folder, train, held_out = setup
    call = {
        **_call(tmp_path / "x"),
        "num_train_epochs": 30,
        "learning_rate": 1e-2,
        "save_strategy": "epoch",
        "load_best_model_at_end": True,
    }
    hf_model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    hf = transformers.Trainer(
        model=hf_model,
        args=transformers.TrainingArguments(**{**call, "output_dir": str(tmp_path / "hf")}),
        train_dataset=train,
        eval_dataset=held_out,
        processing_class=transformers.AutoTokenizer.from_pretrained(folder),
        callbacks=[transformers.EarlyStoppingCallback(early_stopping_patience=2)],
    )
    hf_out = hf.train()
    best_step = int(hf.state.best_model_checkpoint.rsplit("-", 1)[1])
    assert hf_out.global_step < 30 and best_step < hf_out.global_step  # it stopped early, past its best

    model = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
    ours = bertkit.Trainer(
        model=model,
        args=bertkit.TrainingArguments(**{**call, "output_dir": str(tmp_path / "bk")}),
        train_dataset=train,
        eval_dataset=held_out,
        processing_class=bertkit.BertTokenizer.from_pretrained(folder),
        callbacks=[bertkit.EarlyStoppingCallback(early_stopping_patience=2)],
    )
    out = ours.train()
    assert out.global_step == hf_out.global_step
    assert out.best_step == best_step
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, hf_model.state_dict()[key], atol=1e-4, rtol=1e-3, msg=key)
    saved = bertkit.AutoModelForSequenceClassification.from_pretrained(tmp_path / "bk")
    torch.testing.assert_close(saved.state_dict()["classifier.weight"], model.state_dict()["classifier.weight"])


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"pad_to_multiple_of": 8, "mlm_probability": 0.3},
        {"mask_replace_prob": 0.5, "random_replace_prob": 0.3},
        {"mask_replace_prob": 1.0, "random_replace_prob": 0.0},
        {"mlm": False},
    ],
)
@pytest.mark.parametrize("form", ["dicts", "lists"])
def test_language_modeling_collator_masks_as_transformers_with_the_same_seed(settings, form):
    """DataCollatorForLanguageModeling: the same seed chooses, masks and replaces the same tokens as
    transformers' over successive batches of real sentences (padding and special tokens never chosen)."""
    folder = asset_path("minilm")
    ours_tok, hf_tok = bertkit.BertTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        texts = [row["text"] for row in list(csv.DictReader(f))[:24]]

    def examples(tok, chunk):
        encoded = [tok(t, truncation=True, max_length=48) for t in chunk]
        return [dict(e) for e in encoded] if form == "dicts" else [list(e["input_ids"]) for e in encoded]

    ours = bertkit.DataCollatorForLanguageModeling(ours_tok, seed=7, **settings)
    theirs = transformers.DataCollatorForLanguageModeling(hf_tok, seed=7, **settings)
    chosen = 0
    for start in range(0, len(texts), 8):  # the generator's state carries over from batch to batch
        got, want = (
            ours(examples(ours_tok, texts[start : start + 8])),
            theirs(examples(hf_tok, texts[start : start + 8])),
        )
        assert sorted(got.keys()) == sorted(want.keys())
        for key in want:
            torch.testing.assert_close(got[key], want[key], msg=key)
        chosen += int((got["labels"] != -100).sum())
    assert chosen > 20  # enough tokens were drawn for the comparison to mean something
    with pytest.raises(ValueError, match="mask_replace_prob \\+ random_replace_prob = 1.2 exceeds 1"):
        bertkit.DataCollatorForLanguageModeling(ours_tok, mask_replace_prob=0.9, random_replace_prob=0.3)


def test_own_optimizer_scheduler_and_loss_as_transformers(setup, tmp_path):
    """optimizers=(optimizer, scheduler) and compute_loss_func: the caller's SGD, step decay and
    label-smoothed loss train the same weights in both Trainers."""
    folder, train, _ = setup

    def loss(outputs, labels, num_items_in_batch=None):
        return torch.nn.functional.cross_entropy(outputs.logits, labels, label_smoothing=0.1)

    def run(lib, model, output):
        sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        trainer = lib.Trainer(
            model=model,
            args=lib.TrainingArguments(**{**_call(output), "eval_strategy": "no", "warmup_steps": 2}),  # not used
            train_dataset=train,
            processing_class=lib.AutoTokenizer.from_pretrained(folder),
            optimizers=(sgd, torch.optim.lr_scheduler.StepLR(sgd, step_size=1, gamma=0.5)),
            compute_loss_func=loss,
        )
        return trainer.train(), sgd

    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    ours = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
    want, their_sgd = run(transformers, theirs, tmp_path / "hf")
    got, our_sgd = run(bertkit, ours, tmp_path / "bk")
    assert our_sgd.param_groups[0]["lr"] == pytest.approx(their_sgd.param_groups[0]["lr"]) == 0.05 / 8
    assert got.training_loss == pytest.approx(want.training_loss, rel=1e-4)
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs.state_dict()[key], atol=2e-5, rtol=1e-4, msg=key)
    with pytest.raises(TypeError, match="loss_fn= or transformers' compute_loss_func="):
        bertkit.Trainer(
            ours, bertkit.TrainingArguments(**_call(tmp_path / "z")), train, loss_fn=loss, compute_loss_func=loss
        )


def test_a_second_run_columns_state_and_qa_predictions_as_transformers(setup, tmp_path):
    """A script run twice into one output_dir (transformers writes over its earlier run; bertkit replaces
    only that run's files), a text column beside the tokenized ones (dropped before collation), the
    Trainer's state, and an extractive-QA model's predict (start and end logits, both span ends)."""
    folder, train, held_out = setup
    with_text = [{**item, "text": f"example {i}"} for i, item in enumerate(train)]

    def run(lib, model, output):
        trainer = lib.Trainer(
            model=model,
            args=lib.TrainingArguments(**{**_call(output), "eval_strategy": "no"}),
            train_dataset=with_text,
            data_collator=lib.DataCollatorWithPadding(lib.AutoTokenizer.from_pretrained(folder)),
        )
        trainer.train()
        return trainer

    (tmp_path / "bk").mkdir()
    (tmp_path / "bk" / "notes.txt").write_text("mine")
    run(bertkit, bertkit.AutoModelForSequenceClassification.from_pretrained(folder), tmp_path / "bk")
    ours_model = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
    ours = run(bertkit, ours_model, tmp_path / "bk")  # the same script again, into the same folder
    theirs_model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    theirs = run(transformers, theirs_model, tmp_path / "hf")
    for key, value in ours_model.state_dict().items():
        torch.testing.assert_close(value, theirs_model.state_dict()[key], atol=2e-5, rtol=1e-4, msg=key)
    assert (tmp_path / "bk" / "notes.txt").read_text() == "mine"
    state = ours.state
    assert state.global_step == theirs.state.global_step
    ours_losses = [r["loss"] for r in state.log_history if "loss" in r]
    assert ours_losses == pytest.approx([r["loss"] for r in theirs.state.log_history if "loss" in r], rel=1e-4)
    assert len(ours_losses) == 3  # the first run's rows were replaced, not kept

    # extractive QA: predict gives (start logits, end logits) and both label columns
    torch.manual_seed(3)
    config = bertkit.BertConfig(
        vocab_size=200, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    bertkit.BertForQuestionAnswering(config).save_pretrained(tmp_path / "qa")
    rng = np.random.default_rng(0)
    features = [
        {
            "input_ids": [101, *rng.integers(1000, 1100, size=10).tolist(), 102],
            "attention_mask": [1] * 12,
            "token_type_ids": [0] * 12,
            "start_positions": int(s),
            "end_positions": int(s + 2),
        }
        for s in rng.integers(1, 8, size=5)
    ]
    for f in features:
        f["input_ids"] = [i % 200 for i in f["input_ids"]]
    got = bertkit.Trainer(
        model=bertkit.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "qa"),
        args=bertkit.TrainingArguments(**{**_call(tmp_path / "qa-bk"), "eval_strategy": "no"}),
        train_dataset=features,
    ).predict(features)
    want = transformers.Trainer(
        model=transformers.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "qa"),
        args=transformers.TrainingArguments(**{**_call(tmp_path / "qa-hf"), "eval_strategy": "no"}),
        train_dataset=features,
    ).predict(features)
    assert isinstance(got.predictions, tuple) and len(got.predictions) == 2
    for a, b in zip(got.predictions, want.predictions):
        np.testing.assert_allclose(a, b, atol=1e-4)
    for a, b in zip(got.label_ids, want.label_ids):
        np.testing.assert_array_equal(a, b)
    assert got.metrics["test_loss"] == pytest.approx(want.metrics["test_loss"], rel=1e-4)


def test_default_data_collator_as_transformers():
    folder = asset_path("minilm")
    ours_tok, hf_tok = bertkit.BertTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        texts = [row["text"] for row in list(csv.DictReader(f))[:4]]
    for label in ({"label": 1}, {"label": 0.5}, {"label_ids": [1, 0]}):

        def features(tok):
            return [{**tok(t, padding="max_length", max_length=32, truncation=True), **label, "text": t} for t in texts]

        got, want = (
            bertkit.default_data_collator(features(ours_tok)),
            transformers.default_data_collator(features(hf_tok)),
        )
        assert sorted(got) == sorted(want)
        for key in want:
            torch.testing.assert_close(got[key], want[key], msg=key)
        torch.testing.assert_close(bertkit.DefaultDataCollator()(features(ours_tok))["labels"], want["labels"])
    with pytest.raises(ValueError, match="column 'input_ids' has lengths"):
        bertkit.default_data_collator([{"input_ids": [1, 2]}, {"input_ids": [1, 2, 3]}])


def test_several_batches_an_epoch_come_in_transformers_order(setup, tmp_path):
    """With 4 batches an epoch (the last one short), the same seed shuffles the examples into the same
    batches as transformers' Trainer in every epoch, so the weights agree."""
    folder, train, _ = setup
    call = {**_call(tmp_path / "x"), "per_device_train_batch_size": 5, "num_train_epochs": 2, "eval_strategy": "no"}
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    hf = transformers.Trainer(
        model=theirs,
        args=transformers.TrainingArguments(**{**call, "output_dir": str(tmp_path / "hf")}),
        train_dataset=train,
        processing_class=transformers.AutoTokenizer.from_pretrained(folder),
    )
    hf.train()
    ours = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
    trainer = bertkit.Trainer(
        model=ours,
        args=bertkit.TrainingArguments(**{**call, "output_dir": str(tmp_path / "bk")}),
        train_dataset=train,
        processing_class=bertkit.BertTokenizer.from_pretrained(folder),
    )
    trainer.train()
    assert trainer.state.global_step == hf.state.global_step == 8
    want = [r["loss"] for r in hf.state.log_history if "loss" in r]
    assert [r["loss"] for r in trainer.state.log_history if "loss" in r] == pytest.approx(want, rel=1e-4)
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs.state_dict()[key], atol=2e-5, rtol=1e-4, msg=key)


def test_logits_preprocessed_inputs_and_losses_for_metrics_as_transformers(setup, tmp_path):
    """``preprocess_logits_for_metrics`` (per batch, with the batch's labels), ``include_for_metrics``
    (input_ids padded with -100, each example's batch loss), ``label_names`` and
    ``eval_accumulation_steps``: compute_metrics sees what transformers' gives it."""
    folder, train, held_out = setup
    seen = {}

    def preprocess(logits, labels):
        seen.setdefault("calls", []).append((tuple(logits.shape), tuple(labels.shape)))
        return logits.argmax(-1), logits.softmax(-1)[:, 1]  # a tuple: concatenated element by element

    def metrics(pred):
        (argmax, prob), label_ids, inputs, losses = pred  # unpacks in transformers' order
        assert pred.inputs is inputs and pred.losses is losses
        return {
            "accuracy": float((argmax == label_ids).mean()),
            "prob": float(prob.sum()),
            "argmax_dtype_is_int": float(np.issubdtype(argmax.dtype, np.integer)),
            "inputs_sum": float(inputs.sum()),
            "inputs_shape": float(inputs.shape[0] * 1000 + inputs.shape[1]),
            "pads": float((inputs == -100).sum()),
            "loss_count": float(len(losses)),
            "loss_sum": float(losses.sum()),
        }

    def run(lib, out):
        kwargs = dict(
            _call(out),
            include_for_metrics=["inputs", "loss"],
            label_names=["labels"],
            eval_accumulation_steps=2,
            per_device_eval_batch_size=3,
        )
        trainer = lib.Trainer(
            model=lib.AutoModelForSequenceClassification.from_pretrained(folder),
            args=lib.TrainingArguments(**kwargs),
            train_dataset=train,
            eval_dataset=held_out,
            processing_class=lib.AutoTokenizer.from_pretrained(folder),
            compute_metrics=metrics,
            preprocess_logits_for_metrics=preprocess,
        )
        seen.clear()
        got = trainer.evaluate()
        return got, list(seen["calls"]), trainer.predict(held_out)

    want, want_calls, want_pred = run(transformers, tmp_path / "hf")
    got, got_calls, got_pred = run(bertkit, tmp_path / "bk")
    assert got_calls == want_calls == [((3, 2), (3,)), ((3, 2), (3,)), ((2, 2), (2,))]
    assert got["eval_argmax_dtype_is_int"] == want["eval_argmax_dtype_is_int"] == 1.0
    for key in ("eval_inputs_sum", "eval_inputs_shape", "eval_pads", "eval_loss_count", "eval_accuracy"):
        assert got[key] == want[key], key
    for key in ("eval_prob", "eval_loss_sum", "eval_loss"):
        assert got[key] == pytest.approx(want[key], rel=1e-5), key
    assert isinstance(got_pred.predictions, tuple) and len(got_pred.predictions) == 2
    np.testing.assert_array_equal(got_pred.predictions[0], want_pred.predictions[0])
    np.testing.assert_allclose(got_pred.predictions[1], want_pred.predictions[1], atol=1e-6)

    with pytest.raises(ValueError, match="include_for_metrics=\\['logits'\\]"):
        bertkit.TrainingArguments(output_dir=str(tmp_path / "x"), include_for_metrics=["logits"])
    with pytest.raises(ValueError, match="label_names='labels'"):
        bertkit.TrainingArguments(output_dir=str(tmp_path / "x"), label_names="labels")


def test_a_model_prepared_for_inference_is_refused_with_the_reason(setup, tmp_path):
    """A model loaded at an inference precision has frozen weights: the Trainer says so in one line
    (it failed deep inside backward), and transformers' dtype="auto" loads a model that trains."""
    folder, train, _ = setup
    args = bertkit.TrainingArguments(output_dir=str(tmp_path / "a"), report_to="none", save_strategy="no")
    frozen = bertkit.AutoModelForSequenceClassification.from_pretrained(folder, dtype="bf16")
    with pytest.raises(ValueError, match="prepared for inference at bf16 .* load it without an inference dtype"):
        bertkit.Trainer(model=frozen, args=args, train_dataset=train)
    trains = bertkit.AutoModelForSequenceClassification.from_pretrained(folder, dtype="auto")
    result = bertkit.Trainer(
        model=trains,
        args=bertkit.TrainingArguments(
            output_dir=str(tmp_path / "b"), max_steps=1, report_to="none", save_strategy="no"
        ),
        train_dataset=train,
    ).train()
    assert result.global_step == 1
    trains.requires_grad_(False)
    with pytest.raises(ValueError, match="every parameter has requires_grad=False"):
        bertkit.Trainer(model=trains, args=args, train_dataset=train)
