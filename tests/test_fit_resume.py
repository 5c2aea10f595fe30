"""``SentenceTransformer.fit`` and ``CrossEncoder.fit`` keep bertkit's promises on sentence-transformers'
training calls, on the real MiniLM checkpoint and real STS-Lee pairs:

- killed with SIGKILL after a checkpoint and run again with ``resume_from_checkpoint=True``, a fit ends
  with the uninterrupted run's weights and per-step losses, bit for bit (one thread, dropout on);
- several objectives take batches in turn (a, b, a, b) for as many rounds as the smaller DataLoader
  has batches, under one AdamW and one schedule, as sentence-transformers' fit does: checked against a
  hand-written loop of sentence-transformers' losses on its model;
- with save_best_model, a later worse score does not overwrite ``output_path``, also across a resume.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import (  # noqa: E402
    killed_run_resumes_exactly,
    logged_losses,
    seeded_head_folder,
    sentence_transformers_adamw,
    without_dropout,
)
from torch.utils.data import DataLoader

from bertkit import CrossEncoder, InputExample, SentenceTransformer, losses
from bertkit.assets import asset_path

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.sentence_transformer import losses as stl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STEPS = 10  # 20 pairs, batches of 4, 2 epochs

# One fit, run in a subprocess so that it can be killed: argv = kind folder checkpoint_path resume weights_out
SCRIPT = r"""
import csv, sys
import torch
from torch.utils.data import DataLoader
from bertkit import CrossEncoder, InputExample, SentenceTransformer, losses
from bertkit.assets import asset_path

kind, folder, ckpt, resume, final = sys.argv[1:6]
lee = [(r["sentence1"], r["sentence2"], float(r["score"])) for r in csv.DictReader(open(asset_path("sts-lee")))]
examples = [InputExample(texts=[a, b], label=s) for a, b, s in lee[::13][:20]]
loader = DataLoader(examples, shuffle=True, batch_size=4)
common = dict(
    epochs=2, warmup_steps=2, optimizer_params={"lr": 5e-5}, show_progress_bar=False, checkpoint_path=ckpt,
    checkpoint_save_steps=3, checkpoint_save_total_limit=2, resume_from_checkpoint=resume == "1",
)
if kind == "st":
    model = SentenceTransformer(folder, device="cpu")
    model.max_seq_length = 32
    model.fit([(loader, losses.CoSENTLoss(model))], **common)
else:
    model = CrossEncoder(folder, device="cpu", max_length=48)
    model.fit(loader, **common)
torch.save({k: v.detach().clone() for k, v in model.training_model.state_dict().items()}, final)
"""


@pytest.fixture(scope="module")
def head_folder(tmp_path_factory):
    return seeded_head_folder(tmp_path_factory.mktemp("ce") / "one", 1, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["st", "ce"])
def test_sigkill_after_a_checkpoint_then_resume_equals_the_uninterrupted_run(kind, head_folder, tmp_path):
    """A fit killed just after its step-6 checkpoint (in its second epoch) and run again with
    resume_from_checkpoint=True: the same per-step losses in metrics.jsonl and the same final weights
    as the fit that was never interrupted, bit for bit (tolerance 0: one thread, the same arithmetic;
    the checkpoint restores weights, AdamW's moments, the schedule, the data position and the RNG
    that dropout and shuffling draw from)."""
    folder = str(asset_path("minilm")) if kind == "st" else head_folder
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)

    def cmd(ckpt: Path, resume: str, final: Path) -> list[str]:
        return [sys.executable, str(script), kind, folder, str(ckpt), resume, str(final)]

    a, b = killed_run_resumes_exactly(cmd, tmp_path, checkpoint=6, steps=STEPS)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), [
        k for k in a if not torch.equal(a[k], b[k])
    ]
    key = next(k for k in a if k.endswith("encoder.layer.0.attention.self.query.weight"))
    start = SentenceTransformer(folder).training_model if kind == "st" else CrossEncoder(folder).training_model
    assert not torch.equal(start.state_dict()[key], a[key])  # it trained


def _no_dropout_minilm(tmp_path):
    folder = tmp_path / "minilm-no-dropout"
    shutil.copytree(asset_path("minilm"), folder)
    return without_dropout(folder)


def test_two_objectives_take_turns_as_sentence_transformers_does(lee, tmp_path):
    """train_objectives [(a: 12 scored pairs, CoSENTLoss), (b: 8 (anchor, positive) pairs,
    MultipleNegativesRankingLoss)] in batches of 4, in order: as sentence-transformers' fit does, 2
    rounds (b has 2 batches) of a then b, 4 steps, one AdamW over both (weight decay 0.01 but on biases
    and LayerNorm), WarmupLinear over 2 x 2 = 4 steps without warmup (rates lr x 1, 3/4, 1/2, 1/4),
    clipping to norm 1. The hand-written loop is that on sentence-transformers' model with its own
    losses; each parameter's change agrees within 2e-3 of its norm (fp32 rounding through 4 AdamW
    steps, whose division by sqrt(v) amplifies it). A loop in another order (a, a, b, b), or a third
    batch of a, or one AdamW per objective, gives changes off by far more."""
    folder = _no_dropout_minilm(tmp_path)  # dropout masks cannot be matched across libraries
    rows_a = lee[::23][:12]
    rows_b = lee[5::31][:8]
    lr = 5e-5

    ref = st.SentenceTransformer(folder, device="cpu")
    ref.max_seq_length = 32
    ref.train()
    enc = ref[0].auto_model
    start = {n: p.detach().clone() for n, p in enc.named_parameters()}
    opt = sentence_transformers_adamw(ref.named_parameters(), lr)
    cosent, mnrl = stl.CoSENTLoss(ref), stl.MultipleNegativesRankingLoss(ref)
    turns = [(cosent, rows_a[0:4]), (mnrl, rows_b[0:4]), (cosent, rows_a[4:8]), (mnrl, rows_b[4:8])]
    for step, (loss_fn, batch) in enumerate(turns):
        for g in opt.param_groups:
            g["lr"] = lr * (1 - step / 4)
        features = [ref.preprocess([r[0] for r in batch]), ref.preprocess([r[1] for r in batch])]
        labels = torch.tensor([r[2] for r in batch]) if loss_fn is cosent else torch.zeros(len(batch))
        loss_fn(features, labels).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    ours = SentenceTransformer(folder, device="cpu")
    ours.max_seq_length = 32
    dl_a = DataLoader([InputExample(texts=[a, b], label=s) for a, b, s in rows_a], shuffle=False, batch_size=4)
    dl_b = DataLoader([InputExample(texts=[a, b]) for a, b, _ in rows_b], shuffle=False, batch_size=4)
    run = tmp_path / "run"
    ours.fit(
        train_objectives=[(dl_a, losses.CoSENTLoss(ours)), (dl_b, losses.MultipleNegativesRankingLoss(ours))],
        warmup_steps=0,
        optimizer_params={"lr": lr},
        show_progress_bar=False,
        checkpoint_path=str(run),
        checkpoint_save_steps=100,
    )
    assert [s for s, _ in logged_losses(run)] == [1, 2, 3, 4]  # 2 rounds of 2 objectives, no third batch of a
    got = dict(ours.training_model.named_parameters())
    checked = 0
    for name, p in enc.named_parameters():
        if name.startswith("pooler.") or name.endswith("attention.self.key.bias"):
            # the pooler is off the sentence-embedding path; the key bias shifts every score of a query
            # alike, which softmax ignores: zero gradient in exact arithmetic, rounding noise AdamW scales up
            continue
        want_delta, got_delta = p.detach() - start[name], got[name].detach() - start[name]
        assert float(want_delta.norm()) > 0, name
        err = float((got_delta - want_delta).norm()) / float(want_delta.norm())
        assert err < 2e-3, (name, err)
        checked += 1
    assert checked > 90, checked


class ScriptedEvaluator:
    """An evaluator whose score at each training step is given: the input that decides what is best.
    It records what the model computes on ``probe`` at every call, to compare with the saved folder."""

    primary_metric = "scripted_score"
    greater_is_better = True

    def __init__(self, scores: dict[int, float], probe, crash_at: int | None = None) -> None:
        self.scores, self.probe, self.crash_at, self.seen = scores, probe, crash_at, {}

    def __call__(self, model, output_path=None, epoch=-1, steps=-1) -> dict[str, float]:
        if steps == self.crash_at:
            raise RuntimeError(f"crash at step {steps}")
        out = model.predict(self.probe) if isinstance(model, CrossEncoder) else model.encode(self.probe)
        self.seen[steps] = np.asarray(out).copy()
        return {"scripted_score": self.scores[steps], "other": 0.0}


def _fit(kind, folder, rows, evaluator, output, **extra):
    examples = [InputExample(texts=[a, b], label=s) for a, b, s in rows]
    loader = DataLoader(examples, shuffle=False, batch_size=4)
    common = dict(
        evaluator=evaluator,
        epochs=1,
        warmup_steps=0,
        optimizer_params={"lr": 1e-4},
        evaluation_steps=1,
        output_path=str(output),
        show_progress_bar=False,
        **extra,
    )
    if kind == "st":
        model = SentenceTransformer(folder, device="cpu")
        model.max_seq_length = 32
        model.fit([(loader, losses.CoSENTLoss(model))], **common)
    else:
        model = CrossEncoder(folder, device="cpu", max_length=48)
        model.fit(loader, **common)


def _probe(kind, lee):
    texts = list(dict.fromkeys(r[1][:120] for r in lee))[:4]  # four different documents' openings
    return texts if kind == "st" else list(zip(texts, texts[1:] + texts[:1]))


def _saved(kind, output, probe):
    if kind == "st":
        return np.asarray(SentenceTransformer(str(output), device="cpu").encode(probe))
    return np.asarray(CrossEncoder(str(output), device="cpu", max_length=48).predict(probe))


def _assert_is_step(seen, saved, best, others):
    np.testing.assert_allclose(saved, seen[best], atol=1e-5, rtol=1e-4)
    for step in others:  # the evaluations changed the model enough to tell them apart
        assert np.abs(seen[step] - seen[best]).max() > 1e-3, step


@pytest.mark.parametrize("kind", ["st", "ce"])
def test_save_best_model_keeps_the_best_score_not_the_last(kind, lee, head_folder, tmp_path):
    """Scores 0.2, 0.8, 0.5, 0.1 at steps 1-4 (evaluation_steps=1; the epoch's end at step 4 is
    evaluated once): output_path holds the model of step 2, which the better 0.8 saved over step 1's,
    and which the worse later scores did not overwrite."""
    folder = str(asset_path("minilm")) if kind == "st" else head_folder
    rows = lee[::17][:16]
    probe = _probe(kind, lee)
    evaluator = ScriptedEvaluator({1: 0.2, 2: 0.8, 3: 0.5, 4: 0.1}, probe)
    _fit(kind, folder, rows, evaluator, tmp_path / "out")
    assert sorted(evaluator.seen) == [1, 2, 3, 4]
    _assert_is_step(evaluator.seen, _saved(kind, tmp_path / "out", probe), 2, [1, 3, 4])


@pytest.mark.parametrize("kind", ["st", "ce"])
def test_save_best_model_remembers_the_best_score_across_a_resume(kind, lee, head_folder, tmp_path):
    """The same scores, the run stopped by its evaluator failing at step 3 (after the step-2
    checkpoint), then resumed: the resumed run's 0.5 at step 3 is worse than the 0.8 of step 2 that
    the checkpoint remembers, so output_path keeps step 2's model."""
    folder = str(asset_path("minilm")) if kind == "st" else head_folder
    rows = lee[::17][:16]
    probe = _probe(kind, lee)
    scores = {1: 0.2, 2: 0.8, 3: 0.5, 4: 0.1}
    ckpt, out = tmp_path / "run", tmp_path / "out"
    first = ScriptedEvaluator(scores, probe, crash_at=3)
    with pytest.raises(RuntimeError, match="crash at step 3"):
        _fit(kind, folder, rows, first, out, checkpoint_path=str(ckpt), checkpoint_save_steps=1)
    assert (ckpt / "checkpoints" / "step-0000002").is_dir()
    second = ScriptedEvaluator(scores, probe)
    _fit(
        kind, folder, rows, second, out, checkpoint_path=str(ckpt), checkpoint_save_steps=1, resume_from_checkpoint=True
    )
    assert sorted(second.seen) == [3, 4]
    _assert_is_step({**first.seen, **second.seen}, _saved(kind, out, probe), 2, [1, 3, 4])
