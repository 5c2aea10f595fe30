"""Three fine-tuning scripts in the style of transformers' task guides, run once with transformers'
names and once with the same names from bertkit, on the same saved tiny BERT and the same real data.

Each script is one function of the library it is given (``lib.AutoTokenizer``, ``lib.Trainer``, ...),
so both runs execute the same lines; the tests compare what comes out: token ids, word ids, offsets,
overflow mappings, collated tensors, losses, trained weights, metrics, predictions and pipelines.
"""

from __future__ import annotations

import csv
import json
import shutil
import types

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' Trainer needs it

import bertkit  # noqa: E402
from bertkit.assets import asset_path  # noqa: E402

NER_TEXTS = [
    "Golf-Mickelson heads to Augusta with Tiger Woods in New York on Monday",
    "I love going to the Apple store in San Francisco !",
]


def _tiny(folder, head: str, **kw):
    """A 2-layer, 32-wide BERT with a seeded head and no dropout, saved by transformers with MiniLM's
    tokenizer files: the one starting point both libraries load."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **kw,
    )
    getattr(transformers, head)(config).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(asset_path("minilm") / name, folder)
    return folder


def _args(lib: types.ModuleType, out, **kw):
    # transformers' own keywords; full-batch epochs, so both libraries see the same batches (the
    # shuffled order of several batches differs between them: see the report)
    return lib.TrainingArguments(
        output_dir=str(out), report_to="none", use_cpu=True, logging_steps=1, weight_decay=0.01, seed=42, **kw
    )


def _timeless(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.endswith(("runtime", "per_second")) and k != "total_flos"}


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _saved(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _map(rows: list[dict], fn, batch_size: int) -> list[dict]:
    """datasets' ``map(fn, batched=True)`` on a list of dicts: columns in, a row per returned feature."""
    out = []
    for i in range(0, len(rows), batch_size):
        chunk = rows[i : i + batch_size]
        enc = fn({k: [r[k] for r in chunk] for k in chunk[0]})
        out += [{k: enc[k][j] for k in enc.keys()} for j in range(len(enc["input_ids"]))]
    return out


def _close_weights(ours: dict, theirs: dict, start: dict, skip: tuple[str, ...] = ()) -> None:
    """The trained weights agree within 1e-4, and training moved them further than that."""
    assert max((theirs[k] - start[k]).abs().max().item() for k in start) > 1e-3
    for key, value in ours.items():
        if not key.endswith(skip):
            torch.testing.assert_close(value, theirs[key], atol=1e-4, rtol=1e-4, msg=key)


# ---------------------------------------------------------------- 1. text classification (polarity)


def _polarity(split: str, n: int) -> list[dict]:
    with open(asset_path(f"polarity-{split}"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    pos = [r["text"] for r in rows if r["label"] == "positive"][: n // 2]
    neg = [r["text"] for r in rows if r["label"] == "negative"][: n // 2]
    return [{"text": t, "label": y} for a, b in zip(pos, neg) for t, y in ((a, 1), (b, 0))]


def _classification_script(lib: types.ModuleType, folder, out) -> dict:
    tokenizer = lib.AutoTokenizer.from_pretrained(folder)

    def preprocess_function(examples):
        return tokenizer(examples["text"], truncation=True)

    # the text column is dropped by hand: bertkit's Trainer does not remove unused columns (see the report)
    train = _map(_polarity("train", 64), preprocess_function, 16)
    train = [{**f, "label": r["label"]} for f, r in zip(train, _polarity("train", 64))]
    test = [{**tokenizer(r["text"], truncation=True), "label": r["label"]} for r in _polarity("test", 32)]
    data_collator = lib.DataCollatorWithPadding(tokenizer=tokenizer)

    def compute_metrics(eval_pred):
        predictions, labels = eval_pred
        return {"accuracy": float((np.argmax(predictions, axis=1) == labels).mean())}

    id2label, label2id = {0: "NEGATIVE", 1: "POSITIVE"}, {"NEGATIVE": 0, "POSITIVE": 1}
    model = lib.AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=2, id2label=id2label, label2id=label2id
    )
    trainer = lib.Trainer(
        model=model,
        args=_args(
            lib,
            out / "run",
            learning_rate=3e-3,
            per_device_train_batch_size=64,
            per_device_eval_batch_size=8,
            num_train_epochs=4,
            eval_strategy="epoch",
            save_strategy="epoch",
            load_best_model_at_end=True,
        ),
        train_dataset=train,
        eval_dataset=test,
        processing_class=tokenizer,
        data_collator=data_collator,
        compute_metrics=compute_metrics,
    )
    result = trainer.train()
    prediction = trainer.predict(test)
    trainer.save_model(out / "saved")
    classifier = lib.pipeline("text-classification", model=str(out / "saved"))
    texts = ["a gripping , beautifully acted film .", "dull , lifeless and far too long .", "meh"]
    return {
        "ids": [list(map(int, r["input_ids"])) for r in train + test],
        "batch": {k: v for k, v in data_collator(train[:5]).items()},
        "train": _timeless(result.metrics),
        "evaluate": _timeless(trainer.evaluate()),
        "predictions": prediction.predictions,
        "label_ids": prediction.label_ids,
        "test_metrics": _timeless(prediction.metrics),
        "weights": _weights(trainer.model),
        "pipe": classifier(texts),
        "pipe_all": classifier(texts[:2], top_k=None),
    }


def test_text_classification_script_as_transformers(tmp_path):
    folder = _tiny(tmp_path / "tiny", "BertForSequenceClassification", num_labels=2)
    want = _classification_script(transformers, folder, tmp_path / "hf")
    got = _classification_script(bertkit, folder, tmp_path / "bk")
    assert got["ids"] == want["ids"]
    assert got["batch"].keys() == want["batch"].keys() == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    for k, v in want["batch"].items():
        assert torch.equal(got["batch"][k], v), k
    assert got["train"].keys() == want["train"].keys()
    assert got["train"]["train_loss"] == pytest.approx(want["train"]["train_loss"], rel=1e-5)
    for name in ("evaluate", "test_metrics"):
        assert got[name].keys() == want[name].keys()
        for k, v in want[name].items():
            assert got[name][k] == pytest.approx(v, rel=1e-5, abs=1e-6), (name, k)
    np.testing.assert_allclose(got["predictions"], want["predictions"], atol=1e-4)
    np.testing.assert_array_equal(got["label_ids"], want["label_ids"])
    _close_weights(got["weights"], want["weights"], _saved(folder))
    assert [r["label"] for r in got["pipe"]] == [r["label"] for r in want["pipe"]]
    np.testing.assert_allclose([r["score"] for r in got["pipe"]], [r["score"] for r in want["pipe"]], atol=1e-5)
    for ours, theirs in zip(got["pipe_all"], want["pipe_all"]):
        assert [r["label"] for r in ours] == [r["label"] for r in theirs]
        np.testing.assert_allclose([r["score"] for r in ours], [r["score"] for r in theirs], atol=1e-5)


# ---------------------------------------------------------------- 2. token classification (WNUT16)


def _wnut(split: str, n: int) -> list[tuple[list[str], list[str]]]:
    sentences, words, tags = [], [], []
    for line in (asset_path(f"wnut16-{split}")).read_text(encoding="utf-8").splitlines() + [""]:
        if line.strip():
            word, tag = line.split("\t")
            words.append(word)
            tags.append(tag)
        elif words:
            sentences.append((words, tags))
            words, tags = [], []
    return [s for s in sentences if any(t != "O" for t in s[1])][:n]


@pytest.fixture(scope="module")
def wnut():
    train, test = _wnut("train", 48), _wnut("test", 16)
    labels = sorted({t for _, tags in train + test for t in tags}, key=lambda t: (t != "O", t[2:], t))
    label2id = {t: i for i, t in enumerate(labels)}
    rows = [[{"tokens": w, "ner_tags": [label2id[t] for t in tags]} for w, tags in part] for part in (train, test)]
    return labels, rows[0], rows[1]


def _token_classification_script(lib: types.ModuleType, folder, out, wnut) -> dict:
    label_list, train, test = wnut
    id2label = dict(enumerate(label_list))
    label2id = {v: k for k, v in id2label.items()}
    tokenizer = lib.AutoTokenizer.from_pretrained(folder)

    def tokenize_and_align_labels(examples):
        tokenized_inputs = tokenizer(examples["tokens"], truncation=True, is_split_into_words=True)
        labels = []
        for i, label in enumerate(examples["ner_tags"]):
            word_ids = tokenized_inputs.word_ids(batch_index=i)
            previous_word_idx = None
            label_ids = []
            for word_idx in word_ids:
                if word_idx is None:
                    label_ids.append(-100)
                elif word_idx != previous_word_idx:
                    label_ids.append(label[word_idx])
                else:
                    label_ids.append(-100)
                previous_word_idx = word_idx
            labels.append(label_ids)
        tokenized_inputs["labels"] = labels
        return tokenized_inputs

    tokenized_train = _map(train, tokenize_and_align_labels, 16)
    tokenized_test = _map(test, tokenize_and_align_labels, 16)
    data_collator = lib.DataCollatorForTokenClassification(tokenizer=tokenizer)
    model = lib.AutoModelForTokenClassification.from_pretrained(
        folder, num_labels=len(label_list), id2label=id2label, label2id=label2id
    )
    # the untrained head tags nearly every token with an entity: every grouping rule is exercised
    untrained = {
        strategy: lib.pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy=strategy)(
            NER_TEXTS
        )
        for strategy in ("none", "simple", "first", "average", "max")
    }

    def compute_metrics(p):
        predictions, labels = p
        predictions = np.argmax(predictions, axis=2)
        real = labels != -100
        return {"accuracy": float((predictions[real] == labels[real]).mean())}

    trainer = lib.Trainer(
        model=model,
        args=_args(
            lib,
            out / "run",
            learning_rate=5e-3,
            per_device_train_batch_size=48,
            per_device_eval_batch_size=8,
            num_train_epochs=3,
            eval_strategy="epoch",
            save_strategy="no",
        ),
        train_dataset=tokenized_train,
        eval_dataset=tokenized_test,
        processing_class=tokenizer,
        data_collator=data_collator,
        compute_metrics=compute_metrics,
    )
    result = trainer.train()
    prediction = trainer.predict(tokenized_test)
    trainer.save_model(out / "saved")
    ner = lib.pipeline("token-classification", model=str(out / "saved"), aggregation_strategy="simple")
    return {
        "features": [{k: list(map(int, v)) for k, v in f.items()} for f in tokenized_train + tokenized_test],
        "word_ids": tokenizer([r["tokens"] for r in train[:3]], is_split_into_words=True).word_ids(2),
        "batch": {k: v for k, v in data_collator(tokenized_train[:4]).items()},
        "untrained": untrained,
        "train": _timeless(result.metrics),
        "evaluate": _timeless(trainer.evaluate()),
        "predictions": prediction.predictions,
        "label_ids": prediction.label_ids,
        "test_metrics": _timeless(prediction.metrics),
        "weights": _weights(trainer.model),
        "pipe": ner(NER_TEXTS),
    }


def _same_entities(got: list[dict], want: list[dict], what: str) -> None:
    assert len(got) == len(want), what
    for a, b in zip(got, want):
        assert {k: v for k, v in a.items() if k != "score"} == {k: v for k, v in b.items() if k != "score"}, what
        assert a["score"] == pytest.approx(float(b["score"]), abs=1e-5), what


def test_token_classification_script_as_transformers(tmp_path, wnut):
    folder = _tiny(tmp_path / "tiny", "BertForTokenClassification", num_labels=len(wnut[0]))
    want = _token_classification_script(transformers, folder, tmp_path / "hf", wnut)
    got = _token_classification_script(bertkit, folder, tmp_path / "bk", wnut)
    # label alignment: ids, word ids, -100 on special tokens and later sub-tokens
    assert got["features"] == want["features"]
    assert sum(f["labels"].count(-100) for f in want["features"]) > 2 * len(want["features"])  # sub-tokens exist
    assert got["word_ids"] == want["word_ids"]
    for k, v in want["batch"].items():
        assert torch.equal(got["batch"][k], v), k
    # pipelines on the untrained head: entity groups, spans, scores and words (lower-cased, ## kept)
    for strategy, texts in want["untrained"].items():
        assert sum(len(t) for t in texts) > 10
        for ours, theirs in zip(got["untrained"][strategy], texts):
            _same_entities(ours, theirs, strategy)
    assert got["train"]["train_loss"] == pytest.approx(want["train"]["train_loss"], rel=1e-5)
    for name in ("evaluate", "test_metrics"):
        assert got[name].keys() == want[name].keys()
        for k, v in want[name].items():
            assert got[name][k] == pytest.approx(v, rel=1e-5, abs=1e-6), (name, k)
    np.testing.assert_array_equal(got["label_ids"], want["label_ids"])
    # bertkit does not compute padding positions (README: packed padding), so logits are compared on
    # the tokens of the texts; -100 marks both padding and later sub-tokens, so the mask is the inputs'
    real = np.zeros(want["label_ids"].shape, bool)
    for i, f in enumerate(want["features"][-len(real) :]):
        real[i, : len(f["input_ids"])] = True
    np.testing.assert_allclose(got["predictions"][real], want["predictions"][real], atol=1e-4)
    _close_weights(got["weights"], want["weights"], _saved(folder))
    for ours, theirs in zip(got["pipe"], want["pipe"]):
        _same_entities(ours, theirs, "trained")


def test_tokens_are_put_back_together_as_transformers_does():
    ours = bertkit.AutoTokenizer.from_pretrained(asset_path("minilm"))
    theirs = transformers.AutoTokenizer.from_pretrained(asset_path("minilm"))
    for text in NER_TEXTS + ["Don't stop , it's 3.5 % off ? Yes ! un-believable , naïve ...", "北京 and 東京"]:
        tokens = theirs.tokenize(text)
        for part in (tokens, tokens[2:], tokens[3:7], tokens[-3:], tokens[:1], []):
            assert ours.convert_tokens_to_string(part) == theirs.convert_tokens_to_string(part), part


# ---------------------------------------------------------------- 3. extractive QA preprocessing


def _qa_examples(n: int = 20) -> list[dict]:
    """Questions over the first 90 words of real BBC articles, each answered by a 3-word span of its
    context; the spans sit at different places, so some 64-token windows miss them."""
    rows = [json.loads(line) for line in asset_path("bbcnews-train").read_text(encoding="utf-8").splitlines()[:n]]
    out = []
    for i, row in enumerate(rows):
        words = row["text"].split()[:90]
        context, at = " ".join(words), 5 + (i * 7) % 75
        answer = " ".join(words[at : at + 3])
        start = context.index(answer, len(" ".join(words[:at])))
        question = " What comes after " + " ".join(words[at - 3 : at]) + "? "
        out.append(
            {
                "id": str(i),
                "question": question,
                "context": context,
                "answers": {"text": [answer], "answer_start": [start]},
            }
        )
    return out


def _qa_script(lib: types.ModuleType, folder, out) -> dict:
    examples = _qa_examples()
    train, test = examples[:16], examples[16:]
    tokenizer = lib.AutoTokenizer.from_pretrained(folder)
    max_length, stride, seen = 64, 16, {}

    def preprocess_training_examples(examples):
        questions = [q.strip() for q in examples["question"]]
        inputs = tokenizer(
            questions,
            examples["context"],
            max_length=max_length,
            truncation="only_second",
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding="max_length",
        )
        offset_mapping = inputs.pop("offset_mapping")
        sample_map = inputs.pop("overflow_to_sample_mapping")
        seen.setdefault("offsets", []).append([[list(o) for o in row] for row in offset_mapping])
        seen.setdefault("sample_map", []).append(list(sample_map))
        seen.setdefault("sequence_ids", []).append([inputs.sequence_ids(i) for i in range(len(inputs["input_ids"]))])
        answers = examples["answers"]
        start_positions, end_positions = [], []
        for i, offset in enumerate(offset_mapping):
            answer = answers[sample_map[i]]
            start_char = answer["answer_start"][0]
            end_char = answer["answer_start"][0] + len(answer["text"][0])
            sequence_ids = inputs.sequence_ids(i)
            idx = 0
            while sequence_ids[idx] != 1:
                idx += 1
            context_start = idx
            while sequence_ids[idx] == 1:
                idx += 1
            context_end = idx - 1
            if offset[context_start][0] > start_char or offset[context_end][1] < end_char:
                start_positions.append(0)
                end_positions.append(0)
            else:
                idx = context_start
                while idx <= context_end and offset[idx][0] <= start_char:
                    idx += 1
                start_positions.append(idx - 1)
                idx = context_end
                while idx >= context_start and offset[idx][1] >= end_char:
                    idx -= 1
                end_positions.append(idx + 1)
        inputs["start_positions"] = start_positions
        inputs["end_positions"] = end_positions
        return inputs

    features = _map(train, preprocess_training_examples, 8)
    model = lib.AutoModelForQuestionAnswering.from_pretrained(folder)
    args = _args(
        lib,
        out / "run",
        learning_rate=5e-3,
        per_device_train_batch_size=len(features),
        num_train_epochs=3,
        per_device_eval_batch_size=16,
        save_strategy="no",
    )
    trainer = lib.Trainer(model=model, args=args, train_dataset=features, processing_class=tokenizer)
    result = trainer.train()
    trainer.save_model(out / "saved")
    test_features = _map(
        test,
        lambda ex: tokenizer(
            [q.strip() for q in ex["question"]],
            ex["context"],
            max_length=max_length,
            truncation="only_second",
            stride=stride,
            return_overflowing_tokens=True,
            padding="max_length",
        ),
        4,
    )
    predictions = trainer.predict(
        [{k: v for k, v in f.items() if k != "overflow_to_sample_mapping"} for f in test_features]
    )
    return {
        "features": [{k: list(map(int, v)) if isinstance(v, list) else int(v) for k, v in f.items()} for f in features],
        **seen,
        "train": _timeless(result.metrics),
        "weights": _weights(trainer.model),
        # transformers gives (start_logits, end_logits); bertkit's predict only the first (see the report)
        "start_logits": predictions.predictions[0]
        if isinstance(predictions.predictions, tuple)
        else predictions.predictions,
        "test": test,
    }


def test_qa_preprocessing_and_training_script_as_transformers(tmp_path):
    folder = _tiny(tmp_path / "tiny", "BertForQuestionAnswering")
    want = _qa_script(transformers, folder, tmp_path / "hf")
    got = _qa_script(bertkit, folder, tmp_path / "bk")
    # overflowing windows: ids, offsets, window -> example, sequence ids, then the answer positions
    for key in ("features", "offsets", "sample_map", "sequence_ids"):
        assert got[key] == want[key], key
    positions = [(f["start_positions"], f["end_positions"]) for f in want["features"]]
    assert len(positions) > 16 and (0, 0) in positions and any(s > 0 for s, _ in positions)
    assert got["train"]["train_loss"] == pytest.approx(want["train"]["train_loss"], rel=1e-5)
    # a bias that shifts every position alike (the QA head's, the last LayerNorm's) gets a zero gradient
    # from a softmax over positions, so Adam moves it by the sign of rounding noise: those, and the
    # logits' shift they cause, are left out of the comparison
    skip = ("qa_outputs.bias", "layer.1.output.LayerNorm.bias")
    _close_weights(got["weights"], want["weights"], _saved(folder), skip=skip)
    shift = lambda x: x - x.mean(-1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(shift(got["start_logits"]), shift(want["start_logits"]), atol=1e-4)

    # the QA pipeline (transformers 5 has none): the best span of the trained model's logits, one
    # window and 64-token windows with a 16-token stride
    qa = bertkit.pipeline("question-answering", model=str(tmp_path / "bk" / "saved"))
    reference = transformers.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "bk" / "saved").eval()
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "bk" / "saved")
    for ex in got["test"]:
        for window in ({}, {"max_seq_len": 64, "doc_stride": 16}):
            ours = qa(question=ex["question"], context=ex["context"], max_answer_len=15, **window)
            enc = tok(
                ex["question"].strip(),
                ex["context"],
                truncation="only_second",
                max_length=window.get("max_seq_len", 384),
                stride=window.get("doc_stride", 128),
                return_overflowing_tokens=True,
                return_offsets_mapping=True,
                padding=True,
                return_tensors="pt",
            )
            offsets = enc.pop("offset_mapping").tolist()
            enc.pop("overflow_to_sample_mapping")
            with torch.no_grad():
                out = reference(**enc)
            best = max(
                ((out.start_logits[w, i] + out.end_logits[w, j]).item(), offsets[w][i][0], offsets[w][j][1])
                for w in range(len(offsets))
                for i, si in enumerate(enc.sequence_ids(w))
                for j, sj in enumerate(enc.sequence_ids(w))
                if si == sj == 1 and i <= j < i + 15
            )
            assert (ours["start"], ours["end"]) == best[1:], (ex["id"], window)
            assert ours["answer"] == ex["context"][best[1] : best[2]]
