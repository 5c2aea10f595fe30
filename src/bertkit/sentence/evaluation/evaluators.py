"""Evaluators under sentence-transformers' names: the same calls, keys, values and CSV files.

A sentence-transformers evaluation script switches with its import lines alone::

    from bertkit import SentenceTransformer
    from bertkit.sentence.evaluation import EmbeddingSimilarityEvaluator, InformationRetrievalEvaluator

    model = SentenceTransformer(folder)
    ev = InformationRetrievalEvaluator(queries, corpus, relevant_docs, name="bbc")
    results = ev(model)      # {"bbc_cosine_accuracy@1": ..., "bbc_cosine_ndcg@10": ..., ...}
    ev.primary_metric        # "bbc_cosine_ndcg@10"

Each evaluator embeds through the model's ``encode`` (``encode_query`` / ``encode_document`` for
retrieval, when the model has them), so it measures a ``bertkit.SentenceTransformer`` or a
sentence-transformers model alike, with prompts and ``truncate_dim`` passed through. The numbers
come from bertkit's one implementation of each metric (:mod:`bertkit.sentence.evaluation.metrics`).

The cross-encoder evaluators (``CrossEncoderRerankingEvaluator``, ``CrossEncoderCorrelationEvaluator``,
``CrossEncoderClassificationEvaluator``) score pairs through the model's ``predict``, so they measure
a ``bertkit.CrossEncoder`` or a sentence-transformers one alike; equal scores count as they do there
(scikit-learn's ranking metrics).

Where sentence-transformers lets bad input through, these refuse it by name before any text is
embedded: pairs and scores of different lengths, an unknown similarity. Relevant documents missing
from the corpus and relevant-docs queries missing from the queries are scored as there (a miss; not
scored) with a warning that counts them.

With ``output_path`` (and ``write_csv``) a call adds one row to the evaluator's results CSV, under
sentence-transformers' file name and columns: the file is rewritten whole and atomically with the
row appended, so an interrupted write leaves the previous rows intact. A file of that name with
other columns (another evaluator's, or another model's similarity) is refused rather than given
rows under the wrong labels. Model cards are not written; the cross-encoder evaluators record their
results on ``model.model_card_data`` where the model has one, as sentence-transformers' do.
"""

from __future__ import annotations

import csv
import io
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit._args import positive_int
from bertkit.sentence.evaluation.metrics import (
    SIMILARITIES,
    average_precision,
    best_accuracy_threshold,
    best_f1_threshold,
    correlations,
    rerank_metrics,
    retrieval_metrics,
    sts_metrics,
)

__all__ = [
    "BaseEvaluator",
    "CECorrelationEvaluator",
    "CrossEncoderClassificationEvaluator",
    "CrossEncoderCorrelationEvaluator",
    "CrossEncoderRerankingEvaluator",
    "EmbeddingSimilarityEvaluator",
    "InformationRetrievalEvaluator",
    "SentenceEvaluator",
    "SequentialEvaluator",
]

_PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def _similarity_name(value: Any, what: str) -> str:
    """A similarity given as a name or as sentence-transformers' ``SimilarityFunction`` member."""
    name = getattr(value, "value", value)
    if name not in SIMILARITIES:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(SIMILARITIES)}")
    return name


def _csv_line(values: Sequence[Any], lineterminator: str) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator=lineterminator).writerow(values)
    return buf.getvalue()


class BaseEvaluator:
    """Base of the evaluators: ``primary_metric`` names the key used to pick a model, and
    ``greater_is_better`` says which way is better."""

    def __init__(self) -> None:
        self.greater_is_better = True
        self.primary_metric: str | None = None

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> float | dict[str, float]:
        """Evaluate ``model``; a results row goes to ``output_path`` (epoch/steps -1: not in training)."""
        raise NotImplementedError

    def prefix_name_to_metrics(self, metrics: dict[str, Any], name: str) -> dict[str, Any]:
        """``metrics`` with ``name + "_"`` before each key (and before ``primary_metric``), values as floats."""

        def as_float(value: Any) -> Any:
            try:
                return float(value)
            except (TypeError, ValueError):
                return value

        if not name:
            return {key: as_float(value) for key, value in metrics.items()}
        out = {f"{name}_{key}": as_float(value) for key, value in metrics.items()}
        if self.primary_metric is not None and not self.primary_metric.startswith(name + "_"):
            self.primary_metric = f"{name}_{self.primary_metric}"
        return out

    @property
    def description(self) -> str:
        """The class name in words: ``InformationRetrievalEvaluator`` -> "Information Retrieval"."""
        class_name = type(self).__name__
        if class_name.startswith("CE"):
            class_name = "CrossEncoder" + class_name[2:]
        class_name = class_name.split("Evaluator")[0]
        return re.sub(r"([a-z])([A-Z])", r"\g<1> \g<2>", class_name)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings worth recording next to the results (the ones not left at their default)."""
        return {}

    def store_metrics_in_model_card_data(
        self, model: Any, metrics: dict[str, Any], epoch: int = 0, step: int = 0
    ) -> None:
        """Record ``metrics`` on ``model.model_card_data`` as sentence-transformers' evaluators do, for
        the model card its save() writes (a model without one records nothing)."""
        card = getattr(model, "model_card_data", None)
        if card is not None:
            card.set_evaluation_metrics(self, metrics, epoch, step)


# sentence-transformers' older name for the base class
SentenceEvaluator = BaseEvaluator


class _CsvResults:
    """One evaluator's results CSV: a header line, then one row per call."""

    def __init__(self, file_name: str, header: list[str], lineterminator: str) -> None:
        self.file_name = file_name
        self.header = header
        self.lineterminator = lineterminator

    def _path(self, output_path: str | os.PathLike) -> Path:
        return Path(output_path) / self.file_name

    def _existing(self, path: Path) -> str | None:
        """The file's text, or None when there is none; a file with other columns is refused."""
        if not path.is_file():
            return None
        text = path.read_bytes().decode("utf-8")
        first = text.split("\n", 1)[0].rstrip("\r")
        want = _csv_line(self.header, "")
        if first != want:
            raise ValueError(
                f"{path} holds other columns ({first[:200]!r}) than this evaluator writes ({want[:200]!r}); "
                "pass another output_path or move the file, so no row goes under the wrong labels"
            )
        return text

    def check(self, output_path: str | os.PathLike) -> None:
        """Refuse, before any work, a results file the row could not be appended to."""
        self._existing(self._path(output_path))

    def append(self, output_path: str | os.PathLike, row: Sequence[Any]) -> Path:
        """The file with ``row`` added (and the header first when the file is new), written atomically."""
        from bertkit._io import atomic_write_text

        path = self._path(output_path)
        text = self._existing(path)
        if text is None:
            text = _csv_line(self.header, self.lineterminator)
        elif text and not text.endswith("\n"):
            text += self.lineterminator
        return atomic_write_text(path, text + _csv_line(row, self.lineterminator))


class EmbeddingSimilarityEvaluator(BaseEvaluator):
    """Pearson and Spearman correlation of the pairs' embedding similarity with gold ``scores``.

    Keys ``pearson_<fn>`` and ``spearman_<fn>`` per similarity (``similarity_fn_names``, else the
    model's ``similarity_fn_name``), plus ``pearson_max`` / ``spearman_max`` over several; each
    prefixed with ``name + "_"``. ``precision`` quantizes the (normalised) embeddings first.
    """

    def __init__(
        self,
        sentences1: list[str],
        sentences2: list[str],
        scores: list[float],
        batch_size: int = 16,
        main_similarity: Any = None,
        similarity_fn_names: list[str] | None = None,
        name: str = "",
        show_progress_bar: bool | None = False,
        write_csv: bool = True,
        precision: str | None = None,
        truncate_dim: int | None = None,
    ) -> None:
        super().__init__()
        sentences1, sentences2, scores = list(sentences1), list(sentences2), list(scores)
        if not len(sentences1) == len(sentences2) == len(scores):
            raise ValueError(
                f"EmbeddingSimilarityEvaluator: sentences1, sentences2 and scores must have one entry per pair, "
                f"got {len(sentences1)}, {len(sentences2)} and {len(scores)}"
            )
        if len(scores) < 2:
            raise ValueError("EmbeddingSimilarityEvaluator: a correlation needs at least 2 pairs")
        if precision is not None and precision not in _PRECISIONS:
            raise ValueError(f"EmbeddingSimilarityEvaluator: precision must be one of {', '.join(_PRECISIONS)}")
        self.sentences1 = sentences1
        self.sentences2 = sentences2
        self.scores = scores
        self.batch_size = batch_size
        self.main_similarity = (
            _similarity_name(main_similarity, "main_similarity") if main_similarity is not None else None
        )
        self.similarity_fn_names = [_similarity_name(n, "similarity_fn_names entry") for n in similarity_fn_names or []]
        if not self.similarity_fn_names and self.main_similarity is not None:
            self.similarity_fn_names = [self.main_similarity]
        self.name = name
        self.show_progress_bar = bool(show_progress_bar)
        self.write_csv = write_csv
        self.precision = precision
        self.truncate_dim = truncate_dim
        self.csv_file = (
            "similarity_evaluation"
            + (f"_{name}" if name else "")
            + (f"_{precision}" if precision else "")
            + "_results.csv"
        )
        self.csv_headers = ["epoch", "steps"]
        self._append_csv_headers(self.similarity_fn_names)

    @classmethod
    def from_input_examples(cls, examples: Iterable[Any], **kwargs: Any) -> EmbeddingSimilarityEvaluator:
        """From ``InputExample``-like objects (sentence-transformers' v2 scripts build it so): ``texts`` the
        pair, ``label`` the gold score."""
        examples = list(examples)
        return cls(
            [e.texts[0] for e in examples], [e.texts[1] for e in examples], [e.label for e in examples], **kwargs
        )

    def _append_csv_headers(self, similarity_fn_names: list[str]) -> None:
        self.csv_headers += [f"{fn}_{m}" for fn in similarity_fn_names for m in ("pearson", "spearman")]

    def embed_inputs(self, model: Any, sentences: list[str]) -> np.ndarray:
        """``model.encode`` of ``sentences`` as numpy, at the evaluator's precision and truncation."""
        return np.asarray(
            model.encode(
                sentences,
                batch_size=self.batch_size,
                show_progress_bar=self.show_progress_bar,
                convert_to_numpy=True,
                precision=self.precision or "float32",
                normalize_embeddings=bool(self.precision),
                truncate_dim=self.truncate_dim,
            )
        )

    def _embeddings(self, model: Any) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.sentences1)
        if self.precision in ("int8", "uint8"):
            # one calibration for both sides, so a sentence gets the same quantized vector on either
            both = self.embed_inputs(model, [*self.sentences1, *self.sentences2])
            e1, e2 = both[:n], both[n:]
        else:
            e1, e2 = self.embed_inputs(model, self.sentences1), self.embed_inputs(model, self.sentences2)
        if self.precision == "binary":
            e1, e2 = e1.astype(np.int16) + 128, e2.astype(np.int16) + 128
        if self.precision in ("binary", "ubinary"):
            # packed sign bits: the similarities need one value per dimension
            e1, e2 = np.unpackbits(e1.astype(np.uint8), axis=1), np.unpackbits(e2.astype(np.uint8), axis=1)
        return e1.astype(np.float32), e2.astype(np.float32)

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        """Correlations of ``model``'s similarities with the gold scores, as a dict of floats."""
        if not self.similarity_fn_names:
            self.similarity_fn_names = [_similarity_name(model.similarity_fn_name, "the model's similarity_fn_name")]
            self._append_csv_headers(self.similarity_fn_names)
        results = _CsvResults(self.csv_file, self.csv_headers, "\r\n")
        if output_path is not None and self.write_csv:
            results.check(output_path)
        e1, e2 = self._embeddings(model)
        metrics: dict[str, float] = {}
        for fn in self.similarity_fn_names:
            m = sts_metrics(e1, e2, self.scores, similarity=fn)
            metrics[f"pearson_{fn}"], metrics[f"spearman_{fn}"] = m["pearson"], m["spearman"]
        if output_path is not None and self.write_csv:
            row = [epoch, steps] + [
                metrics[f"{m}_{fn}"] for fn in self.similarity_fn_names for m in ("pearson", "spearman")
            ]
            results.append(output_path, row)
        if len(self.similarity_fn_names) > 1:
            metrics["pearson_max"] = max(metrics[f"pearson_{fn}"] for fn in self.similarity_fn_names)
            metrics["spearman_max"] = max(metrics[f"spearman_{fn}"] for fn in self.similarity_fn_names)
        if self.main_similarity is not None:
            self.primary_metric = f"spearman_{self.main_similarity}"
        elif len(self.similarity_fn_names) > 1:
            self.primary_metric = "spearman_max"
        else:
            self.primary_metric = f"spearman_{self.similarity_fn_names[0]}"
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    @property
    def description(self) -> str:
        return "Semantic Similarity"

    def get_config_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("truncate_dim", "precision") if getattr(self, k) is not None}


# sentence-transformers' metric names -> bertkit's, in the order its results list them
_IR_ORDER = ("accuracy", "precision", "recall", "ndcg", "mrr", "map")


class InformationRetrievalEvaluator(BaseEvaluator):
    """Retrieval metrics of the queries against the corpus, ranked by the model's similarity.

    Keys ``<fn>_accuracy@k``, ``_precision@k``, ``_recall@k``, ``_ndcg@k``, ``_mrr@k`` and
    ``_map@k`` per score function (``score_functions``, else the model's ``similarity_fn_name``),
    prefixed with ``name + "_"``; queries without a relevant document are left out, as there.
    """

    def __init__(
        self,
        queries: dict[str, str],
        corpus: dict[str, str],
        relevant_docs: dict[str, set[str]],
        corpus_chunk_size: int = 50000,
        mrr_at_k: list[int] = [10],  # sentence-transformers' defaults; copied, never mutated
        ndcg_at_k: list[int] = [10],
        accuracy_at_k: list[int] = [1, 3, 5, 10],
        precision_recall_at_k: list[int] = [1, 3, 5, 10],
        map_at_k: list[int] = [100],
        show_progress_bar: bool = False,
        batch_size: int = 32,
        name: str = "",
        write_csv: bool = True,
        truncate_dim: int | None = None,
        score_functions: dict[str, Callable[[Any, Any], Any]] | None = None,
        main_score_function: Any = None,
        query_prompt: str | None = None,
        query_prompt_name: str | None = None,
        corpus_prompt: str | None = None,
        corpus_prompt_name: str | None = None,
        write_predictions: bool = False,
    ) -> None:
        super().__init__()
        if write_predictions:
            raise ValueError("InformationRetrievalEvaluator: write_predictions is not supported by bertkit")
        positive_int.check("InformationRetrievalEvaluator: corpus_chunk_size", corpus_chunk_size)
        # Ids the qrels name beyond the queries or the corpus are common (qrels of a full collection,
        # evaluated on a sample of it) and sentence-transformers scores them as it does: such a query
        # is not scored, such a document counts as a miss. They are never silent here.
        missing_q = [qid for qid in relevant_docs if qid not in queries]
        if missing_q:
            warnings.warn(
                f"InformationRetrievalEvaluator: relevant_docs names {len(missing_q)} query id(s) not in queries "
                f"(e.g. {missing_q[0]!r}); they are not scored",
                stacklevel=2,
            )
        missing_c: list[Any] = []
        for qid, docs in relevant_docs.items():
            if isinstance(docs, (str, bytes)) or not isinstance(docs, Iterable):
                raise ValueError(
                    f"InformationRetrievalEvaluator: relevant_docs[{qid!r}] must be a set of corpus ids, "
                    f"got {type(docs).__name__}"
                )
            missing_c += [cid for cid in docs if cid not in corpus]
        if missing_c:
            warnings.warn(
                f"InformationRetrievalEvaluator: relevant_docs names {len(missing_c)} corpus id(s) not in the "
                f"corpus (e.g. {missing_c[0]!r}); they can never be retrieved and count as misses",
                stacklevel=2,
            )
        self.queries_ids = [qid for qid in queries if len(relevant_docs.get(qid, ())) > 0]
        if not self.queries_ids:
            raise ValueError("InformationRetrievalEvaluator: no query has a relevant document")
        self.queries = [queries[qid] for qid in self.queries_ids]
        self.corpus_ids = list(corpus)
        self.corpus = [corpus[cid] for cid in self.corpus_ids]
        self.relevant_docs = relevant_docs
        self.query_prompt = query_prompt
        self.query_prompt_name = query_prompt_name
        self.corpus_prompt = corpus_prompt
        self.corpus_prompt_name = corpus_prompt_name
        self.corpus_chunk_size = corpus_chunk_size
        self.mrr_at_k = list(mrr_at_k)
        self.ndcg_at_k = list(ndcg_at_k)
        self.accuracy_at_k = list(accuracy_at_k)
        self.precision_recall_at_k = list(precision_recall_at_k)
        self.map_at_k = list(map_at_k)
        for what, ks in (
            ("mrr_at_k", self.mrr_at_k),
            ("ndcg_at_k", self.ndcg_at_k),
            ("accuracy_at_k", self.accuracy_at_k),
            ("precision_recall_at_k", self.precision_recall_at_k),
            ("map_at_k", self.map_at_k),
        ):
            if not ks:
                raise ValueError(f"InformationRetrievalEvaluator: {what} must list at least one k, got {ks!r}")
            for i, k in enumerate(ks):
                positive_int.check(f"InformationRetrievalEvaluator: {what}[{i}]", k)
        self.show_progress_bar = bool(show_progress_bar)
        self.batch_size = batch_size
        self.name = name
        self.write_csv = write_csv
        self.truncate_dim = truncate_dim
        if score_functions is not None and not score_functions:
            raise ValueError("InformationRetrievalEvaluator: score_functions is empty")
        self.score_functions = score_functions
        self.score_function_names = sorted(score_functions) if score_functions else []
        self._score_functions_from_model = score_functions is None
        self.main_score_function = (
            _similarity_name(main_score_function, "main_score_function") if main_score_function is not None else None
        )
        self.csv_file = "Information-Retrieval_evaluation" + (f"_{name}" if name else "") + "_results.csv"
        self.csv_headers = ["epoch", "steps"]
        self._append_csv_headers(self.score_function_names)

    def _append_csv_headers(self, score_function_names: list[str]) -> None:
        for fn in score_function_names:
            self.csv_headers += [f"{fn}-Accuracy@{k}" for k in self.accuracy_at_k]
            for k in self.precision_recall_at_k:
                self.csv_headers += [f"{fn}-Precision@{k}", f"{fn}-Recall@{k}"]
            self.csv_headers += [f"{fn}-MRR@{k}" for k in self.mrr_at_k]
            self.csv_headers += [f"{fn}-NDCG@{k}" for k in self.ndcg_at_k]
            self.csv_headers += [f"{fn}-MAP@{k}" for k in self.map_at_k]

    def _ks(self) -> dict[str, list[int]]:
        return {
            "accuracy": self.accuracy_at_k,
            "precision": self.precision_recall_at_k,
            "recall": self.precision_recall_at_k,
            "ndcg": self.ndcg_at_k,
            "mrr": self.mrr_at_k,
            "map": self.map_at_k,
        }

    def embed_inputs(self, model: Any, texts: list[str], role: str | None = None, **prompt: Any) -> np.ndarray:
        """``model.encode`` of ``texts`` as numpy (``encode_query`` / ``encode_document`` for ``role``
        "query" / "document" when the model has them)."""
        encode = getattr(model, f"encode_{role}", model.encode) if role else model.encode
        return np.asarray(
            encode(
                texts,
                batch_size=self.batch_size,
                show_progress_bar=self.show_progress_bar,
                convert_to_numpy=True,
                truncate_dim=self.truncate_dim,
                **prompt,
            ),
            np.float32,
        )

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        """Retrieval metrics of ``model`` on the queries and corpus, as a dict of floats."""
        if self._score_functions_from_model:
            # resolved per call, so a reused evaluator scores each model with its own similarity
            fn_name = model.similarity_fn_name
            self.score_functions = {fn_name: fn_name if fn_name in SIMILARITIES else model.similarity}
            if self.score_function_names != sorted(self.score_functions):
                self.score_function_names = sorted(self.score_functions)
                self.csv_headers = ["epoch", "steps"]
                self._append_csv_headers(self.score_function_names)
                self.primary_metric = None
        assert self.score_functions is not None
        if self.main_score_function is not None and self.main_score_function not in self.score_functions:
            # sentence-transformers would name a primary metric that is not among the results
            raise ValueError(
                f"InformationRetrievalEvaluator: main_score_function {self.main_score_function!r} is not among "
                f"the score functions ({', '.join(self.score_function_names)})"
            )
        results = _CsvResults(self.csv_file, self.csv_headers, "\n")
        if output_path is not None and self.write_csv:
            results.check(output_path)

        q = self.embed_inputs(
            model, self.queries, "query", prompt_name=self.query_prompt_name, prompt=self.query_prompt
        )
        c = np.concatenate(
            [
                self.embed_inputs(
                    model,
                    self.corpus[s : s + self.corpus_chunk_size],
                    "document",
                    prompt_name=self.corpus_prompt_name,
                    prompt=self.corpus_prompt,
                )
                for s in range(0, len(self.corpus), self.corpus_chunk_size)
            ]
        )
        qrels = {qid: dict.fromkeys(self.relevant_docs[qid], 1.0) for qid in self.queries_ids}
        ks = self._ks()
        scores: dict[str, dict[str, float]] = {}
        for fn_name, fn in self.score_functions.items():
            m = retrieval_metrics(
                q,
                self.queries_ids,
                c,
                self.corpus_ids,
                qrels,
                corpus_chunk=self.corpus_chunk_size,
                ks=ks,
                similarity=fn,
            )
            scores[fn_name] = {f"{metric}@{k}": m[f"{metric}@{k}"] for metric in _IR_ORDER for k in ks[metric]}

        if output_path is not None and self.write_csv:
            row: list[Any] = [epoch, steps]
            for fn_name in self.score_function_names:
                s = scores[fn_name]
                row += [s[f"accuracy@{k}"] for k in self.accuracy_at_k]
                for k in self.precision_recall_at_k:
                    row += [s[f"precision@{k}"], s[f"recall@{k}"]]
                row += [s[f"mrr@{k}"] for k in self.mrr_at_k]
                row += [s[f"ndcg@{k}"] for k in self.ndcg_at_k]
                row += [s[f"map@{k}"] for k in self.map_at_k]
            results.append(output_path, row)

        if not self.primary_metric:
            top = max(self.ndcg_at_k)
            if self.main_score_function is None:
                best = max(self.score_function_names, key=lambda fn: scores[fn][f"ndcg@{top}"])
            else:
                best = self.main_score_function
            self.primary_metric = f"{best}_ndcg@{top}"
        metrics = {f"{fn}_{key}": v for fn, s in scores.items() for key, v in s.items()}
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def get_config_dict(self) -> dict[str, Any]:
        keys = ("truncate_dim", "query_prompt", "query_prompt_name", "corpus_prompt", "corpus_prompt_name")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


class SequentialEvaluator(BaseEvaluator):
    """Runs ``evaluators`` one after another; the results merged, plus ``sequential_score``:
    ``main_score_function`` of their primary scores (the last one's by default)."""

    def __init__(
        self,
        evaluators: Iterable[BaseEvaluator],
        main_score_function: Callable[[list[float]], float] = lambda scores: scores[-1],
    ) -> None:
        super().__init__()
        self.evaluators = list(evaluators)
        self.main_score_function = main_score_function

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        """Every evaluator's results in one dict, with ``sequential_score``."""
        evaluations: list[Mapping[str, float]] = []
        scores: list[float] = []
        for i, evaluator in enumerate(self.evaluators):
            evaluation = evaluator(model, output_path, epoch, steps)
            if not isinstance(evaluation, dict):
                scores.append(evaluation)
                evaluation = {f"evaluator_{i}": evaluation}
            else:
                primary = getattr(evaluator, "primary_metric", None)
                scores.append(evaluation[primary] if primary is not None else next(iter(evaluation.values())))
            evaluations.append(evaluation)
        self.primary_metric = "sequential_score"
        results = {key: value for evaluation in evaluations for key, value in evaluation.items()}
        results["sequential_score"] = self.main_score_function(scores) if scores else 0.0
        return results


# --- cross-encoders: scores of (query, document) pairs from the model's ``predict`` ----------------


def _check_pairs(pairs: Any, what: str) -> list[list[str]]:
    """``pairs`` as a list of [text, text]; any other entry is refused by position and value."""
    out = []
    for i, pair in enumerate(pairs):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"{what}: sentence_pairs[{i}] must be a pair of texts, got {pair!r:.200}")
        if not all(isinstance(text, str) for text in pair):
            raise ValueError(f"{what}: sentence_pairs[{i}] must hold two strings, got {pair!r:.200}")
        out.append(list(pair))
    if not out:
        raise ValueError(f"{what}: sentence_pairs is empty")
    return out


def _predict(evaluator: Any, model: Any, pairs: list[list[str]]) -> np.ndarray:
    """``model.predict`` of ``pairs`` as numpy, with the evaluator's prompt, batch size and progress bar."""
    return np.asarray(
        model.predict(
            pairs,
            prompt_name=evaluator.prompt_name,
            batch_size=evaluator.batch_size,
            convert_to_numpy=True,
            show_progress_bar=evaluator.show_progress_bar,
        )
    )


def _texts(value: Any, where: str) -> list[str]:
    """A sample's document list (a single text is a list of one); anything but texts is refused."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Sequence) or not all(isinstance(text, str) for text in value):
        raise ValueError(
            f"CrossEncoderRerankingEvaluator: {where} must be a text or a list of texts, got {value!r:.200}"
        )
    return list(value)


class CrossEncoderRerankingEvaluator(BaseEvaluator):
    """MAP, MRR@k and nDCG@k of each query's documents ranked by the cross-encoder's scores.

    A sample is a dict of "query", "positive" (a text or list of relevant texts) and either
    "negative" (irrelevant texts) or "documents" (a first-stage ranking, best first, that may hold
    the positives). With "documents", ``base_map`` / ``base_mrr@k`` / ``base_ndcg@k`` score that
    ranking too, the positives missing from it placed after it (none found: 0). The reranked list is
    the positives followed by the other documents (``always_rerank_positives``), or the documents
    alone, scoring only the positives among them. A query without a relevant document scores 0.
    Keys and CSV are sentence-transformers'; primary metric ``ndcg@k``.
    """

    def __init__(
        self,
        samples: list[dict[str, Any]] | dict[Any, dict[str, Any]],
        at_k: int = 10,
        always_rerank_positives: bool = True,
        name: str = "",
        prompt_name: str | None = None,
        batch_size: int = 64,
        show_progress_bar: bool = False,
        write_csv: bool = True,
        mrr_at_k: int | None = None,
    ) -> None:
        super().__init__()
        if mrr_at_k is not None:
            warnings.warn(
                f"CrossEncoderRerankingEvaluator: mrr_at_k is deprecated; use at_k={mrr_at_k}",
                DeprecationWarning,
                stacklevel=2,
            )
            at_k = mrr_at_k
        positive_int.check("CrossEncoderRerankingEvaluator: at_k", at_k)
        self.samples = list(samples.values()) if isinstance(samples, dict) else list(samples)
        self.at_k = at_k
        self.always_rerank_positives = always_rerank_positives
        self.name = name
        self.prompt_name = prompt_name
        self.batch_size = batch_size
        self.show_progress_bar = show_progress_bar
        self.write_csv = write_csv
        self.csv_file = "CrossEncoderRerankingEvaluator" + (f"_{name}" if name else "") + f"_results_@{at_k}.csv"
        self.csv_headers = ["epoch", "steps", "MAP", f"MRR@{at_k}", f"NDCG@{at_k}"]
        self.primary_metric = f"ndcg@{at_k}"
        self._rankings()  # bad samples are refused here, before any model is called

    def _rankings(self) -> list[tuple[str, list[str], list[int], list[int] | None]]:
        """Per sample: the query, the documents to score, their relevance, and the first-stage
        relevance (positives missing from "documents" appended; None without "documents")."""
        out = []
        for i, sample in enumerate(self.samples):
            where = f"samples[{i}]"
            if not isinstance(sample, Mapping):
                raise ValueError(f"CrossEncoderRerankingEvaluator: {where} must be a dict, got {sample!r:.200}")
            missing = [key for key in ("query", "positive") if key not in sample]
            if missing:
                raise ValueError(f"CrossEncoderRerankingEvaluator: {where} has no {missing[0]!r} key")
            if ("negative" in sample) == ("documents" in sample):
                raise ValueError(
                    f"CrossEncoderRerankingEvaluator: {where} needs exactly one of 'negative' and 'documents', "
                    f"got keys {sorted(sample)}"
                )
            query = sample["query"]
            if not isinstance(query, str):
                raise ValueError(f"CrossEncoderRerankingEvaluator: {where}['query'] must be a text, got {query!r:.200}")
            positive = _texts(sample["positive"], f"{where}['positive']")
            base: list[int] | None = None
            if "documents" in sample:
                documents = _texts(sample["documents"], f"{where}['documents']")
                if not documents:
                    raise ValueError(f"CrossEncoderRerankingEvaluator: {where}['documents'] is empty")
                base = [int(doc in positive) for doc in documents]
                if sum(base):
                    # the positives the first stage missed, ranked after everything it found
                    base += [1] * (len(positive) - sum(base))
                if self.always_rerank_positives:
                    docs = positive + [doc for doc in documents if doc not in positive]
                    relevance = [1] * len(positive) + [0] * (len(docs) - len(positive))
                else:
                    docs, relevance = documents, [int(doc in positive) for doc in documents]
            else:
                negative = _texts(sample["negative"], f"{where}['negative']")
                docs, relevance = positive + negative, [1] * len(positive) + [0] * len(negative)
            for what, ranking in (("documents to rerank", relevance), ("first-stage documents", base)):
                # nDCG of a single document is undefined (sentence-transformers fails in scikit-learn)
                if ranking is not None and sum(ranking) and len(ranking) < 2:
                    raise ValueError(
                        f"CrossEncoderRerankingEvaluator: {where} has {len(ranking)} {what}; a ranking needs at least 2"
                    )
            out.append((query, docs, relevance, base))
        if not out:
            raise ValueError("CrossEncoderRerankingEvaluator: samples is empty")
        return out

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        """MAP, MRR@k and nDCG@k of ``model``'s reranking (and of the first stage), as a dict of floats."""
        rankings = self._rankings()
        results = _CsvResults(self.csv_file, self.csv_headers, "\r\n")
        if output_path is not None and self.write_csv:
            results.check(output_path)
        k = self.at_k
        base = [rerank_metrics(b, np.arange(len(b), 0, -1), k) for _, _, _, b in rankings if b is not None]
        scored = [(q, docs, rel) for q, docs, rel, _ in rankings if sum(rel)]
        pairs = [[q, doc] for q, docs, _ in scored for doc in docs]
        # one predict call for every pair, as sentence-transformers batches them
        scores = _predict(self, model, pairs) if pairs else np.zeros(0, np.float32)
        if scores.shape != (len(pairs),):
            raise ValueError(
                f"CrossEncoderRerankingEvaluator needs one score per pair, got shape {scores.shape} for "
                f"{len(pairs)} pairs (a one-label model)"
            )
        per_query, start = [], 0
        for _, docs, rel, _ in rankings:
            if not sum(rel):
                per_query.append({f"mrr@{k}": 0.0, f"ndcg@{k}": 0.0, "map": 0.0})
                continue
            per_query.append(rerank_metrics(rel, scores[start : start + len(docs)], k))
            start += len(docs)

        def mean(rows: list[dict[str, float]], key: str) -> float:
            return float(np.mean([row[key] for row in rows]))

        m = {key: mean(per_query, key) for key in ("map", f"mrr@{k}", f"ndcg@{k}")}
        metrics: dict[str, Any] = dict(m)
        if base:
            b = {key: mean(base, key) for key in ("map", f"mrr@{k}", f"ndcg@{k}")}
            card = {key: f"{m[key]:.4f} ({m[key] - b[key]:+.4f})" for key in m}
            self.store_metrics_in_model_card_data(model, self.prefix_name_to_metrics(card, self.name), epoch, steps)
            metrics.update({f"base_{key}": value for key, value in b.items()})
            metrics = self.prefix_name_to_metrics(metrics, self.name)
        else:
            metrics = self.prefix_name_to_metrics(metrics, self.name)
            self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        if output_path is not None and self.write_csv:
            results.append(output_path, [epoch, steps, m["map"], m[f"mrr@{k}"], m[f"ndcg@{k}"]])
        return metrics

    def get_config_dict(self) -> dict[str, Any]:
        config: dict[str, Any] = {"at_k": self.at_k}
        if self.samples and "documents" in self.samples[0]:
            config["always_rerank_positives"] = self.always_rerank_positives
        return config


class CrossEncoderCorrelationEvaluator(BaseEvaluator):
    """Pearson and Spearman correlation of the model's score of each pair with the gold ``scores``;
    keys ``pearson`` and ``spearman`` (primary), prefixed with ``name + "_"``. Needs a one-label model."""

    def __init__(
        self,
        sentence_pairs: list[list[str]],
        scores: list[float],
        name: str = "",
        prompt_name: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        write_csv: bool = True,
    ) -> None:
        super().__init__()
        what = "CrossEncoderCorrelationEvaluator"
        self.sentence_pairs = _check_pairs(sentence_pairs, what)
        self.scores = list(scores)
        if len(self.scores) != len(self.sentence_pairs):
            raise ValueError(
                f"{what}: sentence_pairs and scores must have one entry per pair, "
                f"got {len(self.sentence_pairs)} and {len(self.scores)}"
            )
        bad = next((v for v in self.scores if not isinstance(v, (int, float, np.number)) or not np.isfinite(v)), None)
        if bad is not None:
            raise ValueError(f"{what}: scores must be finite numbers, got {bad!r}")
        if len(self.scores) < 2:
            raise ValueError(f"{what}: a correlation needs at least 2 pairs")
        self.name = name
        self.prompt_name = prompt_name
        self.batch_size = batch_size
        self.show_progress_bar = bool(show_progress_bar)
        self.write_csv = write_csv
        self.csv_file = "CrossEncoderCorrelationEvaluator" + (f"_{name}" if name else "") + "_results.csv"
        self.csv_headers = ["epoch", "steps", "Pearson_Correlation", "Spearman_Correlation"]
        self.primary_metric = "spearman"

    @classmethod
    def from_input_examples(cls, examples: Iterable[Any], **kwargs: Any) -> CrossEncoderCorrelationEvaluator:
        """From ``InputExample``-like objects: ``texts`` the pair, ``label`` the gold score."""
        examples = list(examples)
        return cls([e.texts for e in examples], [e.label for e in examples], **kwargs)

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        """Pearson and Spearman correlation of ``model``'s scores with the gold scores."""
        results = _CsvResults(self.csv_file, self.csv_headers, "\r\n")
        if output_path is not None and self.write_csv:
            results.check(output_path)
        predicted = _predict(self, model, self.sentence_pairs)
        if predicted.ndim != 1:
            raise ValueError(
                f"CrossEncoderCorrelationEvaluator needs one score per pair (a one-label model), got scores of "
                f"shape {predicted.shape}"
            )
        m = correlations(predicted, self.scores)
        if output_path is not None and self.write_csv:
            results.append(output_path, [epoch, steps, m["pearson"], m["spearman"]])
        metrics = self.prefix_name_to_metrics(m, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics


class CECorrelationEvaluator(CrossEncoderCorrelationEvaluator):
    """sentence-transformers' pre-v4 name of :class:`CrossEncoderCorrelationEvaluator`, which its v2 example
    scripts import; it still exports the old name as a subclass."""


class CrossEncoderClassificationEvaluator(BaseEvaluator):
    """Classification of the pairs by the model's scores against gold ``labels``.

    A one-label model (labels 0 or 1): ``accuracy``, ``f1``, ``precision``, ``recall`` at their best
    thresholds (``accuracy_threshold``, ``f1_threshold``) and ``average_precision`` (primary). A wider
    head (labels 0 .. num_labels - 1, the highest score wins): ``f1_macro`` (primary), ``f1_micro``
    and ``f1_weighted``. Keys and CSV are sentence-transformers'.
    """

    def __init__(
        self,
        sentence_pairs: list[list[str]],
        labels: list[int],
        *,
        name: str = "",
        prompt_name: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        write_csv: bool = True,
    ) -> None:
        super().__init__()
        what = "CrossEncoderClassificationEvaluator"
        self.sentence_pairs = _check_pairs(sentence_pairs, what)
        if len(labels) != len(self.sentence_pairs):
            raise ValueError(
                f"{what}: sentence_pairs and labels must have one entry per pair, "
                f"got {len(self.sentence_pairs)} and {len(labels)}"
            )
        bad = next((v for v in labels if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0), None)
        if bad is not None:
            raise ValueError(f"{what}: labels must be class numbers (whole numbers >= 0), got {bad!r}")
        self.labels = np.asarray(labels)
        self.name = name
        self.prompt_name = prompt_name
        self.batch_size = batch_size
        self.show_progress_bar = bool(show_progress_bar)
        self.write_csv = write_csv
        self.csv_file = "CrossEncoderClassificationEvaluator" + (f"_{name}" if name else "") + "_results.csv"

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        """The classification metrics of ``model`` on the pairs, as a dict of floats."""
        from bertkit.tasks.metrics import f1_score

        num_labels = int(model.num_labels)
        top = int(self.labels.max())
        if top >= max(num_labels, 2):
            raise ValueError(
                f"CrossEncoderClassificationEvaluator: label {top} is beyond the model's "
                f"{num_labels} label(s) (a one-label model takes 0 or 1)"
            )
        if num_labels == 1:
            headers = ["Accuracy", "Accuracy_Threshold", "F1", "F1_Threshold", "Precision", "Recall"]
            headers.append("Average_Precision")
        else:
            headers = ["Macro_F1", "Micro_F1", "Weighted_F1"]
        self.csv_headers = ["epoch", "steps", *headers]
        results = _CsvResults(self.csv_file, self.csv_headers, "\r\n")
        if output_path is not None and self.write_csv:
            results.check(output_path)
        predicted = _predict(self, model, self.sentence_pairs)
        if num_labels == 1:
            acc, acc_threshold = best_accuracy_threshold(predicted, self.labels)
            f1, precision, recall, f1_threshold = best_f1_threshold(predicted, self.labels)
            metrics = {
                "accuracy": acc,
                "accuracy_threshold": acc_threshold,
                "f1": f1,
                "f1_threshold": f1_threshold,
                "precision": precision,
                "recall": recall,
                "average_precision": average_precision(self.labels, predicted),
            }
            self.primary_metric = "average_precision"
        else:
            chosen = np.argmax(predicted, axis=1)
            metrics = {f"f1_{avg}": f1_score(chosen, self.labels, avg) for avg in ("macro", "micro", "weighted")}
            self.primary_metric = "f1_macro"
        metrics = {key: float(value) for key, value in metrics.items()}
        if output_path is not None and self.write_csv:
            results.append(output_path, [epoch, steps, *metrics.values()])
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics


# Users know these classes by sentence-transformers' path (``bertkit.evaluation.SequentialEvaluator``): model
# cards, messages and pickles name them there, where the re-export module holds them.
for _name in __all__:
    globals()[_name].__module__ = "bertkit.evaluation"
