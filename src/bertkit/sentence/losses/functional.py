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
* Distillation: :class:`EmbedDistillLoss` (the teacher's vectors as labels; MSE by default),
  :class:`MarginMSELoss` (the teacher's (positive - negative) margins), :class:`DistillKLDivLoss`
  (the teacher's scores over the candidates, as a softmax target).
* Labelled pairs: :class:`ContrastiveLoss` and :class:`OnlineContrastiveLoss` (its hard pairs only).
* One labelled column: :class:`BatchTripletLoss` mines hard, all or semi-hard triplets among the rows
  of each class in the batch.
* :class:`AnglELoss` (CoSENT over the AnglE similarity), :class:`GISTEmbedLoss` (in-batch negatives a
  guide model filters), :class:`MegaBatchMarginLoss` (margins to the positive and the hardest other
  positive) and :class:`GlobalOrthogonalRegularizationLoss` (pushes unrelated vectors apart).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "LOSSES",
    "AnglELoss",
    "BatchTripletLoss",
    "CachedLoss",
    "CoSENTLoss",
    "ContrastiveLoss",
    "CosineSimilarityLoss",
    "DistillKLDivLoss",
    "EmbedDistillLoss",
    "EmbeddingLoss",
    "GISTEmbedLoss",
    "GlobalOrthogonalRegularizationLoss",
    "MNRLoss",
    "MarginMSELoss",
    "MatryoshkaLoss",
    "MegaBatchMarginLoss",
    "OnlineContrastiveLoss",
    "TripletLoss",
    "batch_cosine_distance",
    "batch_euclidean_distance",
    "cosine_distance",
    "euclidean_distance",
    "make_loss",
    "manhattan_distance",
    "pairwise_angle_sim",
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
        # labels as wide as the vectors are a teacher's vectors (distillation): cut to each prefix too
        vectors = isinstance(labels, Tensor) and labels.ndim in (2, 3) and labels.shape[-1] == full
        loss = reps[0].new_zeros(())
        for d, w in zip(self.dims, self.weights):
            prefix_labels = labels[..., :d] if vectors else labels  # type: ignore[index]
            prefixes = [F.normalize(r[..., :d], p=2, dim=-1) for r in reps]
            loss = loss + w * self.inner.from_embeddings(prefixes, prefix_labels)
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


# -- distillation, contrastive, batch-triplet and regularization losses --------------------------------


def _pairwise_dot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).sum(-1)


def pairwise_angle_sim(x: Tensor, y: Tensor) -> Tensor:
    """``res[i] = |cos(x[i], y[i]) + sin(x[i], y[i])|``, the AnglE similarity: dimensions ``j`` and
    ``j + H/2`` of the normalised vectors pair up as a complex number (an odd width padded with a 0)."""
    if x.shape[1] % 2:
        x, y = F.pad(x, (0, 1)), F.pad(y, (0, 1))
    x, y = F.normalize(x, p=2, dim=1), F.normalize(y, p=2, dim=1)
    cosines = (x * y).sum(1)
    first_x, last_x = torch.chunk(x, 2, dim=1)
    first_y, last_y = torch.chunk(y, 2, dim=1)
    return torch.abs(cosines + (last_x * first_y - first_x * last_y).sum(1))


def _one_label_per_row(name: str, labels: Tensor | None, rows: int) -> Tensor:
    if labels is None or labels.numel() != rows:
        got = "none" if labels is None else f"{labels.numel()} (shape {tuple(labels.shape)})"
        raise ValueError(f"{name} needs one label per row: {rows} rows, {got} labels")
    return labels.view(-1)


def _rows_match(name: str, labels: Tensor, rows: int) -> None:
    if labels.shape[0] != rows:
        raise ValueError(f"{name}: {labels.shape[0]} rows of labels for a batch of {rows} rows")


class EmbedDistillLoss(EmbeddingLoss):
    """The student's vectors against the teacher's, given as labels: one ``(B, H)`` vector per row for
    every column, or ``(B, columns, H)``, one per column. ``metric`` is ``mse`` (mean squared error),
    ``l2`` (mean Euclidean distance) or ``cosine`` (mean ``1 - cos``), averaged over the columns;
    ``projection`` (a module) maps the student's vectors to the teacher's width first."""

    METRICS = ("mse", "l2", "cosine")

    def __init__(
        self, metric: str = "mse", projection: Callable[[Tensor], Tensor] | None = None, name: str = ""
    ) -> None:
        self.name = name or "EmbedDistillLoss"
        if metric not in self.METRICS:
            raise ValueError(f"{self.name}: distance_metric={metric!r} is not one of {', '.join(self.METRICS)}")
        self.metric, self.projection = metric, projection

    def teacher(self, labels: Tensor | None, columns: int, width: int) -> list[Tensor]:
        """The teacher's vectors per column, or a ValueError naming the shape that does not fit."""
        if labels is None:
            raise ValueError(f"{self.name} needs the teacher's embeddings as labels (one vector per row), got none")
        if labels.dim() == 2:
            per_column = [labels] * columns
        elif labels.dim() == 3 and labels.shape[1] == columns:
            per_column = [labels[:, i] for i in range(columns)]
        elif labels.dim() == 3:
            raise ValueError(
                f"{self.name}: labels of shape {tuple(labels.shape)} hold {labels.shape[1]} teacher vectors per row "
                f"for {columns} text column(s); give one per column, or one per row for all"
            )
        else:
            raise ValueError(
                f"{self.name}: labels must be teacher vectors, (batch, {width}) or (batch, {columns}, {width}); "
                f"got shape {tuple(labels.shape)}"
            )
        if labels.shape[-1] != width:
            raise ValueError(
                f"{self.name}: the teacher's vectors are {labels.shape[-1]} wide, the student's "
                f"{'projected ' if self.projection is not None else ''}embeddings {width}: they must be equal"
            )
        return per_column

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        students = [self.projection(r) if self.projection is not None else r for r in reps]
        teachers = self.teacher(labels, len(reps), students[0].shape[-1])
        losses = []
        for student, teacher in zip(students, teachers):
            _rows_match(self.name, teacher, student.shape[0])
            teacher = teacher.detach().to(device=student.device, dtype=student.dtype)
            if self.metric == "mse":
                losses.append(F.mse_loss(student, teacher))
            elif self.metric == "l2":
                losses.append(torch.norm(student - teacher, dim=-1).mean())
            else:
                losses.append((1 - F.cosine_similarity(student, teacher, dim=-1)).mean())
        return torch.stack(losses).mean()


class MarginMSELoss(EmbeddingLoss):
    """(query, positive, negative...) columns; the labels are the teacher's margins
    ``score(q, pos) - score(q, neg_k)`` (``(B,)`` or ``(B, negatives)``) or its scores ``(B, 1 + negatives)``:
    the mean squared error of the student's margins (``similarity`` per pair) against them."""

    def __init__(self, similarity: Similarity | None = None, name: str = "MarginMSELoss") -> None:
        self.similarity, self.name = similarity or _pairwise_dot, name

    def margins(self, labels: Tensor | None, rows: int, negatives: int) -> Tensor:
        """The teacher's margins as ``(rows, negatives)``, or a ValueError naming the shape that does not fit."""
        if negatives < 1:
            raise ValueError(f"{self.name} needs a query, a positive and at least one negative column")
        if labels is not None and labels.shape == (rows, negatives + 1):
            labels = labels[:, :1] - labels[:, 1:]
        if labels is not None and labels.shape == (rows,):
            labels = labels.unsqueeze(1)
        if labels is None or labels.shape != (rows, negatives):
            got = "none" if labels is None else f"shape {tuple(labels.shape)}"
            raise ValueError(
                f"{self.name}: labels must be the teacher's margins ({rows}, {negatives}) or its scores "
                f"({rows}, {negatives + 1}) for {negatives} negative column(s); got {got}"
            )
        return labels

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        query, positive, negatives = reps[0], reps[1], list(reps[2:])
        target = self.margins(labels, query.shape[0], len(negatives)).detach()
        pos = self.similarity(query, positive)
        margins = torch.stack([pos - self.similarity(query, n) for n in negatives], dim=1)
        return F.mse_loss(margins, target.to(margins.device, margins.dtype))


class DistillKLDivLoss(EmbeddingLoss):
    """(query, candidate, candidate...) columns, labels the teacher's scores ``(B, candidates)``: the KL
    divergence of the student's softmax over its candidates' scores from the teacher's (batch mean),
    times ``student_temperature ** 2``."""

    def __init__(
        self,
        similarity: Similarity | None = None,
        student_temperature: float = 1.0,
        teacher_temperature: float = 1.0,
        name: str = "DistillKLDivLoss",
    ) -> None:
        self.similarity, self.name = similarity or _pairwise_dot, name
        self.student_temperature, self.teacher_temperature = float(student_temperature), float(teacher_temperature)

    def scores(self, labels: Tensor | None, rows: int, candidates: int) -> Tensor:
        """The teacher's scores as ``(rows, candidates)``, or a ValueError naming what does not fit."""
        if candidates < 2:
            raise ValueError(
                f"{self.name} needs a query and at least 2 candidate columns, got {candidates} candidate(s): "
                "a softmax over one candidate is constant"
            )
        if labels is None or tuple(labels.shape) != (rows, candidates):
            got = "none" if labels is None else f"shape {tuple(labels.shape)}"
            raise ValueError(
                f"{self.name}: labels must be the teacher's scores ({rows}, {candidates}), one per candidate "
                f"column; got {got}"
            )
        if labels.isnan().any():
            raise ValueError(f"{self.name}: the teacher's scores contain NaN")
        return labels

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        query = reps[0]
        teacher = self.scores(labels, query.shape[0], len(reps) - 1).detach()
        student = torch.stack([self.similarity(query, other) for other in reps[1:]], dim=1)
        log_probs = torch.log_softmax(student / self.student_temperature, dim=1)
        probs = torch.softmax(teacher.to(student.device) / self.teacher_temperature, dim=1)
        return F.kl_div(log_probs, probs, reduction="batchmean") * self.student_temperature**2


def _binary_warning(name: str, labels: Tensor, what: str) -> None:
    if labels.ne(0).logical_and(labels.ne(1)).any().item():
        import warnings

        warnings.warn(f"{name} expects binary labels (0 or 1): {what}", UserWarning, stacklevel=4)


class ContrastiveLoss(EmbeddingLoss):
    """(text, text) pairs labelled 1 (similar) or 0: ``0.5 * (y d^2 + (1 - y) relu(margin - d)^2)``
    with ``d = distance(a, b)``, the mean (or the sum without ``size_average``)."""

    def __init__(
        self, distance: Callable[[Tensor, Tensor], Tensor], margin: float = 0.5, size_average: bool = True
    ) -> None:
        self.distance, self.margin, self.size_average = distance, float(margin), size_average
        self._warned = False

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        labels = _one_label_per_row("ContrastiveLoss", labels, reps[0].shape[0]).to(reps[0].device)
        if not self._warned:
            self._warned = True
            _binary_warning("ContrastiveLoss", labels, "others weight the positive term by y, the negative by 1 - y")
        d = self.distance(reps[0], reps[1])
        losses = 0.5 * (labels.float() * d.pow(2) + (1 - labels).float() * F.relu(self.margin - d).pow(2))
        return losses.mean() if self.size_average else losses.sum()


class OnlineContrastiveLoss(EmbeddingLoss):
    """:class:`ContrastiveLoss` on the batch's hard pairs only: positives farther apart than the closest
    negative, negatives closer than the farthest positive; summed."""

    def __init__(self, distance: Callable[[Tensor, Tensor], Tensor], margin: float = 0.5) -> None:
        self.distance, self.margin = distance, float(margin)
        self._warned = False

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        labels = _one_label_per_row("OnlineContrastiveLoss", labels, reps[0].shape[0]).to(reps[0].device)
        if not self._warned:
            self._warned = True
            _binary_warning("OnlineContrastiveLoss", labels, "pairs with other labels are left out")
        d = self.distance(reps[0], reps[1])
        negs, poss = d[labels == 0], d[labels == 1]
        # with no pair of the other kind in the batch, each kind is cut at its own mean
        hard_negs = negs[negs < (poss.max() if len(poss) else negs.mean())]
        hard_poss = poss[poss > (negs.min() if len(negs) else poss.mean())]
        return hard_poss.pow(2).sum() + F.relu(self.margin - hard_negs).pow(2).sum()


def batch_cosine_distance(embeddings: Tensor) -> Tensor:
    """``res[i, j] = 1 - cos(e[i], e[j])``."""
    return 1 - _cos_matrix(embeddings, embeddings)


def batch_euclidean_distance(embeddings: Tensor, squared: bool = False) -> Tensor:
    """``res[i, j] = ||e[i] - e[j]||`` (squared with ``squared``), from the Gram matrix in fp32."""
    with torch.autocast(device_type=embeddings.device.type, enabled=False):
        if embeddings.dtype in (torch.float16, torch.bfloat16):
            embeddings = embeddings.float()
        dot = embeddings @ embeddings.t()
    square_norm = torch.diag(dot)
    distances = square_norm.unsqueeze(0) - 2.0 * dot + square_norm.unsqueeze(1)
    distances = distances.clamp(min=0)
    if not squared:
        # sqrt has an infinite gradient at 0: zero distances are moved off it, then zeroed again
        mask = distances.eq(0).float()
        distances = (1.0 - mask) * torch.sqrt(distances + mask * 1e-16)
    return distances


class BatchTripletLoss(EmbeddingLoss):
    """Triplets mined in a batch of one text column with a class label per row, over
    ``distance(embeddings) -> (B, B)``. ``kind``:

    * ``hard``: per anchor, the farthest positive and the closest negative,
      ``relu(d_ap - d_an + margin)`` averaged over anchors;
    * ``soft_margin``: the same with ``softplus(d_ap - d_an)``;
    * ``all``: every valid (anchor, positive, negative), summed, over the count of those above 0;
    * ``semi_hard``: per (anchor, positive), the closest negative farther than the positive (the
      farthest negative when there is none), averaged over the (anchor, positive) pairs."""

    KINDS = ("hard", "soft_margin", "all", "semi_hard")

    def __init__(self, kind: str, distance: Callable[[Tensor], Tensor], margin: float = 5.0, name: str = "") -> None:
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {', '.join(self.KINDS)}, got {kind!r}")
        self.kind, self.distance, self.margin, self.name = kind, distance, float(margin), name or kind

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        if len(reps) != 1:
            raise ValueError(f"{self.name} takes one text column (and a class label per row), got {len(reps)}")
        e = reps[0]
        labels = _one_label_per_row(self.name, labels, e.shape[0]).to(e.device)
        dist = self.distance(e)
        same = labels.unsqueeze(0) == labels.unsqueeze(1)
        eye = torch.eye(len(labels), device=e.device, dtype=torch.bool)
        if self.kind in ("hard", "soft_margin"):
            hardest_pos = (same & ~eye).float().mul(dist).max(1, keepdim=True).values
            # same-class entries are pushed above every distance of the row before the minimum
            row_max = dist.max(1, keepdim=True).values
            hardest_neg = (dist + row_max * same.float()).min(1, keepdim=True).values
            if self.kind == "soft_margin":
                return F.softplus(hardest_pos - hardest_neg).mean()
            return F.relu(hardest_pos - hardest_neg + self.margin).mean()
        if self.kind == "all":
            anchors, positives = (same & ~eye).nonzero(as_tuple=True)
            loss = dist[anchors, positives].unsqueeze(1) - dist[anchors] + self.margin
            loss = F.relu((labels[anchors].unsqueeze(1) != labels.unsqueeze(0)).float() * loss)
            active = int((loss > 1e-16).sum())
            return loss.sum() / (active + 1e-16)
        return self._semi_hard(dist, same, eye)

    def _semi_hard(self, dist: Tensor, same: Tensor, eye: Tensor) -> Tensor:
        n = dist.shape[0]
        sorted_negatives = dist.masked_fill(same, torch.inf).sort(dim=1, stable=True).values
        # for (a, p): the first negative of a's sorted row above d(a, p), inf when there is none
        positions = torch.searchsorted(sorted_negatives.detach().contiguous(), dist.detach().contiguous(), right=True)
        outside = sorted_negatives.gather(1, positions.clamp(max=n - 1))
        row_min = dist.min(1, keepdim=True).values
        inside = ((dist - row_min) * (~same)).max(1, keepdim=True).values + row_min  # the farthest negative
        negatives = torch.where(torch.isfinite(outside), outside, inside)
        mask_positives = same.float() - eye.float()
        loss = dist - negatives + self.margin
        zero = torch.tensor([0.0], device=dist.device)
        return torch.max(loss * mask_positives, zero).sum() / mask_positives.sum().clamp(min=1e-16)


class AnglELoss(CoSENTLoss):
    """CoSENT over the AnglE similarity. With more than two columns the anchor is paired with each
    other column: the pair's label for the first (1 without labels), ``1 - label`` for the rest."""

    def __init__(self, scale: float = 20.0) -> None:
        super().__init__(scale, similarity=pairwise_angle_sim)

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        if len(reps) > 2:
            anchor = reps[0]
            if labels is None:
                labels = torch.ones(anchor.shape[0], device=anchor.device)
            labels = _one_label_per_row("AnglELoss", labels, anchor.shape[0]).to(anchor.device)
            pairs = [anchor.repeat(len(reps) - 1, 1), torch.cat(list(reps[1:]))]
            return super().from_embeddings(pairs, torch.cat([labels, (1 - labels).repeat(len(reps) - 2)]))
        if labels is None:
            raise ValueError("AnglELoss needs a score per pair for (text, text) columns")
        return super().from_embeddings(reps, labels)


class GlobalOrthogonalRegularizationLoss(EmbeddingLoss):
    """Spreads each column's vectors out: ``mean_weight * mean(off-diagonal similarity)^2 +
    second_moment_weight * relu(mean(off-diagonal similarity^2) - 1/H)``, each term averaged (or summed)
    over the columns."""

    def __init__(
        self,
        similarity: Similarity | None,
        mean_weight: float | None,
        second_moment_weight: float | None,
        aggregation: str,
    ) -> None:
        self.similarity = similarity or _cos_matrix
        self.mean_weight, self.second_moment_weight, self.aggregation = mean_weight, second_moment_weight, aggregation

    def terms(self, reps: Sequence[Tensor]) -> dict[str, Tensor]:
        """The weighted terms by sentence-transformers' names (``gor_mean``, ``gor_second_moment``)."""
        means, seconds = [], []
        for e in reps:
            n, width = e.shape
            sim = self.similarity(e, e).clone()
            sim.fill_diagonal_(0.0)
            off = max(n * (n - 1), 1)
            means.append((sim.sum() / off).pow(2))
            seconds.append(torch.relu(sim.pow(2).sum() / off - 1.0 / width))
        out = {}
        for key, weight, values in (
            ("gor_mean", self.mean_weight, means),
            ("gor_second_moment", self.second_moment_weight, seconds),
        ):
            if weight:
                stacked = torch.stack(values)
                out[key] = weight * (stacked.sum() if self.aggregation == "sum" else stacked.mean())
        return out

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        return sum(self.terms(reps).values())  # type: ignore[return-value]


class MegaBatchMarginLoss(EmbeddingLoss):
    """(anchor, positive) columns: ``relu(positive_margin - cos(a, p)) + relu(max_{p' != p} cos(a, p') -
    negative_margin)``, summed over the batch and divided by its size; the hardest negative of each
    anchor is the closest other positive."""

    def __init__(self, positive_margin: float = 0.8, negative_margin: float = 0.3) -> None:
        self.positive_margin, self.negative_margin = float(positive_margin), float(negative_margin)

    def from_embeddings(self, reps: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        if len(reps) != 2:
            raise ValueError(f"MegaBatchMarginLoss takes (anchor, positive) columns, got {len(reps)} columns")
        anchors, positives = reps
        cos = _cos_matrix(anchors, positives)
        rows = torch.arange(len(anchors), device=anchors.device)
        negatives = cos.clone()
        negatives[rows, rows] = -torch.inf
        hardest = negatives.max(dim=1).values
        pos = cos[rows, rows]
        return (F.relu(self.positive_margin - pos) + F.relu(hardest - self.negative_margin)).sum() / len(anchors)


class GISTEmbedLoss(EmbeddingLoss):
    """In-batch negatives (MNRL at ``1 / temperature``) where a guide model's similarities drop false
    negatives: any candidate the guide scores above the row's own (anchor, positive) similarity (less
    ``margin``, absolute or relative to it) is masked. Candidates: the positives, and with
    ``contrast_anchors`` / ``contrast_positives`` the anchors / the positives again (against each
    positive), and the negatives of a third column. The guide's vectors come with the labels slot:
    ``from_embeddings(reps, guide_reps)``."""

    def __init__(
        self,
        temperature: float = 0.01,
        margin_strategy: str = "absolute",
        margin: float = 0.0,
        contrast_anchors: bool = True,
        contrast_positives: bool = True,
    ) -> None:
        self.temperature, self.margin_strategy, self.margin = float(temperature), margin_strategy, float(margin)
        self.contrast_anchors, self.contrast_positives = contrast_anchors, contrast_positives

    def from_embeddings(self, reps: Sequence[Tensor], labels: Any = None) -> Tensor:
        guide = labels
        if len(reps) not in (2, 3) or guide is None or len(guide) != len(reps):
            raise ValueError(f"GISTEmbedLoss takes 2 or 3 columns and the guide's vectors of each, got {len(reps)}")
        anchor, positive = reps[0], reps[1]
        anchor_g, positive_g = guide[0], guide[1]
        guided_pos = F.cosine_similarity(anchor_g, positive_g, dim=-1).view(-1, 1)
        limit = guided_pos - (self.margin if self.margin_strategy == "absolute" else guided_pos.abs() * self.margin)

        def masked(sim: Tensor, guided: Tensor, keep_diagonal: bool = False) -> Tensor:
            mask = guided > limit
            if keep_diagonal:  # the row's own positive stays a candidate
                mask = mask & ~torch.eye(*mask.shape, dtype=torch.bool, device=mask.device)
            return sim.masked_fill(mask, -torch.inf)

        def sim(a: Tensor, b: Tensor) -> Tensor:
            return F.cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=-1)

        scores = [masked(sim(anchor, positive), sim(anchor_g, positive_g), keep_diagonal=True)]
        if self.contrast_anchors:
            scores.append(masked(sim(anchor, anchor), sim(anchor_g, anchor_g)))
        if self.contrast_positives:
            scores.append(masked(sim(positive, positive), sim(positive_g, positive_g)))
        if len(reps) == 3:
            scores.append(masked(sim(anchor, reps[2]), sim(anchor_g, guide[2])))
        logits = torch.cat(scores, dim=1) / self.temperature
        return F.cross_entropy(logits, torch.arange(anchor.shape[0], device=anchor.device))
