"""BBC News retrieval: base MiniLM against MiniLM after `bertkit train-embedder`, each beside
sentence-transformers on the same data, settings and seed.

The asset keeps each article on one line (its headline run into the first sentence), so the query is
the article's first sentence (the headline with its lede) and the document is the rest of the article;
the corpus is every held-out article (the seeded test split). Training pairs come the same way from
the training split. An article's exact copies in the split count as relevant too (BBC News holds a few
articles twice). The sentence-transformers side is MultipleNegativesRankingLoss in a plain torch
loop (the `datasets` package its Trainer needs is not installed), with the same batches in the same
order, AdamW settings, warmup and linear decay as bertkit's Trainer.

    python benchmarks/embeddings.py [--train-size 640] [--max-length 128] [--batch-size 32]
    python benchmarks/embeddings.py --memory     # cached MNRL at batch 256 against MNRL at 32 and 256
    python benchmarks/embeddings.py --wiki       # Wikipedia section retrieval, base MiniLM and BM25
    python benchmarks/embeddings.py --beyond --train-size 100000 [--no-rerank] [--seeds 3] [--st-counterpart]
        # hybrid search (BM25 + embeddings) from base MiniLM, mined hard negatives, hybrid search from
        # the trained model, then a cross-encoder reranking the top 20
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from bertkit.assets import asset_path
from bertkit.sentence.evaluation.metrics import credit_copies, retrieval_metrics


def pairs(split: str) -> list[dict[str, str]]:
    out = []
    for line in open(asset_path(f"bbcnews-{split}"), encoding="utf-8"):
        text = json.loads(line)["text"]
        parts = re.split(r"(?<=[.!?])\s+", text, maxsplit=1)
        if len(parts) == 2 and len(parts[1]) > 100:
            out.append({"anchor": parts[0], "positive": parts[1]})
    return out


def qrels_of(rows: list[dict[str, str]]) -> dict[str, dict[str, float]]:
    """Query i's relevant article is article i, and any article of exactly the same text: BBC News holds
    a few articles twice, and the copy ranked first is as right as the original."""
    ids = [str(i) for i in range(len(rows))]
    return credit_copies({i: {i: 1.0} for i in ids}, {i: r["positive"] for i, r in zip(ids, rows)})


def evaluate(encode, test: list[dict[str, str]]) -> dict[str, float]:
    q = encode([r["anchor"] for r in test])
    c = encode([r["positive"] for r in test])
    ids = [str(i) for i in range(len(test))]
    return retrieval_metrics(q, ids, c, ids, qrels_of(test))


HYBRID_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5)


def hybrid_line(
    name: str,
    encode,
    test: list[dict[str, str]],
    base_mrr: float,
    dev: list[dict[str, str]],
    dev_name: str,
    theirs=None,
) -> dict[str, float]:
    """Hybrid search (BM25 fused with the model's embeddings; ``bertkit search --lexical-weight``), its
    weight chosen on the ``dev`` pairs, never on the test split, and BM25 alone beside it; with
    ``theirs`` (sentence-transformers' encoder of the counterpart model), the same fusion of its
    embeddings, its weight chosen the same way. Returns the hybrid search's metrics on ``test``."""

    def scorer(encode, rows: list[dict[str, str]]):
        texts = [r["anchor"] for r in rows], [r["positive"] for r in rows]
        q, c = encode(texts[0]), encode(texts[1])
        ids = [str(i) for i in range(len(rows))]
        qrels = qrels_of(rows)
        return lambda w: retrieval_metrics(
            q, ids, c, ids, qrels, query_texts=texts[0], corpus_texts=texts[1], lexical_weight=w
        )

    def chosen_on_dev(encode) -> tuple[float, dict[float, float], Callable[[float], dict[str, float]]]:
        on_dev = scorer(encode, dev)
        chosen = {w: on_dev(w)["mrr@10"] for w in HYBRID_WEIGHTS}
        return max(chosen, key=chosen.get), chosen, scorer(encode, test)

    w, chosen, on_test = chosen_on_dev(encode)
    m, bm25 = on_test(w), on_test(1.0)
    st = ""
    if theirs is not None:
        their_w, _, their_test = chosen_on_dev(theirs)
        t = their_test(their_w)
        st = (
            f" | sentence-transformers MRR@10 {t['mrr@10']:.4f} R@1 {t['recall@1']:.4f} nDCG@10 {t['ndcg@10']:.4f}"
            f", lexical weight {their_w:g}"
        )
    print(
        f"{name:<28} bertkit MRR@10 {m['mrr@10']:.4f} R@1 {m['recall@1']:.4f} nDCG@10 {m['ndcg@10']:.4f} | "
        f"lexical weight {w:g}, chosen on {dev_name} (MRR@10 there "
        + ", ".join(f"{k:g}: {v:.4f}" for k, v in chosen.items())
        + f"); BM25 alone MRR@10 {bm25['mrr@10']:.4f} R@1 {bm25['recall@1']:.4f}; base MiniLM's error removed: "
        f"{1 - (1 - m['mrr@10']) / (1 - base_mrr):.0%}{st}",
        flush=True,
    )
    return m


def wiki(args: argparse.Namespace) -> None:
    """Wikipedia section retrieval ("Article: Section" -> the section's prose, the `wiki-sections`
    asset): base MiniLM in both libraries, BM25 alone and hybrid search. There is no training split,
    so every lexical weight tried is printed, none chosen."""
    from bertkit.sentence.evaluation.metrics import read_beir, read_qrels

    queries, corpus = read_beir(asset_path("wiki-sections-queries")), read_beir(asset_path("wiki-sections-corpus"))
    qrels = read_qrels(asset_path("wiki-sections-qrels"), queries, corpus)
    qids, cids = list(queries), list(corpus)
    qt, ct = [queries[i] for i in qids], [corpus[i] for i in cids]
    encoders = {
        "bertkit": bertkit_encoder(str(asset_path("minilm")), args.max_length),
        "sentence-transformers": st_encoder(str(asset_path("minilm")), args.max_length),
    }
    print(
        f"Wikipedia sections: {len(qids)} queries ('Article: Section') over {len(cids)} passages (the "
        f"section's prose), max_length {args.max_length}, {torch.get_num_threads()} threads",
        flush=True,
    )
    vecs, metrics, walls = {}, {}, {}
    for name, enc in encoders.items():
        t0 = time.perf_counter()
        vecs[name] = enc(qt), enc(ct)
        walls[name] = time.perf_counter() - t0
        metrics[name] = retrieval_metrics(vecs[name][0], qids, vecs[name][1], cids, qrels)
    ours, theirs = metrics["bertkit"], metrics["sentence-transformers"]
    print(
        f"{'base MiniLM':<28} bertkit MRR@10 {ours['mrr@10']:.4f} R@1 {ours['recall@1']:.4f} nDCG@10 "
        f"{ours['ndcg@10']:.4f} | sentence-transformers MRR@10 {theirs['mrr@10']:.4f} R@1 {theirs['recall@1']:.4f} "
        f"nDCG@10 {theirs['ndcg@10']:.4f} | embedding wall time bertkit {walls['bertkit']:.1f} s (fp32), "
        f"sentence-transformers {walls['sentence-transformers']:.1f} s",
        flush=True,
    )
    q, c = vecs["bertkit"]
    for w in (*HYBRID_WEIGHTS, 1.0):
        m = retrieval_metrics(q, qids, c, cids, qrels, query_texts=qt, corpus_texts=ct, lexical_weight=w)
        name = "BM25 alone" if w == 1.0 else f"+ BM25 (hybrid, weight {w:g})"
        print(
            f"{name:<28} bertkit MRR@10 {m['mrr@10']:.4f} R@1 {m['recall@1']:.4f} nDCG@10 {m['ndcg@10']:.4f}",
            flush=True,
        )


def bertkit_encoder(folder: str, max_length: int):
    from bertkit import pipeline

    emb = pipeline("sentence-embedding", model=folder, dtype="fp32", max_length=max_length, truncation="cut")
    return lambda texts: np.asarray(emb.embed(texts))


def st_encoder(folder: str, max_length: int):
    """sentence-transformers' encoder of ``folder`` at ``max_length`` tokens, answering like
    :func:`bertkit_encoder`."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu")
    model.max_seq_length = max_length
    return lambda texts: model.encode(texts, batch_size=64)


def st_train(train: list[dict], args: argparse.Namespace, out: Path, epochs: int = 1) -> float:
    """sentence-transformers' MNRL, the Trainer's batches/optimizer/schedule over ``epochs`` passes;
    returns wall seconds. Rows with ``negatives`` (as ``train-embedder`` caches its mined ones) train on
    (anchor, positive, negative)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from bertkit.training.trainer import RandomBatchSampler, _linear_schedule, _param_groups, set_seed

    t0 = time.perf_counter()
    set_seed(args.seed)
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    model.max_seq_length = args.max_length
    loss = MultipleNegativesRankingLoss(model)
    inner = model[0].auto_model
    opt = torch.optim.AdamW(_param_groups(inner, 0.01), lr=args.lr, betas=(0.9, 0.999), eps=1e-6)
    sampler = RandomBatchSampler(len(train), args.batch_size, seed=args.seed)
    batches = []
    for epoch in range(epochs):  # the Trainer's order: a fresh permutation per epoch
        sampler.set_epoch(epoch)
        batches += list(sampler)
    total = len(batches)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _linear_schedule(int(0.1 * total), total))
    model.train()
    k_neg = len(train[0].get("negatives") or [])
    for b in batches:
        feats = [model.preprocess([train[i][k] for i in b]) for k in ("anchor", "positive")]
        feats += [model.preprocess([train[i]["negatives"][j] for i in b]) for j in range(k_neg)]
        _step(model, loss(feats, torch.zeros(len(b))), opt, sched)
    model.save(str(out))
    return time.perf_counter() - t0


def _step(model: torch.nn.Module, value: torch.Tensor, opt, sched) -> None:
    """One optimiser step as bertkit's Trainer takes it: backward, clip at 1.0, step, schedule."""
    value.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad()


def memory_child(mode: str, max_length: int) -> None:
    """One MNRL step in this fresh process; prints its peak memory above the loaded model, and the loss."""
    import resource

    from bertkit.modeling.sentence import load_sentence_encoder
    from bertkit.sentence.losses.functional import make_loss

    enc = load_sentence_encoder(str(asset_path("minilm")), max_seq_length=max_length)
    enc.model.eval()  # no dropout: the losses of the three runs are comparable
    n = 32 if mode == "plain32" else 256
    rows = pairs("train")[:n]
    feats = [enc.tokenize([r[k] for r in rows]) for k in ("anchor", "positive")]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    loss = (make_loss("cached-mnrl", mini_batch_size=32) if mode == "cached256" else make_loss("mnrl"))(enc, feats)
    loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"mode": mode, "peak_mb": (peak - before) / 1024, "loss": float(loss.detach())}))


def memory(max_length: int) -> None:
    import subprocess

    out = {}
    for mode in ("plain32", "cached256", "plain256"):
        r = subprocess.run(
            [sys.executable, __file__, "--memory-child", mode, "--max-length", str(max_length)],
            capture_output=True,
            text=True,
            check=True,
        )
        out[mode] = json.loads(r.stdout.strip().splitlines()[-1])
    p32, c256, p256 = out["plain32"], out["cached256"], out["plain256"]
    print(
        f"memory (peak RSS above the loaded model, one step, max_length {max_length}): MNRL batch 32 "
        f"{p32['peak_mb']:.0f} MB, cached MNRL batch 256 (mini-batch 32) {c256['peak_mb']:.0f} MB = "
        f"{c256['peak_mb'] / p32['peak_mb']:.2f}x, MNRL batch 256 {p256['peak_mb']:.0f} MB; loss at 256: "
        f"cached {c256['loss']:.6f}, plain {p256['loss']:.6f}",
        flush=True,
    )


def hard_negatives_stage(
    train: list[dict[str, str]],
    test: list[dict[str, str]],
    base: str,
    args: argparse.Namespace,
    tmp: Path,
    base_mrr: float,
    dev: list[dict[str, str]],
    dev_name: str,
) -> tuple[dict[str, float], float]:
    """``train-embedder`` from ``base`` with one mined hard negative per pair at ``args.seed``, into
    ``tmp / hard-SEED``; prints the embedding's line and its hybrid line. Returns (the hybrid metrics,
    with the embedding's MRR@10 under ``embedding``; train seconds, mining included)."""
    from bertkit.cli import main as bertkit

    out = tmp / f"hard-{args.seed}"
    t0 = time.perf_counter()
    common = [
        "--batch-size",
        str(args.batch_size),
        "--max-length",
        str(args.max_length),
        "--lr",
        str(args.lr),
        "--seed",
        str(args.seed),
        "--epochs",
        str(args.hard_epochs),
        "--no-progress",
    ]
    assert (
        bertkit(
            [
                "train-embedder",
                "--model",
                base,
                "--train",
                str(tmp / "train.jsonl"),
                "--output",
                str(out),
                "--hard-negatives",
                "1",
                "--mine-from",
                str(tmp / "docs.txt"),
                *common,
                *shlex.split(args.embedder_args),  # last, so that they override the flags above
            ]
        )
        == 0
    )
    emb_s = time.perf_counter() - t0
    enc = bertkit_encoder(str(out), args.max_length)
    m = evaluate(enc, test)
    theirs, their_enc = "", None
    if args.st_counterpart:  # sentence-transformers' MNRL on the very rows bertkit mined, same settings
        mined = [json.loads(x) for x in (out / "mined-negatives.jsonl").read_text("utf-8").splitlines()]
        st_s = st_train(mined, args, tmp / f"st-hard-{args.seed}", round(args.hard_epochs))
        their_enc = st_encoder(str(tmp / f"st-hard-{args.seed}"), args.max_length)
        t = evaluate(their_enc, test)
        theirs = (
            f" | sentence-transformers (same mined rows) MRR@10 {t['mrr@10']:.4f} R@1 {t['recall@1']:.4f} "
            f"nDCG@10 {t['ndcg@10']:.4f} | train {st_s:.0f} s (mining not included)"
        )
    print(
        f"{'+ mined hard negatives':<28} bertkit MRR@10 {m['mrr@10']:.4f} R@1 {m['recall@1']:.4f} nDCG@10 "
        f"{m['ndcg@10']:.4f} | {args.hard_epochs:g} epoch(s) at lr {args.lr:g}, seed {args.seed}"
        f"{', ' + args.embedder_args if args.embedder_args else ''}, "
        f"train {emb_s:.0f} s (mining included){theirs}",
        flush=True,
    )
    h = hybrid_line("+ BM25 (hybrid)", enc, test, base_mrr, dev, dev_name, their_enc)
    return {**h, "embedding": m["mrr@10"]}, emb_s


def beyond(train: list[dict[str, str]], test: list[dict[str, str]], args: argparse.Namespace, tmp: Path) -> None:
    """Hybrid search from base MiniLM; mined hard negatives (``--seeds`` runs) and hybrid search from the
    trained embedder; then a cross-encoder trained on mined negatives reranking the top 20. The last
    ``--dev-pairs`` training pairs are held out of the embedder's training (and of the texts it mines
    from) and choose the hybrid search's weight: on the pairs it trained on, the embedder looks better
    than it is, and the choice leans to it."""
    from bertkit.cli import main as bertkit

    dev, train = train[len(train) - args.dev_pairs :], train[: len(train) - args.dev_pairs]
    dev_name = f"{len(dev)} held-out training pairs"
    print(f"--beyond: {len(train)} pairs train the embedder; the last {len(dev)} are held out ({dev_name})")
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train), encoding="utf-8")

    base = str(asset_path("minilm"))
    base_enc = bertkit_encoder(base, args.max_length)
    base_mrr = evaluate(base_enc, test)["mrr@10"]
    print(f"{'base MiniLM':<28} bertkit MRR@10 {base_mrr:.4f} (the error removed below is 1 - this)", flush=True)
    their_base = None
    if args.st_counterpart:
        their_base = st_encoder(base, args.max_length)
        print(f"{'':<28} sentence-transformers MRR@10 {evaluate(their_base, test)['mrr@10']:.4f}", flush=True)
    hybrid_line("base MiniLM + BM25 (hybrid)", base_enc, test, base_mrr, dev, dev_name, their_base)
    held = base_mrr, dev, dev_name
    (tmp / "docs.txt").write_text("\n".join(r["positive"] for r in train) + "\n", encoding="utf-8")
    # Each seed is another batch order over the same mined rows; the reranker starts from the first's.
    runs = [
        hard_negatives_stage(
            train, test, base, argparse.Namespace(**{**vars(args), "seed": seed, "lr": args.hard_lr}), tmp, *held
        )
        for seed in range(args.seed, args.seed + args.seeds)
    ]
    found, emb_s = [m for m, _ in runs], runs[0][1]
    if args.seeds > 1:
        print(
            f"{'mean of ' + str(args.seeds) + ' seeds':<28} bertkit MRR@10 embedding {_mean_sd(found, 'embedding')}, "
            f"+ BM25 {_mean_sd(found, 'mrr@10')} | base MiniLM's error removed: "
            f"{1 - (1 - np.mean([m['mrr@10'] for m in found])) / (1 - base_mrr):.0%} (mean ± sample std)",
            flush=True,
        )
    if args.no_rerank:
        return
    enc = bertkit_encoder(str(tmp / f"hard-{args.seed}"), args.max_length)
    # Listwise groups: each training query's positive and rerank_group - 1 hard negatives, mined by base
    # MiniLM or by the trained embedder (whose negatives are harder, and which the reranker then reranks).
    t0 = time.perf_counter()
    miner = base if args.rerank_mine_with == "base" else str(tmp / f"hard-{args.seed}")
    ce_rows = reranker_rows(pairs("train")[: args.rerank_train_size], miner, args)
    (tmp / "rerank.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ce_rows), encoding="utf-8")
    mine_s = time.perf_counter() - t0
    start = base if args.rerank_from == "base" else str(tmp / f"hard-{args.seed}")
    ce_cmd = ["train-reranker", "--model", start, "--train", str(tmp / "rerank.jsonl"), "--output", str(tmp / "ce")]
    ce_cmd += ["--loss", "listwise", "--group-size", str(args.rerank_group), "--batch-size", "8"]
    ce_cmd += ["--max-length", str(args.max_length), "--lr", str(args.rerank_lr), "--seed", str(args.seed)]
    ce_cmd += ["--epochs", str(args.rerank_epochs), "--precision", args.rerank_precision, "--no-progress"]
    assert bertkit(ce_cmd) == 0
    ce_s = time.perf_counter() - t0
    rankers = {"bertkit": str(tmp / "ce")}
    st_s = None
    if args.st_counterpart:
        from bertkit.sentence.cross_encoder.reranker import listwise_groups, read_reranker_rows

        # The very groups train-reranker formed (same rows, group size and seed), in the same batches.
        groups = listwise_groups(read_reranker_rows(tmp / "rerank.jsonl"), args.rerank_group, args.seed)
        st_s = st_reranker_train(groups, start, args, tmp / "st-ce")
        rankers["sentence-transformers"] = st_ranker(str(tmp / "st-ce"), args.max_length)
    q, c = enc([r["anchor"] for r in test]), enc([r["positive"] for r in test])
    fusions = args.rerank_fusion.split(",")
    table = {name: rerank_metrics(ranker, q, c, test, fusions, args.max_length) for name, ranker in rankers.items()}
    base_err = 1.0 - base_mrr
    for fusion in fusions:
        name = "+ reranker over the top 20" if fusion == "none" else f"+ reranker, {fusion} fusion"
        r = table["bertkit"][fusion]
        theirs = ""
        if st_s is not None:
            t = table["sentence-transformers"][fusion]
            theirs = (
                f" | sentence-transformers CrossEncoder (same groups) MRR@10 {t['mrr@10']:.4f} R@1 "
                f"{t['recall@1']:.4f} nDCG@10 {t['ndcg@10']:.4f} | train {st_s:.0f} s (mining not included)"
            )
        print(
            f"{name:<28} bertkit MRR@10 {r['mrr@10']:.4f} R@1 {r['recall@1']:.4f} nDCG@10 "
            f"{r['ndcg@10']:.4f} | reranker from {args.rerank_from}, negatives mined by {args.rerank_mine_with}, "
            f"{args.rerank_epochs:g} epochs at lr "
            f"{args.rerank_lr:g}, pairs at {args.max_length} tokens (cut); train {ce_s - mine_s:.0f} s + "
            f"mining {mine_s:.0f} s; training in all {emb_s + ce_s:.0f} s; base MiniLM's error removed: "
            f"{1 - (1 - r['mrr@10']) / base_err:.0%}{theirs}",
            flush=True,
        )


def st_ranker(folder: str, max_length: int):
    """A sentence-transformers ``CrossEncoder`` (raw logits, no sigmoid) answering like
    ``pipeline("text-ranking")``, so both rerankers are measured by the same library code."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(folder, max_length=max_length, device="cpu", activation_fn=torch.nn.Identity())

    def rank(query: str, passages: list[str], **_) -> list[dict]:
        logits = model.predict([(query, p) for p in passages], batch_size=64)
        return [{"index": i, "score": float(x)} for i, x in enumerate(logits)]

    return rank


def rerank_metrics(ranker, q: np.ndarray, c: np.ndarray, test: list[dict], fusions: list[str], max_length: int):
    """Per fusion, the retrieval metrics after ``ranker`` (a reranker folder, or a callable answering like
    ``pipeline("text-ranking")``) reorders each query's top 20, pairs cut at ``max_length``. The relevant
    articles are those of :func:`qrels_of`."""
    from bertkit.search.rerank import rerank_metrics_per_fusion

    ids = [str(i) for i in range(len(test))]
    queries = {i: r["anchor"] for i, r in zip(ids, test)}
    corpus = {i: r["positive"] for i, r in zip(ids, test)}
    qrels = qrels_of(test)
    return rerank_metrics_per_fusion(
        ranker, q, ids, queries, c, ids, corpus, qrels, fusions, 20, False, max_length, "cut"
    )


def st_reranker_train(groups: list[dict], start: str, args: argparse.Namespace, out: Path) -> float:
    """sentence-transformers' ``CrossEncoder`` trained on the listwise groups with its
    ``MultipleNegativesRankingLoss`` made train-reranker's listwise loss (scale 1, raw logits, and its
    scoring of the group's columns without in-batch negatives: the cross-entropy of the positive among
    its group), with the Trainer's batches,
    optimiser, warmup and linear decay; returns wall seconds."""
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder.losses import MultipleNegativesRankingLoss

    from bertkit.training.trainer import RandomBatchSampler, _linear_schedule, _param_groups, set_seed

    t0 = time.perf_counter()
    set_seed(args.seed)
    model = CrossEncoder(start, num_labels=1, max_length=args.max_length, device="cpu")
    loss = MultipleNegativesRankingLoss(model, scale=1.0, activation_fn=torch.nn.Identity())
    opt = torch.optim.AdamW(_param_groups(model.model, 0.01), lr=args.rerank_lr, betas=(0.9, 0.999), eps=1e-6)
    sampler = RandomBatchSampler(len(groups), 8, seed=args.seed)
    epochs = max(1, round(args.rerank_epochs))
    total = epochs * len(sampler)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _linear_schedule(int(0.1 * total), total))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.rerank_precision == "bf16")
    model.train()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for b in sampler:
            cols = [[groups[i]["query"] for i in b]]
            cols += [[groups[i]["passages"][k] for i in b] for k in range(len(groups[b[0]]["passages"]))]
            with autocast:  # the loss's own scoring and cross-entropy, without its in-batch negatives
                value = loss.calculate_loss([loss.call_model_with_columns(cols[0], col) for col in cols[1:]], len(b))
            _step(model, value, opt, sched)
    model.save(str(out))
    return time.perf_counter() - t0


def reranker_rows(train: list[dict[str, str]], embedder: str, args: argparse.Namespace) -> list[dict]:
    """(query, passage, label) rows: each training query's positive and its mined hard negatives."""
    from bertkit import pipeline
    from bertkit.sentence.embedding_data import mine_hard_negatives

    emb = pipeline("sentence-embedding", model=embedder, max_length=args.max_length, truncation="cut")

    class Encoder:  # what mine_hard_negatives calls: .dim and .encode(texts, batch_size) -> tensor
        dim = int(np.asarray(emb.embed(["a"])).shape[1])

        def encode(self, texts: list[str], batch_size: int = 64) -> torch.Tensor:
            return torch.from_numpy(np.asarray(emb.embed(list(texts)), dtype=np.float32))

    rows = [{**r, "negatives": []} for r in train]
    mined, _ = mine_hard_negatives(Encoder(), rows, [r["positive"] for r in pairs("train")], args.rerank_group - 1)
    out = []
    for r in mined:
        out.append({"query": r["anchor"], "passage": r["positive"], "label": 1})
        out += [{"query": r["anchor"], "passage": n, "label": 0} for n in r["negatives"]]
    return out


def _mean_sd(rows: list[dict], key: str) -> str:
    xs = [r[key] for r in rows]
    return f"{np.mean(xs):.4f} ± {np.std(xs, ddof=1) if len(xs) > 1 else 0.0:.4f}"


def mnrl_pair(train: list[dict], test: list[dict], args: argparse.Namespace) -> tuple[dict, dict, tuple[float, float]]:
    """MNRL for one epoch with bertkit and with sentence-transformers at ``args.seed``: both sides'
    retrieval metrics and train wall seconds."""
    from bertkit.cli import main as bertkit

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train), encoding="utf-8")
        cmd = ["train-embedder", "--model", str(asset_path("minilm")), "--train", str(tmp / "train.jsonl")]
        cmd += ["--output", str(tmp / "ours"), "--batch-size", str(args.batch_size)]
        cmd += ["--max-length", str(args.max_length), "--lr", str(args.lr), "--seed", str(args.seed)]
        cmd += ["--epochs", "1", "--no-progress"]
        t0 = time.perf_counter()
        if bertkit(cmd) != 0:
            raise SystemExit("train-embedder failed")
        ours_s = time.perf_counter() - t0
        theirs_s = st_train(train, args, tmp / "theirs")
        ours = evaluate(bertkit_encoder(str(tmp / "ours"), args.max_length), test)
        theirs = evaluate(st_encoder(str(tmp / "theirs"), args.max_length), test)
    return ours, theirs, (ours_s, theirs_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-size", type=int, default=640)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="train with N seeds (the MNRL pair, or --beyond's hard-negative run) and print mean ± std",
    )
    p.add_argument("--memory", action="store_true", help="only the GradCache memory comparison")
    p.add_argument("--beyond", action="store_true", help="only the hard-negative + reranker pipeline")
    p.add_argument("--wiki", action="store_true", help="only Wikipedia section retrieval")
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rerank-train-size", type=int, default=1000, help="--beyond: training queries of the reranker")
    p.add_argument("--rerank-group", type=int, default=4, help="--beyond: the positive and its hard negatives")
    p.add_argument("--rerank-lr", type=float, default=3e-4)
    p.add_argument("--rerank-epochs", type=float, default=2.0, help="--beyond: the reranker's passes over its groups")
    p.add_argument("--rerank-precision", choices=("fp32", "bf16"), default="bf16", help="--beyond: reranker training")
    p.add_argument("--rerank-from", choices=("base", "embedder"), default="base", help="--beyond: the reranker's start")
    p.add_argument(
        "--rerank-mine-with",
        choices=("base", "embedder"),
        default="base",
        help="--beyond: the model that mines the reranker's negatives",
    )
    p.add_argument("--rerank-fusion", default="none,rrf,zscore", help="--beyond: comma list of none, rrf, zscore")
    p.add_argument(
        "--st-counterpart",
        action="store_true",
        help="--beyond: train sentence-transformers' MNRL on the rows bertkit mined and print it beside",
    )
    p.add_argument("--hard-epochs", type=float, default=2.0, help="--beyond: epochs over the mined rows")
    p.add_argument(
        "--hard-lr",
        type=float,
        default=5e-5,
        help="--beyond: the hard-negative run's peak lr (--lr, sentence-transformers' default, is the MNRL pair's)",
    )
    p.add_argument(
        "--embedder-args",
        default="",
        help="--beyond: more train-embedder flags for the hard-negative run, e.g. '--hard-negatives 3 --symmetric'",
    )
    p.add_argument(
        "--dev-pairs", type=int, default=300, help="--beyond: training pairs held out to choose the lexical weight"
    )
    p.add_argument("--no-rerank", action="store_true", help="--beyond: stop after the hard negatives")
    args = p.parse_args(argv)
    if args.beyond and not 0 < args.dev_pairs < args.train_size:
        p.error("--dev-pairs must hold out at least one training pair and leave some to train on")
    if args.st_counterpart and args.hard_epochs != round(args.hard_epochs):
        p.error("--st-counterpart trains sentence-transformers over whole epochs: give --hard-epochs as 1, 2, ...")
    if args.memory_child:
        memory_child(args.memory_child, args.max_length)
        return 0
    if args.memory:
        memory(args.max_length)
        return 0
    import sentence_transformers  # noqa: F401  (the reference: a machine without it stops here, not mid-run)

    torch.set_num_threads(max(1, torch.get_num_threads()))
    if args.wiki:
        wiki(args)
        return 0
    train, test = pairs("train")[: args.train_size], pairs("test")
    copies = sum(len(r) > 1 for r in qrels_of(test).values())
    print(
        f"BBC first sentence -> rest of article: {len(train)} training pairs, {len(test)} held-out articles "
        f"({copies} of them have an exact copy in the split, which counts as relevant too), "
        f"max_length {args.max_length}, batch {args.batch_size}{'' if args.beyond else ', 1 epoch'}, seed {args.seed}, "
        f"{torch.get_num_threads()} threads",
        flush=True,
    )

    def line(name: str, ours: dict, theirs: dict, extra: str = "") -> None:
        print(
            f"{name:<28} bertkit MRR@10 {ours['mrr@10']:.4f} R@1 {ours['recall@1']:.4f} nDCG@10 "
            f"{ours['ndcg@10']:.4f} | sentence-transformers MRR@10 {theirs['mrr@10']:.4f} R@1 "
            f"{theirs['recall@1']:.4f} nDCG@10 {theirs['ndcg@10']:.4f}{extra}",
            flush=True,
        )

    if args.beyond:
        with tempfile.TemporaryDirectory() as tmp:
            beyond(train, test, args, Path(tmp))
        return 0
    base = str(asset_path("minilm"))
    line(
        "base MiniLM",
        evaluate(bertkit_encoder(base, args.max_length), test),
        evaluate(st_encoder(base, args.max_length), test),
    )
    ours, theirs, walls = [], [], []
    for k in range(args.seeds):
        seed_args = argparse.Namespace(**{**vars(args), "seed": args.seed + k})
        o, t, w = mnrl_pair(train, test, seed_args)
        ours.append(o)
        theirs.append(t)
        walls.append(w)
        if args.seeds > 1:
            line(
                f"  seed {seed_args.seed}",
                o,
                t,
                f" | train wall time bertkit {w[0]:.0f} s, sentence-transformers {w[1]:.0f} s",
            )
    if args.seeds > 1:
        print(
            f"{'after MNRL, ' + str(args.seeds) + ' seeds':<28} bertkit MRR@10 {_mean_sd(ours, 'mrr@10')} R@1 "
            f"{_mean_sd(ours, 'recall@1')} | sentence-transformers MRR@10 {_mean_sd(theirs, 'mrr@10')} R@1 "
            f"{_mean_sd(theirs, 'recall@1')} | train wall time bertkit {np.median([w[0] for w in walls]):.0f} s, "
            f"sentence-transformers {np.median([w[1] for w in walls]):.0f} s (medians)",
            flush=True,
        )
    else:
        line(
            "after MNRL (1 epoch)",
            ours[0],
            theirs[0],
            f" | train wall time bertkit {walls[0][0]:.0f} s, sentence-transformers {walls[0][1]:.0f} s",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
