"""Rank statistics shared by pretraining's evaluation (ELECTRA's and NSP's ROC AUC) and the task metrics
(Spearman's correlation).

This module is a leaf: it imports nothing of bertkit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["rankdata", "roc_auc"]


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks starting at 1, ties get the average of their ranks (scipy's 'average')."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=float)
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve of binary ``labels`` (1 = positive) ranked by ``scores`` (Mann-Whitney U,
    ties counted half); nan when only one class is present."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels).astype(bool)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"roc_auc needs two 1-D arrays of equal length, got {s.shape} and {y.shape}")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
