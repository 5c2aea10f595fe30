"""The batched path cuts an output back to each text's own length only where it holds a value per
token: a text's logits or vector is never cut, even when it is exactly as wide as the padded batch
is long (a 4-label head on a batch padded to 4 tokens, a 32-wide vector on a batch of 32 tokens)."""

import numpy as np
import pytest
import torch

import bertkit
from bertkit.assets import asset_path
from bertkit.modeling.sentence import save_sentence_folder
from bertkit.pipelines import pipeline

transformers = pytest.importorskip("transformers")
st = pytest.importorskip("sentence_transformers")


def _tiny(tmp_path, cls, **kw):
    tok = bertkit.BertTokenizer.from_pretrained(asset_path("minilm"))
    torch.manual_seed(0)
    config = bertkit.BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        **kw,
    )
    cls(config).save_pretrained(tmp_path, tokenizer=tok)
    return tmp_path, tok


def test_a_head_as_wide_as_the_batch_is_long(tmp_path):
    folder, tok = _tiny(tmp_path, bertkit.BertForSequenceClassification, num_labels=4)
    texts = ["north", "north south"]
    assert max(len(tok(t)["input_ids"]) for t in texts) == 4  # the padded batch is 4 tokens long
    ours = pipeline("text-classification", model=folder, top_k=None)(texts)
    theirs = transformers.pipeline("text-classification", model=str(folder), top_k=None, device="cpu")(texts)
    for a, b in zip(ours, theirs):
        assert len(a) == len(b) == 4
        got = {d["label"]: d["score"] for d in a}
        np.testing.assert_allclose([got[d["label"]] for d in b], [d["score"] for d in b], atol=1e-5)


def test_a_vector_as_wide_as_the_batch_is_long(tmp_path):
    folder, tok = _tiny(tmp_path, bertkit.BertModel)
    save_sentence_folder(folder, 32, "mean", True, 128)
    # one text of exactly 32 tokens sets the batch's length; the others are shorter
    words = "the film is a quiet and patient study of grief and memory".split()
    long_text = " ".join((words * 4)[:30])
    assert len(tok(long_text)["input_ids"]) == 32
    texts = [long_text, "a short one", "another rather short review of it"]
    ours = np.asarray(pipeline("sentence-embedding", model=folder)(texts))
    assert ours.shape == (3, 32)
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(texts)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    np.testing.assert_allclose(bertkit.SentenceTransformer(folder).encode(texts), theirs, atol=1e-5)
