"""`bertkit pretrain`: MLM (+ NSP) pretraining from raw text or prepared shards.

Example::

    bertkit pretrain --corpus austen.txt wiki.txt bbc.jsonl --vocab vocab.txt --config mini \\
        --seq-len 128 --batch-size 32 --max-steps 2000 --lr 1e-3 --warmup-steps 200 \\
        --eval-every 200 --save-every 500 --output runs/mini

Under ``torchrun --nproc_per_node=N -m bertkit pretrain ...`` it runs DistributedDataParallel.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from bertkit import _args as A

__all__ = ["add_arguments", "run", "build_pretraining", "mlm_nsp_loss", "evaluate_pretraining"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("data")
    src.add_argument("--corpus", nargs="+", metavar="FILE",
                     help="raw .txt / .jsonl files, prepared on the fly into a cache")
    src.add_argument("--data", metavar="DIR", help="a folder written by `bertkit prepare-data`")
    src.add_argument("--format", choices=["prose", "bert"], default="prose",
                     help="raw text layout (see `bertkit prepare-data --help`)")
    src.add_argument("--cache-dir", help="where --corpus is prepared (default: ~/.cache/bertkit/prepared/HASH)")
    src.add_argument("--no-lower-case", dest="lower_case", action="store_false")
    src.add_argument("--eval-fraction", type=A.fraction_0_1_right_open, default=0.02,
                     help="fraction of tokens held out (whole documents) for evaluation (default 0.02)")
    src.add_argument("--eval-instances", type=A.nonnegative_int, default=512, help="held-out instances per evaluation")
    src.add_argument("--short-seq-prob", type=A.fraction_0_1, default=0.1)
    src.add_argument("--no-nsp", action="store_true", help="MLM only, full-length single segments")
    src.add_argument("--whole-word-masking", action="store_true")
    src.add_argument("--mask-prob", type=A.fraction_0_1_left_open, default=0.15)

    mod = p.add_argument_group("model")
    mod.add_argument("--vocab", help="vocab.txt for a new model")
    mod.add_argument("--model", metavar="DIR", help="continue pretraining from a saved model folder")
    mod.add_argument("--config", default="mini", choices=["tiny", "mini", "small", "medium", "base", "large"])
    mod.add_argument("--dropout", type=A.fraction_0_1_right_open, default=None,
                     help="hidden and attention dropout (default: the config's, 0.1)")

    tr = p.add_argument_group("training")
    tr.add_argument("--seq-len", type=A.SEQ_LEN, default=128)
    tr.add_argument("--batch-size", type=A.positive_int, default=32, help="per process and micro-step")
    tr.add_argument("--grad-accum", type=A.positive_int, default=1)
    tr.add_argument("--max-steps", type=A.positive_int, default=1000, help="optimizer steps (sets the lr schedule)")
    tr.add_argument("--max-minutes", type=A.positive_float, default=None,
                    help="also stop after this many minutes of training (evaluation excluded)")
    tr.add_argument("--lr", type=A.positive_float, default=1e-4)
    tr.add_argument("--warmup-steps", type=A.nonnegative_int, default=0)
    tr.add_argument("--warmup-ratio", type=A.fraction_0_1, default=0.0)
    tr.add_argument("--weight-decay", type=A.nonnegative_float, default=0.01)
    tr.add_argument("--max-grad-norm", type=A.nonnegative_float, default=1.0)
    tr.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto")
    tr.add_argument("--seed", type=A.seed, default=42)
    tr.add_argument("--log-every", type=A.positive_int, default=1)
    tr.add_argument("--eval-every", type=A.nonnegative_int, default=0, help="0: only at the end")
    tr.add_argument("--save-every", type=A.nonnegative_int, default=0, help="0: no intermediate checkpoints")
    tr.add_argument("--keep-last", type=A.positive_int, default=2)
    tr.add_argument("--output", required=True)
    tr.add_argument("--resume", action="store_true")
    tr.add_argument("--no-progress", dest="progress", action="store_false")
    tr.add_argument("--threads", type=A.threads, default=0, help="torch intra-op threads (0: torch's default)")


def _token_weight(labels: Any) -> Any:
    """Under DDP, this rank's share of the masked tokens x world size (1.0 otherwise).

    DDP averages gradients of per-rank mean losses; scaling each rank's MLM mean by this weight
    makes the result the mean over all masked tokens of the global batch, exactly what one process
    with the whole batch computes.
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return 1.0
    n = (labels != -100).sum().to(torch.float32)
    total = n.detach().clone()
    dist.all_reduce(total)
    return n * dist.get_world_size() / total.clamp_min(1.0)


def mlm_nsp_loss(model: Any, batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Sparse-MLM forward; returns (loss to optimise, {mlm_loss, nsp_loss})."""
    import torch.nn.functional as F

    out = model(**batch, sparse_mlm=True)
    nsp_logits = out.seq_relationship_logits
    labels = batch["labels"]
    weight = _token_weight(labels)
    if "next_sentence_label" in batch:
        nsp_loss = F.cross_entropy(nsp_logits.float(), batch["next_sentence_label"])
        mlm_loss = out.loss - nsp_loss  # the model's loss is mlm + nsp
        loss = out.loss if isinstance(weight, float) else mlm_loss * weight + nsp_loss
        return loss, {"mlm_loss": mlm_loss, "nsp_loss": nsp_loss}
    mlm_loss = F.cross_entropy(out.prediction_logits.float(), labels[labels != -100])
    # Touch the unused NSP head so DDP sees a gradient (zero) for every parameter.
    return mlm_loss * weight + 0.0 * nsp_logits.sum(), {"mlm_loss": mlm_loss}


def evaluate_pretraining(model: Any, dataset: Any, collate: Any, batch_size: int = 64,
                         device: Any = None, amp_dtype: Any = None) -> dict[str, float]:
    """Held-out MLM accuracy, MLM loss, perplexity and (when labelled) NSP accuracy."""
    import contextlib

    import torch
    import torch.nn.functional as F

    device = device or next(model.parameters()).device
    correct = total = 0
    loss_sum = 0.0
    nsp_correct = nsp_total = 0
    for start in range(0, len(dataset), batch_size):
        batch = collate([dataset[i] for i in range(start, min(len(dataset), start + batch_size))])
        batch = {k: v.to(device) for k, v in batch.items()}
        ctx = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()
        with ctx:
            out = model(**batch, sparse_mlm=True)
        labels = batch["labels"][batch["labels"] != -100]
        logits = out.prediction_logits.float()
        loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
        correct += int((logits.argmax(-1) == labels).sum())
        total += int(labels.numel())
        if "next_sentence_label" in batch:
            nsp_correct += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
            nsp_total += int(batch["next_sentence_label"].numel())
    metrics = {"mlm_accuracy": correct / max(total, 1), "mlm_loss": loss_sum / max(total, 1)}
    metrics["perplexity"] = math.exp(min(metrics["mlm_loss"], 50.0))
    if nsp_total:
        metrics["nsp_accuracy"] = nsp_correct / nsp_total
    return metrics


def build_pretraining(args: argparse.Namespace) -> dict[str, Any]:
    """Model, tokenizer, datasets and collators from CLI arguments (shared with the benchmark)."""
    import numpy as np

    from bertkit.data import (
        MaskingCollator,
        PretrainingDataset,
        ShardedCorpus,
        create_nsp_instances,
        create_single_segment_instances,
        load_vocab,
        split_documents,
    )
    from bertkit.data.corpus import vocab_fingerprint
    from bertkit.data.prepare_cli import ensure_prepared, load_tokenizer
    from bertkit.modeling import BertConfig, BertForPreTraining, check_vocab_fits

    if not args.vocab and not args.model:
        raise ValueError("give --vocab VOCAB (new model) or --model DIR (continue pretraining)")
    if bool(args.corpus) == bool(args.data):
        raise ValueError("give exactly one of --corpus FILE... or --data DIR")
    if args.seq_len < 8:
        raise ValueError(f"--seq-len must be at least 8, got {args.seq_len}")
    vocab_path = Path(args.vocab) if args.vocab else Path(args.model) / "vocab.txt"
    vocab = load_vocab(vocab_path)
    tokenizer = load_tokenizer(vocab_path, args.lower_case)

    if args.model:
        config = BertConfig.from_pretrained(args.model)
    else:
        config = BertConfig.from_preset(args.config, vocab_size=len(vocab))
    if args.dropout is not None:
        config.hidden_dropout_prob = args.dropout
        config.attention_probs_dropout_prob = args.dropout
    check_vocab_fits(tokenizer, config, str(args.model or vocab_path))
    if args.seq_len > config.max_position_embeddings:
        raise ValueError(f"--seq-len {args.seq_len} exceeds the model's max_position_embeddings "
                         f"({config.max_position_embeddings})")

    if args.data:
        data_dir = Path(args.data)
    else:
        data_dir = ensure_prepared(args.corpus, vocab_path, args.format, args.lower_case,
                                   progress=args.progress, cache_dir=args.cache_dir)
    corpus = ShardedCorpus(data_dir)
    if corpus.vocab_size != len(vocab):
        raise ValueError(f"prepared data {data_dir} was tokenized with a {corpus.vocab_size}-token "
                         f"vocabulary but {vocab_path} has {len(vocab)} tokens")
    saved = corpus.meta.get("vocab_fingerprint")
    if saved and saved != vocab_fingerprint(vocab):
        # Same size, different tokens: every id would mean another word. Silent garbage otherwise.
        raise ValueError(f"prepared data {data_dir} was tokenized with a different vocabulary than {vocab_path} "
                         f"(both have {len(vocab)} tokens, but not the same ones); prepare the data again "
                         f"with this vocabulary")
    train_docs, eval_docs = split_documents(corpus, args.eval_fraction, seed=args.seed)
    if args.no_nsp:
        train_inst = create_single_segment_instances(corpus, train_docs, args.seq_len)
        eval_inst = create_single_segment_instances(corpus, eval_docs, args.seq_len)
    else:
        train_inst = create_nsp_instances(corpus, train_docs, args.seq_len, args.short_seq_prob, seed=args.seed)
        # Held-out B segments come from held-out documents only.
        eval_inst = create_nsp_instances(corpus, eval_docs, args.seq_len, args.short_seq_prob,
                                         seed=args.seed + 1) if len(eval_docs) else np.zeros((0, 5), np.int64)
    if len(train_inst) == 0:
        raise ValueError(f"no training instances could be built from {data_dir}")
    if len(eval_inst) > args.eval_instances:
        keep = np.sort(np.random.default_rng(args.seed).choice(len(eval_inst), args.eval_instances, replace=False))
        eval_inst = eval_inst[keep]
    cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    train_ds = PretrainingDataset(corpus, train_inst, cls_id, sep_id, seed=args.seed)
    eval_ds = PretrainingDataset(corpus, eval_inst, cls_id, sep_id, seed=args.seed + 7919)
    collate = MaskingCollator(vocab, mask_prob=args.mask_prob, whole_word_masking=args.whole_word_masking,
                              seed=args.seed)
    from bertkit.training.trainer import set_seed

    set_seed(args.seed)  # the initial weights depend on --seed only
    model = BertForPreTraining.from_pretrained(args.model, config=config) if args.model \
        else BertForPreTraining(config)
    return {"model": model, "config": config, "tokenizer": tokenizer, "vocab": vocab,
            "train_dataset": train_ds, "eval_dataset": eval_ds, "collate": collate,
            "corpus": corpus, "data_dir": data_dir}


def run(args: argparse.Namespace) -> int:
    import torch

    from bertkit.training import NonFiniteLossError, Trainer, TrainingConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    parts = build_pretraining(args)
    cfg = TrainingConfig(
        output_dir=args.output, max_steps=args.max_steps, max_time_minutes=args.max_minutes, batch_size=args.batch_size,
        grad_accum_steps=args.grad_accum, lr=args.lr, weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps, warmup_ratio=args.warmup_ratio,
        max_grad_norm=args.max_grad_norm or None, precision=args.precision, seed=args.seed,
        log_every=args.log_every, eval_every=args.eval_every or None, save_every=args.save_every or None,
        keep_last=args.keep_last, resume=args.resume, progress=args.progress, run_name="pretrain",
    )
    eval_ds, collate = parts["eval_dataset"], parts["collate"]
    trainer: Trainer | None = None

    def evaluate(model: Any) -> dict[str, float]:
        if len(eval_ds) == 0:
            return {}
        return evaluate_pretraining(model, eval_ds, collate, device=trainer.device, amp_dtype=trainer.amp_dtype)

    trainer = Trainer(parts["model"], cfg, parts["train_dataset"], collate_fn=collate,
                      evaluate=evaluate, loss_fn=mlm_nsp_loss, tokenizer=parts["tokenizer"])
    if trainer.is_main:
        n_params = sum(p.numel() for p in parts["model"].parameters())
        print(f"pretrain: {len(parts['train_dataset']):,} training / {len(eval_ds):,} held-out instances "
              f"from {parts['data_dir']}; {n_params:,} parameters; precision {trainer.precision}; "
              f"{trainer.world_size} process(es)", file=sys.stderr)
    try:
        result = trainer.train()
    except NonFiniteLossError as e:
        print(f"bertkit pretrain: error: {e}", file=sys.stderr)
        return 3
    if trainer.is_main:
        summary = {"step": result.step, **{f"eval_{k}": v for k, v in result.last_metrics.items()}}
        print(json.dumps(summary))
    if trainer.distributed:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0
