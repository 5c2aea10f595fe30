"""sentence-transformers' classic v2 example scripts, ported to bertkit by changing only the import line and the
data loading, as a user ports them: ``training_stsbenchmark.py`` (CosineSimilarityLoss), ``training_nli.py``
(SoftmaxLoss on labelled pairs), MultipleNegativesRankingLoss on (anchor, positive) pairs and the cross-encoder
``training_stsbenchmark.py`` (``CrossEncoder(..., num_labels=1)`` with CECorrelationEvaluator). Each script body
below is the example's own calls; the data are STS-Lee pairs (scores already in [0, 1], so no ``/ 5.0``) and, as
a stand-in for NLI's labelled pairs, polarity sentences paired by label (same polarity / different polarity:
2 labels where NLI has 3). Each runs a few steps on tiny data, then the saved folder is loaded in
sentence-transformers, which must give bertkit's vectors or scores, and the evaluators' results must have
sentence-transformers' keys and values on that loaded model.

The v2 scripts build the bi-encoder from ``models.Transformer`` + ``models.Pooling`` modules
(``SentenceTransformer(modules=[...])``), and so do the ports, unchanged, from ``bertkit.models``."""

import csv
import math
import random
import shutil

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

# ---- the ported import lines (sentence_transformers -> bertkit) -------------------------------------
from bertkit import CrossEncoder, InputExample, SentenceTransformer, losses, models, util
from bertkit.assets import asset_path
from bertkit.evaluation import CECorrelationEvaluator, CrossEncoderCorrelationEvaluator, EmbeddingSimilarityEvaluator

st = pytest.importorskip("sentence_transformers")
from sentence_transformers import util as st_util  # noqa: E402
from sentence_transformers.cross_encoder import evaluation as st_ce_eval  # noqa: E402
from sentence_transformers.sentence_transformer import evaluation as st_eval  # noqa: E402

MAX_LEN = 32
PROBE = ["The storm knocked out power across the city.", "Stocks fell sharply on Monday.", "A quiet film."]


@pytest.fixture(scope="module")
def plain_bert(tmp_path_factory):
    """MiniLM's weights as a plain BERT folder (no sentence-transformers files, no classifier): what the v2
    scripts' ``model_name`` ("bert-base-uncased", "distilroberta-base") is."""
    src = asset_path("minilm")
    dst = tmp_path_factory.mktemp("plain") / "minilm-plain"
    dst.mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    return str(dst)


@pytest.fixture(scope="module")
def sts():
    """STS-Lee as the scripts' train/dev/test InputExamples (documents cut to their first words)."""
    rows = list(csv.DictReader(open(asset_path("sts-lee"), encoding="utf-8")))
    random.Random(0).shuffle(rows)

    def ex(r):
        cut = lambda s: " ".join(s.split()[:24])  # noqa: E731
        return InputExample(texts=[cut(r["sentence1"]), cut(r["sentence2"])], label=float(r["score"]))

    return [ex(r) for r in rows[:32]], [ex(r) for r in rows[32:48]], [ex(r) for r in rows[48:64]]


@pytest.fixture(scope="module")
def polarity_pairs():
    """NLI stand-in: two polarity sentences, label 1 when they share a polarity, else 0."""
    rows = [
        (r["label"], " ".join(r["text"].split()[:24]))
        for r in csv.DictReader(open(asset_path("polarity-train"), encoding="utf-8"))
    ]
    random.Random(1).shuffle(rows)
    rows = rows[:64]
    return [
        InputExample(texts=[a[1], b[1]], label=int(a[0] == b[0])) for a, b in zip(rows[0::2], rows[1::2], strict=True)
    ]


def _same_vectors(folder, ours):
    """The saved folder, loaded in sentence-transformers, embeds as bertkit's loaded model does."""
    ref = st.SentenceTransformer(folder, device="cpu")
    assert ref.max_seq_length == ours.max_seq_length
    a, b = ours.encode(PROBE), ref.encode(PROBE)
    np.testing.assert_allclose(a, b, atol=1e-4)
    torch.testing.assert_close(util.cos_sim(a, a), st_util.cos_sim(b, b), atol=1e-4, rtol=0)
    return ref


def _same_sts_results(ours_results, ref_model, test_samples, name):
    ref_ev = st_eval.EmbeddingSimilarityEvaluator(
        [e.texts[0] for e in test_samples],
        [e.texts[1] for e in test_samples],
        [e.label for e in test_samples],
        name=name,
    )
    ref_results = ref_ev(ref_model)
    assert set(ours_results) == set(ref_results)
    for k, v in ref_results.items():
        assert ours_results[k] == pytest.approx(v, abs=1e-4), k


# ---- training_stsbenchmark.py (bi-encoder, CosineSimilarityLoss) -------------------------------------------
def training_stsbenchmark(model_name, model_save_path, train_samples, dev_samples, test_samples):
    train_batch_size = 8
    num_epochs = 1
    word_embedding_model = models.Transformer(model_name)
    pooling_model = models.Pooling(
        word_embedding_model.get_word_embedding_dimension(),
        pooling_mode_mean_tokens=True,
        pooling_mode_cls_token=False,
        pooling_mode_max_tokens=False,
    )
    model = SentenceTransformer(modules=[word_embedding_model, pooling_model], device="cpu")
    model.max_seq_length = MAX_LEN
    train_dataloader = DataLoader(train_samples, shuffle=True, batch_size=train_batch_size)
    train_loss = losses.CosineSimilarityLoss(model=model)
    evaluator = EmbeddingSimilarityEvaluator.from_input_examples(dev_samples, name="sts-dev")
    warmup_steps = math.ceil(len(train_dataloader) * num_epochs * 0.1)
    model.fit(
        train_objectives=[(train_dataloader, train_loss)],
        evaluator=evaluator,
        epochs=num_epochs,
        evaluation_steps=1000,
        warmup_steps=warmup_steps,
        output_path=model_save_path,
    )
    model = SentenceTransformer(model_save_path, device="cpu")
    test_evaluator = EmbeddingSimilarityEvaluator.from_input_examples(
        test_samples, batch_size=train_batch_size, name="sts-test"
    )
    return model, test_evaluator(model, output_path=model_save_path)


def test_training_stsbenchmark_runs_unchanged(plain_bert, sts, tmp_path):
    train, dev, test = sts
    torch.manual_seed(0)
    out = str(tmp_path / "training_stsbenchmark")
    model, results = training_stsbenchmark(plain_bert, out, train, dev, test)
    ref = _same_vectors(out, model)
    _same_sts_results(results, ref, test, "sts-test")
    assert "sts-test_spearman_cosine" in results
    # training moved the weights: the saved model does not embed as the untouched folder does
    before = st.SentenceTransformer(plain_bert, device="cpu").encode(PROBE)
    assert np.abs(before - model.encode(PROBE)).max() > 1e-3


def test_v2_module_construction_embeds_as_sentence_transformers(plain_bert):
    """The scripts' ``SentenceTransformer(modules=[Transformer, Pooling])`` on a plain BERT folder: bertkit's
    model embeds as sentence-transformers' built from its own modules; no model at all is refused by name."""
    ours = SentenceTransformer(
        modules=[models.Transformer(plain_bert), models.Pooling(384, pooling_mode_mean_tokens=True)], device="cpu"
    )
    ref = st.SentenceTransformer(
        modules=[st.models.Transformer(plain_bert), st.models.Pooling(384, pooling_mode="mean")], device="cpu"
    )
    assert ours.max_seq_length == ref.max_seq_length
    np.testing.assert_allclose(ours.encode(PROBE), ref.encode(PROBE), atol=1e-5)
    with pytest.raises(ValueError, match="model_name_or_path is required"):
        SentenceTransformer()


# ---- training_nli.py (SoftmaxLoss on labelled pairs; polarity pairs stand in for NLI) ----------------------
def training_nli(model_name, model_save_path, train_samples, dev_samples):
    train_batch_size = 8
    num_epochs = 1
    label2int = {"different": 0, "same": 1}
    word_embedding_model = models.Transformer(model_name)
    pooling_model = models.Pooling(
        word_embedding_model.get_word_embedding_dimension(),
        pooling_mode_mean_tokens=True,
        pooling_mode_cls_token=False,
        pooling_mode_max_tokens=False,
    )
    model = SentenceTransformer(modules=[word_embedding_model, pooling_model], device="cpu")
    model.max_seq_length = MAX_LEN
    train_dataloader = DataLoader(train_samples, shuffle=True, batch_size=train_batch_size)
    train_loss = losses.SoftmaxLoss(
        model=model, sentence_embedding_dimension=model.get_sentence_embedding_dimension(), num_labels=len(label2int)
    )
    dev_evaluator = EmbeddingSimilarityEvaluator.from_input_examples(
        dev_samples, batch_size=train_batch_size, name="sts-dev"
    )
    warmup_steps = math.ceil(len(train_dataloader) * num_epochs * 0.1)
    model.fit(
        train_objectives=[(train_dataloader, train_loss)],
        evaluator=dev_evaluator,
        epochs=num_epochs,
        evaluation_steps=1000,
        warmup_steps=warmup_steps,
        output_path=model_save_path,
    )
    return SentenceTransformer(model_save_path, device="cpu"), dev_evaluator


def test_training_nli_softmax_runs_unchanged(plain_bert, sts, polarity_pairs, tmp_path):
    _, dev, _ = sts
    torch.manual_seed(0)
    out = str(tmp_path / "training_nli")
    model, dev_evaluator = training_nli(plain_bert, out, polarity_pairs[:24], dev)
    ref = _same_vectors(out, model)
    _same_sts_results(dev_evaluator(model), ref, dev, "sts-dev")


# ---- MultipleNegativesRankingLoss on (anchor, positive) pairs ---------------------------------------------
def training_mnrl(model_name, model_save_path, train_samples, dev_samples):
    train_batch_size = 8
    num_epochs = 1
    model = SentenceTransformer(model_name, device="cpu")
    model.max_seq_length = MAX_LEN
    train_dataloader = DataLoader(train_samples, shuffle=True, batch_size=train_batch_size, drop_last=True)
    train_loss = losses.MultipleNegativesRankingLoss(model)
    dev_evaluator = EmbeddingSimilarityEvaluator.from_input_examples(
        dev_samples, batch_size=train_batch_size, name="sts-dev"
    )
    warmup_steps = math.ceil(len(train_dataloader) * num_epochs * 0.1)
    model.fit(
        train_objectives=[(train_dataloader, train_loss)],
        evaluator=dev_evaluator,
        epochs=num_epochs,
        evaluation_steps=int(len(train_dataloader) * 0.1),
        warmup_steps=warmup_steps,
        output_path=model_save_path,
        use_amp=False,
    )
    model = SentenceTransformer(model_save_path, device="cpu")
    emb = model.encode([e.texts[0] for e in dev_samples], convert_to_tensor=True)
    emb2 = model.encode([e.texts[1] for e in dev_samples], convert_to_tensor=True)
    return model, util.cos_sim(emb, emb2)


def test_training_mnrl_runs_unchanged(sts, tmp_path):
    train, dev, _ = sts
    pairs = [InputExample(texts=e.texts) for e in train]  # (anchor, positive), no label
    torch.manual_seed(0)
    out = str(tmp_path / "training_mnrl")
    model, sims = training_mnrl(str(asset_path("minilm")), out, pairs, dev)
    ref = _same_vectors(out, model)
    a = ref.encode([e.texts[0] for e in dev], convert_to_tensor=True)
    b = ref.encode([e.texts[1] for e in dev], convert_to_tensor=True)
    assert sims.shape == (len(dev), len(dev))
    torch.testing.assert_close(sims, st_util.cos_sim(a, b), atol=1e-4, rtol=0)


# ---- cross_encoder training_stsbenchmark.py ---------------------------------------------------------------
def training_cross_encoder_stsbenchmark(model_name, model_save_path, train_samples, dev_samples, test_samples):
    train_batch_size = 8
    num_epochs = 1
    model = CrossEncoder(model_name, num_labels=1, max_length=MAX_LEN, device="cpu")
    train_dataloader = DataLoader(train_samples, shuffle=True, batch_size=train_batch_size)
    evaluator = CECorrelationEvaluator.from_input_examples(dev_samples, name="sts-dev")
    warmup_steps = math.ceil(len(train_dataloader) * num_epochs * 0.1)
    model.fit(
        train_dataloader=train_dataloader,
        evaluator=evaluator,
        epochs=num_epochs,
        warmup_steps=warmup_steps,
        output_path=model_save_path,
    )
    model = CrossEncoder(model_save_path, device="cpu")
    evaluator = CECorrelationEvaluator.from_input_examples(test_samples, name="sts-test")
    return model, evaluator(model)


def test_cross_encoder_from_plain_bert_gets_a_fresh_one_label_head(plain_bert):
    """As sentence-transformers: a folder with no classifier gets a new head of num_labels (1 when not given)."""
    for num_labels in (1, None, 3):
        ref = st.CrossEncoder(plain_bert, num_labels=num_labels, device="cpu")
        ours = CrossEncoder(plain_bert, num_labels=num_labels, device="cpu")
        assert ours.num_labels == ref.num_labels == (num_labels or 1)
        scores = ours.predict([("a storm", "the weather"), ("stocks", "a film")])
        assert scores.shape == ((2,) if ours.num_labels == 1 else (2, ours.num_labels))


def test_fresh_head_is_the_one_fit_trains_and_save_writes(plain_bert, sts, tmp_path):
    """fit() starts from the head predict() scored with (lr=1e-12 leaves the scores as they were), and save()
    writes it: sentence-transformers scores the saved folder as bertkit does."""
    train, _, test = sts
    pairs = [e.texts for e in test]
    torch.manual_seed(3)
    model = CrossEncoder(plain_bert, num_labels=1, max_length=MAX_LEN, device="cpu")
    before = model.predict(pairs)
    assert before.std() > 0
    model.fit(train_dataloader=DataLoader(train[:8], batch_size=4), epochs=1, optimizer_params={"lr": 1e-12})
    np.testing.assert_allclose(model.predict(pairs), before, atol=1e-5)
    model.save(str(tmp_path / "fresh"))
    np.testing.assert_allclose(st.CrossEncoder(str(tmp_path / "fresh"), device="cpu").predict(pairs), before, atol=1e-4)


def test_cross_encoder_training_stsbenchmark_runs_unchanged(plain_bert, sts, tmp_path):
    train, dev, test = sts
    # the v2 script adds each pair both ways
    train = train[:24] + [InputExample(texts=e.texts[::-1], label=e.label) for e in train[:24]]
    torch.manual_seed(0)
    out = str(tmp_path / "ce_training_stsbenchmark")
    model, results = training_cross_encoder_stsbenchmark(plain_bert, out, train, dev, test)

    ref = st.CrossEncoder(out, device="cpu")
    assert ref.num_labels == model.num_labels == 1
    pairs = [e.texts for e in test]
    np.testing.assert_allclose(model.predict(pairs), ref.predict(pairs), atol=1e-4)
    ref_results = st_ce_eval.CrossEncoderCorrelationEvaluator(pairs, [e.label for e in test], name="sts-test")(ref)
    assert set(results) == set(ref_results) == {"sts-test_pearson", "sts-test_spearman"}
    for k, v in ref_results.items():
        assert results[k] == pytest.approx(v, abs=1e-4), k
    # the v2 name is sentence-transformers' renamed class
    assert issubclass(CECorrelationEvaluator, CrossEncoderCorrelationEvaluator)
