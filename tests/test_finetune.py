"""End-to-end fine-tuning on real checkpoints and real data (tiny runs: the CPU is small).

OUTPUT folders must load in transformers' Auto classes and give the same predictions as bertkit.
"""

import json

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main
from bertkit.data.readers import read_conll, read_table
from bertkit.tasks import finetune, predict

pytestmark = pytest.mark.slow  # fine-tuning and multi-process runs: `make test-fast` skips them

transformers = pytest.importorskip("transformers")

MINILM = None


@pytest.fixture(scope="module")
def minilm():
    return asset_path("minilm")


def _subset_csv(src, dst, n):
    lines = open(src, encoding="utf-8").read().splitlines()
    # keep both classes: the file is not sorted by label, the first n data lines hold both
    dst.write_text("\n".join(lines[: n + 1]) + "\n", encoding="utf-8")
    return dst


def _subset_conll(src, dst, n):
    blocks = open(src, encoding="utf-8").read().strip().split("\n\n")
    dst.write_text("\n\n".join(blocks[:n]) + "\n", encoding="utf-8")
    return dst


@pytest.fixture(scope="module")
def polarity_run(tmp_path_factory, minilm):
    d = tmp_path_factory.mktemp("polarity")
    train = _subset_csv(asset_path("polarity-train"), d / "train.csv", 96)
    val = _subset_csv(asset_path("polarity-test"), d / "val.csv", 48)
    out = d / "out"
    res = finetune(
        "text-classification",
        minilm,
        train,
        out,
        val,
        epochs=2,
        batch_size=16,
        lr=5e-5,
        max_length=48,
        progress=False,
        quiet=True,
    )
    return res, out, val


def test_text_classification_output_loads_in_transformers(polarity_run):
    res, out, val = polarity_run
    assert res.steps == 12  # 96 / 16 per epoch, 2 epochs, no dropped batch
    results = json.loads((out / "eval_results.json").read_text())
    assert set(res.metrics) == {"accuracy", "macro_f1", "micro_f1", "mcc"}
    assert results["accuracy"] == pytest.approx(res.metrics["accuracy"])
    assert (out / "metrics.jsonl").exists() and not (out / "best").exists()

    hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(out)).eval()
    assert hf.config.id2label == {0: "negative", 1: "positive"}
    ex = read_table(val)
    enc = hf_tok([e.text for e in ex], padding=True, truncation=True, max_length=48, return_tensors="pt")
    with torch.no_grad():
        probs = hf(**enc).logits.softmax(-1).numpy()
    rows = predict(out, val, progress=False)
    assert [r["label"] for r in rows] == [hf.config.id2label[int(k)] for k in probs.argmax(-1)]
    np.testing.assert_allclose([r["score"] for r in rows], probs.max(-1), atol=1e-4)
    # accuracy recomputed from transformers' own predictions matches ours
    acc = np.mean([hf.config.id2label[int(k)] == e.label for k, e in zip(probs.argmax(-1), ex)])
    assert res.metrics["accuracy"] == pytest.approx(acc)


def test_cli_evaluate_and_predict(polarity_run, tmp_path, capsys):
    res, out, val = polarity_run
    assert cli_main(["evaluate", "--model", str(out), "--data", str(val), "--no-progress"]) == 0
    printed = dict(line.split("\t") for line in capsys.readouterr().out.strip().splitlines())
    assert float(printed["accuracy"]) == pytest.approx(res.metrics["accuracy"], abs=1e-4)
    new = tmp_path / "new.jsonl"
    new.write_text('{"text": "a moving , beautifully acted film ."}\n{"text": "dull , tedious and far too long ."}\n')
    pred = tmp_path / "pred.jsonl"
    assert cli_main(["predict", "--model", str(out), "--input", str(new), "--output", str(pred), "--no-progress"]) == 0
    rows = [json.loads(l) for l in pred.read_text().splitlines()]
    assert len(rows) == 2 and all(r["label"] in ("negative", "positive") for r in rows)
    assert all(abs(sum(r["scores"].values()) - 1) < 1e-5 for r in rows)


def test_cli_errors(tmp_path, minilm, capsys):
    train = tmp_path / "t.tsv"
    train.write_text("sentence\tlabel\ngood\tpos\nbad\tneg\n")
    val = tmp_path / "v.tsv"
    val.write_text("sentence\tlabel\nok\tpos\nmeh\tmixed\n")
    base = [
        "finetune",
        "--task",
        "text-classification",
        "--model",
        str(minilm),
        "--output",
        str(tmp_path / "o"),
        "--no-progress",
    ]
    assert cli_main(base + ["--train", str(train)]) == 1
    assert "no column 'text'; available columns: 'sentence', 'label'" in capsys.readouterr().err
    assert cli_main(base + ["--train", str(train), "--validation", str(val), "--text-column", "sentence"]) == 1
    assert "v.tsv:3: label 'mixed' was never seen in training" in capsys.readouterr().err
    bad_freeze = ["--freeze", "embeddings,encoder.layr.0"]
    assert cli_main(base + ["--train", str(train), "--text-column", "sentence", *bad_freeze]) == 1
    err = capsys.readouterr().err
    assert "encoder.layr.0" in err and "encoder.layer" in err  # lists the valid names
    empty = tmp_path / "e.csv"
    empty.write_text("")
    assert cli_main(base + ["--train", str(empty)]) == 1
    assert "e.csv: file is empty" in capsys.readouterr().err


def test_freeze_keeps_frozen_weights(tmp_path, minilm):
    train = _subset_csv(asset_path("polarity-train"), tmp_path / "train.csv", 32)
    out = tmp_path / "frozen"
    finetune(
        "text-classification",
        minilm,
        train,
        out,
        epochs=1,
        batch_size=16,
        max_length=32,
        freeze="embeddings,encoder.layer.0-4",
        progress=False,
        quiet=True,
    )
    from safetensors.torch import load_file

    before = load_file(str(minilm / "model.safetensors"))
    after = load_file(str(out / "model.safetensors"))
    key = "embeddings.word_embeddings.weight"
    src = before.get(key, before.get("bert." + key))
    assert torch.equal(after["bert." + key], src)
    l0 = "encoder.layer.0.attention.self.query.weight"
    assert torch.equal(after["bert." + l0], before.get(l0, before.get("bert." + l0)))
    l5 = "encoder.layer.5.output.dense.weight"
    assert not torch.equal(after["bert." + l5], before.get(l5, before.get("bert." + l5)))


def test_same_seed_same_model(tmp_path, minilm):
    """The seed covers the new head's initialisation: two runs with seed 0 give the same weights,
    whatever state the global generator was left in."""
    train = _subset_csv(asset_path("polarity-train"), tmp_path / "train.csv", 16)
    heads = []
    for i, out in enumerate([tmp_path / "a", tmp_path / "b"]):
        torch.manual_seed(1000 + i)  # disturb the global generator between runs
        finetune(
            "text-classification",
            minilm,
            train,
            out,
            epochs=1,
            batch_size=16,
            max_length=24,
            seed=0,
            freeze="embeddings,encoder",
            progress=False,
            quiet=True,
        )
        from safetensors.torch import load_file

        heads.append(load_file(str(out / "model.safetensors"))["classifier.weight"])
    assert torch.equal(heads[0], heads[1])


def test_token_classification_words_and_transformers(tmp_path, minilm):
    train = _subset_conll(asset_path("wnut16-train"), tmp_path / "train.conll", 64)
    val = _subset_conll(asset_path("wnut16-test"), tmp_path / "val.conll", 24)
    out = tmp_path / "ner"
    res = finetune(
        "token-classification",
        minilm,
        train,
        out,
        val,
        epochs=1,
        batch_size=16,
        lr=1e-4,
        max_length=64,
        progress=False,
        quiet=True,
    )
    assert {"precision", "recall", "f1", "token_accuracy"} <= set(res.metrics)
    sents = read_conll(val)
    rows = predict(out, val, progress=False)
    assert [len(r["tags"]) for r in rows] == [len(s.tokens) for s in sents]
    # transformers on the same folder, word-level via its own word_ids (first sub-token)
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    hf = transformers.AutoModelForTokenClassification.from_pretrained(str(out)).eval()
    for s, r in zip(sents[:8], rows[:8]):
        enc = hf_tok(s.tokens, is_split_into_words=True, truncation=True, max_length=64, return_tensors="pt")
        with torch.no_grad():
            ids = hf(**enc).logits[0].argmax(-1).tolist()
        seen, tags = set(), []
        for pos, w in enumerate(enc.word_ids(0)):
            if w is not None and w not in seen:
                seen.add(w)
                tags.append(hf.config.id2label[ids[pos]])
        assert r["tags"][: len(tags)] == tags


def test_multiple_choice_swag(tmp_path, minilm):
    rows = [
        {
            "sent1": "She opens the fridge.",
            "sent2": "She",
            "ending0": "takes out the milk.",
            "ending1": "flies to the moon.",
            "label": 0,
        },
        {
            "sent1": "He kicks the ball.",
            "sent2": "The ball",
            "ending0": "sings a song.",
            "ending1": "rolls into the goal.",
            "label": 1,
        },
        {
            "sent1": "It starts to rain.",
            "sent2": "People",
            "ending0": "open their umbrellas.",
            "ending1": "eat the clouds.",
            "label": 0,
        },
        {
            "sent1": "The kettle boils.",
            "sent2": "She",
            "ending0": "paints the kettle blue at night.",
            "ending1": "pours the water into a cup.",
            "label": 1,
        },
    ]
    f = tmp_path / "swag.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "mc"
    res = finetune(
        "multiple-choice", minilm, f, out, f, epochs=1, batch_size=2, max_length=32, progress=False, quiet=True
    )
    hf = transformers.AutoModelForMultipleChoice.from_pretrained(str(out)).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    preds = predict(out, f, progress=False)
    # The evaluation's accuracy is the accuracy of the predictions, ending by ending.
    hits = [int(np.argmax(p["scores"])) == r["label"] for r, p in zip(rows, preds)]
    assert res.metrics["accuracy"] == pytest.approx(sum(hits) / len(rows))
    for r, p in zip(rows, preds):
        enc = hf_tok(
            [r["sent1"]] * 2,
            [f"{r['sent2']} {r['ending' + str(k)]}" for k in range(2)],
            padding=True,
            return_tensors="pt",
        )
        with torch.no_grad():
            lg = hf(**{k: v.unsqueeze(0) for k, v in enc.items()}).logits[0]
        np.testing.assert_allclose(p["scores"], lg.softmax(-1).numpy(), atol=1e-4)


def test_token_classification_long_sentence_windows(minilm):
    """A sentence longer than max_length is split into overlapping word windows: every word is
    labelled in training and predicted at inference, each window is a real encoding of its words."""
    import warnings

    from bertkit import BertForTokenClassification, BertTokenizer
    from bertkit.data.readers import TaggedSentence
    from bertkit.tasks.tasks import TaskOptions, TokenClassificationTask

    sents = read_conll(asset_path("wnut16-train"))[:40]
    words = [w for s in sents for w in s.tokens]
    tags = [t for s in sents for t in s.tags]
    long = TaggedSentence(tokens=words, tags=tags, line=1)
    task = TokenClassificationTask(TaskOptions(max_length=32, doc_stride=8))
    task.setup_labels([long])
    tok = BertTokenizer.from_pretrained(minilm)
    enc = task.encode(tok, [long])
    assert len(enc.features) > 10  # hundreds of word pieces in 32-token windows
    hf_tok = transformers.BertTokenizerFast.from_pretrained(str(minilm))
    first_words = set()
    prev_ws: set[int] = set()
    overlaps = 0
    for f, (i, wids, _first_token) in zip(enc.features, enc.aux):
        assert i == 0 and len(f["input_ids"]) <= 32
        ws = [w for w in wids if w is not None]
        assert ws == sorted(ws) and ws[0] == min(ws)
        # the window starts at a word's first piece, and overlaps the previous window
        assert tok.convert_ids_to_tokens(f["input_ids"][1])[:2] != "##"
        # consecutive windows overlap (unless the boundary word is longer than the overlap) or touch
        assert not prev_ws or ws[0] in prev_ws or ws[0] == max(prev_ws) + 1
        overlaps += ws[0] in prev_ws
        prev_ws = set(ws)
        # labels sit on each word's first piece only, and are that word's tag
        for pos, (w, lab) in enumerate(zip(wids, f["labels"])):
            if w is not None and (pos == 0 or wids[pos - 1] != w):
                assert task.labels[lab] == tags[w]
                first_words.add(w)
            else:
                assert lab == -100
        # each window is exactly what the reference tokenizer gives for those words
        hf = hf_tok(words[ws[0] : ws[-1] + 1], is_split_into_words=True, truncation=True, max_length=32)
        assert f["input_ids"] == hf["input_ids"]
    assert first_words == set(range(len(words)))
    assert overlaps >= 0.8 * (len(enc.features) - 1)

    model = BertForTokenClassification.from_pretrained(minilm, num_labels=len(task.labels)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no word may be dropped and tagged O silently or otherwise
        rows = task.predict(model, tok, [long])
    assert len(rows[0]["tags"]) == len(words) and all(t in task.labels for t in rows[0]["tags"])
