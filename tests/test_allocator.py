"""Training commands run with glibc told to keep freed activation buffers (set by the command itself)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from bertkit.cli import GLIBC_KEEP_BUFFERS, allocator_environment

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
