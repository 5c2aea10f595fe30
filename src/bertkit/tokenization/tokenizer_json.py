"""The parts of a `tokenizers` tokenizer.json that every bertkit tokenizer reads: which model it holds,
the post-processor's special tokens (as a template), and the added tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit._text import read_json

# model type in tokenizer.json -> what bertkit calls it
MODEL_TYPES = {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}

# (id, token, type id) of a special token; a template is (before A, between A and B, after, type A, type B)
Special = tuple[int, str, int]
Template = tuple[list[Special], list[Special], list[Special], int, int]
NO_TEMPLATE: Template = ([], [], [], 0, 1)


def read_spec(path: Path) -> dict[str, Any]:
    """tokenizer.json as a dict, with a one-line error naming the file when it is not one bertkit reads."""
    spec = read_json(path)
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
        raise ValueError(f"{path}: not a tokenizers tokenizer.json (no 'model' object)")
    kind = spec["model"].get("type")
    if kind not in MODEL_TYPES:
        raise ValueError(
            f"{path}: model type {kind!r} is not one bertkit reads (it reads {', '.join(sorted(MODEL_TYPES))})"
        )
    return spec


def roberta_template(cls: tuple[str, int], sep: tuple[str, int]) -> dict[bool, Template]:
    """RobertaProcessing: ``<s> A </s>`` and ``<s> A </s></s> B </s>``, every type id 0."""
    c, s = (cls[1], cls[0], 0), (sep[1], sep[0], 0)
    return {False: ([c], [], [s], 0, 0), True: ([c], [s, s], [s], 0, 0)}


def bert_template(cls: tuple[str, int], sep: tuple[str, int]) -> dict[bool, Template]:
    """BertProcessing: ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``, B and its [SEP] of type 1."""
    c, s = (cls[1], cls[0], 0), (sep[1], sep[0], 0)
    return {False: ([c], [], [s], 0, 1), True: ([c], [s], [(s[0], s[1], 1)], 0, 1)}


def _parse_template(items: list, specials: dict[str, Any], path: Path, pair: bool) -> Template:
    """A TemplateProcessing list (``$A`` / ``$B`` / special tokens with type ids) as a Template."""
    parts: list[list[Special]] = [[]]
    types: list[int] = []
    for item in items:
        if "Sequence" in item:
            seq = item["Sequence"]
            want = "B" if types else "A"
            if seq.get("id") != want:
                raise ValueError(f"{path}: post_processor template puts ${seq.get('id')} where bertkit expects ${want}")
            types.append(int(seq.get("type_id", 0)))
            parts.append([])
        elif "SpecialToken" in item:
            tok = item["SpecialToken"]
            entry = specials.get(tok["id"])
            if not entry or len(entry.get("ids") or []) != len(entry.get("tokens") or []):
                raise ValueError(f"{path}: post_processor special token {tok['id']!r} has no ids")
            parts[-1].extend((int(i), t, int(tok.get("type_id", 0))) for i, t in zip(entry["ids"], entry["tokens"]))
        else:
            raise ValueError(f"{path}: post_processor template item {item!r} is not one bertkit reads")
    if len(types) != (2 if pair else 1):
        raise ValueError(
            f"{path}: post_processor {'pair' if pair else 'single'} template needs ${'B' if pair else 'A'}"
        )
    if pair:
        return parts[0], parts[1], parts[2], types[0], types[1]
    return parts[0], [], parts[1], types[0], 1


def post_processor(spec: dict[str, Any], path: Path) -> tuple[dict[bool, Template] | None, bool | None, bool]:
    """(templates for a single text and a pair, trim_offsets or None, add_prefix_space) of the
    post-processor; a ``Sequence`` of processors is read in order."""
    proc = spec.get("post_processor")
    procs = (proc.get("processors") or []) if proc and proc.get("type") == "Sequence" else [proc]
    templates = None  # none declared: the class's own (transformers' RoBERTa and XLM-R add theirs)
    trim: bool | None = None
    prefix = False
    for p in procs:
        if not p:
            continue
        kind = p.get("type")
        if kind in ("RobertaProcessing", "BertProcessing"):
            make = roberta_template if kind == "RobertaProcessing" else bert_template
            templates = make(tuple(p["cls"]), tuple(p["sep"]))
            if kind == "RobertaProcessing":
                trim, prefix = bool(p.get("trim_offsets", True)), bool(p.get("add_prefix_space", True))
        elif kind == "TemplateProcessing":
            sp = p.get("special_tokens") or {}
            templates = {
                False: _parse_template(p.get("single") or [], sp, path, False),
                True: _parse_template(p.get("pair") or [], sp, path, True),
            }
        elif kind == "ByteLevel":
            trim, prefix = bool(p.get("trim_offsets", True)), bool(p.get("add_prefix_space", True))
        else:
            raise ValueError(f"{path}: post_processor type {kind!r} is not one bertkit reads")
    return templates, trim, prefix


def template_json(templates: dict[bool, Template]) -> dict[str, Any]:
    """A TemplateProcessing post-processor that writes ``templates`` back."""
    specials: dict[str, Any] = {}

    def items(t: Template, pair: bool) -> list:
        pre, mid, post, ta, tb = t
        out = [{"SpecialToken": {"id": s[1], "type_id": s[2]}} for s in pre]
        out.append({"Sequence": {"id": "A", "type_id": ta}})
        if pair:
            out += [{"SpecialToken": {"id": s[1], "type_id": s[2]}} for s in mid]
            out.append({"Sequence": {"id": "B", "type_id": tb}})
        out += [{"SpecialToken": {"id": s[1], "type_id": s[2]}} for s in post]
        for s in pre + mid + post:
            specials[s[1]] = {"id": s[1], "ids": [s[0]], "tokens": [s[1]]}
        return out

    single, pair = items(templates[False], False), items(templates[True], True)
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}


def added_tokens_json(added: dict[int, Any]) -> list[dict[str, Any]]:
    """tokenizer.json's ``added_tokens`` list."""
    return [{"id": i, **t.__getstate__()} for i, t in sorted(added.items())]
