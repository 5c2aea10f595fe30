"""RoBERTa and XLM-RoBERTa against transformers on random weights, in both directions.

Beyond the family contract (test_family_contract.py): a second config per family (three heads of 12,
RoBERTa's own padding id 1 and position table of 514 rows), left padding (positions follow the ids,
so a left-padded text gets the positions it gets alone), ``inputs_embeds`` (positions from
``padding_idx + 1``), ``output_attentions``, the length limit of a table that starts after
``padding_idx``, a checkpoint of the other family, and bf16 inference against fp32.

fp32 outputs agree within ``TOL`` = 1e-5 absolute; per-token outputs on real tokens only.
"""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bertkit.modeling import registry
from bertkit.modeling.auto import AutoConfig, auto_class_for_task
from bertkit.modeling.roberta import RobertaConfig, RobertaForMaskedLM, RobertaModel, XLMRobertaConfig

TOL = 1e-5
TASKS = (
    "base",
    "masked-lm",
    "sequence-classification",
    "token-classification",
    "question-answering",
    "multiple-choice",
)
HF_CONFIG = {"roberta": transformers.RobertaConfig, "xlm-roberta": transformers.XLMRobertaConfig}
FIELDS = dict(
    vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=40, pad_token_id=1
)


def _hf_config(model_type: str, task: str, **kw) -> object:
    labels = 2 if task == "question-answering" else 3
    return HF_CONFIG[model_type](num_labels=labels, **FIELDS, **kw)


def _batch(left: bool, n: int = 23) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 99, (4, n), generator=g)
    mask = torch.ones(4, n, dtype=torch.long)
    for row, length in ((1, n - 7), (2, 9), (3, 2)):
        if left:
            mask[row, : n - length] = 0
        else:
            mask[row, length:] = 0
    ids[mask == 0] = 1  # RoBERTa's <pad>
    return {"input_ids": ids, "attention_mask": mask}


def _compare(ours, theirs, mask: torch.Tensor) -> None:
    real = mask.reshape(-1, mask.shape[-1]).bool()
    keys = [k for k in theirs.keys() if k not in ("loss", "cross_attentions")]  # the latter: a decoder's
    assert keys
    for key in keys:
        pairs = zip(ours[key], theirs[key]) if isinstance(theirs[key], tuple) else [(ours[key], theirs[key])]
        for a, b in pairs:
            assert a.shape == b.shape, key
            if b.dim() == 4:  # (B, h, N, N): the rows of real queries
                a, b = a.transpose(1, 2)[real], b.transpose(1, 2)[real]
            elif b.dim() >= 2 and tuple(b.shape[:2]) == tuple(real.shape):
                a, b = a[real], b[real]
            assert (a - b).abs().max().item() < TOL, (key, (a - b).abs().max().item())


def _check(ours, hf, inputs: dict) -> None:
    with torch.no_grad():
        _compare(ours(**inputs), hf(**inputs), inputs["attention_mask"])
        per_layer = dict(output_hidden_states=True, output_attentions=True)
        _compare(ours(**inputs, **per_layer), hf(**inputs, **per_layer), inputs["attention_mask"])


@pytest.mark.parametrize("model_type", list(HF_CONFIG))
@pytest.mark.parametrize("task", TASKS)
def test_transformers_weights_load_into_bertkit_and_back(model_type, task, tmp_path):
    cls_name = registry.family(model_type).class_name(task)
    if (model_type, task) == ("xlm-roberta", "multiple-choice"):
        pytest.skip("transformers 5's XLMRobertaForMultipleChoice has no pooler and fails its own forward")
    torch.manual_seed(0)
    hf = getattr(transformers, cls_name)(_hf_config(model_type, task, attn_implementation="eager")).eval()
    hf.save_pretrained(tmp_path / "hf")
    ours = auto_class_for_task(task).from_pretrained(tmp_path / "hf")
    assert type(ours).__name__ == cls_name
    batch = _batch(left=False)  # left padding: below (a pooler read at a padding slot means nothing)
    inputs = {k: v.reshape(2, 2, -1) for k, v in batch.items()} if task == "multiple-choice" else batch
    _check(ours, hf, inputs)
    ours.save_pretrained(tmp_path / "bk")
    back, info = getattr(transformers, cls_name).from_pretrained(
        tmp_path / "bk", attn_implementation="eager", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    _check(ours, back.eval(), inputs)


@pytest.mark.parametrize("model_type", list(HF_CONFIG))
def test_bertkit_weights_load_into_transformers(model_type, tmp_path):
    fam = registry.family(model_type)
    config = fam.config_class().from_dict(_hf_config(model_type, "masked-lm").to_dict())
    torch.manual_seed(1)
    ours = fam.model_class("masked-lm")(config).eval()
    ours.save_pretrained(tmp_path)
    hf, info = getattr(transformers, fam.class_name("masked-lm")).from_pretrained(
        tmp_path, attn_implementation="eager", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    for left in (False, True):
        _check(ours, hf.eval(), _batch(left))


def test_positions_from_embeddings_and_explicit_ids_answer_as_transformers(tmp_path):
    torch.manual_seed(2)
    hf = transformers.RobertaModel(_hf_config("roberta", "base")).eval()
    hf.save_pretrained(tmp_path)
    ours = RobertaModel.from_pretrained(tmp_path)
    embeds = torch.randn(2, 11, 36)
    positions = torch.arange(500, 511)[None]  # the table's last rows: legal as explicit ids
    with torch.no_grad():
        _compare(ours(inputs_embeds=embeds), hf(inputs_embeds=embeds), torch.ones(2, 11))
        ids = _batch(False)["input_ids"][:, :11]
        _compare(ours(ids, position_ids=positions), hf(ids, position_ids=positions), torch.ones(4, 11))


def test_length_limit_counts_from_padding_idx_and_families_do_not_mix(tmp_path):
    model = RobertaModel(RobertaConfig(**{**FIELDS, "max_position_embeddings": 66})).eval()
    with pytest.raises(ValueError, match=r"sequence length 65 exceeds max_position_embeddings - pad_token_id - 1=64"):
        model(torch.full((1, 65), 5))
    with torch.no_grad():
        model(torch.full((1, 64), 5))  # the limit itself
    transformers.XLMRobertaConfig(**FIELDS).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"config.json is a 'xlm-roberta' model \(model_type\), not 'roberta'"):
        RobertaModel.from_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is XLMRobertaConfig


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_bf16_and_int8_inference_stay_close_to_fp32(dtype):
    """bf16 / int8 (``prepare_for_inference``) logits of real tokens within 5% of fp32's largest
    magnitude (bf16 keeps 8 bits of mantissa; the drift seen is ~1%)."""
    from bertkit.inference import prepare_for_inference

    torch.manual_seed(3)
    model = RobertaForMaskedLM(RobertaConfig(**FIELDS)).eval()
    batch = _batch(False)
    with torch.no_grad():
        want = model(**batch).logits
        got = prepare_for_inference(copy.deepcopy(model), dtype)(**batch).logits.float()
    real = batch["attention_mask"].bool()
    assert (got[real] - want[real]).abs().max() < 0.05 * want[real].abs().max()
