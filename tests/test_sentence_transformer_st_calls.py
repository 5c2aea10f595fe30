"""``bertkit.SentenceTransformer`` and ``bertkit.util`` answer sentence-transformers' calls with its numbers.

Each test makes the same call to sentence-transformers 6 and to bertkit, on the real
all-MiniLM-L6-v2 folder (and copies of it: a plain BERT folder, a folder with prompts) and real
polarity and BBC News text, and compares within a stated float tolerance (fp32: 1e-5 on vectors
of unit length, 1e-4 on raw token vectors).
"""

import csv
import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from bertkit import SentenceTransformer, util
from bertkit.assets import asset_path

st_lib = pytest.importorskip("sentence_transformers")
st_util = st_lib.util
MINILM = asset_path("minilm")
ATOL = 1e-5


def _polarity(n):
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows[:n]]


def _bbc(n):
    with open(asset_path("bbcnews-test"), encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][:n]


@pytest.fixture(scope="module")
def texts():
    return _polarity(120)


@pytest.fixture(scope="module")
def ref():
    return st_lib.SentenceTransformer(str(MINILM), device="cpu")


@pytest.fixture(scope="module")
def bk():
    return SentenceTransformer(MINILM)


def _np(x):
    return np.asarray(torch.as_tensor(x).float())


def test_encode_equals_sentence_transformers_in_every_output_form(ref, bk, texts):
    a, b = ref.encode(texts), bk.encode(texts, batch_size=16)
    assert a.shape == b.shape == (len(texts), 384) and b.dtype == np.float32
    np.testing.assert_allclose(b, a, atol=ATOL)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)  # the folder's Normalize module

    one = bk.encode(texts[3])
    assert isinstance(one, np.ndarray) and one.shape == (384,)
    np.testing.assert_allclose(one, ref.encode(texts[3]), atol=ATOL)

    t = bk.encode(texts[:7], convert_to_tensor=True)
    assert isinstance(t, torch.Tensor) and t.shape == (7, 384)
    np.testing.assert_allclose(t.numpy(), ref.encode(texts[:7], convert_to_tensor=True).numpy(), atol=ATOL)

    rows, ref_rows = bk.encode(texts[:4], convert_to_numpy=False), ref.encode(texts[:4], convert_to_numpy=False)
    assert isinstance(rows, list) and len(rows) == 4 and all(isinstance(r, torch.Tensor) for r in rows)
    for r, q in zip(rows, ref_rows):
        np.testing.assert_allclose(r.numpy(), q.numpy(), atol=ATOL)

    # empty input: the same empty type as sentence-transformers gives
    for kw in ({}, {"convert_to_tensor": True}, {"convert_to_numpy": False}):
        e, q = bk.encode([], **kw), ref.encode([], **kw)
        assert type(e) is type(q) and len(e) == len(q) == 0


def test_token_embeddings_are_each_texts_own_tokens(ref, bk, texts):
    a = ref.encode(texts[:9], output_value="token_embeddings")
    b = bk.encode(texts[:9], output_value="token_embeddings")
    assert [tuple(x.shape) for x in b] == [tuple(x.shape) for x in a]
    for x, y in zip(a, b):
        np.testing.assert_allclose(y.numpy(), x.numpy(), atol=1e-4)


def test_long_texts_are_cut_to_max_seq_length_and_the_cut_is_said(ref, bk):
    long = _bbc(12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b = bk.encode(long)
    assert any("max_seq_length=256" in str(w.message) and "tokens dropped" in str(w.message) for w in caught)
    np.testing.assert_allclose(b, ref.encode(long), atol=ATOL)


def test_precision_truncate_dim_and_normalize(ref, bk, texts):
    for precision, dtype, width in (("int8", np.int8, 384), ("uint8", np.uint8, 384)):
        a, b = ref.encode(texts, precision=precision), bk.encode(texts, precision=precision)
        assert b.dtype == a.dtype == dtype and b.shape == a.shape == (len(texts), width)
        # a vector a rounding away from a bucket edge may land one bucket over
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 1
        assert (a == b).mean() > 0.99
    for precision, dtype in (("binary", np.int8), ("ubinary", np.uint8)):
        a, b = ref.encode(texts, precision=precision), bk.encode(texts, precision=precision)
        assert b.dtype == a.dtype == dtype and b.shape == a.shape == (len(texts), 48)
        assert (a == b).mean() > 0.999

    # the quantizer alone, on the same float vectors: identical
    vecs = ref.encode(texts)
    for precision in ("int8", "uint8", "binary", "ubinary", "float32"):
        np.testing.assert_array_equal(
            util.quantize_embeddings(vecs, precision), st_util.quantize_embeddings(vecs, precision)
        )
    calib = ref.encode(_polarity(300)[150:])
    np.testing.assert_array_equal(
        util.quantize_embeddings(vecs, "int8", calibration_embeddings=calib),
        st_util.quantize_embeddings(vecs, "int8", calibration_embeddings=calib),
    )

    a = ref.encode(texts[:10], truncate_dim=64, normalize_embeddings=True)
    b = bk.encode(texts[:10], truncate_dim=64, normalize_embeddings=True)
    assert b.shape == (10, 64)
    np.testing.assert_allclose(b, a, atol=ATOL)
    np.testing.assert_allclose(
        bk.encode(texts[:10], truncate_dim=64), ref.encode(texts[:10], truncate_dim=64), atol=ATOL
    )

    short_ref = st_lib.SentenceTransformer(str(MINILM), device="cpu", truncate_dim=100)
    short = SentenceTransformer(MINILM, truncate_dim=100)
    assert short.get_sentence_embedding_dimension() == short_ref.get_embedding_dimension() == 100
    np.testing.assert_allclose(short.encode(texts[:5]), short_ref.encode(texts[:5]), atol=ATOL)


def test_similarity_functions_and_util_scores(ref, bk, texts):
    vecs = ref.encode(texts[:20])
    other = ref.encode(texts[20:32])
    for name in ("cosine", "dot", "euclidean", "manhattan"):
        ref.similarity_fn_name = bk.similarity_fn_name = name
        np.testing.assert_allclose(_np(bk.similarity(vecs, other)), _np(ref.similarity(vecs, other)), atol=1e-5)
        np.testing.assert_allclose(
            _np(bk.similarity_pairwise(vecs[:12], other)), _np(ref.similarity_pairwise(vecs[:12], other)), atol=1e-5
        )
    ref.similarity_fn_name = bk.similarity_fn_name = "cosine"

    raw = np.random.default_rng(0).normal(size=(6, 384)).astype(np.float32)  # unnormalised vectors
    for fn in (
        "cos_sim",
        "dot_score",
        "euclidean_sim",
        "manhattan_sim",
        "pairwise_cos_sim",
        "pairwise_dot_score",
        "pairwise_euclidean_sim",
        "pairwise_manhattan_sim",
    ):
        ours, theirs = getattr(util, fn), getattr(st_util, fn)
        # numpy, tensors, lists of tensors, one 1-D vector against many, and bf16 input
        for a, b in (
            (raw, raw[::-1].copy()),
            (torch.from_numpy(raw), torch.from_numpy(raw[::-1].copy())),
            (list(torch.from_numpy(raw)), list(torch.from_numpy(raw))),
            (torch.from_numpy(raw).bfloat16(), torch.from_numpy(raw).bfloat16()),
        ):
            np.testing.assert_allclose(_np(ours(a, b)), _np(theirs(a, b)), rtol=1e-5, atol=1e-4, err_msg=fn)
        if not fn.startswith("pairwise"):
            got, want = ours(raw[0], raw), theirs(raw[0], raw)
            assert got.shape == want.shape == (1, 6)
            np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(
        _np(util.normalize_embeddings(torch.from_numpy(raw))),
        _np(st_util.normalize_embeddings(torch.from_numpy(raw))),
        atol=1e-6,
    )


def test_semantic_search_paraphrase_mining_and_communities(ref, texts):
    vecs = ref.encode(texts, convert_to_tensor=True)
    queries = vecs[:15]
    for kw in ({}, {"top_k": 3}, {"top_k": 500}, {"query_chunk_size": 4, "corpus_chunk_size": 17, "top_k": 6}):
        for score_function in (util.cos_sim, util.dot_score):
            st_fn = st_util.cos_sim if score_function is util.cos_sim else st_util.dot_score
            got = util.semantic_search(queries, vecs, score_function=score_function, **kw)
            want = st_util.semantic_search(queries, vecs, score_function=st_fn, **kw)
            assert [[h["corpus_id"] for h in q] for q in got] == [[h["corpus_id"] for h in q] for q in want]
            np.testing.assert_allclose(
                [h["score"] for q in got for h in q], [h["score"] for q in want for h in q], atol=1e-6
            )
    # a 1-D query, numpy in
    assert util.semantic_search(vecs[0].numpy(), vecs.numpy(), top_k=2)[0][0]["corpus_id"] == 0

    for kw in ({}, {"top_k": 2, "max_pairs": 25}, {"query_chunk_size": 9, "corpus_chunk_size": 13, "top_k": 4}):
        got, want = util.paraphrase_mining_embeddings(vecs, **kw), st_util.paraphrase_mining_embeddings(vecs, **kw)
        assert [p[1:] for p in got] == [p[1:] for p in want]
        np.testing.assert_allclose([p[0] for p in got], [p[0] for p in want], atol=1e-6)

    for threshold, size in ((0.3, 3), (0.45, 2), (0.9, 2)):
        assert util.community_detection(vecs, threshold=threshold, min_community_size=size) == (
            st_util.community_detection(vecs, threshold=threshold, min_community_size=size)
        )
    assert util.community_detection(vecs, threshold=0.3, min_community_size=3, batch_size=7) == (
        st_util.community_detection(vecs, threshold=0.3, min_community_size=3, batch_size=7)
    )


def test_paraphrase_mining_with_the_model(ref, bk, texts):
    got = util.paraphrase_mining(bk, texts[:40], top_k=3)
    want = st_util.paraphrase_mining(ref, texts[:40], top_k=3)
    assert [p[1:] for p in got[:20]] == [p[1:] for p in want[:20]]
    np.testing.assert_allclose([p[0] for p in got], [p[0] for p in want], atol=ATOL)


@pytest.fixture(scope="module")
def prompted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prompted") / "minilm"
    shutil.copytree(MINILM, folder)
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps(
            {
                "prompts": {"query": "query: ", "passage": "passage: ", "classify": "sentiment of: "},
                "default_prompt_name": "classify",
                "similarity_fn_name": "dot",
            }
        )
    )
    return folder


def test_prompts_from_the_folder_and_the_call(prompted, texts):
    ref = st_lib.SentenceTransformer(str(prompted), device="cpu")
    bk = SentenceTransformer(prompted)
    assert bk.prompts == ref.prompts and bk.default_prompt_name == ref.default_prompt_name == "classify"
    assert bk.similarity_fn_name == ref.similarity_fn_name == "dot"
    sample = texts[:6]
    for call, kw in (
        ("encode", {}),  # the default prompt
        ("encode", {"prompt_name": "query"}),
        ("encode", {"prompt": "review: "}),
        ("encode_query", {}),
        ("encode_document", {}),  # "passage", the first of document/passage/corpus it has
        ("encode_query", {"prompt_name": "passage"}),
    ):
        np.testing.assert_allclose(
            getattr(bk, call)(sample, **kw), getattr(ref, call)(sample, **kw), atol=ATOL, err_msg=f"{call} {kw}"
        )
    # the prompt changes the vectors: a bug that dropped it would not pass the comparison above
    plain = SentenceTransformer(MINILM).encode(sample)
    assert np.abs(bk.encode_query(sample) - plain).max() > 1e-2

    extra = SentenceTransformer(prompted, prompts={"query": "search: "}, default_prompt_name="query")
    extra_ref = st_lib.SentenceTransformer(
        str(prompted), device="cpu", prompts={"query": "search: "}, default_prompt_name="query"
    )
    np.testing.assert_allclose(extra.encode(sample), extra_ref.encode(sample), atol=ATOL)

    with pytest.raises(ValueError, match="prompt_name 'title' is not among the prompts"):
        bk.encode(sample, prompt_name="title")


def test_a_plain_bert_folder_is_mean_pooled_without_normalising(tmp_path, texts):
    folder = tmp_path / "plain"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(MINILM / name, folder / name)
    ref = st_lib.SentenceTransformer(str(folder), device="cpu")
    bk = SentenceTransformer(folder)
    assert bk.max_seq_length == ref.max_seq_length == 512
    a, b = ref.encode(texts[:12]), bk.encode(texts[:12])
    assert np.linalg.norm(b, axis=1).min() > 1.5  # not unit length
    np.testing.assert_allclose(b, a, atol=1e-4, rtol=1e-5)


def test_saved_folder_loads_in_sentence_transformers_and_keeps_other_files(prompted, tmp_path, texts):
    out = tmp_path / "saved"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    bk = SentenceTransformer(prompted, truncate_dim=None)
    bk.max_seq_length = 128
    bk.save(out)
    assert (out / "notes.txt").read_text() == "mine"
    ref = st_lib.SentenceTransformer(str(out), device="cpu")
    assert ref.max_seq_length == 128 and ref.prompts == bk.prompts and ref.similarity_fn_name == "dot"
    assert ref.default_prompt_name == "classify"
    np.testing.assert_allclose(ref.encode(texts[:8]), bk.encode(texts[:8]), atol=ATOL)
    again = SentenceTransformer(out)
    np.testing.assert_allclose(again.encode(texts[:8]), bk.encode(texts[:8]), atol=1e-6)

    # and a folder sentence-transformers saved loads here with its vectors
    theirs = tmp_path / "theirs"
    st_lib.SentenceTransformer(str(MINILM), device="cpu").save(str(theirs))
    np.testing.assert_allclose(
        SentenceTransformer(theirs).encode(texts[:8]), ref.encode(texts[:8], prompt=""), atol=ATOL
    )


def test_a_model_id_loads_from_the_hugging_face_cache(tmp_path, monkeypatch, texts):
    snap = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / "0123abc"
    shutil.copytree(MINILM, snap)
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("0123abc")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    bk = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
    assert bk.folder == snap
    np.testing.assert_allclose(bk.encode(texts[:5]), SentenceTransformer(MINILM).encode(texts[:5]), atol=1e-6)
    with pytest.raises(FileNotFoundError, match="neither a local folder nor in the Hugging Face cache"):
        SentenceTransformer("sentence-transformers/no-such-model")
    other = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "hub", other)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "nothing"))
    assert (
        SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2", cache_folder=other).folder.parent.parent.parent
        == other
    )


def test_faster_precisions_stay_close_to_fp32(ref, texts):
    want = ref.encode(texts)
    for dtype in ("bf16", "auto"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # bf16 on a CPU without native bf16 says it is slow
            got = SentenceTransformer(MINILM, dtype=dtype).encode(texts)
        cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert cos.min() > 0.999, (dtype, cos.min())
    kw = SentenceTransformer(MINILM, model_kwargs={"torch_dtype": torch.bfloat16})
    assert kw.dtype == "bf16"


def test_script_written_for_sentence_transformers_runs_unchanged(texts):
    script = """
from {lib} import SentenceTransformer, util
model = SentenceTransformer(MODEL)
corpus_embeddings = model.encode(corpus, convert_to_tensor=True)
query_embeddings = model.encode(queries, convert_to_tensor=True)
hits = util.semantic_search(query_embeddings, corpus_embeddings, top_k=3)
scores = util.cos_sim(query_embeddings, corpus_embeddings)
pairs = util.paraphrase_mining(model, corpus[:30], top_k=2)[:5]
ids = [[h["corpus_id"] for h in q] for q in hits]
result = (ids, scores, [p[1:] for p in pairs], model.similarity(query_embeddings, query_embeddings))
"""
    outs = []
    for lib in ("sentence_transformers", "bertkit"):
        scope = {"MODEL": str(MINILM), "corpus": texts[10:], "queries": texts[:10]}
        exec(script.format(lib=lib), scope)
        outs.append(scope["result"])
    (h1, s1, p1, m1), (h2, s2, p2, m2) = outs
    assert h1 == h2 and p1 == p2
    np.testing.assert_allclose(s2.numpy(), s1.numpy(), atol=ATOL)
    np.testing.assert_allclose(m2.numpy(), m1.numpy(), atol=ATOL)


def test_bad_input_gets_one_clear_line(bk, tmp_path):
    with pytest.raises(ValueError, match="model_name_or_path is required"):
        SentenceTransformer()
    with pytest.raises(ValueError, match="trust_remote_code=True is not supported"):
        SentenceTransformer(MINILM, trust_remote_code=True)
    with pytest.raises(ValueError, match="backend='onnx' is not supported"):
        SentenceTransformer(MINILM, backend="onnx")
    with pytest.raises(ValueError, match=r"model_kwargs \['attn_implementation'\] are not supported"):
        SentenceTransformer(MINILM, model_kwargs={"attn_implementation": "eager"})
    with pytest.raises(ValueError, match="similarity_fn_name 'maxsim' is not one of cosine, dot"):
        SentenceTransformer(MINILM, similarity_fn_name="maxsim")
    with pytest.raises(ValueError, match="default_prompt_name 'title' is not among the prompts"):
        SentenceTransformer(MINILM, default_prompt_name="title")
    with pytest.raises(ValueError, match=r"keyword\(s\) \['normalise'\] are not used"):
        bk.encode(["a"], normalise=True)
    with pytest.raises(ValueError, match="output_value 'all' is not one of"):
        bk.encode(["a"], output_value="all")
    with pytest.raises(ValueError, match="precision 'float16' is not one of"):
        bk.encode(["a"], precision="float16")
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        bk.encode(["a"], batch_size=0)
    with pytest.raises(TypeError, match=r"inputs\[1\] is int, not a string"):
        bk.encode(["a", 3])
    with pytest.raises(ValueError, match="a list of devices are not supported"):
        bk.encode(["a"], device=["cpu", "cpu"])
    with pytest.raises(ValueError, match="max_seq_length 1000 is over the model's 512 positions"):
        bk.max_seq_length = 1000
    with pytest.raises(ValueError, match="differ in width: 384 and 10"):
        util.cos_sim(np.ones((2, 384)), np.ones((2, 10)))
    with pytest.raises(ValueError, match="top_k must be an integer >= 1, got 0"):
        util.semantic_search(np.ones((1, 4)), np.ones((3, 4)), top_k=0)
    with pytest.raises(ValueError, match="cannot be set from a single vector"):
        util.quantize_embeddings(np.ones((1, 4), np.float32), "int8")

    dense = tmp_path / "dense"
    shutil.copytree(MINILM, dense)
    modules = json.loads((dense / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (dense / "modules.json").write_text(json.dumps(modules))
    # a Dense after the Normalize (and without its folder): bertkit runs a Dense between Pooling and Normalize
    with pytest.raises(ValueError, match="bertkit runs a Dense only after the Pooling and before the Normalize"):
        SentenceTransformer(dense)
