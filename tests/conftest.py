"""Shared test set-up: find the real assets that `make assets` fetched into the repo's .assets/."""

import os
from pathlib import Path

_REPO_ASSETS = Path(__file__).resolve().parents[1] / ".assets"
if "BERTKIT_ASSETS" not in os.environ and _REPO_ASSETS.is_dir():
    os.environ["BERTKIT_ASSETS"] = str(_REPO_ASSETS)


import pytest


@pytest.fixture(scope="session", autouse=True)
def _temp_files_in_basetemp(tmp_path_factory):
    """Point TMPDIR (this process's and its children's) into pytest's base folder: a training run a
    test kills mid-way cannot clean its own temporary folders, and there they go with the rest."""
    import tempfile

    folder = tmp_path_factory.mktemp("tmp", numbered=False)
    before = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(folder), str(folder)
    yield folder
    if before[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before[0]
    tempfile.tempdir = before[1]


class Dataset:
    """A datasets.Dataset as sentence-transformers' samplers and bertkit read one: ``column_names``,
    a column by name, a row by index, ``remove_columns``."""

    def __init__(self, columns: dict) -> None:
        self.columns = columns
        self.column_names = list(columns)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.columns[key]
        return {c: v[key] for c, v in self.columns.items()}

    def remove_columns(self, names):
        return Dataset({c: v for c, v in self.columns.items() if c not in names})


def card_log_table(text: str) -> list[dict[str, str]]:
    """The rows of a model card's "Training Logs" table, each as {column: cell}."""
    lines = text.split("### Training Logs", 1)[1].strip().splitlines()
    lines = lines[: next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def finetune_polarity(out: Path, **settings) -> Path:
    """A small real fine-tune of MiniLM on polarity (1,600 sentences, one epoch) into ``out``;
    ``settings`` override the fine-tuning arguments (``device="cuda"``)."""
    from bertkit.assets import asset_path
    from bertkit.tasks import finetune

    args = dict(epochs=1, batch_size=32, lr=1e-4, max_length=64, max_train_samples=1600, seed=0)
    finetune(
        "text-classification",
        asset_path("minilm"),
        asset_path("polarity-train"),
        out,
        progress=False,
        quiet=True,
        **{**args, **settings},
    )
    return out


@pytest.fixture(scope="session")
def polarity_clf(tmp_path_factory):
    """A classifier folder whose accuracy means something (:func:`finetune_polarity`), shared by the
    precision and serving tests."""
    return finetune_polarity(tmp_path_factory.mktemp("polarity-clf") / "model")


@pytest.fixture(scope="session")
def distilbert_clf(tmp_path_factory):
    """A small DistilBERT sentiment classifier with random weights (MiniLM's WordPiece vocabulary),
    saved by bertkit's save_pretrained: a DistilBERT folder for serve, explain and the family tests."""
    import torch

    from bertkit.assets import asset_path
    from bertkit.modeling.distilbert import DistilBertConfig, DistilBertForSequenceClassification
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    cfg = DistilBertConfig(
        vocab_size=len(tok.vocab),
        dim=64,
        n_layers=2,
        n_heads=4,
        hidden_dim=128,
        max_position_embeddings=128,
        initializer_range=0.2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    torch.manual_seed(0)
    model = DistilBertForSequenceClassification(cfg).eval()
    out = tmp_path_factory.mktemp("distilbert-clf") / "model"
    model.save_pretrained(out, tokenizer=tok)
    return out


@pytest.fixture(scope="session")
def electra_clf(tmp_path_factory):
    """A small ELECTRA sentiment classifier with random weights (MiniLM's WordPiece vocabulary) and
    ``embedding_size < hidden_size``, saved by bertkit: an ELECTRA folder for serve and explain."""
    import torch

    from bertkit.assets import asset_path
    from bertkit.modeling.electra import ElectraConfig, ElectraForSequenceClassification
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    cfg = ElectraConfig(
        vocab_size=len(tok.vocab),
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
        initializer_range=0.2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(cfg).eval()
    out = tmp_path_factory.mktemp("electra-clf") / "model"
    model.save_pretrained(out, tokenizer=tok)
    return out


def without_dropout(folder: Path) -> str:
    """``folder``'s config.json with dropout off, in place (dropout masks cannot be matched across
    libraries); returns the folder as a string."""
    import json

    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def sentence_transformers_adamw(named_parameters, lr: float, weight_decay: float = 0.01):
    """The reference optimizer of sentence-transformers' fit, written out: torch's AdamW over two groups,
    ``weight_decay`` except on biases and LayerNorm weights."""
    import torch

    no_decay = ("bias", "LayerNorm.bias", "LayerNorm.weight")
    params = list(named_parameters)
    return torch.optim.AdamW(
        [
            {"params": [p for n, p in params if not any(k in n for k in no_decay)], "weight_decay": weight_decay},
            {"params": [p for n, p in params if any(k in n for k in no_decay)], "weight_decay": 0.0},
        ],
        lr=lr,
    )


def logged_losses(run_dir: Path) -> list[tuple[int, float]]:
    """(step, loss) of every training row in a run's metrics.jsonl."""
    import json

    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


def kill_when_written(cmd: list[str], marker: Path, env: dict | None = None, timeout: float = 300.0) -> None:
    """Run ``cmd`` (from the repository root) and SIGKILL it as soon as ``marker`` exists (a checkpoint
    folder, say): a failure names the run's stderr if it ended first, or the wait if it took too long."""
    import signal
    import subprocess
    import tempfile
    import time

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.time() + timeout
        while not Path(marker).exists():
            if proc.poll() is not None:
                err.seek(0)
                pytest.fail(f"the run ended before writing {marker}: {err.read()[-2000:]}")
            if time.time() > deadline:
                proc.kill()
                pytest.fail(f"the run wrote no {marker} within {timeout:g} s")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="session")
def lee() -> list[tuple[str, str, float]]:
    """STS-Lee: (document, document, human similarity score) rows."""
    import csv

    from bertkit.assets import asset_path

    with open(asset_path("sts-lee"), newline="", encoding="utf-8") as f:
        return [(r["sentence1"], r["sentence2"], float(r["score"])) for r in csv.DictReader(f)]


def seeded_head_folder(
    path: Path, labels: "int | dict[int, str]", seed: int, cls: str = "AutoModelForSequenceClassification"
) -> str:
    """MiniLM with a seeded head (std 0.5, so its scores spread) over ``labels`` (a count, or id2label
    names), saved by bertkit's save_pretrained; returns the folder as a string."""
    import torch

    from bertkit.assets import asset_path
    from bertkit.modeling import auto

    minilm = asset_path("minilm")
    kwargs: dict = (
        {"num_labels": labels}
        if isinstance(labels, int)
        else {
            "num_labels": len(labels),
            "id2label": labels,
            "label2id": {v: k for k, v in labels.items()},
        }
    )
    model = getattr(auto, cls).from_pretrained(minilm, **kwargs)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.randn(model.classifier.weight.shape, generator=gen) * 0.5)
        model.classifier.bias.copy_(torch.randn(model.classifier.bias.shape, generator=gen) * 0.5)
    model.save_pretrained(path, tokenizer=auto.AutoTokenizer.from_pretrained(minilm))
    return str(path)


def killed_run_resumes_exactly(cmd, tmp_path: Path, checkpoint: int, steps: int) -> tuple[dict, dict]:
    """The kill-and-resume check of a training script ``cmd(run_dir, resume "0"/"1", final_file)`` that
    saves its final weights with ``torch.save``: run uninterrupted in ``tmp_path/full``; run again in
    ``tmp_path/cut``, killed with SIGKILL once its step-``checkpoint`` checkpoint exists; resume it.
    Asserts the resumed run says where it resumed and logs the uninterrupted run's ``steps`` losses;
    returns both runs' final weights (one thread, so they can be compared bit for bit)."""
    import subprocess

    import torch

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full, cut = tmp_path / "full", tmp_path / "cut"
    r = subprocess.run(cmd(full, "0", tmp_path / "full.pt"), env=env, cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    kill_when_written(cmd(cut, "0", tmp_path / "cut.pt"), cut / "checkpoints" / f"step-{checkpoint:07d}", env)
    assert not (tmp_path / "cut.pt").exists()  # really interrupted before the end
    assert max(s for s, _ in logged_losses(cut)) < steps
    r = subprocess.run(cmd(cut, "1", tmp_path / "cut.pt"), env=env, cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resumed from" in r.stderr and f"step {checkpoint}" in r.stderr, r.stderr[-2000:]
    assert [s for s, _ in logged_losses(full)] == list(range(1, steps + 1))
    assert logged_losses(cut) == logged_losses(full)
    return torch.load(tmp_path / "full.pt"), torch.load(tmp_path / "cut.pt")
