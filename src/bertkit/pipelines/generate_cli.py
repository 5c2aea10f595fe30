"""`bertkit generate --model DIR "prompt"`: continue a prompt with a causal LM, printing tokens as they come."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]


def _ranged(kind: type, lo: float | None = None, hi: float | None = None, lo_open: bool = False):
    """argparse type: a number within [lo, hi] (or (lo, hi] with lo_open), the range named in the error."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        below = lo is not None and (value <= lo if lo_open else value < lo)
        if below or (hi is not None and value > hi):
            left = "(" if lo_open else "["
            raise argparse.ArgumentTypeError(
                f"{value} is outside {left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]")
        return value

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", help="text to continue")
    p.add_argument("--model", required=True, metavar="DIR", help="a GPT-2 folder (config.json, weights, tokenizer)")
    p.add_argument("--max-new-tokens", type=_ranged(int, 1), default=50)
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy search")
    p.add_argument("--temperature", type=_ranged(float, 0, None, lo_open=True), default=1.0)
    p.add_argument("--top-k", type=_ranged(int, 0), default=50, help="0 = off (sampling only)")
    p.add_argument("--top-p", type=_ranged(float, 0, 1, lo_open=True), default=1.0, help="nucleus mass (sampling only)")
    p.add_argument("--repetition-penalty", type=_ranged(float, 0, None, lo_open=True), default=1.0)
    p.add_argument("--no-repeat-ngram-size", type=_ranged(int, 0), default=0)
    p.add_argument("--seed", type=int, default=None, help="seed torch's sampler")
    p.add_argument("--truncation", action="store_true", help="cut a too-long prompt from the left")


def run(args: argparse.Namespace) -> int:
    from bertkit.pipelines.text_generation import generate_text

    if args.seed is not None:
        import torch

        torch.manual_seed(args.seed)

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    generate_text(args.model, args.prompt, write=write, max_new_tokens=args.max_new_tokens, do_sample=args.do_sample,
                  temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                  repetition_penalty=args.repetition_penalty, no_repeat_ngram_size=args.no_repeat_ngram_size,
                  truncation=args.truncation)
    return 0
