"""`torchrun --nproc_per_node 2 -m bertkit pretrain ...`: the real command under DDP, 2 CPU processes (gloo).

The command is launched exactly as a user launches it. After a few optimizer steps the saved model
matches a single-process run of the same command over the same global batch (2 x 4 sequences vs
1 x 8), within float tolerance; both ranks took part (rank 1's RNG state is in every checkpoint);
only rank 0 logged and saved. Dropout is off and precision is fp32 so that the only differences
are summation order.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit._folders import MARKER
from bertkit.assets import asset_path

pytestmark = pytest.mark.slow  # multi-process runs: `make test-fast` skips them

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun() -> list[str]:
    """The `torchrun` next to this Python (the same launcher as `python -m torch.distributed.run`)."""
    exe = Path(sys.executable).parent / "torchrun"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp")
    corpus = d / "text.txt"
    corpus.write_text(
        "\n".join(asset_path("austen").read_text(encoding="utf-8").splitlines()[:300])
        + "\n\n"
        + "\n".join(asset_path("wiki").read_text(encoding="utf-8").splitlines()[:100])
        + "\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", BERTKIT_CACHE=str(d / "cache"))
    # Prepare the shards once so that every run reads the very same data.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bertkit",
            "prepare-data",
            "--corpus",
            str(corpus),
            "--vocab",
            str(asset_path("vocab-uncased")),
            "--output",
            str(d / "data"),
            "--no-progress",
        ],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return d, env


def _common(d: Path, out: str) -> list[str]:
    """The flags every run here shares: the prepared data, the tiny model, one thread per rank."""
    return [
        "--data",
        str(d / "data"),
        "--vocab",
        str(asset_path("vocab-uncased")),
        "--config",
        "tiny",
        "--eval-instances",
        "16",
        "--threads",
        "1",
        "--no-progress",
        "--output",
        str(d / out),
    ]


def _args(d: Path, out: str, batch: int) -> list[str]:
    return [
        *_common(d, out),
        "--seq-len",
        "32",
        "--batch-size",
        str(batch),
        "--max-steps",
        "4",
        "--lr",
        "1e-3",
        "--warmup-steps",
        "0",
        "--dropout",
        "0.0",
        "--precision",
        "fp32",
        "--seed",
        "3",
    ]


def _launch(program: list[str], env: dict, ranks: int = 2) -> subprocess.CompletedProcess:
    """``program`` (``-m module ...`` or ``script.py ...``) under torchrun with ``ranks`` processes, or
    in plain Python for one."""
    # These tests are of CPU DDP over gloo: on a machine with GPUs the ranks would otherwise take them.
    env = {**env, "CUDA_VISIBLE_DEVICES": ""}
    launcher = (
        [
            *_torchrun(),
            "--nnodes=1",
            f"--nproc_per_node={ranks}",
            "--master_addr=127.0.0.1",
            f"--master_port={_free_port()}",
        ]
        if ranks > 1
        else [sys.executable]
    )
    return subprocess.run([*launcher, *program], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _pretrain(args: list[str], env: dict, ranks: int = 2) -> subprocess.CompletedProcess:
    return _launch(["-m", "bertkit", "pretrain", *args], env, ranks)


def _metrics(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_torchrun_pretrain_matches_single_process(setup):
    d, env = setup
    ddp = _pretrain([*_args(d, "ddp", 4), "--save-every", "2"], env)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = _pretrain(_args(d, "single", 8), env, ranks=1)
    assert single.returncode == 0, single.stderr[-3000:]

    assert "2 process(es)" in ddp.stderr and "1 process(es)" in single.stderr
    two, one = load_file(d / "ddp" / "model.safetensors"), load_file(d / "single" / "model.safetensors")
    assert two.keys() == one.keys()
    for name in two:
        torch.testing.assert_close(two[name], one[name], atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    # Both ranks took part: rank 1's RNG state is gathered into each checkpoint by rank 0.
    for step in ("step-0000002", "step-0000004"):
        assert {p.name for p in (d / "ddp" / "checkpoints" / step).glob("rng_rank*.pt")} == {
            "rng_rank0.pt",
            "rng_rank1.pt",
        }
    # Only rank 0 logged (each step once) and printed the summary; the folder is the command's output.
    rows = _metrics(d / "ddp")
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]
    assert json.loads(ddp.stdout.strip().splitlines()[-1])["step"] == 4 and len(ddp.stdout.strip().splitlines()) == 1
    assert json.loads((d / "ddp" / MARKER).read_text())["command"] == "pretrain"
    assert (d / "ddp" / "metrics.png").is_file()
    # Logged losses are averaged over ranks: the same curve as one process with the global batch
    # (NSP: equal-sized per-rank means; MLM: token-weighted, so only approximately the plain mean).
    single_rows = _metrics(d / "single")
    assert [r["nsp_loss"] for r in rows if "loss" in r] == pytest.approx(
        [r["nsp_loss"] for r in single_rows if "loss" in r], rel=1e-4
    )
    assert [r["mlm_loss"] for r in rows if "loss" in r] == pytest.approx(
        [r["mlm_loss"] for r in single_rows if "loss" in r], rel=2e-2
    )


def test_torchrun_resume_matches_uninterrupted_run(setup):
    """--resume under torchrun from the step-2 checkpoint of a 4-step run gives that run's final model."""
    d, env = setup
    full = _pretrain([*_args(d, "ddp-full", 4), "--save-every", "2"], env)
    assert full.returncode == 0, full.stderr[-3000:]
    # Keep only what a run killed between steps 2 and 4 would have left: its marker and step-2 checkpoint.
    resumed = d / "ddp-resume"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(d / "ddp-full" / MARKER, resumed / MARKER)
    shutil.copytree(d / "ddp-full" / "checkpoints" / "step-0000002", resumed / "checkpoints" / "step-0000002")
    second = _pretrain([*_args(d, "ddp-resume", 4), "--save-every", "2", "--resume"], env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stderr and "(step 2)" in second.stderr
    a, b = load_file(d / "ddp-full" / "model.safetensors"), load_file(resumed / "model.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_torchrun_time_limit_stops_all_ranks_at_the_same_step(setup):
    """--max-minutes is decided jointly; a rank that stopped alone would leave the other hanging."""
    d, env = setup
    args = _args(d, "ddp-time", 4)
    args[args.index("--max-steps") + 1] = "100000"
    run = _pretrain([*args, "--max-minutes", "0.05"], env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "max_minutes=0.05 reached" in run.stderr
    steps = [r["step"] for r in _metrics(d / "ddp-time") if "loss" in r]
    assert 0 < steps[-1] < 100000 and json.loads(run.stdout.strip().splitlines()[-1])["step"] == steps[-1]


_TIME_SCHEDULE_SCRIPT = """
import sys, time
import torch
from torch import nn
from bertkit.training import Trainer, TrainingArguments

out = sys.argv[1]
torch.manual_seed(0)
model = nn.Linear(16, 1)
data = [(torch.randn(16), torch.randn(1)) for _ in range(512)]


def loss_fn(m, batch):
    x, y = batch
    return ((m(x) - y) ** 2).mean(), {}


cfg = TrainingArguments(
    output=out, batch_size=8, lr=1e-2, max_steps=10**6, max_minutes=0.04, schedule="time",
    warmup_steps=0, save_every=0, save_final=False, plot=False, progress=False, precision="fp32",
    threads=1, log_every=1000,
)
collate = lambda items: tuple(torch.stack(t) for t in zip(*items))
trainer = Trainer(model, cfg, data, collate_fn=collate, loss_fn=loss_fn)
if trainer.rank == 1:
    time.sleep(0.6)  # this rank's clock starts later than rank 0's
result = trainer.train()
torch.save({"step": result.step, "weights": model.state_dict()}, f"{out}/rank{trainer.rank}.pt")
"""


def test_torchrun_time_schedule_gives_every_rank_the_same_learning_rate(tmp_path):
    """With the learning rate decayed by training time, ranks whose clocks differ still take the
    same steps: one clock for all, so the replicas' weights stay equal to the last bit."""
    script = tmp_path / "train.py"
    script.write_text(_TIME_SCHEDULE_SCRIPT)
    run = _launch([str(script), str(tmp_path)], dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src")))
    assert run.returncode == 0, run.stderr[-3000:]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert r0["step"] == r1["step"] > 10
    for name, w in r0["weights"].items():
        assert torch.equal(w, r1["weights"][name]), f"{name} differs between the ranks"


def test_torchrun_runs_the_cpu_hour_recipe(setup):
    """`--recipe cpu-hour` under torchrun: rank 0 plans, both ranks train both phases in one
    process group, and OUTPUT ends as the final model, which transformers loads."""
    import transformers

    d, env = setup
    out = d / "ddp-recipe"
    args = ["--recipe", "cpu-hour", "--max-minutes", "0.2", *_common(d, out.name)]
    run = _pretrain(args, env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.count("recipe cpu-hour: phase1 (") == 1  # planned and announced once
    assert run.stderr.count("2 process(es)") == 2  # each phase's Trainer ran on both ranks
    state = json.loads((out / "recipe.json").read_text())
    assert list(state["done"]) == ["phase1", "phase2"]
    for phase in ("phase1", "phase2"):
        rows = [r for r in _metrics(out / phase) if "loss" in r]
        assert rows and rows[-1]["step"] > 0
    model = transformers.BertForMaskedLM.from_pretrained(out)
    assert model.config.num_hidden_layers > 0
    assert (out / "model.safetensors").read_bytes() == (out / "phase2" / "model.safetensors").read_bytes()

    again = _pretrain(args, env)  # a finished run is never restarted silently, on any rank
    assert again.returncode != 0 and "--resume" in again.stderr


_COUNT_WRAPPERS = """
import gc, sys, torch
from bertkit.cli import main
code = main(sys.argv[1:])
gc.disable()  # count what the command left alive, not what a collection would free now
alive = [o for o in gc.get_objects() if isinstance(o, torch.nn.parallel.DistributedDataParallel)]
up = "up" if torch.distributed.is_initialized() else "down"
print(f"rank exit {code}: {len(alive)} DDP wrapper(s) alive, group {up}", file=sys.stderr)
"""


def _finetune_args(d: Path, out: str) -> list[str]:
    return [
        "--task",
        "text-classification",
        "--model",
        str(asset_path("minilm")),
        "--train",
        str(asset_path("polarity-train")),
        "--max-train-samples",
        "32",
        "--batch-size",
        "8",
        "--max-length",
        "32",
        "--epochs",
        "1",
        "--threads",
        "1",
        "--no-progress",
        "--output",
        str(d / out),
    ]


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_a_torchrun_command_ends_its_group_and_keeps_no_ddp_wrapper(setup, command):
    """The wrapper holds the gloo group's pending work; freed at interpreter shutdown, it can abort a
    rank after a clean run. Every command's Trainer lets go of it and ends the group it started."""
    d, env = setup
    script = d / "count_wrappers.py"
    script.write_text(_COUNT_WRAPPERS)
    args = _args(d, "ddp-wrappers", 4) if command == "pretrain" else _finetune_args(d, "ddp-finetune")
    run = _launch([str(script), command, *args], env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.count("rank exit 0: 0 DDP wrapper(s) alive, group down") == 2, run.stderr[-3000:]


def test_a_rank_past_the_last_gpu_is_told_how_many_there_are(monkeypatch):
    """torchrun with more processes per node than GPUs: the rank without a GPU gets one line that says
    how many there are and what to do, not CUDA's invalid device ordinal from inside the first copy."""
    from bertkit.training import TrainingArguments
    from bertkit.training.trainer import training_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a machine with one GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert training_device(TrainingArguments()) == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match=r"LOCAL_RANK=1 has no GPU of its own: this machine has 1.*--device cpu"):
        training_device(TrainingArguments())
    assert training_device(TrainingArguments(device="cpu")) == torch.device("cpu")
