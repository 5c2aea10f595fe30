"""Fault suite for outputs: nothing a user wrote is ever deleted or overwritten, writes are atomic
under a full disk, resume is exact and survives a damaged newest checkpoint.

The folder rule (see bertkit._folders): new or empty folder; refuse a non-empty folder that is
not the command's own earlier output; replace that only with --overwrite, and then only the
files the command wrote; --resume checks that the run matches. Every test hashes the user's
files before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_bad_input import TRAIN_ROWS, run, tiny_model, tree_hash  # noqa: F401 - fixtures

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
VOCAB = asset_path("vocab-uncased")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    text = asset_path("austen").read_text(encoding="utf-8")[:60_000]
    (d / "austen.txt").write_text(text, encoding="utf-8")
    return d / "austen.txt"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "data"
    assert (
        cli_main(
            ["prepare-data", "--corpus", str(corpus), "--vocab", str(VOCAB), "--output", str(out), "--no-progress"]
        )
        == 0
    )
    return out


def _pretrain(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "pretrain",
        "--data",
        str(data),
        "--vocab",
        str(VOCAB),
        "--config",
        "tiny",
        "--seq-len",
        "32",
        "--batch-size",
        "4",
        "--max-steps",
        "4",
        "--save-every",
        "2",
        "--keep-last",
        "2",
        "--threads",
        "1",
        "--eval-fraction",
        "0",
        "--precision",
        "fp32",
        "--no-progress",
        "--output",
        str(out),
        *extra,
    ]


@pytest.fixture(scope="module")
def run_a(tmp_path_factory, prepared) -> Path:
    """A finished 4-step pretraining run with checkpoints at steps 2 and 4."""
    out = tmp_path_factory.mktemp("run") / "a"
    assert cli_main(_pretrain(prepared, out)) == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-0000002", "step-0000004"]
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ------------------------------------------------------------------------------- prepare-data


def test_prepare_data_refuses_a_folder_holding_user_files(capsys, tmp_path, corpus):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")
    before = tree_hash(tmp_path)
    rc, _, err = run(capsys, "prepare-data", "--corpus", corpus, "--vocab", VOCAB, "--output", out, "--no-progress")
    assert rc == 1 and str(out) in err and "notes.txt" in err and "choose another --output" in err
    assert tree_hash(tmp_path) == before


def test_prepare_data_replaces_its_output_only_with_overwrite(capsys, tmp_path, corpus):
    out = tmp_path / "data"
    assert run(capsys, "prepare-data", "--corpus", corpus, "--vocab", VOCAB, "--output", out, "--no-progress")[0] == 0
    before = tree_hash(tmp_path)
    rc, _, err = run(capsys, "prepare-data", "--corpus", corpus, "--vocab", VOCAB, "--output", out, "--no-progress")
    assert rc == 1 and "--overwrite" in err and str(out) in err
    assert tree_hash(tmp_path) == before
    (out / "notes.txt").write_text("mine, not bertkit's\n")
    (out / "shard-00099.tokens.bin").unlink(missing_ok=True)
    rc, _, err = run(
        capsys,
        "prepare-data",
        "--corpus",
        corpus,
        "--vocab",
        VOCAB,
        "--output",
        out,
        "--no-progress",
        "--format",
        "bert",
        "--overwrite",
    )
    assert rc == 0, err
    assert (out / "notes.txt").read_text() == "mine, not bertkit's\n"
    assert json.loads((out / "meta.json").read_text())["layout"] == "bert"


def test_files_respect_the_umask(capsys, tmp_path, corpus):
    old = os.umask(0o027)
    try:
        rc, _, err = run(
            capsys, "prepare-data", "--corpus", corpus, "--vocab", VOCAB, "--output", tmp_path / "d", "--no-progress"
        )
    finally:
        os.umask(old)
    assert rc == 0, err
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o750
    for f in (tmp_path / "d").iterdir():
        assert f.stat().st_mode & 0o777 == 0o640, f


def test_saved_weights_respect_the_umask(tmp_path):
    """safetensors creates files 0600; a saved model must get the umask's mode like every other file."""
    from bertkit import BertConfig, BertModel

    model = BertModel(
        BertConfig(
            vocab_size=64,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=16,
        )
    )
    old = os.umask(0o022)
    try:
        model.save_pretrained(tmp_path / "m")
        model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    finally:
        os.umask(old)
    files = [f for d in ("m", "sharded") for f in (tmp_path / d).iterdir()]
    assert any(f.suffix == ".safetensors" for f in files)
    for f in files:
        assert f.stat().st_mode & 0o777 == 0o644, f


# ------------------------------------------------------------------------------- pretrain


def test_pretrain_refuses_another_run_without_resume_or_overwrite(capsys, tmp_path, prepared, run_a):
    out = _copy(run_a, tmp_path / "run")
    before = tree_hash(tmp_path)
    rc, _, err = run(capsys, *_pretrain(prepared, out))
    assert rc == 1 and str(out) in err and "--resume" in err and "--overwrite" in err
    assert tree_hash(tmp_path) == before


def test_pretrain_refuses_a_folder_of_user_files(capsys, tmp_path, prepared):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')  # named like ours, but not ours
    before = tree_hash(tmp_path)
    rc, _, err = run(capsys, *_pretrain(prepared, out))
    assert rc == 1 and str(out) in err and "not the output of `bertkit pretrain`" in err
    assert tree_hash(tmp_path) == before


@pytest.mark.parametrize(
    "extra,difference",
    [
        (("--seq-len", "64"), "objective.seq_len: was 32, now 64"),
        (("--no-nsp",), "objective.nsp: was true, now false"),
        (("--config", "mini"), "model.hidden_size: was 128, now 256"),
        (("--seed", "3"), "data.seed: was 42, now 3"),
    ],
)
def test_resume_of_a_different_run_says_what_differs(capsys, tmp_path, prepared, run_a, extra, difference):
    out = _copy(run_a, tmp_path / "run")
    before = tree_hash(tmp_path)
    argv = _pretrain(prepared, out, "--resume")
    rc, _, err = run(capsys, *argv, *extra)
    assert rc == 1 and difference in err and str(out) in err
    assert tree_hash(tmp_path) == before


def test_overwrite_replaces_only_the_runs_files(capsys, tmp_path, prepared, run_a):
    out = _copy(run_a, tmp_path / "run")
    (out / "notes.txt").write_text("keep me\n")
    (out / "checkpoints" / "step-0000004" / "model.safetensors").write_bytes(b"old run")
    rc, _, err = run(capsys, *_pretrain(prepared, out, "--overwrite", "--max-steps", "2"))
    assert rc == 0, err
    assert (out / "notes.txt").read_text() == "keep me\n"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-0000002"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().split("\n") if line]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]
    marker = json.loads((out / ".bertkit-output.json").read_text())
    assert "notes.txt" not in marker["files"] and "checkpoints" in marker["files"]


def test_truncated_newest_checkpoint_resumes_from_the_previous_one(capsys, tmp_path, prepared, run_a):
    out = _copy(run_a, tmp_path / "run")
    newest = out / "checkpoints" / "step-0000004" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    rc, _, err = run(capsys, *_pretrain(prepared, out, "--resume"))
    assert rc == 0, err
    assert "step-0000004 is damaged" in err and "falling back" in err
    assert "resumed from" in err and "step-0000002 (step 2)" in err
    # exact resume: the replayed steps 3-4 give the same weights as the uninterrupted run
    a, b = load_file(str(run_a / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().split("\n") if line]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]


def test_every_checkpoint_damaged_is_an_error_not_a_fresh_start(capsys, tmp_path, prepared, run_a):
    out = _copy(run_a, tmp_path / "run")
    for ckpt in (out / "checkpoints").iterdir():
        (ckpt / "trainer_state.pt").write_bytes(b"\x80\x04garbage")
    before = tree_hash(tmp_path)
    rc, _, err = run(capsys, *_pretrain(prepared, out, "--resume"))
    assert rc == 1 and "none of the 2 checkpoint(s)" in err
    assert tree_hash(tmp_path) == before


# ------------------------------------------------------------------------------- full disk


_LIMITED = """
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # Python ignores SIGXFSZ: writes fail with EFBIG
from bertkit.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _limited(limit: int, *argv: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1"
    )
    return subprocess.run(
        [sys.executable, "-c", _LIMITED, str(limit), *map(str, argv)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _temp_files(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.name.endswith((".tmp", ".old")) or ".tmp" in p.name]


def test_full_disk_during_prepare_data_leaves_nothing(tmp_path, corpus):
    out = tmp_path / "data"
    r = _limited(20_000, "prepare-data", "--corpus", corpus, "--vocab", VOCAB, "--output", out, "--no-progress")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "File too large" in r.stderr and str(out) in r.stderr
    assert not out.exists()  # a failed command leaves no (empty) output folder
    assert _temp_files(tmp_path) == []


def test_full_disk_during_a_checkpoint_leaves_no_partial_file(tmp_path, prepared):
    out = tmp_path / "run"
    r = _limited(1_000_000, *_pretrain(prepared, out))
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "File too large" in r.stderr
    assert str(out / "checkpoints" / "step-0000002") in r.stderr
    assert _temp_files(tmp_path) == []
    assert not list((out / "checkpoints").iterdir())  # no half-written checkpoint was published


# ------------------------------------------------------------------------------- finetune and file outputs


def _train_file(folder: Path) -> Path:
    f = folder / "train.jsonl"
    f.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in TRAIN_ROWS), encoding="utf-8")
    return f


def test_finetune_folder_rule(capsys, tmp_path, tiny_model):  # noqa: F811 - fixture
    train = _train_file(tmp_path)
    argv = [
        "finetune",
        "--task",
        "text-classification",
        "--model",
        tiny_model,
        "--train",
        train,
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--max-length",
        "32",
        "--no-progress",
        "--output",
    ]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("{}\n")
    before = tree_hash(tmp_path)
    rc, _, err = run(capsys, *argv, mine)
    assert rc == 1 and str(mine) in err and "config.json" in err
    assert tree_hash(tmp_path) == before

    out = tmp_path / "out"
    assert run(capsys, *argv, out)[0] == 0
    before = tree_hash(tmp_path)
    rc, _, err = run(capsys, *argv, out)
    assert rc == 1 and "--overwrite" in err
    assert tree_hash(tmp_path) == before
    (out / "README.md").write_text("my notes on this model\n")
    rc, _, err = run(capsys, *argv, out, "--overwrite")
    assert rc == 0, err
    assert (out / "README.md").read_text() == "my notes on this model\n"
    assert json.loads((out / "eval_results.json").read_text())["train_examples"] == len(TRAIN_ROWS)


def test_failed_finetune_leaves_no_output_folder(capsys, tmp_path, tiny_model):  # noqa: F811 - fixture
    train = _train_file(tmp_path)
    out = tmp_path / "out"
    rc, _, err = run(
        capsys,
        "finetune",
        "--task",
        "text-classification",
        "--model",
        tiny_model,
        "--train",
        train,
        "--output",
        out,
        "--freeze",
        "bert,classifier",
        "--no-progress",
    )
    assert rc == 1 and "freezes every parameter" in err and not out.exists()


def test_claim_abandoned_after_a_failure_removes_the_new_folder(tmp_path):
    from bertkit._folders import claim_output_dir

    claim = claim_output_dir(tmp_path / "new" / "out", "pretrain")
    assert (tmp_path / "new" / "out").is_dir()
    claim.abandon()
    assert not (tmp_path / "new" / "out").exists()


def test_file_outputs_are_not_replaced_without_overwrite(capsys, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat and the dog sat on the log\n" * 20)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("my own vocabulary\n")
    before = tree_hash(tmp_path)
    rc, _, err = run(capsys, "train-vocab", "--corpus", corpus, "--vocab-size", "40", "--output", vocab, "--quiet")
    assert rc == 1 and str(vocab) in err and "--overwrite" in err
    assert tree_hash(tmp_path) == before
    rc, _, err = run(
        capsys, "train-vocab", "--corpus", corpus, "--vocab-size", "40", "--output", vocab, "--quiet", "--overwrite"
    )
    assert rc == 0, err
    assert "[PAD]" in vocab.read_text()


def test_predict_output_file_is_not_replaced(tmp_path):
    from bertkit.tasks import predict

    out = tmp_path / "preds.jsonl"
    out.write_text("earlier predictions\n")
    with pytest.raises(FileExistsError, match="preds.jsonl already exists; pass overwrite=True"):
        predict("no-model", "no-input", output=out)
    assert out.read_text() == "earlier predictions\n"


# ------------------------------------------------------------------------------- one writer at a time


def _wait_for(check, what: str, proc: subprocess.Popen, seconds: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"the first run ended (rc {proc.returncode}) before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {seconds:.0f} s")
        time.sleep(0.2)


def test_a_folder_a_live_run_writes_is_refused_and_freed_when_that_run_is_killed(capsys, tmp_path, prepared, run_a):
    out = _copy(run_a, tmp_path / "run")
    env = dict(
        os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1"
    )
    # A long run replaces the earlier one; it writes a checkpoint every 2 steps.
    first = subprocess.Popen(
        [sys.executable, "-m", "bertkit", *_pretrain(prepared, out, "--overwrite", "--max-steps", "100000")],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: (out / "checkpoints" / "step-0000006").is_dir(), "checkpoint at step 6", first)
        for mode in ("--overwrite", "--resume"):
            rc, _, err = run(capsys, *_pretrain(prepared, out, mode))
            assert rc == 1, err
            assert f"{out} is being written by `bertkit pretrain` (process {first.pid}" in err, err
            assert first.poll() is None  # untouched: it trains on
        assert (out / "checkpoints").is_dir() and (out / "metrics.jsonl").is_file()
    finally:
        first.kill()  # as a crash or `kill -9` would: no chance to let go of anything itself
        first.wait(timeout=60)
    assert (out / ".bertkit-output.lock").exists()  # left behind by the killed run, and free
    rc, _, err = run(capsys, *_pretrain(prepared, out, "--overwrite", "--max-steps", "2"))
    assert rc == 0, err
    assert not (out / ".bertkit-output.lock").exists()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().split("\n") if line]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]


def test_a_claim_left_by_a_failure_in_the_same_process_is_taken_over(tmp_path):
    from bertkit._folders import LOCK, claim_output_dir

    out = tmp_path / "out"
    claim_output_dir(out, "finetune")  # never finished nor abandoned: a notebook cell that raised
    (out / "config.json").write_text("{}\n")
    claim = claim_output_dir(out, "finetune", overwrite=True, owned=("config.json",))
    assert not (out / "config.json").exists()
    claim.finish()
    assert not (out / LOCK).exists()
    assert json.loads((out / ".bertkit-output.json").read_text())["files"] == []
