"""``bertkit.datasets`` (sentence-transformers' v2 training datasets), ``bertkit.LoggingHandler`` and the
evaluator's RNG fence in ``SentenceTransformer.fit``, checked against the installed sentence-transformers
on the real MiniLM checkpoint, real STS-Lee pairs and real polarity sentences:

- NoDuplicatesDataLoader iterated directly yields sentence-transformers' loader's batches, example for
  example, for the same Python RNG state (its batching rule, its length, its reshuffle on wrap-around);
  in fit its batches are sentence-transformers 6's no-duplicates batch sampler's for fit's seed and epoch;
  an MNRL fit with it lowers the loss, and a fit killed after a checkpoint resumes to the same weights;
- SentenceLabelDataset streams sentence-transformers' examples for the same NumPy RNG state;
- an evaluator that draws from every RNG does not change the steps of the fit around it.
"""

import csv
import logging
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import killed_run_resumes_exactly, logged_losses
from torch.utils.data import DataLoader

from bertkit import InputExample, LoggingHandler, SentenceTransformer, losses
from bertkit.assets import asset_path
from bertkit.datasets import (
    NoDuplicatesDataLoader,
    SentenceLabelDataset,
    SentencesDataset,
    no_duplicate_batches,
)
from bertkit.evaluation import EmbeddingSimilarityEvaluator

st = pytest.importorskip("sentence_transformers")
from sentence_transformers import InputExample as STInputExample  # noqa: E402
from sentence_transformers.base.sampler import NoDuplicatesBatchSampler  # noqa: E402
from sentence_transformers.sentence_transformer import datasets as std  # noqa: E402
from sentence_transformers.util.logging import LoggingHandler as STLoggingHandler  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def polarity():
    rows = list(csv.DictReader(open(asset_path("polarity-train"), encoding="utf-8")))
    return [(r["text"], r["label"]) for r in rows[:900]]


def _pairs_with_repeats(polarity):
    """600 (anchor, positive) pairs over real sentences where each anchor appears twice and a few texts
    come back in other case and spacing: batches of them can repeat a text unless the loader prevents it."""
    texts = [t for t, _ in polarity]
    pairs = [(texts[i % 300], texts[300 + i]) for i in range(600)]
    for i in range(0, 600, 37):  # the same text, upper-cased and padded: the loader counts it as the same
        pairs[i] = (pairs[i][0], " " + texts[(i + 1) % 300].upper() + " ")
    return pairs


def _key(text):
    return text.strip().lower()


def _batch_texts(batches):
    return [[tuple(ex.texts) for ex in batch] for batch in batches]


def _positive_pairs(lee):
    """The most similar quarter of STS-Lee's pairs among its first 30 documents: real (anchor, positive)
    pairs for MNRL, in which every document comes back many times."""
    docs = list(dict.fromkeys([t for r in lee for t in r[:2]]))
    train_docs = set(docs[:30])
    train = [r for r in lee if r[0] in train_docs and r[1] in train_docs and r[0] != r[1]]
    cut = sorted(r[2] for r in train)[len(train) * 3 // 4]
    return [(a, b) for a, b, s in train if s >= cut]


@pytest.mark.parametrize("batch_size,seed", [(8, 0), (32, 1), (50, 2)])
def test_no_duplicates_loader_iterates_as_sentence_transformers(polarity, batch_size, seed):
    """For the same Python RNG state, three passes of bertkit's loader yield sentence-transformers'
    loader's batches example for example (both shuffle on construction and on each wrap-around, and
    carry their position over from pass to pass); no batch repeats a text, compared stripped and
    lower-cased; the length is floor(examples / batch_size) for both. bertkit's ``seed=`` gives the
    batches of a ``random.seed(seed)`` before sentence-transformers' loader."""
    pairs = _pairs_with_repeats(polarity)
    random.seed(seed)
    ref = std.NoDuplicatesDataLoader([STInputExample(texts=[a, b]) for a, b in pairs], batch_size)
    want = [_batch_texts(list(ref)) for _ in range(3)]
    random.seed(seed)
    ours = NoDuplicatesDataLoader([InputExample(texts=[a, b]) for a, b in pairs], batch_size)
    got = [_batch_texts(list(ours)) for _ in range(3)]
    assert len(ours) == len(ref) == len(pairs) // batch_size
    assert got == want
    assert all(len(b) == batch_size for p in got for b in p)
    for batch in (b for p in got for b in p):
        keys = [k for ex in batch for k in {_key(t) for t in ex}]  # an example may repeat its own text
        assert len(keys) == len(set(keys))
    random.setstate(random.Random(12345).getstate())
    seeded = NoDuplicatesDataLoader([InputExample(texts=[a, b]) for a, b in pairs], batch_size, seed=seed)
    assert [_batch_texts(list(seeded)) for _ in range(3)] == want
    assert random.getstate() == random.Random(12345).getstate()  # its own RNG: the global one untouched


def test_plain_batches_of_these_pairs_would_repeat_texts(polarity):
    """The test data needs the loader: batches of 32 in order repeat texts (each anchor is in two pairs)."""
    pairs = _pairs_with_repeats(polarity)
    repeats = 0
    for i in range(0, 576, 32):
        keys = [_key(t) for a, b in pairs[i : i + 32] for t in (a, b)]
        repeats += len(keys) - len(set(keys))
    assert repeats > 0


class _Rows:
    """The smallest stand-in for a datasets.Dataset that sentence-transformers' batch sampler reads."""

    def __init__(self, pairs):
        self.pairs, self.column_names = pairs, ["sentence_0", "sentence_1"]

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return {"sentence_0": self.pairs[i][0], "sentence_1": self.pairs[i][1]}


@pytest.mark.parametrize("n,batch_size", [(600, 16), (600, 64), (300, 100)])
def test_fit_batches_are_sentence_transformers_no_duplicates_sampler(polarity, n, batch_size):
    """fit batches a NoDuplicatesDataLoader as sentence-transformers 6's fit does: its
    NoDuplicatesBatchSampler (drop_last, fit's seed 42, epoch e seeds 42 + e); the same index lists for
    epochs 0 and 1."""
    texts = [t for t, _ in polarity]
    pairs = [(texts[i % 300], texts[300 + i]) for i in range(n)]  # no case variants: its key is the exact text
    examples = [InputExample(texts=[a, b]) for a, b in pairs]
    for epoch in (0, 1):
        sampler = NoDuplicatesBatchSampler(
            _Rows(pairs), batch_size, drop_last=True, generator=torch.Generator(), seed=42
        )
        sampler.set_epoch(epoch)
        want = list(sampler)
        assert len(want) == len(sampler) == n // batch_size
        assert no_duplicate_batches(examples, batch_size, 42 + epoch) == want


def test_fit_batches_resample_when_a_pass_falls_short(polarity):
    """The case above that exercises the resampling: one shuffled pass of 300 pairs (each anchor twice)
    fills fewer than the 3 batches of 100 that the epoch needs."""
    texts = [t for t, _ in polarity]
    pairs = [(texts[i % 150], texts[300 + i]) for i in range(300)]
    sampler = NoDuplicatesBatchSampler(_Rows(pairs), 100, drop_last=True, generator=torch.Generator(), seed=42)
    first_pass = list(sampler._iter_one_pass(lambda i: set(_Rows(pairs)[i].values()), lambda a, b: not a.isdisjoint(b)))
    assert len(first_pass) < 3
    examples = [InputExample(texts=[a, b]) for a, b in pairs]
    assert no_duplicate_batches(examples, 100, 42) == list(sampler.__iter__())


@pytest.mark.parametrize("with_replacement", [False, True])
def test_sentence_label_dataset_streams_as_sentence_transformers(polarity, with_replacement):
    """For the same NumPy RNG state, the same examples in the same order as sentence-transformers'
    SentenceLabelDataset (labels of fewer than samples_per_label examples left out), and the same length."""
    rows = polarity[:40] + [("lonely one", "7")]  # a label with one example: left out by both
    random_labels = [str(i % 5) for i in range(40)] + ["7"]
    np.random.seed(3)
    ref = std.SentenceLabelDataset(
        [STInputExample(texts=[t], label=lab) for (t, _), lab in zip(rows, random_labels)],
        samples_per_label=3,
        with_replacement=with_replacement,
    )
    want = [(ex.texts, ex.label) for ex in ref]
    np.random.seed(3)
    ours = SentenceLabelDataset(
        [InputExample(texts=[t], label=lab) for (t, _), lab in zip(rows, random_labels)],
        samples_per_label=3,
        with_replacement=with_replacement,
    )
    assert [(ex.texts, ex.label) for ex in ours] == want
    assert len(ours) == len(ref) == 40
    assert ("lonely one",) not in {tuple(t) for t, _ in want}


def test_sentences_dataset_is_the_list(lee):
    """SentencesDataset(examples, model) indexes and counts like sentence-transformers' (the list)."""
    examples = [InputExample(texts=[a, b], label=s) for a, b, s in lee[:10]]
    ref = std.SentencesDataset(examples, None)
    ours = SentencesDataset(examples, None)
    assert len(ours) == len(ref) == 10
    assert [ours[i] for i in range(10)] == [ref[i] for i in range(10)]
    assert len(DataLoader(ours, batch_size=4)) == 3


def test_logging_handler_writes_as_sentence_transformers(capsys):
    """bertkit.LoggingHandler prints a record as sentence-transformers' does (through tqdm.write)."""
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "step %d done", (3,), None)
    for handler in (LoggingHandler(), STLoggingHandler()):
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        handler.emit(record)
    out = capsys.readouterr().out
    assert out == "INFO step 3 done\nINFO step 3 done\n"


def test_bad_input_is_refused_by_name(lee):
    ex = [InputExample(texts=[a, b]) for a, b, _ in lee[::40][:20]]
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        NoDuplicatesDataLoader(ex, 0)
    with pytest.raises(ValueError, match="examples is empty"):
        NoDuplicatesDataLoader([], 4)
    with pytest.raises(ValueError, match=r"examples\[1\] is 'text', not an InputExample"):
        NoDuplicatesDataLoader([ex[0], "text"], 1)
    with pytest.raises(ValueError, match="batch_size=21 is more than the 20 examples"):
        NoDuplicatesDataLoader(ex, 21)
    same = [InputExample(texts=["a", "A "]), InputExample(texts=["b", "a"]), InputExample(texts=["B", "b"])]
    with pytest.raises(ValueError, match="batch_size=3 needs that many examples with no text in common, but the"):
        NoDuplicatesDataLoader(same, 3)  # 2 distinct texts: sentence-transformers' loader loops forever
    # enough distinct texts, but every example shares "x": no batch of 2 can ever fill
    hub = [InputExample(texts=["x", t]) for t in "abcd"]
    loader = NoDuplicatesDataLoader(hub, 2, seed=0)
    with pytest.raises(ValueError, match="batch_size=2 cannot be filled; lower it"):
        next(iter(loader))
    with pytest.raises(ValueError, match="0 batches of 2 examples without a repeated text"):
        no_duplicate_batches(hub, 2, 42)
    with pytest.raises(ValueError, match="samples_per_label=3, but no label has that many examples"):
        SentenceLabelDataset([InputExample(texts=["a"], label=0), InputExample(texts=["b"], label=0)], 3)
    with pytest.raises(ValueError, match="samples_per_label must be a positive integer, got 0"):
        SentenceLabelDataset(ex, 0)
    with pytest.raises(ValueError, match="SentencesDataset: examples is empty"):
        SentencesDataset([], None)
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    labelled = [InputExample(texts=[a], label=i % 2) for i, (a, _, _) in enumerate(lee[:8])]
    stream = DataLoader(SentenceLabelDataset(labelled), batch_size=4)
    with pytest.raises(TypeError, match="streams its examples .SentenceLabelDataset.; fit needs"):
        model.fit([(stream, losses.MultipleNegativesRankingLoss(model))], show_progress_bar=False)


def _mnrl_loss(model, pairs, batch_size):
    """The mean MNRL loss over fixed batches (eval mode, no gradient)."""
    loss = losses.MultipleNegativesRankingLoss(model)
    model.training_model.eval()
    values = []
    with torch.no_grad():
        for i in range(0, len(pairs) - batch_size + 1, batch_size):
            chunk = pairs[i : i + batch_size]
            features = [model.tokenize([a for a, _ in chunk]), model.tokenize([b for _, b in chunk])]
            values.append(float(loss(features, torch.zeros(len(chunk)))))
    return float(np.mean(values))


def test_mnrl_fit_with_no_duplicates_loader_lowers_the_loss(lee, tmp_path):
    """MultipleNegativesRankingLoss on real STS-Lee positive pairs (every document in many of them)
    through a NoDuplicatesDataLoader, 2 epochs of 13 batches of 8: the loss on those pairs, in batches
    of 8 distinct documents, falls by more than a third; the run logs all 26 steps."""
    pairs = _positive_pairs(lee)
    assert len(pairs) == 110
    model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
    model.max_seq_length = 32
    probe = [pairs[i] for b in no_duplicate_batches([InputExample(texts=list(p)) for p in pairs], 8, 7) for i in b]
    before = _mnrl_loss(model, probe, 8)
    loader = NoDuplicatesDataLoader([InputExample(texts=[a, b]) for a, b in pairs], batch_size=8)
    run = tmp_path / "run"
    model.fit(
        [(loader, losses.MultipleNegativesRankingLoss(model))],
        epochs=2,
        warmup_steps=2,
        optimizer_params={"lr": 1e-4},
        show_progress_bar=False,
        checkpoint_path=str(run),
        checkpoint_save_steps=1000,
    )
    after = _mnrl_loss(model, probe, 8)
    assert [s for s, _ in logged_losses(run)] == list(range(1, 27))
    assert after < 0.67 * before, (before, after)


class DrawingEvaluator:
    """A real EmbeddingSimilarityEvaluator that also draws from torch's, Python's and NumPy's RNGs, as an
    evaluator with sampling or dropout of its own would."""

    def __init__(self, rows):
        self.inner = EmbeddingSimilarityEvaluator([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        self.primary_metric = self.inner.primary_metric
        self.calls = 0

    def __call__(self, model, output_path=None, epoch=-1, steps=-1):
        self.calls += 1
        torch.rand(1000)
        random.random()
        np.random.rand(10)
        return self.inner(model, output_path=output_path, epoch=epoch, steps=steps)


def test_an_evaluator_drawing_random_numbers_does_not_change_the_fit(lee, tmp_path):
    """The same fit (CoSENT, 24 shuffled STS-Lee pairs in batches of 4, dropout on) with an evaluator
    that draws from every RNG every 2 steps, and without any evaluator: the same per-step losses and the
    same final weights, bit for bit, and the same RNG states after it (tolerance 0: one process, the same
    arithmetic). Without the fence the dropout masks after the first evaluation differ."""
    rows = lee[::11][:24]
    held = lee[3::29][:16]

    def run(evaluator, name):
        torch.manual_seed(5)  # what the caller's RNG was does not matter either way; fix it for both
        random.seed(5)
        np.random.seed(5)
        model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
        model.max_seq_length = 32
        loader = DataLoader([InputExample(texts=[a, b], label=s) for a, b, s in rows], shuffle=True, batch_size=4)
        model.fit(
            [(loader, losses.CoSENTLoss(model))],
            evaluator=evaluator,
            evaluation_steps=2 if evaluator is not None else 0,
            epochs=1,
            warmup_steps=1,
            optimizer_params={"lr": 5e-5},
            show_progress_bar=False,
            checkpoint_path=str(tmp_path / name),
            checkpoint_save_steps=1000,
        )
        state = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
        weights = {k: v.detach().clone() for k, v in model.training_model.state_dict().items()}
        return logged_losses(tmp_path / name), weights, state

    evaluator = DrawingEvaluator(held)
    plain_losses, plain_weights, plain_state = run(None, "plain")
    eval_losses, eval_weights, eval_state = run(evaluator, "evaluated")
    assert evaluator.calls == 3  # steps 2, 4, 6 (the epoch's end)
    assert [s for s, _ in plain_losses] == list(range(1, 7))
    assert eval_losses == plain_losses
    assert plain_weights.keys() == eval_weights.keys()
    assert [k for k in plain_weights if not torch.equal(plain_weights[k], eval_weights[k])] == []
    assert torch.equal(plain_state[0], eval_state[0])
    assert plain_state[1] == eval_state[1]
    assert np.array_equal(plain_state[2], eval_state[2])


# One MNRL fit over a NoDuplicatesDataLoader, in a subprocess so that it can be killed:
# argv = checkpoint_path resume weights_out
SCRIPT = r"""
import csv, sys
import torch
from bertkit import InputExample, SentenceTransformer, losses
from bertkit.assets import asset_path
from bertkit.datasets import NoDuplicatesDataLoader

ckpt, resume, final = sys.argv[1:4]
lee = [(r["sentence1"], r["sentence2"], float(r["score"])) for r in csv.DictReader(open(asset_path("sts-lee")))]
docs = list(dict.fromkeys([t for r in lee for t in r[:2]]))
train = [r for r in lee if r[0] in docs[:30] and r[1] in docs[:30] and r[0] != r[1]]
cut = sorted(r[2] for r in train)[len(train) * 3 // 4]
pairs = [(a, b) for a, b, s in train if s >= cut][::5][:20]  # tests' _positive_pairs, every fifth
model = SentenceTransformer(str(asset_path("minilm")), device="cpu")
model.max_seq_length = 32
loader = NoDuplicatesDataLoader([InputExample(texts=[a, b]) for a, b in pairs], batch_size=4)
model.fit(
    [(loader, losses.MultipleNegativesRankingLoss(model))], epochs=2, warmup_steps=2,
    optimizer_params={"lr": 5e-5}, show_progress_bar=False, checkpoint_path=ckpt, checkpoint_save_steps=3,
    checkpoint_save_total_limit=2, resume_from_checkpoint=resume == "1",
)
torch.save({k: v.detach().clone() for k, v in model.training_model.state_dict().items()}, final)
"""


@pytest.mark.slow
def test_sigkill_then_resume_with_no_duplicates_loader_equals_the_uninterrupted_run(tmp_path):
    """An MNRL fit over a NoDuplicatesDataLoader (20 STS-Lee positive pairs, batches of 4, 2 epochs = 10 steps)
    killed with SIGKILL after its step-6 checkpoint (in the second epoch) and run again with
    resume_from_checkpoint=True: the same per-step losses and final weights as the run never
    interrupted, bit for bit (one thread). The loader's construction shuffles with Python's global RNG,
    unseeded in each process: fit's batches do not depend on it."""
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)

    def cmd(ckpt: Path, resume: str, final: Path) -> list[str]:
        return [sys.executable, str(script), str(ckpt), resume, str(final)]

    a, b = killed_run_resumes_exactly(cmd, tmp_path, checkpoint=6, steps=10)
    assert a.keys() == b.keys()
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
