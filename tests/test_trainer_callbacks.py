"""transformers' ``TrainerCallback`` protocol on bertkit's Trainer.

The same callback class (a subclass of transformers' own ``TrainerCallback``) is given to transformers'
Trainer and to bertkit's, on the same tiny classifier and the same real sentences, with the same call:
each records every event it sees with the step and epoch the state says. The two records must be
the same list, event for event, and the ``logs`` and ``metrics`` the callbacks get must carry
transformers' keys with the same values (losses within 1e-4: the two libraries sum in other orders).
A callback that sets ``control`` flags steers both runs alike.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' Trainer needs it

from test_trainer_hf_calls import _accuracy, setup  # noqa: E402, F401  (the shared tiny classifier)

import bertkit  # noqa: E402

# every event transformers' TrainerCallback defines, but the one bertkit does not fire: before a push to
# the Hub (bertkit never uses the network)
NOT_FIRED = {"on_push_begin"}
EVENTS = [name for name in vars(transformers.TrainerCallback) if name.startswith("on_") and name not in NOT_FIRED]


class Recorder(transformers.TrainerCallback):
    """Records (event, global_step, epoch rounded) for every event, and the logs/metrics it is given."""

    def __init__(self):
        self.events: list[tuple[str, int, float]] = []
        self.logs: list[dict] = []
        self.metrics: list[dict] = []
        self.kwargs_seen: set[str] = set()


def _record(event):
    def method(self, args, state, control, **kwargs):
        self.events.append((event, state.global_step, round(float(state.epoch or 0), 4)))
        self.kwargs_seen.update(kwargs)
        if event == "on_log":
            self.logs.append(dict(kwargs["logs"]))
        if event in ("on_evaluate", "on_predict"):
            self.metrics.append(dict(kwargs["metrics"]))
        return control

    return method


for _event in EVENTS:
    setattr(Recorder, _event, _record(_event))


def _call(output_dir, **kw) -> dict:
    base = dict(
        output_dir=str(output_dir),
        num_train_epochs=2,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    return {**base, **kw}


def _run(lib, setup, out, callbacks, **kw):
    folder, train, held_out = setup
    if lib == "transformers":
        model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
        trainer = transformers.Trainer(
            model=model,
            args=transformers.TrainingArguments(**_call(out, **kw)),
            train_dataset=train,
            eval_dataset=held_out,
            processing_class=transformers.AutoTokenizer.from_pretrained(folder),
            compute_metrics=_accuracy,
            callbacks=callbacks,
        )
    else:
        model = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
        trainer = bertkit.Trainer(
            model=model,
            args=bertkit.TrainingArguments(**_call(out, **kw)),
            train_dataset=train,
            eval_dataset=held_out,
            processing_class=bertkit.BertTokenizer.from_pretrained(folder),
            compute_metrics=_accuracy,
            callbacks=callbacks,
        )
    trainer.train()
    return trainer


def test_events_arrive_in_transformers_order_with_its_state(setup, tmp_path):
    """16 sentences, batches of 4 with 2 accumulation steps (on_substep_end), 2 epochs of 2 steps, a log
    every step, an evaluation and a checkpoint every 2 steps: every event, its step and epoch, in the
    same order as transformers' Trainer calls them; then evaluate() and predict() fire on_evaluate and
    on_predict. The callbacks get transformers' keyword arguments."""
    theirs, ours = Recorder(), Recorder()
    hf = _run("transformers", setup, tmp_path / "hf", [theirs])
    bk = _run("bertkit", setup, tmp_path / "bk", [ours])
    held_out = setup[2]
    for trainer in (hf, bk):
        trainer.evaluate()
        trainer.predict(held_out)
    assert [e[0] for e in ours.events] == [e[0] for e in theirs.events]
    assert ours.events == theirs.events
    assert {"on_substep_end", "on_save", "on_evaluate", "on_predict"} <= {e[0] for e in ours.events}
    assert {"model", "processing_class", "optimizer", "lr_scheduler"} <= ours.kwargs_seen
    assert ours.kwargs_seen <= theirs.kwargs_seen | {"train_dataloader", "eval_dataloader"}


def test_logs_and_metrics_carry_transformers_keys_and_values(setup, tmp_path):
    """The rows on_log gets (training losses, evaluations, the run's summary) and the metrics
    on_evaluate gets: each of transformers' keys is there, losses and learning rates within 1e-4.
    Without gradient accumulation: with it, transformers 5 logs the sum of the micro-batches' mean
    losses where bertkit logs their mean."""
    theirs, ours = Recorder(), Recorder()
    _run("transformers", setup, tmp_path / "hf", [theirs], gradient_accumulation_steps=1)
    _run("bertkit", setup, tmp_path / "bk", [ours], gradient_accumulation_steps=1)
    assert len(ours.logs) == len(theirs.logs) > 4
    timing = ("_runtime", "_per_second", "total_flos")
    for a, b in zip(ours.logs, theirs.logs):
        missing = set(b) - set(a)
        assert not missing, (missing, b)
        for key, value in b.items():
            if any(t in key for t in timing) or key == "grad_norm":
                continue
            assert a[key] == pytest.approx(value, abs=1e-4), (key, a[key], value)
    assert len(ours.metrics) == len(theirs.metrics) == 4  # every 2 of 8 steps
    for a, b in zip(ours.metrics, theirs.metrics):
        assert set(b) <= set(a), set(b) - set(a)
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], abs=1e-4)
        assert a["eval_accuracy"] == b["eval_accuracy"]


class StopAt(transformers.TrainerCallback):
    """Asks to stop at a step, to end the epoch at another, and for a log, an evaluation and a
    checkpoint at a step that no schedule asks for."""

    def __init__(self, stop=None, epoch_stop=None, extra=None):
        self.stop, self.epoch_stop, self.extra = stop, epoch_stop, extra
        self.seen: list[tuple[str, int]] = []

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.stop:
            control.should_training_stop = True
        if state.global_step == self.epoch_stop:
            control.should_epoch_stop = True
        if state.global_step == self.extra:
            control.should_log = control.should_evaluate = control.should_save = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.seen.append(("log", state.global_step))

    def on_evaluate(self, args, state, control, **kwargs):
        self.seen.append(("evaluate", state.global_step))

    def on_save(self, args, state, control, **kwargs):
        self.seen.append(("save", state.global_step))

    def on_epoch_end(self, args, state, control, **kwargs):
        self.seen.append(("epoch_end", state.global_step))


@pytest.mark.parametrize(
    "flags",
    [{"stop": 3}, {"epoch_stop": 1}, {"extra": 3}],
    ids=["should_training_stop", "should_epoch_stop", "should_log-evaluate-save"],
)
def test_control_flags_steer_both_trainers_alike(setup, tmp_path, flags):
    """A callback's control flags, with schedules that ask for nothing themselves (a log every 10 steps,
    no evaluation or checkpoint on a schedule, 3 epochs of 4 steps): the same steps run, and the same
    logs, evaluations, checkpoints and epoch ends happen at the same steps. The trained weights agree."""
    # without gradient accumulation: with it, transformers 5 sums the micro-batches' mean losses of this
    # model (its forward takes **kwargs), so its gradients are twice bertkit's mean and clip differently
    kw = dict(num_train_epochs=3, gradient_accumulation_steps=1, logging_steps=10, eval_strategy="no")
    kw["save_strategy"] = "no"
    theirs, ours = StopAt(**flags), StopAt(**flags)
    hf = _run("transformers", setup, tmp_path / "hf", [theirs], **kw)
    bk = _run("bertkit", setup, tmp_path / "bk", [ours], **kw)
    assert bk.state.global_step == hf.state.global_step
    assert ours.seen == theirs.seen
    if "extra" in flags:
        assert ("save", 3) in ours.seen
        assert [p.name for p in (tmp_path / "bk" / "checkpoints").iterdir()] == ["step-0000003"]
    hf_sd = hf.model.state_dict()
    for key, value in bk.model.state_dict().items():
        torch.testing.assert_close(value, hf_sd[key], atol=1e-4, rtol=1e-3, msg=key)


def test_a_callback_class_add_pop_and_remove(setup, tmp_path):
    """A class is built with no arguments; add_callback / pop_callback / remove_callback manage the list
    as transformers' do; a callback without any event, and add_callback(EarlyStoppingCallback), are
    refused by name; a callback reading an attribute bertkit's state lacks names itself and the event."""
    folder, train, held_out = setup
    args = bertkit.TrainingArguments(**_call(tmp_path / "a", num_train_epochs=1))
    model = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
    trainer = bertkit.Trainer(model=model, args=args, train_dataset=train, eval_dataset=held_out, callbacks=[Recorder])
    built = trainer.callback_handler.callbacks[0]
    assert isinstance(built, Recorder) and built.events[0][0] == "on_init_end"
    assert trainer.pop_callback(Recorder) is built and trainer.callback_handler.callbacks == []
    extra = Recorder()
    trainer.add_callback(extra)
    trainer.remove_callback(extra)
    assert trainer.pop_callback(extra) is None

    with pytest.raises(TypeError, match="object has none of a TrainerCallback's events"):
        trainer.add_callback(object())
    with pytest.raises(ValueError, match="add_callback\\(EarlyStoppingCallback\\)"):
        trainer.add_callback(transformers.EarlyStoppingCallback())

    class NeedsMore(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            return state.stateful_callbacks_that_do_not_exist

    trainer.add_callback(NeedsMore())
    with pytest.raises(RuntimeError, match="NeedsMore.on_train_begin failed"):
        trainer.train()


def test_transformers_printer_callback_prints_the_same_rows(setup, tmp_path, capsys):
    """transformers' own PrinterCallback (a class) on bertkit's Trainer prints each logged row as
    transformers' Trainer prints them with disable_tqdm=True (where it adds that callback itself): the
    same rows with the same keys, losses within 1e-4."""
    import ast

    def printed(lib, callbacks):
        capsys.readouterr()
        _run(lib, setup, tmp_path / lib, callbacks, gradient_accumulation_steps=1)
        return [ast.literal_eval(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]

    theirs, ours = printed("transformers", []), printed("bertkit", [transformers.PrinterCallback])
    assert len(ours) == len(theirs) > 4
    for a, b in zip(ours, theirs):
        assert set(b) <= set(a), set(b) - set(a)
        for key in ("loss", "eval_loss", "train_loss"):
            if key in b:
                assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-4), key


class StepCounter(transformers.TrainerCallback, transformers.trainer_callback.ExportableState):
    """A callback with a state: transformers records it in trainer_state.json."""

    def __init__(self, every=1):
        self.every, self.seen = every, 0

    def on_step_end(self, args, state, control, **kwargs):
        self.seen += 1

    def state(self):
        return {"args": {"every": self.every}, "attributes": {"seen": self.seen}}


def test_stateful_callbacks_are_recorded_as_transformers_records_them(setup, tmp_path):
    """A callback with a ``state()`` (transformers' ExportableState): trainer_state.json holds its state
    under its class name beside TrainerControl's flags, as transformers' checkpoint at the last step
    holds them, and transformers' TrainerState reads it."""
    states = {}
    for lib in ("transformers", "bertkit"):
        trainer = _run(lib, setup, tmp_path / lib, [StepCounter(every=3)], eval_strategy="no")
        if lib == "bertkit":
            trainer.save_state()
            path = tmp_path / lib / "trainer_state.json"
        else:  # transformers records them with the checkpoint (its last one is at the last step)
            path = tmp_path / lib / f"checkpoint-{trainer.state.global_step}" / "trainer_state.json"
        states[lib] = transformers.TrainerState.load_from_json(str(path)).stateful_callbacks
    ours, theirs = states["bertkit"], states["transformers"]
    assert ours["StepCounter"] == theirs["StepCounter"] == {"args": {"every": 3}, "attributes": {"seen": 4}}
    assert set(ours["TrainerControl"]["args"]) == set(theirs["TrainerControl"]["args"])
    assert ours["TrainerControl"]["attributes"] == theirs["TrainerControl"]["attributes"] == {}


@pytest.mark.parametrize("restore", [True, False])
def test_restore_callback_states_from_checkpoint_as_transformers(setup, tmp_path, restore):
    """A run stopped at its step-2 checkpoint, resumed to step 4 with a new StepCounter(every=5): with
    restore_callback_states_from_checkpoint the counter is rebuilt from the checkpoint's state (every 3,
    2 steps seen, then 2 more), without it (transformers' default) the new one counts from 0. Both
    Trainers end with the same counter; a stored state whose callback the run lacks is named."""
    ends = {}
    for lib in ("transformers", "bertkit"):
        out = tmp_path / lib
        _run(lib, setup, out, [StepCounter(every=3)], eval_strategy="no", max_steps=2)
        counter = StepCounter(every=5)
        folder, train, held_out = setup
        module = transformers if lib == "transformers" else bertkit
        tok = (transformers.AutoTokenizer if lib == "transformers" else bertkit.BertTokenizer).from_pretrained(folder)
        trainer = module.Trainer(
            model=module.AutoModelForSequenceClassification.from_pretrained(folder),
            args=module.TrainingArguments(
                **_call(out, eval_strategy="no", max_steps=4, restore_callback_states_from_checkpoint=restore)
            ),
            train_dataset=train,
            processing_class=tok,
            callbacks=[counter],
        )
        trainer.train(resume_from_checkpoint=True)
        assert trainer.state.global_step == 4
        kept = trainer.pop_callback(StepCounter)
        ends[lib] = (type(kept).__name__, kept.every, kept.seen, kept is counter)
    want = ("StepCounter", 3, 4, False) if restore else ("StepCounter", 5, 2, True)
    assert ends["bertkit"] == ends["transformers"] == want
    if restore:  # the checkpoint holds a StepCounter state; a run without one is told it is ignored
        trainer = bertkit.Trainer(
            model=bertkit.AutoModelForSequenceClassification.from_pretrained(setup[0]),
            args=bertkit.TrainingArguments(
                **_call(
                    tmp_path / "bertkit", eval_strategy="no", max_steps=5, restore_callback_states_from_checkpoint=True
                )
            ),
            train_dataset=setup[1],
            processing_class=bertkit.BertTokenizer.from_pretrained(setup[0]),
        )
        with pytest.warns(UserWarning, match=r"callbacks this run does not have \(StepCounter\)"):
            trainer.train(resume_from_checkpoint=True)


class Loaders(transformers.TrainerCallback):
    """Keeps the dataloaders the callbacks are handed, by event."""

    def __init__(self):
        self.seen: dict[str, tuple] = {}

    def on_train_begin(self, args, state, control, train_dataloader=None, eval_dataloader=None, **kwargs):
        self.seen.setdefault("train_begin", (train_dataloader, eval_dataloader))

    def on_evaluate(self, args, state, control, train_dataloader=None, eval_dataloader=None, **kwargs):
        self.seen.setdefault("evaluate", (train_dataloader, eval_dataloader))


def _batches(loader) -> list[dict]:
    return [{k: v for k, v in b.items() if isinstance(v, torch.Tensor)} for b in loader]


def test_dataloaders_are_transformers_and_the_batches_train_takes(setup, tmp_path):
    """get_eval_dataloader and get_test_dataloader give transformers' batches, tensor for tensor (the
    same rows, padding and labels); get_train_dataloader has transformers' length (16 sentences in
    batches of 4) and holds exactly the batches train() then feeds the model in the first epoch. The
    callbacks are handed a training dataloader from on_train_begin and, from the first evaluation, an
    evaluation one, each as long as transformers'."""
    theirs, ours = Loaders(), Loaders()
    hf = _run("transformers", setup, tmp_path / "hf", [theirs], gradient_accumulation_steps=1)
    folder, train, held_out = setup
    model = bertkit.AutoModelForSequenceClassification.from_pretrained(folder)
    bk = bertkit.Trainer(
        model=model,
        args=bertkit.TrainingArguments(**_call(tmp_path / "bk", gradient_accumulation_steps=1)),
        train_dataset=train,
        eval_dataset=held_out,
        processing_class=bertkit.BertTokenizer.from_pretrained(folder),
        compute_metrics=_accuracy,
        callbacks=[ours],
    )
    for a, b in [
        (bk.get_eval_dataloader(), hf.get_eval_dataloader()),
        (bk.get_test_dataloader(held_out), hf.get_test_dataloader(held_out)),
    ]:
        mine, ref = _batches(a), _batches(b)
        assert len(mine) == len(ref) == 2
        for x, y in zip(mine, ref):
            assert set(y) <= set(x), set(y) - set(x)
            for key in y:
                assert torch.equal(x[key], y[key].to(x[key].dtype)), key
    loader = bk.get_train_dataloader()
    assert len(loader) == len(hf.get_train_dataloader()) == 4
    expected = [b["input_ids"] for b in loader]
    fed: list[tuple[bool, torch.Tensor]] = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: fed.append((m.training, kw["input_ids"].clone())), with_kwargs=True
    )
    try:
        bk.train()
    finally:
        hook.remove()
    training = [x for is_training, x in fed if is_training]
    assert len(training) == 8 and len(fed) > 8  # two epochs, and the evaluations' batches
    training = training[: len(expected)]
    for x, y in zip(training, expected):
        assert torch.equal(x, y)
    for seen in (ours.seen, theirs.seen):
        assert seen["train_begin"][0] is not None and seen["evaluate"][1] is not None
    assert len(ours.seen["train_begin"][0]) == len(theirs.seen["train_begin"][0])
    assert len(ours.seen["evaluate"][1]) == len(theirs.seen["evaluate"][1])
    with pytest.raises(ValueError, match="get_eval_dataloader\\('dev'\\): no eval_dataset of that name"):
        bk.get_eval_dataloader("dev")
