"""Every training command keeps the folder rule and shares one set of settings.

* ``distill`` and ``pretrain-clm`` claim ``--output`` as ``pretrain`` and ``finetune`` do: a folder
  of a user's files is refused, their own earlier output is replaced only with ``--overwrite`` (and
  only the files they wrote), ``--resume`` continues only the same command's run with the same
  settings and data and lists what differs otherwise.
* No command writes into its own input model folder (``distill --teacher T --output T``).
* The shared training settings have one flag, one help text and one range in every command, and
  the Python API checks the same ranges.

Every refusal is checked by hashing the user's files before and after.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
from pathlib import Path

import pytest
from test_bad_input import TRAIN_ROWS, classifier, run, tiny_model, tree_hash  # noqa: F401 - fixtures

from bertkit import _args as A
from bertkit._folders import MARKER
from bertkit.assets import asset_path
from bertkit.cli import build_parser
from bertkit.training.training_args import TrainingArguments

VOCAB = asset_path("vocab-uncased")


def _user_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"mine": true}\n')
    (path / "vocab.txt").write_text("my vocabulary\n")
    (path / "model.safetensors").write_bytes(b"my weights")
    return path


@pytest.fixture(scope="module")
def data_files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("data")
    train = d / "train.jsonl"
    train.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in TRAIN_ROWS), encoding="utf-8")
    with open(asset_path("austen"), encoding="utf-8") as f:
        text = "".join(itertools.islice((line for line in f if line.strip()), 300))
    corpus = d / "austen.txt"
    corpus.write_text(text, encoding="utf-8")
    other = d / "other.txt"
    other.write_text(text[: len(text) // 2], encoding="utf-8")
    return {"train": train, "corpus": corpus, "other": other, "cache": d / "cache"}


def _distill(teacher: Path, train: Path, out: Path, *extra: str) -> list:
    return [
        "distill",
        "--teacher",
        teacher,
        "--train",
        train,
        "--output",
        out,
        "--student-layers",
        "1",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--max-length",
        "32",
        "--no-progress",
        *extra,
    ]


def _clm(files: dict[str, Path], out: Path, *extra: str) -> list:
    return [
        "pretrain-clm",
        "--corpus",
        files["corpus"],
        "--vocab",
        VOCAB,
        "--output",
        out,
        "--n-layer",
        "1",
        "--n-embd",
        "16",
        "--n-head",
        "2",
        "--seq-len",
        "16",
        "--batch-size",
        "4",
        "--max-steps",
        "2",
        "--save-every",
        "1",
        "--eval-every",
        "0",
        "--eval-blocks",
        "4",
        "--precision",
        "fp32",
        "--threads",
        "1",
        "--seed",
        "42",
        "--lr",
        "0.001",
        "--cache-dir",
        files["cache"],
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def clm_run(tmp_path_factory, data_files) -> Path:
    out = tmp_path_factory.mktemp("clm") / "run"
    from bertkit.cli import main

    assert main([str(a) for a in _clm(data_files, out)]) == 0
    return out


@pytest.fixture(scope="module")
def distill_run(tmp_path_factory, classifier, data_files) -> Path:  # noqa: F811 - fixture
    out = tmp_path_factory.mktemp("distill") / "run"
    from bertkit.cli import main

    assert main([str(a) for a in _distill(classifier, data_files["train"], out)]) == 0
    return out


# ------------------------------------------------------------------------------------ distill


def test_distill_refuses_a_folder_of_user_files(capsys, tmp_path, classifier, data_files):  # noqa: F811
    mine = _user_folder(tmp_path / "mine")
    before = tree_hash(mine)
    rc, _, err = run(capsys, *_distill(classifier, data_files["train"], mine))
    assert rc == 1 and str(mine) in err and "config.json" in err and "choose another --output" in err
    assert tree_hash(mine) == before


def test_distill_output_is_marked_and_replaced_only_with_overwrite(
    capsys, tmp_path, distill_run, classifier, data_files
):  # noqa: F811 - fixture
    assert json.loads((distill_run / MARKER).read_text())["command"] == "distill"
    out = tmp_path / "run"
    shutil.copytree(distill_run, out)
    before = tree_hash(out)
    rc, _, err = run(capsys, *_distill(classifier, data_files["train"], out))
    assert rc == 1 and "--overwrite" in err and "--resume" in err
    assert tree_hash(out) == before
    (out / "notes.md").write_text("my notes\n")
    rc, _, err = run(capsys, *_distill(classifier, data_files["train"], out, "--overwrite"))
    assert rc == 0, err
    assert (out / "notes.md").read_text() == "my notes\n"
    assert json.loads((out / "config.json").read_text())["model_type"] == "distilbert"


@pytest.mark.parametrize("command", ["distill", "finetune", "pretrain"])
def test_a_command_never_writes_into_its_input_model(
    capsys,
    tmp_path,
    classifier,
    data_files,  # noqa: F811
    command,
):
    model = tmp_path / "model"
    shutil.copytree(classifier, model)
    before = tree_hash(model)
    train = data_files["train"]
    argv = {
        "distill": _distill(model, train, model, "--overwrite"),
        "finetune": [
            "finetune",
            "--task",
            "text-classification",
            "--model",
            model,
            "--train",
            train,
            "--output",
            model,
            "--overwrite",
            "--no-progress",
        ],
        "pretrain": [
            "pretrain",
            "--model",
            model,
            "--corpus",
            data_files["corpus"],
            "--output",
            model / "sub" / "..",
            "--no-progress",
        ],
    }[command]
    rc, _, err = run(capsys, *argv)
    assert rc == 1 and "own input" in err and str(model) in err, err
    assert tree_hash(model) == before


def test_distill_resume_on_a_finetune_folder_is_refused(capsys, tmp_path, classifier, data_files):  # noqa: F811
    out = tmp_path / "finetuned"
    shutil.copytree(classifier, out)
    before = tree_hash(out)
    rc, _, err = run(capsys, *_distill(classifier, data_files["train"], out, "--resume"))
    assert rc == 1 and "`bertkit finetune`" in err and "not of `bertkit distill`" in err
    assert tree_hash(out) == before


def test_distill_teacher_without_a_head_says_so_in_distills_terms(capsys, tmp_path, tiny_model, data_files):  # noqa: F811
    rc, _, err = run(capsys, *_distill(tiny_model, data_files["train"], tmp_path / "out"))
    assert rc == 1 and "no fine-tuned head" in err and "bertkit finetune --task text-classification" in err
    assert "pass --task" not in err and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------ pretrain-clm


def test_pretrain_clm_refuses_a_folder_of_user_files(capsys, tmp_path, data_files):
    mine = _user_folder(tmp_path / "mine")
    before = tree_hash(mine)
    rc, _, err = run(capsys, *_clm(data_files, mine))
    assert rc == 1 and str(mine) in err and "model.safetensors" in err
    assert tree_hash(mine) == before
    rc, _, err = run(capsys, *_clm(data_files, mine, "--resume"))  # no run of pretrain-clm to continue there
    assert rc == 1 and tree_hash(mine) == before


@pytest.mark.parametrize(
    "change,difference",
    [
        (("--lr", "0.01"), "settings.lr: was 0.001, now 0.01"),
        (("--seed", "5"), "data.seed: was 42, now 5"),
        (("--seq-len", "24"), "objective.seq_len: was 16, now 24"),
        (("--n-embd", "32"), "settings.n_embd: was 16, now 32"),
        (("--corpus", "OTHER"), "data.tokens: was"),
    ],
)
def test_pretrain_clm_resume_of_another_run_lists_what_differs(
    capsys, tmp_path, clm_run, data_files, change, difference
):
    out = tmp_path / "run"
    shutil.copytree(clm_run, out)
    before = tree_hash(out)
    argv = _clm(data_files, out, "--resume")
    flag, value = change
    argv[argv.index(flag) + 1] = data_files["other"] if value == "OTHER" else value
    if value == "OTHER":  # --cache-dir names the prepared folder itself: another corpus needs another
        argv[argv.index("--cache-dir") + 1] = tmp_path / "cache"
    rc, _, err = run(capsys, *argv)
    assert rc == 1 and difference in err and "--resume" in err, err
    assert tree_hash(out) == before


def test_pretrain_clm_resume_of_the_same_run_continues(capsys, tmp_path, clm_run, data_files):
    out = tmp_path / "run"
    shutil.copytree(clm_run, out)
    argv = _clm(data_files, out, "--resume")
    argv[argv.index("--max-steps") + 1] = "3"  # a longer budget is the same run
    rc, _, err = run(capsys, *argv)
    assert rc == 0, err
    assert "resumed from" in err and "step 2" in err
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3]


# ------------------------------------------------------------------------------------ one set of settings


COMMANDS = {
    "pretrain": "bertkit.training.mlm:PretrainingArguments",
    "pretrain-clm": "bertkit.training.clm:CLMArguments",
    "distill": "bertkit.tasks.distillation:DistillArguments",
    "finetune": "bertkit.tasks.api:FinetuneArguments",
    "train-embedder": "bertkit.sentence.embedder:EmbedderArguments",
    "train-reranker": "bertkit.sentence.cross_encoder.reranker:RerankerArguments",
}


def _actions(command: str) -> dict[str, object]:
    parser = build_parser(only=command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {a.dest: a for a in sub._actions if a.option_strings}


def test_every_shared_setting_has_one_flag_help_and_range_everywhere():
    import importlib

    shared = [f for f in dataclasses.fields(TrainingArguments) if f.metadata.get("cli", True)]
    assert {"lr", "max_minutes", "grad_accum_steps", "precision", "epochs", "output", "resume"} <= {
        f.name for f in shared
    }
    for command, where in COMMANDS.items():
        module, name = where.split(":")
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, TrainingArguments)
        actions = _actions(command)
        for f in shared:
            if f.name == "epochs" and command.startswith("pretrain"):
                continue  # sized by --max-steps
            action = actions[f.name]
            flag = "--no-progress" if f.name == "progress" else "--" + f.name.replace("_", "-")
            assert action.option_strings == [flag], (command, f.name)
            if f.name == "max_steps" and command.startswith("pretrain"):  # no --epochs there to win over
                assert action.help.startswith("optimizer steps;") and "--epochs" not in action.help, command
                continue
            assert action.help.startswith(f.metadata["help"].replace("%", "%%")), (command, f.name)
            assert action.type is f.metadata["type"] and (action.choices or None) == (f.metadata["choices"] or None)
        # Each field of the recipe is a flag (or deliberately Python-only), and parses back into it.
        own = {g.name for g in dataclasses.fields(cls) if g.metadata.get("cli", True)} - {"epochs"}
        assert own <= set(actions), (command, own - set(actions))
    # The former, drifting names are gone from every command.
    for command in COMMANDS:
        flags = {s for a in _actions(command).values() for s in a.option_strings}
        assert not flags & {"--grad-accum", "--bf16", "--max-time-minutes", "--num-epochs"}, command


def test_python_api_checks_the_ranges_of_the_flags(tmp_path):
    from bertkit.tasks import finetune
    from bertkit.tasks.distillation import DistillArguments
    from bertkit.training.clm import CLMArguments

    with pytest.raises(ValueError, match=r"lr must be a number > 0, got 0"):
        CLMArguments(corpus=["c"], vocab="v", output="o", lr=0)
    with pytest.raises(ValueError, match=r"temperature must be a number > 0, got -1"):
        DistillArguments(teacher="t", train="x", output="o", temperature=-1)
    with pytest.raises(ValueError, match=r"grad_accum_steps must be an integer >= 1, got 0"):
        finetune("text-classification", "m", "t", tmp_path / "o", grad_accum_steps=0)
    with pytest.raises(ValueError, match=r"precision must be one of auto, bf16, fp16, fp32, got 'fp8'"):
        DistillArguments(teacher="t", train="x", output="o", precision="fp8")
    assert not (tmp_path / "o").exists()


def test_generated_flags_round_trip_into_the_dataclass():
    from bertkit.tasks.distillation import DistillArguments

    ns = build_parser(only="distill").parse_args(
        [
            "distill",
            "--teacher",
            "t",
            "--train",
            "x",
            "--output",
            "o",
            "--grad-accum-steps",
            "3",
            "--no-progress",
            "--precision",
            "bf16",
        ]
    )
    args = A.from_namespace(DistillArguments, ns)
    assert (args.grad_accum_steps, args.progress, args.precision, args.lr) == (3, False, "bf16", 1e-4)
    assert args == DistillArguments(
        teacher="t", train="x", output="o", grad_accum_steps=3, progress=False, precision="bf16"
    )


def _finetune_argv(model: str, data_files: dict, out: Path) -> list:
    """One epoch of a tiny fine-tune with a checkpoint every step, for the resume tests."""
    return [
        "finetune",
        "--task",
        "text-classification",
        "--model",
        model,
        "--train",
        data_files["train"],
        "--output",
        out,
        "--batch-size",
        "4",
        "--max-length",
        "32",
        "--save-every",
        "1",
        "--epochs",
        "1",
        "--no-progress",
    ]


def test_finetune_resume_continues_only_the_same_run(capsys, tmp_path, tiny_model, data_files):  # noqa: F811
    argv = _finetune_argv(tiny_model, data_files, tmp_path / "out")
    assert run(capsys, *argv)[0] == 0
    before = tree_hash(tmp_path / "out")
    rc, _, err = run(capsys, *argv, "--resume", "--lr", "1e-3")
    assert rc == 1 and "settings.lr: was 5e-05, now 0.001" in err
    assert tree_hash(tmp_path / "out") == before
    longer = list(argv)
    longer[longer.index("--epochs") + 1] = "2"
    rc, _, err = run(capsys, *longer, "--resume")
    assert rc == 0, err
    assert "resumed from" in err and json.loads((tmp_path / "out" / "eval_results.json").read_text())["steps"] == 4


def test_resume_takes_a_setting_an_older_bertkit_did_not_record_at_its_default(
    capsys,
    tmp_path,
    tiny_model,
    data_files,  # noqa: F811
):
    """A run recorded before a setting existed ran at that setting's default: resuming it with the
    default continues it, and with another value names the setting and both values."""
    argv = _finetune_argv(tiny_model, data_files, tmp_path / "out")
    assert run(capsys, *argv)[0] == 0
    marker_file = tmp_path / "out" / ".bertkit-output.json"
    marker = json.loads(marker_file.read_text())
    for name in ("layer_lr_decay", "dropout"):  # settings bertkit gained after such a run
        del marker["run"]["settings"][name]
    marker_file.write_text(json.dumps(marker))
    rc, _, err = run(capsys, *argv, "--resume", "--layer-lr-decay", "0.8")
    assert rc == 1 and "settings.layer_lr_decay: was 1.0, now 0.8" in err
    rc, _, err = run(capsys, *argv, "--resume", "--dropout", "0.2")
    assert rc == 1 and "settings.dropout: was null, now 0.2" in err
    longer = list(argv)
    longer[longer.index("--epochs") + 1] = "2"
    rc, _, err = run(capsys, *longer, "--resume")
    assert rc == 0 and "resumed from" in err, err


def test_resume_compares_runs_recorded_by_an_older_bertkit_on_what_both_record(tmp_path):
    from bertkit._folders import claim_output_dir

    out = tmp_path / "run"
    claim = claim_output_dir(out, "pretrain", run={"model": {"hidden_size": 128}, "data": {"seed": 1}})
    (out / "checkpoints").mkdir()
    claim.finish()
    new = {"settings": {"lr": 1e-4}, "model": {"hidden_size": 128}, "data": {"seed": 1}}
    assert claim_output_dir(out, "pretrain", resume=True, can_resume=True, run=new).resumed
    with pytest.raises(ValueError, match="data.seed: was 1, now 2"):
        claim_output_dir(out, "pretrain", resume=True, can_resume=True, run={**new, "data": {"seed": 2}})
    # A recipe's folder and a single run's share no section: every difference is listed.
    with pytest.raises(ValueError, match='recipe: was null, now "cpu-hour"'):
        claim_output_dir(out, "pretrain", resume=True, can_resume=True, run={"recipe": "cpu-hour"})


def test_resume_never_takes_a_folder_of_user_files_for_an_unmarked_run(capsys, tmp_path, data_files):
    """Only a folder holding checkpoints passes for a run of an older bertkit; a user's model folder does not."""
    mine = _user_folder(tmp_path / "mine")
    before = tree_hash(mine)
    rc, _, err = run(
        capsys,
        "pretrain",
        "--corpus",
        data_files["corpus"],
        "--vocab",
        VOCAB,
        "--config",
        "tiny",
        "--output",
        mine,
        "--resume",
        "--no-progress",
    )
    assert rc == 1 and "is not the output of `bertkit pretrain`" in err
    assert tree_hash(mine) == before


# ------------------------------------------------------------------------------ failures after the checks


def test_a_bad_model_setting_leaves_no_output_folder(capsys, tmp_path, classifier, data_files):  # noqa: F811
    """A setting only the model can judge (a student deeper than its teacher, a width the heads do not
    divide) is refused before ``--output`` is claimed: no folder with only the marker is left behind."""
    out = tmp_path / "d"
    rc, _, err = run(capsys, *_distill(classifier, data_files["train"], out, "--student-layers", "10"))
    assert rc == 1 and "student_layers" in err and not out.exists()
    out = tmp_path / "c"
    argv = _clm(data_files, out)
    argv[argv.index("--n-embd") + 1] = "15"  # 2 heads do not divide 15
    rc, _, err = run(capsys, *argv)
    assert rc == 1 and "n_head" in err and not out.exists()


@pytest.mark.parametrize("command", ["distill", "pretrain-clm", "finetune"])
def test_a_diverged_run_is_one_line_and_exit_3(capsys, tmp_path, classifier, tiny_model, data_files, command):  # noqa: F811
    """A loss that turns NaN (here a learning rate of 1e9) stops every training command with one line
    naming the step, as pretrain, train-embedder and train-reranker did; never a traceback."""
    out = tmp_path / "run"
    if command == "distill":
        argv = _distill(classifier, data_files["train"], out, "--lr", "1e9", "--epochs", "3")
    elif command == "pretrain-clm":
        argv = _clm(data_files, out)
        argv[argv.index("--lr") + 1] = "1e9"
        argv[argv.index("--max-steps") + 1] = "8"
    else:
        argv = ["finetune", "--task", "text-classification", "--model", tiny_model, "--train", data_files["train"]]
        argv += ["--output", out, "--lr", "1e9", "--epochs", "3", "--batch-size", "4", "--no-progress"]
    rc, _, err = run(capsys, *argv)
    assert rc == 3, err
    lines = [line for line in err.splitlines() if line.startswith("bertkit ")]
    assert len(lines) == 1 and lines[0].startswith(f"bertkit {command}: error: loss is "), err
    assert "Lower --lr," in lines[0]  # the flag, as the command line names the setting


def test_contradicting_flags_are_refused(capsys, tmp_path, data_files):
    """--resume with --overwrite resumed quietly, and --mine-from without --hard-negatives trained
    without mining: each is now one line naming both flags, before anything is written."""
    rc, _, err = run(capsys, *_clm(data_files, tmp_path / "c", "--resume", "--overwrite"))
    assert rc == 1 and "--resume continues the run in --output and --overwrite replaces it" in err
    assert not (tmp_path / "c").exists()
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"anchor": "a", "positive": "b"}\n', encoding="utf-8")
    argv = ["train-embedder", "--model", asset_path("minilm"), "--train", pairs, "--output", tmp_path / "e"]
    rc, _, err = run(capsys, *argv, "--mine-from", pairs)
    assert rc == 1 and "--mine-from is read only with --hard-negatives" in err and not (tmp_path / "e").exists()
