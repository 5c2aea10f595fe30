"""`bertkit generate --model DIR "prompt"`: continue a prompt with a causal LM, printing tokens as they come."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit import _args as A

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", help="text to continue")
    p.add_argument(
        "--model",
        required=True,
        metavar="DIR",
        help="a GPT-2 folder (config.json, weights, tokenizer) or cached model id",
    )
    p.add_argument("--max-new-tokens", type=A.positive_int, default=50)
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy search")
    p.add_argument("--temperature", type=A.positive_float, default=1.0)
    p.add_argument("--top-k", type=A.nonnegative_int, default=50, help="0 = off (sampling only)")
    p.add_argument("--top-p", type=A.fraction_0_1_left_open, default=1.0, help="nucleus mass (sampling only)")
    p.add_argument("--repetition-penalty", type=A.positive_float, default=1.0)
    p.add_argument("--no-repeat-ngram-size", type=A.nonnegative_int, default=0)
    p.add_argument("--seed", type=A.seed, default=None, help="seed torch's sampler")
    p.add_argument("--truncation", action="store_true", help="cut a too-long prompt from the left")


def _check_causal_lm(model: str) -> Path:
    """The folder of ``--model`` (a folder or a cached model id), which must hold a GPT-2: say so in
    one line for anything else (a BERT encoder, a file, an id not in the cache)."""
    from bertkit._text import read_json
    from bertkit.hub import resolve_model_arg

    folder = resolve_model_arg(model)
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"--model {folder}: not a model folder (no config.json)")
    cfg = read_json(cfg_file)
    kind = cfg.get("model_type") if isinstance(cfg, dict) else None
    if kind != "gpt2":
        raise ValueError(
            f"--model {folder} is a {kind or 'unknown'} model, not a causal language model: "
            "`bertkit generate` needs a GPT-2 folder (for a masked LM use `bertkit fill-mask`)"
        )
    return folder


def run(args: argparse.Namespace) -> int:
    from bertkit.pipelines.text_generation import generate_text

    folder = _check_causal_lm(args.model)
    if args.seed is not None:
        import torch

        torch.manual_seed(args.seed)

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    generate_text(
        str(folder),
        args.prompt,
        write=write,
        max_new_tokens=args.max_new_tokens,
        do_sample=args.do_sample,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        no_repeat_ngram_size=args.no_repeat_ngram_size,
        truncation=args.truncation,
    )
    return 0
