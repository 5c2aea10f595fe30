"""Evaluators under sentence-transformers' names: the same calls, keys, values and CSV files.

A sentence-transformers evaluation script switches with its import lines alone::

    from bertkit import SentenceTransformer
    from bertkit.evaluation import EmbeddingSimilarityEvaluator, InformationRetrievalEvaluator

    model = SentenceTransformer(folder)
    ev = InformationRetrievalEvaluator(queries, corpus, relevant_docs, name="bbc")
    results = ev(model)      # {"bbc_cosine_accuracy@1": ..., "bbc_cosine_ndcg@10": ..., ...}
    ev.primary_metric        # "bbc_cosine_ndcg@10"

Each evaluator embeds through the model's ``encode`` (``encode_query`` / ``encode_document`` for
retrieval, when the model has them), so it measures a ``bertkit.SentenceTransformer`` or a
sentence-transformers model alike, with prompts and ``truncate_dim`` passed through. The numbers
come from bertkit's one implementation of each metric (:mod:`bertkit.search.evaluation`).

Where sentence-transformers lets bad input through, these refuse it by name before any text is
embedded: pairs and scores of different lengths, an unknown similarity. Relevant documents missing
from the corpus and relevant-docs queries missing from the queries are scored as there (a miss; not
scored) with a warning that counts them.

With ``output_path`` (and ``write_csv``) a call adds one row to the evaluator's results CSV, under
sentence-transformers' file name and columns: the file is rewritten whole and atomically with the
row appended, so an interrupted write leaves the previous rows intact. A file of that name with
other columns (another evaluator's, or another model's similarity) is refused rather than given
rows under the wrong labels. Model cards are not written.
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

from bertkit.search.evaluation import SIMILARITIES, retrieval_metrics, sts_metrics

__all__ = [
    "BaseEvaluator",
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
        return self.prefix_name_to_metrics(metrics, self.name)

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
        if isinstance(corpus_chunk_size, bool) or not isinstance(corpus_chunk_size, int) or corpus_chunk_size < 1:
            raise ValueError(f"corpus_chunk_size must be a whole number >= 1, got {corpus_chunk_size!r}")
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
            if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
                raise ValueError(f"InformationRetrievalEvaluator: {what} must list whole numbers >= 1, got {ks!r}")
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
        return self.prefix_name_to_metrics(metrics, self.name)

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
