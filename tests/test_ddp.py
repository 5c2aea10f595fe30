"""DistributedDataParallel under torchrun with 2 CPU processes (gloo).

After a few optimizer steps the parameters are identical on both ranks and match a single-process
run over the same global batch (2 x 4 sequences vs 1 x 8), within float tolerance. Dropout is off
and precision is fp32 so that the only differences are summation order.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from bertkit.assets import asset_path

ROOT = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent("""
    import os, sys, torch
    from bertkit.cli import build_parser
    from bertkit.training import Trainer, TrainingConfig
    from bertkit.training.pretraining import build_pretraining, mlm_nsp_loss

    argv, dump = sys.argv[1:-1], sys.argv[-1]
    args = build_parser(only="pretrain").parse_args(["pretrain", *argv])
    torch.set_num_threads(1)
    parts = build_pretraining(args)
    cfg = TrainingConfig(output_dir=args.output, max_steps=args.max_steps, batch_size=args.batch_size,
                         lr=args.lr, warmup_steps=args.warmup_steps, precision=args.precision,
                         seed=args.seed, progress=False, plot=False, save_every=args.save_every or None,
                         resume=args.resume, max_time_minutes=args.max_minutes)
    trainer = Trainer(parts["model"], cfg, parts["train_dataset"], collate_fn=parts["collate"],
                      loss_fn=mlm_nsp_loss, tokenizer=parts["tokenizer"])
    trainer.train()
    rank = int(os.environ.get("RANK", "0"))
    torch.save({k: v.detach().clone() for k, v in trainer.raw_model.state_dict().items()},
               f"{dump}/rank{rank}_ws{trainer.world_size}.pt")
    with open(f"{dump}/rank{rank}_ws{trainer.world_size}.step", "w") as f:
        f.write(str(trainer.step))
    if trainer.distributed:
        import torch.distributed as dist
        dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp")
    corpus = d / "text.txt"
    corpus.write_text("\n".join(asset_path("austen").read_text(encoding="utf-8").splitlines()[:300]) + "\n\n"
                      + "\n".join(asset_path("wiki").read_text(encoding="utf-8").splitlines()[:100]) + "\n")
    worker = d / "worker.py"
    worker.write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", BERTKIT_CACHE=str(d / "cache"))
    # Prepare the shards once so that both runs read the very same data.
    subprocess.run([sys.executable, "-m", "bertkit", "prepare-data", "--corpus", str(corpus), "--vocab",
                    str(asset_path("vocab-uncased")), "--output", str(d / "data"), "--no-progress"],
                   env=env, cwd=ROOT, check=True, capture_output=True)
    return d, worker, env


def _args(d: Path, out: str, batch: int) -> list[str]:
    return ["--data", str(d / "data"), "--vocab", str(asset_path("vocab-uncased")), "--config", "tiny",
            "--seq-len", "32", "--batch-size", str(batch), "--max-steps", "4", "--lr", "1e-3",
            "--warmup-steps", "0", "--dropout", "0.0", "--precision", "fp32", "--seed", "3",
            "--output", str(d / out)]


def test_two_process_gloo_matches_single_process(setup):
    d, worker, env = setup
    dump = d / "dump"
    dump.mkdir()
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
         "--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(worker),
         *_args(d, "ddp", 4), "--save-every", "2", str(dump)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = subprocess.run([sys.executable, str(worker), *_args(d, "single", 8), str(dump)],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]

    r0 = torch.load(dump / "rank0_ws2.pt")
    r1 = torch.load(dump / "rank1_ws2.pt")
    one = torch.load(dump / "rank0_ws1.pt")
    init_moved = 0
    for name, p0 in r0.items():
        assert torch.equal(p0, r1[name]), f"{name} differs between ranks"
        torch.testing.assert_close(p0, one[name], atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    # Only rank 0 logged and saved; 4 steps were logged once each.
    rows = [json.loads(l) for l in (d / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]
    assert (d / "ddp" / "checkpoints" / "step-0000004" / "rng_rank1.pt").is_file()
    assert (d / "ddp" / "model.safetensors").is_file()
    # Logged losses are averaged over ranks: the same curve as one process with the global batch
    # (NSP: equal-sized per-rank means; MLM: token-weighted, so only approximately the plain mean).
    single_rows = [json.loads(l) for l in (d / "single" / "metrics.jsonl").read_text().splitlines()]
    assert [r["nsp_loss"] for r in rows if "loss" in r] == pytest.approx(
        [r["nsp_loss"] for r in single_rows if "loss" in r], rel=1e-4)
    assert [r["mlm_loss"] for r in rows if "loss" in r] == pytest.approx(
        [r["mlm_loss"] for r in single_rows if "loss" in r], rel=2e-2)


def _torchrun(worker: Path, args: list[str], dump: Path, env: dict) -> subprocess.CompletedProcess:
    dump.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
         "--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(worker), *args, str(dump)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ddp_resume_matches_uninterrupted_run(setup):
    """Resume under DDP from the step-2 checkpoint of a 4-step run gives that run's step-4 weights."""
    d, worker, env = setup
    full = _torchrun(worker, [*_args(d, "ddp-full", 4), "--save-every", "2"], d / "dump-full", env)
    assert full.returncode == 0, full.stderr[-3000:]
    # Keep only what a run killed between steps 2 and 4 would have left: the step-2 checkpoint.
    resumed = d / "ddp-resume"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copytree(d / "ddp-full" / "checkpoints" / "step-0000002", resumed / "checkpoints" / "step-0000002")
    second = _torchrun(worker, [*_args(d, "ddp-resume", 4), "--save-every", "2", "--resume"],
                       d / "dump-second", env)
    assert second.returncode == 0, second.stderr[-3000:]
    for rank in (0, 1):
        assert (d / "dump-second" / f"rank{rank}_ws2.step").read_text() == "4"
        a = torch.load(d / "dump-full" / f"rank{rank}_ws2.pt")
        b = torch.load(d / "dump-second" / f"rank{rank}_ws2.pt")
        for name in a:
            torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_ddp_time_limit_stops_all_ranks_at_the_same_step(setup):
    """--max-minutes is decided jointly; a rank that stopped alone would leave the other hanging."""
    d, worker, env = setup
    args = _args(d, "ddp-time", 4)
    args[args.index("--max-steps") + 1] = "100000"
    run = _torchrun(worker, [*args, "--max-minutes", "0.05"], d / "dump-time", env)
    assert run.returncode == 0, run.stderr[-3000:]
    steps = [(d / "dump-time" / f"rank{r}_ws2.step").read_text() for r in (0, 1)]
    assert steps[0] == steps[1] and 0 < int(steps[0]) < 100000
    assert "max_time_minutes=0.05 reached" in run.stderr
