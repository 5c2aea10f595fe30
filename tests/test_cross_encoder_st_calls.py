"""`from bertkit import CrossEncoder` answers sentence-transformers' CrossEncoder calls with its numbers.

Two real cross-encoder folders are built from the MiniLM checkpoint (a seeded 1-label reranking head
and a seeded 3-label head, saved by bertkit's save_pretrained) and scored on real BBC and polarity
text by both libraries. Scores are fp32 on the CPU and must agree within ATOL.
"""

import csv
import json
import re
import shutil
import warnings

import numpy as np
import pytest
import torch
from conftest import seeded_head_folder  # noqa: E402

from bertkit.assets import asset_path

st = pytest.importorskip("sentence_transformers")

MINILM = str(asset_path("minilm"))
ATOL = 1e-5


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    d = tmp_path_factory.mktemp("cross-encoders")
    return {1: seeded_head_folder(d / "one", 1, seed=0), 3: seeded_head_folder(d / "three", 3, seed=1)}


@pytest.fixture(scope="module")
def models(folders):
    """(bertkit, sentence-transformers) CrossEncoders over each folder."""
    from bertkit import CrossEncoder

    return {n: (CrossEncoder(f), st.CrossEncoder(f, device="cpu")) for n, f in folders.items()}


@pytest.fixture(scope="module")
def pairs():
    """Query = a BBC article's first sentence, passage = its next sentences or another article's;
    plus polarity sentences paired with each other (short and long pairs mixed, unsorted)."""
    articles = []
    for line in open(asset_path("bbcnews-test"), encoding="utf-8"):
        s = [x for x in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(x) > 20]
        if len(s) >= 4:
            articles.append((s[0], " ".join(s[1:4])))
        if len(articles) == 20:
            break
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        reviews = [row["text"] for row, _ in zip(csv.DictReader(f), range(20))]
    out = [(q, p) for q, p in articles]
    out += [(articles[i][0], articles[(i + 5) % 20][1]) for i in range(10)]
    out += [(reviews[i], reviews[i + 10]) for i in range(10)]
    return out


def test_predict_one_label_equals_sentence_transformers(models, pairs):
    ours, ref = models[1]
    assert type(ours.activation_fn) is type(ref.activation_fn) is torch.nn.Sigmoid
    got, want = ours.predict(pairs), ref.predict(pairs)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == want.shape == (len(pairs),)
    np.testing.assert_allclose(got, want, atol=ATOL)
    assert np.ptp(want) > 0.2  # the seeded head spreads the scores: equal scores mean equal work
    one = ours.predict(pairs[3])
    assert isinstance(one, np.float32) and one.shape == ()
    assert one == pytest.approx(float(ref.predict(pairs[3])), abs=ATOL)
    np.testing.assert_allclose(ours.predict([pairs[3]]), ref.predict([pairs[3]]), atol=ATOL)
    raw, ref_raw = (
        ours.predict(pairs, activation_fn=torch.nn.Identity()),
        ref.predict(pairs, activation_fn=torch.nn.Identity()),
    )
    np.testing.assert_allclose(raw, ref_raw, atol=ATOL)
    assert (raw < 0).any() and (raw > 1).any()  # logits, not probabilities
    # a one-label head has nothing to normalise across
    np.testing.assert_allclose(ours.predict(pairs, apply_softmax=True), want, atol=ATOL)


def test_predict_three_labels_equals_sentence_transformers(models, pairs):
    ours, ref = models[3]
    assert type(ours.activation_fn) is type(ref.activation_fn) is torch.nn.Identity
    got, want = ours.predict(pairs, batch_size=7), ref.predict(pairs, batch_size=7)
    assert got.shape == want.shape == (len(pairs), 3)
    np.testing.assert_allclose(got, want, atol=ATOL)
    soft = ours.predict(pairs, apply_softmax=True)
    np.testing.assert_allclose(soft, ref.predict(pairs, apply_softmax=True), atol=ATOL)
    np.testing.assert_allclose(soft.sum(axis=1), 1.0, atol=1e-6)
    one = ours.predict(pairs[0])
    assert one.shape == (3,)
    np.testing.assert_allclose(one, ref.predict(pairs[0]), atol=ATOL)
    sig = ours.predict(pairs[:5], activation_fn=torch.nn.Sigmoid())
    np.testing.assert_allclose(sig, ref.predict(pairs[:5], activation_fn=torch.nn.Sigmoid()), atol=ATOL)


def test_a_head_as_wide_as_the_batch_is_long(tmp_path):
    """Five labels and a batch padded to five tokens: each pair keeps all five scores (the batched path
    cuts rows as long as the batch back to each pair's tokens, which must not touch a head's scores)."""
    from bertkit import CrossEncoder

    folder = seeded_head_folder(tmp_path / "five", 5, seed=2)
    batch = [("", ""), ("north", "south"), ("", "east")]  # 3, 5 and 4 tokens
    got = CrossEncoder(folder).predict(batch)
    assert got.shape == (3, 5)
    np.testing.assert_allclose(got, st.CrossEncoder(folder, device="cpu").predict(batch), atol=ATOL)


@pytest.mark.parametrize("labels", [1, 3])
def test_output_types_and_shapes_as_sentence_transformers(models, pairs, labels):
    ours, ref = models[labels]
    many, one = pairs[:6], pairs[0]
    t, rt = ours.predict(many, convert_to_tensor=True), ref.predict(many, convert_to_tensor=True)
    assert isinstance(t, torch.Tensor) and t.shape == rt.shape and t.dtype == rt.dtype == torch.float32
    torch.testing.assert_close(t, rt, atol=ATOL, rtol=0)
    t1, rt1 = ours.predict(one, convert_to_tensor=True), ref.predict(one, convert_to_tensor=True)
    assert isinstance(t1, torch.Tensor) and t1.shape == rt1.shape
    torch.testing.assert_close(t1, rt1, atol=ATOL, rtol=0)
    lst, rlst = ours.predict(many, convert_to_numpy=False), ref.predict(many, convert_to_numpy=False)
    assert isinstance(lst, list) and len(lst) == len(rlst) == 6
    assert all(isinstance(x, torch.Tensor) and x.shape == y.shape for x, y in zip(lst, rlst))
    torch.testing.assert_close(torch.stack(lst), torch.stack(rlst), atol=ATOL, rtol=0)
    single = ours.predict(one, convert_to_numpy=False)
    assert isinstance(single, torch.Tensor) and single.shape == ref.predict(one, convert_to_numpy=False).shape
    # convert_to_tensor wins over convert_to_numpy, as in sentence-transformers
    assert isinstance(ours.predict(many, convert_to_numpy=True, convert_to_tensor=True), torch.Tensor)


def test_rank_equals_sentence_transformers(models, pairs):
    ours, ref = models[1]
    query = pairs[4][0]
    docs = [p for _, p in pairs[:12]]
    got, want = ours.rank(query, docs), ref.rank(query, docs)
    assert [r["corpus_id"] for r in got] == [r["corpus_id"] for r in want]
    assert all(set(r) == {"corpus_id", "score"} and isinstance(r["score"], float) for r in got)
    np.testing.assert_allclose([r["score"] for r in got], [r["score"] for r in want], atol=ATOL)
    assert [r["score"] for r in got] == sorted((r["score"] for r in got), reverse=True)
    top = ours.rank(query, docs, top_k=3, return_documents=True)
    ref_top = ref.rank(query, docs, top_k=3, return_documents=True)
    assert [(r["corpus_id"], r["text"]) for r in top] == [(r["corpus_id"], r["text"]) for r in ref_top]
    assert all(r["text"] == docs[r["corpus_id"]] for r in top)
    raw = ours.rank(query, docs, activation_fn=torch.nn.Identity(), top_k=5)
    ref_raw = ref.rank(query, docs, activation_fn=torch.nn.Identity(), top_k=5)
    assert [r["corpus_id"] for r in raw] == [r["corpus_id"] for r in ref_raw]
    np.testing.assert_allclose([r["score"] for r in raw], [r["score"] for r in ref_raw], atol=ATOL)
    assert ours.rank(query, docs, top_k=50) == ours.rank(query, docs)  # a top_k past the end is everything


def test_rank_ties_keep_corpus_order(models, pairs):
    """Equal scores keep their corpus order, as ST's stable sort does. (A document repeated is no tie
    in ST: its copies differ in the last bit with their place in a batch; a step activation makes
    real ties, equal in both libraries.)"""
    ours, ref = models[1]
    query, docs = pairs[6][0], [p for _, p in pairs[:14]]

    def step(x):
        return (x > 0).float()

    got, want = ours.rank(query, docs, activation_fn=step), ref.rank(query, docs, activation_fn=step)
    assert [(r["corpus_id"], r["score"]) for r in got] == [(r["corpus_id"], r["score"]) for r in want]
    ones = [r["corpus_id"] for r in got if r["score"] == 1.0]
    zeros = [r["corpus_id"] for r in got if r["score"] == 0.0]
    assert len(ones) > 1 and len(zeros) > 1 and ones + zeros == [r["corpus_id"] for r in got]
    assert ones == sorted(ones) and zeros == sorted(zeros)


def test_rank_needs_one_label(models):
    ours, _ = models[3]
    with pytest.raises(ValueError, match=r"rank\(\) only works for models with num_labels=1"):
        ours.rank("q", ["a", "b"])


def test_max_length_cuts_as_sentence_transformers(folders, pairs):
    from bertkit import CrossEncoder

    ours, ref = CrossEncoder(folders[1], max_length=40), st.CrossEncoder(folders[1], max_length=40, device="cpu")
    assert ours.max_length == ref.max_seq_length == 40
    long_pairs = pairs[:20]
    got, want = ours.predict(long_pairs), ref.predict(long_pairs)
    np.testing.assert_allclose(got, want, atol=ATOL)
    assert np.abs(got - CrossEncoder(folders[1]).predict(long_pairs)).max() > 1e-3  # the cut changed the scores
    ours.max_length = 24
    ref.max_seq_length = 24
    np.testing.assert_allclose(ours.predict(long_pairs), ref.predict(long_pairs), atol=ATOL)


def test_preprocess_equals_sentence_transformers(folders, pairs):
    """``preprocess`` (and its old name ``tokenize``) gives sentence-transformers' model inputs: pairs
    tokenized together and cut longest-first to max_length, single texts each alone; bad input is
    named."""
    from bertkit import CrossEncoder

    ours, ref = CrossEncoder(folders[1], max_length=40), st.CrossEncoder(folders[1], max_length=40, device="cpu")
    singles = [p for pair in pairs[:6] for p in pair]
    for inputs in (pairs[:20], singles):
        got, want = ours.preprocess(inputs), ref.preprocess(inputs)
        assert set(got) == {"input_ids", "token_type_ids", "attention_mask"}
        for key in got:
            assert torch.equal(got[key], want[key]), key
        assert int(got["attention_mask"].sum(1).max()) == 40  # the long BBC passages were cut
        assert torch.equal(ours.tokenize(inputs)["input_ids"], got["input_ids"])
    for bad, message in (([], "non-empty list"), ("one text", "non-empty list"), ([("a", "b", "c")], "pair 0")):
        with pytest.raises(ValueError, match=message):
            ours.preprocess(bad)


def test_attributes_sentence_transformers_users_touch(models, folders):
    from bertkit.modeling.auto import AutoModelForSequenceClassification

    for n, (ours, ref) in models.items():
        assert ours.num_labels == ref.num_labels == n
        assert ours.config.num_labels == ref.config.num_labels == n
        assert ours.max_length == ref.max_seq_length == 512
        assert ours.device == ref.device == torch.device("cpu")
        assert type(ours.model).__name__ == type(ref.model).__name__ == "BertForSequenceClassification"
        assert isinstance(ours.model, AutoModelForSequenceClassification.from_pretrained(folders[n]).__class__)
        assert ours.model.classifier.out_features == n
        enc = ours.tokenizer("a query", "a passage")
        assert enc["input_ids"] == ref.tokenizer("a query", "a passage")["input_ids"]


def test_activation_named_in_config_json_is_used(folders, pairs, tmp_path):
    """config.json's ``sentence_transformers.activation_fn`` (and the pre-4.0 key) set the default, as ST reads them."""
    from bertkit import CrossEncoder

    for key, value in (
        ("sentence_transformers", {"activation_fn": "torch.nn.modules.activation.Tanh"}),
        ("sbert_ce_default_activation_function", "torch.nn.modules.activation.Tanh"),
    ):
        d = tmp_path / key
        shutil.copytree(folders[1], d)
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, key: value}))
        ours, ref = CrossEncoder(d), st.CrossEncoder(str(d), device="cpu")
        assert type(ours.activation_fn) is type(ref.activation_fn) is torch.nn.Tanh
        got = ours.predict(pairs[:8])
        np.testing.assert_allclose(got, ref.predict(pairs[:8]), atol=ATOL)
        assert (got < 0).any()  # tanh, not sigmoid


def test_folder_saved_by_sentence_transformers_loads_with_its_activation(folders, pairs, tmp_path):
    from bertkit import CrossEncoder

    ref = st.CrossEncoder(folders[1], activation_fn=torch.nn.Identity(), max_length=64, device="cpu")
    ref.save(str(tmp_path / "st"))
    ours = CrossEncoder(tmp_path / "st")
    assert type(ours.activation_fn) is torch.nn.Identity
    assert ours.max_length == 64
    np.testing.assert_allclose(ours.predict(pairs), ref.predict(pairs), atol=ATOL)
    # a module config's max_seq_length outranks the tokenizer's limit, in both libraries
    cfg = tmp_path / "st" / "sentence_bert_config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "max_seq_length": 40}))
    ours, ref = CrossEncoder(tmp_path / "st"), st.CrossEncoder(str(tmp_path / "st"), device="cpu")
    assert ours.max_length == ref.max_seq_length == 40
    np.testing.assert_allclose(ours.predict(pairs), ref.predict(pairs), atol=ATOL)


@pytest.mark.parametrize("method", ["save", "save_pretrained"])
def test_saved_folder_loads_in_sentence_transformers_with_equal_scores(folders, pairs, tmp_path, method):
    from bertkit import CrossEncoder

    ours = CrossEncoder(folders[1], max_length=48, activation_fn=torch.nn.Tanh())
    out = tmp_path / "saved"
    getattr(ours, method)(str(out))
    ref = st.CrossEncoder(str(out), device="cpu")
    assert type(ref.activation_fn) is torch.nn.Tanh
    assert ref.max_seq_length == 48
    np.testing.assert_allclose(ref.predict(pairs), ours.predict(pairs), atol=ATOL)
    again = CrossEncoder(out)
    assert type(again.activation_fn) is torch.nn.Tanh and again.max_length == 48
    np.testing.assert_allclose(again.predict(pairs), ours.predict(pairs), atol=1e-6)


def test_three_label_save_round_trip(models, pairs, tmp_path):
    from bertkit import CrossEncoder

    ours, _ = models[3]
    ours.save(tmp_path / "three")
    ref = st.CrossEncoder(str(tmp_path / "three"), device="cpu")
    assert ref.num_labels == 3 and type(ref.activation_fn) is torch.nn.Identity
    np.testing.assert_allclose(ref.predict(pairs[:10]), ours.predict(pairs[:10]), atol=ATOL)
    assert CrossEncoder(tmp_path / "three").num_labels == 3


def test_save_keeps_other_files_and_refuses_sentence_transformers_module_files(models, tmp_path):
    ours, _ = models[1]
    d = tmp_path / "existing"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    ours.save(d)
    assert (d / "notes.txt").read_text() == "mine"
    assert (d / "model.safetensors").is_file()
    other = tmp_path / "sentence-model"
    shutil.copytree(MINILM, other)
    before = {p.name: p.read_bytes() for p in other.iterdir() if p.is_file()}
    with pytest.raises(FileExistsError, match=r"holds modules\.json, config_sentence_transformers\.json"):
        ours.save(other)
    assert {p.name: p.read_bytes() for p in other.iterdir() if p.is_file()} == before


def _hub_cache(root, folder, model_id: str, commit: str) -> None:
    repo = root / "hub" / ("models--" + model_id.replace("/", "--"))
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)


def test_model_id_resolves_through_the_hf_cache(folders, pairs, tmp_path, monkeypatch):
    from bertkit import CrossEncoder

    commit = "0123456789abcdef0123456789abcdef01234567"
    _hub_cache(tmp_path / "home", folders[1], "cross-encoder/bertkit-test-reranker", commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    want = st.CrossEncoder(folders[1], device="cpu").predict(pairs[:10])
    ours = CrossEncoder("cross-encoder/bertkit-test-reranker")
    np.testing.assert_allclose(ours.predict(pairs[:10]), want, atol=ATOL)
    assert CrossEncoder("cross-encoder/bertkit-test-reranker", revision=commit).folder == ours.folder
    _hub_cache(tmp_path / "elsewhere", folders[3], "org/three", commit)
    assert CrossEncoder("org/three", cache_folder=tmp_path / "elsewhere" / "hub").num_labels == 3
    with pytest.raises(FileNotFoundError, match="'cross-encoder/no-such-model' is neither a local folder"):
        CrossEncoder("cross-encoder/no-such-model")


BAD_PREDICT = [
    ("a query and a passage", TypeError, "got the string 'a query and a passage'"),
    ([("only a query",)], ValueError, r"pair 0 must be 2 texts .query, passage., got 1 items: \('only a query',\)"),
    ([("q", "p"), ("q", "p", "extra")], ValueError, "pair 1 must be 2 texts .query, passage., got 3 items"),
    (("q", "p", "extra"), ValueError, "pair 0 must be 2 texts .query, passage., got 3 items"),
    ([("q", "p"), "qp"], ValueError, "pair 1 must be 2 texts .query, passage., got a str: 'qp'"),
    ([("q", 7)], TypeError, "pair 0 must hold 2 strings, got int 7 at position 1"),
    ([(None, "p")], TypeError, "pair 0 must hold 2 strings, got NoneType None at position 0"),
    (42, TypeError, "a list of .text, text. pairs or one pair, got int"),
]


@pytest.mark.parametrize("inputs,error,message", BAD_PREDICT)
def test_bad_predict_input_is_named(models, inputs, error, message):
    ours, _ = models[1]
    with pytest.raises(error, match=message):
        ours.predict(inputs)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda m: m.predict([("q", "p")], batch_size=0), "batch_size must be .*, got 0"),
        (lambda m: m.predict([("q", "p")], batch_size=-3), "batch_size must be .*, got -3"),
        (lambda m: m.rank("q", ["a", "b"], batch_size=0), "batch_size must be .*, got 0"),
        (lambda m: m.rank("q", ["a", "b"], top_k=0), "top_k must be .*, got 0"),
        (lambda m: m.rank("q", ["a", "b"], top_k=-1), "top_k must be .*, got -1"),
        (lambda m: m.rank("q", []), "rank needs at least one document, got an empty list"),
        (lambda m: m.rank("q", "a passage"), "documents must be a list of strings, got str 'a passage'"),
        (lambda m: m.rank("q", ["a", 3]), r"documents\[1\] must be a string, got int 3"),
        (lambda m: m.rank(["q"], ["a"]), r"query must be a string, got list \['q'\]"),
        (lambda m: m.predict([("q", "p")], prompt="query: "), r"predict\(prompt=...\) is not supported"),
        (lambda m: m.predict([("q", "p")], device=["cpu", "cpu"]), r"predict\(device=...\) is not supported"),
        (lambda m: m.rank("q", ["a"], pool={}), r"rank\(pool=...\) is not supported"),
        (lambda m: m.predict([("q", "p")], activation_fn="sigmoid"), "activation_fn must be callable"),
        (lambda m: m.predict(sentences=[("q", "p")], inputs=[("q", "p")]), "sentences=... or inputs=..., not both"),
    ],
)
def test_bad_arguments_are_named(models, call, message):
    ours, _ = models[1]
    with pytest.raises((ValueError, TypeError), match=message):
        call(ours)


def test_inputs_keyword_is_sentence_transformers_newer_name(models, pairs):
    ours, ref = models[1]
    np.testing.assert_allclose(ours.predict(inputs=pairs[:4]), ref.predict(inputs=pairs[:4]), atol=ATOL)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"trust_remote_code": True}, r"trust_remote_code=True\) is not supported"),
        ({"backend": "onnx"}, r"backend='onnx'\) is not supported"),
        ({"model_kwargs": {"torch_dtype": "auto"}}, r"model_kwargs=...\) is not supported"),
        ({"prompts": {"query": "q: "}}, r"prompts=...\) is not supported"),
        ({"num_labels": 3}, "num_labels=3, but .* trained head has 1 label"),
        ({"max_length": 0}, "max_length must be .*, got 0"),
        ({"max_length": 600}, "max_length=600 is over the model's 512 positions"),
        ({"activation_fn": "sigmoid"}, "activation_fn must be callable"),
    ],
)
def test_bad_constructor_arguments_are_named(folders, kwargs, message):
    from bertkit import CrossEncoder

    with pytest.raises((ValueError, TypeError), match=message):
        CrossEncoder(folders[1], **kwargs)


def test_a_sentence_transformer_folder_is_converted_as_sentence_transformers_converts_it(pairs, tmp_path):
    """A bi-encoder's folder (Transformer, Pooling, Normalize) becomes a cross-encoder as in
    sentence-transformers: its model with a new 1-label head, the model's own length limit (not the
    bi-encoder's max_seq_length, 256), sigmoid scores, and a warning naming the conversion. What it
    saves is a cross-encoder that sentence-transformers loads with bertkit's scores."""
    from bertkit import CrossEncoder

    with pytest.warns(UserWarning, match=r"Converting SentenceTransformer model .*minilm to CrossEncoder"):
        ours = CrossEncoder(MINILM, device="cpu")
    theirs = st.CrossEncoder(MINILM, device="cpu")
    assert ours.num_labels == theirs.num_labels == 1
    assert ours.max_length == theirs.max_seq_length == 512
    assert type(ours.activation_fn).__name__ == type(theirs.activation_fn).__name__ == "Sigmoid"
    ours.save(tmp_path / "converted")
    reloaded = st.CrossEncoder(str(tmp_path / "converted"), device="cpu")
    np.testing.assert_allclose(reloaded.predict(pairs[:8]), ours.predict(pairs[:8]), atol=ATOL)
    # a folder saved as a CrossEncoder that lists modules after its model is not one bertkit runs
    bad = tmp_path / "ce-with-pooling"
    shutil.copytree(tmp_path / "converted", bad)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (bad / "modules.json").write_text(json.dumps(modules))
    (bad / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "CrossEncoder"}))
    with pytest.raises(ValueError, match=r"ce-with-pooling is not a cross-encoder: its modules.json lists .*Pooling"):
        CrossEncoder(str(bad))


def test_a_plain_folder_gets_a_new_head(tmp_path, caplog):
    from bertkit import CrossEncoder

    # A plain encoder (no classifier named in its config) gets a new head, as sentence-transformers gives
    # it (what its training scripts start from), and the loader says the head is new.
    bare = tmp_path / "bare"
    shutil.copytree(MINILM, bare, ignore=shutil.ignore_patterns("modules.json", "1_Pooling"))
    with caplog.at_level("WARNING"):
        ours = CrossEncoder(str(bare), device="cpu")
    assert any("classifier.weight, classifier.bias are newly initialized" in r.getMessage() for r in caplog.records)
    assert ours.num_labels == st.CrossEncoder(str(bare), device="cpu").num_labels == 1
    assert CrossEncoder(str(bare), num_labels=3, device="cpu").num_labels == 3
    with pytest.raises(FileNotFoundError, match="does not exist|neither a local folder"):
        CrossEncoder(tmp_path / "missing")


def test_faster_precisions_score_close_to_fp32(folders, models, pairs, tmp_path):
    from bertkit import CrossEncoder

    want = models[1][1].predict(pairs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bf16 on a CPU without native bf16 says it is slow
        fast = CrossEncoder(folders[1], dtype="bf16")
        got = fast.predict(pairs)
    assert fast.model.dtype == torch.bfloat16
    np.testing.assert_allclose(got, want, atol=2e-2)
    assert np.corrcoef(got, want)[0, 1] > 0.999
    with pytest.raises(ValueError, match=r"save\(\) of a bf16 model would write rounded weights"):
        fast.save(tmp_path / "never-written")
    assert not (tmp_path / "never-written").exists()
