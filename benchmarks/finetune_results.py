"""Real-data fine-tuning results from the real MiniLM checkpoint, with wall time on this machine.

    python benchmarks/finetune_results.py [--only bbcnews,polarity,wnut16] [--out runs/results]
                                          [--model minilm | DIR] [--no-freeze]

Each task runs through bertkit's public finetune API on the seeded 80/20 splits of the assets and
prints one line: model, task, main metric on the held-out 20% after the last epoch (and, where an
earlier epoch scored higher there, that best, which was chosen on the held-out split itself),
epochs, and wall time (training + final evaluation). ``--model`` takes another checkpoint folder
(a pretrained or a random-init `mini`, say) to compare with MiniLM under the same settings.
Settings are modest on purpose: the CPU is small (2 cores), so one or two epochs only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bertkit.assets import asset_path  # noqa: E402
from bertkit.tasks import finetune  # noqa: E402
from bertkit.tasks.api import FinetuneResult  # noqa: E402

RUNS = {
    # name: (task, train, test, metric, settings)
    "bbcnews": (
        "text-classification",
        "bbcnews-train",
        "bbcnews-test",
        "accuracy",
        dict(epochs=2, max_length=128, batch_size=16, lr=1e-4, freeze="embeddings,encoder.layer.0-1"),
    ),
    "polarity": (
        "text-classification",
        "polarity-train",
        "polarity-test",
        "accuracy",
        dict(epochs=2, max_length=64, batch_size=32, lr=1e-4),
    ),
    "wnut16": (
        "token-classification",
        "wnut16-train",
        "wnut16-test",
        "f1",
        dict(epochs=4, max_length=64, batch_size=16, lr=1e-4),
    ),
}


def epoch_rows(res: FinetuneResult, metric: str) -> list[dict]:
    """The evaluation rows after each epoch, in order. finetune keeps its best epoch on the file it
    validates on, here the test split, so the score to report is the last row's: the best one was
    chosen on test."""
    return [r for r in res.history if f"eval_{metric}" in r and "epoch" in r]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(RUNS))
    ap.add_argument("--out", default="runs/results")
    ap.add_argument("--model", default="minilm", help="an asset name or a model folder (default: minilm)")
    ap.add_argument("--no-freeze", action="store_true", help="train every layer (bbcnews freezes the lowest two)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--overwrite", action="store_true", help="replace earlier runs under --out")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    lines = []
    for name in args.only.split(","):
        task, tr, te, metric, kw = RUNS[name]
        if args.no_freeze:
            kw = {k: v for k, v in kw.items() if k != "freeze"}
        model = Path(args.model) if Path(args.model).is_dir() else asset_path(args.model)
        t0 = time.perf_counter()
        res = finetune(
            task,
            model,
            asset_path(tr),
            Path(args.out) / name,
            asset_path(te),
            seed=0,
            progress=not args.no_progress,
            overwrite=args.overwrite,
            **kw,
        )
        wall = time.perf_counter() - t0
        last = epoch_rows(res, metric)[-1]
        extra = ", ".join(f"{k} {last[f'eval_{k}']:.4f}" for k in res.metrics if k != metric and f"eval_{k}" in last)
        best = (
            f"; best epoch on test {res.metrics[metric]:.4f}" if res.metrics[metric] != last[f"eval_{metric}"] else ""
        )
        line = (
            f"{Path(args.model).name:12s} {name:9s} {task:21s} {metric} {last[f'eval_{metric}']:.4f}  ({extra}{best})  "
            f"epochs {kw['epochs']}, max_length {kw['max_length']}, batch {kw['batch_size']}"
            f"{', frozen ' + kw['freeze'] if kw.get('freeze') else ''}, "
            f"train {res.train_seconds:.0f}s, wall {wall:.0f}s"
        )
        print(line, flush=True)
        lines.append(line)
        with open(Path(args.out) / "results.txt", "a", encoding="utf-8") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
