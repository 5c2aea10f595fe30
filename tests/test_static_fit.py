"""`bertkit train-embedder` on a static folder: its table trains with the losses that apply, a killed
run resumes to the same vectors, cached MNRL equals MNRL on flat ids, and the output loads in model2vec
and sentence-transformers with bertkit's vectors; `--loss mse --teacher` fits the vectors of unlabeled
texts to a teacher's, projected into the static model's axes.

The static folder is distilled from a small random BERT with MiniLM's real tokenizer (as in
tests/test_static.py); the texts are real polarity sentences."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from test_static import teacher  # noqa: F401  (the small random teacher, a module fixture)

from bertkit.assets import asset_path
from bertkit.cli import main

FAST = ["--batch-size", "8", "--no-progress", "--lr", "0.05"]


@pytest.fixture(scope="module")
def static(teacher, tmp_path_factory):
    from bertkit.sentence.distill_static import distill_static

    out = tmp_path_factory.mktemp("static") / "bk"
    distill_static(teacher, out, dims=16, dtype="fp32")
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Pairs (a sentence, the next one of the same polarity) and the sentences alone, as a corpus."""
    d = tmp_path_factory.mktemp("fit-data")
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)][:64]
    pairs = [{"anchor": a, "positive": b} for a, b in zip(texts[::2], texts[1::2])]
    (d / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    (d / "texts.txt").write_text("\n".join(texts) + "\n")
    return d


def _table(folder):
    return load_file(str(folder / "model.safetensors"))["embeddings"]


def _run(static, train, out, *flags):
    return main(["train-embedder", "--model", str(static), "--train", str(train), "--output", str(out), *FAST, *flags])


def test_mnrl_trains_the_table_and_the_output_loads_in_model2vec_and_sentence_transformers(static, data, tmp_path):
    model2vec = pytest.importorskip("model2vec")
    st = pytest.importorskip("sentence_transformers")
    from bertkit import SentenceTransformer

    out = tmp_path / "mnrl"
    assert _run(static, data / "pairs.jsonl", out, "--max-steps", "3") == 0
    assert not torch.equal(_table(out), _table(static))  # it trained
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3] and (out / "metrics.png").is_file()
    texts = (data / "texts.txt").read_text().splitlines()[:8]
    ours = SentenceTransformer(str(out)).encode(texts)
    theirs = st.SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(ours, theirs, atol=1e-6)
    m2v = model2vec.StaticModel.from_pretrained(str(out)).encode(texts)
    cos = (ours * m2v).sum(1) / np.linalg.norm(m2v, axis=1)
    assert cos.min() >= 0.999  # model2vec's own encode rule (it drops [UNK]), as tests/test_static.py says
    assert json.loads((out / "config.json").read_text())["apply_pca"] == 16  # the distil's record is kept


def test_cached_mnrl_equals_mnrl_and_matryoshka_and_cosent_train(static, data, tmp_path):
    """GradCache over slices of flat ids and offsets gives MNRL's steps; Matryoshka and CoSENT run."""
    assert _run(static, data / "pairs.jsonl", tmp_path / "plain", "--max-steps", "2") == 0
    cached = ["--loss", "cached-mnrl", "--mini-batch-size", "3", "--max-steps", "2"]
    assert _run(static, data / "pairs.jsonl", tmp_path / "cached", *cached) == 0
    torch.testing.assert_close(_table(tmp_path / "cached"), _table(tmp_path / "plain"), atol=1e-6, rtol=1e-5)
    assert _run(static, data / "pairs.jsonl", tmp_path / "mat", "--matryoshka-dims", "16,8", "--max-steps", "2") == 0
    assert not torch.equal(_table(tmp_path / "mat"), _table(static))
    scored = tmp_path / "sts.jsonl"
    pairs = [json.loads(x) for x in (data / "pairs.jsonl").read_text().splitlines()]
    rows = [{"sentence1": r["anchor"], "sentence2": r["positive"], "score": i % 3 / 2} for i, r in enumerate(pairs)]
    scored.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _run(static, scored, tmp_path / "cosent", "--loss", "cosent", "--max-steps", "2") == 0
    assert not torch.equal(_table(tmp_path / "cosent"), _table(static))


def test_teacher_fit_resumes_after_a_kill_without_the_teacher(static, teacher, data, tmp_path, monkeypatch):
    """--loss mse --teacher: the targets are the teacher's vectors projected into the static model's
    axes, the fit brings the model's vectors closer to them, and a killed run resumes to the same
    table from its checkpoint and the targets kept in the output (the teacher is not run again)."""
    import bertkit.sentence.static_fit as SF
    from bertkit.training import trainer as T

    common = ["--loss", "mse", "--teacher", str(teacher), "--max-steps", "4", "--save-every", "2"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert _run(static, data / "texts.txt", full, *common) == 0
    original = T.Trainer._maybe_eval_or_save

    def killed_after_step_2(self, *args):
        original(self, *args)
        if self.step == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(T.Trainer, "_maybe_eval_or_save", killed_after_step_2)
    assert _run(static, data / "texts.txt", cut, *common) == 130
    monkeypatch.setattr(T.Trainer, "_maybe_eval_or_save", original)

    def no_teacher(*args, **kwargs):
        raise AssertionError("the resumed run ran the teacher again")

    monkeypatch.setattr(SF, "teacher_targets", no_teacher)
    assert _run(static, data / "texts.txt", cut, *common, "--resume") == 0
    torch.testing.assert_close(_table(cut), _table(full), atol=0, rtol=0)
    losses = [json.loads(x).get("loss") for x in (full / "metrics.jsonl").read_text().splitlines()]
    assert losses[:4] == [json.loads(x).get("loss") for x in (cut / "metrics.jsonl").read_text().splitlines()][:4]

    targets = np.load(full / SF.TARGETS)
    texts = list(dict.fromkeys((data / "texts.txt").read_text().splitlines()))
    assert targets.shape == (len(texts), 16)
    np.testing.assert_allclose(np.linalg.norm(targets, axis=1), 1, atol=1e-5)  # the static model normalises

    def error(folder):
        got = SF.load_static_encoder(folder).encode(texts).numpy()
        return float(((got - targets) ** 2).mean())

    assert error(full) < error(static)


def test_projection_recovers_a_rotated_copy():
    """A teacher that is the student's centred vectors turned by a rotation, padded with empty
    dimensions, projects back onto the student's centred vectors exactly."""
    from bertkit.sentence.static_fit import project_teacher

    rng = np.random.default_rng(0)
    student = rng.normal(size=(200, 8)) * np.linspace(3, 1, 8) + 5.0
    centred = student - student.mean(0)
    q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    teacher = np.concatenate([centred @ q, np.zeros((200, 4))], axis=1) + 2.0
    got = project_teacher(teacher.astype(np.float32), student.astype(np.float32), normalize=False)
    np.testing.assert_allclose(got, centred, atol=1e-3)
    with pytest.raises(ValueError, match="16 dimensions, more than the teacher's 12"):
        project_teacher(teacher, np.zeros((200, 16)))


def test_bad_flags_get_one_line(static, teacher, data, tmp_path, capsys):
    out = str(tmp_path / "o")
    for flags, message in (
        (["--loss", "mse"], "--loss mse needs --teacher"),
        (["--teacher", str(teacher)], "--teacher"),
        (["--loss", "mse", "--teacher", str(teacher), "--matryoshka-dims", "8"], "--matryoshka-dims is not for"),
        (["--pooling", "cls"], "--pooling is not for a static model"),
        (["--max-length", "32"], "--max-length is not for a static model"),
    ):
        assert _run(static, data / "pairs.jsonl", out, *flags) == 1
        err = capsys.readouterr().err
        assert message in err.splitlines()[0] and err.startswith("bertkit train-embedder: error: "), err
    assert not (tmp_path / "o").exists()
