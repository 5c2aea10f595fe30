"""Readers for fine-tuning data: CSV/TSV/JSONL tables, CoNLL, SQuAD JSON and SWAG-style JSONL.

Every reader fails with a message naming the file, and where it applies the line, column or value:
a user should never see a bare KeyError from the middle of a data loader.
"""

from __future__ import annotations

import csv
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from bertkit._text import jsonl_objects, parse_json, read_text, require_file, split_records

__all__ = [
    "TextExample",
    "TaggedSentence",
    "QAExample",
    "ChoiceExample",
    "read_table",
    "read_conll",
    "read_squad",
    "read_swag",
    "build_label_list",
    "check_labels",
]


@dataclass
class TextExample:
    text: str
    text_pair: str | None = None
    label: Any = None  # str/float for single label, list[str] for multi-label, None if unlabelled
    line: int = 0  # 1-based line (for CSV/TSV: the data line counting the header as line 1)


@dataclass
class TaggedSentence:
    tokens: list[str]
    tags: list[str] | None
    line: int  # line of the first token


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[dict] = field(default_factory=list)  # {"text", "answer_start"}
    is_impossible: bool = False
    title: str = ""


@dataclass
class ChoiceExample:
    context: str
    endings: list[str]
    label: int | None
    line: int = 0


def _check_nonempty(path: Path) -> str:
    text = read_text(require_file(path))
    if not text.strip():
        raise ValueError(f"{path}: file is empty")
    return text


def _table_format(path: Path, fmt: str | None) -> str:
    if fmt:
        return fmt.lower()
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".tsv", ".tab"):
        return "tsv"
    if suffix == ".csv":
        return "csv"
    raise ValueError(f"{path}: cannot tell the format from the extension {suffix!r}; use .csv, .tsv or .jsonl")


def _rows(path: Path, fmt: str) -> tuple[list[tuple[int, dict]], list[str]]:
    text = _check_nonempty(path)
    rows: list[tuple[int, dict]] = []
    columns: list[str] = []
    if fmt == "jsonl":
        for n, obj in jsonl_objects(text, path):
            for k in obj:
                if k not in columns:
                    columns.append(k)
            rows.append((n, obj))
    else:
        reader = csv.DictReader(split_records(text, keepends=True), delimiter="\t" if fmt == "tsv" else ",")
        try:
            columns = list(reader.fieldnames or [])
            for obj in reader:
                # csv counts physical lines, so quoted newlines keep numbers honest
                if None in obj:
                    raise ValueError(
                        f"{path}:{reader.line_num}: {len(columns) + len(obj[None])} fields but the "
                        f"header has {len(columns)}; quote fields that hold the delimiter"
                    )
                rows.append((reader.line_num, obj))
        except csv.Error as e:
            raise ValueError(f"{path}:{reader.line_num}: malformed {fmt.upper()} ({e})") from None
    if not rows:
        raise ValueError(f"{path}: no data rows (only a header?)")
    return rows, columns


def read_table(
    path: str | Path,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str | None = "label",
    label_separator: str | None = None,
    fmt: str | None = None,
    require_label: bool = True,
) -> list[TextExample]:
    """Read single texts or pairs (and labels) from CSV, TSV or JSONL.

    ``label_separator`` splits a string label into several (multi-label); JSONL lists are taken as
    multi-label as they are. With ``require_label=False`` a missing label column is allowed
    (prediction input).
    """
    path = Path(path)
    rows, columns = _rows(path, _table_format(path, fmt))
    wanted = [text_column] + ([text_pair_column] if text_pair_column else [])
    if require_label and label_column:
        wanted.append(label_column)
    for col in wanted:
        if col not in columns:
            raise ValueError(f"{path}: no column {col!r}; available columns: {', '.join(map(repr, columns))}")
    has_label = bool(label_column) and label_column in columns
    out = []
    for n, row in rows:
        text = row.get(text_column)
        if text is None or (isinstance(text, str) and not text.strip()):
            raise ValueError(f"{path}:{n}: empty {text_column!r}")
        pair = row.get(text_pair_column) if text_pair_column else None
        if text_pair_column and pair is None:
            raise ValueError(f"{path}:{n}: missing {text_pair_column!r}")
        label = row.get(label_column) if has_label else None
        if has_label and (label is None or label == ""):
            raise ValueError(f"{path}:{n}: missing label in column {label_column!r}")
        if label_separator and isinstance(label, str):
            label = [p.strip() for p in label.split(label_separator) if p.strip()]
        out.append(TextExample(str(text), None if pair is None else str(pair), label, n))
    return out


def _label_key(label: Any) -> tuple:
    # numbers sort numerically ("2" < "10"), everything else as text
    try:
        return (0, float(label), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(label))


def build_label_list(labels: Sequence[Any]) -> list[str]:
    """Sorted distinct label names (numeric-looking labels in numeric order)."""
    names: set[str] = set()
    for lab in labels:
        if isinstance(lab, (list, tuple)):
            names.update(str(x) for x in lab)
        else:
            names.add(str(lab))
    return sorted(names, key=_label_key)


def check_labels(path: str | Path, examples: Sequence[TextExample], label2id: dict[str, int]) -> None:
    """Raise naming the line and label when an example has a label not seen in training."""
    for ex in examples:
        labs = ex.label if isinstance(ex.label, (list, tuple)) else [ex.label]
        for lab in labs:
            if lab is not None and str(lab) not in label2id:
                raise ValueError(
                    f"{path}:{ex.line}: label {str(lab)!r} was never seen in training "
                    f"(known labels: {', '.join(label2id)})"
                )


def read_conll(path: str | Path, require_tags: bool = True) -> list[TaggedSentence]:
    """CoNLL-style file: one token per line with its tag in the last column, blank line between
    sentences. Columns are split on tabs when the line has one, else on whitespace; ``-DOCSTART-``
    lines are skipped. A line without a tag names its line number.
    """
    path = Path(path)
    text = _check_nonempty(path)
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    start = 0
    labelled: bool | None = None

    def flush() -> None:
        nonlocal tokens, tags
        if tokens:
            sentences.append(TaggedSentence(tokens, tags if labelled else None, start))
        tokens, tags = [], []

    for n, line in enumerate(split_records(text), 1):
        if not line.strip():
            flush()
            continue
        if line.startswith("-DOCSTART-"):
            flush()
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        parts = [p for p in (x.strip() for x in parts)]
        if not tokens:
            start = n
        if len(parts) >= 2 and parts[0] and parts[-1]:
            if labelled is False:
                raise ValueError(f"{path}:{n}: tagged line {line!r} in an untagged file")
            labelled = True
            tokens.append(parts[0])
            tag = parts[-1]
            if tag != "O" and not (len(tag) > 2 and tag[1] == "-" and tag[0] in "BIMES"):
                raise ValueError(f"{path}:{n}: tag {tag!r} is not O or B-/I-/E-/S-/M- followed by a type")
            tags.append(tag)
        elif len(parts) == 1 and parts[0] and not require_tags and labelled is not True:
            labelled = False
            tokens.append(parts[0])
        else:
            raise ValueError(f"{path}:{n}: malformed line {line!r}: expected a token and a tag separated by a tab")
    flush()
    if not sentences:
        raise ValueError(f"{path}: no sentences found")
    return sentences


def _squad_field(path: Path, where: str, obj: Any, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """``obj[key]`` checked to be of ``kind``; else a ValueError naming the record and the field."""
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: {where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        if default is not ...:
            return default
        raise ValueError(f"{path}: {where}: missing field {key!r}")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ValueError(
            f"{path}: {where}: field {key!r} must be a {names}, got {type(value).__name__} "
            f"{json.dumps(value, ensure_ascii=False)[:60]}"
        )
    return value


def read_squad(path: str | Path, require_answers: bool = True) -> list[QAExample]:
    """SQuAD v1.1 / v2.0 JSON. Answers whose text is not found in the context at ``answer_start``
    are counted, warned about once, and skipped (a question left without answers is dropped).

    A malformed record (a missing field, a string where a list belongs) raises a ValueError naming
    the record (article, paragraph, question id) and the field; ``answers`` may be absent only
    with ``require_answers=False`` (prediction input). Question ids must be unique:
    predictions are matched to answers by id, so a repeated id would score the wrong answers.
    """
    path = Path(path)
    text = _check_nonempty(path)
    data = parse_json(text, str(path))
    if not isinstance(data, dict) or "data" not in data:
        raise ValueError(f"{path}: not SQuAD format (expected a top-level object with 'data')")
    articles = _squad_field(path, "top level", data, "data", list)
    out: list[QAExample] = []
    bad: list[str] = []
    seen: dict[str, str] = {}
    for a, article in enumerate(articles):
        where_a = f"data[{a}]"
        title = _squad_field(path, where_a, article, "title", (str, int, float), "")
        for p, para in enumerate(_squad_field(path, where_a, article, "paragraphs", list, [])):
            where_p = f"{where_a}.paragraphs[{p}]"
            context = _squad_field(path, where_p, para, "context", str)
            for q, qa in enumerate(_squad_field(path, where_p, para, "qas", list, [])):
                where_q = f"{where_p}.qas[{q}]"
                qid = str(_squad_field(path, where_q, qa, "id", (str, int), len(out)))
                where_q = f"{where_q} (id {qid!r})"
                if qid in seen:
                    raise ValueError(
                        f"{path}: duplicate question id {qid!r} at {where_q}, first at {seen[qid]}; "
                        f"ids must be unique (answers are matched to predictions by id)"
                    )
                seen[qid] = where_q
                question = _squad_field(path, where_q, qa, "question", str)
                impossible = bool(_squad_field(path, where_q, qa, "is_impossible", (bool, int), False))
                raw_answers = _squad_field(
                    path, where_q, qa, "answers", list, [] if impossible or not require_answers else ...
                )
                answers = []
                for k, ans in enumerate(raw_answers):
                    where_k = f"{where_q}.answers[{k}]"
                    ans_text = _squad_field(path, where_k, ans, "text", str)
                    start = _squad_field(path, where_k, ans, "answer_start", (int, str))
                    if isinstance(start, str):
                        if not start.strip().isdigit():
                            raise ValueError(
                                f"{path}: {where_k}: field 'answer_start' must be an integer, got {start!r}"
                            )
                        start = int(start)
                    if start < 0 or context[start : start + len(ans_text)] != ans_text:
                        bad.append(qid)
                        continue
                    answers.append({"text": ans_text, "answer_start": start})
                if not impossible and raw_answers and not answers:
                    continue
                out.append(QAExample(qid, question, context, answers, impossible, str(title)))
    if bad:
        warnings.warn(
            f"{path}: {len(bad)} answer(s) do not match the context at answer_start and were "
            f"skipped (first question id: {bad[0]})",
            stacklevel=2,
        )
    if not out:
        raise ValueError(f"{path}: no questions found")
    return out


def read_swag(path: str | Path, require_label: bool = True) -> list[ChoiceExample]:
    """SWAG-style JSONL: ``sent1``, ``sent2``, ``ending0``..``endingN``, ``label`` (Hugging Face's
    swag layout), or ``context``/``question`` with an ``endings`` list."""
    path = Path(path)
    rows, columns = _rows(path, "jsonl")
    out = []
    for n, row in rows:
        if "endings" in row:
            context = str(row.get("context", row.get("question", "")))
            if not isinstance(row["endings"], list):
                raise ValueError(
                    f"{path}:{n}: 'endings' must be a list of strings, got {type(row['endings']).__name__}"
                )
            endings = [str(e) for e in row["endings"]]
        elif "ending0" in row:
            context = str(row.get("sent1", row.get("context", "")))
            stem = str(row.get("sent2", "")).strip()
            k = 0
            endings = []
            while f"ending{k}" in row:
                endings.append(f"{stem} {row[f'ending{k}']}".strip())
                k += 1
        else:
            raise ValueError(
                f"{path}:{n}: no endings: expected 'ending0'.. or an 'endings' list; "
                f"available columns: {', '.join(map(repr, columns))}"
            )
        if len(endings) < 2:
            raise ValueError(f"{path}:{n}: need at least two endings, got {len(endings)}")
        label = row.get("label")
        if label is None and require_label:
            raise ValueError(f"{path}:{n}: missing 'label'")
        if label is not None:
            try:
                if (
                    isinstance(label, bool)
                    or (isinstance(label, float) and not label.is_integer())
                    or (isinstance(label, str) and not label.strip().isdigit())
                ):
                    raise TypeError
                label = int(label)
            except (TypeError, ValueError):
                raise ValueError(
                    f"{path}:{n}: 'label' must be the index of the right ending (0 to "
                    f"{len(endings) - 1}), got {label!r}"
                ) from None
            if not 0 <= label < len(endings):
                raise ValueError(f"{path}:{n}: label {label} out of range for {len(endings)} endings")
        if out and len(endings) != len(out[0].endings):
            raise ValueError(f"{path}:{n}: {len(endings)} endings but line {out[0].line} has {len(out[0].endings)}")
        out.append(ChoiceExample(context, endings, label, n))
    return out
