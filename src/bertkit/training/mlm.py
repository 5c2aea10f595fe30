"""The BERT pretraining recipe: MLM (+ NSP) from raw text or prepared shards.

:class:`PretrainingArguments` are `bertkit pretrain`'s settings (one run of them is
:func:`bertkit.training.pretrain_run.train_mlm`; :func:`bertkit.training.pretraining.pretrain` runs
one or a recipe); :func:`build_pretraining` gives the parts (model, datasets, collator) for
callers that drive the :class:`~bertkit.training.Trainer` themselves, and :func:`mlm_nsp_loss` is
the Trainer ``loss_fn`` of the recipe. Under ``torchrun`` it runs DistributedDataParallel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import _args as A
from bertkit._args import redefault, setting
from bertkit.training.training_args import (
    TRAINING_GROUP,
    TrainingArguments,
    check_step_length,
    step_length_help,
)

__all__ = [
    "MASK_RATE",
    "OBJECTIVES",
    "check_objective_args",
    "RECIPES",
    "RECIPE_SCHEDULES",
    "PretrainingArguments",
    "build_pretraining",
    "check_unused_settings",
    "evaluate_pretraining",
    "masked_fraction",
    "mlm_nsp_loss",
]


ARCHITECTURES = ("bert", "modernbert")  # the families `pretrain` builds a new model of
RECIPES = ("cpu-hour",)  # whole schedules chosen from a time budget (bertkit.training.recipes)
RECIPE_SCHEDULES = ("phases", "single")  # how a recipe's learning rate spans its phases


# The masked fraction of a plain run when --mask-rate is not given (BERT's); a recipe may choose its own.
MASK_RATE = 0.15


OBJECTIVES = ("mlm+nsp", "mlm", "electra")


def check_objective_args(args: Any) -> None:
    """The objective's own settings, one line each (for the Python API as for the flags)."""
    objective = getattr(args, "objective", "mlm+nsp")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    A.fraction_0_1_left_open.check("generator_size", getattr(args, "generator_size", None), allow_none=True)
    A.positive_float.check("generator_temperature", getattr(args, "generator_temperature", 1.0))


def masked_fraction(args: Any) -> float:
    """``args.mask_prob``, or :data:`MASK_RATE` where it was left unset."""
    return MASK_RATE if args.mask_prob is None else float(args.mask_prob)


@dataclass(kw_only=True)
class PretrainingArguments(TrainingArguments):
    """Every setting of `bertkit pretrain`: the shared training arguments plus the MLM recipe's own."""

    output: str = redefault(TrainingArguments, "output")  # required
    corpus: list[str] | None = setting(
        None,
        nargs="+",
        metavar="FILE",
        group="data",
        same_on_resume=False,
        help="raw .txt / .jsonl files, prepared on the fly into a cache",
    )
    eval_data: list[str] | None = setting(
        None,
        nargs="+",
        metavar="FILE",
        group="data",
        same_on_resume=False,
        help="task files (CSV/TSV/JSONL with a text column) the model will be evaluated on: a "
        "--corpus line holding one of their texts is refused",
    )
    data: str | None = setting(
        None, metavar="DIR", group="data", same_on_resume=False, help="a folder written by `bertkit prepare-data`"
    )
    format: str = setting(
        "prose", choices=("prose", "bert"), group="data", help="raw text layout (see `bertkit prepare-data --help`)"
    )
    cache_dir: str | None = setting(
        None,
        group="data",
        same_on_resume=False,
        help="where --corpus is prepared (default: ~/.cache/bertkit/prepared/HASH)",
    )
    lower_case: bool = setting(True, group="data", help="keep the case of the text (a cased vocabulary)")
    eval_fraction: float = setting(
        0.02,
        type=A.fraction_0_1_right_open,
        group="data",
        help="fraction of tokens held out (whole documents) for evaluation",
    )
    eval_instances: int = setting(
        512, type=A.nonnegative_int, group="data", same_on_resume=False, help="held-out instances per evaluation"
    )
    short_seq_prob: float = setting(
        0.1, type=A.fraction_0_1, group="data", help="NSP: fraction of instances cut shorter than --seq-len"
    )
    no_nsp: bool = setting(False, group="data", help="MLM only, full-length single segments")
    whole_word_masking: bool = setting(
        False,
        group="data",
        help="mask all pieces of a word together; with --corpus, Chinese words come "
        "from jieba (pip install 'bertkit[zh]'); --data must be prepared with "
        "--whole-word-masking",
    )
    mask_prob: float | None = setting(
        None,
        type=A.fraction_0_1_left_open,
        group="data",
        flag=("--mask-prob", "--mask-rate"),
        help=f"fraction of tokens masked (default {MASK_RATE}; --recipe cpu-hour: its own, 0.3 for masked LM)",
    )
    # Not in the resume settings: a run of the default objective keeps the identity it was started with;
    # mlm_identity records the objective (and generator size) of the others.
    objective: str = setting(
        "mlm+nsp",
        choices=("mlm+nsp", "mlm", "electra"),
        group="data",
        same_on_resume=False,
        help="mlm+nsp: BERT (BertForPreTraining); mlm: masked LM on contiguous full-length "
        "sequences, no NSP (BertForMaskedLM); electra: a generator masked LM and a "
        "discriminator of replaced tokens (ElectraForPreTraining in OUTPUT, the "
        "generator in OUTPUT/generator)",
    )
    generator_size: float | None = setting(
        None,
        type=A.fraction_0_1_left_open,
        group="model",
        same_on_resume=False,
        help="electra: the generator's hidden size (and heads) as a fraction of the discriminator's "
        "(default: a quarter of its heads, at least one; a --model's own generator)",
    )
    generator_temperature: float = setting(
        1.0,
        type=A.positive_float,
        group="model",
        same_on_resume=False,
        help="electra: the generator samples replacements from softmax(logits / T); T > 1 gives the "
        "discriminator easier replacements while it learns",
    )
    cls_bow_weight: float = setting(
        0.0,
        type=A.nonnegative_float,
        group="model",
        same_on_resume=False,
        help="masked LM: weight of a second loss in which [CLS], through the MLM head, predicts the "
        "sequence's bag of words, so that the token a classifier reads summarises the text (0: off)",
    )
    vocab: str | None = setting(None, group="model", same_on_resume=False, help="vocab.txt for a new model")
    model: str | None = setting(
        None,
        metavar="DIR",
        group="model",
        same_on_resume=False,
        help="continue pretraining from a saved model folder or cached model id",
    )
    config: str = setting(
        "mini",
        choices=("tiny", "mini", "small", "medium", "base", "large"),
        group="model",
        help="size of a new model (default mini; not with --model, whose config.json gives its size)",
    )
    architecture: str | None = setting(
        None,
        choices=ARCHITECTURES,
        group="model",
        help="family of a new model: bert, or modernbert (rotary positions, GeGLU, pre-norm, no biases, "
        "local attention in two layers of three; masked LM only, so --objective mlm or --no-nsp); "
        "default bert, or with --model the folder's own family",
    )
    seq_len: int = setting(128, type=A.SEQ_LEN, group=TRAINING_GROUP, help="tokens per training instance")
    recipe: str | None = setting(
        None,
        choices=RECIPES,
        group=TRAINING_GROUP,
        help="cpu-hour: choose the phases (seq 32 MLM, then seq 128 MLM + NSP), batch "
        "sizes, lrs, warmups and steps from --max-minutes (default 60) and run them "
        "as one job that --resume continues in the phase where it stopped; OUTPUT is "
        "the final model",
    )
    recipe_schedule: str = setting(
        "phases",
        choices=RECIPE_SCHEDULES,
        group=TRAINING_GROUP,
        help="--recipe: phases: each phase warms up and decays its own learning rate to 0; single: "
        "one linear decay from phase 1's peak to 0 at the end of the budget, which phase 2 "
        "continues where phase 1 left it (after a short warmup of its fresh optimizer)",
    )
    max_steps: int | None = redefault(TrainingArguments, "max_steps", None, help=step_length_help())
    lr: float = redefault(TrainingArguments, "lr", 1e-4)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_step_length(self)
        if self.recipe_schedule != "phases" and not self.recipe:
            raise ValueError(
                f"{A.given('recipe_schedule', str(self.recipe_schedule))} schedules a {A.flag('recipe')}'s phases; "
                f"give {A.flag('recipe')}"
            )
        check_objective_args(self)

    @classmethod
    def from_namespace(cls, ns: Any) -> PretrainingArguments:
        """The fields of an argparse Namespace that this dataclass knows."""
        return A.from_namespace(cls, ns)


def check_unused_settings(args: PretrainingArguments, given: Sequence[str] = ()) -> None:
    """Refuse a setting the run would silently ignore (``--config`` with ``--model``, ``--format`` with
    ``--data``, a generator's setting without ``--objective electra``), naming both flags.

    ``given``: settings typed even at their default (the CLI tells a typed ``--config mini``).
    """
    model, data, objective = args.model, args.data, args.objective
    for name, used, why in (
        (
            "config",
            not model,
            f"sizes a new model; {A.given('model', str(model))} keeps the size its config.json gives",
        ),
        ("format", not data, f"is how {A.flag('corpus')} is read; {A.given('data', str(data))} is already prepared"),
        (
            "cache_dir",
            not data,
            f"is where {A.flag('corpus')} is prepared; {A.given('data', str(data))} is already prepared",
        ),
        (
            "eval_data",
            not data,
            f"is checked against {A.flag('corpus')} lines; {A.given('data', str(data))} has none to check",
        ),
        (
            "generator_size",
            objective == "electra",
            f"shapes ELECTRA's generator; {A.given('objective', str(objective))} has none",
        ),
        (
            "generator_temperature",
            objective == "electra",
            f"is ELECTRA's; {A.given('objective', str(objective))} has no generator",
        ),
        (
            "cls_bow_weight",
            objective != "electra",
            f"is a masked LM's; {A.flag('objective')} electra's discriminator has none",
        ),
    ):
        A.refuse_unused(args, name, used, why, given)


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


def mlm_nsp_loss(model: Any, batch: dict[str, Any], out: Any = None) -> tuple[Any, dict[str, Any]]:
    """Sparse-MLM forward (or its output ``out``); returns (loss to optimise, {mlm_loss, nsp_loss})."""
    import torch.nn.functional as F

    out = out if out is not None else model(**batch, sparse_mlm=True)
    nsp_logits = out.seq_relationship_logits
    labels = batch["labels"]
    weight = _token_weight(labels)
    if "next_sentence_label" in batch:
        nsp_loss = F.cross_entropy(nsp_logits.float(), batch["next_sentence_label"])
        mlm_loss = out.loss - nsp_loss  # the model's loss is mlm + nsp
        loss = out.loss if isinstance(weight, float) else mlm_loss * weight + nsp_loss
        return loss, {"mlm_loss": mlm_loss, "nsp_loss": nsp_loss}
    # Without NSP labels the sparse path's loss is the masked-LM loss; a dense call gives none.
    mlm_loss = F.cross_entropy(out.prediction_logits.float(), labels[labels != -100]) if out.loss is None else out.loss
    # Touch the unused NSP head so DDP sees a gradient (zero) for every parameter.
    return mlm_loss * weight + 0.0 * nsp_logits.sum(), {"mlm_loss": mlm_loss}


def evaluate_pretraining(
    model: Any, dataset: Any, collate: Any, batch_size: int = 64, device: Any = None, amp_dtype: Any = None
) -> dict[str, float]:
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


def _instances(args: Any, corpus: Any, data_dir: Path) -> tuple[Any, Any]:
    """Training and held-out instances for the objective: contiguous windows, single segments or NSP pairs."""
    import numpy as np

    from bertkit.data import (
        create_contiguous_instances,
        create_nsp_instances,
        create_single_segment_instances,
        split_documents,
    )

    train_docs, eval_docs = split_documents(corpus, args.eval_fraction, seed=args.seed)
    if getattr(args, "objective", "mlm+nsp") != "mlm+nsp":  # full-length windows, RoBERTa-style
        train_inst = create_contiguous_instances(corpus, train_docs, args.seq_len)
        eval_inst = create_contiguous_instances(corpus, eval_docs, args.seq_len)
    elif args.no_nsp:
        train_inst = create_single_segment_instances(corpus, train_docs, args.seq_len)
        eval_inst = create_single_segment_instances(corpus, eval_docs, args.seq_len)
    else:
        train_inst = create_nsp_instances(corpus, train_docs, args.seq_len, args.short_seq_prob, seed=args.seed)
        # Held-out B segments come from held-out documents only.
        eval_inst = (
            create_nsp_instances(corpus, eval_docs, args.seq_len, args.short_seq_prob, seed=args.seed + 1)
            if len(eval_docs)
            else np.zeros((0, 5), np.int64)
        )
    if len(train_inst) == 0:
        raise ValueError(f"no training instances could be built from {data_dir}")
    if len(eval_inst) > args.eval_instances:
        keep = np.sort(np.random.default_rng(args.seed).choice(len(eval_inst), args.eval_instances, replace=False))
        eval_inst = eval_inst[keep]
    return train_inst, eval_inst


def read_model_config(folder: str) -> dict[str, Any]:
    """A --model folder's config.json as a dict; a missing or malformed file names itself."""
    from bertkit._text import read_json

    path = Path(folder) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{A.given('model', str(folder))}: no config.json there")
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def model_family(folder: str) -> str:
    """The ``model_type`` of a model folder's config.json (``bert`` where it names none)."""
    return str(read_model_config(folder).get("model_type") or "bert")


def _pretraining_config(args: Any, vocab: list[str], vocab_path: Path, tokenizer: Any) -> Any:
    """The model configuration (a preset, or the continued model's), checked against the vocabulary and --seq-len."""
    from bertkit.modeling import BertConfig, check_vocab_fits
    from bertkit.modeling.modernbert import ModernBertConfig

    if args.model:
        modern = model_family(args.model) == "modernbert"
        config = (ModernBertConfig if modern else BertConfig).from_pretrained(args.model)
    elif getattr(args, "architecture", "bert") == "modernbert":
        ids = {f"{k}_token_id": vocab.index(t) for k, t in (("pad", "[PAD]"), ("cls", "[CLS]"), ("sep", "[SEP]"))}
        ends = {"bos_token_id": ids["cls_token_id"], "eos_token_id": ids["sep_token_id"]}
        config = ModernBertConfig.from_preset(args.config, vocab_size=len(vocab), **ids, **ends)
    else:
        config = BertConfig.from_preset(args.config, vocab_size=len(vocab))
    check_vocab_fits(tokenizer, config, str(args.model or vocab_path))
    if args.vocab and config.vocab_size != len(vocab):
        # A vocabulary given beside a model is not the model's own: its ids would mean other words.
        raise ValueError(
            f"vocabulary {vocab_path} has {len(vocab)} tokens but the model's vocab_size "
            f"is {config.vocab_size}; they must match"
        )
    if args.seq_len > config.max_position_embeddings:
        raise ValueError(
            f"{A.given('seq_len', str(args.seq_len))} exceeds the model's max_position_embeddings "
            f"({config.max_position_embeddings})"
        )

    return config


def build_pretraining(args: Any, make_model: Any = None) -> dict[str, Any]:
    """Model, tokenizer, datasets and collator from :class:`PretrainingArguments` (or a Namespace).

    Returns a dict with model, config, tokenizer, vocab, train_dataset, eval_dataset, collate,
    corpus and data_dir. ``make_model(config, tokenizer)`` builds another model than
    ``BertForPreTraining`` (:mod:`bertkit.training.objectives`).
    """

    from bertkit.data import MaskingCollator, PretrainingDataset, ShardedCorpus, ensure_prepared
    from bertkit.data.corpus import vocab_fingerprint
    from bertkit.modeling import BertForPreTraining, set_dropout
    from bertkit.tokenization import load_tokenizer, load_vocab

    if not args.vocab and not args.model:
        raise ValueError(
            f"give {A.given('vocab', 'VOCAB')} (new model) or {A.given('model', 'DIR')} (continue pretraining)"
        )
    if bool(args.corpus) == bool(args.data):
        raise ValueError(f"give exactly one of {A.given('corpus', 'FILE...')} or {A.given('data', 'DIR')}")
    if args.corpus and getattr(args, "eval_data", None):
        from bertkit.data.overlap import check_corpus_overlap

        check_corpus_overlap(args.corpus, args.eval_data)
    vocab_path = Path(args.vocab) if args.vocab else Path(args.model) / "vocab.txt"
    vocab = list(load_vocab(vocab_path))
    absent = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t not in vocab]
    if absent:  # before any shard is prepared: masking and instances need every one of them
        raise ValueError(
            f"{vocab_path}: the vocabulary lacks {', '.join(absent)}, which BERT pretraining needs "
            "(`bertkit train-vocab` writes them unless --special-tokens leaves them out)"
        )
    tokenizer = load_tokenizer(vocab_path, args.lower_case)

    config = _pretraining_config(args, vocab, vocab_path, tokenizer)
    if args.data:
        data_dir = Path(args.data)
    else:
        data_dir = ensure_prepared(
            args.corpus,
            vocab_path,
            args.format,
            args.lower_case,
            progress=args.progress,
            cache_dir=args.cache_dir,
            word_boundaries=args.whole_word_masking,
        )
    corpus = ShardedCorpus(data_dir)
    word_starts = bool(args.whole_word_masking and corpus.has_word_starts)
    if args.whole_word_masking and not word_starts:
        import warnings

        warnings.warn(
            f"{data_dir} was prepared without word boundaries: whole words are WordPiece ## "
            "groups only, so Chinese characters are masked one by one (prepare it with "
            "`bertkit prepare-data --whole-word-masking`)",
            stacklevel=2,
        )
    if corpus.vocab_size != len(vocab):
        raise ValueError(
            f"prepared data {data_dir} was tokenized with a {corpus.vocab_size}-token "
            f"vocabulary but {vocab_path} has {len(vocab)} tokens"
        )
    saved = corpus.meta.get("vocab_fingerprint")
    if saved and saved != vocab_fingerprint(vocab):
        # Same size, different tokens: every id would mean another word, silently.
        raise ValueError(
            f"prepared data {data_dir} was tokenized with a different vocabulary than {vocab_path} "
            f"(both have {len(vocab)} tokens, but not the same ones); prepare the data again "
            f"with this vocabulary"
        )
    train_inst, eval_inst = _instances(args, corpus, data_dir)
    cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    train_ds = PretrainingDataset(corpus, train_inst, cls_id, sep_id, seed=args.seed, word_starts=word_starts)
    eval_ds = PretrainingDataset(corpus, eval_inst, cls_id, sep_id, seed=args.seed + 7919, word_starts=word_starts)
    collate = MaskingCollator(
        vocab, mask_prob=masked_fraction(args), whole_word_masking=args.whole_word_masking, seed=args.seed
    )
    from bertkit.training.trainer import set_seed

    set_seed(args.seed)  # the initial weights depend on --seed only
    if make_model is not None:
        model = make_model(config, tokenizer)
    else:
        model = (
            BertForPreTraining.from_pretrained(args.model, config=config) if args.model else BertForPreTraining(config)
        )
    if args.dropout is not None:  # the Trainer sets it too; the parts also serve outside it (throughput)
        set_dropout(model, args.dropout)
    return {
        "model": model,
        "config": config,
        "tokenizer": tokenizer,
        "vocab": vocab,
        "train_dataset": train_ds,
        "eval_dataset": eval_ds,
        "collate": collate,
        "corpus": corpus,
        "data_dir": data_dir,
    }
