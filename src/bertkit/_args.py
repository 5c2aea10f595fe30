"""Typed ranges for numeric flags and arguments, shared by the CLI and the Python API.

Each range is one object used twice: as an argparse ``type=`` (it parses the flag's text and
rejects an out-of-range value with the range in the message, so argparse prints
``argument --epochs: must be a number > 0, got '0'``), and through ``.check(name, value)`` in the
Python API, where the ``ValueError`` names the argument. Keeping both on one object means the CLI
and the API can never disagree on what a valid value is.

Settings are declared once, as dataclass fields carrying their help text and range
(:func:`setting`); :func:`add_dataclass_arguments` makes the argparse flags of a command from them,
:func:`from_namespace` builds the dataclass from the parsed flags, and :func:`check_fields` (called
from the dataclass's ``__post_init__``) applies the same ranges to Python callers.

A message names a setting as its caller wrote it (:func:`flag`, :func:`given`, :func:`switch`): the
flag (``--max-length 600``) inside a command, which runs under :func:`cli_names`, and the keyword
argument (``max_length=600``) for a Python caller.

This module is a leaf: it imports nothing of bertkit, and torch only when a device is checked.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "SEQ_LEN",
    "Range",
    "add_dataclass_arguments",
    "check_fields",
    "cli_names",
    "flag",
    "given",
    "said",
    "switch",
    "from_namespace",
    "redefault",
    "resume_settings",
    "setting",
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


_CLI_NAMES: contextvars.ContextVar[bool] = contextvars.ContextVar("bertkit_cli_names", default=False)


@contextlib.contextmanager
def cli_names() -> Iterator[None]:
    """Inside, messages name settings by their command-line flags (the CLI runs each command in this)."""
    token = _CLI_NAMES.set(True)
    try:
        yield
    finally:
        _CLI_NAMES.reset(token)


def under_cli() -> bool:
    """Whether a command is running (its messages name flags, and offer no Python-only keyword)."""
    return _CLI_NAMES.get()


def flag(name: str, cli: str | None = None) -> str:
    """The setting ``name`` as the caller knows it: its flag under a command (``cli``, else
    ``--name-with-dashes``), the keyword argument ``name`` from Python."""
    name = name.lstrip("-").replace("-", "_")  # a flag given for the name reads as its argument
    if _CLI_NAMES.get():
        return cli or "--" + name.replace("_", "-")
    return name


def given(name: str, shown: str, cli: str | None = None) -> str:
    """The setting ``name`` with its value as the caller gave it: ``--target 'joy'`` under a command,
    ``target='joy'`` from Python. ``shown`` is the value as the message prints it."""
    if _CLI_NAMES.get():
        return f"{flag(name, cli)} {shown}"
    return f"{flag(name)}={shown}"


def said(cli: str, value: Any = None, name: str | None = None) -> str:
    """:func:`flag` (or :func:`given`, with ``value``) for a message that knows the setting by its
    command-line flag ``cli``: the argument is ``name``, else the flag's own name."""
    name = name or cli
    return flag(name, cli) if value is None else given(name, str(value), cli)


def switch(name: str, cli: str | None = None) -> str:
    """A yes/no setting as the caller turns it on: ``--overwrite`` under a command, ``overwrite=True``
    from Python."""
    return flag(name, cli) if _CLI_NAMES.get() else f"{flag(name)}=True"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


class Range:
    """An integer or float range; call it on flag text (argparse) or ``.check(name, value)`` it (API)."""

    def __init__(
        self,
        kind: type,
        lo: float | None = None,
        hi: float | None = None,
        lo_open: bool = False,
        hi_open: bool = False,
        name: str | None = None,
        note: str = "",
    ) -> None:
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


def float_range(
    lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False, note: str = ""
) -> Range:
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
        raise ValueError(
            f"{name} must be cpu, cuda, cuda:N or mps, got {value!r}; available here: {', '.join(available_devices())}"
        )
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
        raise ValueError(
            f"{name} {value!r}: this machine has {len(gpus)} CUDA GPU(s) "
            f"(cuda:0..cuda:{len(gpus) - 1}); available: {', '.join(avail)}"
        )
    return text


def device(text: str) -> str:
    """argparse type for ``--device``: cpu, cuda, cuda:N or mps, and only one this machine has."""
    try:
        return check_device("--device", text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--device ")) from None


device.__name__ = "device"

DEVICE_HELP = "where the model runs: cpu (default), cuda, cuda:N or mps"


def add_device_flag(p: argparse.ArgumentParser) -> None:
    """``--device`` for a command that runs a model for inference (checked against this machine's devices)."""
    p.add_argument("--device", type=device, default=None, help=DEVICE_HELP)


# ---------------------------------------------------------------------------------------------
# Settings declared once as dataclass fields, turned into flags and checked for Python callers.

_MISSING: Any = dataclasses.MISSING


def setting(
    default: Any = _MISSING,
    *,
    help: str,
    type: Any = None,
    choices: Iterable[Any] | None = None,
    metavar: str | None = None,
    nargs: str | None = None,
    flag: str | tuple[str, ...] | None = None,
    cli: bool = True,
    check: Callable[[str, Any], Any] | None = None,
    group: str | None = None,
    same_on_resume: bool = True,
    default_factory: Any = _MISSING,
) -> Any:
    """A dataclass field with the metadata :func:`add_dataclass_arguments` and :func:`check_fields` read.

    ``help``: the flag's help (one text for the CLI and the docs). ``type``: a :class:`Range` (parses
    the flag and checks API values) or an argparse type function; ``check(name, value)`` checks API
    values when ``type`` has no ``.check``. ``choices``, ``metavar``, ``nargs``: as in argparse.
    ``flag``: the flag name (default ``--field-name``; ``--no-field-name`` for a bool that defaults to
    True, whose ``help`` then describes that ``--no-`` switch), or a tuple of it and its other names.
    ``cli=False``: a Python-only setting, no flag. ``group``: the --help section.
    ``same_on_resume=False``: the setting may change when a run is resumed (a longer budget, other
    logging); every other one must match the run resumed.
    """
    metadata = {
        "help": help,
        "type": type,
        "choices": tuple(choices) if choices is not None else None,
        "metavar": metavar,
        "nargs": nargs,
        "flag": flag,
        "cli": cli,
        "check": check,
        "group": group,
        "same_on_resume": same_on_resume,
    }
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def redefault(cls: type, name: str, default: Any = _MISSING, **changes: Any) -> Any:
    """``cls``'s field ``name`` again, with another default (and any :func:`setting` argument changed).

    A recipe that inherits the shared training arguments but wants, say, ``lr`` 1e-4 by default
    redeclares ``lr: float = redefault(TrainingArguments, "lr", 1e-4)``: same help and range.
    Without ``default`` the field becomes required (e.g. a command's ``--output``).
    """
    base = {f.name: f for f in dataclasses.fields(cls)}[name]
    return setting(default, **{**base.metadata, **changes})


def _is_bool(f: dataclasses.Field) -> bool:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return t.replace(" ", "") in ("bool", "bool|None")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not _MISSING:
        return f.default
    if f.default_factory is not _MISSING:
        return f.default_factory()
    return _MISSING


def refuse_unused(obj: Any, name: str, used: bool, why: str, typed: Iterable[str] = ()) -> None:
    """Refuse the setting ``name`` of the dataclass ``obj`` when it was given but the run would not use
    it (``used`` False): one line naming the flag, its value and ``why`` (which names the other flag).

    Given: it differs from its default, or is in ``typed`` (flags typed, even at their default).
    """
    field = {f.name: f for f in dataclasses.fields(obj)}[name]
    value = getattr(obj, name)
    if used or (name not in set(typed) and value == _default(field)):
        return
    cli = field.metadata.get("flag") or "--" + name.replace("_", "-")
    cli = cli if isinstance(cli, str) else cli[0]
    values = value if isinstance(value, (list, tuple)) else [value]
    parts = [f"{v:g}" if isinstance(v, float) else str(v) for v in values]
    # as typed: FILE FILE for nargs, LOW,HIGH for a pair; a switch alone
    as_typed = (" " if field.metadata.get("nargs") else ",").join(parts)
    if isinstance(value, bool):
        shown = flag(name, cli) if _CLI_NAMES.get() else f"{name}={value!r}"
    else:
        shown = given(name, as_typed if _CLI_NAMES.get() else repr(value), cli)
    raise ValueError(f"{shown} {why}: leave out {flag(name, cli)}")


def check_fields(obj: Any) -> None:
    """Check every field of the dataclass instance ``obj`` against its :func:`setting` range or choices.

    Raises ValueError naming the field, as the flag would. A field whose default is None may be None.
    Values a range converts exactly (a numpy integer for an int) are stored converted.
    """
    for f in dataclasses.fields(obj):
        md = f.metadata
        if "help" not in md:
            continue
        value = getattr(obj, f.name)
        if value is None and _default(f) is None:
            continue
        if md.get("choices") is not None and value not in md["choices"]:
            raise ValueError(f"{f.name} must be one of {', '.join(map(str, md['choices']))}, got {value!r}")
        rng = md.get("type")
        if isinstance(rng, Range):
            setattr(obj, f.name, rng.check(f.name, value))
        elif md.get("check") is not None:
            checked = md["check"](f.name, value)
            if checked is not None:
                setattr(obj, f.name, checked)


def _group(parser: argparse.ArgumentParser, title: str | None) -> Any:
    if title is None:
        return parser
    for g in parser._action_groups:
        if g.title == title:
            return g
    return parser.add_argument_group(title)


def add_dataclass_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    exclude: Iterable[str] = (),
    only: Iterable[str] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """Add a flag to ``parser`` for every field of the dataclass ``cls`` declared with :func:`setting`.

    The flag is ``--field-name`` (dest: the field name), with the field's help, range (``type``),
    choices, metavar and nargs; a field without a default is a required flag. A bool field that
    defaults to False (or None) is a switch ``--field-name``; one that defaults to True is
    ``--no-field-name``. Fields with ``cli=False``, those in ``exclude`` and, when ``only`` is given,
    those not in it are left out. ``defaults`` replaces some fields' defaults (e.g. None, meaning
    "as saved in the model", for a command that reads a trained model). Build the dataclass from the
    parsed namespace with :func:`from_namespace`.

    A new command's settings are one dataclass (typically inheriting
    :class:`bertkit.training.training_args.TrainingArguments`)::

        @dataclass(kw_only=True)
        class MyArguments(TrainingArguments):
            margin: float = setting(0.2, help="triplet margin", type=positive_float)

        def add_arguments(p): add_dataclass_arguments(p, MyArguments)
        def run(ns): my_recipe(from_namespace(MyArguments, ns))
    """
    excluded, wanted = set(exclude), set(only) if only is not None else None
    defaults = dict(defaults or {})
    for f in dataclasses.fields(cls):
        md = f.metadata
        if (
            "help" not in md
            or not md.get("cli", True)
            or f.name in excluded
            or (wanted is not None and f.name not in wanted)
        ):
            continue
        default = defaults.get(f.name, _default(f))
        target = _group(parser, md.get("group"))
        help_ = md["help"].replace("%", "%%")
        if not any(default is v for v in (None, False, True, _MISSING)) and default != "" and "default" not in help_:
            help_ += " (default: %(default)s)"
        name = "--" + f.name.replace("_", "-")
        if _is_bool(f):
            if default is True:
                target.add_argument(
                    md.get("flag") or "--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false", help=help_
                )
            else:
                target.add_argument(
                    md.get("flag") or name,
                    dest=f.name,
                    action="store_true",
                    default=None if default is _MISSING else default,
                    help=help_,
                )
            continue
        kw: dict[str, Any] = {"dest": f.name, "help": help_}
        for key in ("type", "choices", "metavar", "nargs"):
            if md.get(key) is not None:
                kw[key] = md[key]
        if default is _MISSING:
            kw["required"] = True
        else:
            kw["default"] = default
        flags = md.get("flag") or name  # a tuple: the flag and its other names
        target.add_argument(*((flags,) if isinstance(flags, str) else flags), **kw)


def from_namespace(cls: type, ns: argparse.Namespace, **overrides: Any) -> Any:
    """``cls(**fields)`` from the attributes of ``ns`` that are fields of the dataclass ``cls``."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    values = {k: v for k, v in vars(ns).items() if k in names}
    return cls(**{**values, **overrides})


def _resume_fields(obj: Any) -> list[dataclasses.Field]:
    """The fields of ``obj`` (a dataclass of :func:`setting` fields) that a resumed run must keep."""
    return [f for f in dataclasses.fields(obj) if "help" in f.metadata and f.metadata.get("same_on_resume", True)]


def _as_json(values: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(values, default=str))


def resume_defaults(obj: Any) -> dict[str, Any]:
    """The defaults of :func:`resume_settings`' fields, as JSON values: what a run recorded by an
    older bertkit, before a setting existed, ran at."""
    defaults = {f.name: _default(f) for f in _resume_fields(obj)}  # a default_factory runs once
    return _as_json({name: value for name, value in defaults.items() if value is not _MISSING})


def resume_settings(obj: Any) -> dict[str, Any]:
    """The settings of ``obj`` (a dataclass of :func:`setting` fields) that a resumed run must keep,
    as JSON values (they are compared with the ones recorded in the output folder)."""
    return _as_json({f.name: getattr(obj, f.name) for f in _resume_fields(obj)})
