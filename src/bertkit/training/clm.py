"""Causal-LM pretraining recipe: a GPT-2 trained on raw text with the shared Trainer.

Raw text goes through the same data pipeline as MLM pretraining (``prepare-data`` shards, cached).
Every sentence becomes ``[CLS] sentence [SEP]`` (with a BERT WordPiece vocabulary, as the uer Chinese
GPT-2 models use) or is followed by the vocabulary's end-of-text token; the sentences are then
streamed into blocks of ``seq_len`` tokens, the usual GPT recipe (no padding, no wasted compute).
A seeded ``eval_fraction`` of the sentences is held out before packing, so held-out blocks contain no
training text. Evaluation reports the held-out loss and perplexity (exp of the mean token loss).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertkit import _args as A
from bertkit._args import redefault, setting
from bertkit.training.run_folders import TRAINER_OUTPUTS, claim_training_output, run_identity, within_claim
from bertkit.training.training_args import (
    TRAINING_GROUP,
    TrainingArguments,
    check_step_length,
    step_length_help,
    with_step_length,
)

__all__ = [
    "CLMArguments",
    "CLMDataset",
    "CLMRecipe",
    "build_clm_blocks",
    "clm_identity",
    "evaluate_clm",
    "pack_sentences",
    "pretrain_clm",
]


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


def build_clm_blocks(
    corpus: Any, vocab: dict[str, int], seq_len: int, eval_fraction: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
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
def evaluate_clm(
    model: Any, dataset: CLMDataset, batch_size: int = 32, device: Any = None, amp_dtype: Any = None
) -> dict[str, float]:
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


@dataclass(kw_only=True)
class CLMArguments(TrainingArguments):
    """Every setting of `bertkit pretrain-clm`: the shared training arguments plus the GPT-2 recipe's own."""

    output: str = redefault(TrainingArguments, "output")  # required
    corpus: list[str] = setting(
        nargs="+", metavar="FILE", group="data", same_on_resume=False, help="raw .txt / .jsonl files"
    )
    vocab: str = setting(group="data", same_on_resume=False, help="vocab.txt (a BERT WordPiece vocabulary)")
    format: str = setting(
        "bert",
        choices=("prose", "bert"),
        group="data",
        help="raw text layout: bert = one sentence a line, prose = split sentences",
    )
    lower_case: bool = setting(True, group="data", help="keep the case of the text (a cased vocabulary)")
    cache_dir: str | None = setting(
        None,
        group="data",
        same_on_resume=False,
        help="where --corpus is prepared (default: the shared prepared-data cache)",
    )
    eval_fraction: float = setting(0.02, type=A.fraction_0_1_right_open, group="data", help="sentences held out")
    eval_blocks: int = setting(
        256, type=A.positive_int, group="data", same_on_resume=False, help="held-out blocks per evaluation"
    )
    n_layer: int = setting(4, type=A.positive_int, group="model", help="transformer layers")
    n_embd: int = setting(256, type=A.positive_int, group="model", help="hidden size")
    n_head: int = setting(4, type=A.positive_int, group="model", help="attention heads")
    dropout: float | None = redefault(TrainingArguments, "dropout", 0.0)
    seq_len: int = setting(128, type=A.SEQ_LEN, group=TRAINING_GROUP, help="block length = the model's n_positions")
    batch_size: int = redefault(TrainingArguments, "batch_size", 16)
    max_steps: int | None = redefault(TrainingArguments, "max_steps", None, help=step_length_help())
    lr: float = redefault(TrainingArguments, "lr", 1e-3)
    warmup_steps: int = redefault(TrainingArguments, "warmup_steps", 100)
    eval_every: int = redefault(TrainingArguments, "eval_every", 100)
    save_every: int = redefault(TrainingArguments, "save_every", 100)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_step_length(self)


CLMRecipe = CLMArguments  # its former name

# What `bertkit pretrain-clm` writes into its --output.
CLM_OUTPUTS = TRAINER_OUTPUTS


def _clm_data(args: CLMArguments) -> dict[str, Any]:
    """Tokenizer, vocabulary, prepared corpus and the training / held-out blocks of a run."""
    from bertkit.data import ShardedCorpus, ensure_prepared
    from bertkit.tokenization import load_tokenizer, load_vocab

    vocab = load_vocab(args.vocab)
    tokenizer = load_tokenizer(args.vocab, args.lower_case)
    data_dir = ensure_prepared(
        args.corpus, args.vocab, args.format, args.lower_case, progress=args.progress, cache_dir=args.cache_dir
    )
    corpus = ShardedCorpus(data_dir)
    if corpus.vocab_size != len(vocab):
        raise ValueError(
            f"prepared data {data_dir} uses a {corpus.vocab_size}-token vocabulary, {args.vocab} has {len(vocab)}"
        )
    train_blocks, eval_blocks = build_clm_blocks(corpus, vocab, args.seq_len, args.eval_fraction, args.seed)
    if len(train_blocks) == 0:
        raise ValueError(f"the corpus holds fewer than seq_len={args.seq_len} tokens of training text")
    return {
        "vocab": vocab,
        "tokenizer": tokenizer,
        "data_dir": data_dir,
        "corpus": corpus,
        "train": CLMDataset(train_blocks),
        "eval": CLMDataset(eval_blocks[: args.eval_blocks]),
    }


def _clm_model(args: CLMArguments, vocab: dict[str, int]) -> Any:
    """A new GPT-2 sized by ``args``, its sentence-bound tokens taken from the vocabulary."""
    from bertkit.modeling.gpt2 import GPT2Config, GPT2LMHeadModel
    from bertkit.training.trainer import set_seed

    bert_vocab = "[CLS]" in vocab
    special = (
        {"bos_token_id": vocab["[CLS]"], "eos_token_id": vocab["[SEP]"], "pad_token_id": vocab.get("[PAD]")}
        if bert_vocab
        else {"bos_token_id": vocab["<|endoftext|>"], "eos_token_id": vocab["<|endoftext|>"]}
    )
    config = GPT2Config(
        vocab_size=len(vocab),
        n_positions=args.seq_len,
        n_embd=args.n_embd,
        n_layer=args.n_layer,
        n_head=args.n_head,
        **special,
    )
    if bert_vocab:
        config.tokenizer_class = "BertTokenizer"
    set_seed(args.seed)
    return GPT2LMHeadModel(config)


def clm_identity(args: CLMArguments, data: dict[str, Any]) -> dict[str, Any]:
    """What makes a causal-LM run the same run on --resume: settings, data fingerprint, objective."""
    from bertkit.data.corpus import vocab_fingerprint

    corpus = data["corpus"]
    return run_identity(
        args,
        data={
            "vocab": vocab_fingerprint(sorted(data["vocab"], key=data["vocab"].get)),
            "tokens": int(corpus.num_tokens),
            "sentences": int(corpus.num_sentences),
            "documents": int(corpus.num_documents),
            "eval_fraction": args.eval_fraction,
            "seed": args.seed,
        },
        objective={"causal_lm": True, "seq_len": args.seq_len},
    )


def pretrain_clm(args: CLMArguments) -> dict[str, Any]:
    """Train a GPT-2 from scratch on ``args.corpus``; saves a folder loadable by transformers.

    With a BERT WordPiece vocabulary the saved config names ``"tokenizer_class": "BertTokenizer"``,
    so ``AutoTokenizer`` (bertkit's or transformers') picks the right tokenizer. ``--output`` follows
    the folder rule of every training command (:mod:`bertkit.training.run_folders`). Returns the last metrics.
    """
    import dataclasses

    from bertkit.training.trainer import Trainer

    claim_training_output(args, "pretrain-clm", {}, CLM_OUTPUTS, dry_run=True)
    data = _clm_data(args)
    model = _clm_model(args, data["vocab"])  # before the claim: a bad size must leave no folder behind
    claim = claim_training_output(args, "pretrain-clm", clm_identity(args, data), CLM_OUTPUTS)
    train_ds, eval_ds = data["train"], data["eval"]
    trainer: Trainer | None = None

    def evaluate(m: Any) -> dict[str, float]:
        return evaluate_clm(m, eval_ds, device=trainer.device, amp_dtype=trainer.amp_dtype) if len(eval_ds) else {}

    trainer = Trainer(
        model,
        dataclasses.replace(with_step_length(args), run_name="pretrain-clm"),
        train_ds,
        collate_fn=collate_clm,
        evaluate=evaluate,
        tokenizer=data["tokenizer"],
    )
    if trainer.is_main:
        print(
            f"pretrain-clm: {len(train_ds):,} training / {len(eval_ds):,} held-out blocks of {args.seq_len} "
            f"tokens from {data['data_dir']}; {model.num_parameters():,} parameters; precision "
            f"{trainer.precision}",
            file=sys.stderr,
        )
    result = within_claim(claim, trainer.train)
    return {"step": result.step, **{f"eval_{k}": v for k, v in result.last_metrics.items()}}
