"""ModernBERT against transformers' ModernBERT on random weights, in both directions.

What the family contract (test_family_contract.py) does not reach: several configs (head sizes that
are not powers of two, biases on, mean pooling, other rotary bases), texts several times longer than
the local window and of lengths the window does not divide (bertkit's blocked local attention),
left and right padding, ``output_attentions`` against transformers' eager attention, both config.json
layouts, the one-line errors of a bad config, and bf16 / int8 inference against fp32.

fp32 outputs agree within ``TOL`` = 1e-5 absolute (both sides run fp32 kernels that sum in different
orders; the differences seen are ~1e-7). Per-token outputs are compared on real tokens: bertkit's
packed path leaves padding positions at zero.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bertkit.modeling import registry
from bertkit.modeling.auto import AutoModel, auto_class_for_task
from bertkit.modeling.modernbert import ModernBertConfig, ModernBertForMaskedLM, ModernBertModel, local_attention

TOL = 1e-5
TASKS = (
    "base",
    "masked-lm",
    "sequence-classification",
    "token-classification",
    "question-answering",
    "multiple-choice",
)
SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)

# name -> (config fields, text length). Head sizes 10 and 12; windows of 8 and 16 on texts of 45 and 77
# tokens (more than 4x the half window: the blocked path; neither length a multiple of the window).
CONFIGS = {
    "w8-every2-d10": (
        dict(hidden_size=40, num_attention_heads=4, num_hidden_layers=3, intermediate_size=56, local_attention=8),
        45,
    ),
    "w16-every3-d12-bias-mean": (
        dict(
            hidden_size=36,
            num_attention_heads=3,
            num_hidden_layers=4,
            intermediate_size=40,
            local_attention=16,
            global_attn_every_n_layers=3,
            attention_bias=True,
            mlp_bias=True,
            norm_bias=True,
            classifier_bias=True,
            classifier_pooling="mean",
            global_rope_theta=5000.0,
            local_rope_theta=300.0,
            hidden_activation="gelu_pytorch_tanh",
        ),
        77,
    ),
}


def _hf_config(name: str, task: str, **kw) -> transformers.ModernBertConfig:
    fields, _ = CONFIGS[name]
    fields = {"global_attn_every_n_layers": 2, **fields, **kw}
    labels = 2 if task == "question-answering" else 3
    return transformers.ModernBertConfig(
        vocab_size=120, max_position_embeddings=256, num_labels=labels, **SPECIAL, **fields
    )


def _batch(n: int, left: bool = False, seed: int = 0) -> dict[str, torch.Tensor]:
    """Four texts: full length, two shorter ones and a 3-token one, padded right (or left)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 120, (4, n), generator=g)
    mask = torch.ones(4, n, dtype=torch.long)
    for row, length in ((1, n - 13), (2, n // 2 + 1), (3, 3)):
        if left:
            mask[row, : n - length] = 0
        else:
            mask[row, length:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _inputs(task: str, batch: dict) -> dict[str, torch.Tensor]:
    if task == "multiple-choice":  # (B, C, N): four texts as two questions of two choices
        return {k: v.reshape(2, 2, -1) for k, v in batch.items()}
    return batch


def _compare(ours, theirs, mask: torch.Tensor) -> None:
    real = mask.reshape(-1, mask.shape[-1]).bool()  # (B, N), choices flattened
    keys = [k for k in theirs.keys() if k != "loss"]
    assert keys and set(keys) <= set(ours.keys()), (keys, list(ours.keys()))
    for key in keys:
        pairs = zip(ours[key], theirs[key]) if isinstance(theirs[key], tuple) else [(ours[key], theirs[key])]
        for a, b in pairs:
            assert a.shape == b.shape, key
            if b.dim() == 4:  # (B, h, N, N) probabilities: the rows of real queries
                a, b = a.transpose(1, 2)[real], b.transpose(1, 2)[real]
            elif b.dim() >= 2 and tuple(b.shape[:2]) == tuple(real.shape):
                a, b = a[real], b[real]
            assert (a - b).abs().max().item() < TOL, (key, (a - b).abs().max().item())


def _both_ways(ours, hf, inputs: dict) -> None:
    """Packed (no per-layer outputs) and padded (hidden states and attentions) paths, against transformers."""
    with torch.no_grad():
        _compare(ours(**inputs), hf(**inputs), inputs["attention_mask"])
        per_layer = dict(output_hidden_states=True, output_attentions=True)
        _compare(ours(**inputs, **per_layer), hf(**inputs, **per_layer), inputs["attention_mask"])


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("task", TASKS)
def test_transformers_weights_load_into_bertkit_and_back(name, task, tmp_path):
    cls_name = registry.family("modernbert").class_name(task)
    torch.manual_seed(0)
    hf = getattr(transformers, cls_name)(_hf_config(name, task, attn_implementation="eager")).eval()
    hf.save_pretrained(tmp_path / "hf")
    ours = auto_class_for_task(task).from_pretrained(tmp_path / "hf")
    assert type(ours).__name__ == cls_name
    inputs = _inputs(task, _batch(CONFIGS[name][1]))
    _both_ways(ours, hf, inputs)
    ours.save_pretrained(tmp_path / "bk")
    back, info = getattr(transformers, cls_name).from_pretrained(
        tmp_path / "bk", attn_implementation="eager", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    _both_ways(ours, back.eval(), inputs)


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_bertkit_weights_load_into_transformers(name, left, tmp_path):
    config = ModernBertConfig.from_dict(_hf_config(name, "masked-lm").to_dict())
    torch.manual_seed(1)
    ours = ModernBertForMaskedLM(config).eval()
    ours.save_pretrained(tmp_path)
    hf, info = transformers.ModernBertForMaskedLM.from_pretrained(
        tmp_path, attn_implementation="eager", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    _both_ways(ours, hf.eval(), _batch(CONFIGS[name][1], left=left, seed=2))


@pytest.mark.parametrize("n,window,block", [(45, 4, None), (200, 16, 24), (130, 64, None), (7, 2, 4)])
def test_blocked_local_attention_is_the_banded_softmax(n, window, block):
    """The blocked kernel gives what one (N, N) softmax under the band and the padding mask gives."""
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for _ in range(3))
    keys = torch.ones(2, n, dtype=torch.bool)
    keys[1, n // 3 :] = False
    i = torch.arange(n)
    allowed = ((i[:, None] - i[None, :]).abs() <= window) & keys[:, None, None, :]  # (2, 1, N, N)
    scores = (q @ k.transpose(-1, -2) * 8**-0.5).masked_fill(~allowed, float("-inf"))
    want = scores.softmax(-1).nan_to_num() @ v
    got = local_attention(q, k, v, keys, window, block=block)
    real = keys[:, None, :, None].expand_as(want)
    assert (got - want)[real].abs().max() < TOL


def test_original_config_layout_reads_as_transformers_reads_it(tmp_path):
    """ModernBERT-base's own config.json names global_rope_theta, local_rope_theta and
    global_attn_every_n_layers (no layer_types, no rope_parameters): both libraries read it alike."""
    torch.manual_seed(3)
    hf = transformers.ModernBertModel(_hf_config("w8-every2-d10", "base")).eval()
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    for key in ("layer_types", "rope_parameters"):
        data.pop(key)
    data.update(global_rope_theta=777.0, local_rope_theta=55.0, global_attn_every_n_layers=3)
    (tmp_path / "config.json").write_text(json.dumps(data))
    hf = transformers.ModernBertModel.from_pretrained(tmp_path).eval()
    ours = AutoModel.from_pretrained(tmp_path)
    every_third = ["full_attention", "sliding_attention", "sliding_attention"]
    assert ours.config.layer_types == hf.config.layer_types == every_third
    batch = _batch(45)
    with torch.no_grad():
        _compare(ours(**batch), hf(**batch), batch["attention_mask"])


@pytest.mark.parametrize(
    "fields,match",
    [
        (dict(hidden_size=30, num_attention_heads=4), r"hidden_size \(30\) is not a multiple of num_attention_heads"),
        (dict(hidden_size=36, num_attention_heads=4), r"head size .* = 9 is odd"),
        (dict(local_attention=7), r"local_attention \(7\) must be a positive even number"),
        (dict(local_attention=0), r"local_attention \(0\) must be a positive even number"),
        (dict(layer_types=["full_attention"]), r"layer_types must list"),
    ],
)
def test_inconsistent_config_is_one_line_naming_the_file(fields, match, tmp_path):
    data = {"model_type": "modernbert", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2}
    (tmp_path / "config.json").write_text(json.dumps({**data, **fields}))
    with pytest.raises(ValueError, match=match) as err:
        AutoModel.from_pretrained(tmp_path)
    assert str(tmp_path / "config.json") in str(err.value) and "\n" not in str(err.value)


def test_a_checkpoint_of_another_family_names_the_file(tmp_path):
    transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"config.json is a 'bert' model \(model_type\), not 'modernbert'") as err:
        ModernBertModel.from_pretrained(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_past_max_position_embeddings_is_an_error_naming_the_limit():
    config = ModernBertConfig.from_dict(_hf_config("w8-every2-d10", "base").to_dict())
    model = ModernBertModel(config).eval()
    with pytest.raises(ValueError, match="sequence length 257 exceeds max_position_embeddings=256"):
        model(torch.ones(1, 257, dtype=torch.long))


@pytest.mark.parametrize("dtype,tol", [("bf16", 0.05), ("int8", 0.05)])
def test_bf16_and_int8_inference_stay_close_to_fp32(dtype, tol):
    """bf16 / int8 (``prepare_for_inference``): every projection of ModernBERT (fused Wqkv, GeGLU Wi,
    bias-free Linears) is prepared; the logits of real tokens stay within ``tol`` of fp32's, relative
    to their largest magnitude (bf16 keeps 8 bits of mantissa; the drift seen is ~1e-2)."""
    from bertkit.inference import prepare_for_inference

    config = ModernBertConfig.from_dict(_hf_config("w16-every3-d12-bias-mean", "masked-lm").to_dict())
    torch.manual_seed(4)
    model = ModernBertForMaskedLM(config).eval()
    batch = _batch(77)
    with torch.no_grad():
        want = model(**batch).logits
        got = prepare_for_inference(copy.deepcopy(model), dtype)(**batch).logits.float()
    real = batch["attention_mask"].bool()
    assert (got[real] - want[real]).abs().max() < tol * want[real].abs().max()


def test_training_loss_and_gradients_match_transformers(tmp_path):
    """A training step (dropout is 0 in ModernBERT's config): the masked-LM loss and the gradients of
    the projections, norms and token embeddings agree with transformers' within ``TOL``."""
    torch.manual_seed(5)
    hf = transformers.ModernBertForMaskedLM(_hf_config("w8-every2-d10", "masked-lm")).train()
    hf.save_pretrained(tmp_path)
    ours = ModernBertForMaskedLM.from_pretrained(tmp_path).train()
    batch = _batch(45, seed=6)
    labels = torch.where(torch.rand(batch["input_ids"].shape) < 0.3, batch["input_ids"], -100)
    labels[batch["attention_mask"] == 0] = -100
    a, b = ours(**batch, labels=labels), hf(**batch, labels=labels)
    a.loss.backward()
    b.loss.backward()
    assert abs(a.loss.item() - b.loss.item()) < TOL
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        assert (p.grad - theirs[name].grad).abs().max() < TOL, name
