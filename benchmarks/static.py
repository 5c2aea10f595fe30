"""Static embeddings in one run on one CPU: bertkit's distil against model2vec's, of the same teacher.

- distillation time of MiniLM (the asset) to 256 dimensions: bertkit's ``distill_static`` against
  model2vec's ``distill`` (wall seconds, and this process's CPU seconds, steadier on a shared machine);
- quality: BBC News headline -> article retrieval (MRR@10 over the held-out articles, built as in
  benchmarks/embeddings.py) and gensim's Lee document similarity (Spearman against the human scores),
  for MiniLM (bertkit ``auto``), model2vec's distil (model2vec's encode) and bertkit's distil (bertkit's encode);
- training: bertkit's distil after MNRL on the BBC training split's pairs (``--train-epochs``);
- speed: sentences per second on sentences of the BBC training articles: bertkit's MiniLM ``auto``
  path, model2vec's encode, bertkit's static encode (medians of ``--repeats``).

    python benchmarks/static.py [--threads 2] [--dims 256] [--dtype fp32] [--m2v-folder DIR] [--only distill]
    python benchmarks/static.py --fit-teacher [--fit-epochs 4] [--fit-lr 0.2]

``--m2v-folder`` reuses a model2vec distil saved earlier (its distillation is then not timed).
``--only distill`` stops after the distillation times and the distils' BBC MRR@10 (no Lee, training,
speed or serving).
``--fit-teacher`` runs only the teacher fit: bertkit's distil, then `train-embedder --loss mse --teacher`
MiniLM on the assets' text without the BBC test split (the BBC training articles' sentences, the
polarity training texts, the wikipedia asset's sentences), BBC MRR@10 before and after, beside MiniLM
and model2vec's distil; the fit's time in CPU-minutes (this process's, teacher forward included).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertkit.assets import asset_path
from bertkit.sentence.evaluation.metrics import credit_copies, retrieval_metrics


def bbc_pairs(split: str) -> list[dict[str, str]]:
    """(first sentence, rest of the article) of each article, as benchmarks/embeddings.py builds them."""
    out = []
    for line in open(asset_path(f"bbcnews-{split}"), encoding="utf-8"):
        parts = re.split(r"(?<=[.!?])\s+", json.loads(line)["text"], maxsplit=1)
        if len(parts) == 2 and len(parts[1]) > 100:
            out.append({"anchor": parts[0], "positive": parts[1]})
    return out


def bbc_mrr(encode, rows: list[dict[str, str]]) -> float:
    q = encode([r["anchor"] for r in rows])
    c = encode([r["positive"] for r in rows])
    ids = [str(i) for i in range(len(rows))]
    qrels = credit_copies({i: {i: 1.0} for i in ids}, {i: r["positive"] for i, r in zip(ids, rows)})
    return float(retrieval_metrics(q, ids, c, ids, qrels)["mrr@10"])


def lee_spearman(encode) -> float:
    from scipy.stats import spearmanr

    with open(asset_path("sts-lee"), newline="", encoding="utf-8") as f:
        rows = [(r["sentence1"], r["sentence2"], float(r["score"])) for r in csv.DictReader(f)]
    docs = sorted({t for a, b, _ in rows for t in (a, b)})
    vec = dict(zip(docs, encode(docs)))
    cos = [float(vec[a] @ vec[b] / (np.linalg.norm(vec[a]) * np.linalg.norm(vec[b]) + 1e-12)) for a, b, _ in rows]
    return float(spearmanr(cos, [s for *_, s in rows]).statistic)


def timed(fn) -> tuple[float, float, object]:
    """(wall seconds, this process's CPU seconds, result) of ``fn()``."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def rate(encode, texts: list[str], repeats: int) -> float:
    """Median sentences per second of ``encode(texts)`` (after one warm-up call on a few texts)."""
    encode(texts[:64])
    return len(texts) / statistics.median(timed(lambda: encode(texts))[0] for _ in range(repeats))


def train_static(folder: Path, args: argparse.Namespace):
    """bertkit's distil trained with MultipleNegativesRankingLoss on the BBC training split's
    (first sentence, rest of the article) pairs: no held-out article is seen."""
    from torch.utils.data import DataLoader

    from bertkit import InputExample, SentenceTransformer, losses

    model = SentenceTransformer(str(folder))
    rows = bbc_pairs("train")
    loader = DataLoader([InputExample(texts=[r["anchor"], r["positive"]]) for r in rows], batch_size=64, shuffle=True)
    wall, cpu, _ = timed(
        lambda: model.fit(
            [(loader, losses.MultipleNegativesRankingLoss(model))],
            epochs=args.train_epochs,
            warmup_steps=10,
            optimizer_params={"lr": args.train_lr},
            show_progress_bar=False,
        )
    )
    print(
        f"train   bertkit distil: MNRL on {len(rows):,} BBC training pairs, {args.train_epochs} epoch(s), batch 64, "
        f"lr {args.train_lr:g}: {wall / 60:.2f} min wall, {cpu / 60:.2f} CPU-min"
    )
    return model


def fit_corpus() -> list[str]:
    """Sentences of the assets with no BBC test article in them (the BBC training articles', the
    polarity training texts, the wikipedia asset's), each once."""
    from bertkit._text import split_sentences

    texts = [s for line in open(asset_path("bbcnews-train"), encoding="utf-8") for s in _sentences(line)]
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        texts += [r["text"] for r in csv.DictReader(f)]
    texts += [s for line in open(asset_path("wiki"), encoding="utf-8") for s in split_sentences(line) if len(s) > 20]
    return list(dict.fromkeys(texts))


def _sentences(line: str) -> list[str]:
    from bertkit._text import split_sentences

    return [s for p in json.loads(line)["text"].split("\n") for s in split_sentences(p) if len(s) > 20]


def fit_teacher(args: argparse.Namespace) -> None:
    """bertkit's distil of MiniLM fitted to MiniLM's sentence vectors of :func:`fit_corpus` with
    `train-embedder --loss mse --teacher` (tokenlearn's idea); BBC MRR@10 before and after."""
    from bertkit import SentenceTransformer
    from bertkit.sentence.distill_static import distill_static
    from bertkit.sentence.embedder import EmbedderArguments, train_embedder

    teacher = str(asset_path("minilm"))
    tmp = Path(tempfile.mkdtemp(prefix="static-fit-"))
    _, cpu, _ = timed(lambda: distill_static(teacher, tmp / "distil", dims=args.dims, dtype=args.dtype))
    print(f"distil  bertkit MiniLM -> {args.dims} dims: {cpu / 60:.2f} CPU-min")
    texts = fit_corpus()
    (tmp / "fit.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    fit = EmbedderArguments(
        model=str(tmp / "distil"),
        train=str(tmp / "fit.txt"),
        output=str(tmp / "fitted"),
        loss="mse",
        teacher=teacher,
        lr=args.fit_lr,
        epochs=args.fit_epochs,
        batch_size=128,
        threads=args.threads,
        progress=False,
    )
    wall, cpu, _ = timed(lambda: train_embedder(fit))
    print(
        f"fit     MSE to MiniLM's vectors of {len(texts):,} texts (BBC train sentences, polarity train, wikipedia), "
        f"{args.fit_epochs} epoch(s), batch 128, lr {args.fit_lr:g}: {cpu / 60:.2f} CPU-min "
        f"({wall / 60:.2f} min wall), teacher forward included"
    )
    test = bbc_pairs("test")
    minilm = SentenceTransformer(teacher, dtype="auto")
    encoders = {f"MiniLM (bertkit {minilm.dtype})": lambda t: minilm.encode(t, batch_size=64)}
    from model2vec import StaticModel

    if args.m2v_folder is None:
        from model2vec.distill import distill

        distill(teacher, pca_dims=args.dims).save_pretrained(tmp / "model2vec")
    theirs = StaticModel.from_pretrained(str(args.m2v_folder or tmp / "model2vec"))
    encoders["model2vec distil (model2vec)"] = lambda t: theirs.encode(t)
    for name, folder in (("bertkit distil", "distil"), ("bertkit distil + fit", "fitted")):
        model = SentenceTransformer(str(tmp / folder))
        encoders[f"{name} (bertkit)"] = model.encode
    for name, enc in encoders.items():
        print(
            f"quality {name:<30} BBC MRR@10 {bbc_mrr(enc, test):.4f}  Lee Spearman {lee_spearman(enc):.4f}", flush=True
        )


def serve_rates(folders: dict[str, str], seconds: float, clients: int = 32) -> dict[str, float]:
    """Requests per second of `bertkit serve` on each folder: ``clients`` concurrent single-sentence
    POSTs to /v1/embeddings for ``seconds``, with benchmarks/serve.py's lean client; one server at a time,
    so each has the CPU, and each with a process per core (``--workers``, the server's fast setting)."""
    import asyncio
    import sys

    from bertkit.serving.process import server_process

    sys.path.insert(0, str(Path(__file__).parent))
    from serve import load, sentences

    texts = sentences(2000)
    out = {}
    for name, folder in folders.items():
        args = ["--dtype", "auto", "--max-wait-ms", "5", "--workers", str(os.cpu_count() or 1)]
        with server_process(folder, args) as srv:
            asyncio.run(load(srv.url, "/v1/embeddings", texts[:64], clients, 2.0, 10**6))  # warm-up
            got = asyncio.run(load(srv.url, "/v1/embeddings", texts, clients, seconds, 10**6))
            srv.stop()
        if got["errors"]:
            raise RuntimeError(f"{name}: errors {got['errors']}")
        out[name] = got["ok"] / got["wall"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dims", type=int, default=256)
    p.add_argument("--dtype", default="auto", help="precision of bertkit's teacher forward while distilling")
    p.add_argument("--m2v-folder", default=None, help="a model2vec distil of MiniLM saved earlier")
    p.add_argument("--speed-sentences", type=int, default=20000, help="sentences for the static encoders")
    p.add_argument("--minilm-sentences", type=int, default=1000, help="sentences for MiniLM (its rate is steady)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--train-epochs", type=int, default=1)
    p.add_argument("--train-lr", type=float, default=0.05)
    p.add_argument("--serve-seconds", type=float, default=10.0, help="load test of each server (0: none)")
    p.add_argument("--fit-teacher", action="store_true", help="run only the teacher fit (see above)")
    p.add_argument("--fit-epochs", type=float, default=4)
    p.add_argument("--fit-lr", type=float, default=0.2)
    p.add_argument("--only", choices=["distill"], default=None, help="distill: the distillation and its quality only")
    args = p.parse_args()
    if args.fit_teacher:
        torch.set_num_threads(args.threads)
        fit_teacher(args)
        return

    from model2vec import StaticModel

    from bertkit import SentenceTransformer
    from bertkit._cpu import describe_cpu
    from bertkit.sentence.distill_static import distill_static

    torch.set_num_threads(args.threads)
    teacher = str(asset_path("minilm"))
    print(f"CPU: {describe_cpu()}; torch threads {args.threads}. The machine is shared and busy: figures are noisy.")
    tmp = Path(tempfile.mkdtemp(prefix="static-bench-"))

    # each library's modules imported before its distil is timed (model2vec.distill below, likewise)
    import bertkit.inference
    import bertkit.modeling.auto
    import bertkit.modeling.static  # noqa: F401

    bk_wall, bk_cpu, _ = timed(lambda: distill_static(teacher, tmp / "bertkit", dims=args.dims, dtype=args.dtype))
    what = f"MiniLM -> {args.dims} dims, teacher {args.dtype}"
    print(f"distil  bertkit   {bk_wall:7.1f} s wall {bk_cpu:7.1f} s CPU  ({what})")
    if args.m2v_folder is None:
        from model2vec.distill import distill

        m2v_wall, m2v_cpu, m2v = timed(lambda: distill(teacher, pca_dims=args.dims))
        m2v.save_pretrained(tmp / "model2vec")
        m2v_folder = tmp / "model2vec"
        print(
            f"distil  model2vec {m2v_wall:7.1f} s wall {m2v_cpu:7.1f} s CPU  -> bertkit {m2v_wall / bk_wall:.1f}x "
            f"faster (wall), {m2v_cpu / bk_cpu:.1f}x (CPU)"
        )
    else:
        m2v_folder = Path(args.m2v_folder)
        print(f"distil  model2vec not timed: reusing {m2v_folder}")

    minilm = SentenceTransformer(teacher, dtype="auto")
    ours = SentenceTransformer(str(tmp / "bertkit"))
    theirs = StaticModel.from_pretrained(str(m2v_folder))
    encoders = {
        f"MiniLM (bertkit {minilm.dtype})": lambda t: minilm.encode(t, batch_size=64),
        "model2vec distil (model2vec)": lambda t: theirs.encode(t),
        "bertkit distil (bertkit)": lambda t: ours.encode(t),
    }
    # each distil under the other library's encode: the distils, apart from the encode rules
    # (model2vec cuts a text at 512 tokens and drops [UNK]; bertkit, as sentence-transformers, does not)
    ours_m2v = StaticModel.from_pretrained(str(tmp / "bertkit"))
    theirs_bk = SentenceTransformer(str(m2v_folder))
    crossed = {
        "bertkit distil (model2vec)": lambda t: ours_m2v.encode(t),
        "model2vec distil (bertkit)": lambda t: theirs_bk.encode(t),
    }
    test = bbc_pairs("test")
    if args.only == "distill":
        pick = {**encoders, **crossed}
        for name in ("model2vec distil (model2vec)", "bertkit distil (bertkit)", "bertkit distil (model2vec)"):
            print(f"quality {name:<30} BBC MRR@10 {bbc_mrr(pick[name], test):.4f}", flush=True)
        return
    for name, enc in {**encoders, **crossed}.items():
        print(
            f"quality {name:<30} BBC MRR@10 {bbc_mrr(enc, test):.4f}  Lee Spearman {lee_spearman(enc):.4f}", flush=True
        )

    trained = train_static(tmp / "bertkit", args)
    mrr, rho = bbc_mrr(trained.encode, test), lee_spearman(trained.encode)
    print(f"quality {'bertkit distil + MNRL (bertkit)':<30} BBC MRR@10 {mrr:.4f}  Lee Spearman {rho:.4f}", flush=True)

    texts = [json.loads(line)["text"] for line in open(asset_path("bbcnews-train"), encoding="utf-8")]
    sents = [s for t in texts for s in re.split(r"(?<=[.!?])\s+", t) if s]
    rates = {
        "MiniLM": rate(encoders[next(iter(encoders))], sents[: args.minilm_sentences], 1),
        "model2vec": rate(encoders["model2vec distil (model2vec)"], sents[: args.speed_sentences], args.repeats),
        "bertkit": rate(encoders["bertkit distil (bertkit)"], sents[: args.speed_sentences], args.repeats),
    }
    mean_len = np.mean([len(s) for s in sents[: args.speed_sentences]])
    print(f"speed   ({args.threads} threads, BBC sentences of {mean_len:.0f} characters on average)")
    for name, r in rates.items():
        print(f"speed   {name:<10} {r:10,.0f} sentences/s")
    if args.serve_seconds > 0:
        rps = serve_rates({"MiniLM": teacher, "static": str(tmp / "bertkit")}, args.serve_seconds)
        print(
            f"serve   /v1/embeddings, 32 clients, single sentences, --workers {os.cpu_count()}: "
            f"MiniLM {rps['MiniLM']:,.0f} req/s, static "
            f"{rps['static']:,.0f} req/s -> {rps['static'] / rps['MiniLM']:.1f}x"
        )
    print(
        f"speed   bertkit static: {rates['bertkit'] / rates['MiniLM']:.0f}x bertkit's MiniLM {minilm.dtype}, "
        f"{rates['bertkit'] / rates['model2vec']:.2f}x model2vec's encode"
    )


if __name__ == "__main__":
    main()
