"""Time of integrated gradients on a 512-token input on CPU (MiniLM + a classification head).

The real all-MiniLM-L6-v2 encoder with a seeded random 2-label head explains the first 512 tokens of
the real Wikipedia text: 50 Gauss-Legendre steps, run in batches of ``--batch-size`` interpolation
steps (one backward pass per batch). Prints the wall time, the completeness residual and the
threads used.

    OMP_NUM_THREADS=1 python benchmarks/explain_attributions.py [--tokens 512] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--batch-size", type=int, nargs="+", default=[8])
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()

    from bertkit.assets import asset_path
    from bertkit.explain.attributions import attribute_ids
    from bertkit.modeling import BertForSequenceClassification
    from bertkit.tokenization import BertTokenizer

    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(asset_path("minilm"), num_labels=2).eval()
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    enc = tok(
        " ".join(asset_path("wiki").read_text(encoding="utf-8").split()[:1000]), truncation=True, max_length=args.tokens
    )
    n = len(enc["input_ids"])
    for bs in args.batch_size:
        t0 = time.perf_counter()
        (ig,), _ = attribute_ids(
            model,
            tok,
            enc["input_ids"],
            enc["token_type_ids"],
            enc.word_ids(),
            ("integrated-gradients",),
            steps=args.steps,
            batch_size=bs,
        )
        s = time.perf_counter() - t0
        print(
            f"integrated gradients, MiniLM-L6 + head, {n} tokens, {args.steps} steps, batch {bs}, "
            f"{torch.get_num_threads()} threads: {s:.1f} s  residual {ig.residual:.2e} "
            f"(f(x) - f(baseline) = {ig.f_x - ig.f_baseline:.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
