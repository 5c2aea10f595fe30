"""glibc told to keep freed activation buffers: training commands set it at start-up, inference in the
running process (bertkit._memory)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from bertkit._memory import GLIBC_KEEP_BUFFERS
from bertkit.cli import allocator_environment

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="the settings are glibc's"
)


@glibc
def test_training_commands_get_the_settings_and_users_keep_theirs():
    env = allocator_environment("pretrain", {"PATH": "/bin"})
    assert env is not None and all(env[k] == v for k, v in GLIBC_KEEP_BUFFERS.items())
    assert env["BERTKIT_ALLOCATOR"] == "set" and env["PATH"] == "/bin"
    assert allocator_environment("pretrain", env) is None  # once: the re-executed process runs as it is
    assert allocator_environment("tokenize", {}) is None  # not a training command
    assert allocator_environment("finetune", {"MALLOC_TRIM_THRESHOLD_": "0"}) is None  # the user's own choice
    assert allocator_environment("distill", {"BERTKIT_ALLOCATOR": "default"}) is None  # opted out


@glibc
def test_a_training_command_from_the_shell_runs_with_them():
    # The re-executed process reads its own environment: a tiny script run in its place shows it.
    code = (
        "import os, sys; sys.argv = ['bertkit', 'finetune', '--help']; import bertkit.cli as c; "
        "c.os.execve = lambda exe, argv, env: (print(env.get('MALLOC_TRIM_THRESHOLD_'), argv[1:4]), "
        "sys.exit(0)); c.main()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "BERTKIT_ALLOCATOR"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout.split("\n")[0] == "4294967296 ['-m', 'bertkit', 'finetune']", r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "bertkit", "finetune", "--help"], env=env, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0 and "--epochs" in r.stdout, r.stderr  # the real re-execution answers as before


# A child process: how much of a freed 64 MiB buffer stays resident, before and after a model is
# prepared for inference (argv "inference") or a Trainer trains one step (argv "training"). 64 MiB is
# over glibc's largest dynamic mmap threshold (32 MiB), so with its defaults the buffer is mmapped and
# handed back to the kernel the moment it is freed.
_KEPT_AFTER_FREE = """
import sys, tempfile, torch
import bertkit
from bertkit.assets import asset_path

def kept_mib():
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    before = rss()
    x = torch.empty(16 * 2**20).fill_(1.0)  # 64 MiB, every page touched
    del x
    return rss() - before

default = kept_mib()
if sys.argv[1] == "inference":
    bertkit.BertModel.from_pretrained(asset_path("minilm"), dtype="fp32")  # prepared for inference on the CPU
else:
    tok = bertkit.BertTokenizer.from_pretrained(asset_path("minilm"))
    config = bertkit.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=64, num_labels=2)
    enc = tok("a real sentence to train on", truncation=True, max_length=16)
    rows = [{**{k: list(v) for k, v in enc.items()}, "labels": i % 2} for i in range(4)]
    with tempfile.TemporaryDirectory() as out:
        args = bertkit.TrainingArguments(output_dir=out, max_steps=1, per_device_train_batch_size=4,
                                         save_strategy="no", report_to="none", disable_tqdm=True)
        bertkit.Trainer(model=bertkit.BertForSequenceClassification(config), args=args, train_dataset=rows).train()
print(round(default), round(kept_mib()))
"""


def _kept_after_free(what: str, **env_extra: str) -> tuple[int, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "BERTKIT_ALLOCATOR"}
    r = subprocess.run(
        [sys.executable, "-c", _KEPT_AFTER_FREE, what],
        env={**env, **env_extra},
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    before, after = r.stdout.split()[-2:]
    return int(before), int(after)


@glibc
@pytest.mark.parametrize("what", ["inference", "training"])
def test_inference_and_training_keep_freed_buffers_unless_the_user_says_otherwise(what):
    before, after = _kept_after_free(what)
    assert before < 16, f"glibc's defaults kept {before} MiB of a freed 64 MiB buffer"
    assert after >= 60, f"after {what} started, only {after} MiB of a freed 64 MiB buffer stayed resident"
    # opted out, or a setting of the user's own: glibc stays as it is
    assert _kept_after_free(what, BERTKIT_ALLOCATOR="default")[1] < 16
    assert _kept_after_free(what, MALLOC_TRIM_THRESHOLD_="131072")[1] < 16
