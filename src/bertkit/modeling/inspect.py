"""Parameter counts per component, freezing by name, as the seeds do by hand, and dropout set at once.

Components are the natural BERT pieces: ``embeddings``, each ``encoder.layer.N``, ``pooler`` and each
head (``cls``, ``classifier``, ``qa_outputs``), with the ``bert.`` prefix on head models. Tied
parameters (the MLM decoder) are counted once, under the word embeddings.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from torch import nn

__all__ = ["components", "count_parameters", "parameter_table", "freeze", "unfreeze", "set_dropout", "ComponentCount"]


def _base_prefix(model: nn.Module) -> str:
    prefix = getattr(model, "base_model_prefix", "bert")
    return prefix + "." if isinstance(getattr(model, prefix, None), nn.Module) else ""


def components(model: nn.Module) -> list[str]:
    """Component module names in order: embeddings, encoder.layer.N..., pooler, then heads."""
    prefix = _base_prefix(model)
    base = model.get_submodule(prefix[:-1]) if prefix else model
    names: list[str] = []
    for child_name, child in base.named_children():
        if child_name == "encoder" and isinstance(getattr(child, "layer", None), nn.ModuleList):
            names += [f"{prefix}encoder.layer.{i}" for i in range(len(child.layer))]
        elif any(True for _ in child.parameters()):
            names.append(prefix + child_name)
    if prefix:
        for child_name, child in model.named_children():
            if child_name != prefix[:-1] and any(True for _ in child.parameters()):
                names.append(child_name)
    return names


def _group(component: str, prefix: str) -> str:
    name = component[len(prefix) :] if component.startswith(prefix) else component
    return "encoder" if name.startswith("encoder.") else name


@dataclass
class ComponentCount:
    name: str
    total: int
    trainable: int
    share: float  # of all parameters


def parameter_table(model: nn.Module) -> list[ComponentCount]:
    """One row per component (tied parameters counted once, where first seen)."""
    comps = components(model)
    totals = {c: [0, 0] for c in comps}
    other = [0, 0]
    for name, p in model.named_parameters():  # deduplicated: a tied weight appears once
        owner = next((c for c in comps if name.startswith(c + ".")), None)
        slot = totals[owner] if owner else other
        slot[0] += p.numel()
        slot[1] += p.numel() if p.requires_grad else 0
    if other[0]:
        totals["(other)"] = other
    grand = sum(t for t, _ in totals.values()) or 1
    return [ComponentCount(c, t, tr, t / grand) for c, (t, tr) in totals.items()]


def count_parameters(model: nn.Module, by: str | None = None, trainable_only: bool = False) -> int | dict[str, int]:
    """Parameter count: total (``by=None``), or a dict ``by="component"`` (embeddings, encoder.layer.N,
    pooler, heads), ``by="group"`` (embeddings, encoder, pooler, heads) or ``by="parameter"``.
    """
    if by is None:
        return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
    if by == "parameter":
        return {n: p.numel() for n, p in model.named_parameters() if p.requires_grad or not trainable_only}
    rows = parameter_table(model)
    pick = (lambda r: r.trainable) if trainable_only else (lambda r: r.total)
    if by == "component":
        return {r.name: pick(r) for r in rows}
    if by == "group":
        prefix = _base_prefix(model)
        out: dict[str, int] = {}
        for r in rows:
            g = _group(r.name, prefix)
            out[g] = out.get(g, 0) + pick(r)
        return out
    raise ValueError(f"by must be None, 'component', 'group' or 'parameter'; got {by!r}")


_RANGE = re.compile(r"^(?P<head>.*?)(?P<lo>\d+)-(?P<hi>\d+)(?P<tail>(\..*)?)$")


def _expand(pattern: str) -> list[str]:
    m = _RANGE.match(pattern)
    if not m:
        return [pattern]
    lo, hi = int(m["lo"]), int(m["hi"])
    if hi < lo:
        raise ValueError(f"bad range in {pattern!r}: {hi} < {lo}")
    return [f"{m['head']}{i}{m['tail']}" for i in range(lo, hi + 1)]


def _resolve(model: nn.Module, patterns: tuple[str, ...]) -> list[nn.Module | nn.Parameter]:
    if not patterns:
        raise ValueError("name at least one component, e.g. 'embeddings' or 'encoder.layer.0-5'")
    modules = dict(model.named_modules())
    params = dict(model.named_parameters())
    prefix = _base_prefix(model)
    found: list[nn.Module | nn.Parameter] = []
    for pattern in patterns:
        hits: list[nn.Module | nn.Parameter] = []
        for name in _expand(pattern):
            if name in ("", "all", "*"):
                hits.append(model)
                continue
            for candidate in (name, prefix + name) if prefix else (name,):
                if any(ch in candidate for ch in "*?["):
                    hits += [m for n, m in modules.items() if n and fnmatch.fnmatchcase(n, candidate)]
                elif candidate in modules:
                    hits.append(modules[candidate])
                elif candidate in params:
                    hits.append(params[candidate])
                else:
                    continue
                break
            else:
                hits = []
                break
        if not hits:
            valid = components(model)
            groups = sorted({_group(c, prefix) for c in valid})
            n_layers = sum(1 for c in valid if ".layer." in c)
            raise ValueError(
                f"{pattern!r} matches no module of {type(model).__name__}. Valid names: "
                f"{', '.join(groups)}, encoder.layer.0 ... encoder.layer.{max(n_layers - 1, 0)} "
                f"(ranges like encoder.layer.0-{max(n_layers // 2 - 1, 0)}), or any module path from "
                "model.named_modules()"
            )
        found += hits
    return found


def _set_requires_grad(model: nn.Module, patterns: tuple[str, ...], flag: bool) -> int:
    seen: set[int] = set()
    count = 0
    for target in _resolve(model, patterns):
        tensors = [target] if isinstance(target, nn.Parameter) else list(target.parameters())
        for p in tensors:
            if id(p) not in seen:
                seen.add(id(p))
                p.requires_grad_(flag)
                count += p.numel()
    return count


def freeze(model: nn.Module, *names: str) -> int:
    """Stop training the named parts: ``freeze(model, "embeddings", "encoder.layer.0-5")``.

    Names are module paths (the ``bert.`` prefix is optional on head models), ranges ``a.N-M``,
    globs, or ``"all"``. A name that matches nothing raises ValueError listing the valid names.
    Returns the number of parameters affected.
    """
    return _set_requires_grad(model, names, False)


def unfreeze(model: nn.Module, *names: str) -> int:
    """Train the named parts again (same names as :func:`freeze`). Returns the parameters affected."""
    return _set_requires_grad(model, names, True)


def set_dropout(model: nn.Module, p: float) -> int:
    """Set the rate of every dropout layer of ``model`` (hidden, attention and head dropout) to ``p``.

    The config is left as it is: a rate chosen for one run (pretraining without dropout, say) is a
    setting of that run, and the saved model keeps the rates it is fine-tuned with. Returns the
    number of dropout layers set.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {p}")
    layers = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    for m in layers:
        m.p = float(p)
    return len(layers)
