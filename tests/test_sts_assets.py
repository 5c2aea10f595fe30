"""gensim's human similarity ratings, extracted at set-up into STS files (``sentence1,sentence2,score``):
`evaluate-embeddings --sts` on Lee's 50 news documents (all 1,225 pairs) with the real MiniLM equals
sentence-transformers' EmbeddingSimilarityEvaluator's Spearman to within one swap of neighbouring ranks
(8e-6) and its Pearson to 1e-6; the word-pair sets are read
whole and scored by the same evaluator."""

import csv

import numpy as np
import pytest

from bertkit.assets import asset_path
from bertkit.cli import main

st = pytest.importorskip("sentence_transformers")
MINILM = str(asset_path("minilm"))


def _pairs(name: str) -> tuple[list[str], list[str], list[float]]:
    with open(asset_path(name), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [float(r["score"]) for r in rows]


class _EachTextOnce(st.SentenceTransformer):
    """sentence-transformers' own model, encoding each distinct text once (Lee's 1,225 pairs hold 50
    documents); a text's vector does not depend on which pairs it is in."""

    def encode(self, inputs, *args, **kwargs):
        uniq = list(dict.fromkeys(inputs))
        vecs = super().encode(uniq, *args, **kwargs)
        at = {t: i for i, t in enumerate(uniq)}
        return vecs[[at[t] for t in inputs]]


@pytest.fixture(scope="module")
def reference():
    return _EachTextOnce(MINILM, device="cpu")


def test_sts_assets_have_every_pair():
    s1, s2, gold = _pairs("sts-lee")
    assert len(s1) == 50 * 49 // 2 and len(set(s1) | set(s2)) == 50
    assert all(0.0 <= g <= 1.0 for g in gold) and len({(a, b) for a, b in zip(s1, s2)}) == len(s1)
    for name, n in (("sts-wordsim353", 353), ("sts-simlex999", 999)):
        w1, w2, g = _pairs(name)
        assert len(w1) == n and all(0.0 <= x <= 10.0 for x in g) and " " not in "".join(w1 + w2)


def test_lee_spearman_equals_sentence_transformers(reference, tmp_path, capsys):
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    s1, s2, gold = _pairs("sts-lee")
    assert main(["evaluate-embeddings", "--model", MINILM, "--sts", str(asset_path("sts-lee")), "--no-progress"]) == 0
    out = capsys.readouterr().out
    got = {line.split("\t")[1]: float(line.split("\t")[2]) for line in out.splitlines() if line.startswith("sts\t")}
    want = EmbeddingSimilarityEvaluator(s1, s2, gold, name="lee")(reference)
    assert got["pairs"] == 1225
    # the CLI prints 4 decimals; the same call in Python gives the full value
    from bertkit.pipelines import pipeline
    from bertkit.search.evaluate_embeddings_cli import evaluate_sts

    emb = pipeline("sentence-embedding", model=MINILM, dtype="fp32")
    full = evaluate_sts(emb, str(asset_path("sts-lee")), progress=False)
    assert got["spearman"] == pytest.approx(full["spearman"], abs=5e-5)
    assert full["spearman"] == pytest.approx(want["lee_spearman_cosine"], abs=_one_swap(1225))
    assert full["pearson"] == pytest.approx(want["lee_pearson_cosine"], abs=1e-6)
    with capsys.disabled():
        print(
            f"\nLee STS (1,225 pairs), MiniLM: bertkit spearman {full['spearman']:.7f}, "
            f"sentence-transformers EmbeddingSimilarityEvaluator {want['lee_spearman_cosine']:.7f}"
        )


def _one_swap(n: int) -> float:
    """The most that swapping two neighbouring ranks of ``n`` moves a Spearman correlation: 12 / (n (n - 1)).

    The two libraries' fp32 vectors agree closely but not bit for bit, and by how much depends on the
    CPU's kernels (AMX or AVX-512): two near-equal cosines can then trade places. On an AMX CPU that
    moved WordSim-353's Spearman by 2.9e-6. The bound allows one such swap and no more."""
    return 12 / (n * (n - 1))


@pytest.mark.parametrize("name", ["sts-wordsim353", "sts-simlex999"])
def test_word_pairs_equal_sentence_transformers(reference, name):
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    from bertkit.pipelines import pipeline
    from bertkit.search.evaluate_embeddings_cli import evaluate_sts

    s1, s2, gold = _pairs(name)
    full = evaluate_sts(pipeline("sentence-embedding", model=MINILM, dtype="fp32"), str(asset_path(name)), False)
    want = EmbeddingSimilarityEvaluator(s1, s2, gold, name="w")(reference)
    assert full["pairs"] == len(gold)
    assert full["spearman"] == pytest.approx(want["w_spearman_cosine"], abs=_one_swap(len(gold))), name
    assert np.isfinite(full["pearson"])
