"""`bertkit pretrain --recipe cpu-hour`: the schedule from the time budget, one resumable job.

* The schedule: seq 32 first, then seq 128, 60/40 of the budget, in the recipe's objective (MLM
  without NSP) unless --objective names another; mlm+nsp adds NSP in phase 2 only.
* With a budget of seconds, a run killed (SIGKILL) once phase 2 has a checkpoint resumes with
  --resume in phase 2, from that checkpoint: phase 1 is not run again, and the finished OUTPUT is
  the final model (it loads in transformers). The recipe trains without dropout and saves the
  preset's rates, which fine-tuning uses.
* Settings the recipe chooses cannot also be given.
* The throughput that sizes the phases' intervals and step cap is the fastest timed step: a
  neighbour's load, which only slows steps, does not shrink them.
* --recipe-schedule single: one learning-rate decay across both phases, phase 2 continuing it from
  where phase 1 stopped (phase 1 ends above 0, phase 2 ends at 0).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertkit.assets import asset_path
from bertkit.training.recipes import RECIPE_MASK_RATE, RECIPE_OBJECTIVE, cpu_hour_phases, recipe_mask_rate

ROOT = Path(__file__).resolve().parents[1]


def test_cpu_hour_schedule():
    p1, p2 = cpu_hour_phases(60)
    assert (p1.seq_len, p1.batch_size, p1.lr, p1.nsp, p1.objective) == (32, 64, 1e-3, False, "mlm+nsp")
    assert (p2.seq_len, p2.batch_size, p2.lr, p2.nsp, p2.objective) == (128, 32, 5e-4, False, RECIPE_OBJECTIVE)
    assert p1.minutes + p2.minutes == pytest.approx(60) and 30 <= p1.minutes <= 40
    a, b = cpu_hour_phases(60, "mlm+nsp")
    assert (a.nsp, b.nsp) == (False, True)
    assert {p.objective for p in cpu_hour_phases(60, "electra")} == {"electra"}
    with pytest.raises(ValueError, match="positive"):
        cpu_hour_phases(0)
    s1, s2 = cpu_hour_phases(60, schedule="single")
    assert (s1.lr, s2.lr, s1.minutes, s2.minutes) == (1e-3, 1e-3, p1.minutes, p2.minutes)  # one peak


def test_the_measured_rate_is_the_fastest_step():
    from bertkit.training.recipes import rate_from_step_times

    # four steps of 0.3 s, two of them slowed tenfold by another process on the CPU
    assert rate_from_step_times([3.1, 0.3, 2.9, 0.31]) == pytest.approx(200.0)
    with pytest.raises(ValueError, match="no timed steps"):
        rate_from_step_times([])


def test_recipe_schedule_needs_a_recipe():
    from bertkit.training.mlm import PretrainingArguments

    with pytest.raises(ValueError, match="recipe_schedule=single schedules a recipe's phases; give recipe$"):
        PretrainingArguments(output="o", recipe_schedule="single")
    with pytest.raises(ValueError, match="recipe_schedule"):
        PretrainingArguments(output="o", recipe="cpu-hour", recipe_schedule="cosine")


def test_recipe_masks_its_own_rate_unless_one_is_given():
    """The recipe's masked-LM objectives mask RECIPE_MASK_RATE when --mask-rate is not given; a rate
    given is kept (the plain command's 0.15 too), and ELECTRA's generator keeps the plain default."""
    from bertkit.training.mlm import MASK_RATE, PretrainingArguments, masked_fraction

    plain = PretrainingArguments(output="o")
    assert masked_fraction(plain) == MASK_RATE == 0.15 and RECIPE_MASK_RATE == 0.3
    assert recipe_mask_rate(plain) == RECIPE_MASK_RATE
    assert recipe_mask_rate(PretrainingArguments(output="o", objective="mlm+nsp")) == RECIPE_MASK_RATE
    assert recipe_mask_rate(PretrainingArguments(output="o", mask_prob=0.2)) == 0.2
    assert recipe_mask_rate(PretrainingArguments(output="o", mask_prob=MASK_RATE)) == MASK_RATE
    assert recipe_mask_rate(PretrainingArguments(output="o", objective="electra")) == MASK_RATE


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("corpus")
    f = d / "text.txt"
    lines = [l for l in asset_path("austen").read_text(encoding="utf-8").splitlines() if l.strip()][:600]
    # a blank line every 10 lines: documents, so that some are held out for evaluation
    f.write_text("".join(l + "\n" + ("\n" if k % 10 == 9 else "") for k, l in enumerate(lines)), encoding="utf-8")
    return str(f)


def _cmd(corpus: str, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bertkit",
        "pretrain",
        "--recipe",
        "cpu-hour",
        "--corpus",
        corpus,
        "--vocab",
        str(asset_path("vocab-uncased")),
        "--config",
        "tiny",
        "--max-minutes",
        "0.5",
        "--eval-instances",
        "16",
        "--threads",
        "1",
        "--seed",
        "1",
        "--log-every",
        "1",
        "--no-progress",
        "--output",
        str(out),
        *extra,
    ]


@pytest.mark.slow
def test_kill_in_phase2_resumes_in_phase2(tmp_path, corpus):
    import torch
    import transformers

    from bertkit.modeling import BertForMaskedLM

    env = {**os.environ, "BERTKIT_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(_cmd(corpus, out), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.time() + 600
    while not list((out / "phase2" / "checkpoints").glob("step-*")):
        assert proc.poll() is None, f"the run ended before a phase-2 checkpoint: {log.read_text()[-2000:]}"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    state = json.loads((out / "recipe.json").read_text())
    assert list(state["done"]) == ["phase1"]  # killed in phase 2
    assert not (out / "model.safetensors").exists()
    phase1_metrics = (out / "phase1" / "metrics.jsonl").read_bytes()
    p1, p2 = state["phases"]
    assert (p1["seq_len"], p2["seq_len"], p1["nsp"], p2["objective"]) == (32, 128, False, "mlm")
    assert state["mask_prob"] == RECIPE_MASK_RATE  # no --mask-rate: the recipe's own
    marker = json.loads((out / "phase1" / ".bertkit-output.json").read_text())
    assert marker["run"]["objective"]["mask_prob"] == RECIPE_MASK_RATE  # what phase 1 trained with
    assert marker["run"]["model"]["hidden_dropout_prob"] == 0.0  # the recipe trains without dropout

    again = subprocess.run(_cmd(corpus, out), env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert again.returncode != 0 and "--resume" in again.stderr  # a started run is never restarted silently

    r = subprocess.run(_cmd(corpus, out, "--resume"), env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "recipe cpu-hour: phase1" not in r.stderr  # no new plan, no phase 1
    assert "resumed from" in r.stderr and str(out / "phase2" / "checkpoints") in r.stderr
    assert (out / "phase1" / "metrics.jsonl").read_bytes() == phase1_metrics  # phase 1 untouched
    state = json.loads((out / "recipe.json").read_text())
    assert list(state["done"]) == ["phase1", "phase2"]
    assert sum(state["done"].values()) <= 0.5 + 0.3  # the budget holds (phase 2 stops on time)
    rows = [json.loads(l) for l in (out / "phase2" / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in rows if "eval_mlm_accuracy" in x]
    assert evals and "eval_nsp_accuracy" not in evals[-1]  # phase 2 is MLM alone at seq 128

    # and saves the preset's rates, which fine-tuning then trains with
    from bertkit.modeling import BertConfig

    saved = json.loads((out / "config.json").read_text())
    preset = BertConfig.from_preset("tiny")
    assert saved["hidden_dropout_prob"] == preset.hidden_dropout_prob > 0
    assert saved["attention_probs_dropout_prob"] == preset.attention_probs_dropout_prob > 0

    tok = transformers.BertTokenizerFast(str(out / "vocab.txt"))
    enc = tok(["the [MASK] of the house"], return_tensors="pt")
    with torch.no_grad():
        a = BertForMaskedLM.from_pretrained(out).eval()(**enc).logits
        b = transformers.BertForMaskedLM.from_pretrained(out).eval()(**enc).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_electra_recipe_leaves_discriminator_and_generator(tmp_path, corpus):
    import torch
    import transformers

    env = {**os.environ, "BERTKIT_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    cmd = _cmd(corpus, out, "--objective", "electra", "--generator-size", "0.5")  # tiny: 2 heads of 64
    cmd[cmd.index("--max-minutes") + 1] = "0.25"
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    state = json.loads((out / "recipe.json").read_text())
    assert [p["objective"] for p in state["phases"]] == ["electra", "electra"]
    rows = [json.loads(l) for l in (out / "phase2" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval_disc_auc" in x or "eval_discriminator_auc" in x for x in rows), rows[-1]
    tok = transformers.BertTokenizerFast(str(out / "vocab.txt"))
    enc = tok(["the [MASK] of the house"], return_tensors="pt")
    with torch.no_grad():
        d = transformers.ElectraForPreTraining.from_pretrained(out).eval()(**enc).logits
        g = transformers.ElectraForMaskedLM.from_pretrained(out / "generator").eval()(**enc).logits
    assert d.shape == enc["input_ids"].shape and g.shape[-1] == tok.vocab_size


@pytest.mark.slow
def test_single_schedule_spans_both_phases(tmp_path, corpus):
    """Phase 1 decays from the peak towards 0 at the end of the whole budget and stops above it;
    phase 2, after its short warmup, follows the same line from the minutes phase 1 used to 0."""
    env = {**os.environ, "BERTKIT_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    cmd = _cmd(corpus, out, "--recipe-schedule", "single")
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    state = json.loads((out / "recipe.json").read_text())
    assert state["schedule"] == "single" and [p["lr"] for p in state["phases"]] == [1e-3, 1e-3]
    total = 60 * state["max_minutes"]

    def lr_rows(phase: str) -> list[dict]:
        rows = [json.loads(l) for l in (out / phase / "metrics.jsonl").read_text().splitlines() if l.strip()]
        return [x for x in rows if "lr" in x]

    one, two = lr_rows("phase1"), lr_rows("phase2")
    used = 60 * state["done"]["phase1"]
    p1, p2 = state["phases"]
    warm1 = min(p1["warmup_steps"], max(1, p1["max_steps"] // 10))  # the recipe caps each warmup at a tenth

    def follows_the_line(rows: list[dict], start: float) -> None:
        # The scheduler sets a step's lr after the step before it, from the clock read at that
        # step's top: between the training time two rows back and the row's own (a slow step on a
        # busy machine spans seconds).
        for before, x in zip(rows, rows[2:]):
            line = [1e-3 * (1 - (start + t) / total) for t in (x["train_seconds"], before["train_seconds"])]
            assert line[0] - 1e-5 <= x["lr"] <= line[1] + 1e-5, (x, line)

    follows_the_line(one[warm1:], 0.0)
    assert one[-1]["lr"] > 1e-3 * (1 - used / total) - 5e-5 > 2e-4  # phase 1 stops above 0
    warm2 = min(p2["warmup_steps"], max(1, p2["max_steps"] // 10))
    # A fresh optimizer warms up again, up to the line: its first step at 1/warm2 of the peak at most.
    assert two[0]["lr"] == pytest.approx(1e-3 * min(1 / warm2, 1 - used / total), abs=1e-6)
    assert all(x["lr"] <= 1e-3 * (1 - used / total) + 5e-5 for x in two)
    follows_the_line(two[warm2:], used)
    assert used + two[-1]["train_seconds"] >= total  # phase 2 runs to the budget's end, where the line is 0


def test_recipe_refuses_settings_it_chooses(tmp_path, corpus):
    r = subprocess.run(
        _cmd(corpus, tmp_path / "o", "--seq-len", "64"), cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert r.returncode != 0 and "--seq-len" in r.stderr and "cpu-hour" in r.stderr
    assert not (tmp_path / "o").exists()
