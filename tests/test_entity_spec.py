"""Entity-level scores against an independent reading of the tag-scheme definitions.

seqeval is not installed here, so the reference is written from the definitions (seqeval strict
mode) as a per-position rule rather than bertkit's left-to-right scan:

* BIO (IOB2): an entity starts at every ``B-X`` and runs over the ``I-X`` that follow it.
* BIOES / BMES: an entity is ``S-X`` alone, or ``B-X`` followed by zero or more ``I-X`` (``M-X``)
  and then ``E-X``; anything else (a stray inside or end tag, a type change, a missing end) is no
  entity.

Random tag sequences (hypothesis) must give the same entities and the same micro P/R/F1.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.tasks.metrics import entity_scores, get_entities

INSIDE = {"BIO": "I", "BIOES": "I", "BMES": "M"}


def spec_entities(tags: list[str], scheme: str) -> set[tuple[str, int, int]]:
    inside = INSIDE[scheme]
    out = set()
    for i, t in enumerate(tags):
        prefix, _, typ = t.partition("-")
        if scheme != "BIO" and prefix == "S":
            out.add((typ, i, i + 1))
        if prefix != "B":
            continue
        j = i + 1
        while j < len(tags) and tags[j] == f"{inside}-{typ}":
            j += 1
        if scheme == "BIO":
            out.add((typ, i, j))
        elif j < len(tags) and tags[j] == f"E-{typ}":
            out.add((typ, i, j + 1))
    return out


def spec_scores(gold: list[list[str]], pred: list[list[str]], scheme: str) -> tuple[float, float, float]:
    g = {(k, e) for k, s in enumerate(gold) for e in spec_entities(s, scheme)}
    p = {(k, e) for k, s in enumerate(pred) for e in spec_entities(s, scheme)}
    tp = len(g & p)
    prec = tp / len(p) if p else 0.0
    rec = tp / len(g) if g else 0.0
    return prec, rec, (2 * prec * rec / (prec + rec) if prec + rec else 0.0)


def _tags(scheme: str):
    prefixes = {"BIO": "BI", "BIOES": "BIES", "BMES": "BMES"}[scheme]
    return st.sampled_from(["O"] + [f"{p}-{t}" for p in prefixes for t in ("PER", "LOC")])


def _corpus(scheme: str):
    return st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            *[
                st.integers(0, 12).flatmap(
                    lambda m: st.tuples(
                        st.lists(_tags(scheme), min_size=m, max_size=m), st.lists(_tags(scheme), min_size=m, max_size=m)
                    )
                )
                for _ in range(n)
            ]
        )
    )


@pytest.mark.parametrize("scheme", ["BIO", "BIOES", "BMES"])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_entity_scores_match_the_definition(scheme, data):
    pairs = data.draw(_corpus(scheme))
    gold = [g for g, _ in pairs]
    pred = [p for _, p in pairs]
    for s in gold + pred:
        assert {(e.type, e.start, e.end) for e in get_entities(s, scheme)} == spec_entities(s, scheme)
    got = entity_scores(gold, pred, scheme)
    assert (got["precision"], got["recall"], got["f1"]) == spec_scores(gold, pred, scheme)


def test_bmes_hand_written():
    # B M E of one type; S alone; a type change and a missing end are not entities
    tags = ["B-NT", "M-NT", "M-NT", "E-NT", "S-NR", "B-NS", "E-NR", "B-NS", "M-NS", "O", "S-NS"]
    assert spec_entities(tags, "BMES") == {("NT", 0, 4), ("NR", 4, 5), ("NS", 10, 11)}
    assert {(e.type, e.start, e.end) for e in get_entities(tags, "BMES")} == spec_entities(tags, "BMES")
