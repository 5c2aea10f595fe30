"""``SentenceTransformerTrainingArguments(prompts=...)``: the texts of each column put after a prompt, as
sentence-transformers' data collator does, in all four forms (one string, per column, per dataset,
per dataset and column, and a JSON string of one of them).

The features bertkit's collator gives each column equal, token for token, those sentence-transformers'
own ``SentenceTransformerDataCollator`` gives for the same rows and prompts; a run with per-dataset
and per-column prompts changes every weight as hand-written AdamW steps of sentence-transformers'
losses over its collator's features do (the 2e-3 contract of ``tests/test_st_trainer.py``)."""

from __future__ import annotations

import pytest
import torch
from conftest import sentence_transformers_adamw  # noqa: E402
from test_st_trainer import (  # noqa: F401  (folder and polarity are fixtures used by name)
    Dataset,
    _args,
    _assert_same_changes,
    _multi_batches,
    _ours,
    _theirs,
    folder,
    polarity,
)

from bertkit import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses
from bertkit.assets import asset_path
from bertkit.cross_encoder import CrossEncoderTrainingArguments

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.sentence_transformer import losses as stl  # noqa: E402
from sentence_transformers.sentence_transformer.data_collator import SentenceTransformerDataCollator  # noqa: E402
from transformers import get_linear_schedule_with_warmup  # noqa: E402

PROMPTS = [
    "query: ",
    {"s1": "query: ", "anchor": "search_query: "},
    {"scored": "Represent this sentence: ", "pairs": "passage: "},
    {"scored": {"s1": "query: ", "s2": "document: "}, "pairs": {"positive": "passage: "}},
    '{"anchor": "search_query: ", "positive": "search_document: "}',
]


def _parts(lee, polarity):
    scored = lee[::29][:8]
    return {
        "scored": {"s1": [r[0] for r in scored], "s2": [r[1] for r in scored], "score": [r[2] for r in scored]},
        "pairs": {"anchor": polarity[:8], "positive": polarity[8:16]},
    }


def _their_features(collator, name, part, rows):
    """sentence-transformers' collator on rows of one named dataset: each text column's features."""
    columns = [c for c in part if c != "score"]
    batch = collator([{"dataset_name": name, **{c: part[c][i] for c in part}} for i in rows])
    return [{k[len(c) + 1 :]: v for k, v in batch.items() if k.startswith(c + "_")} for c in columns], batch.get(
        "label"
    )


@pytest.mark.parametrize("prompts", PROMPTS, ids=["string", "columns", "datasets", "nested", "json"])
def test_each_columns_features_are_sentence_transformers_collators(prompts, lee, polarity):
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    ref = st.SentenceTransformer(str(asset_path("minilm")), device="cpu")
    parts = _parts(lee, polarity)
    args = SentenceTransformerTrainingArguments(output_dir="unused", per_device_train_batch_size=4, prompts=prompts)
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=parts,
        loss={"scored": losses.CoSENTLoss(model), "pairs": losses.MultipleNegativesRankingLoss(model)},
    )
    theirs = SentenceTransformerDataCollator(preprocess_fn=ref.preprocess, prompts=args.prompts)
    collate = trainer._trainer.collate_fn
    for k, (name, part) in enumerate(parts.items()):
        rows = [3, 0, 5, 6]
        got = collate([(k, i) for i in rows])["features"]
        want, _ = _their_features(theirs, name, part, rows)
        assert len(got) == len(want) == 2
        for g, w in zip(got, want):
            assert torch.equal(g["input_ids"], w["input_ids"]), name
            assert torch.equal(g["attention_mask"], w["attention_mask"]), name
    # the prompts reached the texts: some column's tokens differ from the same rows without prompts
    bare = SentenceTransformerDataCollator(preprocess_fn=ref.preprocess)
    changed = [
        not torch.equal(g["input_ids"], b["input_ids"])
        for k, (name, part) in enumerate(parts.items())
        for g, b in zip(collate([(k, i) for i in (0, 1)])["features"], _their_features(bare, name, part, [0, 1])[0])
    ]
    assert any(changed)


def test_prompted_run_equals_hand_written_steps_over_sentence_transformers_collator(folder, lee, polarity, tmp_path):
    """Two datasets (CoSENT on scored pairs, MNRL on polarity pairs), prompts per dataset and column:
    4 steps equal hand-written steps of sentence-transformers' losses on its collator's features."""
    prompts = {"scored": {"s1": "query: ", "s2": "document: "}, "pairs": "passage: "}
    parts = _parts(lee, polarity)
    lr = 5e-5
    ref = _theirs(folder)
    their_loss = {"scored": stl.CoSENTLoss(ref), "pairs": stl.MultipleNegativesRankingLoss(ref)}
    collator = SentenceTransformerDataCollator(preprocess_fn=ref.preprocess, prompts=prompts)
    enc = ref[0].auto_model
    start = {n: p.detach().clone() for n, p in enc.named_parameters()}
    opt = sentence_transformers_adamw(ref.named_parameters(), lr, weight_decay=0.0)
    batches = _multi_batches([Dataset(p) for p in parts.values()], 4, 12, "proportional")
    schedule = get_linear_schedule_with_warmup(opt, 0, len(batches))
    for b in batches:
        name = "scored" if b[0] < 8 else "pairs"
        features, labels = _their_features(collator, name, parts[name], [i % 8 for i in b])
        their_loss[name](features, labels).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad()

    ours = _ours(folder)
    args = _args(tmp_path / "run", per_device_train_batch_size=4, prompts=prompts)
    SentenceTransformerTrainer(
        model=ours,
        args=args,
        train_dataset=parts,
        loss={"scored": losses.CoSENTLoss(ours), "pairs": losses.MultipleNegativesRankingLoss(ours)},
    ).train()
    _assert_same_changes(start, enc, ours)


def test_bad_prompts_are_refused_by_name(lee):
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    pairs = {"anchor": [r[0] for r in lee[:8]], "positive": [r[1] for r in lee[:8]]}
    with pytest.raises(ValueError, match=r"prompts=3 is not supported: give a string, or a dict of strings"):
        SentenceTransformerTrainingArguments(output_dir="unused", prompts=3)
    with pytest.raises(ValueError, match=r"prompts\['anchor'\]=5 is not supported: must be a string or a dict"):
        SentenceTransformerTrainingArguments(output_dir="unused", prompts={"anchor": 5})
    with pytest.raises(ValueError, match=r"prompts=\[1\] is not supported: a JSON string must hold an object"):
        SentenceTransformerTrainingArguments(output_dir="unused", prompts="[1]")
    nested = SentenceTransformerTrainingArguments(output_dir="unused", prompts={"nli": {"anchor": "query: "}})
    with pytest.raises(ValueError, match=r"is a dict of dicts .* train_dataset is one dataset without a name"):
        SentenceTransformerTrainer(model=model, args=nested, train_dataset=pairs)
    model.set_pooling_include_prompt(False)
    plain = SentenceTransformerTrainingArguments(output_dir="unused", prompts="query: ")
    with pytest.raises(ValueError, match=r"include_prompt=False"):
        SentenceTransformerTrainer(
            model=model, args=plain, train_dataset=pairs, loss=losses.MultipleNegativesRankingLoss(model)
        )
    with pytest.raises(ValueError, match=r"^CrossEncoderTrainingArguments: prompts='query: ' is not supported"):
        CrossEncoderTrainingArguments(output_dir="unused", prompts="query: ")
