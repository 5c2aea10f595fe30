"""Task metrics: classification, regression, entity-level (seqeval strict) and SQuAD EM/F1.

Everything here is plain Python/numpy so that metrics can be checked by hand; no torch needed.
"""

from __future__ import annotations

import collections
import re
import string
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from bertkit._stats import rankdata as _rankdata
from bertkit._stats import roc_auc

__all__ = [
    "accuracy",
    "precision_recall_f1",
    "f1_score",
    "matthews_corrcoef",
    "pearsonr",
    "spearmanr",
    "get_entities",
    "entity_scores",
    "normalize_answer",
    "squad_exact_match",
    "squad_f1",
    "squad_scores",
    "multilabel_scores",
    "roc_auc",
]


# --- classification -------------------------------------------------------------------------


def _as_int_arrays(preds: Sequence, labels: Sequence) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(preds)
    y = np.asarray(labels)
    if p.shape != y.shape:
        raise ValueError(f"predictions and labels differ in shape: {p.shape} vs {y.shape}")
    if p.size == 0:
        raise ValueError("no predictions to score")
    return p, y


def accuracy(preds: Sequence, labels: Sequence) -> float:
    """Fraction of predictions equal to the label."""
    p, y = _as_int_arrays(preds, labels)
    return float((p == y).mean())


def precision_recall_f1(
    preds: Sequence, labels: Sequence, average: str = "macro", num_labels: int | None = None
) -> tuple[float, float, float]:
    """Precision, recall and F1 for single-label multi-class predictions.

    ``average="micro"`` pools counts over classes (equals accuracy for single-label data);
    ``"macro"`` is the unweighted mean over the classes present in labels or predictions (a class
    with no support and no predictions is left out, as scikit-learn does for labels=None);
    ``"weighted"`` weighs each class by its count among the labels.
    Undefined ratios (0/0) count as 0.
    """
    p, y = _as_int_arrays(preds, labels)
    classes = np.unique(np.concatenate([p, y])) if num_labels is None else np.arange(num_labels)
    tp = np.array([np.sum((p == c) & (y == c)) for c in classes], dtype=float)
    fp = np.array([np.sum((p == c) & (y != c)) for c in classes], dtype=float)
    fn = np.array([np.sum((p != c) & (y == c)) for c in classes], dtype=float)
    weights = np.ones_like(tp)
    if average == "micro":
        tp, fp, fn, weights = tp.sum(keepdims=True), fp.sum(keepdims=True), fn.sum(keepdims=True), weights[:1]
    elif average == "weighted":
        weights = tp + fn
    elif average != "macro":
        raise ValueError(f"average must be 'macro', 'micro' or 'weighted', got {average!r}")
    prec = np.divide(tp, tp + fp, out=np.zeros_like(tp), where=(tp + fp) > 0)
    rec = np.divide(tp, tp + fn, out=np.zeros_like(tp), where=(tp + fn) > 0)
    f1 = np.divide(2 * prec * rec, prec + rec, out=np.zeros_like(tp), where=(prec + rec) > 0)
    return tuple(float(np.average(x, weights=weights)) for x in (prec, rec, f1))  # type: ignore[return-value]


def f1_score(preds: Sequence, labels: Sequence, average: str = "macro") -> float:
    """F1 with macro, micro or weighted averaging (see :func:`precision_recall_f1`)."""
    return precision_recall_f1(preds, labels, average)[2]


def matthews_corrcoef(preds: Sequence, labels: Sequence) -> float:
    """Matthews correlation coefficient, multi-class form (Gorodkin's R_K); 0 when undefined."""
    p, y = _as_int_arrays(preds, labels)
    classes = np.unique(np.concatenate([p, y]))
    index = {c: i for i, c in enumerate(classes.tolist())}
    k = len(classes)
    cm = np.zeros((k, k), dtype=float)
    for yi, pi in zip(y.tolist(), p.tolist()):
        cm[index[yi], index[pi]] += 1
    t = cm.sum(axis=1)  # true count per class
    q = cm.sum(axis=0)  # predicted count per class
    c = np.trace(cm)
    s = cm.sum()
    num = c * s - t @ q
    den = np.sqrt(s * s - q @ q) * np.sqrt(s * s - t @ t)
    return float(num / den) if den > 0 else 0.0


def pearsonr(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's correlation coefficient; 0 when either input is constant."""
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"pearsonr needs two 1-D arrays of equal length, got {a.shape} and {b.shape}")
    a = a - a.mean()
    b = b - b.mean()
    den = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / den) if den > 0 else 0.0


def spearmanr(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson on average ranks (ties handled like scipy)."""
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    return pearsonr(_rankdata(a), _rankdata(b))


def multilabel_scores(probs: np.ndarray, labels: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """Micro/macro F1 and exact-match ("subset") accuracy for multi-hot labels."""
    pred = (np.asarray(probs) >= threshold).astype(int)
    y = np.asarray(labels).astype(int)
    tp = (pred & y).sum(axis=0).astype(float)
    fp = (pred & (1 - y)).sum(axis=0).astype(float)
    fn = ((1 - pred) & y).sum(axis=0).astype(float)

    def f1(tp, fp, fn):
        den = 2 * tp + fp + fn
        return np.divide(2 * tp, den, out=np.zeros_like(tp, dtype=float), where=den > 0)

    return {
        "micro_f1": float(f1(tp.sum(keepdims=True), fp.sum(keepdims=True), fn.sum(keepdims=True))[0]),
        "macro_f1": float(f1(tp, fp, fn).mean()),
        "subset_accuracy": float((pred == y).all(axis=1).mean()),
    }


# --- entities (seqeval strict mode) ---------------------------------------------------------

# Per scheme: prefixes that may start an entity, continue it, and close it (seqeval's IOB2 / IOBES
# tables; BMES is IOBES with M for I).
_SCHEMES = {
    "BIO": {"allowed": "BIO", "start": "B", "inside": "I", "single": "", "end": ""},
    "BIOES": {"allowed": "BIOES", "start": "B", "inside": "I", "single": "S", "end": "E"},
    "BMES": {"allowed": "BMESO", "start": "B", "inside": "M", "single": "S", "end": "E"},
}


@dataclass(frozen=True)
class Entity:
    """A typed span [start, end) of a tag sequence."""

    type: str
    start: int
    end: int


def _split_tag(tag: str, allowed: str) -> tuple[str, str]:
    if tag == "O":
        return "O", ""
    prefix, sep, etype = tag.partition("-")
    if not sep or len(prefix) != 1 or prefix not in allowed or not etype:
        raise ValueError(
            f"tag {tag!r} is not valid in this scheme "
            f"(expected O or one of {', '.join(allowed.replace('O', ''))} + '-TYPE')"
        )
    return prefix, etype


def detect_scheme(tags: Iterable[str]) -> str:
    """'BMES' if an M- prefix occurs, 'BIOES' if E- or S- occurs, else 'BIO'."""
    prefixes = {t.split("-", 1)[0] for t in tags if t != "O"}
    if "M" in prefixes:
        return "BMES"
    if prefixes & {"E", "S"}:
        return "BIOES"
    return "BIO"


def get_entities(tags: Sequence[str], scheme: str = "BIO") -> list[Entity]:
    """Entities of one tag sequence under seqeval's strict rules.

    A span counts only if it is well formed in the scheme: BIO needs a B- start (a stray I- is
    ignored); BIOES/BMES need B- (I-|M-)* E- with one type, or a single S-.
    """
    spec = _SCHEMES.get(scheme.upper())
    if spec is None:
        raise ValueError(f"unknown tag scheme {scheme!r}; use one of {', '.join(_SCHEMES)}")
    parsed = [_split_tag(t, spec["allowed"] + "O") for t in tags]
    out: list[Entity] = []
    i = 0
    n = len(parsed)
    while i < n:
        prefix, etype = parsed[i]
        if prefix == spec["single"] and prefix:
            out.append(Entity(etype, i, i + 1))
            i += 1
            continue
        if prefix != spec["start"]:
            i += 1
            continue
        j = i + 1
        while j < n and parsed[j] == (spec["inside"], etype):
            j += 1
        if not spec["end"]:  # BIO: any B I* run is an entity
            out.append(Entity(etype, i, j))
            i = j
        elif j < n and parsed[j] == (spec["end"], etype):
            out.append(Entity(etype, i, j + 1))
            i = j + 1
        else:  # unterminated span: not an entity in strict mode
            i = j
    return out


def entity_scores(
    true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], scheme: str | None = None
) -> dict[str, float | dict]:
    """Entity-level micro precision/recall/F1 (seqeval strict) plus per-type scores.

    ``scheme`` is detected from the gold tags when None.
    """
    if len(true_tags) != len(pred_tags):
        raise ValueError(f"{len(true_tags)} gold sequences but {len(pred_tags)} predicted")
    if scheme is None:
        scheme = detect_scheme(t for seq in true_tags for t in seq)
    gold: set[tuple[int, Entity]] = set()
    pred: set[tuple[int, Entity]] = set()
    for k, (ts, ps) in enumerate(zip(true_tags, pred_tags)):
        if len(ts) != len(ps):
            raise ValueError(f"sequence {k}: {len(ts)} gold tags but {len(ps)} predicted")
        gold.update((k, e) for e in get_entities(ts, scheme))
        pred.update((k, e) for e in get_entities(ps, scheme))

    def prf(g: set, p: set) -> dict[str, float]:
        tp = len(g & p)
        prec = tp / len(p) if p else 0.0
        rec = tp / len(g) if g else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        return {"precision": prec, "recall": rec, "f1": f1, "support": len(g)}

    types = sorted({e.type for _, e in gold | pred})
    per_type = {t: prf({x for x in gold if x[1].type == t}, {x for x in pred if x[1].type == t}) for t in types}
    total = prf(gold, pred)
    return {"precision": total["precision"], "recall": total["recall"], "f1": total["f1"], "per_type": per_type}


# --- SQuAD ------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """The official SQuAD normalisation: lower case, drop punctuation and articles, squeeze spaces."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def squad_exact_match(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def squad_f1(prediction: str, ground_truth: str) -> float:
    """Token-overlap F1 after normalisation; empty vs empty is 1 (the v2.0 script's rule)."""
    pred = normalize_answer(prediction).split()
    gold = normalize_answer(ground_truth).split()
    if not pred or not gold:
        return float(pred == gold)
    common = collections.Counter(pred) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    p = same / len(pred)
    r = same / len(gold)
    return 2 * p * r / (p + r)


def squad_scores(predictions: dict[str, str], references: dict[str, list[str]]) -> dict[str, float]:
    """EM and F1 (percent) over questions: max over gold answers, as the official script does.

    ``references`` maps question id to its gold answer texts; an empty list (v2.0 unanswerable)
    means the only correct prediction is the empty string.
    """
    if not references:
        raise ValueError("no reference answers to score")
    em = f1 = 0.0
    for qid, golds in references.items():
        golds = [g for g in golds if normalize_answer(g)] or [""]
        pred = predictions.get(qid, "")
        em += max(squad_exact_match(pred, g) for g in golds)
        f1 += max(squad_f1(pred, g) for g in golds)
    n = len(references)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n}
