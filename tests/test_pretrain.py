"""`bertkit pretrain` end to end on real text, run as a subprocess.

* SIGKILL after step 20, then --resume with the same arguments: the step-40 loss equals that of
  an uninterrupted 40-step run.
* The output folder loads in transformers' BertForPreTraining and BertForMaskedLM, which give the
  same logits as bertkit.
* Bad input: a vocabulary whose size does not match the model names both numbers.
* ``--architecture modernbert`` pretrains a ModernBERT whose folder transformers loads with the
  same logits; ``--model`` continues it as a ModernBERT; a folder named as the other family, and
  NSP on a ModernBERT, are refused in one line.
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
import torch

from bertkit.assets import asset_path

ROOT = Path(__file__).resolve().parents[1]


def _rows(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    d = tmp_path_factory.mktemp("corpus")
    austen = d / "austen.txt"
    austen.write_text("\n".join(asset_path("austen").read_text(encoding="utf-8").splitlines()[:400]) + "\n")
    wiki = d / "wiki.txt"
    wiki.write_text("\n".join(asset_path("wiki").read_text(encoding="utf-8").splitlines()[:200]) + "\n")
    bbc = d / "bbc.jsonl"
    bbc.write_text("".join(asset_path("bbcnews-train").read_text(encoding="utf-8").splitlines(True)[:30]))
    return [str(austen), str(wiki), str(bbc)]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    e = dict(os.environ)
    e["BERTKIT_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    e["OMP_NUM_THREADS"] = "1"
    return e


def _cmd(corpus: list[str], out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bertkit",
        "pretrain",
        "--corpus",
        *corpus,
        "--vocab",
        str(asset_path("vocab-uncased")),
        "--config",
        "tiny",
        "--seq-len",
        "32",
        "--batch-size",
        "8",
        "--max-steps",
        "40",
        "--lr",
        "5e-4",
        "--warmup-steps",
        "5",
        "--save-every",
        "20",
        "--eval-every",
        "0",
        "--eval-instances",
        "32",
        "--seed",
        "7",
        "--threads",
        "1",
        "--output",
        str(out),
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, corpus, env) -> Path:
    out = tmp_path_factory.mktemp("full") / "out"
    r = subprocess.run(_cmd(corpus, out), env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


@pytest.mark.slow
def test_sigkill_then_resume_gives_same_step40_loss(tmp_path, corpus, env, full_run):
    out = tmp_path / "out"
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(_cmd(corpus, out), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    ckpt = out / "checkpoints" / "step-0000020"
    deadline = time.time() + 300
    while not ckpt.exists():
        assert proc.poll() is None, f"the run ended before its step-20 checkpoint: {log.read_text()[-2000:]}"
        assert time.time() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = max(r["step"] for r in _rows(out))
    assert 20 <= killed_at < 40, killed_at  # really interrupted before the end
    assert not (out / "model.safetensors").exists()

    r = subprocess.run(_cmd(corpus, out, "--resume"), env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resumed from" in r.stderr and "step-0000020" in r.stderr
    resumed = [x for x in _rows(out) if "loss" in x]
    full = [x for x in _rows(full_run) if "loss" in x]
    assert [x["step"] for x in resumed] == list(range(1, 41))  # rows after step 20 were replayed once
    assert resumed[-1]["step"] == full[-1]["step"] == 40
    for key in ("loss", "mlm_loss", "nsp_loss", "lr"):
        assert resumed[-1][key] == full[-1][key], key
    assert [x["loss"] for x in resumed] == [x["loss"] for x in full]
    assert {"step", "loss", "mlm_loss", "nsp_loss", "lr", "tokens_per_sec"} <= set(full[-1])
    evals = [x for x in _rows(full_run) if "eval_mlm_accuracy" in x]
    assert evals and {"eval_nsp_accuracy", "eval_perplexity"} <= set(evals[-1])
    assert (full_run / "metrics.png").is_file()


def test_output_loads_in_transformers(full_run):
    import transformers

    from bertkit.modeling import BertForMaskedLM, BertForPreTraining

    assert {"config.json", "model.safetensors", "vocab.txt"} <= {p.name for p in full_run.iterdir()}
    tok = transformers.BertTokenizerFast(str(full_run / "vocab.txt"))
    enc = tok(["the house of the [MASK] was old .", "she [MASK] a letter ."], padding=True, return_tensors="pt")
    ours = BertForPreTraining.from_pretrained(full_run).eval()
    ref = transformers.BertForPreTraining.from_pretrained(full_run).eval()
    real = enc["attention_mask"].bool()  # outputs at padding positions are meaningless
    with torch.no_grad():
        a, b = ours(**enc), ref(**enc)
    torch.testing.assert_close(a.prediction_logits[real], b.prediction_logits[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.seq_relationship_logits, b.seq_relationship_logits, atol=1e-4, rtol=1e-4)
    ours_mlm = BertForMaskedLM.from_pretrained(full_run).eval()
    ref_mlm = transformers.BertForMaskedLM.from_pretrained(full_run).eval()
    with torch.no_grad():
        torch.testing.assert_close(ours_mlm(**enc).logits[real], ref_mlm(**enc).logits[real], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ref_mlm(**enc).logits[real], b.prediction_logits[real], atol=1e-4, rtol=1e-4)
    # Training moved the weights away from the initialisation (the loss went down).
    rows = [r for r in _rows(full_run) if "loss" in r]
    assert sum(r["mlm_loss"] for r in rows[-5:]) < sum(r["mlm_loss"] for r in rows[:5])


def test_vocab_size_mismatch_names_both_numbers(tmp_path, corpus, env, full_run):
    cmd = _cmd(corpus, tmp_path / "o")
    i = cmd.index("--vocab")
    cmd[i + 1] = str(asset_path("vocab-chinese"))
    i = cmd.index("--config")  # the model folder has its size
    del cmd[i : i + 2]
    cmd += ["--model", str(full_run)]
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1
    assert "21128" in r.stderr and "30522" in r.stderr, r.stderr[-1000:]


@pytest.mark.slow
def test_no_nsp_whole_word_masking_run(tmp_path, corpus, env):
    out = tmp_path / "o"
    cmd = _cmd(corpus, out, "--no-nsp", "--whole-word-masking", "--mask-prob", "0.2")
    cmd[cmd.index("--max-steps") + 1] = "3"
    cmd[cmd.index("--save-every") + 1] = "0"
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [x for x in _rows(out) if "loss" in x]
    assert len(rows) == 3 and all("mlm_loss" in x and "nsp_loss" not in x for x in rows)
    assert rows[0]["loss"] == pytest.approx(rows[0]["mlm_loss"], rel=1e-5)
    evals = [x for x in _rows(out) if "eval_mlm_accuracy" in x]
    assert evals and "eval_nsp_accuracy" not in evals[-1]


@pytest.fixture(scope="module")
def modernbert_run(tmp_path_factory, corpus, env) -> Path:
    out = tmp_path_factory.mktemp("modernbert") / "out"
    cmd = _cmd(corpus, out, "--architecture", "modernbert", "--objective", "mlm")
    cmd[cmd.index("--max-steps") + 1] = "20"
    cmd[cmd.index("--save-every") + 1] = "0"
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_modernbert_pretraining_output_loads_in_transformers(modernbert_run):
    import transformers

    from bertkit.modeling.modernbert import ModernBertForMaskedLM

    cfg = json.loads((modernbert_run / "config.json").read_text())
    assert cfg["model_type"] == "modernbert" and cfg["architectures"] == ["ModernBertForMaskedLM"]
    tok = transformers.BertTokenizerFast(str(modernbert_run / "vocab.txt"))
    assert (cfg["pad_token_id"], cfg["cls_token_id"], cfg["sep_token_id"]) == (
        tok.pad_token_id,
        tok.cls_token_id,
        tok.sep_token_id,
    )
    enc = tok(["the house of the [MASK] was old .", "she [MASK] a letter ."], padding=True, return_tensors="pt")
    enc.pop("token_type_ids")
    ours = ModernBertForMaskedLM.from_pretrained(modernbert_run).eval()
    ref = transformers.ModernBertForMaskedLM.from_pretrained(modernbert_run, attn_implementation="eager").eval()
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        torch.testing.assert_close(ours(**enc).logits[real], ref(**enc).logits[real], atol=1e-4, rtol=1e-4)
    rows = [r for r in _rows(modernbert_run) if "loss" in r]
    assert len(rows) == 20 and "nsp_loss" not in rows[-1]
    assert sum(r["mlm_loss"] for r in rows[-5:]) < sum(r["mlm_loss"] for r in rows[:5])


def test_modernbert_continues_as_its_own_family(tmp_path, corpus, env, modernbert_run, full_run):
    base = _cmd(corpus, tmp_path / "o", "--objective", "mlm")
    i = base.index("--vocab")
    del base[i : i + 2]
    i = base.index("--config")
    del base[i : i + 2]
    base[base.index("--max-steps") + 1] = "3"
    base[base.index("--save-every") + 1] = "0"
    r = subprocess.run([*base, "--model", str(modernbert_run)], env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "o" / "config.json").read_text())["model_type"] == "modernbert"
    # Bad input, one line each: a checkpoint of one family named as another, and NSP on a ModernBERT.
    cmd = [*base, "--model", str(full_run), "--architecture", "modernbert", "--output", str(tmp_path / "p")]
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and "'bert' model" in r.stderr and str(full_run) in r.stderr, r.stderr[-1000:]
    cmd = _cmd(corpus, tmp_path / "q", "--architecture", "modernbert")
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and "no next-sentence head" in r.stderr, r.stderr[-1000:]
    assert not (tmp_path / "p").exists() and not (tmp_path / "q" / "model.safetensors").exists()
