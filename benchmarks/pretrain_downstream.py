"""Pretraining judged downstream: pretrain for N minutes, then fine-tune on polarity and BBC News.

    python benchmarks/pretrain_downstream.py --out runs/downstream [--minutes 60] [--seeds 5]
        [--objective mlm|electra|mlm+nsp] [--corpus NAME|FILE ...] [--in-domain] [--vocab-size N] [--at 20,40,60]
        [--pretrain-args "--mask-rate 0.2"]
        [--max-train N] [--max-test N] [--dev N] [--skip minilm,tfidf] [--threads 2] [--nproc 2 --threads 1]
    python benchmarks/pretrain_downstream.py --curves curves.png --runs runs/a=label runs/b=label

One resumable job in ``--out``: run it again after a kill and it continues where it stopped.

1. ``pretrain/``: `bertkit pretrain --recipe cpu-hour` (``--config mini``, the bert-base-uncased
   vocabulary, ``--max-minutes`` = ``--minutes``, ``--eval-data`` = both test splits, so a corpus
   holding test text is refused), resumed with ``--resume`` when a run is there. The corpus is
   Austen, Wikipedia and BBC News' training split by default (``wordnet`` and ``fortunes`` name
   more general text: WordNet's glosses, Debian's fortune cookies); ``--in-domain`` adds the polarity
   asset's 1,500 full reviews and the polarity training split's texts (no labels). Corpus names
   that come from task files are written to ``corpus/`` as JSONL without any text of a test split
   (BBC News repeats some articles in both splits). While it trains, the checkpoint closest to
   each minute of ``--at`` is copied to ``at-Mmin/`` (the last one is the final model), so one run
   gives quality per CPU-minute.
2. Fine-tuning with bertkit's finetune API on the seeded 80/20 splits of the assets (the settings of
   ``benchmarks/finetune_results.py``, every layer trained), ``--seeds`` seeds each, for each
   ``at-Mmin`` model, a random initialisation of the same config, and MiniLM. One JSON per run
   in ``results/``; runs already there are skipped. ``--dev N`` scores on the last N examples of
   each training split instead, training on the rest, so that fine-tuning settings (``--set``) are
   chosen without looking at the test split.
3. A TF-IDF + logistic-regression baseline (unigrams and bigrams, sublinear tf, L2-regularised
   multinomial regression fit by L-BFGS; numpy/scipy only) on the same splits.

Prints mean ± std over seeds of the last epoch's score (the baseline is deterministic) and writes
``table.md``. Each result also keeps the score after every epoch and the best of them: finetune
keeps its best epoch on the file it validates on, which here is the test split, so that best is
chosen on test and is shown only beside rows that were scored that way. Differences
under about 3 points are noise on 800 test sentences.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "src"))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from finetune_results import RUNS, epoch_rows  # noqa: E402  (the fine-tuning settings live in one place)

from bertkit.assets import asset_path  # noqa: E402

TASKS = ("polarity", "bbcnews")
MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generator",
)


def _say(msg: str) -> None:
    print(f"[downstream] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- 1. pretraining


def _train_seconds(ckpt: Path) -> float | None:
    import torch

    try:
        return float(torch.load(ckpt / "trainer_state.pt", weights_only=False).get("train_seconds", 0.0))
    except (OSError, RuntimeError, EOFError):
        return None  # pruned or being published while we looked


def _copy_model(src: Path, dst: Path, seconds: float) -> None:
    """Model files of ``src`` into ``dst`` (replaced as a whole), with the training seconds beside them."""
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for name in MODEL_FILES:
            if (src / name).is_dir():
                shutil.copytree(src / name, tmp / name)
            elif (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
    except FileNotFoundError:  # pruned while copying: the next checkpoint will do
        shutil.rmtree(tmp, ignore_errors=True)
        return
    (tmp / "train_seconds.json").write_text(json.dumps({"train_seconds": seconds}))
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)


def _watch(out: Path, targets: list[float], proc: subprocess.Popen) -> None:
    """Copy the checkpoint closest to each target minute while ``proc`` trains."""
    best = {t: abs(_seconds_of(out / f"at-{t:g}min") - 60 * t) for t in targets[:-1]}
    seen: set[str] = set()
    while True:
        done = proc.poll() is not None
        offsets = _phase_offsets(out / "pretrain")
        for ckpt in sorted((out / "pretrain").glob("phase*/checkpoints/step-*")):
            key = f"{ckpt.parent.parent.name}/{ckpt.name}"
            if key in seen or ckpt.name.endswith(".tmp") or ckpt.parent.parent.name not in offsets:
                continue
            s = _train_seconds(ckpt)
            if s is None:
                continue
            s += offsets[ckpt.parent.parent.name]
            seen.add(key)
            for t in best:  # within a quarter of the target, so that a short run does not fake an early one
                if abs(s - 60 * t) < min(best[t], 15 * t):
                    _copy_model(ckpt, out / f"at-{t:g}min", s)
                    best[t] = abs(s - 60 * t)
        if done:
            return
        time.sleep(2.0)


def _seconds_of(folder: Path) -> float:
    f = folder / "train_seconds.json"
    return json.loads(f.read_text())["train_seconds"] if f.is_file() else float("inf")


def _phase_offsets(run: Path) -> dict[str, float]:
    """Seconds of training before each phase of the recipe run in ``run`` (finished phases only)."""
    state = run / "recipe.json"
    if not state.is_file():
        return {"phase1": 0.0}
    st = json.loads(state.read_text())
    offsets, used = {}, 0.0
    for ph in st["phases"]:
        offsets[ph["name"]] = used
        if ph["name"] not in st["done"]:
            break
        used += 60.0 * float(st["done"][ph["name"]])
    return offsets


def pretrain(args: argparse.Namespace, out: Path, targets: list[float]) -> None:
    final = out / f"at-{targets[-1]:g}min"
    if (final / "config.json").is_file():
        return
    run = out / "pretrain"
    if (run / "model.safetensors").is_file():  # finished, killed before the copy
        _copy_model(run, final, _final_seconds(run))
        return
    corpus = corpus_files(args, out)
    vocab = learn_vocab(corpus, args.vocab_size, out) if args.vocab_size else asset_path("vocab-uncased")
    launcher = [sys.executable, "-m"]
    if args.nproc > 1:  # N processes in one DDP group (torchrun, next to this Python)
        port = socket.socket()
        port.bind(("127.0.0.1", 0))
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={args.nproc}",
            "--master_addr=127.0.0.1",
            f"--master_port={port.getsockname()[1]}",
            "-m",
        ]
        port.close()
    cmd = [
        *launcher,
        "bertkit",
        "pretrain",
        "--recipe",
        "cpu-hour",
        "--corpus",
        *corpus,
        "--eval-data",
        str(asset_path("polarity-test")),
        str(asset_path("bbcnews-test")),
        "--vocab",
        str(vocab),
        "--config",
        "mini",
        "--objective",
        args.objective,
        "--max-minutes",
        str(args.minutes),
        "--output",
        str(run),
        "--no-progress",
        *args.pretrain_args.split(),
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if (run / "recipe.json").is_file():
        cmd.append("--resume")
    _say(" ".join(cmd))
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE.parent / "src"), os.environ.get("PYTHONPATH")]))
    )
    proc = subprocess.Popen(cmd, cwd=HERE.parent, env=env)
    try:
        _watch(out, targets, proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.wait() != 0:
        raise SystemExit(f"pretraining failed (exit {proc.returncode}); run again to resume")
    _copy_model(run, final, _final_seconds(run))


def learn_vocab(corpus: list[str], size: int, out: Path) -> Path:
    """An uncased WordPiece vocabulary of ``size`` tokens learnt from the pretraining corpus itself
    (``bertkit train-vocab``'s trainer; kept in ``out`` and reused on a resumed run)."""
    from bertkit.tokenization import WordPieceTrainer

    path = out / f"vocab-{size}.txt"
    if not path.is_file():
        trainer = WordPieceTrainer(vocab_size=size, lowercase=True, show_progress=False)
        trainer.train(files=corpus)
        trainer.save(path)  # atomic: a killed run leaves no half-written vocabulary to reuse
        _say(f"learnt a {size}-token vocabulary from the corpus: {path}")
    return path


def _final_seconds(run: Path) -> float:
    st = json.loads((run / "recipe.json").read_text())
    return 60.0 * sum(float(m) for m in st["done"].values())


def curves(runs: list[str], png: Path) -> Path:
    """Held-out MLM accuracy against training minutes for each ``RUN[=label]`` (a ``--out`` folder of this
    benchmark): phase 1 solid, phase 2 dashed, each evaluated at its own sequence length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bertkit._text import read_jsonl
    from bertkit.training.plots import save_figure

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, spec in enumerate(runs):
        folder, _, label = spec.partition("=")
        run = Path(folder) / "pretrain"
        if not (run / "recipe.json").is_file():
            raise SystemExit(f"{run}: no recipe.json here; --runs takes folders written by --out")
        offsets = _phase_offsets(run)
        for name, offset in offsets.items():
            metrics = run / name / "metrics.jsonl"
            rows = [r for r in read_jsonl(metrics) if "eval_mlm_accuracy" in r] if metrics.is_file() else []
            if rows:
                x = [(offset + r["train_seconds"]) / 60.0 for r in rows]
                y = [100.0 * r["eval_mlm_accuracy"] for r in rows]
                style = "-" if name == "phase1" else "--"
                ax.plot(x, y, style, color=f"C{i}", marker="o", ms=3, label=f"{label or folder} ({name})")
    ax.set_xlabel("training minutes")
    ax.set_ylabel("held-out MLM accuracy (%)")
    ax.set_title("cpu-hour recipe: phase 1 at seq 32, phase 2 at seq 128")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, png)


# Corpus names besides files: the assets, and the polarity texts turned into JSONL documents.
# MORE_GENERAL is general English that no task's text comes from: WordNet's glosses and Debian's
# fortune cookies (named with --corpus, not in the default).
GENERAL = ("austen", "wiki", "bbcnews-train")
MORE_GENERAL = ("wordnet", "fortunes")
IN_DOMAIN = ("polarity-reviews", "polarity-train")


def corpus_files(args: argparse.Namespace, out: Path) -> list[str]:
    """``--corpus`` as files: a name of GENERAL or IN_DOMAIN is written out (as JSONL documents,
    without any text of the test splits), anything else is a file given as is."""
    from bertkit.data.overlap import eval_texts
    from bertkit.data.readers import read_table

    test = eval_texts([str(asset_path("polarity-test")), str(asset_path("bbcnews-test"))])
    files = []
    for name in args.corpus:
        if name in ("austen", "wiki", *MORE_GENERAL):
            files.append(str(asset_path(name)))
            continue
        if name not in ("bbcnews-train", *IN_DOMAIN):
            files.append(name)
            continue
        dst = out / "corpus" / f"{name}.jsonl"
        if not dst.is_file():
            texts = [e.text for e in read_table(asset_path(name), require_label=False)]
            kept = [t for t in texts if test.find(t) is None]  # BBC News repeats some articles across splits
            _say(f"corpus {name}: {len(kept)} documents ({len(texts) - len(kept)} dropped: also in a test split)")
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps({"text": t}) + "\n" for t in kept), encoding="utf-8")
            os.replace(tmp, dst)
        files.append(str(dst))
    return files


# ---------------------------------------------------------------------------------------- 2. fine-tuning


def _subset(task: str, split: str, n: int | None, tmp: Path) -> Path:
    src = asset_path(RUNS[task][1 if split == "train" else 2])
    if not n:
        return src
    lines = src.read_text(encoding="utf-8").splitlines(True)
    head = 1 if src.suffix == ".csv" else 0  # the file is not sorted by label: the first n hold every class
    dst = tmp / f"{task}-{split}-{n}{src.suffix}"
    dst.write_text("".join(lines[: n + head]), encoding="utf-8")
    return dst


def _splits(task: str, args: argparse.Namespace, tmp: Path) -> tuple[Path, Path]:
    """(train, test) files of ``task``: the seeded split, or with ``--dev N`` the training split's
    last N rows as the test set and the rest to train on (to choose settings without the test split)."""
    train, test = _subset(task, "train", args.max_train, tmp), _subset(task, "test", args.max_test, tmp)
    if not args.dev:
        return train, test
    src = asset_path(RUNS[task][1])
    lines = src.read_text(encoding="utf-8").splitlines(True)
    head = lines[:1] if src.suffix == ".csv" else []
    rows = lines[len(head) :]
    if args.dev >= len(rows):
        raise SystemExit(f"--dev {args.dev}: {src} has only {len(rows)} rows")
    rows = rows[: args.max_train] if args.max_train else rows
    out = []
    for name, part in (("train", rows[: -args.dev]), ("dev", rows[-args.dev :])):
        dst = tmp / f"{task}-{name}-dev{args.dev}-{len(rows)}{src.suffix}"
        dst.write_text("".join(head + part), encoding="utf-8")
        out.append(dst)
    return out[0], out[1]


def finetune_one(model: Path, task: str, seed: int, out: Path, args: argparse.Namespace) -> dict:
    from bertkit.tasks import finetune

    kind, _, _, metric, kw = RUNS[task]
    kw = {**{k: v for k, v in kw.items() if k != "freeze"}, **args.overrides.get(task, {})}
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    train, test = _splits(task, args, data)
    work = out / "work" / f"{model.name}-{task}-{seed}"
    t0 = time.perf_counter()
    res = finetune(kind, model, train, work, test, seed=seed, progress=False, quiet=True, overwrite=True, **kw)
    wall = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    # the last epoch's score (the number of epochs is a setting, chosen on the dev split); the best
    # epoch's, chosen on test, is kept beside it only to compare with rows scored that way
    per_epoch = [r[f"eval_{metric}"] for r in epoch_rows(res, metric)]
    return {
        "model": model.name,
        "task": task,
        "seed": seed,
        metric: per_epoch[-1] if per_epoch else res.metrics[metric],
        f"best_epoch_{metric}": res.metrics[metric],
        f"per_epoch_{metric}": per_epoch,
        "wall_s": round(wall, 1),
    }


def random_init(out: Path, like: Path) -> Path:
    """A freshly initialised model of ``like``'s config and vocabulary (seed 0)."""
    import torch

    from bertkit.modeling.auto import AutoConfig, AutoModelForPreTraining
    from bertkit.tokenization import BertTokenizer

    dst = out / "random-init"
    if not (dst / "config.json").is_file():
        torch.manual_seed(0)
        model = AutoModelForPreTraining.from_config(AutoConfig.from_pretrained(like))
        model.save_pretrained(dst, tokenizer=BertTokenizer.from_pretrained(str(like)))
    return dst


# ---------------------------------------------------------------------------------------- 3. TF-IDF + LR


def _features(texts: list[str], vocab: dict[str, int] | None = None):
    from scipy import sparse

    docs = []
    for t in texts:
        w = re.findall(r"[a-z0-9']+", t.lower())
        docs.append(w + [a + " " + b for a, b in zip(w, w[1:])])
    if vocab is None:
        df: dict[str, int] = {}
        for d in docs:
            for g in set(d):
                df[g] = df.get(g, 0) + 1
        vocab = {g: i for i, g in enumerate(sorted(g for g, c in df.items() if c >= 2))}
    rows, cols, vals = [], [], []
    for i, d in enumerate(docs):
        counts: dict[int, int] = {}
        for g in d:
            if g in vocab:
                counts[vocab[g]] = counts.get(vocab[g], 0) + 1
        rows += [i] * len(counts)
        cols += list(counts)
        vals += [1.0 + np.log(c) for c in counts.values()]
    return sparse.csr_matrix((vals, (rows, cols)), shape=(len(docs), len(vocab))), vocab


def tfidf_logreg(task: str, args: argparse.Namespace, out: Path, c: float = 1.0) -> dict:
    """Accuracy of TF-IDF + L2 logistic regression (C = ``c``, sklearn's default) on the test split."""
    from scipy import optimize, sparse

    from bertkit.data.readers import read_table

    tmp = out / "data"
    tmp.mkdir(parents=True, exist_ok=True)
    train, test = (read_table(f) for f in _splits(task, args, tmp))
    x, vocab = _features([e.text for e in train])
    xt, _ = _features([e.text for e in test], vocab)
    df = np.asarray((x > 0).sum(0)).ravel()
    idf = np.log((1 + x.shape[0]) / (1 + df)) + 1
    x, xt = (
        sparse.diags(1 / np.sqrt(m.multiply(m).sum(1).A.ravel() + 1e-12)) @ m
        for m in (x @ sparse.diags(idf), xt @ sparse.diags(idf))
    )
    labels = sorted({e.label for e in train})
    y = np.array([labels.index(e.label) for e in train])
    k, d = len(labels), x.shape[1]
    onehot = np.eye(k)[y]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        W, b = w[: d * k].reshape(d, k), w[d * k :]
        z = x @ W + b
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        nll = -np.log(p[np.arange(len(y)), y] + 1e-12).sum() + 0.5 / c * (W * W).sum()
        g = p - onehot
        return nll, np.concatenate([(x.T @ g + W / c).ravel(), g.sum(0)])

    w = optimize.minimize(loss, np.zeros(d * k + k), jac=True, method="L-BFGS-B", options={"maxiter": 500}).x
    pred = np.asarray(xt @ w[: d * k].reshape(d, k) + w[d * k :]).argmax(1)
    acc = float(np.mean([labels[p] == e.label for p, e in zip(pred, test)]))
    return {"model": "tfidf-logreg", "task": task, "seed": 0, "accuracy": acc}


# ---------------------------------------------------------------------------------------- the job


def _cached(path: Path, fn, *a) -> dict:
    if path.is_file():
        return json.loads(path.read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    row = fn(*a)
    path.write_text(json.dumps(row))
    _say(json.dumps(row))
    return row


def table(rows: list[dict], order: list[str], out: Path, args: argparse.Namespace) -> str:
    def name(model: str) -> str:
        seconds = _seconds_of(out / model)
        return model if seconds == float("inf") else f"{model} ({seconds / 60:.1f} training min)"

    def cell(model: str, task: str) -> str:
        mine = [r for r in rows if r["model"] == model and r["task"] == task]
        xs = [100 * r["accuracy"] for r in mine]
        if not xs:
            return "-"
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        best = [100 * r["best_epoch_accuracy"] for r in mine if "best_epoch_accuracy" in r]
        also = f"; best epoch on test {statistics.mean(best):.1f}" if best and len(best) == len(xs) else ""
        return f"{statistics.mean(xs):.1f} ± {sd:.1f} (n={len(xs)}{also})"

    lines = [
        f"objective {args.objective}, {args.minutes:g} training minutes; accuracy %, mean ± std over seeds",
        "",
        "| model | polarity | BBC News |",
        "|---|---|---|",
    ]
    lines += [f"| {name(m)} | {cell(m, 'polarity')} | {cell(m, 'bbcnews')} |" for m in order]
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    return text


def _overrides(items: list[str]) -> dict[str, dict]:
    """``TASK.KEY=VALUE`` items as {task: {key: value}} (values read as JSON where they parse)."""
    out: dict[str, dict] = {}
    for item in items:
        key, _, value = item.partition("=")
        task, _, name = key.partition(".")
        if task not in TASKS or not name or not value:
            raise SystemExit(f"--set {item!r}: expected TASK.KEY=VALUE with TASK one of {', '.join(TASKS)}")
        try:
            out.setdefault(task, {})[name] = json.loads(value)
        except json.JSONDecodeError:
            out.setdefault(task, {})[name] = value
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/downstream")
    ap.add_argument("--minutes", type=float, default=60.0, help="pretraining minutes")
    ap.add_argument("--seeds", type=int, default=5, help="fine-tuning seeds per model and task")
    ap.add_argument("--curve-seeds", type=int, default=None, help="seeds for the earlier --at checkpoints")
    ap.add_argument("--tasks", default=",".join(TASKS), help=f"comma list of: {', '.join(TASKS)}")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="TASK.KEY=VALUE",
        help="a fine-tuning setting other than benchmarks/finetune_results.py's, e.g. polarity.lr=3e-4; "
        "runs with settings of their own keep their results apart (results-<settings>/)",
    )
    ap.add_argument("--objective", default="mlm", choices=["mlm+nsp", "mlm", "electra"])
    ap.add_argument(
        "--corpus",
        nargs="+",
        default=list(GENERAL),
        help=f"files or names: {', '.join(GENERAL + MORE_GENERAL + IN_DOMAIN)} (default: {' '.join(GENERAL)})",
    )
    ap.add_argument("--in-domain", action="store_true", help=f"add {' and '.join(IN_DOMAIN)} to --corpus")
    ap.add_argument(
        "--vocab-size",
        type=int,
        default=0,
        metavar="N",
        help="learn an N-token WordPiece vocabulary from the corpus (default: bert-base-uncased's 30,522)",
    )
    ap.add_argument("--at", default=None, help="minutes whose checkpoints are fine-tuned (default: thirds)")
    ap.add_argument("--pretrain-args", default="", help="more `bertkit pretrain` flags, e.g. '--mask-rate 0.2'")
    ap.add_argument("--max-train", type=int, default=None, help="fine-tune on the first N training examples")
    ap.add_argument("--max-test", type=int, default=None, help="score the first N test examples")
    ap.add_argument(
        "--dev",
        type=int,
        default=0,
        metavar="N",
        help="score on the training split's last N examples and train on the rest (choosing settings "
        "without the test split; results in results-devN*/)",
    )
    ap.add_argument("--skip", default="", help="comma list of: random, minilm, tfidf")
    ap.add_argument("--only", default="", help="comma list of model names to fine-tune (default: all)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument(
        "--nproc", type=int, default=1, help="pretrain in N processes under torchrun (--threads is per process)"
    )
    ap.add_argument("--curves", default=None, metavar="PNG", help="only draw the MLM curves of --runs into PNG")
    ap.add_argument("--runs", nargs="+", default=[], metavar="RUN[=LABEL]", help="--out folders for --curves")
    args = ap.parse_args()
    if args.curves:
        print(curves(args.runs or [args.out], Path(args.curves)))
        return 0
    if args.threads:
        import torch

        torch.set_num_threads(args.threads * args.nproc)  # fine-tuning uses all the pretraining's cores
    if args.in_domain:
        args.corpus = [*args.corpus, *IN_DOMAIN]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    targets = [float(t) for t in args.at.split(",")] if args.at else [args.minutes * k / 3 for k in (1, 2, 3)]
    targets = sorted(set(min(t, args.minutes) for t in targets))
    skip = set(filter(None, args.skip.split(",")))
    args.overrides = _overrides(args.set)
    tags = [f"dev{args.dev}"] if args.dev else []
    tags += sorted(s.replace("=", "") for s in args.set)
    results = out / "-".join(["results", *tags])

    pretrain(args, out, targets)
    models = [out / f"at-{t:g}min" for t in targets if (out / f"at-{t:g}min" / "config.json").is_file()]
    if "random" not in skip:
        models.append(random_init(out, models[-1]))
    if "minilm" not in skip:
        models.append(Path(asset_path("minilm")))
    if args.only:
        models = [m for m in models if m.name in args.only.split(",")]
    rows = []
    early = {f"at-{t:g}min" for t in targets[:-1]}
    for model in models:
        seeds = args.curve_seeds if args.curve_seeds is not None and model.name in early else args.seeds
        for task in args.tasks.split(","):
            for seed in range(seeds):
                rows.append(
                    _cached(
                        results / f"{model.name}-{task}-seed{seed}.json",
                        finetune_one,
                        model,
                        task,
                        seed,
                        out,
                        args,
                    )
                )
    if "tfidf" not in skip:
        for task in args.tasks.split(","):
            rows.append(
                _cached(
                    out / "-".join(["results", *tags[:1]]) / f"tfidf-logreg-{task}.json", tfidf_logreg, task, args, out
                )
            )
    if args.set:
        print("fine-tuning settings changed: " + ", ".join(args.set))
    if args.dev:
        print(f"scored on the last {args.dev} examples of each training split (trained on the rest), not on test")
    print(table(rows, [m.name for m in models] + ([] if "tfidf" in skip else ["tfidf-logreg"]), out, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
