"""``SentenceTransformerTrainingArguments(learning_rate_mapping={pattern: lr})``: the parameters whose
names (sentence-transformers' names in its loss module) match a regular expression train at their own
rate, the rest at ``learning_rate``, a later pattern winning, as in sentence-transformers' trainer.

The names are checked against sentence-transformers' own loss module on the same model, and a mapped
run changes every weight as hand-written AdamW steps with the groups its trainer builds do (the 2e-3
contract of ``tests/test_st_trainer.py``)."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import sentence_transformers_adamw  # noqa: E402
from test_st_trainer import (  # noqa: F401  (folder is a fixture used by name)
    _args,
    _assert_same_changes,
    _ours,
    _seedable_batches,
    _theirs,
    folder,
)

from bertkit import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses
from bertkit.assets import asset_path

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.sentence_transformer import losses as stl  # noqa: E402
from transformers import get_linear_schedule_with_warmup  # noqa: E402

MAPPING = {r"encoder\.layer\.[0-2]\.": 1e-4, r"classifier": 3e-3, r"encoder\.layer\.2\.output": 2e-5}


def _rates_by_name(names, mapping):
    """What sentence-transformers' trainer gives each name: the last pattern that matches it."""
    out = {}
    for pattern, lr in mapping.items():
        out.update({n: lr for n in names if re.search(pattern, n)})
    return out


def test_mapped_parameters_are_those_sentence_transformers_names_match(lee):
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    ref = st.SentenceTransformer(str(asset_path("minilm")), device="cpu")
    their_names = [n for n, _ in stl.SoftmaxLoss(ref, 384, 3).named_parameters()]
    want = _rates_by_name(their_names, MAPPING)
    assert {round(v, 9) for v in want.values()} == {1e-4, 3e-3, 2e-5}

    data = {"s1": [r[0] for r in lee[:8]], "s2": [r[1] for r in lee[:8]], "label": [0, 1, 2, 0, 1, 2, 0, 1]}
    loss = losses.SoftmaxLoss(model, 384, 3)
    args = SentenceTransformerTrainingArguments(output_dir="unused", learning_rate=5e-5, learning_rate_mapping=MAPPING)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    ours = [*(("model." + n, p) for n, p in model.named_parameters()), *loss.named_parameters()]
    assert [n for n, _ in ours] == their_names
    optimizer = trainer._trainer.optimizer
    rate_of = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(ours)
    for name, p in ours:
        assert rate_of[id(p)] == pytest.approx(want.get(name, 5e-5)), name


def test_cross_encoder_mapping_names_are_sentence_transformers(lee):
    from sentence_transformers.cross_encoder import CrossEncoder as STCrossEncoder
    from sentence_transformers.cross_encoder import losses as cel

    from bertkit.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
    from bertkit.cross_encoder import losses as bcl

    mapping = {r"classifier": 1e-3, r"encoder\.layer\.5\.": 2e-5}
    model = CrossEncoder(str(asset_path("minilm")), num_labels=1)
    ref = STCrossEncoder(str(asset_path("minilm")), num_labels=1, device="cpu")
    their_names = [n for n, _ in cel.BinaryCrossEntropyLoss(ref).named_parameters()]
    want = _rates_by_name(their_names, mapping)
    data = {"s1": [r[0] for r in lee[:8]], "s2": [r[1] for r in lee[:8]], "label": [r[2] / 5 for r in lee[:8]]}
    args = CrossEncoderTrainingArguments(output_dir="unused", learning_rate=5e-5, learning_rate_mapping=mapping)
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, loss=bcl.BinaryCrossEntropyLoss(model))
    ours = [("model." + n, p) for n, p in model.named_parameters()]
    assert [n for n, _ in ours] == their_names
    rate_of = {id(p): g["lr"] for g in trainer._trainer.optimizer.param_groups for p in g["params"]}
    assert len(rate_of) == len(ours) and set(want.values()) == {1e-3, 2e-5}
    for name, p in ours:
        assert rate_of[id(p)] == pytest.approx(want.get(name, 5e-5)), name


def test_mapped_run_equals_hand_written_steps(folder, lee, tmp_path):
    """MNRL, 12 rows in batches of 4, the first three layers at 1e-4 and one sublayer back at 2e-5,
    the rest at 5e-5: 3 steps as written with those AdamW groups and transformers' linear schedule."""
    rows = lee[::23][:12]
    mapping = {r"encoder\.layer\.[0-2]\.": 1e-4, r"encoder\.layer\.2\.output": 2e-5}
    ref = _theirs(folder)
    mnrl = stl.MultipleNegativesRankingLoss(ref)
    enc = ref[0].auto_model
    start = {n: p.detach().clone() for n, p in enc.named_parameters()}
    by_name = _rates_by_name([n for n, _ in mnrl.named_parameters()], mapping)
    named = list(mnrl.named_parameters())
    default = [(n, p) for n, p in named if n not in by_name]
    opt = sentence_transformers_adamw(default, 5e-5, weight_decay=0.0)
    for lr in sorted(set(by_name.values())):
        opt.add_param_group({"params": [p for n, p in named if by_name.get(n) == lr], "lr": lr, "weight_decay": 0.0})
    batches = _seedable_batches(12, 4, seed=12)
    schedule = get_linear_schedule_with_warmup(opt, 0, len(batches))
    for b in batches:
        features = [ref.preprocess([rows[i][k] for i in b]) for k in (0, 1)]
        mnrl(features, None).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad()

    ours = _ours(folder)
    data = {"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows]}
    args = _args(tmp_path / "run", per_device_train_batch_size=4, learning_rate_mapping=mapping)
    SentenceTransformerTrainer(
        model=ours, args=args, train_dataset=data, loss=losses.MultipleNegativesRankingLoss(ours)
    ).train()
    _assert_same_changes(start, enc, ours)


def test_bad_mappings_are_refused_by_name(lee):
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    pairs = {"anchor": [r[0] for r in lee[:8]], "positive": [r[1] for r in lee[:8]]}
    with pytest.raises(
        ValueError, match=r"learning_rate_mapping\['\['\]=0.001 is not supported: the pattern is no regex"
    ):
        SentenceTransformerTrainingArguments(output_dir="unused", learning_rate_mapping={"[": 1e-3})
    with pytest.raises(ValueError, match=r"learning_rate_mapping\['layer'\]=-1 is not supported: must be a learning"):
        SentenceTransformerTrainingArguments(output_dir="unused", learning_rate_mapping={"layer": -1})
    with pytest.raises(ValueError, match=r"learning_rate_mapping='layer' is not supported: a string must be a JSON"):
        SentenceTransformerTrainingArguments(output_dir="unused", learning_rate_mapping="layer")
    args = SentenceTransformerTrainingArguments(output_dir="unused", learning_rate_mapping={r"Dense\.": 1e-3})
    with pytest.raises(ValueError, match=r"learning_rate_mapping\['Dense\\\\.'\] matches no parameter; the names look"):
        SentenceTransformerTrainer(
            model=model, args=args, train_dataset=pairs, loss=losses.MultipleNegativesRankingLoss(model)
        )
    read = SentenceTransformerTrainingArguments(output_dir="unused", learning_rate_mapping='{"layer\\\\.0\\\\.": 1e-4}')
    assert read.learning_rate_mapping == {r"layer\.0\.": 1e-4}
