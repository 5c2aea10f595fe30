"""``CrossEncoder.fit`` (sentence-transformers' cross-encoder training call) on bertkit, checked against
sentence-transformers (its own fit cannot run without `datasets`): the first fit steps equal
hand-written AdamW steps of sentence-transformers' losses on its CrossEncoder loaded from the same
folder, a short fit on STS-Lee raises sentence-transformers' own Spearman on held-out documents and
saves a folder sentence-transformers scores as bertkit does, and bad input is refused by name."""

import numpy as np
import pytest
import torch
from conftest import (  # noqa: E402
    seeded_head_folder,  # noqa: E402
    sentence_transformers_adamw,
    without_dropout,
)
from test_sentence_transformer_fit import _split_by_document  # noqa: E402  (held-out documents)
from torch.utils.data import DataLoader

from bertkit import CrossEncoder, InputExample

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.cross_encoder import losses as cel  # noqa: E402
from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator  # noqa: E402

LENGTH = 32  # tokens per pair in the step check: the documents' first words, seconds on 2 cores


def _label(score: float, num_labels: int):
    return score if num_labels == 1 else min(int(score * num_labels), num_labels - 1)


@pytest.mark.parametrize("num_labels", [1, 3])
def test_first_steps_equal_hand_written_adamw_steps(lee, tmp_path, num_labels):
    """Two fit steps (batches in order, no warmup: the rate at step 1 is lr, at step 2 lr/2) equal two
    hand-written steps on sentence-transformers' CrossEncoder: its BinaryCrossEntropyLoss (1 label,
    float scores) or CrossEntropyLoss (3 labels, class ids), torch's AdamW over its two parameter
    groups (weight decay 0.01, none on biases and LayerNorm), clipping to norm 1. Each parameter's
    change agrees within 2e-3 of its norm (fp32 rounding, which AdamW's division amplifies), and
    predict() afterwards gives sentence-transformers' scores of its stepped model."""
    seeded_head_folder(tmp_path / "head", num_labels, seed=num_labels)
    folder = without_dropout(tmp_path / "head")
    rows = lee[::23][:16]
    lr = 5e-5

    ref = st.CrossEncoder(folder, device="cpu", max_length=LENGTH)
    ours = CrossEncoder(folder, device="cpu", max_length=LENGTH)
    probe = [(r[0], r[1]) for r in lee[1::41][:8]]
    before = ours.predict(probe)
    np.testing.assert_allclose(before, ref.predict(probe), atol=1e-5)

    ref.train()
    start = {n: p.detach().clone() for n, p in ref.named_parameters()}
    opt = sentence_transformers_adamw(ref.named_parameters(), lr)
    ref_loss = cel.BinaryCrossEntropyLoss(ref) if num_labels == 1 else cel.CrossEntropyLoss(ref)
    for i, factor in enumerate((1.0, 0.5)):
        batch = rows[8 * i : 8 * i + 8]
        for g in opt.param_groups:
            g["lr"] = lr * factor
        labels = torch.tensor([_label(r[2], num_labels) for r in batch])
        loss = ref_loss([[r[0] for r in batch], [r[1] for r in batch]], labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
    ref.eval()

    examples = [InputExample(texts=[a, b], label=_label(s, num_labels)) for a, b, s in rows]
    # the pairs are cut where sentence-transformers cuts them: both sides see the same tokens
    ours_ids = ours.smart_batching_collate(examples[:8])[0]["input_ids"]
    assert ours_ids.shape[1] == LENGTH
    assert torch.equal(ours_ids, ref.preprocess([(a, b) for a, b, _ in rows[:8]])["input_ids"])
    ours.fit(
        DataLoader(examples, shuffle=False, batch_size=8),
        warmup_steps=0,
        optimizer_params={"lr": lr},
        show_progress_bar=False,
    )
    got = dict(ours.training_model.named_parameters())
    matched = 0
    for name, p in ref.named_parameters():
        ours_name = next(k for k in got if name.endswith("." + k))
        if ours_name.endswith("attention.self.key.bias"):
            # shifts every score of a query alike, which softmax ignores: its gradient is zero in exact
            # arithmetic, and AdamW scales either side's rounding noise up to a full step
            continue
        want_delta = p.detach() - start[name]
        got_delta = got[ours_name].detach() - start[name]
        assert float(want_delta.norm()) > 0, name
        err = float((got_delta - want_delta).norm()) / float(want_delta.norm())
        assert err < 2e-3, (name, err)
        matched += 1
    assert matched >= len(got) - 6, (matched, len(got))  # every parameter but the six key biases
    after = ours.predict(probe)
    assert np.abs(after - before).max() > 1e-4  # predict() took the trained weights
    np.testing.assert_allclose(after, ref.predict(probe), atol=1e-5)


def test_fit_improves_held_out_spearman_and_saves_a_folder_sentence_transformers_scores_alike(lee, tmp_path, capfd):
    """BCE on STS-Lee pairs of 30 documents (scores scaled to 0..1) raises sentence-transformers' own
    Spearman (CrossEncoderCorrelationEvaluator) on pairs of the other 20; the evaluator's result is
    passed to the callback and saved into output_path, whose folder sentence-transformers loads and
    scores as bertkit's model in memory does."""
    folder = seeded_head_folder(tmp_path / "head", 1, seed=0)
    train, held = _split_by_document(lee)
    evaluator = CrossEncoderCorrelationEvaluator([(r[0], r[1]) for r in held], [r[2] for r in held], name="lee-held")
    before = evaluator(st.CrossEncoder(folder, device="cpu", max_length=64))[evaluator.primary_metric]

    lo, hi = min(r[2] for r in train), max(r[2] for r in train)
    examples = [InputExample(texts=[a, b], label=(s - lo) / (hi - lo)) for a, b, s in train]
    model = CrossEncoder(folder, device="cpu", max_length=64)
    reported = []
    out = tmp_path / "out"
    model.fit(
        DataLoader(examples, shuffle=True, batch_size=16),
        evaluator=evaluator,
        epochs=1,
        warmup_steps=5,
        optimizer_params={"lr": 3e-4},
        output_path=str(out),
        callback=lambda score, epoch, steps: reported.append((score, epoch, steps)),
    )
    # once, at the epoch's end: 435 pairs are 27 full batches and one of 3
    assert [(e, s) for _, e, s in reported] == [(1.0, 28)], reported
    assert "fit" in capfd.readouterr().err  # the progress bar
    assert (out / "eval" / "CrossEncoderCorrelationEvaluator_lee-held_results.csv").is_file()

    loaded = st.CrossEncoder(str(out), device="cpu")
    assert loaded.max_seq_length == 64 and loaded.num_labels == 1
    after = evaluator(loaded)[evaluator.primary_metric]
    assert after == pytest.approx(reported[0][0], abs=1e-4)
    assert after > before + 0.05, (before, after)

    pairs = [(r[0], r[1]) for r in held[:24]]
    want = loaded.predict(pairs)
    assert np.ptp(want) > 0.05
    np.testing.assert_allclose(model.predict(pairs), want, atol=1e-5)


def test_fit_refuses_bad_input_by_name(lee, tmp_path):
    one = CrossEncoder(seeded_head_folder(tmp_path / "one", 1, seed=0), device="cpu")
    three = CrossEncoder(seeded_head_folder(tmp_path / "three", 3, seed=1), device="cpu")
    pairs = [InputExample(texts=[a, b], label=s) for a, b, s in lee[:4]]
    loader = DataLoader(pairs, batch_size=2)

    def fit(model, examples, **kw):
        model.fit(DataLoader(examples, batch_size=2), show_progress_bar=False, **kw)

    with pytest.raises(ValueError, match=r"train_dataloader holds no examples"):
        fit(one, [])
    with pytest.raises(ValueError, match=r"example 1 has 3 texts; a cross-encoder trains on \(text, text\) pairs"):
        fit(one, [pairs[0], InputExample(texts=["a", "b", "c"], label=1.0)])
    with pytest.raises(ValueError, match=r"example 0's label 1.5 is outside 0..1"):
        fit(one, [InputExample(texts=["a", "b"], label=1.5)])
    with pytest.raises(ValueError, match=r"example 0's label 'high' is not a number"):
        fit(one, [InputExample(texts=["a", "b"], label="high")])
    with pytest.raises(ValueError, match=r"example 1's label 3 is not a class id 0..2 of this 3-label head"):
        fit(three, [InputExample(texts=["a", "b"], label=0), InputExample(texts=["a", "b"], label=3)])
    with pytest.raises(ValueError, match=r"example 0's label 0.5 is not a class id"):
        fit(three, [InputExample(texts=["a", "b"], label=0.5)])
    with pytest.raises(ValueError, match=r"epochs must be an integer of at least 1, got 0"):
        one.fit(loader, epochs=0)
    with pytest.raises(ValueError, match=r"scheduler 'WarmupExp' is not one of"):
        one.fit(loader, scheduler="WarmupExp")
    with pytest.raises(ValueError, match=r"evaluation_steps=5 needs an evaluator"):
        one.fit(loader, evaluation_steps=5)
    with pytest.raises(TypeError, match=r"loss_fct must be callable"):
        one.fit(loader, loss_fct="bce")
    with pytest.raises(TypeError, match=r"train_dataloader must be a DataLoader over a list of InputExamples"):
        one.fit(pairs)
    from bertkit.datasets import NoDuplicatesDataLoader

    with pytest.raises(TypeError, match=r"got NoDuplicatesDataLoader \(no-duplicates batches are for a bi-encoder"):
        one.fit(NoDuplicatesDataLoader(pairs, batch_size=2), show_progress_bar=False)
    # a label outside 0..1 is the caller's choice with a loss of their own
    fit(one, [InputExample(texts=["a", "b"], label=4.0)] * 2, loss_fct=torch.nn.MSELoss(), warmup_steps=0)
    # a bf16 model's weights are rounded: training it is refused, not silently done in fp32
    bf16 = CrossEncoder(str(tmp_path / "one"), device="cpu", dtype="bf16")
    with pytest.raises(ValueError, match=r"this model computes in bf16; load it with dtype='fp32'"):
        bf16.fit(loader, show_progress_bar=False)
