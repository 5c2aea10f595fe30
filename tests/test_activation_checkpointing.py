"""Activation checkpointing: every family recomputes its blocks in the backward pass and gets the
same gradients with less kept in memory, under transformers' calls (``activation_checkpointing_enable``,
the former ``gradient_checkpointing_enable``, ``TrainingArguments(gradient_checkpointing=True)``).

Same gradients: each model runs one forward and backward with and without checkpointing from the same
seed, dropout on (the recomputation must replay the same masks), and the gradients must agree within
1e-6. Less memory: the bytes autograd keeps for the backward pass, counted with
``torch.autograd.graph.saved_tensors_hooks``, must fall by at least a third.
"""

from __future__ import annotations

import csv
import warnings

import pytest
import torch

import bertkit
from bertkit.assets import asset_path

transformers = pytest.importorskip("transformers")


def _bert_config(**kw):
    return dict(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        **kw,
    )


def _models():
    return {
        "bert-mlm": bertkit.BertForMaskedLM(bertkit.BertConfig(**_bert_config())),
        "bert-cls": bertkit.BertForSequenceClassification(bertkit.BertConfig(**_bert_config(num_labels=3))),
        "distilbert": bertkit.DistilBertForSequenceClassification(
            bertkit.DistilBertConfig(vocab_size=30522, dim=64, n_layers=4, n_heads=4, hidden_dim=128, num_labels=2)
        ),
        "electra": bertkit.ElectraForPreTraining(
            bertkit.ElectraConfig(
                vocab_size=30522,
                embedding_size=32,
                hidden_size=64,
                num_hidden_layers=4,
                num_attention_heads=4,
                intermediate_size=128,
            )
        ),
        "gpt2": bertkit.GPT2LMHeadModel(bertkit.GPT2Config(vocab_size=30522, n_embd=64, n_layer=4, n_head=4)),
    }


@pytest.fixture(scope="module")
def batch():
    """Real polarity sentences of different lengths, padded: the packed path is part of what runs."""
    tok = bertkit.BertTokenizer.from_pretrained(asset_path("minilm"))
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        texts = [r["text"] for r in list(csv.DictReader(f))[:6]]
    enc = tok(texts, padding=True, truncation=True, max_length=48, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any()
    return dict(enc)


def _inputs(name, model, batch):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if name == "bert-mlm":
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    if name == "electra":
        return {"input_ids": ids, "attention_mask": mask, "labels": (ids % 2).masked_fill(mask == 0, -100)}
    if name == "gpt2":
        return {"input_ids": ids, "labels": ids}
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.arange(len(ids)) % model.config.num_labels}


def _grads_and_saved_bytes(model, inputs, seed=0):
    """The gradients of the loss, and the bytes of activations autograd keeps for the blocks: those
    saved by a forward of the encoder (or decoder) alone, the weights not counted, since the heads'
    logits over 30,522 words would otherwise dwarf the blocks."""
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = model(**inputs).loss
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    weights = {p.data_ptr() for p in model.parameters()}
    saved = []

    def pack(t):
        if t.data_ptr() not in weights:
            saved.append(t.numel() * t.element_size())
        return t

    body = {k: v for k, v in inputs.items() if k != "labels"}
    torch.manual_seed(seed)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model.base_model(**body)
    if out[0].requires_grad:
        out[0].float().pow(2).mean().backward()
    model.zero_grad(set_to_none=True)
    return grads, sum(saved)


@pytest.mark.parametrize("name", ["bert-mlm", "bert-cls", "distilbert", "electra", "gpt2"])
def test_same_gradients_with_less_kept(name, batch):
    torch.manual_seed(0)
    model = _models()[name]
    inputs = _inputs(name, model, batch)
    plain, plain_bytes = _grads_and_saved_bytes(model, inputs)
    assert not model.is_activation_checkpointing
    model.activation_checkpointing_enable()
    assert model.is_activation_checkpointing
    ckpt, ckpt_bytes = _grads_and_saved_bytes(model, inputs)
    assert plain.keys() == ckpt.keys() and len(plain) > 10
    for key in plain:
        torch.testing.assert_close(ckpt[key], plain[key], atol=1e-6, rtol=1e-5, msg=key)
    assert ckpt_bytes < plain_bytes * 2 / 3, (name, ckpt_bytes, plain_bytes)
    # another seed gives other dropout masks: the equality above is not a model without dropout
    other, _ = _grads_and_saved_bytes(model, inputs, seed=1)
    assert any(not torch.allclose(other[k], ckpt[k]) for k in ckpt)

    model.activation_checkpointing_disable()
    assert not model.is_activation_checkpointing
    _, again = _grads_and_saved_bytes(model, inputs)
    assert again == plain_bytes
    # no checkpointing in eval mode or without gradients
    model.activation_checkpointing_enable()
    model.eval()
    with torch.no_grad():
        model(**{k: v for k, v in inputs.items() if k != "labels"})


def test_layers_checkpointed_and_gradients_as_transformers(tmp_path, batch):
    torch.manual_seed(0)
    config = bertkit.BertConfig(**_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    bertkit.BertForMaskedLM(config).save_pretrained(tmp_path)
    ours = bertkit.BertForMaskedLM.from_pretrained(tmp_path)
    theirs = transformers.BertForMaskedLM.from_pretrained(tmp_path)
    for model in (ours, theirs):
        model.activation_checkpointing_enable(every_n_layers=3)
    assert [layer.gradient_checkpointing for layer in ours.bert.encoder.layer] == [
        layer.gradient_checkpointing for layer in theirs.bert.encoder.layer
    ]
    assert [layer.gradient_checkpointing for layer in ours.bert.encoder.layer] == [True, False, False, True]
    inputs = _inputs("bert-mlm", ours, batch)
    got, _ = _grads_and_saved_bytes(ours, inputs)
    want, _ = _grads_and_saved_bytes(theirs, inputs)
    for key, grad in got.items():
        torch.testing.assert_close(grad, want[key], atol=2e-5, rtol=1e-4, msg=key)
    # the former names are the same switch
    ours.gradient_checkpointing_disable()
    assert not ours.is_gradient_checkpointing
    ours.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert all(layer.gradient_checkpointing for layer in ours.bert.encoder.layer)
    with pytest.raises(ValueError, match="every_n_layers must be an integer >= 1, got 0"):
        ours.activation_checkpointing_enable(every_n_layers=0)
    assert ours.get_memory_footprint() == theirs.get_memory_footprint(return_buffers=False) + sum(
        b.numel() * b.element_size() for b in ours.buffers()
    )


def test_frozen_embeddings_under_reentrant_checkpointing_still_train_the_layers(batch):
    """Reentrant checkpointing gives a block no gradient when its input needs none; the embeddings'
    output is made to need one, as transformers does."""
    torch.manual_seed(0)
    model = _models()["bert-cls"]
    inputs = _inputs("bert-cls", model, batch)
    model.bert.embeddings.requires_grad_(False)
    plain, _ = _grads_and_saved_bytes(model, inputs)
    model.activation_checkpointing_enable({"use_reentrant": True})
    ckpt, _ = _grads_and_saved_bytes(model, inputs)
    assert "bert.encoder.layer.0.attention.self.query.weight" in ckpt
    for key in plain:
        torch.testing.assert_close(ckpt[key], plain[key], atol=1e-6, rtol=1e-5, msg=key)
    model.disable_input_require_grads()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that no input requires grad
        dropped, _ = _grads_and_saved_bytes(model, inputs)
    assert "bert.encoder.layer.0.attention.self.query.weight" not in dropped


def test_gpt2_runs_without_the_cache_while_checkpointing(batch):
    torch.manual_seed(0)
    model = _models()["gpt2"]
    model.activation_checkpointing_enable()
    model.train()
    with pytest.warns(UserWarning, match="use_cache=True is incompatible with activation checkpointing"):
        out = model(input_ids=batch["input_ids"][:2, :8], use_cache=True)
    assert out.past_key_values is None
    model.eval()
    with torch.no_grad():
        assert model(input_ids=batch["input_ids"][:2, :8], use_cache=True).past_key_values is not None


def test_trainer_with_gradient_checkpointing_trains_as_transformers(tmp_path, batch):
    torch.manual_seed(0)
    config = bertkit.BertConfig(**_bert_config(num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    bertkit.BertForSequenceClassification(config).save_pretrained(tmp_path / "start")
    items = [
        {
            "input_ids": batch["input_ids"][i][batch["attention_mask"][i] == 1].tolist(),
            "labels": i % 2,
        }
        for i in range(6)
    ]
    call = dict(
        num_train_epochs=2,
        per_device_train_batch_size=3,
        learning_rate=1e-3,
        gradient_checkpointing=True,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    weights = []
    for lib in (transformers, bertkit):
        model = lib.AutoModelForSequenceClassification.from_pretrained(tmp_path / "start")
        trainer = lib.Trainer(
            model=model,
            args=lib.TrainingArguments(output_dir=str(tmp_path / lib.__name__), **call),
            train_dataset=items,
            data_collator=lib.DataCollatorWithPadding(lib.AutoTokenizer.from_pretrained(asset_path("minilm"))),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # transformers' name for it is deprecated there
            trainer.train()
        assert model.is_activation_checkpointing
        weights.append(model.state_dict())
    for key, value in weights[1].items():
        torch.testing.assert_close(value, weights[0][key], atol=2e-5, rtol=1e-4, msg=key)

    args = bertkit.TrainingArguments(output=str(tmp_path / "own"), activation_checkpointing=True)
    assert args.activation_checkpointing
    with pytest.raises(ValueError, match="holds no model with activation_checkpointing_enable"):
        bertkit.Trainer(torch.nn.Linear(2, 2), args, train_dataset=[{"x": 1}])


def test_the_commands_take_the_flag():
    import argparse

    from bertkit.tasks.finetune_cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "--task",
            "text-classification",
            "--model",
            "m",
            "--train",
            "t.csv",
            "--output",
            "o",
            "--activation-checkpointing",
        ]
    )
    assert args.activation_checkpointing
    assert not parser.parse_args(
        ["--task", "text-classification", "--model", "m", "--train", "t.csv", "--output", "o"]
    ).activation_checkpointing
