"""A message names a setting as its caller wrote it: the flag from a command, the keyword argument from Python.

The same mistake is made twice, once through `bertkit ...` (in-process, as the shell runs it) and once
through the Python API: the command's message names `--flags` with their values as typed, the API's
names the arguments (`name=value`) and holds no `--flag` at all. Each case is a real refusal of a real
command, and nothing is written by either.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_bad_input import TRAIN_ROWS, run, tiny_model  # noqa: F401 - fixtures

from bertkit.assets import asset_path

FLAG = re.compile(r"(?<![\w-])--[a-z]")


def _api_error(call) -> str:
    with pytest.raises((ValueError, OSError)) as e:
        call()
    message = str(e.value)
    assert not FLAG.search(message), message  # a Python caller is never told about a flag
    return message


def _train(tmp_path: Path) -> Path:
    f = tmp_path / "train.jsonl"
    f.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in TRAIN_ROWS), encoding="utf-8")
    return f


def test_contradicting_settings(capsys, tmp_path, tiny_model):  # noqa: F811 - fixture
    from bertkit.tasks import finetune

    train, out = _train(tmp_path), tmp_path / "out"
    argv = ["finetune", "--task", "text-classification", "--model", tiny_model, "--train", train, "--output", out]
    rc, _, err = run(capsys, *argv, "--resume", "--overwrite")
    assert rc == 1 and "--resume continues the run in --output and --overwrite replaces it" in err, err
    message = _api_error(lambda: finetune("text-classification", tiny_model, train, out, resume=True, overwrite=True))
    assert message == "resume continues the run in output and overwrite replaces it: give one of them"
    assert not out.exists()


def test_a_setting_given_without_the_one_it_needs(capsys, tmp_path, tiny_model):  # noqa: F811 - fixture
    from bertkit.explain import explain

    out = tmp_path / "x.json"
    rc, _, err = run(capsys, "explain", "--model", tiny_model, "a film", "--json", out, "--target", "positive")
    assert rc == 1 and "--target names what --attributions explain; give --attributions too" in err, err
    message = _api_error(lambda: explain(tiny_model, "a film", target="positive"))
    assert message == "target names what attributions explain; give attributions too"
    assert not out.exists()


def test_a_setting_the_run_would_ignore(capsys, tmp_path):
    from bertkit.sentence.embedder import EmbedderArguments

    minilm = str(asset_path("minilm"))
    train = tmp_path / "pairs.jsonl"
    train.write_text(json.dumps({"anchor": "a", "positive": "b"}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = ["train-embedder", "--model", minilm, "--train", train, "--output", out, "--mining-margin", "0.1"]
    rc, _, err = run(capsys, *argv)
    assert rc in (1, 2), err
    assert (
        "--mining-margin 0.1 is for mining; without --hard-negatives K nothing is mined: leave out --mining-margin"
        in err
    )
    message = _api_error(lambda: EmbedderArguments(model=minilm, train=str(train), output=str(out), mining_margin=0.1))
    assert message == (
        "mining_margin=0.1 is for mining; without hard_negatives=K nothing is mined: leave out mining_margin"
    )
    assert not out.exists()


def test_an_output_that_is_not_the_commands_to_write(capsys, tmp_path, tiny_model):  # noqa: F811 - fixture
    from bertkit.explain import explain

    user = tmp_path / "figures"
    user.mkdir()
    (user / "mine.png").write_bytes(b"a figure of the user's")
    rc, _, err = run(capsys, "explain", "--model", tiny_model, "a film", "--png", user)
    assert rc == 1 and f"--png {user} is not empty" in err and "choose another --png" in err, err
    message = _api_error(lambda: explain(tiny_model, "a film", png_dir=user))
    assert message.startswith(f"png_dir={user} is not empty") and "choose another png_dir" in message
    report = tmp_path / "report.html"
    report.write_text("the user's report", encoding="utf-8")
    rc, _, err = run(capsys, "explain", "--model", tiny_model, "a film", "--output", report)
    assert rc == 1 and f"--output {report} already exists; pass --overwrite to replace it" in err, err
    message = _api_error(lambda: explain(tiny_model, "a film", output=report))
    assert message == f"output={report} already exists; pass overwrite=True to replace it, or choose another name"
    assert report.read_text(encoding="utf-8") == "the user's report"
    assert sorted(p.name for p in user.iterdir()) == ["mine.png"]
