"""sentence-transformers' object calls (the nn.Module ones and the rest) on bertkit's SentenceTransformer
and CrossEncoder, against sentence-transformers 6.2 on the real MiniLM folder and real STS, polarity and
BBC text. fp32 vectors and scores agree within ATOL; bf16 (and half(), which bertkit runs as bf16)
within cosine COS_BF16. Calls bertkit cannot make are refused in one line naming the call.
"""

import csv
import json
import re
import warnings

import numpy as np
import pytest
import torch
from conftest import seeded_head_folder  # noqa: E402

from bertkit.assets import asset_path

st_lib = pytest.importorskip("sentence_transformers")

MINILM = str(asset_path("minilm"))
ATOL = 1e-5
COS_BF16 = 0.999


def _polarity(n: int) -> list[str]:
    with open(asset_path("polarity-test"), encoding="utf-8") as f:
        return [r["text"] for r in list(csv.DictReader(f))[:n]]


def _sts(n: int) -> tuple[list[str], list[str], list[float]]:
    with open(asset_path("sts-lee"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:n]
    return [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [float(r["score"]) for r in rows]


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return _polarity(48)


def _pair() -> tuple:
    from bertkit import SentenceTransformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return st_lib.SentenceTransformer(MINILM, device="cpu"), SentenceTransformer(MINILM, device="cpu")


@pytest.fixture(scope="module")
def pair():
    """(sentence-transformers, bertkit) over MiniLM, left untouched by the tests that use it."""
    return _pair()


# -- SentenceTransformer ------------------------------------------------------------------------------


def test_module_list_names_and_weights_equal_sentence_transformers(pair):
    ref, bk = pair
    assert len(bk) == len(ref) == 3
    assert [type(m).__name__ for m in bk] == [type(m).__name__ for m in ref]
    assert bk._first_module() is bk[0] and type(bk._last_module()).__name__ == "Normalize"
    assert type(bk[0].auto_model).__name__ == type(ref[0].auto_model).__name__ == "BertModel"
    assert bk.transformers_model is bk[0].auto_model
    assert bk[1].pooling_mode == ref[1].pooling_mode == "mean"
    assert bk[0].max_seq_length == ref[0].max_seq_length
    ref_sd, bk_sd = ref.state_dict(), bk.state_dict()
    assert list(bk_sd) == list(ref_sd) and len(bk_sd) == 103  # '0.model.embeddings.word_embeddings.weight'...
    for k, v in ref_sd.items():
        torch.testing.assert_close(bk_sd[k], v, rtol=0, atol=0)
    assert [n for n, _ in bk.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert sum(p.numel() for p in bk.parameters()) == sum(p.numel() for p in ref.parameters())
    assert [n for n, _ in bk.named_modules()][:4] == [n for n, _ in ref.named_modules()][:4]


def test_load_state_dict_takes_sentence_transformers_weights(texts):
    ref, bk = _pair()
    before = bk.encode(texts)
    # perturb the reference's weights (seeded noise, real scale) so that equality proves the load
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * p.abs().mean() * 0.05)
    bk.load_state_dict(ref.state_dict())
    a, b = ref.encode(texts), bk.encode(texts)
    np.testing.assert_allclose(b, a, atol=ATOL)
    assert np.abs(b - before).max() > 100 * ATOL  # the load changed the vectors


def test_train_and_eval_switch_dropout_of_forward_not_encode(pair, texts):
    ref, bk = pair
    feats = bk.tokenize(texts[:8])
    assert bk.training is ref.training is True  # sentence-transformers starts in train mode
    assert bk.eval() is bk and bk.training is False and bk[0].auto_model.training is False
    ref.eval()
    with torch.no_grad():
        ev1, ev2 = bk(feats)["sentence_embedding"], bk(feats)["sentence_embedding"]
        ref_ev = ref(dict(feats))["sentence_embedding"]
    torch.testing.assert_close(ev1, ev2, rtol=0, atol=0)
    torch.testing.assert_close(ev1, ref_ev, rtol=0, atol=ATOL)
    assert bk.train() is bk and bk.training is True and bk[0].auto_model.training is True
    with torch.no_grad():
        tr1, tr2 = bk(feats)["sentence_embedding"], bk(feats)["sentence_embedding"]
    assert (tr1 - tr2).abs().max() > 1e-3  # dropout is on
    # encode still runs in eval mode, equal to sentence-transformers' eval-mode vectors
    np.testing.assert_allclose(bk.encode(texts), ref.encode(texts), atol=ATOL)
    assert bk.model.training is False
    bk.train(False)
    assert bk.training is False
    with pytest.raises(ValueError, match=r"train\(mode\): mode must be a bool"):
        bk.train("yes")


def test_bfloat16_then_float_follow_sentence_transformers(texts):
    ref, bk = _pair()
    assert bk.bfloat16() is bk and bk.dtype == "bf16"
    ref.bfloat16()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a CPU without native bf16 warns about speed
        a, b = ref.encode(texts), bk.encode(texts)
    cos = _cos(a.astype(np.float32), b)
    assert cos.min() >= COS_BF16, cos.min()
    # the weights themselves are the same rounded values
    ref_sd, bk_sd = ref.state_dict(), bk.state_dict()
    for k in list(ref_sd)[:10]:
        assert bk_sd[k].dtype == torch.bfloat16
        torch.testing.assert_close(bk_sd[k], ref_sd[k], rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"load_state_dict\(\) on a bf16 model"):
        bk.load_state_dict(ref_sd)
    # back to fp32: the rounded weights stay rounded in both libraries
    assert bk.float() is bk and bk.dtype == "fp32"
    ref.float()
    np.testing.assert_allclose(bk.encode(texts), ref.encode(texts), atol=ATOL)
    assert bk.state_dict()["0.model.encoder.layer.0.attention.self.query.weight"].dtype == torch.float32
    # and a new training copy starts from them: forward equals sentence-transformers' forward
    bk.eval(), ref.eval()
    feats = bk.tokenize(texts[:6])
    with torch.no_grad():
        torch.testing.assert_close(
            bk(feats)["sentence_embedding"], ref(dict(feats))["sentence_embedding"], rtol=0, atol=ATOL
        )


def test_half_runs_bf16_with_a_warning_close_to_sentence_transformers_fp16(texts):
    ref, bk = _pair()
    with pytest.warns(UserWarning, match=r"half\(\): bertkit has no float16 path"):
        assert bk.half() is bk
    assert bk.dtype == "bf16"
    ref.half()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = ref.encode(texts[:16]), bk.encode(texts[:16])
    assert a.dtype == np.float16
    cos = _cos(a.astype(np.float32), b)
    assert cos.min() >= COS_BF16, cos.min()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert bk.to(torch.float32) is bk and bk.dtype == "fp32"
    with pytest.raises(ValueError, match=r"to\(torch.float64\) is not supported"):
        bk.to(torch.float64)


def test_evaluate_returns_the_evaluators_result_as_sentence_transformers(pair, tmp_path):
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    ref, bk = pair
    s1, s2, scores = _sts(60)
    evaluator = EmbeddingSimilarityEvaluator(s1, s2, scores, name="lee", write_csv=True)
    out = tmp_path / "eval" / "bk"
    got = bk.evaluate(evaluator, output_path=str(out))
    want = ref.evaluate(evaluator)
    assert set(got) == set(want) and len(got) >= 2
    for k in want:
        assert abs(got[k] - want[k]) <= ATOL, (k, got[k], want[k])
    assert (out / "similarity_evaluation_lee_results.csv").is_file()  # the folder was made for the evaluator
    with pytest.raises(TypeError, match=r"evaluate\(evaluator\): not callable"):
        bk.evaluate("lee")


def test_requires_grad_and_zero_grad_act_on_the_trained_weights(texts):
    _, bk = _pair()
    feats = bk.tokenize(texts[:4])
    assert bk.requires_grad_(False) is bk
    assert not any(p.requires_grad for p in bk.parameters())
    bk.requires_grad_(True)
    bk(feats)["sentence_embedding"].sum().backward()
    grads = [p.grad for p in bk.parameters()]
    assert sum(g is not None and bool(g.abs().sum() > 0) for g in grads) > 90
    bk.zero_grad()
    assert all(p.grad is None for p in bk.parameters())
    # an optimizer over parameters() changes what encode gives
    before = bk.encode(texts[:4])
    opt = torch.optim.SGD(bk.parameters(), lr=0.5)
    (-bk(feats)["sentence_embedding"][:, 0].sum()).backward()
    opt.step()
    assert np.abs(bk.encode(texts[:4]) - before).max() > 1e-3


def test_small_calls_answer_as_sentence_transformers(pair):
    ref, bk = pair
    assert bk.get_backend() == ref.get_backend() == "torch"
    assert bk.get_model_kwargs() == ref.get_model_kwargs()
    for inputs in ("one text", ["a", "b"], ("a", "b"), []):
        assert bk.is_singular_input(inputs) == ref.is_singular_input(inputs), inputs
    assert bk.modalities == ref.modalities and bk.supports("text") and not bk.supports("image")
    assert bk.config.hidden_size == ref.config.hidden_size
    assert bk.processor is bk.tokenizer and bk.model_type == ref.model_type == "SentenceTransformer"
    with bk.truncate_sentence_embeddings(128), ref.truncate_embeddings(128):
        np.testing.assert_allclose(bk.encode(["a sofa"]), ref.encode(["a sofa"]), atol=ATOL)
        assert bk.encode(["a sofa"]).shape == (1, 128)
    assert bk.encode(["a sofa"]).shape == (1, 384)
    bk.set_pooling_include_prompt(False)
    try:
        with pytest.raises(ValueError, match="include_prompt false"):
            bk.encode(["x"], prompt="query: ")
    finally:
        bk.set_pooling_include_prompt(True)
    assert bk.cpu() is bk and bk.device.type == "cpu"


def test_modules_built_in_code_are_the_model_list(texts):
    from bertkit import SentenceTransformer, models

    tf, pool = models.Transformer(MINILM, max_seq_length=16), models.Pooling(384, pooling_mode="mean")
    bk = SentenceTransformer(modules=[tf, pool, models.Normalize()], device="cpu")
    st_m = st_lib.models
    rtf = st_m.Transformer(MINILM, max_seq_length=16)
    ref = st_lib.SentenceTransformer(modules=[rtf, st_m.Pooling(384, "mean"), st_m.Normalize()], device="cpu")
    assert bk[0] is tf and bk[1] is pool and tf.auto_model is bk.transformers_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # texts over 16 tokens are cut, with a warning
        np.testing.assert_allclose(bk.encode(texts[:8]), ref.encode(texts[:8]), atol=ATOL)
        # the module's max_seq_length is the model's
        tf.max_seq_length, rtf.max_seq_length = 32, 32
        assert bk.max_seq_length == 32
        np.testing.assert_allclose(bk.encode(texts[:8]), ref.encode(texts[:8]), atol=ATOL)
    assert list(bk.state_dict()) == list(ref.state_dict())


@pytest.mark.parametrize(
    "call",
    [
        "push_to_hub",
        "save_to_hub",
        "start_multi_process_pool",
        "stop_multi_process_pool",
        "encode_multi_process",
        "old_fit",
        "double",
        "compile",
    ],
)
def test_calls_bertkit_cannot_make_are_refused_by_name(pair, call):
    _, bk = pair
    with pytest.raises(NotImplementedError) as e:
        getattr(bk, call)("x")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"SentenceTransformer.{call}() is not supported by bertkit: ")


def test_int8_model_refuses_module_calls_by_name():
    from bertkit import SentenceTransformer

    bk = SentenceTransformer(MINILM, device="cpu", dtype="int8")
    for call in (bk.state_dict, bk.parameters, bk.eval):
        with pytest.raises(ValueError, match="not supported on an int8 model"):
            call()
    with pytest.raises(ValueError, match=r"bfloat16\(\) is not supported on an int8 model"):
        bk.bfloat16()


# -- CrossEncoder -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ce_folder(tmp_path_factory) -> str:
    """MiniLM with a seeded one-label head (std 0.5 so scores spread), saved by bertkit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return seeded_head_folder(tmp_path_factory.mktemp("ce") / "one", 1, seed=0)


@pytest.fixture(scope="module")
def ce_pairs() -> list[tuple[str, str]]:
    """A BBC article's first sentence with its next sentences or another article's."""
    firsts, rests = [], []
    with open(asset_path("bbcnews-test"), encoding="utf-8") as f:
        for line in f:
            s = [x for x in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(x) > 20]
            if len(s) >= 4:
                firsts.append(s[0])
                rests.append(" ".join(s[1:4]))
            if len(firsts) == 12:
                break
    return [(q, rests[i]) for i, q in enumerate(firsts)] + [(q, rests[(i + 1) % 12]) for i, q in enumerate(firsts)]


def _ce_pair(folder: str) -> tuple:
    from bertkit import CrossEncoder

    return st_lib.CrossEncoder(folder, device="cpu"), CrossEncoder(folder, device="cpu")


def test_cross_encoder_module_calls_equal_sentence_transformers(ce_folder, ce_pairs):
    ref, bk = _ce_pair(ce_folder)
    assert len(bk) == len(ref) == 1 and type(bk[0]).__name__ == "Transformer"
    assert bk.training is ref.training is True
    ref_sd, bk_sd = ref.state_dict(), bk.state_dict()
    assert list(bk_sd) == list(ref_sd)  # '0.model.bert.embeddings...', '0.model.classifier.weight'
    for k, v in ref_sd.items():
        torch.testing.assert_close(bk_sd[k], v, rtol=0, atol=0)
    assert [n for n, _ in bk.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert type(bk.transformers_model).__name__ == type(ref.model).__name__ == "BertForSequenceClassification"
    assert bk.eval() is bk and bk.training is False and bk.transformers_model.training is False
    assert bk.train() is bk and bk.transformers_model.training is True and bk.model.training is False
    np.testing.assert_allclose(bk.predict(ce_pairs), ref.predict(ce_pairs), atol=ATOL)
    # load the reference's perturbed weights: predict follows them
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * p.abs().mean() * 0.05)
    before = bk.predict(ce_pairs)
    bk.load_state_dict(ref.state_dict())
    after = bk.predict(ce_pairs)
    np.testing.assert_allclose(after, ref.predict(ce_pairs), atol=ATOL)
    assert np.abs(after - before).max() > 100 * ATOL
    assert bk.get_backend() == "torch" and bk.get_model_kwargs() == ref.get_model_kwargs()
    for inputs in (("q", "p"), [("q", "p")], [["q", "p"], ["q", "r"]]):
        assert bk.is_singular_input(inputs) == ref.is_singular_input(inputs), inputs


def test_cross_encoder_precision_and_evaluate(ce_folder, ce_pairs):
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

    ref, bk = _ce_pair(ce_folder)
    labels = [1.0] * 12 + [0.0] * 12
    evaluator = CrossEncoderCorrelationEvaluator(ce_pairs, labels, name="bbc", write_csv=False)
    got, want = bk.evaluate(evaluator), ref.evaluate(evaluator)
    assert set(got) == set(want)
    for k in want:
        assert abs(got[k] - want[k]) <= ATOL, (k, got[k], want[k])
    assert bk.bfloat16() is bk and bk.dtype == "bf16"
    ref.bfloat16()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = ref.predict(ce_pairs, convert_to_tensor=True).float().numpy()
        b = bk.predict(ce_pairs)
    assert np.abs(a - b).max() < 0.02 and np.corrcoef(a, b)[0, 1] >= COS_BF16
    assert bk.float() is bk and bk.dtype == "fp32"
    ref.float()
    np.testing.assert_allclose(bk.predict(ce_pairs), ref.predict(ce_pairs), atol=ATOL)
    # the trainable weights are the rounded ones too, as sentence-transformers' are
    ref_sd, bk_sd = ref.state_dict(), bk.state_dict()
    for k in list(ref_sd)[:10]:
        torch.testing.assert_close(bk_sd[k], ref_sd[k], rtol=0, atol=0)
    assert bk.cpu() is bk and bk.to(torch.float32) is bk


@pytest.mark.parametrize("call", ["push_to_hub", "save_to_hub", "start_multi_process_pool", "old_fit"])
def test_cross_encoder_refusals_name_the_call(ce_folder, call):
    from bertkit import CrossEncoder

    bk = CrossEncoder(ce_folder, device="cpu")
    with pytest.raises(NotImplementedError) as e:
        getattr(bk, call)("x")
    assert "\n" not in str(e.value) and str(e.value).startswith(f"CrossEncoder.{call}() is not supported by bertkit: ")
