"""``SentenceTransformerTrainer`` against sentence-transformers 6 on the real MiniLM and real STS-Lee /
polarity text. Its own Trainer cannot run here (it needs `datasets`), so a run is compared with
hand-written AdamW steps of sentence-transformers' own loss classes on its own model (dropout off), over
the batches sentence-transformers' own sampler classes draw (with accelerate's seedable sampler, as its
Trainer gets them), with transformers' own linear schedule and clipping to norm 1: each parameter's
change agrees within 2e-3 of its norm (fp32 rounding through AdamW, whose division by sqrt(v)
amplifies it). The samplers' batches are compared with theirs index for index; the evaluator's logged
metrics and eval_loss with sentence-transformers' evaluator and loss on the saved folder; a run killed
after a checkpoint and resumed with the uninterrupted one, bit for bit."""

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import Dataset, killed_run_resumes_exactly, sentence_transformers_adamw, without_dropout

from bertkit import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses
from bertkit.assets import asset_path
from bertkit.training_args import BatchSamplers, MultiDatasetBatchSamplers

st = pytest.importorskip("sentence_transformers")
from accelerate.data_loader import SeedableRandomSampler  # noqa: E402
from sentence_transformers.base import sampler as st_sampler  # noqa: E402
from sentence_transformers.sentence_transformer import losses as stl  # noqa: E402
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator  # noqa: E402
from torch.utils.data import BatchSampler, ConcatDataset, RandomSampler  # noqa: E402
from transformers import TrainingArguments as HFArgs  # noqa: E402
from transformers import get_linear_schedule_with_warmup  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LENGTH = 32  # tokens per text: the documents' first sentence or so, seconds a step on 2 cores


@pytest.fixture(scope="module")
def polarity():
    rows = list(csv.DictReader(open(asset_path("polarity-test"), encoding="utf-8")))
    return [r["text"] for r in rows[:64]]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm") / "minilm-no-dropout"
    shutil.copytree(asset_path("minilm"), out)
    return without_dropout(out)  # dropout masks cannot be matched across libraries


def _args(out, **kw):
    base = dict(output_dir=str(out), num_train_epochs=1, learning_rate=5e-5, seed=12, save_strategy="no")
    return SentenceTransformerTrainingArguments(**{**base, **kw})


def _theirs(folder):
    ref = st.SentenceTransformer(folder, device="cpu")
    ref.max_seq_length = LENGTH
    ref.train()
    return ref


def _ours(folder):
    model = SentenceTransformer(folder, device="cpu")
    model.max_seq_length = LENGTH
    return model


def _seedable_batches(n, batch_size, seed, epoch=0, drop_last=False):
    """One dataset's batches as sentence-transformers' Trainer gets them: its DefaultBatchSampler over a
    RandomSampler, which accelerate replaces by its seedable sampler (seeded with the training seed)."""
    generator = torch.Generator().manual_seed(seed)
    sampler = SeedableRandomSampler(range(n), generator=generator, data_seed=seed)
    sampler.set_epoch(epoch)
    return [list(b) for b in BatchSampler(sampler, batch_size, drop_last)]


def _multi_batches(datasets, batch_size, seed, multi, kind="plain", epoch=0):
    """Several datasets' batches from sentence-transformers' own multi-dataset sampler classes, built as
    its Trainer builds them (one generator seeded with the seed, shared by every sampler)."""
    generator = torch.Generator().manual_seed(seed)
    subs = []
    for ds in datasets:
        if kind == "plain":
            subs.append(
                st_sampler.DefaultBatchSampler(
                    RandomSampler(ds, generator=generator), batch_size, False, generator=generator, seed=seed
                )
            )
        else:
            subs.append(st_sampler.NoDuplicatesBatchSampler(ds, batch_size, False, ["label", "score"], generator, seed))
    cls = st_sampler.RoundRobinBatchSampler if multi == "round_robin" else st_sampler.ProportionalBatchSampler
    sampler = cls(ConcatDataset(datasets), subs, generator=generator, seed=seed)
    sampler.set_epoch(epoch)
    return [list(b) for b in sampler]


def _reference_steps(ref, steps, lr, warmup_ratio):
    """Hand-written steps on sentence-transformers' model: ``steps`` is [(loss, columns, labels)], one
    per optimizer step; transformers' AdamW groups (no weight decay), linear warmup schedule, clipping."""
    enc = ref[0].auto_model
    start = {n: p.detach().clone() for n, p in enc.named_parameters()}
    opt = sentence_transformers_adamw(ref.named_parameters(), lr, weight_decay=0.0)
    warmup = HFArgs(output_dir="unused", warmup_steps=warmup_ratio).get_warmup_steps(len(steps))
    schedule = get_linear_schedule_with_warmup(opt, warmup, len(steps))
    for loss_fn, columns, labels in steps:
        features = [
            {k: v.to(ref.device) if torch.is_tensor(v) else v for k, v in ref.preprocess(c).items()} for c in columns
        ]
        loss_fn(features, None if labels is None else labels.to(ref.device)).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad()
    return start, enc


def _assert_same_changes(start, enc, ours, tol=2e-3):
    got = dict(ours.training_model.named_parameters())
    checked = 0
    for name, p in enc.named_parameters():
        if name.startswith("pooler.") or name.endswith("attention.self.key.bias"):
            # the pooler is off the sentence-embedding path; the key bias shifts every score of a query
            # alike, which softmax ignores: zero gradient in exact arithmetic, rounding noise AdamW scales up
            continue
        want, have = p.detach() - start[name], got[name].detach() - start[name]
        assert float(want.norm()) > 0, name
        err = float((have - want).norm()) / float(want.norm())
        assert err < tol, (name, err)
        checked += 1
    assert checked > 90, checked


def _logged(out):
    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines() if x.strip()]


def test_mnrl_on_anchor_positive_columns_equals_hand_written_steps(folder, lee, tmp_path):
    """MultipleNegativesRankingLoss on a dict of (anchor, positive) columns, 12 rows in shuffled batches
    of 4 (seed 12), warmup_ratio 0.25 of 3 steps (transformers rounds it up: 1 step at rate 0): the same
    changes as 3 hand-written steps over the batches sentence-transformers' sampler draws."""
    rows = lee[::23][:12]
    lr = 5e-5
    ref = _theirs(folder)
    mnrl = stl.MultipleNegativesRankingLoss(ref)
    batches = _seedable_batches(12, 4, seed=12)
    steps = [(mnrl, [[rows[i][0] for i in b], [rows[i][1] for i in b]], None) for b in batches]
    start, enc = _reference_steps(ref, steps, lr, 0.25)

    ours = _ours(folder)
    data = {"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows]}
    args = _args(tmp_path / "run", per_device_train_batch_size=4, warmup_ratio=0.25, logging_steps=1)
    trainer = SentenceTransformerTrainer(
        model=ours, args=args, train_dataset=data, loss=losses.MultipleNegativesRankingLoss(ours)
    )
    assert [list(b) for b in trainer.batch_sampler] == batches
    trainer.train()
    assert trainer.model is ours
    assert [r["lr"] for r in _logged(tmp_path / "run") if "loss" in r] == pytest.approx([0.0, lr, lr / 2])
    _assert_same_changes(start, enc, ours)


def test_cosent_on_a_score_column_of_a_dataset_equals_hand_written_steps(folder, lee, tmp_path):
    """CoSENTLoss on a datasets.Dataset-like object (sentence1, sentence2, score): the "score" column
    is the labels, the other two the texts; 16 rows in batches of 8, no warmup: 2 steps as written."""
    rows = lee[::19][:16]
    lr = 5e-5
    ref = _theirs(folder)
    cosent = stl.CoSENTLoss(ref)
    batches = _seedable_batches(16, 8, seed=12)
    steps = [
        (cosent, [[rows[i][0] for i in b], [rows[i][1] for i in b]], torch.tensor([rows[i][2] for i in b]))
        for b in batches
    ]
    start, enc = _reference_steps(ref, steps, lr, 0.0)

    ours = _ours(folder)
    data = Dataset(
        {"sentence1": [r[0] for r in rows], "score": [r[2] for r in rows], "sentence2": [r[1] for r in rows]}
    )
    args = _args(tmp_path / "run", per_device_train_batch_size=8)
    SentenceTransformerTrainer(model=ours, args=args, train_dataset=data, loss=losses.CoSENTLoss(ours)).train()
    _assert_same_changes(start, enc, ours)


@pytest.mark.parametrize("multi", ["round_robin", "proportional"])
@pytest.mark.parametrize("kind", ["plain", "no_duplicates"])
def test_multi_dataset_batches_are_sentence_transformers_samplers(multi, kind, lee, polarity):
    """Three datasets of 10, 7 and 13 rows (batches of 4, the last ones short): the batches, as indices
    into the rows laid end to end, are those of sentence-transformers' RoundRobinBatchSampler /
    ProportionalBatchSampler over its DefaultBatchSampler / NoDuplicatesBatchSampler, epochs 0 and 1
    (every sampler draws from one generator, so a draw out of turn changes the later batches)."""
    parts = {
        "a": {"s1": [r[0] for r in lee[:10]], "s2": [r[1] for r in lee[:10]], "score": [r[2] for r in lee[:10]]},
        "b": {"anchor": polarity[:7], "positive": polarity[7:14]},
        "c": {"s1": [r[0] for r in lee[40:53]], "s2": [r[1] for r in lee[40:53]], "score": [r[2] for r in lee[40:53]]},
    }
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    args = SentenceTransformerTrainingArguments(
        output_dir="unused",
        per_device_train_batch_size=4,
        seed=5,
        multi_dataset_batch_sampler=multi,
        batch_sampler=BatchSamplers.NO_DUPLICATES if kind == "no_duplicates" else BatchSamplers.BATCH_SAMPLER,
    )
    assert args.multi_dataset_batch_sampler == MultiDatasetBatchSamplers(multi)
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=parts,
        loss={
            "a": losses.CoSENTLoss(model),
            "b": losses.MultipleNegativesRankingLoss(model),
            "c": losses.CoSENTLoss(model),
        },
    )
    datasets = [Dataset(p) for p in parts.values()]
    for epoch in (0, 1):
        trainer.batch_sampler.set_epoch(epoch)
        want = _multi_batches(datasets, 4, 5, multi, kind, epoch)
        assert [list(b) for b in trainer.batch_sampler] == want, epoch
    assert len(want) == (6 if multi == "round_robin" else 9)  # 3 x the fewest batches (2), or all 3 + 2 + 4


def test_two_datasets_two_losses_equal_hand_written_steps(folder, lee, polarity, tmp_path):
    """A dict of two datasets with a dict of two losses (CoSENT on scored pairs, MNRL on polarity
    pairs), PROPORTIONAL: each step's batch comes from the dataset sentence-transformers' sampler
    picks and goes through that dataset's loss; 4 steps equal the hand-written ones."""
    scored = lee[::29][:8]
    pairs = list(zip(polarity[:8], polarity[8:16]))
    lr = 5e-5
    ref = _theirs(folder)
    cosent, mnrl = stl.CoSENTLoss(ref), stl.MultipleNegativesRankingLoss(ref)
    ds_a = Dataset({"s1": [r[0] for r in scored], "s2": [r[1] for r in scored], "score": [r[2] for r in scored]})
    ds_b = Dataset({"anchor": [p[0] for p in pairs], "positive": [p[1] for p in pairs]})
    steps = []
    order = []
    for b in _multi_batches([ds_a, ds_b], 4, 12, "proportional"):
        if b[0] < 8:
            order.append("a")
            steps.append(
                (
                    cosent,
                    [[scored[i][0] for i in b], [scored[i][1] for i in b]],
                    torch.tensor([scored[i][2] for i in b]),
                )
            )
        else:
            order.append("b")
            b = [i - 8 for i in b]
            steps.append((mnrl, [[pairs[i][0] for i in b], [pairs[i][1] for i in b]], None))
    assert sorted(order) == ["a", "a", "b", "b"]
    start, enc = _reference_steps(ref, steps, lr, 0.0)

    ours = _ours(folder)
    args = _args(tmp_path / "run", per_device_train_batch_size=4)
    SentenceTransformerTrainer(
        model=ours,
        args=args,
        train_dataset={"scored": ds_a.columns, "pairs": [{"anchor": a, "positive": p} for a, p in pairs]},
        loss={"scored": losses.CoSENTLoss(ours), "pairs": losses.MultipleNegativesRankingLoss(ours)},
    ).train()
    _assert_same_changes(start, enc, ours)


def test_no_duplicates_batches_are_sentence_transformers_and_repeat_no_text(lee):
    """40 (anchor, positive) rows in which every anchor appears twice, batches of 8, drop_last False:
    the batches are sentence-transformers' NoDuplicatesBatchSampler's (epochs 0 and 1), no text twice
    in a batch, every row once per epoch; the plain sampler, for contrast, repeats anchors."""
    rows = lee[:20]
    data = {"anchor": [r[0] for r in rows] * 2, "positive": [r[1] for r in rows] + [r[1] for r in lee[20:40]]}
    assert len(set(data["anchor"])) < 20  # STS-Lee repeats documents: rows share anchors already
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    seen_plain_repeat = False
    for kind in (BatchSamplers.NO_DUPLICATES, BatchSamplers.BATCH_SAMPLER):
        args = SentenceTransformerTrainingArguments(
            output_dir="unused", per_device_train_batch_size=8, batch_sampler=kind
        )
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=data, loss=losses.MultipleNegativesRankingLoss(model)
        )
        for epoch in (0, 1):
            trainer.batch_sampler.set_epoch(epoch)
            ours = [list(b) for b in trainer.batch_sampler]
            repeats = [
                b for b in ours if len({t for i in b for t in (data["anchor"][i], data["positive"][i])}) < 2 * len(b)
            ]
            if kind == BatchSamplers.BATCH_SAMPLER:
                seen_plain_repeat |= bool(repeats)
                continue
            generator = torch.Generator().manual_seed(42)
            theirs = st_sampler.NoDuplicatesBatchSampler(Dataset(data), 8, False, ["label"], generator, 42)
            theirs.set_epoch(epoch)
            assert ours == [list(b) for b in theirs], epoch
            assert not repeats, repeats
            assert sorted(i for b in ours for i in b) == list(range(40))
    assert seen_plain_repeat


def test_evaluator_and_eval_loss_logged_as_sentence_transformers_names_them(lee, tmp_path, capfd):
    """eval_strategy='steps' every 2 of 4 steps, an eval_dataset and sentence-transformers'
    EmbeddingSimilarityEvaluator named "sts-dev": metrics.jsonl has eval_loss and
    eval_sts-dev_spearman_cosine at steps 2 and 4; at step 4 (the final weights) they equal the same
    evaluator and the same loss run by sentence-transformers on the folder model.save_pretrained wrote
    (loss over the eval batches its sampler draws, mean over rows), which gives bertkit's vectors."""
    train, dev = lee[::11][:16], lee[3::13][:12]
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    model.max_seq_length = LENGTH
    evaluator = EmbeddingSimilarityEvaluator(
        [r[0] for r in dev], [r[1] for r in dev], [r[2] for r in dev], name="sts-dev"
    )
    cols = lambda rows: {
        "sentence1": [r[0] for r in rows],
        "sentence2": [r[1] for r in rows],
        "score": [r[2] for r in rows],
    }  # noqa: E731
    args = _args(
        tmp_path / "run",
        per_device_train_batch_size=4,
        per_device_eval_batch_size=5,
        learning_rate=1e-4,
        eval_strategy="steps",
        eval_steps=2,
        logging_steps=2,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=cols(train),
        eval_dataset=cols(dev),
        loss=losses.CoSENTLoss(model),
        evaluator=evaluator,
    )
    trainer.train()
    assert "train" in capfd.readouterr().err  # the progress bar
    evals = [r for r in _logged(tmp_path / "run") if "eval_loss" in r]
    assert [r["step"] for r in evals] == [2, 4]
    assert "eval_sts-dev_spearman_cosine" in evals[-1] and "eval_sts-dev_pearson_cosine" in evals[-1]
    # the weights moved between the two (Spearman over 12 pairs may keep its ranks)
    assert evals[0]["eval_sts-dev_pearson_cosine"] != evals[1]["eval_sts-dev_pearson_cosine"]
    assert (tmp_path / "run" / "eval" / "similarity_evaluation_sts-dev_results.csv").is_file()

    model.save_pretrained(tmp_path / "final")
    loaded = st.SentenceTransformer(str(tmp_path / "final"), device="cpu")
    assert loaded.max_seq_length == LENGTH
    want = evaluator(loaded)
    assert evals[-1]["eval_sts-dev_spearman_cosine"] == pytest.approx(want["sts-dev_spearman_cosine"], abs=1e-4)
    loaded.eval()
    cosent = stl.CoSENTLoss(loaded)
    total = 0.0
    with torch.no_grad():
        for b in _seedable_batches(12, 5, seed=12):
            feats = [loaded.preprocess([dev[i][0] for i in b]), loaded.preprocess([dev[i][1] for i in b])]
            total += float(cosent(feats, torch.tensor([dev[i][2] for i in b]))) * len(b)
    assert evals[-1]["eval_loss"] == pytest.approx(total / 12, rel=1e-4)
    texts = [r[0] for r in dev]
    torch.testing.assert_close(
        torch.as_tensor(model.encode(texts)), loaded.encode(texts, convert_to_tensor=True), atol=1e-5, rtol=0
    )
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] == pytest.approx(evals[-1]["eval_loss"], rel=1e-5)
    assert metrics["eval_sts-dev_spearman_cosine"] == pytest.approx(evals[-1]["eval_sts-dev_spearman_cosine"], abs=1e-6)


def test_a_trainer_without_train_dataset_evaluates_only(lee, tmp_path):
    """No train_dataset, as sentence-transformers allows: evaluate() gives the eval loss and the
    evaluator's metrics of the untouched model, equal to sentence-transformers' own loss and evaluator on
    the same folder (the loss over the eval batches its sampler draws, mean over rows), and no epoch, as
    nothing trained. train() is refused in one line, and so is a trainer with nothing to train or evaluate."""
    dev = lee[3::13][:12]
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    model.max_seq_length = LENGTH
    evaluator = EmbeddingSimilarityEvaluator(
        [r[0] for r in dev], [r[1] for r in dev], [r[2] for r in dev], name="sts-dev"
    )
    data = {"sentence1": [r[0] for r in dev], "sentence2": [r[1] for r in dev], "score": [r[2] for r in dev]}
    trainer = SentenceTransformerTrainer(
        model=model,
        args=_args(tmp_path / "run", per_device_eval_batch_size=5),
        eval_dataset=data,
        loss=losses.CoSENTLoss(model),
        evaluator=evaluator,
    )
    metrics = trainer.evaluate()
    assert "epoch" not in metrics and metrics["eval_runtime"] > 0
    ref = _theirs(str(asset_path("minilm")))
    ref.eval()
    want = evaluator(ref)
    assert metrics["eval_sts-dev_spearman_cosine"] == pytest.approx(want["sts-dev_spearman_cosine"], abs=1e-4)
    assert metrics["eval_sts-dev_pearson_cosine"] == pytest.approx(want["sts-dev_pearson_cosine"], abs=1e-4)
    cosent, total = stl.CoSENTLoss(ref), 0.0
    with torch.no_grad():
        for b in _seedable_batches(12, 5, seed=12):
            feats = [ref.preprocess([dev[i][0] for i in b]), ref.preprocess([dev[i][1] for i in b])]
            total += float(cosent(feats, torch.tensor([dev[i][2] for i in b]))) * len(b)
    assert metrics["eval_loss"] == pytest.approx(total / 12, rel=1e-4)
    with pytest.raises(ValueError, match=r"train\(\) needs a train_dataset="):
        trainer.train()
    with pytest.raises(ValueError, match="an eval_dataset= or evaluator= to evaluate only"):
        SentenceTransformerTrainer(model=model, args=_args(tmp_path / "nothing"))


# One training run, in a subprocess that can be killed: argv = output_dir resume weights_out
SCRIPT = r"""
import csv, sys
import torch
from bertkit import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses
from bertkit.assets import asset_path

out, resume, final = sys.argv[1:4]
lee = [(r["sentence1"], r["sentence2"], float(r["score"])) for r in csv.DictReader(open(asset_path("sts-lee")))]
rows = lee[::13][:16]
model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
model.max_seq_length = 32
args = SentenceTransformerTrainingArguments(
    output_dir=out, num_train_epochs=2, per_device_train_batch_size=4, learning_rate=5e-5, warmup_ratio=0.2,
    save_strategy="steps", save_steps=3, logging_steps=1, seed=7, batch_sampler="no_duplicates", disable_tqdm=True,
)
data = {"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows]}
loss = losses.MultipleNegativesRankingLoss(model)
trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
trainer.train(resume_from_checkpoint=resume == "1")
torch.save({k: v.detach().clone() for k, v in model.training_model.state_dict().items()}, final)
"""


@pytest.mark.slow
def test_sigkill_after_a_checkpoint_then_resume_equals_the_uninterrupted_run(tmp_path):
    """Dropout on, NO_DUPLICATES batches, 2 epochs of 4 steps, a checkpoint every 3 steps: a run killed
    with SIGKILL just after its step-3 checkpoint and run again with resume_from_checkpoint=True logs
    the same per-step losses and ends with the same weights as the uninterrupted run, bit for bit (one
    thread; the checkpoint restores weights, AdamW's moments, the schedule, the data position, the RNG)."""
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)

    def cmd(out, resume, final):
        return [sys.executable, str(script), str(out), resume, str(final)]

    a, b = killed_run_resumes_exactly(cmd, tmp_path, checkpoint=3, steps=8)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    key = next(k for k in a if k.endswith("encoder.layer.0.attention.self.query.weight"))
    assert not torch.equal(SentenceTransformer(str(asset_path("minilm"))).training_model.state_dict()[key], a[key])


def test_bad_input_is_refused_by_name(lee):
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    args = SentenceTransformerTrainingArguments(output_dir="unused", per_device_train_batch_size=4)
    mnrl = losses.MultipleNegativesRankingLoss(model)
    pairs = {"anchor": [r[0] for r in lee[:8]], "positive": [r[1] for r in lee[:8]]}

    def make(data, loss=mnrl, a=args, **kw):
        return SentenceTransformerTrainer(model=model, args=a, train_dataset=data, loss=loss, **kw)

    with pytest.raises(
        ValueError, match=r"^train_dataset: the columns have different lengths \{'anchor': 8, 'positive': 7\}$"
    ) as e:
        make({"anchor": pairs["anchor"], "positive": pairs["positive"][:7]})
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"train_dataset: column 'positive' row 2 is int \(5\), not a text"):
        make({"anchor": pairs["anchor"][:3], "positive": ["a", "b", 5]})
    with pytest.raises(
        ValueError, match=r"loss has no entry for \['b'\], which train_dataset holds \(it has \['a'\]\)"
    ):
        make({"a": pairs, "b": pairs}, loss={"a": mnrl})
    with pytest.raises(
        ValueError, match=r"train_dataset has 2 text columns \['anchor', 'positive'\], which TripletLoss cannot take"
    ):
        make(pairs, loss=losses.TripletLoss(model))
    with pytest.raises(
        ValueError, match=r"train_dataset: row 1 has the columns \['anchor'\], row 0 has \['anchor', 'positive'\]"
    ):
        make([{"anchor": "x", "positive": "y"}, {"anchor": "z"}])
    with pytest.raises(ValueError, match=r"train_dataset has the label columns \['label', 'score'\]"):
        make({**pairs, "label": [1] * 8, "score": [0.5] * 8})
    with pytest.raises(
        ValueError, match=r"eval_strategy asks for evaluations, but there is no eval_dataset and no evaluator"
    ):
        make(pairs, a=SentenceTransformerTrainingArguments(output_dir="unused", eval_strategy="steps", eval_steps=2))
    with pytest.raises(ValueError, match=r"prompts\['anchor'\]=1 is not supported: must be a string"):
        SentenceTransformerTrainingArguments(output_dir="unused", prompts={"anchor": 1})
    with pytest.raises(ValueError, match=r"router_mapping=\{'anchor': 'query'\} is not supported"):
        SentenceTransformerTrainingArguments(output_dir="unused", router_mapping={"anchor": "query"})
    with pytest.raises(ValueError, match=r"learning_rate_mapping\['.\*'\]='fast' is not supported"):
        SentenceTransformerTrainingArguments(output_dir="unused", learning_rate_mapping={".*": "fast"})
    with pytest.raises(ValueError, match=r"batch_sampler='no_dupes' is not one of 'batch_sampler', 'no_duplicates'"):
        SentenceTransformerTrainingArguments(output_dir="unused", batch_sampler="no_dupes")
    with pytest.raises(ValueError, match=r"compute_metrics=.* is not supported: pass an evaluator= for metrics"):
        make(pairs, compute_metrics=lambda p: {})
