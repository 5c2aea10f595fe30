"""One fine-tuning epoch: bertkit vs a plain transformers loop, same model, data and batch size.

    python benchmarks/finetune.py [--n 256] [--batch-size 32] [--repeats 3] [--device cpu|cuda]

Both sides fine-tune the real MiniLM checkpoint for sentence polarity on the same subset of the
training split, with AdamW and a linear schedule, batch size 32, fp32, in this one process
(alternating, so machine noise hits both). The transformers loop is the usual one: shuffled
batches, the tokenizer padding each batch to its longest sentence, ``model(**batch).loss``.
bertkit runs its fine-tuning path: tokenize once, length-grouped batches with dynamic padding, the
shared Trainer, bertkit's SDPA model. Both run on ``--device`` (the CPU by default; on a GPU the
clock stops after the device has finished). Prints the median epoch time of each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from bertkit.assets import asset_path  # noqa: E402


def bertkit_epoch(texts_labels, args, seed, out_dir) -> tuple[float, int]:
    from bertkit.data.batching import LengthGroupedBatchSampler, collate_features
    from bertkit.data.readers import TextExample
    from bertkit.modeling import BertForSequenceClassification
    from bertkit.tasks.api import _Features
    from bertkit.tasks.tasks import TaskOptions, TextClassificationTask
    from bertkit.tokenization import BertTokenizer
    from bertkit.training import Trainer, TrainingArguments

    t0 = time.perf_counter()
    tok = BertTokenizer.from_pretrained(str(asset_path("minilm")))
    task = TextClassificationTask(TaskOptions(max_length=args.max_length))
    ex = [TextExample(t, None, l) for t, l in texts_labels]
    task.setup_labels(ex)
    feats = task.encode(tok, ex).features
    torch.manual_seed(seed)
    model = BertForSequenceClassification.from_pretrained(str(asset_path("minilm")), **task.model_kwargs())
    sampler = LengthGroupedBatchSampler([len(f["input_ids"]) for f in feats], args.batch_size, seed=seed)
    cfg = TrainingArguments(
        output=str(out_dir),
        epochs=1,
        batch_size=args.batch_size,
        lr=5e-5,
        warmup_ratio=0.1,
        precision="fp32",
        seed=seed,
        drop_last=False,
        progress=False,
        save_final=False,
        plot=False,
        log_every=1000,
        device=args.device,
    )
    trainer = Trainer(model, cfg, _Features(feats), collate_fn=collate_features, batch_sampler=sampler)
    t0 = time.perf_counter()
    trainer.train()
    _sync(args.device)
    tokens = sum(max(len(feats[i]["input_ids"]) for i in b) * len(b) for b in sampler.batches())
    return time.perf_counter() - t0, tokens


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def transformers_epoch(texts_labels, args, seed) -> tuple[float, int]:
    import transformers

    transformers.logging.set_verbosity_error()
    tok = transformers.BertTokenizerFast.from_pretrained(str(asset_path("minilm")))
    labels = sorted({l for _, l in texts_labels})
    torch.manual_seed(seed)
    model = transformers.BertForSequenceClassification.from_pretrained(
        str(asset_path("minilm")), num_labels=len(labels)
    )
    model.to(args.device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    n_steps = -(-len(texts_labels) // args.batch_size)
    sched = transformers.get_linear_schedule_with_warmup(opt, int(0.1 * n_steps), n_steps)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(texts_labels), generator=g).tolist()
    t0 = time.perf_counter()
    tokens = 0
    for b in range(0, len(order), args.batch_size):
        items = [texts_labels[i] for i in order[b : b + args.batch_size]]
        batch = tok(
            [t for t, _ in items], padding=True, truncation=True, max_length=args.max_length, return_tensors="pt"
        )
        batch["labels"] = torch.tensor([labels.index(l) for _, l in items])
        batch = {k: v.to(args.device) for k, v in batch.items()}
        tokens += batch["input_ids"].numel()
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    _sync(args.device)
    return time.perf_counter() - t0, tokens


def _where(device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(torch.device(device))}, torch {torch.__version__}"
    return f"CPU, {torch.get_num_threads()} threads"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="training sentences per epoch")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="runs/bench-finetune")
    ap.add_argument("--device", default="cpu", help="where both sides train: cpu, cuda, cuda:N")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("bertkit").setLevel(logging.ERROR)
    from bertkit.data.readers import read_table

    rows = read_table(asset_path("polarity-train"))[: args.n]
    data = [(r.text, r.label) for r in rows]
    bk, hf = [], []
    for r in range(args.repeats):
        t, bk_tokens = bertkit_epoch(data, args, r, Path(args.out) / f"r{r}")
        bk.append(t)
        t, hf_tokens = transformers_epoch(data, args, r)
        hf.append(t)
        print(f"  repeat {r + 1}: bertkit {bk[-1]:.1f}s, transformers {hf[-1]:.1f}s", file=sys.stderr, flush=True)
    b, h = statistics.median(bk), statistics.median(hf)
    print(
        f"finetune epoch, MiniLM, polarity {len(data)} sentences, batch {args.batch_size}, fp32, "
        f"{_where(args.device)}, {args.repeats} repeats"
    )
    print(
        f"  padded tokens per epoch: bertkit {bk_tokens}, transformers {hf_tokens} ({hf_tokens / bk_tokens:.2f}x more)"
    )
    print(f"  bertkit      median {b:.2f}s  ({len(data) / b:.1f} sentences/s)")
    print(f"  transformers median {h:.2f}s  ({len(data) / h:.1f} sentences/s)")
    print(f"  speedup {h / b:.2f}x (target >= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
