"""Typed ranges for numeric flags and arguments, shared by the CLI and the Python API.

Each range is one object used twice: as an argparse ``type=`` (it parses the flag's text and
rejects an out-of-range value with the range in the message, so argparse prints
``argument --epochs: must be a number > 0, got '0'``), and through ``.check(name, value)`` in the
Python API, where the ``ValueError`` names the argument. Keeping both on one object means the CLI
and the API can never disagree on what a valid value is.

This module is a leaf: it imports nothing of bertkit, and torch only when a device is checked.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from typing import Any

__all__ = [
    "SEQ_LEN",
    "Range",
    "available_devices",
    "check_device",
    "check_threads",
    "device",
    "float_range",
    "fraction_0_1",
    "fraction_0_1_left_open",
    "fraction_0_1_open",
    "fraction_0_1_right_open",
    "int_range",
    "nonnegative_float",
    "nonnegative_int",
    "positive_float",
    "positive_int",
    "seed",
    "threads",
]


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


class Range:
    """An integer or float range; call it on flag text (argparse) or ``.check(name, value)`` it (API)."""

    def __init__(self, kind: type, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
                 hi_open: bool = False, name: str | None = None, note: str = "") -> None:
        self.kind, self.lo, self.hi, self.lo_open, self.hi_open, self.note = kind, lo, hi, lo_open, hi_open, note
        # argparse names the type in its fallback message; a readable name helps there too.
        self.__name__ = name or self.describe()

    def describe(self) -> str:
        """The range in words, e.g. ``an integer >= 1`` or ``a number in [0, 1)``."""
        what = "an integer" if self.kind is int else "a number"
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            text = f"{what} in {'(' if self.lo_open else '['}{_fmt(lo)}, {_fmt(hi)}{')' if self.hi_open else ']'}"
        elif lo is not None:
            text = f"{what} {'>' if self.lo_open else '>='} {_fmt(lo)}"
        elif hi is not None:
            text = f"{what} {'<' if self.hi_open else '<='} {_fmt(hi)}"
        else:
            text = what
        return f"{text} ({self.note})" if self.note else text

    def contains(self, value: float) -> bool:
        """Whether ``value`` (already a number) lies in the range; NaN and infinities never do."""
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return not (self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi))

    def __call__(self, text: str) -> Any:
        try:
            value = self.kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}") from None
        if not self.contains(value):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}")
        return value

    def check(self, name: str, value: Any, allow_none: bool = False) -> Any:
        """Return ``value`` if it is in range, else raise a ValueError naming ``name`` and the range."""
        if value is None and allow_none:
            return None
        ok_type = isinstance(value, int) if self.kind is int else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type:
            # numpy / torch scalars are fine when they convert exactly.
            try:
                converted = self.kind(value)
                ok_type = not isinstance(value, (bool, str, bytes)) and converted == value
            except (TypeError, ValueError, OverflowError):
                ok_type = False
            if not ok_type:
                raise ValueError(f"{name} must be {self.describe()}, got {value!r} ({type(value).__name__})")
            value = converted
        if not self.contains(value):
            raise ValueError(f"{name} must be {self.describe()}, got {value!r}")
        return value


def int_range(lo: int | None = None, hi: int | None = None, note: str = "") -> Range:
    """Integers in ``[lo, hi]`` (either end may be None)."""
    return Range(int, lo, hi, note=note)


def float_range(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
                note: str = "") -> Range:
    """Finite numbers between ``lo`` and ``hi``; ``*_open`` excludes that end."""
    return Range(float, lo, hi, lo_open, hi_open, note=note)


positive_int = Range(int, 1, name="positive_int")
nonnegative_int = Range(int, 0, name="nonnegative_int")
positive_float = Range(float, 0, lo_open=True, name="positive_float")
nonnegative_float = Range(float, 0, name="nonnegative_float")
fraction_0_1 = Range(float, 0, 1, name="fraction_0_1")
fraction_0_1_open = Range(float, 0, 1, True, True, name="fraction_0_1_open")
fraction_0_1_right_open = Range(float, 0, 1, False, True, name="fraction_0_1_right_open")
fraction_0_1_left_open = Range(float, 0, 1, True, False, name="fraction_0_1_left_open")

seed = Range(int, 0, 2**32 - 1, name="seed")
# What a learning rate's linear decay to 0 runs over: the step budget, or the time budget.
SCHEDULES = ("steps", "time")
SEQ_LEN = Range(int, 8, name="seq_len")  # [CLS] + [SEP]s + a few tokens: shorter cannot hold a pair

_threads = Range(int, 0, name="threads", note="0: torch's default")


def check_threads(name: str, value: Any) -> int:
    """A thread count: 0 (torch's default) or a positive number; says how many CPUs there are."""
    try:
        return _threads.check(name, value)
    except ValueError as e:
        raise ValueError(f"{e}; this machine has {os.cpu_count()} CPU(s)") from None


def threads(text: str) -> int:
    """argparse type for ``--threads``."""
    try:
        return _threads(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e}; this machine has {os.cpu_count()} CPU(s)") from None


threads.__name__ = "threads"

_DEVICE = re.compile(r"^(cpu|mps|cuda)(?::(\d+))?$")


def available_devices() -> list[str]:
    """Devices torch can use here: ``cpu``, then ``cuda:N`` for each GPU, then ``mps`` if present."""
    import torch

    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def check_device(name: str, value: Any) -> Any:
    """Return ``value`` if it names a device this machine has (``cpu``, ``cuda``, ``cuda:N``, ``mps``).

    A ``torch.device`` or None passes through unchanged. The error lists the devices available.
    """
    if value is None or type(value).__name__ == "device":
        return value
    text = str(value).strip().lower()
    m = _DEVICE.match(text)
    if not m:
        raise ValueError(f"{name} must be cpu, cuda, cuda:N or mps, got {value!r}; "
                         f"available here: {', '.join(available_devices())}")
    kind, index = m.group(1), m.group(2)
    avail = available_devices()
    if kind == "cpu":
        return text
    if kind == "mps":
        if "mps" not in avail:
            raise ValueError(f"{name} {value!r}: mps is not available here; available: {', '.join(avail)}")
        return text
    gpus = [d for d in avail if d.startswith("cuda:")]
    if not gpus:
        raise ValueError(f"{name} {value!r}: no CUDA GPU is available here; available: {', '.join(avail)}")
    if index is not None and int(index) >= len(gpus):
        raise ValueError(f"{name} {value!r}: this machine has {len(gpus)} CUDA GPU(s) "
                         f"(cuda:0..cuda:{len(gpus) - 1}); available: {', '.join(avail)}")
    return text


def device(text: str) -> str:
    """argparse type for ``--device``: cpu, cuda, cuda:N or mps, and only one this machine has."""
    try:
        return check_device("--device", text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--device ")) from None


device.__name__ = "device"
