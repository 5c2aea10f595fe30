"""Layer probes (bertkit.explain.probe and `bertkit probe`).

* The probe's fit equals scikit-learn's LogisticRegression (same C, tight tolerance) on the same
  features: MiniLM's real layer vectors of polarity sentences (two classes), and seeded random
  features with three classes. Probabilities within 1e-5 (both solve the same strictly convex problem
  in float64, one by Newton steps and one by L-BFGS; measured differences are about 1e-6).
* The same seed gives the same numbers; the control task and the random-initialised model are there.
* It runs for every family in the registry (small seeded models), and bad input is one line.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.explain.probe import fit_logistic, layer_features, predict_proba, probe

sklearn_lm = pytest.importorskip("sklearn.linear_model")
PROB_TOL = 1e-5


@pytest.fixture(scope="module")
def minilm():
    from bertkit.explain import load_model

    net, tok, _ = load_model(asset_path("minilm"))
    return net, tok


@pytest.fixture(scope="module")
def polarity_rows():
    from bertkit.data.readers import read_table

    rows = read_table(asset_path("polarity-train"))[:160]
    return [r.text for r in rows], np.array([r.label == "positive" for r in rows], dtype=int)


def _standard(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(0)) / x.std(0).clip(min=1e-6)


def _same_as_sklearn(x: np.ndarray, y: np.ndarray, c: float) -> None:
    W, b = fit_logistic(x, y, c)
    ref = sklearn_lm.LogisticRegression(C=c, tol=1e-10, max_iter=10_000).fit(x, y)
    ours = predict_proba(W, b, x).numpy()
    assert np.abs(ours - ref.predict_proba(x)).max() < PROB_TOL
    scale = np.abs(ref.coef_).max()
    if W.shape[0] == 1:  # two classes: one weight vector, as scikit-learn keeps
        assert np.abs(W.numpy() - ref.coef_).max() < 1e-4 * scale


def test_fit_equals_sklearn_on_minilm_layer_vectors(minilm, polarity_rows):
    net, tok = minilm
    texts, y = polarity_rows
    feats = layer_features(net, tok, texts, max_length=64)
    for kind, layer in (("first", 6), ("mean", 3)):
        x = _standard(feats[kind][layer].double().numpy())
        for c in (0.01, 1.0):
            _same_as_sklearn(x, y, c)


def test_fit_equals_sklearn_with_three_classes():
    gen = np.random.default_rng(0)
    x = gen.normal(size=(240, 40))
    y = (x[:, :3] + 0.8 * gen.normal(size=(240, 3))).argmax(1)
    _same_as_sklearn(x, y, 0.1)


def test_probe_is_reproducible_and_shows_control_and_random(minilm, tmp_path):
    net, tok = minilm
    task = asset_path("polarity-train")
    small = dict(tokenizer=tok, max_rows=60, max_length=32, seed=3)
    a = probe(net, task, **small, json_path=tmp_path / "p.json", png_path=tmp_path / "p.png")
    b = probe(net, task, **small)
    assert a.rows == b.rows
    assert {r["model"] for r in a.rows} == {"trained", "random"}
    assert len(a.rows) == 2 * 2 * 7  # models x kinds x (embeddings + 6 layers)
    for r in a.rows:
        assert r["selectivity"] == pytest.approx(r["accuracy"] - r["control_accuracy"])
        assert 0 <= r["control_accuracy"] <= 1 and 0 <= r["control_train_accuracy"] <= 1
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["rows"] == a.rows and data["classes"] == ["negative", "positive"] and data["n_test"] == 12
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = a.table()
    assert table.count("\n|") == 1 + 7 and "random [CLS] sel" in table and "control" in table
    assert "<table" in a._repr_html_()
    with pytest.raises(FileExistsError, match="already exists"):
        probe(net, task, **small, json_path=tmp_path / "p.json")


def _small_model(model_type: str, vocab_size: int):
    from bertkit.modeling import registry

    fam = registry.family(model_type)
    shapes = {
        "bert": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
        "electra": dict(
            embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
        ),
        "distilbert": dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64),
        "gpt2": dict(n_embd=32, n_layer=2, n_head=4, n_positions=128),
        "roberta": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
        "xlm-roberta": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
        "modernbert": dict(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, pad_token_id=0
        ),
    }
    assert model_type in shapes, f"add a small {model_type} shape here: the probe must run for every family"
    torch.manual_seed(0)
    return fam.model_class("base")(fam.config_class()(vocab_size=vocab_size, **shapes[model_type]))


def test_runs_for_every_family(minilm):
    from bertkit.modeling import registry

    _, tok = minilm
    for model_type in registry.supported_model_types():
        net = _small_model(model_type, len(tok.vocab))
        task = asset_path("polarity-train")
        res = probe(net, task, tokenizer=tok, max_rows=40, max_length=32, random_baseline=False)
        assert len(res.rows) == 2 * 3, model_type
        assert res.first_name == ("last token" if registry.family(model_type).kind == "causal" else "[CLS]")


def test_bad_input_is_one_line(tmp_path, capsys):
    from bertkit.cli import main

    one = tmp_path / "one.csv"
    one.write_text("label,text\npositive,good\npositive,fine\npositive,great\n")
    with pytest.raises(ValueError, match=r"one class \('positive'\)"):
        probe(asset_path("minilm"), one)
    rc = main(["probe", "--model", str(asset_path("minilm")), "--task", str(one), "--label-column", "stars"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and "no column 'stars'" in err[0] and "'label'" in err[0]
    assert len(err) == 1 or err[1].startswith("(run with --debug")
