"""What the CPU can do, read once from /proc/cpuinfo (Linux): it picks the inference precision and the
attention kernel. A leaf module, so that the models can read it when they are imported.

``BERTKIT_HIDE_CPU_FLAGS`` (names from :data:`FLAGS_OF_INTEREST`, separated by spaces or commas) makes
bertkit treat those flags as absent, so one machine can run the paths another CPU kind takes. Hiding
a flag changes only bertkit's choices; hold oneDNN and ATen to the same kind with their own variables
(``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``), as ``make test-cpu-kinds`` does.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = [
    "FLAGS_OF_INTEREST",
    "HIDE_FLAGS_ENV",
    "attention_row_multiple",
    "cpu_flags",
    "describe_cpu",
    "gemm_attention_max_len",
    "has_fast_bf16",
]

# AMX tiles give bf16 GEMMs several times fp32's speed; AVX-512 BF16 about twice; below that bf16 is emulated.
# AMX-INT8 and AVX-512 VNNI are the int8 dot-product instructions.
FLAGS_OF_INTEREST = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_vnni", "avx512f", "avx2")
HIDE_FLAGS_ENV = "BERTKIT_HIDE_CPU_FLAGS"


@functools.cache
def _read_flags(path: str) -> frozenset[str]:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags") and ":" in line:
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def hidden_flags() -> frozenset[str]:
    """The flags ``BERTKIT_HIDE_CPU_FLAGS`` hides (ValueError naming the variable for a name it does not know)."""
    names = frozenset(os.environ.get(HIDE_FLAGS_ENV, "").replace(",", " ").split())
    unknown = sorted(names - set(FLAGS_OF_INTEREST))
    if unknown:
        raise ValueError(
            f"{HIDE_FLAGS_ENV}: {', '.join(map(repr, unknown))} is not a flag bertkit reads; "
            f"use any of {', '.join(FLAGS_OF_INTEREST)}"
        )
    return names


def cpu_flags(path: str | None = None) -> dict[str, bool]:
    """``{flag: present}`` for the flags that matter to inference speed: this machine's (all False off
    Linux, and False for any flag ``BERTKIT_HIDE_CPU_FLAGS`` hides), or those a cpuinfo file at ``path`` lists."""
    if path is not None:
        flags = _read_flags(path)
    else:
        flags = _read_flags("/proc/cpuinfo") - hidden_flags()
    return {f: f in flags for f in FLAGS_OF_INTEREST}


def has_fast_bf16(flags: dict[str, bool] | None = None) -> bool:
    """True when bf16 matrix products run natively (AMX or AVX-512 BF16)."""
    flags = cpu_flags() if flags is None else flags
    return bool(flags.get("amx_bf16") or flags.get("avx512_bf16"))


def describe_cpu(flags: dict[str, bool] | None = None) -> str:
    """One line such as ``amx_bf16=no amx_tile=no avx512_bf16=yes avx512f=yes avx2=yes``, which names the
    flags ``BERTKIT_HIDE_CPU_FLAGS`` hides, so a printed benchmark says it ran another CPU kind's paths."""
    flags = cpu_flags() if flags is None else flags
    line = " ".join(f"{k}={'yes' if v else 'no'}" for k, v in flags.items())
    hidden = hidden_flags()
    return f"{line} (hidden by {HIDE_FLAGS_ENV}: {' '.join(sorted(hidden))})" if hidden else line


def _has_amx(flags: dict[str, bool]) -> bool:
    return bool(flags.get("amx_bf16") and flags.get("amx_tile"))


def gemm_attention_max_len(flags: dict[str, bool] | None = None) -> int:
    """The longest sequence that bf16 inference attends with two batched GEMMs and a float32 softmax;
    longer ones take SDPA's flash kernel (``benchmarks/attention.py`` times both on this CPU).

    With AVX-512 BF16 alone the GEMMs took about 30% less attention time up to 128 keys. With AMX,
    SDPA's kernel drives the tiles and wins on lengths that fill whole 16-row tiles (32, 48 and 64
    keys: 1.09, 1.47 and 1.26 ms against 1.51, 1.77 and 2.03 ms for the GEMMs, batches of about 900
    tokens), while the GEMMs keep a small lead at 16 (1.25 against 1.36 ms). With the groups padded
    to multiples of 16 there (:func:`attention_row_multiple`), SDPA above 16 keys took the MiniLM
    sentence-embedding pipeline from 483 to 446 ms a pass on two threads (medians of 11, interleaved).
    """
    flags = cpu_flags() if flags is None else flags
    return 16 if _has_amx(flags) else 128


def attention_row_multiple(flags: dict[str, bool] | None = None) -> int:
    """What bf16/fp32 inference rounds each attention group's padded length up to: 16 with AMX, whose
    tiles hold 16 rows and whose SDPA kernel runs whole tiles fastest, else 8 (AVX-512's register
    tiles for the batched GEMMs). The extra slots are masked keys and dropped queries."""
    flags = cpu_flags() if flags is None else flags
    return 16 if _has_amx(flags) else 8
