"""Plot a multi-phase pretraining run (e.g. examples/pretrain_mini.sh) on one time axis.

    python examples/plot_pretrain_phases.py runs/mini-real runs/mini-real-seq128 \\
        --labels "phase 1: seq 32" "phase 2: seq 128" --output docs/img/pretrain_mini.png

Each folder's metrics.jsonl is placed after the previous phase's training minutes. Left: held-out
MLM accuracy (each phase is evaluated at its own sequence length; the dashed line is the 30%
target). Right: training MLM loss, smoothed over 50 logged steps.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def _rows(folder: Path) -> list[dict]:
    path = folder / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"plot_pretrain_phases: {path} not found")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument("--labels", nargs="+")
    p.add_argument("--target", type=float, default=0.30)
    p.add_argument("--output", type=Path, required=True)
    args = p.parse_args()
    labels = args.labels or [str(f) for f in args.folders]
    if len(labels) != len(args.folders):
        raise SystemExit(f"plot_pretrain_phases: {len(args.folders)} folders but {len(labels)} labels")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    offset = 0.0
    for folder, label in zip(args.folders, labels):
        rows = _rows(folder)
        evals = [r for r in rows if "eval_mlm_accuracy" in r]
        train = [r for r in rows if "mlm_loss" in r and "train_seconds" in r]
        if evals:
            x = [offset + r["train_seconds"] / 60 for r in evals]
            acc_ax.plot(x, [100 * r["eval_mlm_accuracy"] for r in evals], marker="o", ms=3, label=label)
        if train:
            k = 50
            losses = [r["mlm_loss"] for r in train]
            smooth = [sum(losses[max(0, i - k + 1) : i + 1]) / (i + 1 - max(0, i - k + 1)) for i in range(len(losses))]
            loss_ax.plot([offset + r["train_seconds"] / 60 for r in train], smooth, label=label)
        seconds = [r["train_seconds"] for r in rows if "train_seconds" in r]
        offset += max(seconds, default=0.0) / 60
    acc_ax.axhline(100 * args.target, color="grey", ls="--", lw=1, label=f"target {100 * args.target:.0f}%")
    acc_ax.set(title="held-out MLM accuracy", xlabel="training minutes", ylabel="%")
    loss_ax.set(title="training MLM loss (smoothed)", xlabel="training minutes", ylabel="cross-entropy")
    for ax in (acc_ax, loss_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(f".{args.output.name}.tmp{os.getpid()}.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, args.output)
    print(args.output)


if __name__ == "__main__":
    main()
