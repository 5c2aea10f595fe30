"""General English for pretraining, extracted at set-up from Debian packages: WordNet 3.0's glosses
(`wordnet-base`) hold every synset of each part of speech, in the counts WordNet 3.0 publishes
(wnstats(7WN)), with its antonym pairs; Debian's fortune cookies come out as plain text, one a
line, without fortune's separators or the terminal overstrikes of its bold and underlined words."""

import pytest

from bertkit.assets import asset_path

# WordNet 3.0's synsets by part of speech, as its wnstats(7WN) manual page lists them.
WORDNET_SYNSETS = {"noun": 82_115, "verb": 13_767, "adj": 18_156, "adv": 3_621}


@pytest.fixture(scope="module")
def wordnet() -> list[list[str]]:
    text = asset_path("wordnet").read_text(encoding="utf-8")
    return [part.splitlines() for part in text.rstrip("\n").split("\n\n")]


def test_wordnet_has_every_synset_of_each_part_of_speech(wordnet):
    assert [len(p) for p in wordnet] == list(WORDNET_SYNSETS.values())
    for part in wordnet:
        for line in part:
            words, sep, gloss = line.partition(": ")
            assert sep and gloss.strip(), line
            # sense markers and underscores are WordNet's notation, not text
            assert "_" not in words and "(" not in words, line


def test_wordnet_glosses_keep_examples_and_antonyms(wordnet):
    adjectives = wordnet[2]
    able = next(line for line in adjectives if line.startswith("able: "))
    assert '"able to swim"' in able and able.endswith("able is the opposite of unable")
    # an antonym pair is stated from both sides, in its own part of speech
    assert any(line.startswith("unable: ") and line.endswith("unable is the opposite of able") for line in adjectives)
    assert any("good is the opposite of bad" in line for line in adjectives)
    assert any("goodness is the opposite of badness" in line for line in wordnet[0])


def test_fortunes_are_plain_text_one_a_line():
    text = asset_path("fortunes").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line]
    assert len(lines) > 10_000
    assert "\x08" not in text and "%" not in lines and all(line == line.strip() for line in lines)
    # a cookie spread over several lines, its attribution included, is one line
    assert any(
        line.startswith('A "critic" is a man who creates nothing') and line.endswith("-- Robert Heinlein")
        for line in lines
    )
