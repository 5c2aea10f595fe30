"""`bertkit train-embedder`: fine-tune a sentence-embedding model on pairs, triplets or scored pairs.

Training goes through the one :class:`~bertkit.training.Trainer` (exact resume, ``metrics.jsonl``,
``metrics.png``, a progress bar). The output folder is a sentence-transformers folder
(:mod:`bertkit.modeling.sentence`): ``SentenceTransformer(OUTPUT)``, ``pipeline("sentence-embedding",
model=OUTPUT)``, ``bertkit index``, ``search`` and ``serve`` all load it. With ``validation`` each
evaluation reports retrieval metrics (pairs: every anchor must find its own positive among all
positives and negatives) or STS correlations (scored pairs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import _args as A
from bertkit import _hooks
from bertkit._args import redefault, setting
from bertkit._folders import file_fingerprint
from bertkit._io import atomic_write_json, atomic_write_text
from bertkit.hub import resolve_model_arg
from bertkit.training.run_folders import TRAINER_OUTPUTS, claim_training_output, run_identity, within_claim
from bertkit.training.training_args import TrainingArguments

__all__ = ["EMBEDDER_OUTPUTS", "EmbedderArguments", "EmbeddingTrainingArguments", "evaluate_rows", "train_embedder"]

# What `bertkit train-embedder` writes into its --output: the Trainer's files and the sentence folder.
EMBEDDER_OUTPUTS = (
    *TRAINER_OUTPUTS,
    "modules.json",
    "1_Pooling",
    "2_Normalize",
    "sentence_bert_config.json",
    "mined-negatives.jsonl",
    "eval_results.json",
    "README.md",
    "1_Normalize",  # a static model's (model2vec's layout: its files at the top, then a Normalize)
    "teacher-targets.npy",
)
MINED = "mined-negatives.jsonl"


def parse_dims(text: str) -> list[int]:
    """``--matryoshka-dims 384,256,128,64`` -> ``[384, 256, 128, 64]``."""
    try:
        dims = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers, e.g. 384,256,128,64; got {text!r}")
    try:
        _check_dims("matryoshka_dims", dims)
    except ValueError as e:  # argparse shows an ArgumentTypeError's own words (a ValueError it replaces)
        raise argparse.ArgumentTypeError(str(e)) from None
    return dims


def _check_dims(name: str, dims: Any) -> None:
    if dims is None:
        return
    if not dims or any(not isinstance(d, int) or d <= 0 for d in dims):
        raise ValueError(f"{name} must be positive integers, got {dims!r}")


def parse_score_range(text: str) -> tuple[float, float]:
    """``--score-range 0,5`` -> ``(0.0, 5.0)``."""
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be LOW,HIGH, e.g. 0,5; got {text!r}")
    if not lo < hi:
        raise argparse.ArgumentTypeError(f"LOW must be below HIGH, got {text!r}")
    return lo, hi


def _check_score_range(name: str, value: Any) -> None:
    lo, hi = value
    if not lo < hi:
        raise ValueError(f"{name} must be low,high with low < high, got {tuple(value)}")


@dataclass(kw_only=True)
class EmbeddingTrainingArguments(TrainingArguments):
    """What `bertkit train-embedder` and `train-reranker` add to the shared training arguments: the
    model to start from, the data, and their own defaults (a short fine-tune of a pre-trained model)."""

    model: str = setting(
        metavar="DIR",
        group="data",
        same_on_resume=False,
        help="model folder or cached model id to start from (its weights are part of the run's identity)",
    )
    train: str = setting(metavar="FILE", group="data", same_on_resume=False, help="training file (JSONL/CSV/TSV)")
    validation: str | None = setting(
        None,
        metavar="FILE",
        group="data",
        same_on_resume=False,
        help="a file like --train, evaluated at every evaluation",
    )
    output: str = redefault(TrainingArguments, "output")  # required
    max_length: int | None = setting(
        None, type=A.SEQ_LEN, group="data", help="tokens per text (default: the folder's max_seq_length, else 256)"
    )
    lr: float = redefault(TrainingArguments, "lr", 2e-5)
    warmup_ratio: float = redefault(TrainingArguments, "warmup_ratio", 0.1)
    seed: int = redefault(TrainingArguments, "seed", 0)
    precision: str = redefault(TrainingArguments, "precision", "fp32")

    def inputs(self) -> dict[str, str | None]:
        """The paths the run reads, which its output may never be nor hold."""
        return {"--model": self.model, "--train": self.train, "--validation": self.validation}

    def identity(self, **sections: Any) -> dict[str, Any]:
        """The run's identity on --resume: settings, the start model's weights and the data's content."""
        names = ("config.json", "model.safetensors", "pytorch_model.bin", "0_StaticEmbedding/model.safetensors")
        weights = [Path(self.model) / n for n in names]
        return run_identity(
            self,
            model=file_fingerprint(*[f for f in weights if f.is_file()]),
            data=file_fingerprint(*[p for p in self.inputs().values() if p and Path(p).is_file() and p != self.model]),
            **sections,
        )

    def trainer_args(self, run_name: str, evaluate: bool) -> TrainingArguments:
        """These settings as the Trainer reads them (evaluating each epoch unless --eval-every)."""
        return dataclasses.replace(self, run_name=run_name, eval_each_epoch=evaluate and not self.eval_every)


@dataclass(kw_only=True)
class EmbedderArguments(EmbeddingTrainingArguments):
    """Every setting of `bertkit train-embedder`."""

    train: str = setting(
        metavar="FILE",
        group="data",
        same_on_resume=False,
        help="JSONL/CSV/TSV: anchor,positive[,negative] rows; for --loss cosent sentence1,sentence2,score; "
        "for --loss mse texts, as `bertkit index` reads a corpus (.txt one a line, .jsonl/.csv with a text column)",
    )
    loss: str = setting(
        "mnrl",
        choices=("mnrl", "cached-mnrl", "cosent", "triplet", "mse"),
        group="embedding",
        help="training loss (mse: fit the model's vectors of --train's texts to --teacher's)",
    )
    teacher: str | None = setting(
        None,
        metavar="DIR",
        group="embedding",
        same_on_resume=False,
        help="mse: the sentence model whose vectors are the targets (PCA-projected to the model's axes)",
    )
    symmetric: bool = setting(False, group="embedding", help="MNRL: also rank anchors for each positive")
    scale: float = setting(20.0, type=A.positive_float, group="embedding", help="MNRL/CoSENT: cosine scale")
    mini_batch_size: int = setting(
        32,
        type=A.positive_int,
        group="embedding",
        help="cached-mnrl: rows per forward (memory), the loss still sees the whole batch",
    )
    matryoshka_dims: list[int] | None = setting(
        None,
        type=parse_dims,
        check=_check_dims,
        group="embedding",
        metavar="DIMS",
        help="Matryoshka over these sizes, e.g. 384,256,128,64",
    )
    hard_negatives: int = setting(0, type=A.nonnegative_int, group="embedding", help="mine K negatives per row")
    mine_from: str | None = setting(
        None,
        metavar="CORPUS",
        group="embedding",
        same_on_resume=False,
        help="corpus to mine from (.txt/.jsonl/.csv, as `bertkit index`), or an index folder built with --model",
    )
    mining_margin: float = setting(
        0.05,
        type=A.nonnegative_float,
        group="embedding",
        help="skip candidates scoring within this of the positive (probable false negatives)",
    )
    score_range: tuple[float, float] = setting(
        (0.0, 1.0),
        type=parse_score_range,
        check=_check_score_range,
        group="embedding",
        metavar="LOW,HIGH",
        help="cosent: the range of the scores",
    )
    pooling: str | None = setting(
        None, choices=("mean", "cls", "max"), group="embedding", help="default: the folder's pooling, else mean"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.matryoshka_dims is not None:
            self.matryoshka_dims = list(self.matryoshka_dims)
        self.score_range = tuple(self.score_range)  # type: ignore[assignment]
        if self.hard_negatives and not self.mine_from:
            raise ValueError(
                f"{A.flag('hard_negatives')} needs {A.given('mine_from', 'CORPUS')} (the texts to mine negatives from)"
            )
        if self.mine_from and not self.hard_negatives:
            raise ValueError(
                f"{A.flag('mine_from')} is read only with {A.given('hard_negatives', 'K')} "
                "(the negatives to mine per row)"
            )
        if self.hard_negatives and self.loss not in ("mnrl", "cached-mnrl", "triplet"):
            raise ValueError(f"hard negatives are for mnrl, cached-mnrl and triplet, not {self.loss}")
        if self.loss == "mse" and not self.teacher:
            raise ValueError(f"{A.given('loss', 'mse')} needs {A.flag('teacher')} (the model whose vectors to fit)")
        if self.loss == "mse" and self.matryoshka_dims:
            raise ValueError(
                f"{A.flag('matryoshka_dims')} is not for {A.given('loss', 'mse')}: the teacher's projected "
                "vectors have no nested sizes"
            )
        loss = self.loss
        for name, used, why in (
            (
                "symmetric",
                loss in ("mnrl", "cached-mnrl"),
                f"is MNRL's; {A.given('loss', str(loss))} has no ranking to mirror",
            ),
            (
                "scale",
                loss not in ("triplet", "mse"),
                f"scales MNRL's and CoSENT's cosines; {A.given('loss', str(loss))} has none",
            ),
            ("teacher", loss == "mse", f"is mse's; {A.given('loss', str(loss))} reads no teacher"),
            (
                "mini_batch_size",
                loss == "cached-mnrl",
                f"is cached-mnrl's; {A.given('loss', str(loss))} runs whole batches",
            ),
            (
                "score_range",
                loss == "cosent",
                f"is the range of CoSENT's scores; {A.given('loss', str(loss))} reads none",
            ),
            (
                "mining_margin",
                bool(self.hard_negatives),
                f"is for mining; without {A.given('hard_negatives', 'K')} nothing is mined",
            ),
        ):
            A.refuse_unused(self, name, used, why)

    def inputs(self) -> dict[str, str | None]:
        return {**super().inputs(), "--mine-from": self.mine_from, "--teacher": self.teacher}

    def identity(self, **sections: Any) -> dict[str, Any]:
        """As the base class, plus the content of a --mine-from index folder (a corpus file is already
        in ``data``): negatives mined from another index would make another run."""
        if self.hard_negatives and self.mine_from and Path(self.mine_from).is_dir():
            folder = Path(self.mine_from)
            files = [folder / n for n in ("meta.json", "texts.jsonl", "vectors.npy")]
            sections = {"mine_from_index": file_fingerprint(*[f for f in files if f.is_file()]), **sections}
        if self.teacher:  # another teacher's vectors would make another run
            files = [Path(self.teacher) / n for n in ("config.json", "model.safetensors", "modules.json")]
            sections = {"teacher": file_fingerprint(*[f for f in files if f.is_file()]), **sections}
        return super().identity(**sections)


def _fingerprint(path: str | None) -> str | None:
    return file_fingerprint(path) if path is not None else None


def evaluate_rows(encoder: Any, rows: list[dict[str, Any]], batch_size: int = 64) -> dict[str, float]:
    """STS correlations of scored rows, else retrieval metrics of anchor -> own positive among all
    positives and negatives of ``rows``."""
    from bertkit.sentence.evaluation.metrics import retrieval_metrics, sts_metrics

    if "score" in rows[0]:
        e1 = encoder.encode([r["sentence1"] for r in rows], batch_size).numpy()
        e2 = encoder.encode([r["sentence2"] for r in rows], batch_size).numpy()
        return sts_metrics(e1, e2, [r["score"] for r in rows])
    queries, corpus, relevant = retrieval_task(rows)
    qrels = {q: {d: 1.0 for d in docs} for q, docs in relevant.items()}
    q = encoder.encode(list(queries.values()), batch_size).numpy()
    c = encoder.encode(list(corpus.values()), batch_size).numpy()
    return retrieval_metrics(q, list(queries), c, list(corpus), qrels)


def retrieval_task(rows: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    """Pairs as a retrieval task: queries (the anchors), the corpus (every positive and negative, once)
    and each query's relevant document (its own positive), keyed by id."""
    corpus = list(dict.fromkeys([r["positive"] for r in rows] + [t for r in rows for t in r["negatives"]]))
    where = {t: str(i) for i, t in enumerate(corpus)}
    queries = {f"q{i}": r["anchor"] for i, r in enumerate(rows)}
    relevant = {f"q{i}": {where[r["positive"]]} for i, r in enumerate(rows)}
    return queries, {str(i): t for i, t in enumerate(corpus)}, relevant


def card_evaluator(rows: list[dict[str, Any]], name: str) -> Any:
    """The sentence-transformers evaluator that scores the validation ``rows`` as :func:`evaluate_rows`
    does (similarity correlations of scored pairs, else retrieval), for the model card."""
    from bertkit.sentence.evaluation import EmbeddingSimilarityEvaluator, InformationRetrievalEvaluator

    if "score" in rows[0]:
        s1, s2 = [r["sentence1"] for r in rows], [r["sentence2"] for r in rows]
        return EmbeddingSimilarityEvaluator(s1, s2, [r["score"] for r in rows], name=name, write_csv=False)
    queries, corpus, relevant = retrieval_task(rows)
    return InformationRetrievalEvaluator(queries, corpus, relevant, name=name, write_csv=False)


def _training_rows(args: EmbedderArguments, encoder: Any) -> list[dict[str, Any]]:
    """The training rows, with mined negatives (cached in the output folder for --resume)."""
    from bertkit.sentence.embedding_data import mine_hard_negatives, read_embedding_rows

    if args.loss == "mse":
        return _teacher_rows(args, encoder)
    rows = read_embedding_rows(args.train, scored=args.loss == "cosent", score_range=args.score_range)
    if args.loss == "triplet" and not args.hard_negatives and not rows[0]["negatives"]:
        raise ValueError(
            f"{args.train}: the triplet loss needs a 'negative' column (or {A.given('hard_negatives', 'K')})"
        )
    if not args.hard_negatives:
        return rows
    cached = Path(args.output) / MINED
    if args.resume and cached.is_file():
        return [json.loads(line) for line in cached.read_text(encoding="utf-8").splitlines() if line.strip()]
    # a corpus file, or a search index folder (bertkit.search, a layer above: reached through a hook)
    corpus, vectors, built_with = _hooks.call("search.mining_corpus", args.mine_from)
    if built_with is not None and Path(built_with).resolve() != Path(args.model).resolve():
        raise ValueError(
            f"{A.given('mine_from', str(args.mine_from))} was built with {built_with}, not "
            f"{A.flag('model')} "
            f"{args.model}; mine from its corpus file instead"
        )
    mined, dropped = mine_hard_negatives(
        encoder,
        rows,
        corpus,
        args.hard_negatives,
        args.mining_margin,
        progress=args.progress,
        corpus_vectors=vectors,
    )
    print(
        f"train-embedder: mined {args.hard_negatives} negative(s) for {len(mined):,} rows from {len(corpus):,} "
        f"texts; {dropped:,} row(s) without enough candidates below the margin were left out",
        file=sys.stderr,
    )
    if not mined:
        raise ValueError(
            f"{args.mine_from}: no row found {args.hard_negatives} negatives; lower {A.flag('mining_margin')} "
            "or mine from a larger corpus"
        )
    atomic_write_text(cached, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mined))
    return mined


def _teacher_rows(args: EmbedderArguments, encoder: Any) -> list[dict[str, Any]]:
    """--loss mse: each text of --train with its target, the teacher's vector projected into the
    model's axes (computed once, kept in the output folder for --resume)."""
    import numpy as np

    from bertkit._io import atomic_path
    from bertkit.sentence.static_fit import TARGETS, teacher_targets

    # the corpus reader of `bertkit index` (bertkit.search, a layer above: reached through a hook)
    texts, vectors, _ = _hooks.call("search.mining_corpus", args.train)
    if vectors is not None:
        raise ValueError(f"{A.given('train', str(args.train))} is an index folder; give its corpus file")
    texts = list(dict.fromkeys(texts))
    cached = Path(args.output) / TARGETS
    if args.resume and cached.is_file():
        targets = np.load(cached)
    else:
        assert args.teacher is not None  # __post_init__: mse needs a teacher
        targets = teacher_targets(args.teacher, texts, encoder, progress=args.progress)
        with atomic_path(cached) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, targets)
    if targets.shape != (len(texts), encoder.dim):
        raise ValueError(f"{cached}: targets of shape {targets.shape}, expected {(len(texts), encoder.dim)}")
    return [{"text": t, "target": v} for t, v in zip(texts, targets)]


def _encoder(args: EmbedderArguments) -> Any:
    """The model to train: a static folder's table, else a transformer encoder with its pooling."""
    from bertkit.modeling.sentence import load_sentence_encoder
    from bertkit.modeling.static import is_static_folder

    if not is_static_folder(args.model):
        return load_sentence_encoder(args.model, pooling=args.pooling, max_seq_length=args.max_length)
    from bertkit.sentence.static_fit import load_static_encoder

    for name in ("pooling", "max_length"):
        if getattr(args, name) is not None:
            raise ValueError(
                f"{A.flag(name)} is not for a static model ({args.model}): it takes the mean of each text's "
                "token vectors, whole"
            )
    return load_static_encoder(args.model)


def train_embedder(args: EmbedderArguments) -> Any:
    """Run `bertkit train-embedder`; returns the Trainer's result."""
    from bertkit.modeling.sentence import save_sentence_folder
    from bertkit.sentence.embedding_data import EmbeddingCollator, read_embedding_rows
    from bertkit.sentence.losses.functional import make_loss
    from bertkit.training.trainer import Trainer

    # A model id resolves to its cache snapshot once (its sentence-transformers files are there too).
    args = dataclasses.replace(args, model=str(resolve_model_arg(args.model)))
    if args.teacher:
        args = dataclasses.replace(args, teacher=str(resolve_model_arg(args.teacher)))
    claim_training_output(args, "train-embedder", {}, EMBEDDER_OUTPUTS, args.inputs(), dry_run=True)
    encoder = _encoder(args)
    from bertkit.sentence.static_fit import StaticEncoder

    static = isinstance(encoder, StaticEncoder)
    val_rows = (
        read_embedding_rows(args.validation, scored=args.loss == "cosent", score_range=args.score_range)
        if args.validation
        else None
    )
    claim = claim_training_output(args, "train-embedder", args.identity(), EMBEDDER_OUTPUTS, args.inputs())

    def work() -> Any:
        rows = _training_rows(args, encoder)
        loss = make_loss(args.loss, args.matryoshka_dims, args.mini_batch_size, args.symmetric, args.scale)
        if args.matryoshka_dims and max(args.matryoshka_dims) > encoder.dim:
            raise ValueError(
                f"{A.given('matryoshka_dims', str(max(args.matryoshka_dims)))} is above the model's size {encoder.dim}"
            )

        def loss_fn(model: Any, batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
            return loss(lambda f: encoder(f, model=model), batch["columns"], batch["labels"]), {}

        def save(model: Any, directory: Path) -> None:
            if static:
                encoder.save(directory)
                return
            model.save_pretrained(str(directory))
            width = int(encoder.model.config.hidden_size)  # the token vectors' width, what Pooling's config records
            save_sentence_folder(directory, width, encoder.pooling, encoder.normalize, encoder.max_seq_length)

        cfg = args.trainer_args("train-embedder", val_rows is not None)
        evaluate = (lambda model: evaluate_rows(encoder, val_rows)) if val_rows else None
        trainer = Trainer(
            encoder.model,
            cfg,
            rows,
            collate_fn=EmbeddingCollator(encoder, args.loss == "cosent"),
            evaluate=evaluate,
            loss_fn=loss_fn,
            tokenizer=None if static else encoder.tokenizer,  # a static folder's tokenizer.json is save's
            save_model=save,
        )
        result = trainer.train()
        if result.last_metrics:
            atomic_write_json(Path(args.output) / "eval_results.json", result.last_metrics)
        if not static:  # a static model has no model card yet (sentence-transformers' card reads a transformer)
            write_embedder_card(args, rows, trainer, val_rows)
        return result

    return within_claim(claim, work)


def _card_loss(args: EmbedderArguments, model: Any) -> Any:
    """The sentence-transformers loss ``--loss`` and its flags train as (its name, settings and paper)."""
    from bertkit.sentence import losses as L

    if args.loss == "cosent":
        loss = L.CoSENTLoss(model, scale=args.scale)
    elif args.loss == "mse":
        loss = L.MSELoss(model)
    elif args.loss == "triplet":
        loss = L.TripletLoss(model)
    else:  # --symmetric: both directions, each ranked over its own candidates (the deprecated
        # MultipleNegativesSymmetricRankingLoss, written as sentence-transformers now recommends)
        both = {"directions": ("query_to_doc", "doc_to_query"), "partition_mode": "per_direction"}
        kw: dict[str, Any] = {"scale": args.scale, **(both if args.symmetric else {})}
        if args.loss == "cached-mnrl":
            loss = L.CachedMultipleNegativesRankingLoss(model, mini_batch_size=args.mini_batch_size, **kw)
        else:
            loss = L.MultipleNegativesRankingLoss(model, **kw)
    return L.MatryoshkaLoss(model, loss, list(args.matryoshka_dims)) if args.matryoshka_dims else loss


def write_embedder_card(
    args: EmbedderArguments, rows: list[dict[str, Any]], trainer: Any, val_rows: list[dict[str, Any]] | None = None
) -> None:
    """README.md in OUTPUT, the model card sentence-transformers' trainer writes: base model, data,
    loss, the flags that differ from their defaults, the training log, and with --validation the
    final model's scores there (as sentence-transformers' evaluator for the rows gives them)."""
    from bertkit.sentence.losses.functional import loss_columns
    from bertkit.sentence.model_card import card_columns, changed_settings, write_command_card
    from bertkit.sentence.sentence_transformer import SentenceTransformer

    columns = list(loss_columns(args.loss))
    data = card_columns(rows, columns)
    sizes = [{"name": Path(args.train).name, "size": len(rows), "columns": columns, "data": data}]
    losses = lambda model: [_card_loss(args, model)]  # noqa: E731
    evaluators = (lambda: [card_evaluator(val_rows, Path(args.validation).stem)]) if val_rows else None
    write_command_card(
        SentenceTransformer,
        Path(args.output),
        args.model,
        sizes,
        losses,
        changed_settings(args),
        trainer,
        evaluators,
        card_log_names(val_rows, Path(args.validation).stem) if val_rows else None,
    )


def card_log_names(rows: list[dict[str, Any]], name: str) -> dict[str, str]:
    """The metric each evaluation logs (:func:`evaluate_rows`) -> the same number under the name
    :func:`card_evaluator`'s primary metric has: the card's training log shows it as that column."""
    return {"spearman": f"{name}_spearman_cosine"} if "score" in rows[0] else {"ndcg@10": f"{name}_cosine_ndcg@10"}
