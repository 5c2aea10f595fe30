"""What do a pretrained model's vectors know about a task? Linear probes, beside count-based vectors.

    python benchmarks/embedding_probe.py [--models DIR [DIR ...]] [--corpus wordnet fortunes ...]
        [--task polarity] [--dev 800] [--window 5] [--threads 2]

Fine-tuning scores mix what pretraining taught with what the task's training split teaches on its
own. This probe separates them: a logistic regression (L-BFGS, three L2 strengths) is trained on
fixed sentence vectors of the training split's first examples and scored on its last ``--dev``, never
on the test split. The sentence vectors:

- ``random vectors``: the mean of unit random word vectors (a random projection of the bag of words);
- ``PPMI-SVD (corpus)``: the mean of count-based word vectors learnt from ``--corpus`` in about half
  a minute: co-occurrence counts over the WordPiece ids within ``--window`` tokens (weighted 1/d),
  positive pointwise mutual information with context smoothing 0.75, then a rank-``--dim``
  randomized SVD (``U * sqrt(S)``);
- for each ``--models`` folder, the mean of its word-embedding rows (``embeddings``) and the mean of
  its last layer over the real tokens (``encoder``).

The corpus is tokenized once into the same cache as ``bertkit pretrain`` (so a corpus a recipe run
has seen costs nothing). What it gave is row 33 of ``docs/pretraining.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from bertkit.assets import asset_path

TASKS = {"polarity": "polarity-train"}


def task_rows(task: str) -> tuple[list[str], torch.Tensor]:
    """(texts, 0/1 labels) of ``task``'s training split, in file order."""
    from bertkit.data.readers import read_table

    rows = read_table(asset_path(TASKS[task]))
    labels = sorted({r.label for r in rows})
    return [r.text for r in rows], torch.tensor([labels.index(r.label) for r in rows], dtype=torch.float32)


def corpus_ids(files: list[Path], vocab: Path) -> np.ndarray:
    """Every token id of ``files``, through the prepared-corpus cache that pretraining uses."""
    from bertkit.data.corpus import ShardedCorpus, ensure_prepared

    corpus = ShardedCorpus(ensure_prepared(files, vocab))
    bounds = corpus.sentence_starts[corpus.document_starts].tolist()  # each document's first token, and the end
    return np.concatenate([corpus.tokens(a, b) for a, b in zip(bounds[:-1], bounds[1:])])


def ppmi_svd(ids: np.ndarray, vocab_size: int, window: int, dim: int) -> torch.Tensor:
    """(vocab_size, dim) word vectors from windowed co-occurrence counts (see module docs); rows of
    ids the corpus never holds are 0."""
    ids_t = torch.from_numpy(ids)
    seen = torch.bincount(ids_t, minlength=vocab_size) > 0
    kept = seen.nonzero().squeeze(1)
    index = torch.full((vocab_size,), -1, dtype=torch.long)
    index[kept] = torch.arange(len(kept))
    n, m = len(kept), index[ids_t]
    counts = torch.zeros(n * n)  # dense: the corpora here hold under 30k types (3.6 GB at most)
    for d in range(1, window + 1):
        a, b = m[:-d], m[d:]
        w = torch.full((len(a),), 1.0 / d)
        counts.index_add_(0, a * n + b, w)
        counts.index_add_(0, b * n + a, w)
    c = counts.view(n, n)
    total = c.sum()
    rows = c.sum(1, keepdim=True)
    cols = c.sum(0, keepdim=True) ** 0.75
    cols = cols / cols.sum() * total
    c.mul_(total).div_(rows.clamp(min=1)).div_(cols.clamp(min=1e-9)).clamp_(min=1e-12).log_().clamp_(min=0)
    u, s, _ = torch.svd_lowrank(c, q=dim, niter=3)
    out = torch.zeros(vocab_size, dim)
    out[kept] = u * s.sqrt()
    return out


def bag_means(table: torch.Tensor, ids: list[list[int]]) -> torch.Tensor:
    """(N, dim) mean of the unit rows of ``table`` over each sentence's ids."""
    unit = table / table.norm(dim=1, keepdim=True).clamp(min=1e-6)
    return torch.stack([unit[torch.tensor(x, dtype=torch.long)].mean(0) for x in ids])


@torch.inference_mode()
def encoder_means(model: torch.nn.Module, tok: object, texts: list[str], batch: int = 64) -> torch.Tensor:
    """(N, hidden) mean of ``model``'s last layer over each sentence's real tokens."""
    from bertkit.modeling.sentence import pool

    out = []
    for i in range(0, len(texts), batch):
        enc = tok(texts[i : i + batch], padding=True, truncation=True, max_length=64, return_tensors="pt")
        h = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
        out.append(pool(h, enc["attention_mask"], "mean"))
    return torch.cat(out).float()


def probe(x: torch.Tensor, y: torch.Tensor, dev: int, l2: float) -> float:
    """Accuracy on the last ``dev`` rows of a logistic regression fit on the others."""
    train, test = slice(0, len(y) - dev), slice(len(y) - dev, len(y))
    x = (x - x[train].mean(0)) / x[train].std(0).clamp(min=1e-6)
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=500)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x[train] @ w + b, y[train]) + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return (((x[test] @ w + b) > 0).float() == y[test]).float().mean().item()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=[], help="model folders whose vectors are probed")
    ap.add_argument(
        "--corpus",
        nargs="*",
        default=["wordnet", "fortunes"],
        help="asset names or files for the PPMI-SVD vectors (default: wordnet fortunes; none: skip them)",
    )
    ap.add_argument("--task", default="polarity", choices=sorted(TASKS))
    ap.add_argument("--dev", type=int, default=800, help="score on the training split's last N examples")
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from bertkit import BertTokenizer

    vocab = asset_path("vocab-uncased")
    tok = BertTokenizer(str(vocab))
    texts, y = task_rows(args.task)
    if not 0 < args.dev < len(texts):
        raise SystemExit(f"--dev {args.dev}: {args.task}'s training split has {len(texts)} examples")
    ids = [tok.convert_tokens_to_ids(tok.tokenize(t)) or [tok.unk_token_id] for t in texts]
    l2s = (1e-4, 1e-3, 1e-2)
    print(f"{args.task}: logistic regression on {len(texts) - args.dev} training examples, accuracy % on the")
    print(f"training split's last {args.dev} at L2 {', '.join(f'{v:g}' for v in l2s)}")
    features = {"random vectors": bag_means(torch.randn(tok.vocab_size, args.dim), ids)}
    if args.corpus:
        files = [Path(c) if Path(c).is_file() else asset_path(c) for c in args.corpus]
        t0 = time.perf_counter()
        table = ppmi_svd(corpus_ids(files, vocab), tok.vocab_size, args.window, args.dim)
        name = f"PPMI-SVD ({' + '.join(args.corpus)}; {time.perf_counter() - t0:.0f} s)"
        features[name] = bag_means(table, ids)
    for folder in map(Path, args.models):
        from bertkit import AutoModel, AutoTokenizer

        model = AutoModel.from_pretrained(folder).eval()
        mtok = AutoTokenizer.from_pretrained(folder)  # its own vocabulary, which may not be bert-base's
        mids = [mtok.convert_tokens_to_ids(mtok.tokenize(t)) or [mtok.unk_token_id] for t in texts]
        table = model.get_input_embeddings().weight.detach().float()
        features[f"{folder} embeddings"] = bag_means(table, mids)
        features[f"{folder} encoder"] = encoder_means(model, mtok, texts)
    for name, x in features.items():
        scores = [probe(x, y, args.dev, l2) * 100 for l2 in l2s]
        print(f"{name}: {' / '.join(f'{s:.1f}' for s in scores)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
