"""bertkit pipelines against transformers' pipelines on the same real-checkpoint folders."""

import itertools

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main
from bertkit.pipelines import pipeline
from bertkit.tokenization import BertTokenizer

transformers = pytest.importorskip("transformers")

TEXTS = ["Barack Obama visited the Eiffel Tower in Paris on Tuesday.", "a gorgeous , witty , seductive movie ."]


def _save_head(cls_name, folder, **kw):
    """MiniLM with a (seeded, untrained) head, saved with its tokenizer: enough to compare."""
    import bertkit.modeling as bm

    torch.manual_seed(0)
    m = getattr(bm, cls_name).from_pretrained(str(asset_path("minilm")), **kw)
    tok = BertTokenizer.from_pretrained(str(asset_path("minilm")))
    m.save_pretrained(str(folder), tokenizer=tok)
    return folder


@pytest.fixture(scope="module")
def clf_dir(tmp_path_factory):
    return _save_head(
        "BertForSequenceClassification",
        tmp_path_factory.mktemp("clf"),
        num_labels=3,
        id2label={0: "neg", 1: "neu", 2: "pos"},
        label2id={"neg": 0, "neu": 1, "pos": 2},
    )


def test_text_classification_matches_transformers(clf_dir):
    ours = pipeline("text-classification", model=clf_dir)
    ref = transformers.pipeline("text-classification", model=str(clf_dir), device="cpu")
    a, b = ours(TEXTS), ref(TEXTS)
    assert [x["label"] for x in a] == [x["label"] for x in b]
    np.testing.assert_allclose([x["score"] for x in a], [x["score"] for x in b], atol=1e-4)
    single = ours(TEXTS[1])
    assert isinstance(single, list) and single[0]["label"] == b[1]["label"]
    every = ours(TEXTS[0], top_k=None)
    ref_every = ref(TEXTS[0], top_k=None)
    assert [x["label"] for x in every] == [x["label"] for x in ref_every]
    assert sum(x["score"] for x in every) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("fn", ["softmax", "sigmoid", "none"])
def test_text_classification_function_to_apply_matches_transformers(clf_dir, fn):
    """Each score function transformers offers gives its scores; the default stays softmax here."""
    ours = pipeline("text-classification", model=clf_dir)
    ref = transformers.pipeline("text-classification", model=str(clf_dir), device="cpu")
    a, b = ours(TEXTS, top_k=None, function_to_apply=fn), ref(TEXTS, top_k=None, function_to_apply=fn)
    for x, y in zip(a, b):
        assert [r["label"] for r in x] == [r["label"] for r in y]
        np.testing.assert_allclose([r["score"] for r in x], [r["score"] for r in y], atol=1e-4)
    # set on the pipeline, as transformers also allows
    fixed = pipeline("text-classification", model=clf_dir, function_to_apply=fn)(TEXTS[0], top_k=None)
    np.testing.assert_allclose([r["score"] for r in fixed], [r["score"] for r in b[0]], atol=1e-4)


def test_text_classification_refuses_unknown_arguments(clf_dir):
    ours = pipeline("text-classification", model=clf_dir)
    with pytest.raises(TypeError, match="top_kk"):
        ours(TEXTS[0], top_kk=2)  # a typo used to be swallowed and the default used
    with pytest.raises(ValueError, match="function_to_apply must be"):
        ours(TEXTS[0], function_to_apply="relu")
    one_by_one, together = ours(TEXTS, batch_size=1), ours(TEXTS)
    assert [r["label"] for r in one_by_one] == [r["label"] for r in together]
    np.testing.assert_allclose([r["score"] for r in one_by_one], [r["score"] for r in together], atol=1e-5)


NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _electra_head(cls_name, folder, **kw):
    """A small ELECTRA (embedding_size < hidden_size) with a head, random weights drawn by transformers
    (spread out, so predictions are not near-ties), saved with the MiniLM WordPiece tokenizer."""
    tok = BertTokenizer.from_pretrained(str(asset_path("minilm")))
    cfg = transformers.ElectraConfig(
        vocab_size=len(tok.vocab),
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        initializer_range=0.2,
        **kw,
    )
    torch.manual_seed(0)
    getattr(transformers, cls_name)(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize("family", ["bert", "electra"])
def test_ner_matches_transformers(family, tmp_path):
    labels = NER_LABELS
    kw = dict(num_labels=5, id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)})
    save = _save_head if family == "bert" else _electra_head
    d = save(f"{'Bert' if family == 'bert' else 'Electra'}ForTokenClassification", tmp_path / "ner", **kw)
    ours = pipeline("ner", model=d)(TEXTS[0])
    ref = transformers.pipeline("ner", model=str(d), device="cpu")(TEXTS[0])
    assert len(ours) == len(ref) and len(ours) > 0
    for a, b in zip(ours, ref):
        keys = ("entity", "index", "word", "start", "end")
        assert [a[k] for k in keys] == [b[k] for k in keys]
        assert a["score"] == pytest.approx(float(b["score"]), abs=1e-4)
    grouped = pipeline("ner", model=d, aggregation_strategy="simple")(TEXTS[0])
    ref_grouped = transformers.pipeline("ner", model=str(d), device="cpu", aggregation_strategy="simple")(TEXTS[0])
    assert [g["word"] for g in grouped] == [g["word"] for g in ref_grouped]  # the tokens put back together
    for g in grouped:  # spans are real character offsets of the text
        assert TEXTS[0][g["start"] : g["end"]].lower() == g["word"].removeprefix("##")
        assert g["entity_group"] in ("PER", "LOC")
    text = "Tchaikovsky met Schwarzenegger near Llanfairpwllgwyngyll and Ouagadougou."
    # sub-token groups ("simple") and the word-level strategies (one label per word), with and without
    # the O groups; these rare words split into several pieces, so the strategies give different groups
    for strategy, ignore in itertools.product(("simple", "first", "average", "max"), (["O"], [])):
        a = pipeline("ner", model=d, aggregation_strategy=strategy)(text, ignore_labels=ignore)
        b = transformers.pipeline("ner", model=str(d), device="cpu", aggregation_strategy=strategy)(
            text, ignore_labels=ignore
        )
        assert [(g["entity_group"], g["start"], g["end"]) for g in a] == [
            (g["entity_group"], g["start"], g["end"]) for g in b
        ], strategy
        np.testing.assert_allclose([g["score"] for g in a], [g["score"] for g in b], atol=1e-4)
    every = pipeline("ner", model=d)(TEXTS[0], ignore_labels=[])
    assert len(every) == len(ref_all := transformers.pipeline("ner", model=str(d), ignore_labels=[])(TEXTS[0]))
    assert [x["entity"] for x in every] == [x["entity"] for x in ref_all]


@pytest.mark.parametrize("family", ["bert", "electra"])
def test_qa_matches_transformers_best_span(family, tmp_path):
    if family == "bert":
        d = _save_head("BertForQuestionAnswering", tmp_path / "qa")
    else:
        d = _electra_head("ElectraForQuestionAnswering", tmp_path / "qa", num_labels=2)
    ctx = (
        "The Bell Rock Lighthouse stands off the coast of Angus, Scotland. It was built between 1807 "
        "and 1810 by Robert Stevenson."
    )
    q = "Who built the lighthouse?"
    ours = pipeline("question-answering", model=d)(question=q, context=ctx)
    # transformers 5 has no QA pipeline: brute-force the best context span from its model instead
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    hf = transformers.AutoModelForQuestionAnswering.from_pretrained(str(d)).eval()
    enc = tok(q, ctx, return_offsets_mapping=True, return_tensors="pt")
    offs = enc.pop("offset_mapping")[0].tolist()
    with torch.no_grad():
        out = hf(**enc)
    st, en = out.start_logits[0], out.end_logits[0]
    ctx_pos = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
    best = max(((st[i] + en[j]).item(), i, j) for i in ctx_pos for j in ctx_pos if i <= j < i + 15)
    ref = {"start": offs[best[1]][0], "end": offs[best[2]][1]}
    ref["answer"] = ctx[ref["start"] : ref["end"]]
    assert (ours["start"], ours["end"], ours["answer"]) == (ref["start"], ref["end"], ref["answer"])
    assert ctx[ours["start"] : ours["end"]] == ours["answer"]
    top3 = pipeline("question-answering", model=d)(question=q, context=ctx, top_k=3)
    assert len(top3) == 3 and top3[0]["score"] >= top3[1]["score"] >= top3[2]["score"]
    # transformers' other spellings: one dict, or a list of them
    qa = pipeline("question-answering", model=d)
    # a batch of two may take other kernels than one text: same span, scores within a float tolerance
    for got in [qa({"question": q, "context": ctx}), *qa([{"question": q, "context": ctx}] * 2)]:
        assert (got["start"], got["end"], got["answer"]) == (ours["start"], ours["end"], ours["answer"])
        assert got["score"] == pytest.approx(ours["score"], abs=1e-5)
    with pytest.raises(TypeError, match="top_kk"):
        qa(question=q, context=ctx, top_kk=2)


def test_fill_mask_matches_transformers(tmp_path, capsys):
    import bertkit.modeling as bm

    torch.manual_seed(0)
    cfg = bm.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
    )
    m = bm.BertForMaskedLM(cfg)
    m.save_pretrained(str(tmp_path / "mlm"), tokenizer=BertTokenizer.from_pretrained(str(asset_path("minilm"))))
    text = "paris is the [MASK] of france."
    ours = pipeline("fill-mask", model=tmp_path / "mlm")(text, top_k=5)
    ref = transformers.pipeline("fill-mask", model=str(tmp_path / "mlm"), device="cpu")(text, top_k=5)
    assert [r["token"] for r in ours] == [r["token"] for r in ref]
    assert [r["token_str"] for r in ours] == [r["token_str"] for r in ref]
    assert [r["sequence"] for r in ours] == [r["sequence"] for r in ref]
    np.testing.assert_allclose([r["score"] for r in ours], [r["score"] for r in ref], atol=1e-5)
    assert cli_main(["fill-mask", "--model", str(tmp_path / "mlm"), text, "--top-k", "3"]) == 0
    assert ours[0]["token_str"] in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"no \[MASK\]"):
        pipeline("fill-mask", model=tmp_path / "mlm")("no mask here")
    # targets: one word as a plain string, a list, and a word the vocabulary splits (its first piece)
    fill = pipeline("fill-mask", model=tmp_path / "mlm")
    ref_fill = transformers.pipeline("fill-mask", model=str(tmp_path / "mlm"), device="cpu")
    for targets in ("capital", ["capital", "city", "king"]):
        got, want = fill(text, targets=targets), ref_fill(text, targets=targets)
        assert [r["token_str"] for r in got] == [r["token_str"] for r in want]
        np.testing.assert_allclose([r["score"] for r in got], [r["score"] for r in want], atol=1e-5)
    with pytest.warns(UserWarning, match="first piece"):
        got = fill(text, targets=["xyzzyq"])
    assert [r["token"] for r in got] == [r["token"] for r in ref_fill(text, targets=["xyzzyq"])]


def test_sentence_embedding_mean_pooling_matches_transformers():
    emb = pipeline("sentence-embedding", model=asset_path("minilm"))
    ours = np.array(emb(TEXTS))
    tok = transformers.AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    hf = transformers.AutoModel.from_pretrained(str(asset_path("minilm"))).eval()
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = hf(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).float()
    ref = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()
    np.testing.assert_allclose(ours, ref, atol=1e-4)
    feats = pipeline("feature-extraction", model=asset_path("minilm"))(TEXTS[1])
    assert np.array(feats).shape == (1, int(enc["attention_mask"][1].sum()), 384)
    with pytest.raises(ValueError, match="unknown pipeline task"):
        pipeline("summarization", model=asset_path("minilm"))


def test_sentence_transformers_folders_pool_as_saved_or_are_refused(tmp_path):
    """sentence-transformers now writes its pooling as ``pooling_mode`` (bertkit read only the older
    booleans, so a CLS-pooled folder got mean pooling); a Dense projection is followed, and a pooling
    bertkit did not follow (several modes at once) was ignored, giving other vectors: it is now followed,
    and a mode it does not know is refused."""
    st = pytest.importorskip("sentence_transformers")
    base = st.SentenceTransformer(str(asset_path("minilm")), device="cpu")
    texts = ["A gorgeous, witty film.", "dull"]
    cls_dir = tmp_path / "cls"
    st.SentenceTransformer(modules=[base[0], st.models.Pooling(384, pooling_mode="cls"), base[2]]).save(str(cls_dir))
    want = st.SentenceTransformer(str(cls_dir), device="cpu").encode(texts)
    got = np.asarray(pipeline("sentence-embedding", model=cls_dir, dtype="fp32")(texts))
    np.testing.assert_allclose(got, want, atol=1e-5)
    torch.manual_seed(0)
    dense = st.models.Dense(384, 128, activation_function=torch.nn.Tanh())
    st.SentenceTransformer(modules=[base[0], base[1], dense]).save(str(tmp_path / "dense"))
    # a Dense projection is now computed (tests/test_st_modules.py), after the pooling
    want = st.SentenceTransformer(str(tmp_path / "dense"), device="cpu").encode(texts)
    got = np.asarray(pipeline("sentence-embedding", model=tmp_path / "dense", dtype="fp32")(texts))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert pipeline("feature-extraction", model=tmp_path / "dense") is not None  # token vectors need no pooling
    both = st.models.Pooling(384, pooling_mode=("mean", "max"))
    st.SentenceTransformer(modules=[base[0], both]).save(str(tmp_path / "both"))
    want = st.SentenceTransformer(str(tmp_path / "both"), device="cpu").encode(texts)
    got = np.asarray(pipeline("sentence-embedding", model=tmp_path / "both", dtype="fp32")(texts))
    assert got.shape == want.shape == (2, 768)
    np.testing.assert_allclose(got, want, atol=1e-5)
    config = tmp_path / "both" / "1_Pooling" / "config.json"
    config.write_text(config.read_text().replace('"max"', '"median"'))
    with pytest.raises(ValueError, match="pooling is mean \\+ median"):
        pipeline("sentence-embedding", model=tmp_path / "both")
    with pytest.raises(ValueError, match="or several joined by '\\+' \\(e.g. 'cls\\+mean'\\), got 'cls\\+'"):
        pipeline("sentence-embedding", model=asset_path("minilm"), pooling="cls+")
