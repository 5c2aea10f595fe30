"""Fault suite: bad flags, bad files and bad API arguments get a clear error, never a traceback,
and never change a user's file.

Each test runs the real command (``bertkit.cli.main``) or the real API on real files, and checks
the exit code, that the message names the value, file or limit, that no traceback is printed, and,
where a folder is involved, that no file in it changed (hashes before and after).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import torch

from bertkit import _args as A
from bertkit.assets import asset_path
from bertkit.cli import COMMANDS, build_parser
from bertkit.cli import main as cli_main

try:
    VOCAB = asset_path("vocab-uncased")
except FileNotFoundError as e:  # pragma: no cover - `make test` fetches the assets
    pytest.skip(str(e), allow_module_level=True)


def tree_hash(folder: Path) -> dict[str, str]:
    """relative path -> sha256 and mode of every file under ``folder`` (folders by name)."""
    out = {}
    for p in sorted(Path(folder).rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() + f" {p.stat().st_mode:o}"
    return out


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``bertkit ARGV`` in-process; (exit code, stdout, stderr). A traceback fails the test."""
    try:
        rc = cli_main([str(a) for a in argv])
    except SystemExit as e:  # argparse errors exit 2
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A random-init tiny BertForPreTraining saved with the real uncased vocabulary."""
    from bertkit.modeling import BertConfig, BertForPreTraining
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer(VOCAB)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=len(tok)))
    d = tmp_path_factory.mktemp("tiny") / "model"
    model.save_pretrained(d, tokenizer=tok)
    return d


TRAIN_ROWS = [
    ("a wonderful, moving film", "positive"),
    ("dull and far too long", "negative"),
    ("the best thing this year", "positive"),
    ("I walked out halfway", "negative"),
] * 2


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, tiny_model) -> Path:
    """A tiny text classifier fine-tuned (one epoch) by the real finetune command."""
    from bertkit.tasks import finetune

    d = tmp_path_factory.mktemp("clf")
    train = d / "train.jsonl"
    train.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in TRAIN_ROWS), encoding="utf-8")
    finetune(
        "text-classification",
        tiny_model,
        train,
        d / "out",
        epochs=1,
        batch_size=4,
        max_length=32,
        progress=False,
        quiet=True,
    )
    return d / "out"


# ------------------------------------------------------------------------------- numeric flags


def _numeric_actions():
    for name in COMMANDS:
        if name == "fetch-assets":
            continue
        sub = build_parser(only=name)._subparsers._group_actions[0].choices[name]
        for action in sub._actions:
            if action.option_strings and action.type is not None:
                yield name, action


def test_every_numeric_flag_has_a_typed_range():
    """No flag parses with a bare int/float: each has a range that argparse enforces."""
    plain = [(c, a.option_strings[0]) for c, a in _numeric_actions() if a.type in (int, float)]
    assert plain == []
    ranged = [(c, a) for c, a in _numeric_actions() if isinstance(a.type, A.Range)]
    assert len(ranged) >= 40
    for command, action in ranged:
        for bad in ("nan", "inf", "x"):
            with pytest.raises(argparse.ArgumentTypeError, match="must be"):
                action.type(bad)
        if action.type.lo is not None:
            with pytest.raises(argparse.ArgumentTypeError, match=re.escape(action.type.describe())):
                action.type(str(action.type.lo - 1))


@pytest.mark.parametrize(
    "argv,flag,limit",
    [
        (["fill-mask", "--model", "m", "x", "--top-k", "-1"], "--top-k", ">= 1"),
        (["pretrain", "--output", "o", "--threads", "-2"], "--threads", ">= 0"),
        (
            [
                "finetune",
                "--task",
                "text-classification",
                "--model",
                "m",
                "--train",
                "t",
                "--output",
                "o",
                "--device",
                "tpu9",
            ],
            "--device",
            "cpu, cuda, cuda:N or mps",
        ),
        (
            [
                "finetune",
                "--task",
                "text-classification",
                "--model",
                "m",
                "--train",
                "t",
                "--output",
                "o",
                "--epochs",
                "0",
            ],
            "--epochs",
            "> 0",
        ),
        (
            [
                "finetune",
                "--task",
                "text-classification",
                "--model",
                "m",
                "--train",
                "t",
                "--output",
                "o",
                "--max-train-samples",
                "0",
            ],
            "--max-train-samples",
            ">= 1",
        ),
        (
            ["prepare-data", "--corpus", "c", "--vocab", "v", "--output", "o", "--shard-tokens", "0"],
            "--shard-tokens",
            ">= 1",
        ),
        (["pretrain", "--output", "o", "--eval-fraction", "1.5"], "--eval-fraction", "[0, 1)"),
        (["pretrain", "--output", "o", "--mask-prob", "0"], "--mask-prob", "(0, 1]"),
        (["train-vocab", "--corpus", "c", "--output", "o", "--vocab-size", "0"], "--vocab-size", ">= 1"),
        (["predict", "--model", "m", "--input", "i", "--batch-size", "-3"], "--batch-size", ">= 1"),
    ],
)
def test_out_of_range_flag(capsys, argv, flag, limit):
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert flag in err and limit in err and repr(argv[-1]) in err


def test_an_unknown_name_among_the_hidden_cpu_flags(capsys, monkeypatch):
    monkeypatch.setenv("BERTKIT_HIDE_CPU_FLAGS", "amx_tile amx-bf16")
    rc, _, err = run(capsys, "inspect", asset_path("minilm"))
    assert rc == 2
    assert "BERTKIT_HIDE_CPU_FLAGS: 'amx-bf16' is not a flag bertkit reads" in err
    assert "use any of amx_bf16, amx_int8, amx_tile" in err


def test_cuda_device_when_there_is_none(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc, _, err = run(
        capsys,
        "finetune",
        "--task",
        "text-classification",
        "--model",
        "m",
        "--train",
        "t",
        "--output",
        "o",
        "--device",
        "cuda:3",
    )
    assert rc == 2 and "no CUDA GPU" in err and "available: cpu" in err


INFERENCE_COMMANDS = [
    ["serve", "--model", "m"],
    ["index", "--model", "m", "--input", "i", "--output", "o"],
    ["search", "--index", "x", "a query"],
    ["evaluate", "--model", "m", "--data", "d"],
    ["predict", "--model", "m", "--input", "i"],
    ["evaluate-embeddings", "--model", "m", "--sts", "s"],
    ["fill-mask", "--model", "m", "a [MASK] text"],
]


@pytest.mark.parametrize("argv", INFERENCE_COMMANDS, ids=[a[0] for a in INFERENCE_COMMANDS])
def test_every_inference_command_checks_its_device(capsys, argv):
    """``--device`` on each command that runs a model: a name torch has no device for is one line
    naming the choices; a GPU this machine lacks names the devices it has."""
    rc, _, err = run(capsys, *argv, "--device", "tpu9")
    assert rc == 2 and "--device" in err and "cpu, cuda, cuda:N or mps" in err and "'tpu9'" in err
    assert "Traceback" not in err
    if not torch.cuda.is_available():
        rc, _, err = run(capsys, *argv, "--device", "cuda:1")
        assert rc == 2 and "no CUDA GPU" in err and "available: cpu" in err


def test_a_pipeline_checks_its_device_by_name():
    from bertkit.assets import asset_path
    from bertkit.pipelines import pipeline

    with pytest.raises(ValueError, match=r"device must be cpu, cuda, cuda:N or mps, got 'tpu9'"):
        pipeline("sentence-embedding", model=asset_path("minilm"), device="tpu9")


def test_api_arguments_are_checked_by_name(tmp_path):
    from bertkit.tasks import evaluate, finetune, predict

    with pytest.raises(ValueError, match=r"epochs must be a number > 0, got 0"):
        finetune("text-classification", "m", "t", tmp_path / "o", epochs=0)
    with pytest.raises(ValueError, match=r"max_train_samples must be an integer >= 1, got -5"):
        finetune("text-classification", "m", "t", tmp_path / "o", max_train_samples=-5)
    with pytest.raises(ValueError, match=r"device must be cpu, cuda, cuda:N or mps, got 'tpu9'"):
        finetune("text-classification", "m", "t", tmp_path / "o", device="tpu9")
    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1, got 0"):
        predict("m", "x", batch_size=0)
    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1"):
        evaluate("m", "x", batch_size=2.5)
    assert not (tmp_path / "o").exists()


def test_pipeline_top_k_is_checked(tiny_model):
    from bertkit.modeling import BertForMaskedLM
    from bertkit.pipelines import pipeline
    from bertkit.tokenization import BertTokenizer

    fill = pipeline(
        "fill-mask",
        model=BertForMaskedLM.from_pretrained(tiny_model),
        tokenizer=BertTokenizer.from_pretrained(tiny_model),
    )
    assert len(fill("the [MASK] is here", top_k=3)) == 3
    for bad in (0, -1):
        with pytest.raises(ValueError, match=rf"top_k must be an integer >= 1, got {bad}"):
            fill("the [MASK] is here", top_k=bad)


# ------------------------------------------------------------------------------- task defaults


def test_every_task_default_is_valid():
    from bertkit.tasks.tasks import TASKS, get_task

    for name in TASKS:
        t = get_task(name)
        assert t.options.max_length >= 8
        if name == "question-answering":
            # the reference SQuAD scripts' window
            assert (t.options.max_length, t.options.doc_stride) == (384, 128)


def test_question_answering_with_default_flags(capsys, tmp_path, tiny_model):
    """`finetune --task question-answering` with no length flags trains (it used to stop at once)."""
    squad = Path(__file__).parent / "data" / "squad_small.json"
    rc, _, err = run(
        capsys,
        "finetune",
        "--task",
        "question-answering",
        "--model",
        tiny_model,
        "--train",
        squad,
        "--output",
        tmp_path / "qa",
        "--epochs",
        "1",
        "--max-train-samples",
        "4",
        "--no-progress",
    )
    assert rc == 0, err
    cfg = json.loads((tmp_path / "qa" / "config.json").read_text())
    assert cfg["bertkit_task_options"]["max_length"] == 384
    assert cfg["bertkit_task_options"]["doc_stride"] == 128


def test_question_answering_stride_not_below_window_names_both():
    from bertkit.tasks.tasks import TaskOptions, get_task

    with pytest.raises(ValueError, match=r"doc_stride \(200\) must be smaller than max_length \(128\)"):
        get_task("question-answering", TaskOptions(max_length=128, doc_stride=200))


# ------------------------------------------------------------------------------- OS errors in the CLI


def test_cli_is_a_directory(capsys, tmp_path):
    folder = tmp_path / "vocab_is_a_folder.txt"
    folder.mkdir()
    (tmp_path / "c.txt").write_text("some text here\n")
    before = tree_hash(tmp_path)
    rc, _, err = run(
        capsys, "train-vocab", "--corpus", folder, "--vocab-size", "50", "--output", tmp_path / "v.txt", "--quiet"
    )
    assert rc == 1 and str(folder) in err
    assert tree_hash(tmp_path) == before


def test_cli_not_a_directory(capsys, tmp_path):
    (tmp_path / "c.txt").write_text("some text here and there\n" * 20)
    blocker = tmp_path / "file"
    blocker.write_text("mine\n")
    before = tree_hash(tmp_path)
    rc, _, err = run(
        capsys,
        "train-vocab",
        "--corpus",
        tmp_path / "c.txt",
        "--vocab-size",
        "50",
        "--output",
        blocker / "vocab.txt",
        "--quiet",
    )
    assert rc == 1 and str(blocker) in err and ("Not a directory" in err or "File exists" in err)
    assert "--debug" in err
    assert tree_hash(tmp_path) == before


def test_debug_flag_and_env_show_the_traceback(capsys, tmp_path, monkeypatch):
    argv = ["tokenize", "--vocab", str(tmp_path / "missing.txt"), "hello"]
    rc, _, err = run(capsys, *argv)
    assert rc == 1 and "missing.txt" in err
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        cli_main([*argv, "--debug"])
    monkeypatch.setenv("BERTKIT_DEBUG", "1")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        cli_main(argv)


def test_type_error_from_a_bug_keeps_its_traceback(monkeypatch, tmp_path):
    """Only TypeErrors that bertkit raises on purpose become one-line errors; a bug is not hidden."""
    import bertkit.tokenization.tokenize_cli as tok_cli

    def buggy(args):
        return len(5)  # a TypeError from a bug, not a deliberate check

    monkeypatch.setattr(tok_cli, "run", buggy)
    with pytest.raises(TypeError, match="has no len"):
        cli_main(["tokenize", "--vocab", str(VOCAB), "hello"])


# ------------------------------------------------------------------------------- records and encodings


def test_predict_line_separators_inside_text(capsys, tmp_path, classifier):
    """A U+2028 (and friends) inside a text is text: 4 lines in, 4 predictions out."""
    texts = ["good film\u2028really", "bad\x0bfilm", "great\u2029movie\x1c!", "awful\x85 plot"]
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    csv_file = tmp_path / "in.csv"
    csv_file.write_text("text\n" + "".join(f'"{t}"\r\n' for t in texts), encoding="utf-8")
    for path in (f, csv_file):
        rc, out, err = run(capsys, "predict", "--model", classifier, "--input", path, "--no-progress")
        assert rc == 0, err
        rows = [json.loads(line) for line in out.split("\n") if line]
        assert [r["text"] for r in rows] == texts


def test_readers_split_records_at_newline_only(tmp_path):
    from bertkit._text import split_records
    from bertkit.data.corpus import read_documents
    from bertkit.data.readers import read_conll
    from bertkit.tokenization import load_vocab

    seps = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"
    assert split_records(f"a{seps}b\r\nc\nd") == [f"a{seps}b", "c", "d"]
    conll = tmp_path / "t.conll"
    conll.write_text("Tom\u2028x\tB-PER\nruns\tO\n\nHe\tO\n", encoding="utf-8")
    sents = read_conll(conll)
    assert [s.tokens for s in sents] == [["Tom\u2028x", "runs"], ["He"]]
    corpus = tmp_path / "c.txt"
    corpus.write_text("One line\u2028still one.\nTwo.\n\nNext doc.\n", encoding="utf-8")
    assert [len(d) for d in read_documents(corpus, fmt="bert")] == [2, 1]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\r\n[UNK]\r\na\u2028b\r\n", encoding="utf-8")
    assert list(load_vocab(vocab)) == ["[PAD]", "[UNK]", "a\u2028b"]


def test_non_utf8_task_file_names_file_line_and_offset(capsys, tmp_path, classifier):
    f = tmp_path / "latin1.csv"
    data = "text\nfine line\ncaf\u00e9 au lait\n".encode("latin-1")
    f.write_bytes(data)
    before = tree_hash(tmp_path)
    rc, _, err = run(capsys, "predict", "--model", classifier, "--input", f, "--no-progress")
    assert rc == 1
    assert f"{f}:3" in err and f"byte offset {data.index(0xE9)}" in err and "0xe9" in err
    assert tree_hash(tmp_path) == before


def test_non_utf8_corpus_is_replaced_and_said_on_screen(capsys, tmp_path):
    corpus = tmp_path / "c.txt"
    data = b"The first sentence is here. Another one follows.\n\nCaf\xe9 is open. It is late.\n"
    corpus.write_bytes(data)
    rc, _, err = run(
        capsys, "prepare-data", "--corpus", corpus, "--vocab", VOCAB, "--output", tmp_path / "shards", "--no-progress"
    )
    assert rc == 0
    assert "1 byte(s)" in err and f"{corpus}:3" in err and f"byte offset {data.index(0xE9)}" in err
    meta = json.loads((tmp_path / "shards" / "meta.json").read_text())
    assert meta["replaced_bytes"] == {str(corpus): 1}


def test_non_utf8_vocab_and_vocab_trainer(capsys, tmp_path):
    vocab = tmp_path / "vocab.txt"
    data = b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ncaf\xe9\n"
    vocab.write_bytes(data)
    rc, _, err = run(capsys, "tokenize", "--vocab", vocab, "hello")
    assert rc == 1 and f"{vocab}:6" in err and f"byte offset {data.index(0xE9)}" in err
    corpus = tmp_path / "c.txt"
    data = b"ok line\nbad \xff here\n"
    corpus.write_bytes(data)
    rc, _, err = run(
        capsys, "train-vocab", "--corpus", corpus, "--vocab-size", "40", "--output", tmp_path / "v.txt", "--quiet"
    )
    assert rc == 1 and f"{corpus}:2" in err and f"byte offset {data.index(0xFF)}" in err
    assert not (tmp_path / "v.txt").exists()


# ------------------------------------------------------------------------------- SQuAD


def _squad(tmp_path: Path, qas: list, name: str = "s.json") -> Path:
    p = tmp_path / name
    p.write_text(
        json.dumps(
            {"data": [{"title": "t", "paragraphs": [{"context": "Paris is the capital of France.", "qas": qas}]}]}
        ),
        encoding="utf-8",
    )
    return p


def test_squad_duplicate_ids_are_an_error(capsys, tmp_path, tiny_model):
    from bertkit.data.readers import read_squad

    qa = {"id": "q7", "question": "What is the capital?", "answers": [{"text": "Paris", "answer_start": 0}]}
    f = _squad(tmp_path, [qa, {**qa, "question": "Which city?"}])
    with pytest.raises(ValueError, match="duplicate question id 'q7'"):
        read_squad(f)
    rc, _, err = run(
        capsys,
        "finetune",
        "--task",
        "question-answering",
        "--model",
        tiny_model,
        "--train",
        f,
        "--output",
        tmp_path / "out",
        "--no-progress",
    )
    assert rc == 1 and "'q7'" in err and str(f) in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "qa,field",
    [
        ({"id": "q1", "question": "What?"}, "missing field 'answers'"),
        ({"id": "q1", "question": "What?", "answers": "Paris"}, "field 'answers' must be a list, got str"),
        ({"id": "q1", "question": "What?", "answers": [{"text": "Paris"}]}, "missing field 'answer_start'"),
        (
            {"id": "q1", "question": "What?", "answers": [{"text": "Paris", "answer_start": "first"}]},
            "field 'answer_start' must be an integer",
        ),
        ({"id": "q1", "answers": []}, "missing field 'question'"),
        ("not an object", "expected a JSON object"),
    ],
)
def test_squad_malformed_record_names_record_and_field(tmp_path, qa, field):
    from bertkit.data.readers import read_squad

    f = _squad(tmp_path, [qa])
    with pytest.raises(ValueError) as e:
        read_squad(f)
    msg = str(e.value)
    assert str(f) in msg and field in msg and "data[0].paragraphs[0].qas[0]" in msg


def test_squad_prediction_input_may_lack_answers(tmp_path):
    from bertkit.data.readers import read_squad

    f = _squad(tmp_path, [{"id": "q1", "question": "What?"}])
    assert read_squad(f, require_answers=False)[0].answers == []


# ------------------------------------------------------------------------------- vocabulary vs model


def test_vocab_larger_than_embedding_table(capsys, tmp_path, tiny_model):
    from bertkit.modeling import BertConfig, BertForPreTraining, check_vocab_fits
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer(VOCAB)
    small = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=21128))
    d = tmp_path / "mismatch"
    small.save_pretrained(d, tokenizer=tok)  # 30,522-line vocab.txt beside a 21,128-row table
    with pytest.raises(ValueError, match="30,522 tokens.*21,128 rows"):
        check_vocab_fits(tok, small.config, str(d))
    # a table padded beyond the vocabulary is legitimate
    check_vocab_fits(tok, BertConfig.from_preset("tiny", vocab_size=30528))
    train = tmp_path / "t.jsonl"
    train.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in TRAIN_ROWS))
    before = tree_hash(tmp_path)
    rc, _, err = run(
        capsys,
        "finetune",
        "--task",
        "text-classification",
        "--model",
        d,
        "--train",
        train,
        "--output",
        tmp_path / "out",
        "--no-progress",
    )
    assert rc == 1 and "30,522" in err and "21,128" in err and str(d) in err
    assert tree_hash(tmp_path) == before
    rc, _, err = run(capsys, "fill-mask", "--model", d, "the [MASK] is here")
    assert rc == 1 and "30,522" in err and "21,128" in err


# ------------------------------------------------------------------------------- model and training API


def test_freeze_everything_is_an_error(capsys, tmp_path, tiny_model):
    train = tmp_path / "t.jsonl"
    train.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in TRAIN_ROWS))
    before = tree_hash(tmp_path)
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
        tmp_path / "out",
        "--freeze",
        "bert,classifier",
        "--no-progress",
    )
    assert rc == 1 and "freezes every parameter" in err and "bert,classifier" in err
    assert tree_hash(tmp_path) == before


def test_model_inputs_name_the_argument():
    from bertkit.modeling import (
        BertConfig,
        BertForMultipleChoice,
        BertForSequenceClassification,
        BertForTokenClassification,
    )

    cfg = BertConfig.from_preset("tiny", vocab_size=64, num_labels=3)
    clf = BertForSequenceClassification(cfg).eval()
    ids = torch.ones(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"input_ids has shape \(2, 0\)"):
        clf(input_ids=torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(TypeError, match="input_ids must be a torch.Tensor, got list"):
        clf(input_ids=[[1, 2, 3]])
    with pytest.raises(TypeError, match="attention_mask must be a torch.Tensor, got list"):
        clf(input_ids=ids, attention_mask=[[1, 1, 1, 1]] * 2)
    with pytest.raises(ValueError, match=r"labels contains 3, outside \[0, 3\) \(num_labels=3"):
        clf(input_ids=ids, labels=torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"labels contains -1, outside \[0, 3\)"):
        clf(input_ids=ids, labels=torch.tensor([-1, 0]))
    tagger = BertForTokenClassification(cfg).eval()
    with pytest.raises(ValueError, match=r"labels contains 7, outside \[0, 3\)"):
        tagger(input_ids=ids, labels=torch.tensor([[0, -100, 1, 7]] * 2))
    assert tagger(input_ids=ids, labels=torch.tensor([[0, -100, 1, 2]] * 2)).loss is not None
    mc = BertForMultipleChoice(cfg).eval()
    with pytest.raises(ValueError, match=r"labels contains 2, outside \[0, 2\) \(num_choices=2"):
        mc(input_ids=torch.ones(1, 2, 4, dtype=torch.long), labels=torch.tensor([2]))


def test_distilbert_masked_lm_labels_are_checked_as_berts_are():
    from bertkit.modeling.distilbert import DistilBertConfig, DistilBertForMaskedLM

    mlm = DistilBertForMaskedLM(DistilBertConfig(vocab_size=64, n_layers=1, dim=32, n_heads=2, hidden_dim=64)).eval()
    ids = torch.ones(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"labels contains 64, outside \[0, 64\) \(vocab_size=64"):
        mlm(input_ids=ids, labels=torch.tensor([[-100, 64, -100, 1]] * 2))
    with pytest.raises(ValueError, match=r"labels has shape \(2, 3\) but the input has shape \(2, 4\)"):
        mlm(input_ids=ids, labels=torch.full((2, 3), -100))
    with pytest.raises(TypeError, match="labels must hold integer class ids"):
        mlm(input_ids=ids, labels=torch.zeros(2, 4))
    out = mlm(input_ids=ids, labels=torch.tensor([[-100, 5, -100, 1]] * 2))
    want = torch.nn.functional.cross_entropy(out.logits[:, [1, 3]].reshape(-1, 64), torch.tensor([5, 1, 5, 1]))
    torch.testing.assert_close(out.loss, want)  # the mean over the labelled positions only


# ------------------------------------------------------------------------------- tokenizer parity


def test_cjk_compatibility_ideographs_leaving_the_bmp_match_the_reference():
    transformers = pytest.importorskip("transformers")
    from test_tokenizer_parity import CONFIGS, ours, reference

    assert transformers is not None
    chars = "\ufa6c\ufacf\ufad0\ufad1\ufad5\ufad6\ufad7"
    for asset, lower in CONFIGS:
        ref, tok = reference(asset, lower), ours(asset, lower)
        for c in chars:
            for text in (f"ab{c}cd", f"x {c}y", c * 2, f"E\u0301{c}."):
                exp = ref(text, return_offsets_mapping=True)
                got = tok(text, return_offsets_mapping=True)
                assert got["input_ids"] == exp["input_ids"], (asset, lower, text)
                assert got["offset_mapping"] == [tuple(o) for o in exp["offset_mapping"]], (asset, lower, text)


def test_environment_leaves_no_debug_set():
    assert os.environ.get("BERTKIT_DEBUG", "") in ("", "0")


def test_max_length_beyond_the_models_positions(capsys, tmp_path, tiny_model):
    train = tmp_path / "t.jsonl"
    train.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in TRAIN_ROWS))
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
        tmp_path / "out",
        "--max-length",
        "600",
        "--no-progress",
    )
    assert rc == 1 and "max_length 600" in err and "(512)" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("form", ["jsonl", "csv"])
def test_embedding_and_retrieval_readers_name_a_bad_byte_and_drop_a_bom(tmp_path, form):
    """The embedder's pairs, STS pairs, BEIR queries/corpus and qrels read as strictly as the task files:
    a byte that is not UTF-8 names file and line (it was a bare codec error), and the BOM a spreadsheet
    writes is dropped (it became part of the first column's name)."""
    from bertkit.sentence.embedding_data import read_embedding_rows
    from bertkit.sentence.evaluation.metrics import read_beir, read_qrels

    bom = b"\xef\xbb\xbf"
    pairs = tmp_path / f"pairs.{form}"
    if form == "jsonl":
        pairs.write_bytes(
            bom + b'{"anchor": "a cat", "positive": "a kitten"}\n{"anchor": "caf\xe9", "positive": "b"}\n'
        )
    else:
        pairs.write_bytes(bom + b"anchor,positive\na cat,a kitten\ncaf\xe9,b\n")
    with pytest.raises(ValueError, match=rf"pairs\.{form}:{2 if form == 'jsonl' else 3}: invalid UTF-8: byte 0xe9"):
        read_embedding_rows(pairs)
    pairs.write_bytes(pairs.read_bytes().replace(b"caf\xe9", b"caf\xc3\xa9"))
    rows = read_embedding_rows(pairs)
    assert [(r["anchor"], r["positive"]) for r in rows] == [("a cat", "a kitten"), ("café", "b")]
    sts = tmp_path / "sts.csv"
    sts.write_bytes(bom + b"sentence1,sentence2,score\na,b,0.5\nc,d,nan\n")
    with pytest.raises(ValueError, match=r"sts\.csv:3: score 'nan' is not a finite number"):
        read_embedding_rows(sts, scored=True, score_range=(-float("inf"), float("inf")))

    queries, corpus, qrels = tmp_path / "q.jsonl", tmp_path / "c.jsonl", tmp_path / "qrels.tsv"
    queries.write_bytes(bom + b'{"_id": "q1", "text": "cats"}\n')
    corpus.write_bytes(bom + b'{"_id": "d1", "text": "a cat"}\n{"_id": "d2", "text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"c\.jsonl:2: invalid UTF-8"):
        read_beir(corpus)
    corpus.write_bytes(bom + b'{"_id": "d1", "text": "a cat"}\n')
    assert read_beir(queries) == {"q1": "cats"} and read_beir(corpus) == {"d1": "a cat"}
    qrels.write_bytes(bom + b"query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert read_qrels(qrels, {"q1"}, {"d1"}) == {"q1": {"d1": 1.0}}
    qrels.write_bytes(b"query-id\tcorpus-id\tscore\nq1\td1\t\xff\n")
    with pytest.raises(ValueError, match=r"qrels\.tsv:2: invalid UTF-8"):
        read_qrels(qrels, {"q1"}, {"d1"})


def test_regression_labels_name_file_and_line(capsys, tmp_path, tiny_model):
    """A score that is not a number, or not finite (it trained to a NaN loss), is refused with its file
    and line in the training data and in evaluate's data."""
    train = tmp_path / "train.csv"
    train.write_text("text,label\na fine film,0.9\na dull film,0.1\nbad,nan\n", encoding="utf-8")
    base = ["finetune", "--task", "text-classification", "--problem-type", "regression", "--model", tiny_model]
    base += ["--output", tmp_path / "out", "--max-steps", "1", "--no-progress"]
    rc, _, err = run(capsys, *base, "--train", train)
    assert rc == 1 and f"{train}:4: regression label 'nan' is not a finite number" in err
    train.write_text("text,label\na fine film,0.9\na dull film,positive\n", encoding="utf-8")
    rc, _, err = run(capsys, *base, "--train", train)
    assert rc == 1 and f"{train}:3: regression label 'positive' is not a number" in err
    assert not (tmp_path / "out").exists()


def test_a_task_pipeline_refuses_a_folder_without_the_trained_head(capsys):
    """MiniLM has no masked-LM or classification head: fill-mask answered from random weights, another
    answer on every run; now one line names the folder and the missing head."""
    from bertkit.pipelines import pipeline

    minilm = asset_path("minilm")
    rc, _, err = run(capsys, "fill-mask", "--model", minilm, "the [MASK] of the house")
    assert rc == 1 and f"{minilm} has no trained masked-LM head" in err
    for task in ("text-classification", "ner", "question-answering"):
        with pytest.raises(ValueError, match="has no trained .*head"):
            pipeline(task, model=minilm)
    assert pipeline("feature-extraction", model=minilm) is not None  # the encoder alone needs no head


def test_predict_on_a_model_that_was_never_fine_tuned_says_so(capsys, tmp_path):
    data = tmp_path / "test.csv"
    data.write_text("text\na fine film\n", encoding="utf-8")
    rc, _, err = run(capsys, "predict", "--model", asset_path("minilm"), "--input", data, "--no-progress")
    assert rc == 1 and "is not a fine-tuned model" in err and "bertkit finetune --task" in err
    assert "pass --task" not in err  # predict has no --task flag


def test_explain_png_folder_refusal_names_the_png_flag(capsys, tmp_path, classifier):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    rc, _, err = run(capsys, "explain", "--model", classifier, "a great film", "--png", folder)
    assert rc == 1 and f"--png {folder} is not empty" in err and "--output" not in err
    assert (folder / "notes.txt").read_text() == "mine\n"


def test_matryoshka_dims_out_of_range_says_why(capsys):
    rc, _, err = run(
        capsys, "train-embedder", "--model", "m", "--train", "t.jsonl", "--output", "o", "--matryoshka-dims", "384,0"
    )
    assert rc == 2 and "matryoshka_dims must be positive integers" in err


def test_a_damaged_sentence_transformers_config_is_named_not_guessed(capsys, tmp_path):
    """A broken modules.json was ignored and the default pooling used, which gives other vectors than the
    folder's model was trained for; now the file is named. An absent one still means plain defaults."""
    import shutil

    from bertkit.pipelines import pipeline

    minilm = asset_path("minilm")
    folder = tmp_path / "st"
    shutil.copytree(minilm, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    (folder / "model.safetensors").symlink_to(minilm / "model.safetensors")
    (folder / "modules.json").write_text('{"broken', encoding="utf-8")
    with pytest.raises(ValueError, match=r"modules\.json: not valid JSON"):
        pipeline("sentence-embedding", model=folder)
    corpus = tmp_path / "c.txt"
    corpus.write_text("a cat\n", encoding="utf-8")
    rc, _, err = run(capsys, "index", "--model", folder, "--input", corpus, "--output", tmp_path / "idx")
    assert rc == 1 and "modules.json: not valid JSON" in err
    (folder / "modules.json").unlink()
    assert len(pipeline("sentence-embedding", model=folder)(["a cat"])[0]) == 384


def test_a_folder_as_a_data_file_and_an_empty_query(capsys, tmp_path):
    """A folder given where a data file goes was reported as "no such file"; an empty search query
    returned hits that mean nothing. Both are now named for what they are."""
    from bertkit.sentence.embedding_data import read_embedding_rows
    from bertkit.sentence.evaluation.metrics import read_beir

    for reader in (read_embedding_rows, read_beir):
        with pytest.raises(IsADirectoryError, match="is a folder; give a data file"):
            reader(tmp_path)
    rc, _, err = run(capsys, "search", "--index", tmp_path / "none", "  ")
    assert rc == 1 and "query 1 is empty" in err


@pytest.mark.parametrize("command", ["train-embedder", "train-reranker"])
def test_embedder_and_reranker_max_length_beyond_the_models_positions(capsys, tmp_path, command):
    """It was accepted, and the run failed at its first long batch on a message without the flag."""
    train = tmp_path / "t.jsonl"
    row = (
        {"anchor": "a", "positive": "b"} if command == "train-embedder" else {"query": "a", "passage": "b", "label": 1}
    )
    train.write_text(json.dumps(row) + "\n", encoding="utf-8")
    argv = [command, "--model", asset_path("minilm"), "--train", train, "--output", tmp_path / "o"]
    rc, _, err = run(capsys, *argv, "--max-length", "1000", "--no-progress")
    assert rc == 1 and "max_length 1000 exceeds the model's max_position_embeddings (512)" in err
    assert "--max-length 512" in err and not (tmp_path / "o").exists()


def test_pipeline_lengths_and_batch_sizes_are_checked():
    """max_length 2 with chunking returned the vector of an empty text and reported nothing dropped;
    -5 and a batch size of 0 were accepted. Each is now the flags' own range error."""
    from bertkit.pipelines import pipeline

    emb = pipeline("sentence-embedding", model=asset_path("minilm"))
    for kw, name in (({"max_length": 2, "truncation": "chunk"}, "max_length"), ({"max_length": -5}, "max_length")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            emb.embed(["hello world foo bar"], **kw)
    with pytest.raises(ValueError, match="batch_size must be"):
        emb.embed(["hello"], batch_size=0)
    with pytest.raises(ValueError, match="batch_size must be"):
        pipeline("sentence-embedding", model=asset_path("minilm"), batch_size=-1)
