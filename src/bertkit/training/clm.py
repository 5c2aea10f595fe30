"""Causal-LM pretraining recipe: a GPT-2 trained on raw text with the shared Trainer.

Raw text goes through the same data pipeline as MLM pretraining (``prepare-data`` shards, cached).
Every sentence becomes ``[CLS] sentence [SEP]`` (with a BERT WordPiece vocabulary, as the uer Chinese
GPT-2 models use) or is followed by the vocabulary's end-of-text token; the sentences are then
streamed into blocks of ``seq_len`` tokens, the usual GPT recipe (no padding, no wasted compute).
A seeded ``eval_fraction`` of the sentences is held out before packing, so held-out blocks contain no
training text. Evaluation reports the held-out loss and perplexity (exp of the mean token loss).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["CLMDataset", "CLMRecipe", "build_clm_blocks", "evaluate_clm", "pack_sentences", "pretrain_clm"]


class CLMDataset:
    """(num_blocks, seq_len) token blocks -> ``{"input_ids", "labels"}`` items (labels = inputs; the model shifts)."""

    def __init__(self, blocks: np.ndarray):
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = torch.from_numpy(self.blocks[index].astype(np.int64))
        return {"input_ids": ids, "labels": ids}


def collate_clm(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack equal-length blocks."""
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


def pack_sentences(sentences: Sequence[np.ndarray], seq_len: int, prefix: int | None, suffix: int | None) -> np.ndarray:
    """Wrap each sentence in ``prefix``/``suffix`` ids, concatenate, cut into full (n, seq_len) blocks."""
    parts: list[np.ndarray] = []
    pre = np.array([prefix], np.int64) if prefix is not None else np.zeros(0, np.int64)
    suf = np.array([suffix], np.int64) if suffix is not None else np.zeros(0, np.int64)
    for s in sentences:
        parts += [pre, np.asarray(s, np.int64), suf]
    stream = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    n = len(stream) // seq_len
    return stream[: n * seq_len].reshape(n, seq_len)


def build_clm_blocks(corpus: Any, vocab: dict[str, int], seq_len: int, eval_fraction: float,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Training and held-out blocks from a ShardedCorpus (sentences split before packing)."""
    if "[CLS]" in vocab and "[SEP]" in vocab:
        prefix, suffix = vocab["[CLS]"], vocab["[SEP]"]
    elif "<|endoftext|>" in vocab:
        prefix, suffix = None, vocab["<|endoftext|>"]
    else:
        raise ValueError("the vocabulary has neither [CLS]/[SEP] nor <|endoftext|> to mark sentence bounds")
    starts = corpus.sentence_starts
    n = corpus.num_sentences
    held = np.zeros(n, bool)
    if eval_fraction > 0:
        k = max(1, round(eval_fraction * n))
        held[np.random.default_rng(seed).choice(n, size=min(k, n - 1), replace=False)] = True
    train = [corpus.tokens(int(starts[i]), int(starts[i + 1])) for i in range(n) if not held[i]]
    evals = [corpus.tokens(int(starts[i]), int(starts[i + 1])) for i in range(n) if held[i]]
    return pack_sentences(train, seq_len, prefix, suffix), pack_sentences(evals, seq_len, prefix, suffix)


@torch.no_grad()
def evaluate_clm(model: Any, dataset: CLMDataset, batch_size: int = 32, device: Any = None,
                 amp_dtype: Any = None) -> dict[str, float]:
    """Held-out next-token loss (mean over predicted tokens) and perplexity."""
    import contextlib

    device = device or next(model.parameters()).device
    loss_sum = 0.0
    count = 0
    for start in range(0, len(dataset), batch_size):
        batch = collate_clm([dataset[i] for i in range(start, min(len(dataset), start + batch_size))])
        batch = {k: v.to(device) for k, v in batch.items()}
        ctx = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()
        with ctx:
            out = model(input_ids=batch["input_ids"], labels=batch["labels"], use_cache=False)
        predicted = batch["labels"][:, 1:].numel()
        loss_sum += float(out.loss) * predicted
        count += predicted
    loss = loss_sum / max(count, 1)
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


@dataclass
class CLMRecipe:
    """Settings of a causal-LM pretraining run (the ``pretrain-clm`` flags)."""

    corpus: Sequence[str]
    vocab: str
    output: str
    n_layer: int = 4
    n_embd: int = 256
    n_head: int = 4
    seq_len: int = 128
    format: str = "bert"
    lower_case: bool = True
    eval_fraction: float = 0.02
    eval_blocks: int = 256
    batch_size: int = 16
    max_steps: int = 1000
    max_minutes: float | None = None
    lr: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    dropout: float = 0.0
    precision: str = "auto"
    seed: int = 42
    eval_every: int = 100
    save_every: int = 100
    resume: bool = False
    progress: bool = True
    cache_dir: str | None = None


def pretrain_clm(recipe: CLMRecipe) -> dict[str, Any]:
    """Train a GPT-2 from scratch on ``recipe.corpus``; saves a folder loadable by transformers.

    With a BERT WordPiece vocabulary the saved config names ``"tokenizer_class": "BertTokenizer"``,
    so ``AutoTokenizer`` (bertkit's or transformers') picks the right tokenizer. Returns the last metrics.
    """
    from bertkit.data import ShardedCorpus, ensure_prepared
    from bertkit.modeling.gpt2 import GPT2Config, GPT2LMHeadModel
    from bertkit.tokenization import load_tokenizer, load_vocab
    from bertkit.training.trainer import Trainer, TrainingConfig, set_seed

    if recipe.seq_len < 8:
        raise ValueError(f"seq_len must be at least 8, got {recipe.seq_len}")
    vocab = load_vocab(recipe.vocab)
    tokenizer = load_tokenizer(recipe.vocab, recipe.lower_case)
    data_dir = ensure_prepared(recipe.corpus, recipe.vocab, recipe.format, recipe.lower_case,
                               progress=recipe.progress, cache_dir=recipe.cache_dir)
    corpus = ShardedCorpus(data_dir)
    if corpus.vocab_size != len(vocab):
        raise ValueError(f"prepared data {data_dir} uses a {corpus.vocab_size}-token vocabulary, "
                         f"{recipe.vocab} has {len(vocab)}")
    train_blocks, eval_blocks = build_clm_blocks(corpus, vocab, recipe.seq_len, recipe.eval_fraction, recipe.seed)
    if len(train_blocks) == 0:
        raise ValueError(f"the corpus holds fewer than seq_len={recipe.seq_len} tokens of training text")
    if len(eval_blocks) > recipe.eval_blocks:
        eval_blocks = eval_blocks[: recipe.eval_blocks]
    bert_vocab = "[CLS]" in vocab
    special = ({"bos_token_id": vocab["[CLS]"], "eos_token_id": vocab["[SEP]"], "pad_token_id": vocab.get("[PAD]")}
               if bert_vocab else {"bos_token_id": vocab["<|endoftext|>"], "eos_token_id": vocab["<|endoftext|>"]})
    config = GPT2Config(vocab_size=len(vocab), n_positions=recipe.seq_len, n_embd=recipe.n_embd,
                        n_layer=recipe.n_layer, n_head=recipe.n_head, resid_pdrop=recipe.dropout,
                        embd_pdrop=recipe.dropout, attn_pdrop=recipe.dropout, **special)
    if bert_vocab:
        config.tokenizer_class = "BertTokenizer"
    set_seed(recipe.seed)
    model = GPT2LMHeadModel(config)
    train_ds, eval_ds = CLMDataset(train_blocks), CLMDataset(eval_blocks)
    cfg = TrainingConfig(
        output_dir=recipe.output, max_steps=recipe.max_steps, max_time_minutes=recipe.max_minutes,
        batch_size=recipe.batch_size, lr=recipe.lr, weight_decay=recipe.weight_decay,
        warmup_steps=recipe.warmup_steps, precision=recipe.precision, seed=recipe.seed,
        eval_every=recipe.eval_every or None, save_every=recipe.save_every or None, resume=recipe.resume,
        progress=recipe.progress, run_name="pretrain-clm",
    )
    trainer: Trainer | None = None

    def evaluate(m: Any) -> dict[str, float]:
        return evaluate_clm(m, eval_ds, device=trainer.device, amp_dtype=trainer.amp_dtype) if len(eval_ds) else {}

    trainer = Trainer(model, cfg, train_ds, collate_fn=collate_clm, evaluate=evaluate, tokenizer=tokenizer)
    if trainer.is_main:
        print(f"pretrain-clm: {len(train_ds):,} training / {len(eval_ds):,} held-out blocks of {recipe.seq_len} "
              f"tokens from {data_dir}; {model.num_parameters():,} parameters; precision {trainer.precision}",
              file=sys.stderr)
    result = trainer.train()
    return {"step": result.step, **{f"eval_{k}": v for k, v in result.last_metrics.items()}}


def perplexity_curve(metrics_jsonl: str | os.PathLike, png: str | os.PathLike, title: str = "") -> Path:
    """Plot held-out perplexity (points) and training perplexity (exp of each step's loss) against step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bertkit._io import atomic_path

    rows = [json.loads(line) for line in Path(metrics_jsonl).read_text(encoding="utf-8").splitlines() if line.strip()]
    points = [(r["step"], r["eval_perplexity"]) for r in rows if "eval_perplexity" in r]
    if not points:
        raise ValueError(f"{metrics_jsonl} has no eval_perplexity rows")
    train = [(r["step"], math.exp(min(r["loss"], 50.0))) for r in rows if "loss" in r]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    if train:
        ax.plot([p[0] for p in train], [p[1] for p in train], color="0.6", lw=1, label="training batches")
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label="held-out")
    ax.legend()
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("perplexity")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    with atomic_path(png) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return Path(png)
