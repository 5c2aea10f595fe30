"""Text-classification variants end to end: sentence pairs, multi-label, regression (tiny runs)."""

import json

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.tasks import finetune, predict

pytestmark = pytest.mark.slow  # fine-tuning and multi-process runs: `make test-fast` skips them

transformers = pytest.importorskip("transformers")

PAIRS = [
    ("A man is playing a guitar.", "A person plays music.", "entailment", 4.6),
    ("A man is playing a guitar.", "Nobody is playing anything.", "contradiction", 0.4),
    ("Two dogs run on the beach.", "Animals are outside.", "entailment", 4.0),
    ("Two dogs run on the beach.", "The dogs are asleep indoors.", "contradiction", 0.6),
    ("A woman slices an onion.", "Someone is cooking.", "entailment", 3.8),
    ("A woman slices an onion.", "The woman is swimming.", "contradiction", 0.2),
    ("Children play football in a park.", "Kids are playing a game.", "entailment", 4.4),
    ("Children play football in a park.", "The children are in a classroom.", "contradiction", 1.0),
]


def _hf_logits(out, rows):
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(out)).eval()
    enc = tok([r[0] for r in rows], [r[1] for r in rows], padding=True, return_tensors="pt")
    with torch.no_grad():
        return hf, hf(**enc).logits.numpy()


def test_sentence_pairs(tmp_path):
    f = tmp_path / "pairs.csv"
    f.write_text("premise,hypothesis,label\n" + "".join(f'"{a}","{b}",{l}\n' for a, b, l, _ in PAIRS))
    out = tmp_path / "nli"
    res = finetune(
        "text-classification",
        asset_path("minilm"),
        f,
        out,
        f,
        text_column="premise",
        text_pair_column="hypothesis",
        epochs=1,
        batch_size=4,
        max_length=32,
        progress=False,
        quiet=True,
    )
    hf, logits = _hf_logits(out, PAIRS)
    rows = predict(out, f, progress=False)  # column options come back from the saved config
    assert [r["text_pair"] for r in rows] == [p[1] for p in PAIRS]
    assert [r["label"] for r in rows] == [hf.config.id2label[int(k)] for k in logits.argmax(-1)]
    # The evaluation's accuracy is the accuracy of these predictions.
    hits = [r["label"] == gold for r, (_, _, gold, _) in zip(rows, PAIRS)]
    assert res.metrics["accuracy"] == pytest.approx(sum(hits) / len(PAIRS))


def test_multi_label_jsonl(tmp_path):
    f = tmp_path / "ml.jsonl"
    data = [
        {
            "text": a,
            "label": ["music"]
            if "guitar" in a
            else ["animals", "outdoors"]
            if "dogs" in a
            else ["outdoors", "sport"]
            if "football" in a
            else ["food"],
        }
        for a, *_ in PAIRS
    ]
    f.write_text("\n".join(json.dumps(d) for d in data) + "\n")
    out = tmp_path / "ml"
    res = finetune(
        "text-classification",
        asset_path("minilm"),
        f,
        out,
        f,
        epochs=1,
        batch_size=4,
        max_length=32,
        progress=False,
        quiet=True,
    )
    assert {"micro_f1", "macro_f1", "subset_accuracy"} == set(res.metrics)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["problem_type"] == "multi_label_classification"
    assert sorted(cfg["label2id"]) == ["animals", "food", "music", "outdoors", "sport"]
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(out)).eval()
    with torch.no_grad():
        probs = torch.sigmoid(hf(**tok([d["text"] for d in data], padding=True, return_tensors="pt")).logits).numpy()
    rows = predict(out, f, progress=False)
    for r, p in zip(rows, probs):
        np.testing.assert_allclose([r["scores"][hf.config.id2label[k]] for k in range(len(p))], p, atol=1e-4)
        assert r["labels"] == [hf.config.id2label[k] for k in range(len(p)) if p[k] >= 0.5]


def test_regression_pairs(tmp_path):
    f = tmp_path / "sts.tsv"
    f.write_text("s1\ts2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, _, s in PAIRS))
    out = tmp_path / "sts"
    res = finetune(
        "text-classification",
        asset_path("minilm"),
        f,
        out,
        f,
        text_column="s1",
        text_pair_column="s2",
        label_column="score",
        problem_type="regression",
        epochs=1,
        batch_size=4,
        max_length=32,
        progress=False,
        quiet=True,
    )
    assert {"pearson", "spearman", "mse"} == set(res.metrics)
    hf, logits = _hf_logits(out, PAIRS)
    assert hf.config.problem_type == "regression" and hf.config.num_labels == 1
    rows = predict(out, f, progress=False)
    np.testing.assert_allclose([r["score"] for r in rows], logits[:, 0], atol=1e-4)
    from bertkit.tasks.metrics import pearsonr

    assert res.metrics["pearson"] == pytest.approx(pearsonr(logits[:, 0], [p[3] for p in PAIRS]), abs=1e-4)


def test_dropout_setting_equals_a_checkpoint_that_says_it(tmp_path):
    """finetune(dropout=0) on MiniLM (whose config says 0.1) trains exactly as MiniLM with a config
    that says 0.0, and unlike MiniLM as it is; the fine-tuned folder loads in transformers."""
    import shutil

    from safetensors.torch import load_file

    lines = asset_path("polarity-train").read_text(encoding="utf-8").splitlines()
    data = tmp_path / "train.csv"
    data.write_text("\n".join(lines[:49]) + "\n", encoding="utf-8")
    zero = tmp_path / "minilm-no-dropout"
    shutil.copytree(asset_path("minilm"), zero)
    cfg = json.loads((zero / "config.json").read_text())
    assert cfg["hidden_dropout_prob"] > 0 and cfg["attention_probs_dropout_prob"] > 0
    cfg["hidden_dropout_prob"] = cfg["attention_probs_dropout_prob"] = 0.0
    (zero / "config.json").write_text(json.dumps(cfg))

    def run(model, name, **kw):
        out = tmp_path / name
        kw = dict(epochs=1, batch_size=16, max_length=32, progress=False, quiet=True, **kw)
        finetune("text-classification", model, data, out, **kw)
        return load_file(out / "model.safetensors")

    flag, said = run(asset_path("minilm"), "flag", dropout=0.0), run(zero, "said")
    plain = run(asset_path("minilm"), "plain")
    assert flag.keys() == said.keys()
    assert all(torch.equal(flag[k], said[k]) for k in flag)
    assert not torch.equal(flag["classifier.weight"], plain["classifier.weight"])
    saved = json.loads((tmp_path / "flag" / "config.json").read_text())
    own = json.loads((asset_path("minilm") / "config.json").read_text())
    assert saved["hidden_dropout_prob"] == own["hidden_dropout_prob"]  # the checkpoint's own, for whoever trains next
    transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "flag"))
