"""ModernBERT on long texts on this CPU: bertkit against transformers, tokens per second and peak memory.

One random ModernBERT of ModernBERT-base's layout at a quarter of its width (hidden 256, 4 heads of
64, 6 layers: global attention in layers 0 and 3, a 128-token window in the others, GeGLU 384 wide)
is saved once; both libraries load that folder. Each (length, batch, dtype, library) runs in its own
subprocess, so that its peak resident memory (``resource.getrusage``'s ``ru_maxrss``: torch's
allocations are invisible to tracemalloc) is its own: one warm-up forward, then the median of
``--repeats`` timed forwards under ``torch.inference_mode``.

* one text of N tokens, and a batch of texts of mixed lengths padded to N (N, 3N/4, N/2, N/4; two
  texts, N and N/2, at 8,192);
* fp32 and bf16: bertkit through ``prepare_for_inference``, transformers' model cast with ``.to()``,
  with its default attention (SDPA);
* tokens/s counts real tokens; "peak" is the process's peak RSS, "+fwd" its rise during the forwards
  (the rise above the loaded model and libraries).

Where the two differ: transformers' local layers attend over all N keys under an (N, N) sliding-window
mask, and run padded batches padded; bertkit's local layers attend in blocks of queries against their
window of keys (no N x N scores or mask), and a padded batch runs its per-token work on the real tokens.

    python benchmarks/long_text.py [--lengths 512 2048 8192] [--dtypes fp32 bf16] [--repeats 3] [--threads N]

The figures are this machine's at the time of the run: print them with the CPU line above them, and
say when the machine was shared.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

CONFIG = dict(
    vocab_size=1024,
    hidden_size=256,
    num_attention_heads=4,
    num_hidden_layers=6,
    intermediate_size=384,
    local_attention=128,
    global_attn_every_n_layers=3,
    max_position_embeddings=8192,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
)


def batch_lengths(n: int, kind: str) -> list[int]:
    """The text lengths of one run: one text, or a padded batch of mixed lengths."""
    if kind == "one":
        return [n]
    return [n, n // 2] if n > 2048 else [n, 3 * n // 4, n // 2, n // 4]


def _inputs(lengths: list[int]) -> dict:
    import torch

    g = torch.Generator().manual_seed(0)
    n = max(lengths)
    ids = torch.randint(3, CONFIG["vocab_size"], (len(lengths), n), generator=g)
    mask = torch.zeros(len(lengths), n, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    ids[mask == 0] = CONFIG["pad_token_id"]
    return {"input_ids": ids, "attention_mask": mask}


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def worker(folder: str, library: str, n: int, kind: str, dtype: str, repeats: int) -> dict:
    """Load the model with ``library``, run the forwards, return the figures (in the subprocess)."""
    import torch

    if library == "bertkit":
        from bertkit.inference import prepare_for_inference
        from bertkit.modeling.modernbert import ModernBertModel

        model = prepare_for_inference(ModernBertModel.from_pretrained(folder), dtype)
    else:
        import transformers

        model = transformers.ModernBertModel.from_pretrained(folder, attn_implementation="sdpa").eval()
        model.to(torch.bfloat16 if dtype == "bf16" else torch.float32)
    lengths = batch_lengths(n, kind)
    inputs = _inputs(lengths)
    before = _maxrss_mb()
    times = []
    with torch.inference_mode():
        model(**inputs)
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(**inputs)
            times.append(time.perf_counter() - t0)
    peak = _maxrss_mb()
    seconds = statistics.median(times)
    return {"tokens_per_s": sum(lengths) / seconds, "seconds": seconds, "peak_mb": peak, "rise_mb": peak - before}


def _run(folder: str, library: str, n: int, kind: str, dtype: str, repeats: int, threads: int | None) -> dict:
    cmd = [sys.executable, __file__, "--worker", folder, library, str(n), kind, dtype, str(repeats)]
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{library} n={n} {kind} {dtype} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--batches", nargs="+", default=["one", "batch"], choices=["one", "batch"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of each run (default: torch's)")
    args = p.parse_args(argv)
    if max(args.lengths) > CONFIG["max_position_embeddings"]:
        raise SystemExit(
            f"--lengths: {max(args.lengths)} exceeds max_position_embeddings={CONFIG['max_position_embeddings']}"
        )

    import torch

    from bertkit._cpu import describe_cpu
    from bertkit.modeling.modernbert import ModernBertConfig, ModernBertModel

    print(f"# {describe_cpu()}; torch {torch.__version__}; {os.cpu_count()} CPUs visible; threads {args.threads}")
    print(f"# ModernBERT {json.dumps({k: CONFIG[k] for k in list(CONFIG)[:8]})}; medians of {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        ModernBertModel(ModernBertConfig(**CONFIG)).save_pretrained(tmp)
        for n in args.lengths:
            for kind in args.batches:
                for dtype in args.dtypes:
                    ours = _run(tmp, "bertkit", n, kind, dtype, args.repeats, args.threads)
                    theirs = _run(tmp, "transformers", n, kind, dtype, args.repeats, args.threads)
                    lengths = batch_lengths(n, kind)
                    print(
                        f"N={n:5d} {kind:5s} ({len(lengths)} texts, {sum(lengths):6d} tokens) {dtype}: "
                        f"bertkit {ours['tokens_per_s']:8.0f} tok/s peak {ours['peak_mb']:6.0f} MB "
                        f"(+{ours['rise_mb']:5.0f} fwd) | transformers {theirs['tokens_per_s']:8.0f} tok/s "
                        f"peak {theirs['peak_mb']:6.0f} MB (+{theirs['rise_mb']:5.0f} fwd) | "
                        f"speed {ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}x, "
                        f"peak {ours['peak_mb'] / theirs['peak_mb']:.2f}x",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        folder, library, n, kind, dtype, repeats = sys.argv[2:8]
        print(json.dumps(worker(folder, library, int(n), kind, dtype, int(repeats))))
        sys.exit(0)
    sys.exit(main())
