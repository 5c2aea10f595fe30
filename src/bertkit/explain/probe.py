"""Layer probes: what each layer of a model knows about a labelled task.

A logistic regression is fitted on each layer's frozen sentence vectors (``[CLS]``, or the last token
for a causal model, and the mean of the tokens) of a training split and scored on a held-out split.
Accuracy alone says little: a probe may learn the task itself from any rich enough vectors. So, as
Hewitt & Liang do with control tasks, the same probe is also fitted to the labels shuffled across the
rows (the class balance kept, the link to the text gone) and **selectivity** = accuracy - control
accuracy is reported; the control probe's training accuracy shows how much it can memorise. And the
same probes run on a randomly initialised model of the same shape, so the learner sees what
pretraining added over the architecture alone.

The probe is L2-regularised logistic regression (one weight vector for two classes, one per class
above that, the intercept unpenalised), minimising ``sum_i CE_i + |W|^2 / (2C)`` as scikit-learn's
``LogisticRegression(C=C)`` does, by L-BFGS in float64 to a tight tolerance on standardised features.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["ProbeResult", "fit_logistic", "layer_features", "predict_proba", "probe"]

KINDS = ("first", "mean")


# ---------------------------------------------------------------------------------------- the probe


def fit_logistic(
    x: np.ndarray | torch.Tensor, y: Sequence[int] | np.ndarray | torch.Tensor, c: float = 0.01, max_iter: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit L2-regularised logistic regression of class ids ``y`` on features ``x`` (n, d).

    Returns ``(W, b)`` in float64: (1, d) and (1,) for two classes (the logit of class 1), (K, d) and
    (K,) for K > 2 (softmax). The objective is scikit-learn's: ``sum_i CE_i + |W|^2 / (2C)``, solved
    by Newton's method with a backtracking line search (the problem is strictly convex, so a few
    exact steps reach the minimum to float64 precision); past ``_NEWTON_PARAMS`` unknowns, by L-BFGS.
    """
    if not c > 0:
        raise ValueError(f"c (the inverse regularisation strength) must be positive, got {c}")
    X = torch.as_tensor(np.asarray(x), dtype=torch.float64)
    Y = torch.as_tensor(np.asarray(y), dtype=torch.long)
    n, d = X.shape
    if len(torch.unique(Y)) < 2:
        raise ValueError("a probe needs at least two classes among its training labels")
    k = int(Y.max()) + 1
    rows = 1 if k == 2 else k
    X1 = torch.cat([X, torch.ones(n, 1, dtype=torch.float64)], 1)  # the intercept as a last column
    target = torch.nn.functional.one_hot(Y, k).double()[:, 1:] if rows == 1 else None
    reg = torch.ones(d + 1, dtype=torch.float64)
    reg[-1] = 0.0  # the intercept is not penalised
    reg = reg.repeat(rows) / c

    def loss(theta: torch.Tensor) -> torch.Tensor:
        logits = X1 @ theta.view(rows, d + 1).T
        if rows == 1:
            ce = torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="sum")
        else:
            ce = torch.nn.functional.cross_entropy(logits, Y, reduction="sum")
        return ce + 0.5 * (reg * theta * theta).sum()

    theta = torch.zeros(rows * (d + 1), dtype=torch.float64)
    if rows * (d + 1) > _NEWTON_PARAMS:
        return _lbfgs(loss, theta, rows, d)
    for _ in range(max_iter):
        p = torch.sigmoid(X1 @ theta) if rows == 1 else (X1 @ theta.view(rows, d + 1).T).softmax(-1)
        resid = (p - target[:, 0]) if rows == 1 else p - torch.nn.functional.one_hot(Y, k).double()
        grad = (resid[:, None] * X1).sum(0) if rows == 1 else (resid.T @ X1).reshape(-1)
        grad = grad + reg * theta
        if float(grad.abs().max()) < 1e-9 * max(1.0, n):
            break
        # Softmax is unchanged by one shift of every intercept, so that direction has no curvature: a
        # touch of damping there keeps the system solvable without moving the probabilities.
        hess = _hessian(X1, p, rows) + torch.diag(reg + (reg == 0) * (1e-8 * n if rows > 1 else 0.0))
        step = torch.linalg.solve(hess, grad)
        f0, t = loss(theta), 1.0
        while t > 1e-10 and loss(theta - t * step) > f0 - 1e-4 * t * float(grad @ step):
            t /= 2
        theta = theta - t * step
        if float((t * step).abs().max()) < 1e-12:
            break
    W = theta.view(rows, d + 1)
    return W[:, :d].clone(), W[:, d].clone()


# Above this many unknowns (classes x features) the Hessian costs more than L-BFGS's many steps.
_NEWTON_PARAMS = 2500


def _hessian(X1: torch.Tensor, p: torch.Tensor, rows: int) -> torch.Tensor:
    """The cross-entropy's Hessian: X' diag(p(1-p)) X for two classes, blocks X' diag(p_k(d_kl - p_l)) X."""
    if rows == 1:
        return X1.T @ ((p * (1 - p))[:, None] * X1)
    blocks = [[X1.T @ ((p[:, a] * (float(a == b) - p[:, b]))[:, None] * X1) for b in range(rows)] for a in range(rows)]
    return torch.cat([torch.cat(r, 1) for r in blocks], 0)


def _lbfgs(loss: Any, theta: torch.Tensor, rows: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    theta = theta.clone().requires_grad_(True)
    opt = torch.optim.LBFGS(
        [theta],
        max_iter=2000,
        history_size=20,
        tolerance_grad=1e-9,
        tolerance_change=1e-14,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = loss(theta)
        value.backward()
        return value

    with torch.enable_grad():
        opt.step(closure)
    W = theta.detach().view(rows, d + 1)
    return W[:, :d].clone(), W[:, d].clone()


def predict_proba(W: torch.Tensor, b: torch.Tensor, x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Class probabilities (n, K) of a probe from :func:`fit_logistic`."""
    logits = torch.as_tensor(np.asarray(x), dtype=torch.float64) @ W.T + b
    if W.shape[0] == 1:
        p = torch.sigmoid(logits[:, 0])
        return torch.stack([1 - p, p], dim=1)
    return logits.softmax(-1)


def _standardise(train: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = train.mean(0), train.std(0).clamp_min(1e-6)
    return (train - mean) / std, (test - mean) / std


def _accuracy(W: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((predict_proba(W, b, x).argmax(1) == y).double().mean())


# ---------------------------------------------------------------------------------------- features


@torch.inference_mode()
def layer_features(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    pairs: Sequence[str | None] | None = None,
    max_length: int = 128,
    batch_size: int = 32,
) -> dict[str, torch.Tensor]:
    """Each layer's sentence vectors: ``"first"`` (the ``[CLS]`` vector; for a causal model the last
    token's, the only one that has seen the whole text) and ``"mean"`` (of the real tokens), each
    (L + 1, n, H) in float32, layer 0 the embeddings."""
    from bertkit.modeling import registry

    fam = registry.family(model.config.model_type)
    causal = fam.kind != registry.ENCODER
    pairs = list(pairs) if pairs is not None else [None] * len(texts)
    encoded = [tokenizer(t, p, truncation=True, max_length=max_length) for t, p in zip(texts, pairs)]
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]["input_ids"]))
    first: list[torch.Tensor] = [torch.empty(0)] * len(texts)
    mean: list[torch.Tensor] = [torch.empty(0)] * len(texts)
    model.eval()
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        width = max(len(encoded[i]["input_ids"]) for i in idx)
        ids = torch.zeros(len(idx), width, dtype=torch.long)
        types = torch.zeros(len(idx), width, dtype=torch.long)
        mask = torch.zeros(len(idx), width, dtype=torch.long)
        for r, i in enumerate(idx):
            e = encoded[i]
            m = len(e["input_ids"])
            ids[r, :m] = torch.tensor(e["input_ids"])
            types[r, :m] = torch.tensor(e.get("token_type_ids") or [0] * m)
            mask[r, :m] = 1
        kw = {"token_type_ids": types} if fam.has_token_types else {}
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, return_dict=True, **kw)
        H = torch.stack(out.hidden_states, 1).float()  # (B, L + 1, N, H)
        m = mask[:, None, :, None].float()
        means = (H * m).sum(2) / m.sum(2)
        last = mask.sum(1) - 1
        firsts = H[torch.arange(len(idx)), :, last] if causal else H[:, :, 0]
        for r, i in enumerate(idx):
            first[i], mean[i] = firsts[r], means[r]
    return {"first": torch.stack(first, 1), "mean": torch.stack(mean, 1)}


# ---------------------------------------------------------------------------------------- the result


@dataclass
class ProbeResult:
    """Per model (``trained``, ``random``), layer and kind of vector: accuracy, control and selectivity."""

    model: str
    task: str
    classes: list[str]
    n_train: int
    n_test: int
    seed: int
    c: float
    first_name: str  # what the "first" vector is: "[CLS]" or "last token"
    majority: float  # the held-out accuracy of always answering the most frequent training class
    rows: list[dict[str, Any]] = field(default_factory=list)

    def row(self, model: str, layer: int, kind: str) -> dict[str, Any]:
        """One probe's numbers."""
        return next(r for r in self.rows if r["model"] == model and r["layer"] == layer and r["kind"] == kind)

    @property
    def layers(self) -> list[int]:
        return sorted({r["layer"] for r in self.rows})

    @property
    def models(self) -> list[str]:
        return [m for m in ("trained", "random") if any(r["model"] == m for r in self.rows)]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON of the settings and every probe's numbers."""
        return {
            "model": self.model,
            "task": self.task,
            "classes": self.classes,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "seed": self.seed,
            "c": self.c,
            "first": self.first_name,
            "majority": self.majority,
            "rows": self.rows,
        }

    def table(self) -> str:
        """A markdown table: per layer, accuracy and selectivity of each kind of vector, trained and random."""
        names = {"first": self.first_name, "mean": "mean"}
        head = ["layer"]
        for m in self.models:
            for k in KINDS:
                head += [f"{m} {names[k]} acc", f"{m} {names[k]} sel"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for layer in self.layers:
            cells = ["emb" if layer == 0 else str(layer)]
            for m in self.models:
                for k in KINDS:
                    r = self.row(m, layer, k)
                    cells += [f"{100 * r['accuracy']:.1f}", f"{100 * r['selectivity']:+.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
        note = (
            f"{self.n_train} training / {self.n_test} held-out rows, {len(self.classes)} classes, "
            f"majority {100 * self.majority:.1f}%; acc = held-out accuracy %, sel = acc - control "
            f"(shuffled labels) acc, in points; C={self.c:g}, seed {self.seed}"
        )
        return "\n".join(lines) + "\n\n" + note

    def _repr_html_(self) -> str:
        """The table for a notebook."""
        md = self.table().split("\n")
        body = [r.strip("|").split("|") for r in md[:1] + md[2:] if r.startswith("|")]
        cells = "".join(
            "<tr>"
            + "".join(f"<{'th' if i == 0 else 'td'}>{html.escape(x.strip())}</{'th' if i == 0 else 'td'}>" for x in r)
            + "</tr>"
            for i, r in enumerate(body)
        )
        return f"<table class='bertkit-probe'>{cells}</table><p>{html.escape(md[-1])}</p>"

    def write_plot(self, path: str | os.PathLike) -> Path:
        """Accuracy and selectivity by layer (PNG, written atomically)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from bertkit._io import atomic_path

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        names = {"first": self.first_name, "mean": "mean"}
        styles = {"trained": "-", "random": "--"}
        for m in self.models:
            for k in KINDS:
                rs = [self.row(m, layer, k) for layer in self.layers]
                label = f"{m} model, {names[k]}"
                a1.plot(self.layers, [100 * r["accuracy"] for r in rs], styles[m], marker="o", label=label)
                a2.plot(self.layers, [100 * r["selectivity"] for r in rs], styles[m], marker="o", label=label)
                if m == "trained":
                    ctl = [100 * r["control_accuracy"] for r in rs]
                    shade = "dimgrey" if k == "first" else "darkgrey"
                    a1.plot(self.layers, ctl, ":", color=shade, label=f"control task, {names[k]}")
        a1.axhline(100 * self.majority, color="black", lw=0.8, label="majority class")
        a1.set(xlabel="layer (0 = embeddings)", ylabel="held-out accuracy %", title="probe accuracy by layer")
        a2.set(xlabel="layer (0 = embeddings)", ylabel="points", title="selectivity = accuracy - control accuracy")
        for ax in (a1, a2):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        return Path(path)


# ---------------------------------------------------------------------------------------- probe()


def _read_task(
    task: str | os.PathLike, text_column: str, label_column: str, pair_column: str | None, max_rows: int
) -> tuple[list[str], list[str | None], list[str]]:
    from bertkit.data.readers import read_table

    rows = read_table(task, text_column=text_column, text_pair_column=pair_column, label_column=label_column)
    rows = rows[:max_rows]
    labels = [str(r.label) for r in rows]
    classes = sorted(set(labels))
    if len(classes) < 2:
        only = f" ({classes[0]!r})" if classes else ""
        raise ValueError(
            f"{task}: column {label_column!r} has one class{only} in its first {len(rows)} rows; "
            "a probe needs two or more"
        )
    return [r.text for r in rows], [r.text_pair for r in rows], labels


def _split(n: int, test_size: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not 0 < test_size < 1:
        raise ValueError(f"test_size must be between 0 and 1 (the held-out share), got {test_size}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    k = max(1, min(n - 2, round(n * test_size)))
    return perm[k:], perm[:k]


def _random_twin(model: Any, seed: int) -> Any:
    """A model of the same family and shape with freshly initialised weights (seeded)."""
    from bertkit.modeling import registry

    fam = registry.family(model.config.model_type)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fam.model_class("base")(model.config).eval()


def _probe_model(
    feats: dict[str, torch.Tensor], y: torch.Tensor, control: torch.Tensor, split: tuple, c: float, name: str
) -> list[dict[str, Any]]:
    train, test = split
    rows = []
    threads = torch.get_num_threads()
    # The probes' matrices are a few hundred wide: one thread solves them many times faster than
    # several waking up for each small product (measured 16x less CPU time at 385 x 385).
    torch.set_num_threads(1)
    try:
        for kind, per_layer in feats.items():
            rows += _probe_kind(kind, per_layer, y, control, train, test, c, name)
    finally:
        torch.set_num_threads(threads)
    return rows


def _probe_kind(
    kind: str,
    per_layer: torch.Tensor,
    y: torch.Tensor,
    control: torch.Tensor,
    train: torch.Tensor,
    test: torch.Tensor,
    c: float,
    name: str,
) -> list[dict[str, Any]]:
    """The task and control probes of one kind of vector, layer by layer."""
    rows = []
    for layer, x in enumerate(per_layer):
        xtr, xte = _standardise(x[train].double(), x[test].double())
        W, b = fit_logistic(xtr, y[train], c)
        Wc, bc = fit_logistic(xtr, control[train], c)
        acc = _accuracy(W, b, xte, y[test])
        ctl = _accuracy(Wc, bc, xte, control[test])
        rows.append(
            {
                "model": name,
                "layer": layer,
                "kind": kind,
                "accuracy": acc,
                "control_accuracy": ctl,
                "selectivity": acc - ctl,
                "train_accuracy": _accuracy(W, b, xtr, y[train]),
                "control_train_accuracy": _accuracy(Wc, bc, xtr, control[train]),
            }
        )
    return rows


def probe(
    model: str | os.PathLike | Any,
    task: str | os.PathLike,
    text_column: str = "text",
    label_column: str = "label",
    text_pair_column: str | None = None,
    tokenizer: Any = None,
    test_size: float = 0.2,
    max_rows: int = 2000,
    max_length: int = 128,
    c: float = 0.01,
    seed: int = 0,
    random_baseline: bool = True,
    json_path: str | os.PathLike | None = None,
    png_path: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> ProbeResult:
    """Probe every layer of ``model`` (a folder, cached id, or a loaded model with its ``tokenizer``)
    on the labelled ``task`` file (CSV, TSV or JSONL): a logistic regression per layer on frozen
    ``[CLS]`` and mean vectors, with a shuffled-label control task and, with ``random_baseline``, a
    randomly initialised model of the same shape beside it. The same ``seed`` gives the same numbers.
    Writes ``json_path`` and ``png_path`` (atomically) when given."""
    from bertkit._folders import check_output_file, refuse_inside_input
    from bertkit._io import atomic_write_json

    for flag, p in (("--json", json_path), ("--png", png_path)):
        if p is not None:
            if isinstance(model, (str, os.PathLike)):
                refuse_inside_input(p, model, task, flag=flag)
            check_output_file(p, overwrite=overwrite, flag=flag)
    if not c > 0:
        raise ValueError(f"c (the inverse regularisation strength) must be positive, got {c}")
    texts, pairs, labels = _read_task(task, text_column, label_column, text_pair_column, max_rows)
    if isinstance(model, (str, os.PathLike)):
        from .collect import load_model

        net, tok, _ = load_model(model)
        tokenizer, name = tokenizer or tok, str(model)
    elif tokenizer is None:
        raise ValueError("probe(model, ...) with a loaded model needs its tokenizer: probe(model, task, tokenizer=tok)")
    else:
        net, name = model, type(model).__name__
    classes = sorted(set(labels))
    y = torch.tensor([classes.index(lab) for lab in labels])
    control = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(seed + 1))]
    split = _split(len(y), test_size, seed)
    if len(torch.unique(y[split[0]])) < 2:
        raise ValueError(f"{task}: the training split holds one class; give more rows or a larger share for training")
    base = net.base_model
    counts = torch.bincount(y[split[0]], minlength=len(classes))
    majority = float((y[split[1]] == counts.argmax()).double().mean())
    from bertkit.modeling import registry

    causal = registry.family(net.config.model_type).kind != registry.ENCODER
    result = ProbeResult(
        name, str(task), classes, len(split[0]), len(split[1]), seed, c, "last token" if causal else "[CLS]", majority
    )
    feats = layer_features(base, tokenizer, texts, pairs, max_length)
    result.rows += _probe_model(feats, y, control, split, c, "trained")
    if random_baseline:
        twin = _random_twin(base, seed)
        result.rows += _probe_model(
            layer_features(twin, tokenizer, texts, pairs, max_length), y, control, split, c, "random"
        )
    if json_path is not None:
        atomic_write_json(json_path, result.to_json())
    if png_path is not None:
        result.write_plot(png_path)
    return result
