"""Fuzz bertkit's tokenizer against the reference (transformers' BertTokenizerFast) on random text.

Generates ``--strings`` strings with hypothesis (the same strategy as tests/test_tokenizer_fuzz.py,
which runs a smaller slice in ``make test``) and tokenizes each one with every configuration of
the parity tests (uncased English; Chinese lower-cased and cased), comparing ids, offsets, type
ids, special-token masks, word ids and decoding. Prints the strings tried, the mismatches and the
crashes (an exception inside bertkit), with the first few failing strings.

    python benchmarks/fuzz_tokenizer.py --strings 100000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def cpu_flags() -> str:
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    found = [f for f in ("amx", "avx512_bf16", "avx512f", "avx2") if f in flags or f + "_tile" in flags]
    return " ".join(found) or "none"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strings", type=int, default=100_000, help="strings to generate (default 100,000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", type=int, default=5, help="failing strings to print")
    args = p.parse_args(argv)

    from hypothesis import HealthCheck, Phase, given, seed, settings
    from test_tokenizer_fuzz import _check, texts
    from test_tokenizer_parity import CONFIGS, ours, reference

    for asset, lower in CONFIGS:  # build (and cache) every tokenizer before timing
        reference(asset, lower), ours(asset, lower)
    counts = {"strings": 0, "mismatches": 0, "crashes": 0}
    failures: list[tuple[str, str, str]] = []

    @seed(args.seed)
    @settings(
        max_examples=args.strings,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(text=texts)
    def run(text: str) -> None:
        counts["strings"] += 1
        for asset, lower in CONFIGS:
            try:
                ours(asset, lower)(text, return_offsets_mapping=True, return_special_tokens_mask=True)
            except Exception as e:  # noqa: BLE001 - a crash is what is being counted
                counts["crashes"] += 1
                failures.append(("crash", f"{asset}/{lower}", f"{text!r}: {type(e).__name__}: {e}"))
                return
            try:
                _check(asset, lower, text)
            except AssertionError:
                counts["mismatches"] += 1
                failures.append(("mismatch", f"{asset}/{lower}", repr(text)))
                return

    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    print(f"cpu flags: {cpu_flags()}")
    print(f"configurations: {', '.join(f'{a} lower={lo}' for a, lo in CONFIGS)}")
    print(
        f"strings tried: {counts['strings']:,}  mismatches: {counts['mismatches']}  "
        f"crashes: {counts['crashes']}  ({seconds:.0f}s)"
    )
    for kind, where, what in failures[: args.show]:
        print(f"  {kind} [{where}] {what}")
    return 1 if counts["mismatches"] or counts["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
