"""Fault suite for the newer commands: `index`, `search`, `explain`, `export`, `generate`, `serve`
and the text-generation pipeline.

Each test runs the real command (``bertkit.cli.main``, or a child process where the environment
must differ) on real files, and checks the exit code, that the one-line message names the file,
line, value or limit, that no traceback is printed, and that no user file changed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main

try:
    VOCAB = asset_path("vocab-uncased")
except FileNotFoundError as e:  # pragma: no cover - `make test` fetches the assets
    pytest.skip(str(e), allow_module_level=True)

SRC = str(Path(__file__).resolve().parents[1] / "src")


def tree_hash(folder: Path) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).rglob("*"))
    }


def run(capsys, *argv) -> tuple[int, str, str]:
    """``bertkit ARGV`` in-process: (exit code, stdout, stderr); a traceback fails the test."""
    try:
        rc = cli_main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("bertkit ")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A random-init tiny BertForPreTraining with the real uncased vocabulary."""
    from bertkit.modeling import BertConfig, BertForPreTraining
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer(VOCAB)
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("tiny") / "model"
    BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=len(tok))).save_pretrained(d, tokenizer=tok)
    return d


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> Path:
    """A random-init tiny GPT-2 with a WordPiece vocabulary (the layout of the Chinese GPT-2 models)."""
    from bertkit.modeling.gpt2 import GPT2Config, GPT2LMHeadModel
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer(VOCAB)
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("gpt2") / "model"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=len(tok), n_positions=64)).save_pretrained(
        d, tokenizer=tok
    )
    return d


# ------------------------------------------------------------------------------------ explain, export


def test_explain_never_replaces_a_file_without_overwrite(capsys, tmp_path, tiny_model):
    report, raw, png = tmp_path / "r.html", tmp_path / "r.json", tmp_path / "figs"
    report.write_text("my notes", encoding="utf-8")
    raw.write_text("{}", encoding="utf-8")
    png.mkdir()
    (png / "holiday.png").write_bytes(b"mine")
    before = tree_hash(tmp_path)
    for flag, path in (("--output", report), ("--json", raw)):
        rc, _, err = run(capsys, "explain", "--model", tiny_model, "a film", flag, path)
        assert rc == 1 and f"{flag} {path} already exists" in one_error_line(err) and "--overwrite" in err
    rc, _, err = run(capsys, "explain", "--model", tiny_model, "a film", "--png", png)
    assert rc == 1 and f"--png {png} is not empty" in one_error_line(err)
    assert tree_hash(tmp_path) == before
    # with --overwrite the files are replaced; a --png folder of its own is replaced, nothing else
    new_png = tmp_path / "new-figs"
    rc, _, err = run(
        capsys,
        "explain",
        "--model",
        tiny_model,
        "a film",
        "--output",
        report,
        "--json",
        raw,
        "--png",
        new_png,
        "--overwrite",
    )
    assert rc == 0, err
    assert report.read_text(encoding="utf-8").startswith("<!") and json.loads(raw.read_text(encoding="utf-8"))
    (new_png / "notes.txt").write_text("keep", encoding="utf-8")
    rc, _, err = run(capsys, "explain", "--model", tiny_model, "a film", "--png", new_png)
    assert rc == 1 and "--overwrite" in err
    rc, _, err = run(capsys, "explain", "--model", tiny_model, "a film", "--png", new_png, "--overwrite")
    assert rc == 0 and (new_png / "notes.txt").read_text(encoding="utf-8") == "keep"


def test_explain_python_api_follows_the_folder_rule(tmp_path, tiny_model):
    """``explain(...)`` from Python replaced a user's report.html and figures; now it follows the CLI's rule."""
    from bertkit.explain import explain

    user = tmp_path / "user"
    user.mkdir()
    (user / "report.html").write_text("my report", encoding="utf-8")
    (user / "figure.png").write_bytes(b"my figure")
    before = tree_hash(tmp_path)
    with pytest.raises(FileExistsError, match=f"output={user / 'report.html'} already exists"):
        explain(tiny_model, "a film", output=user / "report.html")
    with pytest.raises(FileExistsError, match=f"png_dir={user} is not empty"):
        explain(tiny_model, "a film", png_dir=user)
    with pytest.raises(ValueError, match="the input model folder"):
        explain(tiny_model, "a film", png_dir=tiny_model / "figs", overwrite=True)
    assert tree_hash(tmp_path) == before
    figs = tmp_path / "figs"
    assert explain(tiny_model, "a film", png_dir=figs, layers="0").pngs
    (figs / "notes.txt").write_text("keep", encoding="utf-8")
    with pytest.raises(FileExistsError, match=f"png_dir={figs} already holds the output of an earlier"):
        explain(tiny_model, "a film", png_dir=figs, layers="0")
    res = explain(tiny_model, "a film", png_dir=figs, layers="0", overwrite=True)
    assert res.pngs and (figs / "notes.txt").read_text(encoding="utf-8") == "keep"
    # a refused call after the claim (here a bad --layers) leaves no new folder behind
    with pytest.raises(ValueError):
        explain(tiny_model, "a film", png_dir=tmp_path / "never", layers="9")
    assert not (tmp_path / "never").exists()
    assert tree_hash(user) == {k.removeprefix("user/"): v for k, v in before.items() if k.startswith("user/")}


def test_export_and_predict_python_apis_never_replace_a_users_file(tmp_path, tiny_model):
    from bertkit.inference.export import export_onnx
    from bertkit.tasks import predict

    out = tmp_path / "model.onnx"
    out.write_bytes(b"an earlier export the user keeps")
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"text": "a film"}) + "\n", encoding="utf-8")
    before = tree_hash(tmp_path)
    with pytest.raises(FileExistsError, match=f"output={out} already exists"):
        export_onnx(tiny_model, out)
    with pytest.raises(ValueError, match="the input model folder"):
        export_onnx(tiny_model, tiny_model / "model.onnx", overwrite=True)
    with pytest.raises(ValueError, match=f"is the input file {data}"):
        predict(tiny_model, data, output=data, overwrite=True)
    assert tree_hash(tmp_path) == before


def test_explain_and_export_never_write_into_the_model_folder(capsys, tmp_path, tiny_model):
    before = tree_hash(tiny_model)
    for argv in (
        ["explain", "--model", tiny_model, "x", "--output", tiny_model / "report.html"],
        ["explain", "--model", tiny_model, "x", "--json", tiny_model / "sub" / "x.json"],
        ["explain", "--model", tiny_model, "x", "--png", tiny_model],
        ["export", "onnx", "--model", tiny_model, "--output", tiny_model / "model.onnx"],
        ["index", "--model", tiny_model, "--input", VOCAB, "--output", tiny_model / "idx"],
        [
            "finetune",
            "--task",
            "text-classification",
            "--model",
            tiny_model,
            "--train",
            VOCAB,
            "--output",
            tiny_model / "ft",
        ],
        ["predict", "--model", tiny_model, "--input", VOCAB, "--output", tiny_model / "p.jsonl"],
        ["evaluate", "--model", tiny_model, "--data", VOCAB, "--output", tiny_model / "m.json"],
    ):
        rc, _, err = run(capsys, *argv)
        assert rc == 1 and "the input model folder" in one_error_line(err), argv
    assert tree_hash(tiny_model) == before


def test_no_output_file_replaces_an_input_file_even_with_overwrite(capsys, tmp_path, tiny_model):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"text": "a film", "label": "positive"}) + "\n", encoding="utf-8")
    before = tree_hash(tmp_path)
    for argv in (
        ["predict", "--model", tiny_model, "--input", data, "--output", data, "--overwrite"],
        ["evaluate", "--model", tiny_model, "--data", data, "--output", data, "--overwrite"],
        ["train-vocab", "--corpus", data, "--output", data, "--vocab-size", "50", "--overwrite"],
    ):
        rc, _, err = run(capsys, *argv)
        assert rc == 1 and f"is the input file {data}" in one_error_line(err), argv
    assert tree_hash(tmp_path) == before


def test_explain_output_and_json_may_not_be_one_file(capsys, tmp_path, tiny_model):
    f = tmp_path / "same"
    rc, _, err = run(capsys, "explain", "--model", tiny_model, "x", "--output", f, "--json", f)
    assert rc == 1 and "same file" in one_error_line(err) and not f.exists()


def test_export_onnx_never_replaces_a_file_without_overwrite(capsys, tmp_path, tiny_model):
    out = tmp_path / "model.onnx"
    out.write_bytes(b"an earlier export the user keeps")
    rc, _, err = run(capsys, "export", "onnx", "--model", tiny_model, "--output", out)
    assert rc == 1 and f"--output {out} already exists" in one_error_line(err)
    assert out.read_bytes() == b"an earlier export the user keeps"
    rc, _, err = run(capsys, "export", "onnx", "--model", tiny_model, "--output", tmp_path)
    assert rc == 1 and "is a folder" in one_error_line(err)


# ------------------------------------------------------------------------------------------ index


def _corpus(tmp_path: Path, texts: list[str], name: str = "c.txt") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return p


TEXTS = [
    "a wonderful, moving film",
    "dull and far too long",
    "the best thing this year",
    "I walked out halfway",
    "great acting",
    "a weak plot",
    "see it twice",
    "never again",
]


def test_index_follows_the_folder_rule(capsys, tmp_path, tiny_model):
    corpus = _corpus(tmp_path, TEXTS)
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine", encoding="utf-8")
    before = tree_hash(user)
    rc, _, err = run(capsys, "index", "--model", tiny_model, "--input", corpus, "--output", user)
    assert rc == 1 and f"--output {user} is not empty" in one_error_line(err)
    assert tree_hash(user) == before and not (tmp_path / "user.partial").exists()

    out = tmp_path / "idx"
    assert run(capsys, "index", "--model", tiny_model, "--input", corpus, "--output", out)[0] == 0
    marker = json.loads((out / ".bertkit-output.json").read_text(encoding="utf-8"))
    assert marker["command"] == "index" and set(marker["files"]) == {"meta.json", "texts.jsonl", "vectors.npy"}
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    rc, _, err = run(capsys, "index", "--model", tiny_model, "--input", corpus, "--output", out)
    assert rc == 1 and "--overwrite" in one_error_line(err)
    corpus2 = _corpus(tmp_path, TEXTS[:3], "c2.txt")
    assert run(capsys, "index", "--model", tiny_model, "--input", corpus2, "--output", out, "--overwrite")[0] == 0
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert json.loads((out / "meta.json").read_text(encoding="utf-8"))["count"] == 3


def test_index_resume_keys_on_the_content(tmp_path, tiny_model, monkeypatch):
    """Killed after the first chunk; the corpus is edited (same path, same row count): the stale
    chunk must not be reused."""
    import bertkit.search.index as I

    corpus = _corpus(tmp_path, TEXTS)
    out = tmp_path / "idx"
    real, calls = I.atomic_path, []

    def killed_on_the_second_chunk(path, *a, **k):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(path, *a, **k)

    monkeypatch.setattr(I, "atomic_path", killed_on_the_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        I.build_index(tiny_model, corpus, out, chunk_size=4, progress=False, dtype="fp32")
    monkeypatch.setattr(I, "atomic_path", real)
    assert (tmp_path / "idx.partial" / "000000.npy").exists() and not out.exists()

    edited = ["an entirely different text " + str(i) for i in range(4)] + TEXTS[4:]
    _corpus(tmp_path, edited)
    with pytest.raises(FileExistsError, match="content_sha256"):
        I.build_index(tiny_model, corpus, out, chunk_size=4, progress=False, dtype="fp32")
    I.build_index(tiny_model, corpus, out, chunk_size=4, progress=False, dtype="fp32", overwrite=True)
    fresh = I.build_index(tiny_model, corpus, tmp_path / "fresh", chunk_size=4, progress=False, dtype="fp32")
    np.testing.assert_array_equal(np.load(out / "vectors.npy"), np.load(fresh / "vectors.npy"))


def test_index_txt_records_end_at_newline_only(tmp_path):
    from bertkit.search import read_corpus

    p = tmp_path / "c.txt"
    p.write_bytes("first\rstill first\r\nsecond\n\nfourth\u2028x\n".encode())
    assert read_corpus(p) == [("1", "first\rstill first"), ("2", "second"), ("4", "fourth\u2028x")]


@pytest.mark.parametrize(
    "name,data,expect",
    [
        ("long.csv", b"id,text\n1," + b"x" * 200_000 + b"\n2,short\n", None),
        ("deep.jsonl", b'{"text": "ok"}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n", ":2: JSON nested too deeply"),
        ("latin1.txt", "fine\ncaf\u00e9\n".encode("latin-1"), ":2: invalid UTF-8: byte 0xe9"),
        ("latin1.csv", "text\nfine\ncaf\u00e9\n".encode("latin-1"), ":3: invalid UTF-8: byte 0xe9"),
        ("surrogate.jsonl", b'{"text": "fine"}\n{"text": "bad \\ud800 text"}\n', ":2: the text holds a lone surrogate"),
    ],
)
def test_index_reader_faults_name_file_and_line(capsys, tmp_path, tiny_model, name, data, expect):
    src = tmp_path / name
    src.write_bytes(data)
    out = tmp_path / "idx"
    rc, _, err = run(capsys, "index", "--model", tiny_model, "--input", src, "--output", out)
    if expect is None:  # a text over the csv module's field limit is still a text
        assert rc == 0, err
        assert json.loads((out / "meta.json").read_text())["count"] == 2
        return
    line = one_error_line(err)
    assert rc == 1 and f"{src}" in line and expect.split(":", 2)[-1] in line, line
    if expect.startswith(":") and expect[1].isdigit():
        assert f"{src}{expect.split(' ')[0]}" in line
    assert not out.exists() and not (tmp_path / "idx.partial").exists()


def test_index_csv_header_with_a_bom(tmp_path):
    from bertkit.search import read_corpus

    p = tmp_path / "excel.csv"
    p.write_bytes(b"\xef\xbb\xbftext,id\ngood film,a\nbad film,b\n")
    assert read_corpus(p) == [("a", "good film"), ("b", "bad film")]


def test_index_model_that_is_a_file_or_not_an_encoder(capsys, tmp_path, tiny_model, tiny_gpt2):
    corpus = _corpus(tmp_path, TEXTS)
    out = tmp_path / "idx"
    rc, _, err = run(capsys, "index", "--model", tiny_model / "config.json", "--input", corpus, "--output", out)
    assert rc == 1 and f"--model {tiny_model / 'config.json'} is a file" in one_error_line(err)
    rc, _, err = run(capsys, "index", "--model", tiny_gpt2, "--input", corpus, "--output", out)
    assert rc == 1 and "not an encoder" in one_error_line(err) and "gpt2" in err
    assert not out.exists() and not (tmp_path / "idx.partial").exists()


# ------------------------------------------------------------------------------------------ search


@pytest.fixture(scope="module")
def built_index(tmp_path_factory, tiny_model) -> Path:
    from bertkit.search import build_index

    d = tmp_path_factory.mktemp("index")
    return build_index(tiny_model, _corpus(d, TEXTS), d / "idx", progress=False, dtype="fp32")


def _damage(folder: Path, how: str) -> Path:
    if how == "row without text":
        f = folder / "texts.jsonl"
        lines = f.read_text(encoding="utf-8").splitlines()
        lines[2] = json.dumps({"id": "3"})
        f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    elif how == "meta without model":
        f = folder / "meta.json"
        meta = json.loads(f.read_text(encoding="utf-8"))
        del meta["model"]
        f.write_text(json.dumps(meta), encoding="utf-8")
    elif how == "truncated vectors":
        f = folder / "vectors.npy"
        f.write_bytes(f.read_bytes()[:200])
    elif how == "broken meta":
        f = folder / "meta.json"
        f.write_text('{"model": "x", ', encoding="utf-8")
    elif how == "vectors not numpy":
        f = folder / "vectors.npy"
        f.write_bytes(b"hello")
    elif how == "texts not utf-8":
        f = folder / "texts.jsonl"
        f.write_bytes(b'{"id": "1", "text": "caf\xe9"}\n')
    return f


@pytest.mark.parametrize(
    "how",
    [
        "row without text",
        "meta without model",
        "truncated vectors",
        "broken meta",
        "vectors not numpy",
        "texts not utf-8",
    ],
)
def test_search_on_a_damaged_index_names_the_file(capsys, tmp_path, built_index, how):
    import shutil

    folder = tmp_path / "idx"
    shutil.copytree(built_index, folder)
    damaged = _damage(folder, how)
    rc, _, err = run(capsys, "search", "--index", folder, "a film")
    assert rc == 1 and str(damaged) in one_error_line(err), err


def test_search_index_that_is_a_file_or_missing(capsys, tmp_path, built_index):
    rc, _, err = run(capsys, "search", "--index", built_index / "meta.json", "x")
    assert rc == 1 and "is a file" in one_error_line(err)
    rc, _, err = run(capsys, "search", "--index", tmp_path / "nope", "x")
    assert rc == 1 and "not an index folder" in one_error_line(err)


# ---------------------------------------------------------------------------------- text generation


def test_text_generation_argument_checks(tiny_gpt2):
    from bertkit import pipeline

    gen = pipeline("text-generation", model=tiny_gpt2)
    with pytest.raises(ValueError, match="no tokens"):
        gen("", add_special_tokens=False, max_new_tokens=2)
    for kw, name in (
        (dict(max_new_tokens=2.5), "max_new_tokens"),
        (dict(max_new_tokens="3"), "max_new_tokens"),
        (dict(top_k=1.5, max_new_tokens=2), "top_k"),
        (dict(max_length=True), "max_length"),
    ):
        with pytest.raises(ValueError, match=f"{name} must be an integer"):
            gen("hello", **kw)
    # greedy search never reads the temperature: 0 is accepted and gives the greedy result
    greedy = gen("hello", max_new_tokens=4, do_sample=False)
    assert gen("hello", max_new_tokens=4, do_sample=False, temperature=0) == greedy
    with pytest.raises(ValueError, match="temperature must be > 0"):
        gen("hello", max_new_tokens=4, do_sample=True, temperature=0)


def test_generate_on_a_bert_folder_is_one_line(capsys, tiny_model):
    rc, _, err = run(capsys, "generate", "--model", tiny_model, "hello")
    assert rc == 1 and "is a bert model, not a causal language model" in one_error_line(err)
    rc, _, err = run(capsys, "generate", "--model", tiny_model / "config.json", "hello")
    assert rc == 1 and "is a file" in one_error_line(err)


# ---------------------------------------------------------------------------------- missing extras

_BLOCK = textwrap.dedent("""
    import os, sys
    for name in filter(None, os.environ.get("BERTKIT_TEST_BLOCK", "").split(",")):
        sys.modules[name] = None  # `import name` now raises ImportError, in this process and its children
""")


def _cli_without(tmp_path: Path, modules: str, *argv) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_BLOCK, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), SRC]),
        "BERTKIT_TEST_BLOCK": modules,
        "BERTKIT_DEBUG": "0",
    }
    return subprocess.run(
        [sys.executable, "-m", "bertkit", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    "modules,extra,argv",
    [
        ("fastapi", "serve", ["serve", "--model", "{model}"]),
        ("uvicorn", "serve", ["serve", "--model", "{model}"]),
        (
            "faiss",
            "faiss",
            ["index", "--model", "{model}", "--input", "{corpus}", "--output", "{out}", "--backend", "faiss"],
        ),
        ("faiss", "faiss", ["search", "--index", "{index}", "x", "--backend", "faiss"]),
        (
            "jieba",
            "zh",
            [
                "prepare-data",
                "--corpus",
                "{zh}",
                "--vocab",
                "{vocab}",
                "--output",
                "{out}",
                "--whole-word-masking",
                "--no-progress",
            ],
        ),
        ("onnxscript", "onnx", ["export", "onnx", "--model", "{model}", "--output", "{out}.onnx"]),
        ("onnx", "onnx", ["export", "onnx", "--model", "{model}", "--output", "{out}.onnx"]),
    ],
)
def test_missing_extra_is_one_line_and_exit_2(tmp_path, tiny_model, built_index, modules, extra, argv):
    zh = tmp_path / "zh.txt"
    zh.write_text("今天天气很好。我们去公园。\n\n第二个文档。\n", encoding="utf-8")
    values = {
        "model": tiny_model,
        "corpus": _corpus(tmp_path, TEXTS),
        "out": tmp_path / "out",
        "index": built_index,
        "zh": zh,
        "vocab": asset_path("vocab-chinese"),
    }
    r = _cli_without(tmp_path, modules, *[a.format(**values) for a in argv])
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and f"pip install 'bertkit[{extra}]'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.onnx").exists()


def test_generate_prints_nothing_for_a_refused_prompt(capsys, tiny_gpt2):
    rc, out, err = run(capsys, "generate", "--model", tiny_gpt2, "hello", "--max-new-tokens", "1000")
    assert rc == 1 and "n_positions=64" in one_error_line(err) and out == ""
    rc, out, _ = run(capsys, "generate", "--model", tiny_gpt2, "hello", "--max-new-tokens", "3")
    assert rc == 0 and out.startswith("hello")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs a folder no file can be created in (/proc)")
def test_unwritable_output_folder_names_the_output_not_a_temp_file(capsys, tiny_model):
    rc, _, err = run(capsys, "explain", "--model", tiny_model, "x", "--json", "/proc/report.json")
    line = one_error_line(err)
    assert rc == 1 and line.endswith("/proc/report.json") and ".tmp" not in line


def test_search_refuses_a_query_model_that_is_not_an_encoder(capsys, built_index, tiny_gpt2):
    rc, _, err = run(capsys, "search", "--index", built_index, "x", "--model", tiny_gpt2)
    assert rc == 1 and "not an encoder" in one_error_line(err)


def test_serve_refuses_a_busy_port_an_unknown_host_and_a_generator_before_loading(capsys, tiny_model, tiny_gpt2):
    import socket

    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        rc, _, err = run(capsys, "serve", "--model", tiny_model, "--port", port)
    assert rc == 1 and f"cannot listen on 127.0.0.1:{port}" in one_error_line(err) and "--port" in err
    rc, _, err = run(capsys, "serve", "--model", tiny_model, "--host", "no-such-host.invalid")
    assert rc == 1 and "--host no-such-host.invalid: cannot resolve" in one_error_line(err)
    rc, _, err = run(capsys, "serve", "--model", tiny_gpt2)
    assert rc == 1 and "not an encoder" in one_error_line(err)


# ------------------------------------------------------------------------------- full disk

_LIMITED = """
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # Python ignores SIGXFSZ: writes fail with EFBIG
from bertkit.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _limited(tmp_path: Path, limit: int, *argv) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", _LIMITED, str(limit), *map(str, argv)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _temp_files(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if ".tmp" in p.name or p.name.endswith(".old")]


def test_full_disk_during_explain_keeps_the_old_report(tmp_path, tiny_model):
    report = tmp_path / "r.html"
    report.write_text("the old report", encoding="utf-8")
    r = _limited(tmp_path, 20_000, "explain", "--model", tiny_model, "a film", "--output", report, "--overwrite")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "File too large" in r.stderr, r.stderr
    assert report.read_text(encoding="utf-8") == "the old report" and _temp_files(tmp_path) == []


def test_full_disk_during_index_publishes_nothing(tmp_path, tiny_model):
    corpus = _corpus(tmp_path, TEXTS * 40)
    out = tmp_path / "idx"
    r = _limited(tmp_path, 30_000, "index", "--model", tiny_model, "--input", corpus, "--output", out)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    # numpy reports a short write without a reason or a file: the message says both
    assert "write failed" in r.stderr and f"{out}.partial{os.sep}000000.npy" in r.stderr, r.stderr
    assert not out.exists() and _temp_files(tmp_path) == []


def test_index_overwrite_removes_the_faiss_cache_of_the_old_vectors(capsys, tmp_path, tiny_model):
    """search --backend faiss caches a faiss index in the index folder; a rebuilt index must not keep it."""
    pytest.importorskip("faiss")
    from bertkit.search import load_index

    out = tmp_path / "idx"
    assert run(capsys, "index", "--model", tiny_model, "--input", _corpus(tmp_path, TEXTS), "--output", out)[0] == 0
    (out / "notes.txt").write_text("mine", encoding="utf-8")  # a user file: replaced file by file
    load_index(out, backend="faiss")
    assert (out / "faiss-hnsw.index").is_file()
    small = _corpus(tmp_path, TEXTS[:2], "small.txt")
    assert run(capsys, "index", "--model", tiny_model, "--input", small, "--output", out, "--overwrite")[0] == 0
    assert not (out / "faiss-hnsw.index").exists() and (out / "notes.txt").is_file()
    assert len(load_index(out, backend="faiss")._faiss_index.reconstruct_n(0, 2)) == 2


def test_index_never_removes_a_user_folder_named_like_its_work_folder(capsys, tmp_path, tiny_model):
    work = tmp_path / "idx.partial"
    work.mkdir()
    (work / "thesis.tex").write_text("mine", encoding="utf-8")
    rc, _, err = run(
        capsys,
        "index",
        "--model",
        tiny_model,
        "--input",
        _corpus(tmp_path, TEXTS),
        "--output",
        tmp_path / "idx",
        "--overwrite",
    )
    assert rc == 1 and "is not an unfinished `bertkit index`" in one_error_line(err)
    assert (work / "thesis.tex").read_text(encoding="utf-8") == "mine"


def test_index_killed_while_writing_its_key_resumes(capsys, tmp_path, tiny_model):
    """A `kill -9` in the middle of the work folder's key write leaves the lock file and the key's
    temporary file: the next run recognises its own work folder and finishes the index."""
    corpus, out = _corpus(tmp_path, TEXTS), tmp_path / "idx"
    code = textwrap.dedent(
        f"""
        import os, signal
        import bertkit.search.index as I

        def killed_mid_write(path, obj, **kw):
            with I.atomic_path(path) as tmp:
                tmp.write_text('{{"model": ')  # half a key, then the process dies
                os.kill(os.getpid(), signal.SIGKILL)

        I.atomic_write_json = killed_mid_write
        I.build_index({str(tiny_model)!r}, {str(corpus)!r}, {str(out)!r}, dtype="fp32", progress=False)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    work = tmp_path / "idx.partial"
    assert proc.returncode == -9, proc.stderr
    left = sorted(p.name for p in work.iterdir())
    assert len(left) == 2 and left[0] == ".bertkit-output.lock" and left[1].startswith(".key."), left
    rc, _, err = run(capsys, "index", "--model", tiny_model, "--input", corpus, "--output", out)
    assert rc == 0, err
    assert json.loads((out / "meta.json").read_text(encoding="utf-8"))["count"] == len(TEXTS) and not work.exists()


def test_an_index_a_live_run_builds_is_refused_and_freed_when_that_run_is_killed(capsys, tmp_path, tiny_model):
    """A second `index` on an output a live `index` is building (even with --overwrite, which would
    clear the work folder under it) is refused, naming the first; a killed builder frees it at once."""
    import csv
    import time

    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        sentences = [r["text"] for r in csv.DictReader(f)]
    out, work = tmp_path / "idx", tmp_path / "idx.partial"
    env = dict(os.environ, OMP_NUM_THREADS="1")  # MiniLM on one thread: many seconds of chunks
    args = ["--model", asset_path("minilm"), "--output", out, "--truncation", "cut"]  # chunks of 2,048 texts
    first = subprocess.Popen(
        [sys.executable, "-m", "bertkit", "index", "--input", _corpus(tmp_path, sentences * 8), *map(str, args)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (work / "000001.npy").exists():
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "no second chunk within 120 s"
            time.sleep(0.2)
        rc, _, err = run(capsys, "index", "--input", _corpus(tmp_path, TEXTS, "small.txt"), *args, "--overwrite")
        assert rc == 1 and f"is being written by `bertkit index` (process {first.pid}" in one_error_line(err)
        assert first.poll() is None and (work / "000000.npy").is_file() and (work / "key").is_file()
    finally:
        first.kill()  # as a crash or `kill -9` would
        first.wait(timeout=60)
    small = _corpus(tmp_path, TEXTS, "small.txt")
    rc, _, err = run(capsys, "index", "--model", tiny_model, "--input", small, "--output", out, "--overwrite")
    assert rc == 0, err
    assert json.loads((out / "meta.json").read_text())["count"] == len(TEXTS) and not work.exists()


def test_a_change_to_an_index_another_process_is_changing_is_refused(capsys, tmp_path, tiny_model):
    """`index --append` reads, adds and publishes the whole index: beside another change in flight it
    would lose that one's rows, so it is refused, naming the holder; once that one is done it runs."""
    out = tmp_path / "idx"
    args = ["--model", tiny_model, "--output", out]
    assert run(capsys, "index", "--input", _corpus(tmp_path, TEXTS[:3], "a.txt"), *args)[0] == 0
    holder = subprocess.Popen(  # a change in flight: `bertkit index --append` holding the index's lock
        [
            sys.executable,
            "-c",
            f"from bertkit._folders import held; import sys\nwith held({str(out)!r}, "
            "'index', str): print('held', flush=True); sys.stdin.readline()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        rc, _, err = run(capsys, "index", "--input", _corpus(tmp_path, TEXTS, "b.txt"), *args, "--append")
        assert rc == 1 and f"is being written by `bertkit index` (process {holder.pid}" in one_error_line(err)
    finally:
        holder.communicate("\n", timeout=60)
    assert json.loads((out / "meta.json").read_text())["count"] == 3  # nothing changed meanwhile
    rc, _, err = run(capsys, "index", "--input", _corpus(tmp_path, TEXTS, "b.txt"), *args, "--append")
    assert rc == 0, err
    assert json.loads((out / "meta.json").read_text())["count"] == len(TEXTS)
    assert not (out / ".bertkit-output.lock").exists()


def test_export_onnx_refuses_an_opset_newer_than_onnx_knows(capsys, tmp_path, tiny_model):
    onnx = pytest.importorskip("onnx")
    newest = onnx.defs.onnx_opset_version()
    rc, _, err = run(
        capsys, "export", "onnx", "--model", tiny_model, "--output", tmp_path / "m.onnx", "--opset", newest + 1
    )
    assert rc == 1 and f"up to {newest}" in one_error_line(err) and not (tmp_path / "m.onnx").exists()


def test_one_requests_bad_input_does_not_fail_the_requests_sharing_its_batch():
    """The batcher runs a failed batch again job by job: only the job whose input fails gets the error."""
    import asyncio

    from bertkit.serving.batcher import Batcher
    from bertkit.serving.metrics import Metrics

    def runner(items: list[str]) -> list[str]:
        if "bad" in items:
            raise ValueError("bad input")
        return [x.upper() for x in items]

    async def main() -> list:
        batcher = Batcher({"k": runner}, Metrics(), max_batch_size=8, max_wait_ms=500)
        jobs = [batcher.submit("k", [x], 1) for x in ("a", "bad", "c")]
        out = await asyncio.gather(*(j.future for j in jobs), return_exceptions=True)
        await asyncio.to_thread(batcher.close)
        return out

    a, bad, c = asyncio.run(main())
    assert a == ["A"] and c == ["C"] and isinstance(bad, ValueError)
