"""The formulas of the sentence-embedding losses, as functions over vectors already computed.

Each loss of :mod:`bertkit.sentence.losses` (sentence-transformers' classes) computes its value with one
of these functions in ``compute_loss_from_embeddings``; ``bertkit train-embedder`` builds its loss from
the same functions with :func:`make_loss`. ``reps`` is one ``(B, H)`` tensor per text column (anchor,
positive, negative...), ``labels`` the rows' labels (scores, classes, a teacher's vectors) or None.

* :func:`mnrl`: in-batch negatives. Row i of the anchors must score its own positive above every other
  positive and every negative of the batch (cross-entropy over cosine x ``scale``); ``symmetric`` adds
  the positive -> anchor direction (the mean of both cross-entropies).
* :func:`cached`: GradCache around any of them. Vectors are computed without gradients in mini-batches,
  the loss is taken on the whole batch, and its gradient with respect to each vector is pushed back
  through the encoder one mini-batch at a time (dropout replayed from the saved RNG state), so the large
  batch's loss and gradients come at a mini-batch's activation memory.
* :func:`cosent`: scored pairs; every pair with a lower score must have a lower cosine.
* :func:`cosine_similarity_loss`: scored pairs; the mean squared error of each pair's cosine and score.
* :func:`triplet`: ``relu(d(a, p) - d(a, n) + margin)``.
* :func:`matryoshka`: the weighted sum of a loss over the first ``d`` dimensions (each prefix
  renormalised) for every ``d`` in ``dims``, so truncated vectors stay useful.
* Distillation: :func:`embed_distill` (the teacher's vectors as labels), :func:`margin_mse` (the
  teacher's (positive - negative) margins), :func:`distill_kl_div` (the teacher's scores over the
  candidates, as a softmax target).
* Labelled pairs: :func:`contrastive` and :func:`online_contrastive` (its hard pairs only).
* One labelled column: :func:`batch_triplet` mines hard, all or semi-hard triplets among the rows of
  each class in the batch.
* :func:`angle` (CoSENT over the AnglE similarity), :func:`gist` (in-batch negatives a guide model
  filters), :func:`mega_batch_margin` (margins to the positive and the hardest other positive) and
  :func:`gor_terms` (pushes unrelated vectors apart).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "BATCH_TRIPLET_KINDS",
    "DISTANCES",
    "EMBED_DISTILL_METRICS",
    "LOSSES",
    "angle",
    "batch_cosine_distance",
    "batch_euclidean_distance",
    "batch_triplet",
    "cache_rows",
    "cached",
    "check_scale",
    "contrastive",
    "cosent",
    "cosine_distance",
    "cosine_similarity_loss",
    "distill_kl_div",
    "distill_kl_scores",
    "embed_distill",
    "embed_distill_teacher",
    "euclidean_distance",
    "gist",
    "gor_terms",
    "loss_columns",
    "make_loss",
    "manhattan_distance",
    "margin_mse",
    "margin_mse_targets",
    "matryoshka",
    "matryoshka_plan",
    "mega_batch_margin",
    "mnrl",
    "online_contrastive",
    "pairwise_angle_sim",
    "triplet",
]

Embed = Callable[[dict[str, Tensor]], Tensor]
Similarity = Callable[[Tensor, Tensor], Tensor]
FromEmbeddings = Callable[[Sequence[Tensor], Any], Tensor]
EmbedderLoss = Callable[..., Tensor]  # (embed, columns, labels=None) -> the loss
LOSSES = ("mnrl", "cached-mnrl", "cosent", "triplet", "mse")
EMBED_DISTILL_METRICS = ("mse", "l2", "cosine")
BATCH_TRIPLET_KINDS = ("hard", "soft_margin", "all", "semi_hard")


def _cos_matrix(a: Tensor, b: Tensor) -> Tensor:
    return F.normalize(a, p=2, dim=-1) @ F.normalize(b, p=2, dim=-1).T


def _cos_pairs(a: Tensor, b: Tensor) -> Tensor:
    return (F.normalize(a, p=2, dim=-1) * F.normalize(b, p=2, dim=-1)).sum(-1)


def _pairwise_dot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).sum(-1)


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


def _pair_labels(name: str, reps: Sequence[Tensor], labels: Tensor | None) -> Tensor:
    """One score per (sentence1, sentence2) row, flattened; refused by name otherwise."""
    if len(reps) != 2:
        raise ValueError(f"{name} needs two columns (sentence1, sentence2), got {len(reps)}")
    if labels is None or labels.numel() != reps[0].shape[0]:
        got = "none" if labels is None else f"{labels.numel()}"
        raise ValueError(f"{name} needs one score per pair: {reps[0].shape[0]} pairs, {got} scores")
    return labels.view(-1).to(reps[0].device)


def _binary_warning(name: str, labels: Tensor, what: str) -> None:
    if labels.ne(0).logical_and(labels.ne(1)).any().item():
        import warnings

        warnings.warn(f"{name} expects binary labels (0 or 1): {what}", UserWarning, stacklevel=5)


# -- in-batch negatives, scored pairs, triplets --------------------------------------------------------


def check_scale(scale: float) -> float:
    """``scale`` as a float, refused unless positive."""
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    return float(scale)


def mnrl(reps: Sequence[Tensor], scale: float, symmetric: bool = False, similarity: Similarity | None = None) -> Tensor:
    """Multiple-negatives ranking: columns anchor, positive, then any number of negative columns.
    ``similarity(a, b) -> (len(a), len(b))`` scores the rows (cosine when None)."""
    if len(reps) < 2:
        raise ValueError(f"MNRL needs an anchor and a positive column, got {len(reps)} column(s)")
    anchors = reps[0]
    scores = (similarity or _cos_matrix)(anchors, torch.cat(list(reps[1:]))) * scale  # (B, B * (columns - 1))
    target = torch.arange(anchors.shape[0], device=anchors.device)
    loss = F.cross_entropy(scores, target)
    if symmetric:  # each positive must also pick its own anchor among the batch's anchors
        loss = (loss + F.cross_entropy(scores[:, : anchors.shape[0]].T, target)) / 2
    return loss


def cosent(
    reps: Sequence[Tensor],
    labels: Tensor | None,
    scale: float,
    similarity: Similarity | None = None,
    name: str = "CoSENT",
) -> Tensor:
    """CoSENT on (sentence1, sentence2) columns with one score per pair in ``labels``;
    ``similarity(a, b) -> (len(a),)`` scores each pair (cosine when None)."""
    labels = _pair_labels(name, reps, labels)
    cos = (similarity or _cos_pairs)(reps[0], reps[1]).float() * scale
    # every (i, j) with score_i < score_j contributes exp(cos_i - cos_j); log(1 + sum) over them
    diff = cos[:, None] - cos[None, :]
    diff = diff.masked_fill(~(labels[:, None] < labels[None, :]), float("-inf"))
    return torch.logsumexp(torch.cat([cos.new_zeros(1), diff.reshape(-1)]), dim=0)


def angle(reps: Sequence[Tensor], labels: Tensor | None, scale: float) -> Tensor:
    """CoSENT over the AnglE similarity. With more than two columns the anchor is paired with each
    other column: the pair's label for the first (1 without labels), ``1 - label`` for the rest."""
    if len(reps) > 2:
        anchor = reps[0]
        if labels is None:
            labels = torch.ones(anchor.shape[0], device=anchor.device)
        labels = _one_label_per_row("AnglELoss", labels, anchor.shape[0]).to(anchor.device)
        pairs = [anchor.repeat(len(reps) - 1, 1), torch.cat(list(reps[1:]))]
        return cosent(pairs, torch.cat([labels, (1 - labels).repeat(len(reps) - 2)]), scale, pairwise_angle_sim)
    if labels is None:
        raise ValueError("AnglELoss needs a score per pair for (text, text) columns")
    return cosent(reps, labels, scale, pairwise_angle_sim)


def cosine_similarity_loss(
    reps: Sequence[Tensor],
    labels: Tensor | None,
    loss_fct: Callable[[Tensor, Tensor], Tensor] | None = None,
    transform: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """``loss_fct(transform(cos(a, b)), scores)`` on (sentence1, sentence2) columns: the mean squared
    error of each pair's cosine and its score by default."""
    labels = _pair_labels("the cosine-similarity loss", reps, labels)
    cos = torch.cosine_similarity(reps[0], reps[1])
    if transform is not None:
        cos = transform(cos)
    return (loss_fct or F.mse_loss)(cos, labels.float())


def triplet(reps: Sequence[Tensor], margin: float, distance: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """Triplet margin loss on (anchor, positive, negative) columns, ``distance(x, y) -> (len(x),)``."""
    if len(reps) != 3:
        raise ValueError(f"the triplet loss needs anchor, positive and negative columns, got {len(reps)}")
    a, p, n = reps
    return F.relu(distance(a, p) - distance(a, n) + margin).mean()


def mega_batch_margin(reps: Sequence[Tensor], positive_margin: float, negative_margin: float) -> Tensor:
    """(anchor, positive) columns: ``relu(positive_margin - cos(a, p)) + relu(max_{p' != p} cos(a, p') -
    negative_margin)``, summed over the batch and divided by its size; the hardest negative of each
    anchor is the closest other positive."""
    if len(reps) != 2:
        raise ValueError(f"MegaBatchMarginLoss takes (anchor, positive) columns, got {len(reps)} columns")
    anchors, positives = reps
    cos = _cos_matrix(anchors, positives)
    rows = torch.arange(len(anchors), device=anchors.device)
    negatives = cos.clone()
    negatives[rows, rows] = -torch.inf
    hardest = negatives.max(dim=1).values
    pos = cos[rows, rows]
    return (F.relu(positive_margin - pos) + F.relu(hardest - negative_margin)).sum() / len(anchors)


def gist(
    reps: Sequence[Tensor],
    guide: Sequence[Tensor] | None,
    temperature: float,
    margin_strategy: str,
    margin: float,
    contrast_anchors: bool,
    contrast_positives: bool,
) -> Tensor:
    """In-batch negatives (MNRL at ``1 / temperature``) where a guide model's similarities (``guide``,
    its vectors of each column) drop false negatives: any candidate the guide scores above the row's own
    (anchor, positive) similarity (less ``margin``, absolute or relative to it) is masked. Candidates:
    the positives, and with ``contrast_anchors`` / ``contrast_positives`` the anchors / the positives
    again (against each positive), and the negatives of a third column."""
    if len(reps) not in (2, 3) or guide is None or len(guide) != len(reps):
        raise ValueError(f"GISTEmbedLoss takes 2 or 3 columns and the guide's vectors of each, got {len(reps)}")
    anchor, positive = reps[0], reps[1]
    anchor_g, positive_g = guide[0], guide[1]
    guided_pos = F.cosine_similarity(anchor_g, positive_g, dim=-1).view(-1, 1)
    limit = guided_pos - (margin if margin_strategy == "absolute" else guided_pos.abs() * margin)

    def masked(sim: Tensor, guided: Tensor, keep_diagonal: bool = False) -> Tensor:
        mask = guided > limit
        if keep_diagonal:  # the row's own positive stays a candidate
            mask = mask & ~torch.eye(*mask.shape, dtype=torch.bool, device=mask.device)
        return sim.masked_fill(mask, -torch.inf)

    def sim(a: Tensor, b: Tensor) -> Tensor:
        return F.cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=-1)

    scores = [masked(sim(anchor, positive), sim(anchor_g, positive_g), keep_diagonal=True)]
    if contrast_anchors:
        scores.append(masked(sim(anchor, anchor), sim(anchor_g, anchor_g)))
    if contrast_positives:
        scores.append(masked(sim(positive, positive), sim(positive_g, positive_g)))
    if len(reps) == 3:
        scores.append(masked(sim(anchor, reps[2]), sim(anchor_g, guide[2])))
    logits = torch.cat(scores, dim=1) / temperature
    return F.cross_entropy(logits, torch.arange(anchor.shape[0], device=anchor.device))


# -- labelled pairs and one labelled column ------------------------------------------------------------


def contrastive(
    reps: Sequence[Tensor],
    labels: Tensor | None,
    distance: Callable[[Tensor, Tensor], Tensor],
    margin: float,
    size_average: bool = True,
    warn: bool = False,
) -> Tensor:
    """(text, text) pairs labelled 1 (similar) or 0: ``0.5 * (y d^2 + (1 - y) relu(margin - d)^2)``
    with ``d = distance(a, b)``, the mean (or the sum without ``size_average``). ``warn``: warn of labels
    other than 0 and 1."""
    labels = _one_label_per_row("ContrastiveLoss", labels, reps[0].shape[0]).to(reps[0].device)
    if warn:
        _binary_warning("ContrastiveLoss", labels, "others weight the positive term by y, the negative by 1 - y")
    d = distance(reps[0], reps[1])
    losses = 0.5 * (labels.float() * d.pow(2) + (1 - labels).float() * F.relu(margin - d).pow(2))
    return losses.mean() if size_average else losses.sum()


def online_contrastive(
    reps: Sequence[Tensor],
    labels: Tensor | None,
    distance: Callable[[Tensor, Tensor], Tensor],
    margin: float,
    warn: bool = False,
) -> Tensor:
    """:func:`contrastive` on the batch's hard pairs only: positives farther apart than the closest
    negative, negatives closer than the farthest positive; summed."""
    labels = _one_label_per_row("OnlineContrastiveLoss", labels, reps[0].shape[0]).to(reps[0].device)
    if warn:
        _binary_warning("OnlineContrastiveLoss", labels, "pairs with other labels are left out")
    d = distance(reps[0], reps[1])
    negs, poss = d[labels == 0], d[labels == 1]
    # with no pair of the other kind in the batch, each kind is cut at its own mean
    hard_negs = negs[negs < (poss.max() if len(poss) else negs.mean())]
    hard_poss = poss[poss > (negs.min() if len(negs) else poss.mean())]
    return hard_poss.pow(2).sum() + F.relu(margin - hard_negs).pow(2).sum()


def batch_triplet(
    reps: Sequence[Tensor],
    labels: Tensor | None,
    kind: str,
    distance: Callable[[Tensor], Tensor],
    margin: float,
    name: str,
) -> Tensor:
    """Triplets mined in a batch of one text column with a class label per row, over
    ``distance(embeddings) -> (B, B)``. ``kind``:

    * ``hard``: per anchor, the farthest positive and the closest negative,
      ``relu(d_ap - d_an + margin)`` averaged over anchors;
    * ``soft_margin``: the same with ``softplus(d_ap - d_an)``;
    * ``all``: every valid (anchor, positive, negative), summed, over the count of those above 0;
    * ``semi_hard``: per (anchor, positive), the closest negative farther than the positive (the
      farthest negative when there is none), averaged over the (anchor, positive) pairs."""
    if len(reps) != 1:
        raise ValueError(f"{name} takes one text column (and a class label per row), got {len(reps)}")
    e = reps[0]
    labels = _one_label_per_row(name, labels, e.shape[0]).to(e.device)
    dist = distance(e)
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    eye = torch.eye(len(labels), device=e.device, dtype=torch.bool)
    if kind in ("hard", "soft_margin"):
        hardest_pos = (same & ~eye).float().mul(dist).max(1, keepdim=True).values
        # same-class entries are pushed above every distance of the row before the minimum
        row_max = dist.max(1, keepdim=True).values
        hardest_neg = (dist + row_max * same.float()).min(1, keepdim=True).values
        if kind == "soft_margin":
            return F.softplus(hardest_pos - hardest_neg).mean()
        return F.relu(hardest_pos - hardest_neg + margin).mean()
    if kind == "all":
        anchors, positives = (same & ~eye).nonzero(as_tuple=True)
        loss = dist[anchors, positives].unsqueeze(1) - dist[anchors] + margin
        loss = F.relu((labels[anchors].unsqueeze(1) != labels.unsqueeze(0)).float() * loss)
        active = int((loss > 1e-16).sum())
        return loss.sum() / (active + 1e-16)
    return _semi_hard(dist, same, eye, margin)


def _semi_hard(dist: Tensor, same: Tensor, eye: Tensor, margin: float) -> Tensor:
    n = dist.shape[0]
    sorted_negatives = dist.masked_fill(same, torch.inf).sort(dim=1, stable=True).values
    # for (a, p): the first negative of a's sorted row above d(a, p), inf when there is none
    positions = torch.searchsorted(sorted_negatives.detach().contiguous(), dist.detach().contiguous(), right=True)
    outside = sorted_negatives.gather(1, positions.clamp(max=n - 1))
    row_min = dist.min(1, keepdim=True).values
    inside = ((dist - row_min) * (~same)).max(1, keepdim=True).values + row_min  # the farthest negative
    negatives = torch.where(torch.isfinite(outside), outside, inside)
    mask_positives = same.float() - eye.float()
    loss = dist - negatives + margin
    zero = torch.tensor([0.0], device=dist.device)
    return torch.max(loss * mask_positives, zero).sum() / mask_positives.sum().clamp(min=1e-16)


def gor_terms(
    reps: Sequence[Tensor],
    similarity: Similarity | None,
    mean_weight: float | None,
    second_moment_weight: float | None,
    aggregation: str,
) -> dict[str, Tensor]:
    """Global orthogonal regularization, its weighted terms by sentence-transformers' names
    (``gor_mean``, ``gor_second_moment``): ``mean_weight * mean(off-diagonal similarity)^2`` and
    ``second_moment_weight * relu(mean(off-diagonal similarity^2) - 1/H)`` of each column, averaged (or
    summed) over the columns."""
    similarity = similarity or _cos_matrix
    means, seconds = [], []
    for e in reps:
        n, width = e.shape
        sim = similarity(e, e).clone()
        sim.fill_diagonal_(0.0)
        off = max(n * (n - 1), 1)
        means.append((sim.sum() / off).pow(2))
        seconds.append(torch.relu(sim.pow(2).sum() / off - 1.0 / width))
    out = {}
    for key, weight, values in (
        ("gor_mean", mean_weight, means),
        ("gor_second_moment", second_moment_weight, seconds),
    ):
        if weight:
            stacked = torch.stack(values)
            out[key] = weight * (stacked.sum() if aggregation == "sum" else stacked.mean())
    return out


# -- distillation --------------------------------------------------------------------------------------


def embed_distill_teacher(
    name: str, labels: Tensor | None, columns: int, width: int, projected: bool = False
) -> list[Tensor]:
    """The teacher's vectors per column, or a ValueError naming the shape that does not fit: one
    ``(B, H)`` vector per row for every column, or ``(B, columns, H)``, one per column."""
    if labels is None:
        raise ValueError(f"{name} needs the teacher's embeddings as labels (one vector per row), got none")
    if labels.dim() == 2:
        per_column = [labels] * columns
    elif labels.dim() == 3 and labels.shape[1] == columns:
        per_column = [labels[:, i] for i in range(columns)]
    elif labels.dim() == 3:
        raise ValueError(
            f"{name}: labels of shape {tuple(labels.shape)} hold {labels.shape[1]} teacher vectors per row "
            f"for {columns} text column(s); give one per column, or one per row for all"
        )
    else:
        raise ValueError(
            f"{name}: labels must be teacher vectors, (batch, {width}) or (batch, {columns}, {width}); "
            f"got shape {tuple(labels.shape)}"
        )
    if labels.shape[-1] != width:
        raise ValueError(
            f"{name}: the teacher's vectors are {labels.shape[-1]} wide, the student's "
            f"{'projected ' if projected else ''}embeddings {width}: they must be equal"
        )
    return per_column


def embed_distill(
    reps: Sequence[Tensor],
    labels: Tensor | None,
    metric: str = "mse",
    projection: Callable[[Tensor], Tensor] | None = None,
    name: str = "EmbedDistillLoss",
) -> Tensor:
    """The student's vectors against the teacher's, given as labels (see :func:`embed_distill_teacher`).
    ``metric`` is ``mse`` (mean squared error), ``l2`` (mean Euclidean distance) or ``cosine`` (mean
    ``1 - cos``), averaged over the columns; ``projection`` maps the student's vectors to the teacher's
    width first."""
    students = [projection(r) if projection is not None else r for r in reps]
    teachers = embed_distill_teacher(name, labels, len(reps), students[0].shape[-1], projection is not None)
    losses = []
    for student, teacher in zip(students, teachers):
        _rows_match(name, teacher, student.shape[0])
        teacher = teacher.detach().to(device=student.device, dtype=student.dtype)
        if metric == "mse":
            losses.append(F.mse_loss(student, teacher))
        elif metric == "l2":
            losses.append(torch.norm(student - teacher, dim=-1).mean())
        else:
            losses.append((1 - F.cosine_similarity(student, teacher, dim=-1)).mean())
    return torch.stack(losses).mean()


def margin_mse_targets(name: str, labels: Tensor | None, rows: int, negatives: int) -> Tensor:
    """The teacher's margins as ``(rows, negatives)`` (from its margins ``(B,)`` or ``(B, negatives)``,
    or its scores ``(B, 1 + negatives)``), or a ValueError naming the shape that does not fit."""
    if negatives < 1:
        raise ValueError(f"{name} needs a query, a positive and at least one negative column")
    if labels is not None and labels.shape == (rows, negatives + 1):
        labels = labels[:, :1] - labels[:, 1:]
    if labels is not None and labels.shape == (rows,):
        labels = labels.unsqueeze(1)
    if labels is None or labels.shape != (rows, negatives):
        got = "none" if labels is None else f"shape {tuple(labels.shape)}"
        raise ValueError(
            f"{name}: labels must be the teacher's margins ({rows}, {negatives}) or its scores "
            f"({rows}, {negatives + 1}) for {negatives} negative column(s); got {got}"
        )
    return labels


def margin_mse(
    reps: Sequence[Tensor], labels: Tensor | None, similarity: Similarity | None = None, name: str = "MarginMSELoss"
) -> Tensor:
    """(query, positive, negative...) columns: the mean squared error of the student's margins
    (``similarity`` per pair, the dot product when None) against the teacher's."""
    similarity = similarity or _pairwise_dot
    query, positive, negatives = reps[0], reps[1], list(reps[2:])
    target = margin_mse_targets(name, labels, query.shape[0], len(negatives)).detach()
    pos = similarity(query, positive)
    margins = torch.stack([pos - similarity(query, n) for n in negatives], dim=1)
    return F.mse_loss(margins, target.to(margins.device, margins.dtype))


def distill_kl_scores(name: str, labels: Tensor | None, rows: int, candidates: int) -> Tensor:
    """The teacher's scores as ``(rows, candidates)``, or a ValueError naming what does not fit."""
    if candidates < 2:
        raise ValueError(
            f"{name} needs a query and at least 2 candidate columns, got {candidates} candidate(s): "
            "a softmax over one candidate is constant"
        )
    if labels is None or tuple(labels.shape) != (rows, candidates):
        got = "none" if labels is None else f"shape {tuple(labels.shape)}"
        raise ValueError(
            f"{name}: labels must be the teacher's scores ({rows}, {candidates}), one per candidate column; got {got}"
        )
    if labels.isnan().any():
        raise ValueError(f"{name}: the teacher's scores contain NaN")
    return labels


def distill_kl_div(
    reps: Sequence[Tensor],
    labels: Tensor | None,
    similarity: Similarity | None = None,
    student_temperature: float = 1.0,
    teacher_temperature: float = 1.0,
    name: str = "DistillKLDivLoss",
) -> Tensor:
    """(query, candidate, candidate...) columns, labels the teacher's scores ``(B, candidates)``: the KL
    divergence of the student's softmax over its candidates' scores from the teacher's (batch mean),
    times ``student_temperature ** 2``."""
    similarity = similarity or _pairwise_dot
    query = reps[0]
    teacher = distill_kl_scores(name, labels, query.shape[0], len(reps) - 1).detach()
    student = torch.stack([similarity(query, other) for other in reps[1:]], dim=1)
    log_probs = torch.log_softmax(student / student_temperature, dim=1)
    probs = torch.softmax(teacher.to(student.device) / teacher_temperature, dim=1)
    return F.kl_div(log_probs, probs, reduction="batchmean") * student_temperature**2


# -- the wrappers: Matryoshka and GradCache -------------------------------------------------------------


def matryoshka_plan(dims: Sequence[int], weights: Sequence[float] | None = None) -> tuple[list[int], list[float]]:
    """``(dims, weights)`` checked and sorted, the largest dimension first (the order of the sum)."""
    if not dims or any(int(d) <= 0 for d in dims):
        raise ValueError(f"matryoshka dims must be positive integers, got {list(dims)}")
    weights = [1.0] * len(dims) if weights is None else list(weights)
    if len(weights) != len(dims):
        raise ValueError(f"{len(dims)} matryoshka dims but {len(weights)} weights")
    pairs = sorted(zip((int(d) for d in dims), weights), reverse=True)
    return [d for d, _ in pairs], [w for _, w in pairs]


def matryoshka(
    reps: Sequence[Tensor], labels: Any, dims: Sequence[int], weights: Sequence[float], inner: FromEmbeddings
) -> Tensor:
    """``sum_d weight_d * inner(first d dimensions, renormalised)`` over :func:`matryoshka_plan`'s
    ``dims`` and ``weights``; labels as wide as the vectors (a teacher's) are cut to each prefix too."""
    full = reps[0].shape[-1]
    if dims[0] > full:
        raise ValueError(f"matryoshka dim {dims[0]} is above the model's embedding size {full}")
    vectors = isinstance(labels, Tensor) and labels.ndim in (2, 3) and labels.shape[-1] == full
    loss = reps[0].new_zeros(())
    for d, w in zip(dims, weights):
        prefix_labels = labels[..., :d] if vectors else labels
        prefixes = [F.normalize(r[..., :d], p=2, dim=-1) for r in reps]
        loss = loss + w * inner(prefixes, prefix_labels)
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
    """Row slices of a padded batch, each cut to its own longest text (less padding to compute); of a
    static model's flat ids, each slice's ids and its offsets from its own start."""
    if "offsets" in features:
        ids, offsets = features["input_ids"], features["offsets"]
        n = offsets.shape[0]
        for s in range(0, n, size):
            e = min(n, s + size)
            lo, hi = int(offsets[s]), int(offsets[e]) if e < n else ids.shape[0]
            yield {"input_ids": ids[lo:hi], "offsets": offsets[s:e] - lo}
        return
    n = features["input_ids"].shape[0]
    for s in range(0, n, size):
        mb = {k: v[s : s + size] for k, v in features.items()}
        if "attention_mask" in mb and mb["attention_mask"].ndim == 2:
            length = max(1, int(mb["attention_mask"].sum(1).max()))
            mb = {k: v[:, :length] if v.ndim == 2 else v for k, v in mb.items()}
        yield mb


def cache_rows(mini_batch_size: int) -> int:
    """GradCache's rows per forward, refused unless positive."""
    if mini_batch_size <= 0:
        raise ValueError(f"mini_batch_size must be positive, got {mini_batch_size}")
    return int(mini_batch_size)


def cached(
    embed: Embed,
    columns: Sequence[dict[str, Tensor]],
    labels: Any,
    from_embeddings: FromEmbeddings,
    mini_batch_size: int,
) -> Tensor:
    """GradCache: ``from_embeddings``' loss and gradients on the whole batch, the activations of
    ``mini_batch_size`` rows. Each column is embedded without gradients, mini-batch by mini-batch; the
    loss's gradient with respect to each vector is pushed through the encoder when the loss's backward
    comes (each mini-batch embedded again, its dropout replayed)."""
    device = columns[0]["input_ids"].device
    autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
    reps, states = [], []
    for col in columns:
        parts, col_states = [], []
        for mb in _mini_batches(col, mini_batch_size):
            col_states.append(_RandState(device))
            with torch.no_grad():
                parts.append(embed(mb).detach())
        reps.append(torch.cat(parts))
        states.append(col_states)
    leaves = [r.requires_grad_() for r in reps]
    with torch.enable_grad():
        loss = from_embeddings(leaves, labels)
    if not torch.is_grad_enabled():  # evaluation: no backward will come
        return loss.detach()
    grads = torch.autograd.grad(loss, leaves)
    out = loss.detach().requires_grad_()

    def backward_hook(grad_output: Tensor) -> None:
        # the outer backward reached the loss: push d(loss)/d(vector) through the encoder per mini-batch
        with torch.enable_grad(), torch.autocast(device.type, dtype=autocast[1], enabled=autocast[0]):
            for col, grad, col_states in zip(columns, grads, states):
                start = 0
                for mb, state in zip(_mini_batches(col, mini_batch_size), col_states):
                    with state.replay():
                        r = embed(mb)
                    g = grad[start : start + r.shape[0]]
                    start += r.shape[0]
                    (r.float() * g.float()).sum().mul(grad_output.float()).backward()

    out.register_hook(backward_hook)
    return out


# -- train-embedder's losses ---------------------------------------------------------------------------


def make_loss(
    name: str,
    matryoshka_dims: Sequence[int] | None = None,
    mini_batch_size: int = 32,
    symmetric: bool = False,
    scale: float = 20.0,
    margin: float = 5.0,
) -> EmbedderLoss:
    """The loss a ``--loss`` name stands for, under Matryoshka when dims are given, as a function
    ``loss(embed, columns, labels=None)``: ``embed(features) -> (B, H)`` turns one padded batch of
    tokenized texts into vectors, ``columns`` holds one such batch per column."""
    if name not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {name!r}")
    if name in ("mnrl", "cached-mnrl"):
        scale = check_scale(scale)

        def base(reps: Sequence[Tensor], labels: Any = None) -> Tensor:
            return mnrl(reps, scale, symmetric)
    elif name == "cosent":

        def base(reps: Sequence[Tensor], labels: Any = None) -> Tensor:
            return cosent(reps, labels, float(scale))
    elif name == "mse":  # sentence-transformers' MSELoss: one column of texts, the teacher's vectors as labels

        def base(reps: Sequence[Tensor], labels: Any = None) -> Tensor:
            return F.mse_loss(reps[0].float(), labels.float())
    else:

        def base(reps: Sequence[Tensor], labels: Any = None) -> Tensor:
            return triplet(reps, float(margin), euclidean_distance)

    from_embeddings: FromEmbeddings = base
    if matryoshka_dims:
        dims, weights = matryoshka_plan(matryoshka_dims)

        def from_embeddings(reps: Sequence[Tensor], labels: Any = None) -> Tensor:
            return matryoshka(reps, labels, dims, weights, base)

    rows = cache_rows(mini_batch_size) if name == "cached-mnrl" else None

    def loss(embed: Embed, columns: Sequence[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        if rows is not None:
            return cached(embed, columns, labels, from_embeddings, rows)
        return from_embeddings([embed(c) for c in columns], labels)

    return loss


def loss_columns(name: str) -> tuple[str, ...]:
    """The data columns a loss reads (``negative`` optional for MNRL)."""
    return {
        "cosent": ("sentence1", "sentence2", "score"),
        "triplet": ("anchor", "positive", "negative"),
        "mse": ("text",),
    }.get(name, ("anchor", "positive"))
