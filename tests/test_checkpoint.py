"""Checkpoint formats, key mapping, the hub cache layout, load reports, atomic saves, corrupt files."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch
from safetensors.torch import load_file

transformers = pytest.importorskip("transformers")

from bertkit.assets import asset_path
from bertkit.hub import resolve_model_path
from bertkit.modeling import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
)

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def minilm_dir():
    return asset_path("minilm")


@pytest.fixture(scope="module")
def real_state(minilm_dir):
    return load_file(str(minilm_dir / "model.safetensors"))


@pytest.fixture(scope="module")
def ids(minilm_dir):
    tok = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    enc = tok(
        ["It is a truth universally acknowledged.", "A single man in possession of a good fortune."],
        padding=True,
        return_tensors="pt",
    )
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def _copy_config(src, dst, **changes):
    dst.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))


def _assert_same_weights(model, state, prefix=""):
    sd = model.state_dict()
    for k, v in state.items():
        if k.endswith("position_ids"):
            continue
        assert torch.equal(sd[prefix + k], v), k


def test_real_checkpoint_keys_are_state_dict_keys(minilm_dir, real_state):
    model = BertModel.from_pretrained(minilm_dir)
    assert set(model.state_dict()) == {k for k in real_state if not k.endswith("position_ids")}
    assert model.encoder.layer[0].attention.self.query.weight.shape == (384, 384)
    _assert_same_weights(model, real_state)


def test_sharded_safetensors_from_transformers(minilm_dir, real_state, tmp_path, ids):
    hf = transformers.BertModel.from_pretrained(str(minilm_dir))
    hf.save_pretrained(tmp_path, max_shard_size="30MB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    model = BertModel.from_pretrained(tmp_path)
    _assert_same_weights(model, real_state)


def test_bertkit_sharded_save_loads_in_transformers(minilm_dir, tmp_path, ids):
    model = BertModel.from_pretrained(minilm_dir)
    model.save_pretrained(tmp_path / "out", max_shard_size="20MB")
    assert len(list((tmp_path / "out").glob("model-*-of-*.safetensors"))) > 1
    hf = transformers.BertModel.from_pretrained(str(tmp_path / "out")).eval()
    real = ids["attention_mask"].bool()
    with torch.no_grad():
        assert (hf(**ids).last_hidden_state - model(**ids).last_hidden_state).abs()[real].max() < 1e-5
    # saving unsharded into the same folder removes the now stale shards
    model.save_pretrained(tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors"]


def test_pytorch_bin_with_legacy_gamma_beta_and_position_ids(minilm_dir, real_state, tmp_path):
    legacy = {}
    for k, v in real_state.items():
        k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        legacy["bert." + k] = v
    legacy["bert.embeddings.position_ids"] = torch.arange(512)[None]
    _copy_config(minilm_dir, tmp_path)
    torch.save(legacy, tmp_path / "pytorch_model.bin")
    model, info = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == []
    _assert_same_weights(model, real_state)


def test_bin_with_code_is_refused(minilm_dir, tmp_path):
    import argparse

    _copy_config(minilm_dir, tmp_path)  # an arbitrary object: weights_only=True must refuse to unpickle it
    torch.save({"embeddings.word_embeddings.weight": argparse.Namespace(x=1)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pytorch_model.bin"):
        BertModel.from_pretrained(tmp_path)


def test_head_model_from_base_checkpoint_reports_new_head(minilm_dir, real_state, caplog):
    with caplog.at_level(logging.WARNING, logger="bertkit"):
        model, info = BertForSequenceClassification.from_pretrained(minilm_dir, num_labels=5, output_loading_info=True)
    assert model.config.num_labels == 5 and model.classifier.weight.shape == (5, 384)
    _assert_same_weights(model, real_state, prefix="bert.")
    assert sorted(info["missing_keys"]) == ["classifier.bias", "classifier.weight"]
    reports = [r.getMessage() for r in caplog.records if "newly initialized" in r.getMessage()]
    assert len(reports) == 1
    assert "classifier.weight, classifier.bias are newly initialized" in reports[0]
    assert "sequence-classification head" in reports[0] and "train this model" in reports[0]


def test_base_model_from_pretraining_checkpoint(tmp_path, ids):
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(
        transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    ).eval()
    hf.save_pretrained(tmp_path)
    base, info = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == []
    assert all(k.startswith("cls.") for k in info["unexpected_keys"]) and info["unexpected_keys"]
    real = ids["attention_mask"].bool()
    with torch.no_grad():
        assert (base(**ids).last_hidden_state - hf.bert(**ids).last_hidden_state).abs()[real].max() < 1e-5
    # the MLM decoder is tied to the word embeddings after loading
    mlm = BertForMaskedLM.from_pretrained(tmp_path)
    assert mlm.cls.predictions.decoder.weight is mlm.bert.embeddings.word_embeddings.weight
    assert torch.equal(mlm.cls.predictions.bias, hf.cls.predictions.bias)


def test_mismatched_head_shape(tmp_path):
    torch.manual_seed(0)
    cfg = BertConfig.from_preset("tiny", vocab_size=100, num_labels=3)
    BertForSequenceClassification(cfg).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"classifier.weight has shape \(3, 128\).*\(5, 128\)"):
        BertForSequenceClassification.from_pretrained(tmp_path, num_labels=5)
    model, info = BertForSequenceClassification.from_pretrained(
        tmp_path, num_labels=5, ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert model.classifier.weight.shape == (5, 128)
    assert sorted(info["mismatched_keys"]) == ["classifier.bias", "classifier.weight"]


def test_truncated_and_corrupt_weights_name_the_file(minilm_dir, tmp_path):
    _copy_config(minilm_dir, tmp_path)
    data = (minilm_dir / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match=str(tmp_path / "model.safetensors")):
        BertModel.from_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ValueError, match="model.safetensors"):
        BertModel.from_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK\x03\x04 truncated zip")
    with pytest.raises(ValueError, match="pytorch_model.bin"):
        BertModel.from_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").unlink()
    with pytest.raises(FileNotFoundError, match="no weights in"):
        BertModel.from_pretrained(tmp_path)


def _fake_hub(root, minilm_dir):
    repo = root / "hub" / ("models--" + MINILM_ID.replace("/", "--"))
    for rev, marker in (("abc123", "current"), ("old999", "stale")):
        snap = repo / "snapshots" / rev
        snap.mkdir(parents=True)
        _copy_config(minilm_dir, snap, bertkit_test_marker=marker)
        os.symlink(minilm_dir / "model.safetensors", snap / "model.safetensors")  # as the hub cache does
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    os.utime(repo / "snapshots" / "old999", (2e9, 2e9))  # newer mtime: refs/main must still win
    return repo


def test_hub_cache_layout_resolves_model_ids(minilm_dir, real_state, tmp_path, monkeypatch):
    repo = _fake_hub(tmp_path, minilm_dir)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    assert resolve_model_path(MINILM_ID) == repo / "snapshots" / "abc123"
    model = BertModel.from_pretrained(MINILM_ID)
    assert model.config.bertkit_test_marker == "current"
    _assert_same_weights(model, real_state)
    assert BertConfig.from_pretrained(MINILM_ID).hidden_size == 384
    # explicit cache_dir (as transformers' cache_dir=...) works too
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    assert BertModel.from_pretrained(MINILM_ID, cache_dir=tmp_path / "hub").config.hidden_size == 384


def test_missing_model_id_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        BertModel.from_pretrained("bert-base-uncased")
    msg = str(err.value)
    assert str(tmp_path / "hub" / "models--bert-base-uncased") in msg
    assert "no download was attempted" in msg


def test_config_keeps_unknown_fields_and_label_maps(minilm_dir, tmp_path):
    cfg = BertConfig.from_pretrained(minilm_dir)
    assert cfg.gradient_checkpointing is False and cfg.extra["transformers_version"] == "4.8.2"
    cfg = cfg.copy(id2label={0: "neg", 1: "pos"}, my_field=[1, 2])
    cfg.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["my_field"] == [1, 2] and saved["gradient_checkpointing"] is False
    assert saved["id2label"] == {"0": "neg", "1": "pos"} and saved["label2id"] == {"neg": 0, "pos": 1}
    back = BertConfig.from_pretrained(tmp_path)
    assert back.id2label == {0: "neg", 1: "pos"} and back.num_labels == 2 and back.my_field == [1, 2]
    hf_cfg = transformers.BertConfig.from_pretrained(str(tmp_path))
    assert hf_cfg.id2label == {0: "neg", 1: "pos"} and hf_cfg.hidden_size == 384
    assert BertConfig.from_pretrained(tmp_path, num_labels=4).id2label == {i: f"LABEL_{i}" for i in range(4)}


@pytest.mark.parametrize("task", ["AutoModelForTokenClassification", "AutoModelForSequenceClassification"])
@pytest.mark.parametrize("given", ["id2label", "both maps"])
def test_new_label_maps_without_a_count_size_the_head_as_transformers_does(minilm_dir, task, given):
    """``from_pretrained(p, id2label=...)`` (how a NER fine-tune starts) sets the label count from the
    maps: the checkpoint's saved count of 2 must not win and reset the names to LABEL_i."""
    import bertkit as ours_lib

    id2label = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
    kw: dict = {"id2label": id2label}
    if given == "both maps":
        kw["label2id"] = {v: k for k, v in id2label.items()}
    ours = getattr(ours_lib, task).from_pretrained(minilm_dir, **kw)
    theirs = getattr(transformers, task).from_pretrained(str(minilm_dir), **kw)
    for cfg in (ours.config, theirs.config):
        assert (cfg.num_labels, cfg.id2label) == (5, id2label)
    # transformers keeps the checkpoint's stale label2id when only id2label is given; bertkit inverts the map
    assert ours.config.label2id == {v: k for k, v in id2label.items()}
    assert ours.classifier.weight.shape == theirs.classifier.weight.shape == (5, 384)


@pytest.mark.parametrize("name", ["dtype", "torch_dtype"])
@pytest.mark.parametrize("saved", [torch.float32, torch.bfloat16, torch.float16])
def test_dtype_auto_is_the_checkpoints_dtype_as_in_transformers(tmp_path, saved, name):
    """transformers snippets pass ``dtype="auto"`` (``torch_dtype="auto"`` before version 5) for the
    dtype the weights were saved in: a model that trains, its weights unchanged. bertkit's inference
    precisions are other names ("fp32", "bf16", "int8")."""
    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    transformers.BertModel(transformers.BertConfig(**small)).to(saved).save_pretrained(str(tmp_path))
    theirs = transformers.BertModel.from_pretrained(str(tmp_path), **{name: "auto"})
    ours = BertModel.from_pretrained(tmp_path, **{name: "auto"})
    assert ours.dtype == theirs.dtype == saved
    assert all(p.requires_grad for p in ours.parameters()) and all(p.requires_grad for p in theirs.parameters())
    assert getattr(ours, "_bertkit_inference_dtype", None) is None  # not prepared for inference
    for key, p in theirs.state_dict().items():
        assert torch.equal(ours.state_dict()[key], p), key
    assert BertModel.from_pretrained(tmp_path).dtype == torch.float32  # no dtype asked for: float32
    prepared = BertModel.from_pretrained(tmp_path, dtype="bf16")  # an inference precision: prepared, frozen
    assert prepared.dtype == torch.bfloat16 and not any(p.requires_grad for p in prepared.parameters())


def test_save_with_tokenizer_and_atomic_replace(minilm_dir, tmp_path):
    tok = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    model = BertModel.from_pretrained(minilm_dir)
    out = tmp_path / "model"
    model.save_pretrained(out, tokenizer=tok)
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= names
    (out / "notes.txt").write_text("kept")
    model.save_pretrained(out)  # into an existing folder: files replaced, others kept
    assert (out / "notes.txt").read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["model"], "no temp folders left behind"
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertModel"]
    reloaded = transformers.AutoTokenizer.from_pretrained(str(out))
    assert reloaded("hello world")["input_ids"] == tok("hello world")["input_ids"]


def test_unknown_from_pretrained_kwarg_is_an_error(minilm_dir):
    with pytest.raises(TypeError, match="num_lables"):
        BertModel.from_pretrained(minilm_dir, num_lables=3)


def test_partially_missing_module_keeps_loaded_siblings(minilm_dir, real_state, tmp_path):
    _copy_config(minilm_dir, tmp_path)
    state = {k: v for k, v in real_state.items() if k != "pooler.dense.bias"}
    torch.save(state, tmp_path / "pytorch_model.bin")
    model, info = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == ["pooler.dense.bias"]
    assert torch.equal(model.pooler.dense.weight, real_state["pooler.dense.weight"])
    assert model.pooler.dense.bias.abs().max() == 0
    cls = BertForSequenceClassification.from_pretrained(minilm_dir)
    std = cls.classifier.weight.std().item()
    assert 0.01 < std < 0.03 and cls.classifier.bias.abs().max() == 0  # BERT init: normal(0, 0.02)


def test_config_constructors_take_transformers_extra_and_common_names(tmp_path):
    """``BertConfig(my_field=3)`` keeps the field (transformers' configs do; it raised a TypeError), saving
    writes it for transformers to read, and a common name sets the family's own field."""
    from bertkit.modeling.gpt2 import GPT2Config

    cfg = BertConfig(my_field=3, num_labels=4, hidden_size=64, num_attention_heads=2)
    assert cfg.my_field == 3 and cfg.num_labels == 4 and cfg.hidden_size == 64
    cfg.save_pretrained(tmp_path)
    theirs = transformers.BertConfig.from_pretrained(str(tmp_path))
    assert theirs.my_field == 3 and theirs.num_labels == 4 and theirs.hidden_size == 64
    ours, ref = GPT2Config(hidden_size=64, n_head=4), transformers.GPT2Config(hidden_size=64, n_head=4)
    assert ours.n_embd == ref.n_embd == 64 and ours.hidden_size == 64


def test_a_config_json_path_loads_its_folder(minilm_dir, capsys):
    """A path to config.json was taken for the weights file: torch.load failed on it with eight lines
    about unsafe pickles. It names its folder, as the resolver already treats it."""
    from bertkit.cli import main

    a, b = BertModel.from_pretrained(minilm_dir / "config.json"), BertModel.from_pretrained(minilm_dir)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name
    assert main(["inspect", str(minilm_dir / "config.json")]) == 0
    assert "22,713,216" in capsys.readouterr().out


def test_a_cold_load_imports_no_compiler_stack(minilm_dir):
    """Building the model on meta skips torch's Python meta kernels, whose first calls import
    torch._dynamo and sympy (about two CPU-seconds of a command's start); the weights still load."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from bertkit.modeling import BertModel\n"
        "heavy = ('torch._dynamo', 'sympy')\n"
        "before = {m for m in heavy if m in sys.modules}\n"
        f"model = BertModel.from_pretrained({str(minilm_dir)!r})\n"
        "print(sorted({m for m in heavy if m in sys.modules} - before))\n"
        "print(model.embeddings.position_ids[0, :4].tolist(), model.embeddings.position_ids.device)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.splitlines() == ["[]", "[0, 1, 2, 3] cpu"], out
    weights = load_file(str(minilm_dir / "model.safetensors"))
    model = BertModel.from_pretrained(minilm_dir)
    key = "embeddings.word_embeddings.weight"
    assert torch.equal(model.state_dict()[key], weights[key])
