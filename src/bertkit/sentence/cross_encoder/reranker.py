"""`bertkit train-reranker`: fine-tune a cross-encoder that scores (query, passage) pairs.

Data rows are ``query``, ``passage`` and ``label`` (0/1) or ``score`` (in [0, 1]), in JSONL or CSV/TSV.

* ``--loss bce``: binary cross-entropy of each pair's logit against its label.
* ``--loss listwise``: every relevant pair forms a group with ``group_size - 1`` negatives, first
  the query's own irrelevant passages (the hard negatives), then passages of other queries (seeded);
  the loss is the cross-entropy of the positive among its group's logits.

The output is a transformers sequence-classification folder with ``num_labels=1``: sentence-transformers'
``CrossEncoder``, ``pipeline("text-ranking")``, ``bertkit search --rerank`` and ``bertkit serve`` load it.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertkit import _args as A
from bertkit._args import setting
from bertkit._io import atomic_write_json
from bertkit._text import require_file
from bertkit.hub import resolve_model_arg
from bertkit.sentence.embedder import EmbeddingTrainingArguments
from bertkit.training.run_folders import TRAINER_OUTPUTS, claim_training_output, within_claim

__all__ = ["RERANKER_OUTPUTS", "RerankerArguments", "read_reranker_rows", "train_reranker"]

# What `bertkit train-reranker` writes into its --output.
RERANKER_OUTPUTS = (*TRAINER_OUTPUTS, "eval_results.json", "README.md")


@dataclass(kw_only=True)
class RerankerArguments(EmbeddingTrainingArguments):
    """Every setting of `bertkit train-reranker`."""

    model: str = setting(
        metavar="DIR",
        group="data",
        same_on_resume=False,
        help="model folder or cached model id to start from (an encoder or a cross-encoder)",
    )
    train: str = setting(
        metavar="FILE",
        group="data",
        same_on_resume=False,
        help="JSONL/CSV/TSV rows: query, passage, label (0/1) or score",
    )
    validation: str | None = setting(
        None,
        metavar="FILE",
        group="data",
        same_on_resume=False,
        help="a file like --train; MRR@10 and nDCG@10 per evaluation",
    )
    max_length: int | None = setting(None, type=A.SEQ_LEN, group="data", help="tokens per pair (default 512)")
    loss: str = setting("bce", choices=("bce", "listwise"), group="reranker", help="training loss")
    group_size: int = setting(
        4,
        type=A.int_range(2),
        group="reranker",
        help="listwise: passages per group, the positive and its hard negatives",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        why = f"sizes {A.flag('loss')} listwise's groups; {A.given('loss', str(self.loss))} scores each pair alone"
        A.refuse_unused(self, "group_size", self.loss == "listwise", why)


def read_reranker_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows ``{"query", "passage", "label"}`` with a label in [0, 1] (int where the file's are all whole
    numbers, else float); errors name the file and line."""
    from bertkit.sentence.embedding_data import _records, _text

    path = require_file(path)
    rows = []
    integers = True  # a column of whole numbers stays int, as datasets reads one (the card shows its shares)
    for n, rec in _records(path):
        key = "label" if "label" in rec else "score"
        raw = rec.get(key)
        integers = integers and (type(raw) is int or (isinstance(raw, str) and raw.strip().isdigit()))
        try:
            label = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(
                f"{path}:{n}: {key} {raw!r} is not a number (give 'label' 0/1 or 'score' in [0, 1])"
            ) from None
        if not 0.0 <= label <= 1.0:
            raise ValueError(f"{path}:{n}: {key} {label:g} is outside [0, 1]")
        rows.append({"query": _text(path, n, rec, "query"), "passage": _text(path, n, rec, "passage"), "label": label})
    if not rows:
        raise ValueError(f"{path}: no rows")
    if integers:
        for r in rows:
            r["label"] = int(r["label"])
    return rows


def listwise_groups(rows: list[dict[str, Any]], group_size: int, seed: int) -> list[dict[str, Any]]:
    """One group per relevant pair: the positive first, then ``group_size - 1`` negatives."""
    by_query: dict[str, list[str]] = {}
    positives: dict[str, set[str]] = {}
    for r in rows:
        if r["label"] >= 0.5:
            positives.setdefault(r["query"], set()).add(r["passage"])
    for r in rows:
        if r["label"] < 0.5 and r["passage"] not in positives.get(r["query"], ()):
            by_query.setdefault(r["query"], []).append(r["passage"])
    pool = sorted({r["passage"] for r in rows})
    groups = []
    for i, r in enumerate(x for x in rows if x["label"] >= 0.5):
        rng = random.Random(seed * 1_000_003 + i)
        own = by_query.get(r["query"], [])
        negs = rng.sample(own, min(len(own), group_size - 1))
        # a passage relevant to the query is never its negative, whichever of its positives leads the group
        other = [p for p in pool if p not in positives[r["query"]] and p not in negs]
        negs += rng.sample(other, min(len(other), group_size - 1 - len(negs)))
        if len(negs) == group_size - 1:
            groups.append({"query": r["query"], "passages": [r["passage"], *negs]})
    if not groups:
        raise ValueError("listwise training needs rows with label 1 and enough other passages to form groups")
    return groups


class RerankCollator:
    """BCE rows -> pair features + labels; listwise groups -> the flattened pairs of each group."""

    def __init__(self, tokenizer: Any, max_length: int) -> None:
        self.tokenizer, self.max_length = tokenizer, max_length

    def pairs(self, queries: list[str], passages: list[str]) -> dict[str, torch.Tensor]:
        enc = self.tokenizer(
            queries, passages, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        if "passages" in items[0]:
            qs = [it["query"] for it in items for _ in it["passages"]]
            return {
                **self.pairs(qs, [p for it in items for p in it["passages"]]),
                "group_size": len(items[0]["passages"]),
            }
        batch = self.pairs([it["query"] for it in items], [it["passage"] for it in items])
        return {**batch, "labels": torch.tensor([it["label"] for it in items], dtype=torch.float32)}


def reranker_loss(model: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    feats = {k: v for k, v in batch.items() if k not in ("labels", "group_size")}
    logits = model(**feats).logits.float().view(-1)
    if "labels" in batch:
        return F.binary_cross_entropy_with_logits(logits, batch["labels"].float()), {}
    groups = logits.view(-1, int(batch["group_size"]))
    return F.cross_entropy(groups, torch.zeros(groups.shape[0], dtype=torch.long, device=groups.device)), {}


@torch.no_grad()
def score_pairs(
    model: Any, collator: RerankCollator, queries: list[str], passages: list[str], batch_size: int = 64
) -> np.ndarray:
    """Logits of (query, passage) pairs with ``model`` in its current mode."""
    device = next(model.parameters()).device
    out = []
    for s in range(0, len(queries), batch_size):
        feats = collator.pairs(queries[s : s + batch_size], passages[s : s + batch_size])
        out.append(model(**{k: v.to(device) for k, v in feats.items()}).logits.float().view(-1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def evaluate_reranker(model: Any, collator: RerankCollator, rows: list[dict[str, Any]]) -> dict[str, float]:
    """MRR@10 and nDCG@10 of each query's passages ranked by the model (queries with a relevant one)."""
    from bertkit.sentence.evaluation.metrics import _query_metrics

    scores = score_pairs(model, collator, [r["query"] for r in rows], [r["passage"] for r in rows])
    by_query: dict[str, list[tuple[float, int]]] = {}
    for i, r in enumerate(rows):
        by_query.setdefault(r["query"], []).append((-float(scores[i]), i))
    sums: dict[str, float] = {}
    n = 0
    for q, items in by_query.items():
        relevant = {str(i) for _, i in items if rows[i]["label"] >= 0.5}
        if not relevant:
            continue
        n += 1
        metrics = _query_metrics([str(i) for _, i in sorted(items)], relevant)
        for name in ("mrr@10", "ndcg@10"):
            sums[name] = sums.get(name, 0.0) + metrics[name]
    return {k: v / n for k, v in sums.items()} if n else {}


def card_evaluator(rows: list[dict[str, Any]], name: str) -> Any:
    """sentence-transformers' reranking evaluator over the validation ``rows`` grouped by query
    (relevant: label >= 0.5; queries without a relevant passage left out, as
    :func:`evaluate_reranker` does), for the model card."""
    from bertkit.sentence.evaluation import CrossEncoderRerankingEvaluator

    by_query: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        group = by_query.setdefault(r["query"], {"positive": [], "negative": []})
        group["positive" if r["label"] >= 0.5 else "negative"].append(r["passage"])
    samples = [{"query": q, **g} for q, g in by_query.items() if g["positive"]]
    return CrossEncoderRerankingEvaluator(samples, name=name, write_csv=False)


def train_reranker(args: RerankerArguments) -> Any:
    """Run `bertkit train-reranker`; returns the Trainer's result."""
    from bertkit.modeling.auto import AutoTokenizer, auto_class_for
    from bertkit.modeling.config import check_length_fits
    from bertkit.training.trainer import Trainer, set_seed

    # A model id resolves to its cache snapshot once: weights, vocabulary and fingerprint from there.
    args = dataclasses.replace(args, model=str(resolve_model_arg(args.model)))
    claim_training_output(args, "train-reranker", {}, RERANKER_OUTPUTS, args.inputs(), dry_run=True)
    rows = read_reranker_rows(args.train)
    val_rows = read_reranker_rows(args.validation) if args.validation else None
    data = listwise_groups(rows, args.group_size, args.seed) if args.loss == "listwise" else rows
    set_seed(args.seed)  # the new one-logit head starts from a seeded draw
    model = auto_class_for("BertForSequenceClassification").from_pretrained(
        args.model, num_labels=1, ignore_mismatched_sizes=True
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    max_length = args.max_length or min(512, model.max_positions)
    check_length_fits(model, max_length)
    collator = RerankCollator(tokenizer, max_length)
    claim = claim_training_output(args, "train-reranker", args.identity(), RERANKER_OUTPUTS, args.inputs())
    evaluate = (lambda m: evaluate_reranker(m, collator, val_rows)) if val_rows else None
    trainer = Trainer(
        model,
        args.trainer_args("train-reranker", evaluate is not None),
        data,
        collate_fn=collator,
        evaluate=evaluate,
        loss_fn=reranker_loss,
        tokenizer=tokenizer,
    )

    def work() -> Any:
        result = trainer.train()
        if result.last_metrics:
            atomic_write_json(Path(args.output) / "eval_results.json", result.last_metrics)
        write_reranker_card(args, data, trainer, val_rows)
        return result

    return within_claim(claim, work)


def write_reranker_card(
    args: RerankerArguments, rows: list[dict[str, Any]], trainer: Any, val_rows: list[dict[str, Any]] | None = None
) -> None:
    """README.md in OUTPUT, the model card sentence-transformers' cross-encoder trainer writes: base
    model, the data trained on (``rows``: pairs, or listwise groups) with its statistics and first
    rows, loss, the flags that differ from their defaults, the training log, and with --validation the
    final model's reranking scores there."""
    from bertkit.sentence.cross_encoder import CrossEncoder
    from bertkit.sentence.cross_encoder.losses import BinaryCrossEntropyLoss
    from bertkit.sentence.model_card import card_columns, changed_settings, write_command_card

    columns = ["query", "passage", "label"] if args.loss == "bce" else ["query", "passages"]
    data = card_columns(rows, columns)
    sizes = [{"name": Path(args.train).name, "size": len(rows), "columns": columns, "data": data}]
    # listwise (softmax cross-entropy over a positive and its hard negatives) is named by its flag alone
    losses = lambda model: [BinaryCrossEntropyLoss(model)] if args.loss == "bce" else []  # noqa: E731
    evaluators = (lambda: [card_evaluator(val_rows, Path(args.validation).stem)]) if val_rows else None
    settings = changed_settings(args)
    # the nDCG@10 each evaluation logs is the card evaluator's primary metric: the log shows it so
    names = {"ndcg@10": f"{Path(args.validation).stem}_ndcg@10"} if val_rows else None
    write_command_card(CrossEncoder, Path(args.output), args.model, sizes, losses, settings, trainer, evaluators, names)
