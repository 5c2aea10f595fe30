"""Losses for training sentence embeddings, each equal to sentence-transformers' namesake.

A loss is called as ``loss(embed, columns, labels)``: ``embed(features) -> (B, H)`` turns one padded
batch of tokenized texts into vectors (with gradients), ``columns`` holds one such batch per column
(anchor, positive, negative...) and ``labels`` the scores of scored pairs (CoSENT) or None.
``loss.from_embeddings(reps, labels)`` is the same loss on vectors already computed; wrappers
(Matryoshka, GradCache) build on it.

* :class:`MNRLoss`: in-batch negatives. Row i of the anchors must score its own positive above
  every other positive and every negative of the batch (cross-entropy over cosine x ``scale``);
  ``symmetric`` adds the positive -> anchor direction (the mean of both cross-entropies).
* :class:`CachedLoss`: GradCache around any loss. Vectors are computed without gradients in
  mini-batches, the loss is taken on the whole batch, and its gradient with respect to each vector
  is pushed back through the encoder one mini-batch at a time (dropout replayed from the saved RNG
  state), so the large batch's loss and gradients come at a mini-batch's activation memory.
* :class:`CoSENTLoss`: scored pairs; every pair with a lower score must have a lower cosine.
* :class:`CosineSimilarityLoss`: scored pairs; the mean squared error of each pair's cosine and score.
* :class:`TripletLoss`: ``relu(d(a, p) - d(a, n) + margin)``, Euclidean distance by default.
* :class:`MatryoshkaLoss`: the weighted sum of a loss over the first ``d`` dimensions (each
  prefix renormalised) for every ``d`` in ``dims``, so truncated vectors stay useful.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "LOSSES",
    "CachedLoss",
    "CoSENTLoss",
    "CosineSimilarityLoss",
    "EmbeddingLoss",
    "MNRLoss",
    "MatryoshkaLoss",
    "TripletLoss",
    "cosine_distance",
    "euclidean_distance",
    "make_loss",
    "manhattan_distance",
]

Embed = Callable[[dict[str, Tensor]], Tensor]
Similarity = Callable[[Tensor, Tensor], Tensor]
LOSSES = ("mnrl", "cached-mnrl", "cosent", "triplet")


def _cos_matrix(a: Tensor, b: Tensor) -> Tensor:
    return F.normalize(a, p=2, dim=-1) @ F.normalize(b, p=2, dim=-1).T


def _cos_pairs(a: Tensor, b: Tensor) -> Tensor:
    return (F.normalize(a, p=2, dim=-1) * F.normalize(b, p=2, dim=-1)).sum(-1)


def euclidean_distance(x: Tensor, y: Tensor) -> Tensor:
    """``res[i] = ||x[i] - y[i]||``."""
    return torch.sqrt(((x - y) ** 2).sum(-1))


def manhattan_distance(x: Tensor, y: Tensor) -> Tensor:
    """``res[i] = sum |x[i] - y[i]|``."""
    return (x - y).abs().sum(-1)


def cosine_distance(x: Tensor, y: Tensor) -> Tensor:
    """``res[i] = 1 - cos(x[i], y[i])``."""
    return 1 - _cos_pairs(x, y)


DISTANCES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "euclidean": euclidean_distance,
    "cosine": cosine_distance,
    "manhattan": manhattan_distance,
}


class EmbeddingLoss:
    """Base class: embed every column, then :meth:`from_embeddings`."""

    def __call__(self, embed: Embed, columns: Sequence[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        return self.from_embeddings([embed(c) for c in columns], labels)

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        raise NotImplementedError


class MNRLoss(EmbeddingLoss):
    """Multiple-negatives ranking: columns anchor, positive, then any number of negative columns.
    ``similarity(a, b) -> (len(a), len(b))`` scores the rows (cosine when None)."""

    def __init__(self, scale: float = 20.0, symmetric: bool = False, similarity: Similarity | None = None) -> None:
        if not scale > 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.scale, self.symmetric = float(scale), symmetric
        self.similarity = similarity or _cos_matrix

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        if len(reps) < 2:
            raise ValueError(f"MNRL needs an anchor and a positive column, got {len(reps)} column(s)")
        anchors = reps[0]
        scores = self.similarity(anchors, torch.cat(list(reps[1:]))) * self.scale  # (B, B * (columns - 1))
        target = torch.arange(anchors.shape[0], device=anchors.device)
        loss = F.cross_entropy(scores, target)
        if self.symmetric:  # each positive must also pick its own anchor among the batch's anchors
            loss = (loss + F.cross_entropy(scores[:, : anchors.shape[0]].T, target)) / 2
        return loss


def _pair_labels(name: str, reps: Sequence[Tensor], labels: Tensor | None) -> Tensor:
    """One score per (sentence1, sentence2) row, flattened; refused by name otherwise."""
    if len(reps) != 2:
        raise ValueError(f"{name} needs two columns (sentence1, sentence2), got {len(reps)}")
    if labels is None or labels.numel() != reps[0].shape[0]:
        got = "none" if labels is None else f"{labels.numel()}"
        raise ValueError(f"{name} needs one score per pair: {reps[0].shape[0]} pairs, {got} scores")
    return labels.view(-1).to(reps[0].device)


class CoSENTLoss(EmbeddingLoss):
    """CoSENT on (sentence1, sentence2) columns with one score per pair in ``labels``;
    ``similarity(a, b) -> (len(a),)`` scores each pair (cosine when None)."""

    def __init__(self, scale: float = 20.0, similarity: Similarity | None = None) -> None:
        self.scale = float(scale)
        self.similarity = similarity or _cos_pairs

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        labels = _pair_labels("CoSENT", reps, labels)
        cos = self.similarity(reps[0], reps[1]).float() * self.scale
        # every (i, j) with score_i < score_j contributes exp(cos_i - cos_j); log(1 + sum) over them
        diff = cos[:, None] - cos[None, :]
        diff = diff.masked_fill(~(labels[:, None] < labels[None, :]), float("-inf"))
        return torch.logsumexp(torch.cat([cos.new_zeros(1), diff.reshape(-1)]), dim=0)


class CosineSimilarityLoss(EmbeddingLoss):
    """``loss_fct(transform(cos(a, b)), scores)`` on (sentence1, sentence2) columns: the mean squared
    error of each pair's cosine and its score by default."""

    def __init__(
        self,
        loss_fct: Callable[[Tensor, Tensor], Tensor] | None = None,
        transform: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        self.loss_fct = loss_fct or F.mse_loss
        self.transform = transform

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        labels = _pair_labels("the cosine-similarity loss", reps, labels)
        cos = torch.cosine_similarity(reps[0], reps[1])
        if self.transform is not None:
            cos = self.transform(cos)
        return self.loss_fct(cos, labels.float())


class TripletLoss(EmbeddingLoss):
    """Triplet margin loss on (anchor, positive, negative) columns; ``distance`` is a name in
    :data:`DISTANCES` or a function ``(x, y) -> (len(x),)``."""

    def __init__(self, margin: float = 5.0, distance: str | Callable[[Tensor, Tensor], Tensor] = "euclidean") -> None:
        if not callable(distance) and distance not in DISTANCES:
            raise ValueError(f"distance must be euclidean, cosine, manhattan or a function, got {distance!r}")
        self.margin, self.distance = float(margin), distance
        self._dist = distance if callable(distance) else DISTANCES[distance]

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        if len(reps) != 3:
            raise ValueError(f"the triplet loss needs anchor, positive and negative columns, got {len(reps)}")
        a, p, n = reps
        return F.relu(self._dist(a, p) - self._dist(a, n) + self.margin).mean()


class MatryoshkaLoss(EmbeddingLoss):
    """``sum_d weight_d * inner(first d dimensions, renormalised)``; a :class:`CachedLoss` inner stays
    cached (the prefixes are taken inside its full-batch step)."""

    def __init__(self, inner: EmbeddingLoss, dims: Sequence[int], weights: Sequence[float] | None = None) -> None:
        if not dims or any(int(d) <= 0 for d in dims):
            raise ValueError(f"matryoshka dims must be positive integers, got {list(dims)}")
        weights = [1.0] * len(dims) if weights is None else list(weights)
        if len(weights) != len(dims):
            raise ValueError(f"{len(dims)} matryoshka dims but {len(weights)} weights")
        pairs = sorted(zip((int(d) for d in dims), weights), reverse=True)
        self.dims, self.weights = [d for d, _ in pairs], [w for _, w in pairs]
        self._cached = None
        if isinstance(inner, CachedLoss):
            self._cached = CachedLoss(MatryoshkaLoss(inner.inner, self.dims, self.weights), inner.mini_batch_size)
        self.inner = inner

    def __call__(self, embed: Embed, columns: Sequence[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        if self._cached is not None:
            return self._cached(embed, columns, labels)
        return super().__call__(embed, columns, labels)

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        full = reps[0].shape[-1]
        if self.dims[0] > full:
            raise ValueError(f"matryoshka dim {self.dims[0]} is above the model's embedding size {full}")
        loss = reps[0].new_zeros(())
        for d, w in zip(self.dims, self.weights):
            loss = loss + w * self.inner.from_embeddings([F.normalize(r[..., :d], p=2, dim=-1) for r in reps], labels)
        return loss


class _RandState:
    """The RNG state before a mini-batch's first forward, replayed for its second (same dropout)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        with torch.random.fork_rng(devices=[self.device] if self.cuda is not None else []):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


def _mini_batches(features: dict[str, Tensor], size: int) -> Iterator[dict[str, Tensor]]:
    """Row slices of a padded batch, each cut to its own longest text (less padding to compute)."""
    n = features["input_ids"].shape[0]
    for s in range(0, n, size):
        mb = {k: v[s : s + size] for k, v in features.items()}
        if "attention_mask" in mb and mb["attention_mask"].ndim == 2:
            length = max(1, int(mb["attention_mask"].sum(1).max()))
            mb = {k: v[:, :length] if v.ndim == 2 else v for k, v in mb.items()}
        yield mb


class CachedLoss(EmbeddingLoss):
    """GradCache: ``inner``'s loss and gradients on the whole batch, activations of ``mini_batch_size`` rows."""

    def __init__(self, inner: EmbeddingLoss, mini_batch_size: int = 32) -> None:
        if mini_batch_size <= 0:
            raise ValueError(f"mini_batch_size must be positive, got {mini_batch_size}")
        self.inner, self.mini_batch_size = inner, int(mini_batch_size)

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        return self.inner.from_embeddings(reps, labels)

    def __call__(self, embed: Embed, columns: Sequence[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        device = columns[0]["input_ids"].device
        autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
        reps, states = [], []
        for col in columns:
            parts, col_states = [], []
            for mb in _mini_batches(col, self.mini_batch_size):
                col_states.append(_RandState(device))
                with torch.no_grad():
                    parts.append(embed(mb).detach())
            reps.append(torch.cat(parts))
            states.append(col_states)
        leaves = [r.requires_grad_() for r in reps]
        with torch.enable_grad():
            loss = self.inner.from_embeddings(leaves, labels)
        if not torch.is_grad_enabled():  # evaluation: no backward will come
            return loss.detach()
        grads = torch.autograd.grad(loss, leaves)
        out = loss.detach().requires_grad_()

        def backward_hook(grad_output: Tensor) -> None:
            # the outer backward reached the loss: push d(loss)/d(vector) through the encoder per mini-batch
            with torch.enable_grad(), torch.autocast(device.type, dtype=autocast[1], enabled=autocast[0]):
                for col, grad, col_states in zip(columns, grads, states):
                    start = 0
                    for mb, state in zip(_mini_batches(col, self.mini_batch_size), col_states):
                        with state.replay():
                            r = embed(mb)
                        g = grad[start : start + r.shape[0]]
                        start += r.shape[0]
                        (r.float() * g.float()).sum().mul(grad_output.float()).backward()

        out.register_hook(backward_hook)
        return out


def make_loss(
    name: str,
    matryoshka_dims: Sequence[int] | None = None,
    mini_batch_size: int = 32,
    symmetric: bool = False,
    scale: float = 20.0,
    margin: float = 5.0,
) -> EmbeddingLoss:
    """The loss a ``--loss`` name stands for, under a Matryoshka wrapper when dims are given."""
    if name not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {name!r}")
    loss: EmbeddingLoss
    if name in ("mnrl", "cached-mnrl"):
        loss = MNRLoss(scale, symmetric)
    elif name == "cosent":
        loss = CoSENTLoss(scale)
    else:
        loss = TripletLoss(margin)
    if matryoshka_dims:
        loss = MatryoshkaLoss(loss, matryoshka_dims)
    if name == "cached-mnrl":
        loss = CachedLoss(loss, mini_batch_size)
    return loss


def loss_columns(name: str) -> tuple[str, ...]:
    """The data columns a loss reads (``negative`` optional for MNRL)."""
    return {"cosent": ("sentence1", "sentence2", "score"), "triplet": ("anchor", "positive", "negative")}.get(
        name, ("anchor", "positive")
    )
