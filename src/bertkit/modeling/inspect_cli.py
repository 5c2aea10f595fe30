"""`bertkit inspect MODEL`: the module tree, then parameters per component with totals and shares."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["add_arguments", "run", "format_table"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        help="model folder, model id in the local HF cache, or a preset (tiny, mini, small, medium, base, large)",
    )
    parser.add_argument(
        "--class",
        dest="model_class",
        default=None,
        help="model class (default: config.json's architectures, else the family's bare model)",
    )
    parser.add_argument("--no-tree", action="store_true", help="print only the parameter table")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")


def format_table(model) -> str:
    """The per-component table: parameters, trainable, share, with group subtotals and a total."""
    from .inspect import _base_prefix, _group, parameter_table

    rows = parameter_table(model)
    prefix = _base_prefix(model)
    total = sum(r.total for r in rows)
    trainable = sum(r.trainable for r in rows)
    width = max([len("component")] + [len(r.name) for r in rows]) + 2
    header = f"{'component':<{width}}{'parameters':>14}{'trainable':>14}{'share':>9}"
    lines = [header, "-" * len(header)]
    groups: dict[str, list[int]] = {}
    for r in rows:
        lines.append(f"{r.name:<{width}}{r.total:>14,}{r.trainable:>14,}{100 * r.share:>8.2f}%")
        g = groups.setdefault(_group(r.name, prefix), [0, 0])
        g[0] += r.total
        g[1] += r.trainable
    lines.append("-" * len(header))
    for name, (t, tr) in groups.items():
        lines.append(f"{name + ' (total)':<{width}}{t:>14,}{tr:>14,}{100 * t / max(total, 1):>8.2f}%")
    lines.append("-" * len(header))
    lines.append(f"{'total':<{width}}{total:>14,}{trainable:>14,}{100.0:>8.2f}%")
    return "\n".join(lines)


def _load(spec: str, class_name: str | None):
    """A preset (BERT) or a folder of any registered family, as ``class_name`` or the folder's class."""
    import importlib

    from . import PRESETS, BertConfig, registry
    from .auto import AutoConfig
    from .base import PreTrainedModel

    preset = spec in PRESETS and not Path(spec).exists()
    config = BertConfig.from_preset(spec) if preset else AutoConfig.from_pretrained(spec)
    fam = registry.family(config.model_type)
    known = [fam.class_name(t) for t in fam.models]
    name = class_name or next((a for a in (config.architectures or []) if a in known), fam.class_name("base"))
    cls = getattr(importlib.import_module(fam.module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, PreTrainedModel) and cls.config_class is type(config)):
        choices = ", ".join(dict.fromkeys(known))
        raise ValueError(f"unknown {fam.model_type} model class {name!r}; choose one of {choices}")
    return cls(config) if preset else cls.from_pretrained(spec)


def run(args: argparse.Namespace) -> int:
    model = _load(args.model, args.model_class)
    if args.json:
        from .inspect import parameter_table

        print(json.dumps([r.__dict__ for r in parameter_table(model)], indent=2))
        return 0
    if not args.no_tree:
        print(model)
        print()
    print(f"{type(model).__name__}: {sum(p.numel() for p in model.parameters()):,} parameters")
    print(format_table(model))
    return 0
