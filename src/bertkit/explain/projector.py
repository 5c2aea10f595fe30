"""An embedding projector: a labelled data set's sentence vectors in 2-D, as an offline scatter plot.

Each text of a CSV/TSV/JSONL file goes through the model; its ``[CLS]``, pooled or mean vector is
projected to 2-D twice:

* **PCA**: the two directions of largest variance (an SVD of the centred vectors), a faithful linear
  view of the largest differences;
* **UMAP-like**, numpy only: a k-nearest-neighbour graph with UMAP's fuzzy weights (each point's
  distances shifted by its nearest neighbour's and scaled so the weights sum to log2 k), laid out from
  the PCA start by stochastic gradient descent with UMAP's attractive and repulsive forces
  (McInnes et al. 2018). It keeps neighbourhoods, not distances: clusters mean something, the
  distances between them little.

The page, like the report, carries its data and script inline and makes no request. Comparing a
model before and after fine-tuning shows what fine-tuning did to ``[CLS]``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import _args as A
from bertkit._io import atomic_write_json, atomic_write_text

__all__ = [
    "VECTORS",
    "Projection",
    "pca_2d",
    "project",
    "run_cli",
    "umap_like",
    "write_projector_html",
    "write_projector_json",
]

VECTORS = ("cls", "pooler", "mean")
_ASSETS = Path(__file__).with_name("assets")


@dataclass
class Projection:
    """The data set's points: texts, labels, and each layout's (n, 2) coordinates."""

    source: str
    model: str
    vectors: str
    texts: list[str]
    labels: list[str]
    layouts: dict[str, np.ndarray]
    neighbours_same_label: float = float("nan")  # share of each point's 10 nearest (in the vectors) with its label

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "model": self.model,
            "vectors": self.vectors,
            "texts": self.texts,
            "labels": self.labels,
            "neighbours_same_label": self.neighbours_same_label,
            "layouts": {k: v.astype(np.float64).tolist() for k, v in self.layouts.items()},
        }


def pca_2d(x: np.ndarray) -> np.ndarray:
    """The coordinates of ``x`` (n, H) on its two principal axes; each axis's sign makes its largest |value| > 0."""
    c = x.astype(np.float64) - x.mean(0, keepdims=True)
    u, s, _ = np.linalg.svd(c, full_matrices=False)
    y = u[:, :2] * s[:2]
    if y.shape[1] < 2:
        y = np.pad(y, ((0, 0), (0, 2 - y.shape[1])))
    signs = np.sign(y[np.abs(y).argmax(0), [0, 1]])
    return y * np.where(signs == 0, 1.0, signs)


def _fuzzy_graph(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges (i, j) and weights of UMAP's symmetrised fuzzy k-nearest-neighbour graph."""
    n = x.shape[0]
    sq = (x**2).sum(1)
    d = np.sqrt(np.maximum(sq[:, None] + sq[None] - 2 * x @ x.T, 0.0))
    np.fill_diagonal(d, np.inf)
    nbr = np.argsort(d, axis=1)[:, :k]
    dk = np.take_along_axis(d, nbr, 1)
    rho = dk[:, :1]
    target = np.log2(k)
    lo, hi = np.zeros((n, 1)), np.full((n, 1), np.inf)
    sigma = np.ones((n, 1))
    for _ in range(64):  # binary search per point: sum_j exp(-(d_ij - rho_i) / sigma_i) = log2 k
        s = np.exp(-np.maximum(dk - rho, 0) / sigma).sum(1, keepdims=True)
        big = s > target
        hi = np.where(big, sigma, hi)
        lo = np.where(big, lo, sigma)
        sigma = np.where(np.isinf(hi), sigma * 2, (lo + hi) / 2)
    w = np.exp(-np.maximum(dk - rho, 0) / sigma)
    p = np.zeros((n, n))
    p[np.repeat(np.arange(n), k), nbr.ravel()] = w.ravel()
    p = p + p.T - p * p.T  # fuzzy union
    i, j = np.nonzero(np.triu(p, 1))
    return i, j, p[i, j]


def umap_like(x: np.ndarray, k: int = 15, epochs: int = 300, seed: int = 0) -> np.ndarray:
    """A 2-D layout of ``x`` (n, H) that keeps each point's nearest neighbours near (see the module doc)."""
    n = x.shape[0]
    if n < 4:
        return pca_2d(x)
    k = max(2, min(k, n - 1))
    rng = np.random.default_rng(seed)
    i, j, w = _fuzzy_graph(x.astype(np.float64), k)
    y = pca_2d(x)
    y = 10.0 * (y - y.mean(0)) / (np.abs(y).max() + 1e-12)
    a, b = 1.577, 0.895  # UMAP's curve 1 / (1 + a d^2b) for min_dist 0.1
    per_epoch = w / w.max()  # an edge is sampled in proportion to its weight
    for epoch in range(epochs):
        lr = 1.0 - epoch / epochs
        e = rng.random(len(w)) < per_epoch
        ei, ej = i[e], j[e]
        diff = y[ei] - y[ej]
        d2 = (diff**2).sum(1, keepdims=True)
        att = -2 * a * b * d2 ** (b - 1) / (1 + a * d2**b)
        att[d2[:, 0] == 0] = 0
        g = np.clip(att * diff, -4, 4) * lr
        np.add.at(y, ei, g)
        np.add.at(y, ej, -g)
        for _ in range(5):  # negative samples: push each sampled point from random others
            r = rng.integers(0, n, len(ei))
            diff = y[ei] - y[r]
            d2 = (diff**2).sum(1, keepdims=True)
            rep = 2 * b / ((0.001 + d2) * (1 + a * d2**b))
            np.add.at(y, ei, np.clip(rep * diff, -4, 4) * lr)
    return y


@torch.no_grad()
def sentence_vectors(
    model: Any, tokenizer: Any, texts: list[str], how: str, batch_size: int = 32, max_length: int = 128
) -> np.ndarray:
    """(n, H) float32: each text's final [CLS] vector, pooler output, or mean of its real tokens."""
    from tqdm.auto import tqdm

    base = model.base_model
    if how == "pooler" and getattr(base, "pooler", None) is None:
        raise ValueError(f"{A.given('vectors', 'pooler')}: {type(model).__name__} has no pooler; use cls or mean")
    out = []
    # disable=None: a bar on a terminal, none in logs and captured output
    for lo in tqdm(range(0, len(texts), batch_size), desc="sentence vectors", unit="batch", leave=False, disable=None):
        enc = tokenizer(
            texts[lo : lo + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        h = base(
            input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], token_type_ids=enc["token_type_ids"]
        ).last_hidden_state.float()
        if how == "cls":
            out.append(h[:, 0])
        elif how == "pooler":
            out.append(base.pooler(h))
        else:
            m = enc["attention_mask"].unsqueeze(-1).float()
            out.append((h * m).sum(1) / m.sum(1))
    return torch.cat(out).numpy()


def project(
    model_path: str | os.PathLike,
    data: str | os.PathLike,
    label_column: str = "label",
    text_column: str = "text",
    vectors: str = "cls",
    max_rows: int = 2000,
    seed: int = 0,
) -> Projection:
    """Read ``data``, embed each text with the model at ``model_path`` and lay the points out in 2-D."""
    from bertkit.data.readers import read_table

    from .collect import load_model

    if vectors not in VECTORS:
        raise ValueError(f"{A.given('vectors', repr(vectors))}: choose from {', '.join(VECTORS)}")
    rows = read_table(data, text_column=text_column, label_column=label_column)
    if len(rows) > max_rows:
        rows = rows[:max_rows]
    if len(rows) < 3:
        raise ValueError(f"{data}: {len(rows)} rows; the projector needs at least 3")
    model, tokenizer, _ = load_model(model_path)
    texts = [r.text for r in rows]
    x = sentence_vectors(model, tokenizer, texts, vectors)
    labels = [str(r.label) for r in rows]
    return Projection(
        str(data),
        str(model_path),
        vectors,
        texts,
        labels,
        {"pca": pca_2d(x), "umap-like": umap_like(x, seed=seed)},
        neighbour_agreement(x, labels),
    )


def neighbour_agreement(x: np.ndarray, labels: list[str], k: int = 10) -> float:
    """The share of each point's ``k`` nearest neighbours (cosine, in the full vectors) that have its label."""
    v = x.astype(np.float64) / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-12)
    sim = v @ v.T
    np.fill_diagonal(sim, -np.inf)
    k = min(k, len(labels) - 1)
    nbr = np.argsort(-sim, axis=1)[:, :k]
    lab = np.asarray(labels)
    return float((lab[nbr] == lab[:, None]).mean())


def write_projector_html(p: Projection, path: str | os.PathLike) -> Path:
    """The self-contained scatter-plot page (no request of any kind), written atomically."""
    data = json.dumps(
        {**p.to_json(), "layouts": {k: np.round(v, 4).tolist() for k, v in p.layouts.items()}},
        ensure_ascii=False,
        separators=(",", ":"),
    ).replace("</", "<\\/")
    page = (_ASSETS / "projector.html").read_text(encoding="utf-8")
    js = (_ASSETS / "projector.js").read_text(encoding="utf-8")
    return atomic_write_text(path, page.replace("/*JS*/", js).replace("/*DATA*/", data))


def write_projector_json(p: Projection, path: str | os.PathLike) -> Path:
    """The coordinates at full precision, with the texts and labels."""
    return atomic_write_json(path, p.to_json(), indent=None)


def run_cli(args: Any) -> int:
    """`bertkit explain --projector FILE`: write the page (--output) and the coordinates (--json)."""
    if args.text is not None:
        raise ValueError("--projector reads its texts from the file; leave out the text argument")
    if args.output is None and args.json_path is None:
        raise ValueError("nothing to write: give --output projector.html and/or --json FILE")
    p = project(
        args.model,
        args.projector,
        label_column=args.label_column,
        text_column=args.text_column,
        vectors=args.vectors,
        max_rows=args.max_rows,
    )
    for path, write in ((args.output, write_projector_html), (args.json_path, write_projector_json)):
        if path is not None:
            print(f"wrote {write(p, path)}")
    print(
        f"{len(p.texts)} texts, {len(set(p.labels))} labels, {p.vectors} vectors: PCA and UMAP-like layouts; "
        f"{p.neighbours_same_label:.0%} of each text's 10 nearest neighbours share its label"
    )
    return 0
