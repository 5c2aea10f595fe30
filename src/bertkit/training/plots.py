"""Training curves: one PNG drawn from a run's metrics.jsonl."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from bertkit._io import atomic_path
from bertkit._text import read_jsonl

__all__ = ["plot_metrics", "save_figure"]


def plot_metrics(jsonl: str | os.PathLike, png: str | os.PathLike) -> Path:
    """Draw loss terms, lr, throughput and eval metrics from a metrics.jsonl into one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_jsonl(jsonl)
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if any(k.startswith("eval_") for k in r)]
    loss_keys = sorted({k for r in train for k in r if k == "loss" or k.endswith("_loss")})
    # an evaluation's runtime and speed are not a measure of the model
    timing = ("_runtime", "_samples_per_second", "_steps_per_second")
    eval_keys = sorted({k for r in evals for k in r if k.startswith("eval_") and not k.endswith(timing)})
    unit = [k for k in eval_keys if all(0.0 <= r[k] <= 1.0 for r in evals if r.get(k) is not None)]
    other = [k for k in eval_keys if k not in unit]
    panels = [("training loss", loss_keys, train), ("learning rate", ["lr"], train)]
    if unit:
        panels.append(("evaluation", unit, evals))
    if other:
        panels.append(("evaluation (log scale)", other, evals))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (title, keys, data) in zip(np.atleast_1d(axes), panels):
        if "log scale" in title:
            ax.set_yscale("log")
        for k in keys:
            pts = [(r["step"], r[k]) for r in data if k in r and r[k] is not None]
            if pts:
                ax.plot(*zip(*pts), label=k, marker="o" if title == "evaluation" and len(pts) < 30 else None)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if keys:
            ax.legend(fontsize=8)
    return save_figure(fig, png)


def save_figure(fig: Any, png: str | os.PathLike) -> Path:
    """Write a matplotlib figure to ``png`` atomically (laid out tight, 100 dpi) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        with atomic_path(png) as tmp:
            fig.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(fig)
    return Path(png)
