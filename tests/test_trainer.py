"""The shared Trainer on small torch modules: schedule, decay groups, accumulation, NaN stop,
best-model tracking and early stopping, atomic checkpoints (process killed mid-write), resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from bertkit.training import NonFiniteLossError, Trainer, TrainingArguments, latest_checkpoint
from bertkit.training.trainer import _linear_schedule, _param_groups

ROOT = Path(__file__).resolve().parents[1]


class Regressor(nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.dense = nn.Linear(d, 16)
        self.LayerNorm = nn.LayerNorm(16)
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        pred = self.out(torch.tanh(self.LayerNorm(self.dense(x)))).squeeze(-1)
        return {"loss": nn.functional.mse_loss(pred.float(), y)}


def _data(n: int = 128, d: int = 8, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = x[:, 0] * 2 - x[:, 1]
    return [{"x": x[i], "y": y[i]} for i in range(n)]


def _cfg(tmp_path: Path, **kw) -> TrainingArguments:
    base = dict(
        output=str(tmp_path / "out"), batch_size=16, lr=1e-2, precision="fp32", progress=False, plot=False, seed=0
    )
    base.update(kw)
    return TrainingArguments(**base)


def _rows(path: Path) -> list[dict]:
    return [json.loads(l) for l in (path / "metrics.jsonl").read_text().splitlines() if l.strip()]


def test_schedule_and_decay_groups():
    f = _linear_schedule(10, 110)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0) and f(60) == pytest.approx(0.5) and f(110) == 0.0
    model = Regressor()
    decay, no_decay = _param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in decay["params"]) == ["dense.weight", "out.weight"]
    assert sorted(names[id(p)] for p in no_decay["params"]) == [
        "LayerNorm.bias",
        "LayerNorm.weight",
        "dense.bias",
        "out.bias",
    ]
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.01


def test_trains_logs_and_saves(tmp_path):
    torch.manual_seed(0)
    data = _data()
    trainer = Trainer(
        Regressor(),
        _cfg(
            tmp_path,
            epochs=6,
            warmup_ratio=0.1,
            plot=True,
            eval_each_epoch=True,
            best_metric="mse",
            greater_is_better=False,
        ),
        data,
        evaluate=lambda m: {
            "mse": float(m(torch.stack([d["x"] for d in data]), torch.stack([d["y"] for d in data]))["loss"])
        },
    )
    result = trainer.train()
    rows = _rows(tmp_path / "out")
    train_rows = [r for r in rows if "loss" in r]
    assert [r["step"] for r in train_rows] == list(range(1, 49))  # 128 / 16 = 8 steps x 6 epochs
    assert {"step", "epoch", "loss", "lr", "tokens_per_sec"} <= set(train_rows[0])
    assert train_rows[-1]["loss"] < 0.5 * train_rows[0]["loss"]
    evals = [r["eval_mse"] for r in rows if "eval_mse" in r]
    assert len(evals) == 6 and result.best_metric == min(evals)
    assert (tmp_path / "out" / "metrics.png").stat().st_size > 1000
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert (tmp_path / "out" / "best" / "model.safetensors").is_file()
    # The warmup peak is the configured lr; the schedule decays linearly to 0 at the last step.
    lrs = [r["lr"] for r in train_rows]
    assert max(lrs) == pytest.approx(1e-2) and lrs[-1] < 1e-3


def test_gradient_accumulation_matches_big_batch(tmp_path):
    data = _data()
    models = []
    for bs, accum in ((32, 1), (8, 4)):
        torch.manual_seed(1)
        m = Regressor()
        Trainer(
            m, _cfg(tmp_path / f"{bs}", batch_size=bs, grad_accum_steps=accum, max_steps=4, save_final=False), data
        ).train()
        models.append(m)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_early_stopping_by_patience(tmp_path):
    scores = iter([0.5, 0.7, 0.6, 0.65, 0.69, 0.9, 0.95])
    trainer = Trainer(
        Regressor(),
        _cfg(tmp_path, max_steps=100, eval_every=5, best_metric="acc", patience=3),
        _data(),
        evaluate=lambda m: {"acc": next(scores)},
    )
    result = trainer.train()
    assert result.stopped_early and result.step == 25
    assert result.best_metric == 0.7 and result.best_step == 10
    assert json.loads((tmp_path / "out" / "best" / "best.json").read_text())["step"] == 10


class Exploding(Regressor):
    """Loss becomes NaN once the step counter passes a threshold (a stand-in for divergence)."""

    def __init__(self, nan_after: int) -> None:
        super().__init__()
        self.calls = 0
        self.nan_after = nan_after

    def forward(self, x, y):
        self.calls += 1
        out = super().forward(x, y)
        if self.calls > self.nan_after:
            out["loss"] = out["loss"] * float("nan")
        return out


def test_nan_loss_stops_and_keeps_last_checkpoint(tmp_path):
    trainer = Trainer(Exploding(nan_after=7), _cfg(tmp_path, max_steps=20, save_every=3), _data())
    # the setting as a Python caller names it (a command names its flag: test_training_outputs.py)
    with pytest.raises(NonFiniteLossError, match=r"loss is nan at step 8.*step-0000006\. Lower learning_rate,"):
        trainer.train()
    ckpt = latest_checkpoint(tmp_path / "out")
    assert ckpt is not None and ckpt.name == "step-0000006"
    assert not any(p.name.endswith(".tmp") for p in ckpt.parent.iterdir())
    # The checkpoint is intact: a fresh trainer resumes from it, with the saved (finite) weights.
    saved = load_file(str(ckpt / "model.safetensors"))
    t2 = Trainer(Regressor(), _cfg(tmp_path, max_steps=20, save_every=3, resume=True), _data())
    t2.load_checkpoint(ckpt)
    assert t2.step == 6
    state = t2.raw_model.state_dict()
    assert set(saved) == set(state)
    for name, value in saved.items():
        assert torch.isfinite(value).all()
        assert torch.equal(state[name], value)


_KILL_SCRIPT = textwrap.dedent("""
    import sys, time, torch
    from torch import nn
    from safetensors.torch import save_file
    sys.path.insert(0, {tests!r})
    from test_trainer import Regressor, _data
    from bertkit.training import Trainer, TrainingArguments

    def slow_save(model, directory):
        # A real, large-ish write that is slow enough to be interrupted half-way.
        save_file({{k: v.contiguous() for k, v in model.state_dict().items()}}, str(directory / "model.safetensors"))
        if ".step-0000010." in str(directory):  # the temp folder of the step-10 checkpoint
            (directory / "WRITING").write_text("x")
            time.sleep(60)

    cfg = TrainingArguments(output={out!r}, max_steps=20, save_every=5, batch_size=16, lr=1e-2,
                         precision="fp32", progress=False, plot=False)
    Trainer(Regressor(), cfg, _data(), save_model=slow_save).train()
""")


@pytest.mark.slow
def test_killed_while_writing_checkpoint_keeps_previous(tmp_path):
    out = tmp_path / "out"
    script = tmp_path / "run.py"
    script.write_text(_KILL_SCRIPT.format(tests=str(Path(__file__).parent), out=str(out)))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT)
    deadline = time.time() + 120
    while not list((out / "checkpoints").glob(".step-0000010.*.tmp/WRITING")):
        assert proc.poll() is None, "training ended before the checkpoint write"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and ckpt.name == "step-0000005"
    assert list((out / "checkpoints").glob(".step-0000010.*.tmp"))  # the half-written one is ignored
    trainer = Trainer(Regressor(), _cfg(tmp_path, max_steps=20, save_every=5, resume=True), _data())
    trainer.load_checkpoint(ckpt)
    assert trainer.step == 5
    result = trainer.train()  # resumes from step 5, cleans the temporary folder
    assert result.step == 20
    assert not list((out / "checkpoints").glob(".step-0000010.*.tmp"))
    assert [r["step"] for r in _rows(out) if "loss" in r] == list(range(1, 21))


def test_resume_in_process_is_exact(tmp_path):
    data = _data()
    torch.manual_seed(3)
    full = Trainer(Regressor(), _cfg(tmp_path / "a", max_steps=12, save_every=6), data)
    full.train()
    torch.manual_seed(3)
    first = Trainer(Regressor(), _cfg(tmp_path / "b", max_steps=12, save_every=6), data)
    first.total_steps = 6  # stop half-way as if interrupted (the lr schedule is still 12 steps)
    first.train()
    torch.manual_seed(99)  # a different init: everything must come from the checkpoint
    second = Trainer(Regressor(), _cfg(tmp_path / "b", max_steps=12, save_every=6, resume=True), data)
    second.train()
    for a, b in zip(full.raw_model.parameters(), second.raw_model.parameters()):
        assert torch.equal(a, b)
    la = [r["loss"] for r in _rows(tmp_path / "a" / "out") if "loss" in r]
    lb = [r["loss"] for r in _rows(tmp_path / "b" / "out") if "loss" in r]
    assert la == lb
    # the resumed run's training time counts the first process's too, as its metrics.jsonl does
    first_part = [r["train_seconds"] for r in _rows(tmp_path / "b" / "out") if r.get("step") == 6 and "loss" in r]
    assert first_part and second.elapsed_seconds > first_part[0] > 0
    last = [r["train_seconds"] for r in _rows(tmp_path / "b" / "out") if "train_seconds" in r][-1]
    assert second.elapsed_seconds == pytest.approx(last, abs=0.05)
    ended = second.elapsed_seconds
    time.sleep(0.2)
    assert second.elapsed_seconds == ended  # the clock stopped with the training, not when it is read


def _slow_loss(model, batch):
    time.sleep(0.01)  # steps of known minimum length, so that the time budget spans many of them
    return model(**batch)["loss"], {}


def _assert_follows_the_clock(rows: list[dict], peak: float, warmup: int, span: float, offset: float = 0.0) -> None:
    """The rate of step s is min(warmup(s), the decay at the clock read at the top of step s - 1), so it
    lies between the decay at its own row's training time and the decay at that of the row two before:
    bounds that follow the training time (not the step count), however loaded the machine is."""
    ends = [0.0, 0.0] + [r["train_seconds"] for r in rows]
    for i, r in enumerate(rows):
        warm = peak * min(1.0, r["step"] / warmup)
        lo = min(warm, peak * max(0.0, 1 - (offset + ends[i + 2]) / span))
        hi = min(warm, peak * max(0.0, 1 - (offset + ends[i]) / span))
        assert lo - 2e-6 <= r["lr"] <= hi + 2e-6, (r, lo, hi)  # train_seconds is rounded to 1 ms


def test_time_schedule_decays_over_the_time_budget_and_resumes(tmp_path):
    """schedule="time": warmup by steps, then lr = peak x (1 - training seconds / budget), ending at
    the budget, not at max_steps; a resumed run continues the decay from the restored training time."""
    data = _data(n=4096)
    budget_min = 0.1  # 6 s
    kw = dict(max_steps=100_000, max_minutes=budget_min, schedule="time", warmup_steps=5, lr=1e-2, save_every=5)
    torch.manual_seed(0)
    first = Trainer(Regressor(), _cfg(tmp_path, **kw), data, loss_fn=_slow_loss)
    first.total_steps = 5  # interrupted early, as by a kill after the step-5 checkpoint
    first.train()
    assert first.step == 5
    second = Trainer(Regressor(), _cfg(tmp_path, resume=True, **kw), data, loss_fn=_slow_loss)
    result = second.train()
    rows = [r for r in _rows(tmp_path / "out") if "lr" in r]
    assert 20 < result.step < 100_000  # stopped by the budget, after the resume
    assert rows[-1]["train_seconds"] >= 60 * budget_min  # the whole budget was used
    lrs = [r["lr"] for r in rows]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    assert lrs[0] == pytest.approx(2e-3, rel=0.01) and lrs[4] > lrs[0]  # warmup by steps
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))  # then decays, across the resume too
    _assert_follows_the_clock(rows, peak=1e-2, warmup=5, span=60 * budget_min)
    assert lrs[-1] < 0.2 * lrs[4]  # the decay ran down with the budget
    with pytest.raises(ValueError, match="max_minutes"):
        TrainingArguments(schedule="time")
    with pytest.raises(ValueError, match="schedule"):
        TrainingArguments(schedule="cosine", max_minutes=1)


def test_time_schedule_can_be_the_later_part_of_a_longer_one(tmp_path):
    """schedule_minutes and schedule_offset_minutes: the run is minutes [offset, offset + max_minutes)
    of a decay that reaches 0 at schedule_minutes, so its lr after warmup is peak x (1 - (offset +
    training minutes) / schedule_minutes) and it stops at max_minutes with the lr still above 0."""
    kw = dict(max_steps=100_000, max_minutes=0.04, schedule="time", warmup_steps=3, lr=1e-2, save_every=0)
    torch.manual_seed(0)
    cfg = _cfg(tmp_path, schedule_minutes=0.1, schedule_offset_minutes=0.05, **kw)
    Trainer(Regressor(), cfg, _data(n=4096), loss_fn=_slow_loss).train()
    rows = [r for r in _rows(tmp_path / "out") if "lr" in r]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    assert len(rows) > 4 and rows[-1]["train_seconds"] >= 60 * 0.04
    assert rows[0]["lr"] == pytest.approx(1e-2 / 3, rel=0.01)  # the warmup's first step
    _assert_follows_the_clock(rows, peak=1e-2, warmup=3, span=6.0, offset=3.0)
    assert rows[-1]["lr"] > 1e-3  # a part of the schedule: this run ends well above 0
    with pytest.raises(ValueError, match="schedule_offset_minutes=0.1 must fall inside a time schedule"):
        TrainingArguments(schedule="time", max_minutes=1, schedule_minutes=0.1, schedule_offset_minutes=0.1)
    with pytest.raises(ValueError, match="schedule_offset_minutes"):
        TrainingArguments(schedule_offset_minutes=1)  # a step schedule has no minutes to skip


def test_auto_precision_trains_fp32_on_a_cpu_that_emulates_bf16(tmp_path):
    """``auto`` trains in bf16 only where the CPU multiplies it natively. With AMX and AVX-512 BF16 hidden
    (so on any CPU), a Trainer on the CPU trains in fp32 with no autocast, and an explicit bf16 warns
    once that it is emulated."""
    code = textwrap.dedent(
        f"""
        import json, warnings, torch
        from bertkit.training import Trainer, TrainingArguments
        from bertkit.training.trainer import resolve_precision
        args = TrainingArguments(output={str(tmp_path / "out")!r}, batch_size=4, progress=False, plot=False)
        model = torch.nn.Linear(4, 1)
        trainer = Trainer(model, args, [{{"x": torch.zeros(4)}}] * 8, loss_fn=lambda m, b: m(b["x"]).sum())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            explicit = resolve_precision("bf16", torch.device("cpu"))
            resolve_precision("bf16", torch.device("cpu"))  # a recipe asks per phase: warned once a process
        print(json.dumps([args.precision, trainer.precision, str(trainer.amp_dtype), explicit,
                          [str(w.message) for w in caught]]))
        """
    )
    env = {**os.environ, "BERTKIT_HIDE_CPU_FLAGS": "amx_bf16,amx_tile,avx512_bf16"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    asked, trained, amp, explicit, warned = json.loads(done.stdout.strip().splitlines()[-1])
    assert (asked, trained, amp, explicit) == ("auto", "fp32", "None", "bf16")
    assert len(warned) == 1 and "neither AMX nor AVX-512 BF16" in warned[0] and "emulated" in warned[0]


def test_bad_config_values():
    with pytest.raises(ValueError, match="precision"):
        TrainingArguments(precision="fp8")
    with pytest.raises(ValueError, match="max_steps"):
        TrainingArguments(max_steps=0)


def test_training_config_keeps_its_former_field_names():
    from bertkit.training import TrainingConfig

    cfg = TrainingConfig(output_dir="o", num_epochs=2, max_time_minutes=3.0, eval_every=None, save_every=None)
    assert (cfg.output, cfg.epochs, cfg.max_minutes, cfg.eval_every, cfg.save_every) == ("o", 2, 3.0, 0, 0)
    assert isinstance(cfg, TrainingArguments) and cfg.output_dir == "o"
    with pytest.raises(ValueError, match=r"max_minutes must be a number > 0, got -1"):
        TrainingConfig(max_time_minutes=-1)


def _tiny(family: str):
    """A two-layer model of each family, at random init, with the real class and parameter names."""
    from bertkit import (
        BertConfig,
        BertForSequenceClassification,
        DistilBertConfig,
        DistilBertForSequenceClassification,
        ElectraConfig,
        ElectraForSequenceClassification,
        GPT2Config,
        GPT2LMHeadModel,
    )

    if family == "bert":
        return BertForSequenceClassification(
            BertConfig(vocab_size=99, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32)
        )
    if family == "distilbert":
        return DistilBertForSequenceClassification(
            DistilBertConfig(vocab_size=99, dim=16, n_layers=3, n_heads=2, hidden_dim=32)
        )
    if family == "electra":
        cfg = ElectraConfig(
            vocab_size=99,
            embedding_size=8,
            hidden_size=16,
            num_hidden_layers=3,
            num_attention_heads=2,
            intermediate_size=32,
        )
        return ElectraForSequenceClassification(cfg)
    return GPT2LMHeadModel(GPT2Config(vocab_size=99, n_embd=16, n_layer=3, n_head=2, n_positions=32))


@pytest.mark.parametrize("family", ["bert", "distilbert", "electra", "gpt2"])
def test_layer_depths_follow_each_family(family):
    from bertkit.training.trainer import layer_depths

    names = [n for n, _ in _tiny(family).named_parameters()]
    depths = layer_depths(names)
    layer_of = {
        "bert": "encoder.layer.",
        "electra": "encoder.layer.",
        "distilbert": "transformer.layer.",
        "gpt2": "transformer.h.",
    }
    for n in names:
        if layer_of[family] in n:
            assert depths[n] == int(n.split(layer_of[family])[1].split(".")[0]) + 1, n
        elif "embeddings" in n or ".wte." in n or ".wpe." in n:
            assert depths[n] == 0, n
        else:  # pooler, heads, a final LayerNorm: above the top layer
            assert depths[n] == 4, n
    assert sorted(set(depths.values())) == [0, 1, 2, 3, 4]


def test_layer_lr_decay_scales_each_layers_first_step(tmp_path):
    """AdamW's first step moves every parameter by its group's rate times sign(g) (epsilon ~0): the classifier at
    --lr, layer 2 at half, layer 1 a quarter, layer 0 an eighth, the embeddings a sixteenth."""
    torch.manual_seed(0)
    model = _tiny("bert")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": torch.randint(5, 99, (8,), generator=g), "labels": torch.tensor(i % 2)} for i in range(16)]
    cfg = _cfg(
        tmp_path,
        max_steps=1,
        lr=1e-3,
        weight_decay=0.0,
        max_grad_norm=0.0,
        layer_lr_decay=0.5,
        save_final=False,
        adam_eps=1e-20,
    )
    Trainer(model, cfg, data).train()
    for n, p in model.named_parameters():
        depth = 0 if ".embeddings." in n else int(n.split(".layer.")[1].split(".")[0]) + 1 if ".layer." in n else 4
        moved = float((p.detach() - before[n]).abs().max())
        assert moved == pytest.approx(1e-3 * 0.5 ** (4 - depth), rel=0.02), n
    assert _rows(tmp_path / "out")[0]["lr"] == pytest.approx(1e-3)  # the log shows the peak (top) rate


def test_layer_lr_decay_out_of_range_names_the_setting(tmp_path):
    for bad in (0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="layer_lr_decay"):
            _cfg(tmp_path, layer_lr_decay=bad)
