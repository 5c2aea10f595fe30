"""A model id in the Hugging Face cache layout works wherever a model folder does.

Every entry point that takes a model (the pipelines, load_sentence_encoder, and the commands' --model,
--teacher and --rerank) is given an id that lives only in a cache under a temporary HF_HOME, and must
answer exactly as it does for the folder the snapshot was copied from; the pipelines must also agree
with transformers loading the same id from the same cache (HF_HUB_OFFLINE=1, fp32, atol 1e-4). An id
that is not in the cache is one line: the resolver's message, naming every place it looked.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main

HASH = "0123456789abcdef0123456789abcdef01234567"
ABSENT = "bertkit-test/not-in-the-cache"
NOT_FOUND = "is neither a local folder nor in the Hugging Face cache. Looked in: "
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["Barack Obama visited the Eiffel Tower in Paris on Tuesday.", "a gorgeous , witty , seductive movie ."]
MASKED = "paris is the [MASK] of france."
PROMPT = "the film was"
QUESTION = "Who built the lighthouse?"
CONTEXT = "The Bell Rock Lighthouse stands off the coast of Angus. It was built in 1810 by Robert Stevenson."
PASSAGES = ["a witty movie", "the tower in paris", "robert stevenson built it"]
IDS = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "bert": "bertkit-test/tiny-bert",
    "clf": "bertkit-test/tiny-polarity",
    "ner": "bertkit-test/tiny-ner",
    "qa": "bertkit-test/tiny-qa",
    "ce": "bertkit-test/tiny-cross-encoder",
    "gpt2": "bertkit-test/tiny-gpt2",
}


def _tiny_config(**kw):
    from bertkit.modeling import BertConfig

    return BertConfig(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=128,
        initializer_range=0.2,  # spread-out random weights: no near-ties between labels or spans
        **kw,
    )


def _save(model, folder: Path) -> Path:
    from bertkit.tokenization import BertTokenizer

    model.save_pretrained(folder, tokenizer=BertTokenizer.from_pretrained(asset_path("minilm")))
    return folder


def _finetune_argv(model: str | Path, output: Path) -> list[str]:
    return [
        "finetune",
        "--task",
        "text-classification",
        "--model",
        str(model),
        "--train",
        str(asset_path("polarity-train")),
        "--output",
        str(output),
        "--max-train-samples",
        "64",
        "--max-length",
        "32",
        "--batch-size",
        "16",
        "--epochs",
        "1",
        "--no-progress",
    ]


def _run(capsys, *argv) -> tuple[int, str, str]:
    """``bertkit ARGV`` in-process: (exit code, stdout, stderr); a traceback fails the test."""
    try:
        rc = cli_main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


def _cache_env() -> dict[str, str]:
    """HF_HOME pointing at this module's cache, and no other cache variable that could win over it."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME")}
    return env


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> dict:
    """The models as folders, and the same files as snapshots of an HF cache under ``home``:
    ``hub/models--org--name/refs/main`` names ``snapshots/<hash>/``, as huggingface_hub writes it."""
    import bertkit.modeling as bm
    from bertkit.modeling.gpt2 import GPT2Config, GPT2LMHeadModel

    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    folders = {
        "minilm": asset_path("minilm"),
        "bert": _save(bm.BertForPreTraining(_tiny_config()), root / "bert"),
        "ner": _save(
            bm.BertForTokenClassification(
                _tiny_config(id2label=dict(enumerate(NER_LABELS)), label2id={x: i for i, x in enumerate(NER_LABELS)})
            ),
            root / "ner",
        ),
        "qa": _save(bm.BertForQuestionAnswering(_tiny_config()), root / "qa"),
        "ce": _save(bm.BertForSequenceClassification(_tiny_config(num_labels=1)), root / "ce"),
        "gpt2": _save(
            GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=30522, n_positions=64)),
            root / "gpt2",
        ),
    }
    # a fine-tuned classifier (finetuning_task in its config): what evaluate, predict and distill take
    assert cli_main(_finetune_argv(folders["bert"], root / "clf")) == 0
    folders["clf"] = root / "clf"
    home = tmp_path_factory.mktemp("hf-home")
    snapshots = {}
    for key, model_id in IDS.items():
        repo = home / "hub" / ("models--" + model_id.replace("/", "--"))
        snapshots[key] = repo / "snapshots" / HASH
        shutil.copytree(folders[key], snapshots[key])
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(HASH, encoding="utf-8")
    return {"home": home, "folders": folders, "snapshots": snapshots}


@pytest.fixture(autouse=True)
def hf_home(hub, monkeypatch, tmp_path):
    """Every test resolves ids in the module's cache only (never the user's own cache)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(hub["home"]))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "bertkit-cache"))  # pretrain's prepared data
    monkeypatch.chdir(tmp_path)  # an id is never read as a path relative to where the command runs
    return hub["home"]


# ------------------------------------------------------------------------------------------ pipelines


def _answers(task: str, model: str | Path) -> object:
    """What the bertkit pipeline for ``task`` answers from ``model`` (a folder or an id)."""
    from bertkit import pipeline

    if task == "sentence-embedding":
        return np.asarray(pipeline(task, model=model)(TEXTS)).tolist()
    if task == "feature-extraction":
        return np.asarray(pipeline(task, model=model)(TEXTS[0])).tolist()
    if task == "text-classification":
        return pipeline(task, model=model)(TEXTS, top_k=None)
    if task == "ner":
        return pipeline(task, model=model)(TEXTS[0], ignore_labels=[])
    if task == "question-answering":
        return pipeline(task, model=model)(question=QUESTION, context=CONTEXT)
    if task == "fill-mask":
        return pipeline(task, model=model)(MASKED, top_k=5)
    if task == "text-generation":
        return pipeline(task, model=model)(PROMPT, max_new_tokens=5, do_sample=False)
    if task == "text-ranking":
        return pipeline(task, model=model)(TEXTS[1], PASSAGES)
    raise AssertionError(task)


PIPELINES = {
    "sentence-embedding": "minilm",
    "feature-extraction": "minilm",
    "text-classification": "clf",
    "ner": "ner",
    "question-answering": "qa",
    "fill-mask": "bert",
    "text-generation": "gpt2",
    "text-ranking": "ce",
}

# transformers' answers for the same ids, from the same cache, in a process of its own:
# huggingface_hub reads HF_HOME once, when it is imported.
_REFERENCE = r"""
import json, sys
import torch, transformers
ids, texts, masked, prompt, question, context, passages = json.loads(sys.argv[1])
pipe = lambda task, key, **kw: transformers.pipeline(task, model=ids[key], device="cpu", **kw)
out = {}
fe = pipe("feature-extraction", "minilm")
tokens = [torch.tensor(fe(t)[0]) for t in texts]
out["sentence-embedding"] = [torch.nn.functional.normalize(h.mean(0), dim=-1).tolist() for h in tokens]
out["feature-extraction"] = fe(texts[0])
out["text-classification"] = pipe("text-classification", "clf")(texts, top_k=None)
out["ner"] = pipe("ner", "ner")(texts[0], ignore_labels=[])
out["fill-mask"] = pipe("fill-mask", "bert")(masked, top_k=5)
out["text-generation"] = pipe("text-generation", "gpt2")(prompt, max_new_tokens=5, do_sample=False)
ranker = pipe("text-classification", "ce", function_to_apply="none")
out["text-ranking"] = [ranker({"text": texts[1], "text_pair": p})["score"] for p in passages]
# transformers 5 has no question-answering pipeline: the best span of its model, as bertkit picks it
tok = transformers.AutoTokenizer.from_pretrained(ids["qa"])
qa = transformers.AutoModelForQuestionAnswering.from_pretrained(ids["qa"]).eval()
enc = tok(question, context, return_offsets_mapping=True, return_tensors="pt")
offsets = enc.pop("offset_mapping")[0].tolist()
with torch.no_grad():
    logits = qa(**enc)
st, en = logits.start_logits[0], logits.end_logits[0]
ctx = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
_, i, j = max(((st[i] + en[j]).item(), i, j) for i in ctx for j in ctx if i <= j < i + 15)
out["question-answering"] = {"start": offsets[i][0], "end": offsets[j][1]}
print(json.dumps(out, default=float))
"""


@pytest.fixture(scope="module")
def transformers_answers(hub) -> dict:
    pytest.importorskip("transformers")
    env = {**_cache_env(), "HF_HOME": str(hub["home"]), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["HF_HUB_CACHE"] = str(hub["home"] / "hub")  # never the user's own cache, which might hold MiniLM
    args = json.dumps([IDS, TEXTS, MASKED, PROMPT, QUESTION, CONTEXT, PASSAGES])
    done = subprocess.run(
        [sys.executable, "-c", _REFERENCE, args], env=env, capture_output=True, text=True, timeout=600, cwd=hub["home"]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("task", list(PIPELINES))
def test_pipeline_from_an_id_answers_as_from_its_folder(hub, task):
    key = PIPELINES[task]
    assert _answers(task, IDS[key]) == _answers(task, hub["folders"][key])


@pytest.mark.parametrize("task", list(PIPELINES))
def test_pipeline_from_an_id_agrees_with_transformers_from_the_same_cache(transformers_answers, task):
    ours, theirs = _answers(task, IDS[PIPELINES[task]]), transformers_answers[task]
    if task in ("sentence-embedding", "feature-extraction"):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-4)
    elif task in ("text-classification", "ner", "fill-mask"):
        rows = list(itertools.chain.from_iterable(ours)) if task == "text-classification" else ours
        want = list(itertools.chain.from_iterable(theirs)) if task == "text-classification" else theirs
        keys = {"text-classification": ("label",), "ner": ("entity", "index", "word", "start", "end")}.get(
            task, ("token", "token_str", "sequence")
        )
        assert len(rows) == len(want) > 0
        assert [[r[k] for k in keys] for r in rows] == [[r[k] for k in keys] for r in want]
        np.testing.assert_allclose([r["score"] for r in rows], [r["score"] for r in want], atol=1e-4)
    elif task == "question-answering":
        assert (ours["start"], ours["end"]) == (theirs["start"], theirs["end"])
        assert ours["answer"] == CONTEXT[ours["start"] : ours["end"]]
    elif task == "text-generation":
        assert ours == theirs
    elif task == "text-ranking":
        scores = sorted((r["index"], r["score"]) for r in ours)
        np.testing.assert_allclose([s for _, s in scores], theirs, atol=1e-4)


def test_a_pipeline_reads_the_sentence_transformers_files_of_the_snapshot(hub, tmp_path):
    """The pooling comes from the snapshot's own 1_Pooling/config.json: with CLS pooling there, the id
    gives CLS vectors (a lookup that read the id as a relative path would find no such file)."""
    from bertkit import pipeline

    snap = hub["snapshots"]["minilm"]
    pooling = snap / "1_Pooling" / "config.json"
    saved = pooling.read_text(encoding="utf-8")
    cfg = json.loads(saved)
    cfg.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    try:
        pooling.write_text(json.dumps(cfg), encoding="utf-8")
        emb = pipeline("sentence-embedding", model=IDS["minilm"])
        assert emb.pooling == "cls" and emb.folder == snap
    finally:
        pooling.write_text(saved, encoding="utf-8")


def test_load_sentence_encoder_from_an_id(hub):
    from bertkit.modeling.sentence import load_sentence_encoder

    by_id = load_sentence_encoder(IDS["minilm"])
    by_folder = load_sentence_encoder(hub["folders"]["minilm"])
    assert (by_id.pooling, by_id.normalize, by_id.max_seq_length) == ("mean", True, 256)  # its ST files
    torch.testing.assert_close(by_id.encode(TEXTS), by_folder.encode(TEXTS), rtol=0, atol=0)


def test_an_absent_id_in_the_python_api_names_every_place_looked(hub):
    from bertkit import pipeline
    from bertkit.modeling.sentence import load_sentence_encoder

    for call in (lambda: pipeline("sentence-embedding", model=ABSENT), lambda: load_sentence_encoder(ABSENT)):
        with pytest.raises(FileNotFoundError, match=NOT_FOUND) as e:
            call()
        assert str(hub["home"] / "hub" / "models--bertkit-test--not-in-the-cache") in str(e.value)


# --------------------------------------------------------------------------------- inference commands


def _same_stdout(capsys, argv: list, key: str, hub: dict) -> str:
    """Run ``argv`` with the model given as its id, then as its folder: the same exit 0 and stdout."""
    i = argv.index("MODEL")
    rc_id, out_id, _ = _run(capsys, *argv[:i], IDS[key], *argv[i + 1 :])
    rc_dir, out_dir, _ = _run(capsys, *argv[:i], hub["folders"][key], *argv[i + 1 :])
    assert rc_id == rc_dir == 0
    assert out_id == out_dir and out_id.strip()
    return out_id


def test_generate_fill_mask_and_inspect_take_an_id(capsys, hub):
    _same_stdout(capsys, ["generate", "--model", "MODEL", PROMPT, "--max-new-tokens", "5"], "gpt2", hub)
    _same_stdout(capsys, ["fill-mask", "--model", "MODEL", MASKED, "--top-k", "3"], "bert", hub)
    _same_stdout(capsys, ["inspect", "MODEL", "--json"], "ce", hub)


def test_evaluate_and_predict_take_an_id(capsys, hub, tmp_path):
    data = ["--data", asset_path("polarity-test"), "--max-length", "32", "--no-progress"]
    _same_stdout(capsys, ["evaluate", "--model", "MODEL", *data], "clf", hub)
    _same_stdout(capsys, ["predict", "--model", "MODEL", "--input", *data[1:]], "clf", hub)
    # an output inside the cached model is refused, as one inside a model folder is
    inside = hub["snapshots"]["clf"] / "preds.jsonl"
    rc, _, err = _run(capsys, "predict", "--model", IDS["clf"], "--input", data[1], "--output", inside)
    assert rc == 1 and not inside.exists() and str(hub["snapshots"]["clf"]) in err, err


def test_index_and_search_take_an_id(capsys, hub, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join([*TEXTS, *PASSAGES, "the weather is cold today"]) + "\n", encoding="utf-8")
    built = {}
    for how, model in (("id", IDS["minilm"]), ("folder", hub["folders"]["minilm"])):
        out = tmp_path / f"index-{how}"
        argv = ["index", "--model", model, "--input", corpus, "--output", out, "--dtype", "fp32"]
        assert _run(capsys, *argv)[0] == 0
        built[how] = out
    np.testing.assert_array_equal(np.load(built["id"] / "vectors.npy"), np.load(built["folder"] / "vectors.npy"))
    # the index records the snapshot, so `bertkit search` finds the model again without the cache settings
    assert json.loads((built["id"] / "meta.json").read_text())["model"] == str(hub["snapshots"]["minilm"].resolve())
    query = ["a film", "--dtype", "fp32", "--top-k", "3"]
    searched = []
    for argv in (
        ["search", "--index", built["id"], *query],
        ["search", "--index", built["folder"], "--model", IDS["minilm"], *query],
        ["search", "--index", built["folder"], *query],
        ["search", "--index", built["folder"], *query, "--rerank", IDS["ce"]],
        ["search", "--index", built["folder"], *query, "--rerank", hub["folders"]["ce"]],
    ):
        rc, out, err = _run(capsys, *argv)
        assert rc == 0, err
        searched.append(out)
    assert searched[0] == searched[1] == searched[2] and searched[3] == searched[4] != searched[2]
    # --append checks the model against the one the index was built with: the id is that model
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "new", "text": "a new line about paris"}) + "\n", encoding="utf-8")
    argv = ["index", "--model", IDS["minilm"], "--input", more, "--output", built["id"], "--append"]
    rc, _, err = _run(capsys, *argv)
    assert rc == 0, err
    assert json.loads((built["id"] / "meta.json").read_text())["count"] == 7


def test_evaluate_embeddings_takes_an_id(capsys, hub, tmp_path):
    sts = tmp_path / "sts.jsonl"
    rows = [{"sentence1": a, "sentence2": b, "score": s} for a, b, s in zip(PASSAGES, TEXTS * 2, (1, 3, 5))]
    sts.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    results = {}
    for how, model in (("id", IDS["minilm"]), ("folder", hub["folders"]["minilm"])):
        out = tmp_path / f"{how}.json"
        argv = ["evaluate-embeddings", "--model", model, "--sts", sts, "--output", out, "--no-progress"]
        rc, _, err = _run(capsys, *argv)
        assert rc == 0, err
        results[how] = json.loads(out.read_text())
    inside = hub["snapshots"]["minilm"] / "results.json"
    rc, _, err = _run(capsys, "evaluate-embeddings", "--model", IDS["minilm"], "--sts", sts, "--output", inside)
    assert rc == 1 and not inside.exists() and str(hub["snapshots"]["minilm"]) in err, err
    assert results["id"].pop("model") == IDS["minilm"]
    results["folder"].pop("model")
    assert results["id"] == results["folder"] and results["id"]["sts"]


def test_serve_takes_an_id(capsys, hub):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from bertkit.serving.app import ServeConfig, create_app

    got = {}
    for how, model in (("id", IDS["minilm"]), ("folder", str(hub["folders"]["minilm"]))):
        with TestClient(create_app(ServeConfig(model=model, dtype="fp32"))) as client:
            r = client.post("/embed", json={"inputs": TEXTS})
            assert r.status_code == 200, r.text
            got[how] = r.json()["embeddings"]
            info = client.get("/info").json()
            assert info["model"] == str(Path(hub["folders" if how == "folder" else "snapshots"]["minilm"]).resolve())
            listed = client.get("/v1/models")
            if how == "id" and listed.status_code == 200:  # the served name is the id's, not the snapshot hash
                assert HASH not in listed.text
    assert got["id"] == got["folder"]


def test_serve_refuses_a_text_generator_id_before_loading_it(hub):
    from bertkit.serving.serve_cli import _check_encoder

    with pytest.raises(ValueError, match=f"--model {IDS['gpt2']} is a gpt2 model"):
        _check_encoder(IDS["gpt2"])
    _check_encoder(IDS["minilm"])  # an encoder passes


def test_export_takes_an_id_and_never_writes_into_the_cache(capsys, hub, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    outputs = {}
    for how, model in (("id", IDS["ce"]), ("folder", hub["folders"]["ce"])):
        out = tmp_path / f"{how}.onnx"
        rc, _, err = _run(capsys, "export", "onnx", "--model", model, "--output", out)
        assert rc == 0, err
        ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        outputs[how] = ort.InferenceSession(str(out)).run(None, feed)
    np.testing.assert_array_equal(outputs["id"][0], outputs["folder"][0])
    inside = hub["snapshots"]["ce"] / "model.onnx"
    rc, _, err = _run(capsys, "export", "onnx", "--model", IDS["ce"], "--output", inside)
    assert rc == 1 and not inside.exists() and str(hub["snapshots"]["ce"]) in err, err


# ---------------------------------------------------------------------------------- training commands


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and wa
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0, msg=k)


def _train_both(capsys, hub, tmp_path, key: str, argv: list) -> tuple[Path, Path]:
    """``argv`` (MODEL and OUT placeholders) run from the id and from the folder: two outputs. An
    output inside the id's snapshot is refused first, as one inside an input folder is."""
    inside = hub["snapshots"][key] / "run"
    rc, _, err = _run(capsys, *[IDS[key] if a == "MODEL" else inside if a == "OUT" else a for a in argv])
    assert rc == 1 and "own input" in err and not inside.exists(), err
    outs = []
    for how, model in (("id", IDS[key]), ("folder", hub["folders"][key])):
        out = tmp_path / how
        line = [model if a == "MODEL" else out if a == "OUT" else a for a in argv]
        rc, _, err = _run(capsys, *line)
        assert rc == 0, err
        outs.append(out)
    return outs[0], outs[1]


def test_finetune_from_an_id_trains_the_same_model(capsys, hub, tmp_path):
    by_id = tmp_path / "by-id"
    rc, _, err = _run(capsys, *_finetune_argv(IDS["bert"], by_id))
    assert rc == 0, err
    _assert_same_weights(by_id, hub["folders"]["clf"])  # the fixture's run, from the folder
    # the cached model is an input: an output inside the snapshot is refused and nothing is written there
    inside = hub["snapshots"]["bert"] / "run"
    rc, _, err = _run(capsys, *_finetune_argv(IDS["bert"], inside))
    assert rc == 1 and "own input" in err and not inside.exists(), err


def test_distill_from_a_teacher_id(capsys, hub, tmp_path):
    argv = ["distill", "--teacher", "MODEL", "--train", asset_path("polarity-train"), "--output", "OUT"]
    argv += ["--student-layers", "1", "--max-steps", "2", "--batch-size", "4", "--max-length", "32", "--no-progress"]
    _assert_same_weights(*_train_both(capsys, hub, tmp_path, "clf", argv))


def test_train_embedder_from_an_id(capsys, hub, tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"anchor": a, "positive": p}) + "\n" for a, p in zip(PASSAGES, TEXTS * 2)))
    argv = ["train-embedder", "--model", "MODEL", "--train", train, "--output", "OUT", "--max-steps", "1"]
    argv += ["--batch-size", "3", "--max-length", "32", "--no-progress"]
    by_id, by_folder = _train_both(capsys, hub, tmp_path, "minilm", argv)
    _assert_same_weights(by_id, by_folder)
    # the pooling came from the snapshot's sentence-transformers files and is saved with the model
    assert json.loads((by_id / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"] is True


def test_train_reranker_from_an_id(capsys, hub, tmp_path):
    train = tmp_path / "train.jsonl"
    rows = [
        {"query": q, "passage": p, "label": int(i == j)} for i, q in enumerate(TEXTS) for j, p in enumerate(PASSAGES)
    ]
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["train-reranker", "--model", "MODEL", "--train", train, "--output", "OUT", "--max-steps", "1"]
    argv += ["--batch-size", "4", "--max-length", "32", "--no-progress"]
    _assert_same_weights(*_train_both(capsys, hub, tmp_path, "ce", argv))


def test_pretrain_from_an_id(capsys, hub, tmp_path):
    with open(asset_path("austen"), encoding="utf-8") as f:
        text = "".join(itertools.islice((line for line in f if line.strip()), 200))
    corpus = tmp_path / "austen.txt"
    corpus.write_text(text, encoding="utf-8")
    argv = ["pretrain", "--model", "MODEL", "--corpus", corpus, "--output", "OUT", "--max-steps", "2"]
    argv += ["--seq-len", "32", "--batch-size", "4", "--eval-every", "0", "--eval-instances", "8", "--no-progress"]
    _assert_same_weights(*_train_both(capsys, hub, tmp_path, "bert", argv))


# ------------------------------------------------------------------------------------ an absent id

# command -> (argv, the flag its error names: the one line says which argument held the absent id)
ABSENT_COMMANDS = {
    "generate": (["generate", "--model", ABSENT, PROMPT], "--model"),
    "fill-mask": (["fill-mask", "--model", ABSENT, MASKED], "--model"),
    "inspect": (["inspect", ABSENT], None),
    "explain": (["explain", "--model", ABSENT, "a film", "--json", "out.json"], None),
    "serve": (["serve", "--model", ABSENT], "--model"),
    "index": (["index", "--model", ABSENT, "--input", "CORPUS", "--output", "out"], "--model"),
    "search --model": (["search", "--index", "INDEX", "--model", ABSENT, "a film"], "--model"),
    "search --rerank": (["search", "--index", "INDEX", "--rerank", ABSENT, "a film"], "--rerank"),
    "evaluate-embeddings": (["evaluate-embeddings", "--model", ABSENT, "--sts", "CORPUS"], "--model"),
    "export": (["export", "onnx", "--model", ABSENT, "--output", "m.onnx"], "--model"),
    "evaluate": (["evaluate", "--model", ABSENT, "--data", "CORPUS"], "--model"),
    "predict": (["predict", "--model", ABSENT, "--input", "CORPUS"], "--model"),
    "finetune": (_finetune_argv(ABSENT, Path("out")), "--model"),
    "distill": (["distill", "--teacher", ABSENT, "--train", "CORPUS", "--output", "out"], "--teacher"),
    "train-embedder": (["train-embedder", "--model", ABSENT, "--train", "CORPUS", "--output", "out"], "--model"),
    "train-reranker": (["train-reranker", "--model", ABSENT, "--train", "CORPUS", "--output", "out"], "--model"),
    "pretrain": (["pretrain", "--model", ABSENT, "--corpus", "CORPUS", "--output", "out"], "--model"),
}


@pytest.fixture(scope="module")
def small_index(hub, tmp_path_factory) -> Path:
    from bertkit.search import build_index

    d = tmp_path_factory.mktemp("small-index")
    (d / "corpus.txt").write_text("\n".join(PASSAGES) + "\n", encoding="utf-8")
    return build_index(hub["folders"]["minilm"], d / "corpus.txt", d / "index", progress=False, dtype="fp32")


@pytest.mark.parametrize("name", list(ABSENT_COMMANDS))
def test_an_absent_id_is_one_line_naming_every_place_looked(capsys, hub, tmp_path, small_index, name):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("text,label\na film,1\n", encoding="utf-8")
    subs = {"CORPUS": corpus, "INDEX": small_index}
    argv, flag = ABSENT_COMMANDS[name]
    rc, _, err = _run(capsys, *[subs.get(a, a) if isinstance(a, str) else a for a in argv])
    lines = [line for line in err.splitlines() if line.startswith("bertkit ")]
    assert rc == 1 and len(lines) == 1, err
    said = lines[0].split(": error: ", 1)[1]
    assert said.startswith(f"{flag}: " if flag else "model "), said
    assert f"model '{ABSENT}' {NOT_FOUND}" in said
    assert str(hub["home"] / "hub" / "models--bertkit-test--not-in-the-cache") in said
    assert not (tmp_path / "out").exists()
