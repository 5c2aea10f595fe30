"""Greedy generation speed: bertkit's GPT-2 ``generate`` against transformers' on the same weights.

    python benchmarks/generate.py [--zh runs/gpt2-zh] [--new-tokens 128] [--repeats 3]

Models: a random-initialised GPT-2 of 6 layers x 512 (saved by transformers, loaded by both), and,
with ``--zh``, the Chinese GPT-2 that ``bertkit pretrain-clm`` trained (its context is shorter, so
it generates up to its n_positions). Prompts are real sentences, batch 1 and batch 8 (left-padded).
Both libraries run greedy search in one process, interleaved repeat by repeat; each line gives
medians of new tokens per second and the ratio, after checking that both produced the same tokens.
EOS is disabled so every run generates the full number of tokens. The second line of each pair
compares bertkit with and without its KV cache (``--nocache-new-tokens`` new tokens, since without a
cache every step re-runs the whole sequence). With ``--bf16`` a third line times both libraries
with the same weights cast to bf16 and gives the share of new tokens that still agree with each
library's own fp32 greedy output (up to each row's first difference).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from bertkit.assets import asset_path
from bertkit.modeling.gpt2 import GPT2LMHeadModel
from bertkit.tokenization import BertTokenizer


def cpu_flags() -> str:
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    return " ".join(f for f in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2") if f in flags) or "none"


def prompts(tok: BertTokenizer, source: str, batch: int, max_tokens: int) -> dict[str, torch.Tensor]:
    with open(asset_path(source), encoding="utf-8") as f:
        lines = [line.strip().split(",", 1)[-1] for line in itertools.islice(f, 1, 200) if line.strip()]
    enc = tok(lines[:batch], truncation=True, max_length=max_tokens, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    n = ids.shape[1]
    left_ids, left_mask = torch.zeros_like(ids), torch.zeros_like(mask)
    for i, k in enumerate(mask.sum(1).tolist()):  # left padding, as generation needs
        left_ids[i, n - k :], left_mask[i, n - k :] = ids[i, :k], 1
    return {"input_ids": left_ids, "attention_mask": left_mask}


def timed(fn) -> tuple[float, torch.Tensor]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def agreement(a: torch.Tensor, b: torch.Tensor, prompt_len: int) -> float:
    """Share of new tokens that agree before each row's first difference (greedy paths diverge for good)."""
    new_a, new_b = a[:, prompt_len:], b[:, prompt_len:]
    same = (new_a == new_b).int().cumprod(dim=1)
    return float(same.sum()) / new_a.numel()


def bench(
    name: str,
    folder: Path,
    tok: BertTokenizer,
    source: str,
    new_tokens: int,
    repeats: int,
    nocache_tokens: int,
    bf16: bool,
) -> list[str]:
    ref = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    ours = GPT2LMHeadModel.from_pretrained(folder)
    models = [ours, ref]
    if bf16:  # the same weights cast to bf16 in both libraries
        ours_bf = GPT2LMHeadModel.from_pretrained(folder, dtype="bf16")
        ref_bf = transformers.GPT2LMHeadModel.from_pretrained(folder, dtype=torch.bfloat16).eval()
        models += [ours_bf, ref_bf]
    for m in models:
        if hasattr(m, "generation_config"):
            m.generation_config.eos_token_id = None
            m.generation_config.pad_token_id = 0
        else:
            m.config.eos_token_id = None
    limit = ours.config.n_positions
    lines = []
    for batch in (1, 8):
        inputs = prompts(tok, source, batch, 16)
        new = min(new_tokens, limit - inputs["input_ids"].shape[1])
        kw = {**inputs, "max_new_tokens": new, "pad_token_id": 0}
        nc_new = min(new, nocache_tokens)
        runs = {
            "ours": lambda kw=kw: ours.generate(**kw),
            "ref": lambda kw=kw: ref.generate(**kw, do_sample=False),
            "nocache": lambda kw=kw, n=nc_new: ours.generate(**{**kw, "use_cache": False, "max_new_tokens": n}),
            "cache_nc": lambda kw=kw, n=nc_new: ours.generate(**{**kw, "max_new_tokens": n}),
        }
        if bf16:
            runs["ours_bf"] = lambda kw=kw: ours_bf.generate(**kw)
            runs["ref_bf"] = lambda kw=kw: ref_bf.generate(**kw, do_sample=False)
        with torch.inference_mode():
            outs = {k: timed(fn)[1] for k, fn in runs.items()}  # warm-up, and the tokens
            times: dict[str, list[float]] = {k: [] for k in runs}
            for _ in range(repeats):  # interleaved, so that a change of load hits every path alike
                for k, fn in runs.items():
                    times[k].append(timed(fn)[0])
        m = {k: statistics.median(t) for k, t in times.items()}
        tps = batch * new
        n_prompt = inputs["input_ids"].shape[1]
        lines.append(
            f"{name:28s} batch {batch}  {new} new tokens  bertkit {tps / m['ours']:8.1f} tok/s  "
            f"transformers {tps / m['ref']:8.1f} tok/s  ratio {m['ref'] / m['ours']:.2f}x  "
            f"same tokens: {'yes' if torch.equal(outs['ours'], outs['ref']) else 'NO'}"
        )
        lines.append(
            f"{name:28s} batch {batch}  {nc_new} new tokens  bertkit KV cache "
            f"{batch * nc_new / m['cache_nc']:8.1f} tok/s  no cache {batch * nc_new / m['nocache']:8.1f} "
            f"tok/s  cache speed-up {m['nocache'] / m['cache_nc']:.2f}x"
        )
        if bf16:
            lines.append(
                f"{name:28s} batch {batch}  {new} new tokens  bf16 weights: bertkit "
                f"{tps / m['ours_bf']:8.1f} tok/s  transformers {tps / m['ref_bf']:8.1f} tok/s  "
                f"ratio {m['ref_bf'] / m['ours_bf']:.2f}x  (bertkit bf16 / transformers fp32 "
                f"{m['ref'] / m['ours_bf']:.2f}x)  agreement with fp32 greedy: bertkit "
                f"{agreement(outs['ours_bf'], outs['ours'], n_prompt):.0%}, transformers "
                f"{agreement(outs['ref_bf'], outs['ref'], n_prompt):.0%}"
            )
        for line in lines[-(3 if bf16 else 2) :]:
            print(line, flush=True)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zh", default=None, help="folder of a Chinese GPT-2 trained by `bertkit pretrain-clm`")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--nocache-new-tokens",
        type=int,
        default=128,
        help="new tokens for the cache / no-cache comparison (no cache costs O(n^2))",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="also time both libraries with the weights in bf16 (faster, not token-exact)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"cpu flags: {cpu_flags()}; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads; greedy search, medians of {args.repeats}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(n_layer=6, n_embd=512, n_head=8, bos_token_id=None, eos_token_id=None)
        transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp)
        bench(
            "gpt2 6x512 (random init)",
            Path(tmp),
            BertTokenizer.from_pretrained(asset_path("minilm")),
            "polarity-test",
            args.new_tokens,
            args.repeats,
            args.nocache_new_tokens,
            args.bf16,
        )
    if args.zh:
        bench(
            "gpt2-zh (pretrain-clm)",
            Path(args.zh),
            BertTokenizer.from_pretrained(args.zh),
            "news-zh",
            args.new_tokens,
            args.repeats,
            args.nocache_new_tokens,
            args.bf16,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
