"""count_parameters, freeze/unfreeze and `bertkit inspect`, checked against transformers' parameter counts
and the per-component table a user reads to see where a model's parameters are."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from bertkit.assets import asset_path
from bertkit.cli import main
from bertkit.modeling import (
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    BertModel,
    count_parameters,
    freeze,
    unfreeze,
)


def test_bert_base_split_matches_seed_003():
    model = BertModel(BertConfig())
    groups = count_parameters(model, by="group")
    total = sum(groups.values())
    assert total == 109_482_240
    shares = {k: round(100 * v / total, 2) for k, v in groups.items()}
    assert shares == {"embeddings": 21.77, "encoder": 77.69, "pooler": 0.54}
    comps = count_parameters(model, by="component")
    assert list(comps)[:2] == ["embeddings", "encoder.layer.0"] and len(comps) == 14
    assert sum(comps.values()) == total


def test_counts_agree_with_transformers_for_head_models():
    cfg = dict(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)
    for name, cls in (
        ("BertForPreTraining", BertForPreTraining),
        ("BertForSequenceClassification", BertForSequenceClassification),
    ):
        hf = getattr(transformers, name)(transformers.BertConfig(**cfg))
        mine = cls(BertConfig(**cfg))
        assert count_parameters(mine) == hf.num_parameters()
        assert sum(count_parameters(mine, by="component").values()) == hf.num_parameters()
    comps = count_parameters(BertForPreTraining(BertConfig(**cfg)), by="component")
    assert list(comps) == ["bert.embeddings", "bert.encoder.layer.0", "bert.encoder.layer.1", "bert.pooler", "cls"]


def test_freeze_and_unfreeze_with_ranges():
    model = BertForSequenceClassification(BertConfig.from_preset("mini", vocab_size=500))
    total = count_parameters(model)
    frozen = freeze(model, "embeddings", "encoder.layer.0-2")
    expected = sum(
        p.numel()
        for n, p in model.named_parameters()
        if n.startswith(("bert.embeddings.", "bert.encoder.layer.0.", "bert.encoder.layer.1.", "bert.encoder.layer.2."))
    )
    assert frozen == expected
    assert count_parameters(model, trainable_only=True) == total - expected
    assert not model.bert.encoder.layer[2].output.dense.weight.requires_grad
    assert model.bert.encoder.layer[3].output.dense.weight.requires_grad and model.classifier.weight.requires_grad
    by_comp = count_parameters(model, by="component", trainable_only=True)
    assert by_comp["bert.embeddings"] == 0 and by_comp["classifier"] > 0
    unfreeze(model, "bert.encoder.layer.1")
    assert model.bert.encoder.layer[1].attention.self.query.weight.requires_grad
    freeze(model, "all")
    assert count_parameters(model, trainable_only=True) == 0
    with pytest.raises(ValueError, match=r"encoder.layer.9.*Valid names: .*embeddings.*encoder.layer.3"):
        freeze(model, "encoder.layer.9")
    with pytest.raises(ValueError, match="matches no module"):
        unfreeze(model, "encoder.layer.2-9")


def test_inspect_cli_on_minilm(capsys):
    path = asset_path("minilm")
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    hf_total = transformers.BertModel.from_pretrained(str(path)).num_parameters()
    assert "(query): Linear(in_features=384, out_features=384, bias=True)" in out  # the module tree
    assert f"{hf_total:,}" in out
    for name in ("embeddings", "encoder.layer.0", "encoder.layer.5", "pooler", "total"):
        assert any(line.startswith(name) for line in out.splitlines()), name
    assert "100.00%" in out


def test_inspect_cli_on_bert_base_shape(capsys):
    assert main(["inspect", "base", "--no-tree"]) == 0
    out = capsys.readouterr().out
    assert "109,482,240" in out and "21.77%" in out and "77.69%" in out and "0.54%" in out
    assert main(["inspect", "/no/such/model"]) == 1


def test_inspect_on_a_weights_file_names_it_and_asks_for_the_folder(capsys):
    weights = asset_path("minilm") / "model.safetensors"  # real bytes: not UTF-8 past the header
    assert main(["inspect", str(weights)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "codec" not in err
    assert f"{weights}: not a JSON config" in err and "give the model folder" in err
