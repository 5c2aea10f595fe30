"""`bertkit train-embedder`: fine-tune a sentence-embedding model on pairs, triplets or scored pairs.

Training goes through the one :class:`~bertkit.training.Trainer` (exact resume, ``metrics.jsonl``,
``metrics.png``, a progress bar). The output folder is a sentence-transformers folder
(:mod:`bertkit.modeling.sentence`): ``SentenceTransformer(OUTPUT)``, ``pipeline("sentence-embedding",
model=OUTPUT)``, ``bertkit index``, ``search`` and ``serve`` all load it. With ``validation`` each
evaluation reports retrieval metrics (pairs: every anchor must find its own positive among all
positives and negatives) or STS correlations (scored pairs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import _args as A
from bertkit._io import atomic_write_json, atomic_write_text
from bertkit._outputs import claim_output_dir

__all__ = ["EMBEDDER_OUTPUTS", "CommonTrainingArguments", "EmbedderArguments", "evaluate_rows", "train_embedder"]

EMBEDDER_OUTPUTS = (
    "checkpoints",
    "best",
    "metrics.jsonl",
    "metrics.png",
    "config.json",
    "model.safetensors",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "modules.json",
    "1_Pooling",
    "2_Normalize",
    "sentence_bert_config.json",
    "mined-negatives.jsonl",
    "eval_results.json",
)
MINED = "mined-negatives.jsonl"


@dataclass(kw_only=True)
class CommonTrainingArguments:
    """The settings every training command shares, with `bertkit finetune`'s flag names (``--lr``,
    ``--epochs``, ``--batch-size``...); :meth:`training_config` turns them into the Trainer's."""

    model: str
    train: str
    output: str
    validation: str | None = None
    epochs: float = 1.0
    max_steps: int | None = None
    max_minutes: float | None = None
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    bf16: bool = False
    eval_every: int = 0  # optimizer steps between evaluations; 0: after every epoch
    save_every: int = 0  # optimizer steps between checkpoints; 0: none
    keep_last: int = 2
    resume: bool = False
    overwrite: bool = False
    device: str | None = None
    progress: bool = True
    max_length: int | None = None

    def __post_init__(self) -> None:
        for name, rng in (
            ("epochs", A.positive_float),
            ("batch_size", A.positive_int),
            ("grad_accum", A.positive_int),
            ("lr", A.positive_float),
            ("warmup_ratio", A.fraction_0_1),
            ("weight_decay", A.nonnegative_float),
            ("seed", A.seed),
            ("eval_every", A.nonnegative_int),
            ("save_every", A.nonnegative_int),
            ("keep_last", A.positive_int),
        ):
            rng.check(name, getattr(self, name))
        A.positive_int.check("max_steps", self.max_steps, allow_none=True)
        A.positive_float.check("max_minutes", self.max_minutes, allow_none=True)
        A.SEQ_LEN.check("max_length", self.max_length, allow_none=True)
        if Path(self.output).resolve() == Path(self.model).resolve():
            raise ValueError(f"--output {self.output} is the input model folder; write the trained model elsewhere")

    @classmethod
    def from_namespace(cls, ns: Any) -> Any:
        """The fields of an argparse Namespace that this dataclass knows."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(ns).items() if k in names})

    def training_config(self, run_name: str) -> Any:
        from bertkit.training.trainer import TrainingConfig

        return TrainingConfig(
            output_dir=self.output, max_steps=self.max_steps, max_time_minutes=self.max_minutes,
            num_epochs=self.epochs, batch_size=self.batch_size, grad_accum_steps=self.grad_accum, lr=self.lr,
            weight_decay=self.weight_decay, warmup_ratio=self.warmup_ratio,
            precision="bf16" if self.bf16 else "fp32", seed=self.seed, eval_every=self.eval_every or None,
            eval_each_epoch=not self.eval_every, save_every=self.save_every or None, keep_last=self.keep_last,
            resume=self.resume, overwrite=self.overwrite, progress=self.progress, device=self.device,
            run_name=run_name)


@dataclass(kw_only=True)
class EmbedderArguments(CommonTrainingArguments):
    """Settings of `bertkit train-embedder` (the CLI's defaults)."""

    loss: str = "mnrl"
    symmetric: bool = False
    scale: float = 20.0
    mini_batch_size: int = 32
    matryoshka_dims: list[int] | None = None
    hard_negatives: int = 0
    mine_from: str | None = None
    mining_margin: float = 0.05
    score_range: tuple[float, float] = (0.0, 1.0)
    pooling: str | None = None

    def __post_init__(self) -> None:
        from bertkit.training.embedding_losses import LOSSES

        super().__post_init__()
        for name, rng in (
            ("scale", A.positive_float),
            ("mini_batch_size", A.positive_int),
            ("hard_negatives", A.nonnegative_int),
            ("mining_margin", A.nonnegative_float),
        ):
            rng.check(name, getattr(self, name))
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.hard_negatives and not self.mine_from:
            raise ValueError("--hard-negatives needs --mine-from CORPUS (the texts to mine negatives from)")
        if self.hard_negatives and self.loss not in ("mnrl", "cached-mnrl", "triplet"):
            raise ValueError(f"hard negatives are for mnrl, cached-mnrl and triplet, not {self.loss}")
        if self.score_range[0] >= self.score_range[1]:
            raise ValueError(f"score range must be low,high with low < high, got {self.score_range}")


def _fingerprint(path: str | None) -> str | None:
    if path is None:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def run_identity(args: EmbedderArguments) -> dict[str, Any]:
    """What makes a run the same run on --resume."""
    return {
        "model": str(Path(args.model).resolve()),
        "train": _fingerprint(args.train),
        "validation": _fingerprint(args.validation),
        "mine_from": _fingerprint(args.mine_from),
        "loss": {
            "name": args.loss,
            "symmetric": args.symmetric,
            "scale": args.scale,
            "matryoshka_dims": args.matryoshka_dims,
            "hard_negatives": args.hard_negatives,
            "mining_margin": args.mining_margin,
        },
        "batch_size": args.batch_size,
        "grad_accum": args.grad_accum,
        "seed": args.seed,
        "max_length": args.max_length,
        "pooling": args.pooling,
    }


def evaluate_rows(encoder: Any, rows: list[dict[str, Any]], batch_size: int = 64) -> dict[str, float]:
    """STS correlations of scored rows, else retrieval metrics of anchor -> own positive among all
    positives and negatives of ``rows``."""
    from bertkit.search.evaluation import retrieval_metrics, sts_metrics

    if "score" in rows[0]:
        e1 = encoder.encode([r["sentence1"] for r in rows], batch_size).numpy()
        e2 = encoder.encode([r["sentence2"] for r in rows], batch_size).numpy()
        return sts_metrics(e1, e2, [r["score"] for r in rows])
    corpus = list(dict.fromkeys([r["positive"] for r in rows] + [t for r in rows for t in r["negatives"]]))
    where = {t: str(i) for i, t in enumerate(corpus)}
    qrels = {f"q{i}": {where[r["positive"]]: 1.0} for i, r in enumerate(rows)}
    q = encoder.encode([r["anchor"] for r in rows], batch_size).numpy()
    c = encoder.encode(corpus, batch_size).numpy()
    return retrieval_metrics(q, list(qrels), c, [str(i) for i in range(len(corpus))], qrels)


def _training_rows(args: EmbedderArguments, encoder: Any) -> list[dict[str, Any]]:
    """The training rows, with mined negatives (cached in the output folder for --resume)."""
    from bertkit.training.embedding_data import mine_hard_negatives, read_embedding_rows

    rows = read_embedding_rows(args.train, scored=args.loss == "cosent", score_range=args.score_range)
    if args.loss == "triplet" and not args.hard_negatives and not rows[0]["negatives"]:
        raise ValueError(f"{args.train}: the triplet loss needs a 'negative' column (or --hard-negatives K)")
    if not args.hard_negatives:
        return rows
    cached = Path(args.output) / MINED
    if args.resume and cached.is_file():
        return [json.loads(line) for line in cached.read_text(encoding="utf-8").splitlines() if line.strip()]
    from bertkit.search.index import load_index, read_corpus

    vectors = None
    if (Path(args.mine_from) / "meta.json").is_file():  # a search index: its vectors, if the model matches
        index = load_index(args.mine_from)
        if Path(index.meta["model"]).resolve() != Path(args.model).resolve():
            raise ValueError(f"--mine-from {args.mine_from} was built with {index.meta['model']}, not --model "
                             f"{args.model}; mine from its corpus file instead")
        corpus, vectors = index.texts, index.vectors
    else:
        corpus = [t for _, t in read_corpus(args.mine_from)]
    mined, dropped = mine_hard_negatives(
        encoder, rows, corpus, args.hard_negatives, args.mining_margin, progress=args.progress,
        corpus_vectors=vectors,
    )
    print(
        f"train-embedder: mined {args.hard_negatives} negative(s) for {len(mined):,} rows from {len(corpus):,} "
        f"texts; {dropped:,} row(s) without enough candidates below the margin were left out",
        file=sys.stderr,
    )
    if not mined:
        raise ValueError(
            f"{args.mine_from}: no row found {args.hard_negatives} negatives; lower --mining-margin "
            "or mine from a larger corpus"
        )
    atomic_write_text(cached, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mined))
    return mined


def train_embedder(args: EmbedderArguments) -> Any:
    """Run `bertkit train-embedder`; returns the Trainer's result."""
    from bertkit.modeling.sentence import load_sentence_encoder, save_sentence_folder
    from bertkit.training.embedding_data import EmbeddingCollator, read_embedding_rows
    from bertkit.training.embedding_losses import make_loss
    from bertkit.training.trainer import Trainer

    claim_output_dir(
        args.output,
        "train-embedder",
        overwrite=args.overwrite,
        resume=args.resume,
        run=run_identity(args),
        owned=EMBEDDER_OUTPUTS,
        can_resume=True,
        dry_run=True,
    )
    encoder = load_sentence_encoder(args.model, pooling=args.pooling, max_seq_length=args.max_length)
    val_rows = (
        read_embedding_rows(args.validation, scored=args.loss == "cosent", score_range=args.score_range)
        if args.validation
        else None
    )
    claim = claim_output_dir(
        args.output,
        "train-embedder",
        overwrite=args.overwrite,
        resume=args.resume,
        run=run_identity(args),
        owned=EMBEDDER_OUTPUTS,
        can_resume=True,
    )
    try:
        rows = _training_rows(args, encoder)
        loss = make_loss(args.loss, args.matryoshka_dims, args.mini_batch_size, args.symmetric, args.scale)
        if args.matryoshka_dims and max(args.matryoshka_dims) > encoder.dim:
            raise ValueError(f"--matryoshka-dims {max(args.matryoshka_dims)} is above the model's size {encoder.dim}")

        def loss_fn(model: Any, batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
            return loss(lambda f: encoder(f, model=model), batch["columns"], batch["labels"]), {}

        def save(model: Any, directory: Path) -> None:
            model.save_pretrained(str(directory))
            save_sentence_folder(directory, encoder.dim, encoder.pooling, encoder.normalize, encoder.max_seq_length)

        cfg = args.training_config("train-embedder")
        evaluate = (lambda model: evaluate_rows(encoder, val_rows)) if val_rows else None
        trainer = Trainer(
            encoder.model,
            cfg,
            rows,
            collate_fn=EmbeddingCollator(encoder, args.loss == "cosent"),
            evaluate=evaluate,
            loss_fn=loss_fn,
            tokenizer=encoder.tokenizer,
            save_model=save,
        )
        result = trainer.train()
        if result.last_metrics:
            atomic_write_json(Path(args.output) / "eval_results.json", result.last_metrics)
    except BaseException:
        claim.abandon()
        raise
    claim.finish()
    return result
