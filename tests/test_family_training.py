"""Causal-LM pretraining and distillation recipes, small and fast, on real text."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
import torch.nn.functional as F
import transformers

from bertkit.assets import asset_path
from bertkit.modeling import BertConfig, BertForSequenceClassification
from bertkit.tasks.distillation import distillation_loss, student_from_teacher
from bertkit.tokenization import BertTokenizer


def _lines(name: str, n: int) -> list[str]:
    with open(asset_path(name), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


# ---------------------------------------------------------------------------------------- causal LM


@pytest.fixture(scope="module")
def clm_run(tmp_path_factory):
    from bertkit.training.clm import CLMRecipe, pretrain_clm

    root = tmp_path_factory.mktemp("clm")
    corpus = root / "news.txt"
    corpus.write_text("\n".join(_lines("news-zh", 400)) + "\n", encoding="utf-8")
    recipe = CLMRecipe(
        corpus=[str(corpus)],
        vocab=str(asset_path("vocab-chinese")),
        output=str(root / "out"),
        n_layer=2,
        n_embd=32,
        n_head=2,
        seq_len=32,
        batch_size=8,
        max_steps=6,
        eval_every=3,
        save_every=3,
        eval_blocks=8,
        warmup_steps=2,
        progress=False,
        cache_dir=str(root / "prep"),
        precision="fp32",
    )
    first = pretrain_clm(recipe)
    return recipe, first, root / "out"


def test_clm_saves_a_folder_transformers_loads_with_its_tokenizer(clm_run):
    _, result, out = clm_run
    assert result["step"] == 6 and result["eval_perplexity"] > 1
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["tokenizer_class"] == "BertTokenizer"
    assert config["vocab_size"] == 21128
    ref = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert type(tok).__name__.startswith("BertTokenizer")
    from bertkit import AutoModelForCausalLM

    ours = AutoModelForCausalLM.from_pretrained(out)
    ids = tok(_lines("news-zh", 1)[0][:20], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(ref(ids).logits, ours(ids).logits, atol=1e-5)
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval_perplexity" in r]
    assert [r["step"] for r in evals][:2] == [3, 6]
    assert (out / "metrics.png").is_file()


def test_clm_resumes_from_its_checkpoint(clm_run):
    from bertkit.training.clm import pretrain_clm

    recipe, _, out = clm_run
    recipe.max_steps, recipe.resume = 9, True
    result = pretrain_clm(recipe)
    assert result["step"] == 9
    steps = [json.loads(r)["step"] for r in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps.count(7) >= 1 and 6 in steps


def test_clm_blocks_hold_out_whole_sentences():
    import numpy as np

    from bertkit.training.clm import pack_sentences

    sents = [np.arange(5) + 10 * i for i in range(20)]
    blocks = pack_sentences(sents, 8, 1, 2)
    stream = np.concatenate([np.concatenate([[1], s, [2]]) for s in sents])
    assert blocks.shape == (len(stream) // 8, 8)
    assert np.array_equal(blocks.reshape(-1), stream[: blocks.size])


# ---------------------------------------------------------------------------------------- distillation


@pytest.fixture(scope="module")
def minilm_classifier():
    torch.manual_seed(0)
    return BertForSequenceClassification.from_pretrained(asset_path("minilm"), num_labels=2).eval()


def test_student_with_all_layers_computes_the_teachers_hidden_states(minilm_classifier):
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    enc = tok(
        ["a gorgeous, witty, seductive movie.", "the plot is a mess and the acting is worse."],
        padding=True,
        return_tensors="pt",
    )
    teacher = minilm_classifier
    student = student_from_teacher(teacher, teacher.config.num_hidden_layers).eval()
    with torch.no_grad():
        t = teacher.bert(**enc).last_hidden_state
        s = student.distilbert(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    real = enc["attention_mask"].bool()
    assert torch.allclose(t[real], s[real], atol=1e-5)


def test_student_takes_every_other_teacher_layer(minilm_classifier):
    student = student_from_teacher(minilm_classifier, 3)
    assert student.config.n_layers == 3 and student.config.distilled_from_layers == [0, 2, 4]
    for i, j in enumerate([0, 2, 4]):
        assert torch.equal(
            student.distilbert.transformer.layer[i].ffn.lin1.weight,
            minilm_classifier.bert.encoder.layer[j].intermediate.dense.weight,
        )
    assert torch.equal(student.classifier.weight, minilm_classifier.classifier.weight)
    with pytest.raises(ValueError, match=r"student_layers must be in \[1, 6\]"):
        student_from_teacher(minilm_classifier, 7)


def test_distillation_loss_is_kl_plus_teacher_entropy_at_temperature():
    torch.manual_seed(0)
    s, t = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)
    labels = torch.tensor([0, 2, 1, 1])
    T = 2.0
    loss, logs = distillation_loss(s, t, labels, T, alpha_ce=0.7, alpha_hard=0.3)
    p_t = F.softmax(t / T, -1)
    kl = F.kl_div(F.log_softmax(s / T, -1), p_t, reduction="batchmean")
    entropy = -(p_t * p_t.log()).sum(-1).mean()
    expected = 0.7 * (kl + entropy) * T * T + 0.3 * F.cross_entropy(s, labels)
    assert torch.allclose(loss, expected, atol=1e-6)
    assert set(logs) == {"soft_loss", "hard_loss"}


def test_distill_recipe_end_to_end(tmp_path):
    """A tiny teacher fine-tuned by bertkit, distilled to one layer; the student loads for evaluation."""
    import shutil

    from bertkit.tasks.api import evaluate, finetune
    from bertkit.tasks.distillation import DistillConfig, distill

    base = tmp_path / "base"
    torch.manual_seed(0)
    from bertkit.modeling import BertModel

    BertModel(
        BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    ).save_pretrained(base)
    shutil.copy(asset_path("minilm") / "vocab.txt", base / "vocab.txt")
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"  # a slice of the real polarity data
    train.write_text("\n".join(_lines("polarity-train", 97)) + "\n", encoding="utf-8")
    test.write_text("\n".join(_lines("polarity-test", 49)) + "\n", encoding="utf-8")
    finetune(
        "text-classification",
        base,
        train,
        tmp_path / "teacher",
        epochs=1,
        max_length=32,
        max_train_samples=64,
        max_eval_samples=32,
        progress=False,
        quiet=True,
        batch_size=16,
    )
    out = tmp_path / "student"
    res = distill(
        DistillConfig(
            teacher=str(tmp_path / "teacher"),
            train=str(train),
            validation=str(test),
            output=str(out),
            student_layers=1,
            epochs=1,
            batch_size=32,
            alpha_cos=1.0,
            progress=False,
            max_length=32,
        )
    )
    assert res["student_layers"] == 1 and res["teacher_layers"] == 2
    assert 0 <= res["student"]["accuracy"] <= 1 and 0 <= res["teacher"]["accuracy"] <= 1
    assert res["speed"]["teacher_seconds"] > 0 and res["speed"]["student_seconds"] > 0
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    assert any({"soft_loss", "hard_loss", "cos_loss"} <= set(r) for r in rows)
    assert json.loads((out / "config.json").read_text())["model_type"] == "distilbert"
    again = evaluate(out, test, progress=False)
    assert abs(again["accuracy"] - res["student"]["accuracy"]) < 1e-9
