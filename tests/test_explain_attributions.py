"""Attributions of `bertkit explain` against Captum, on real checkpoints loaded by transformers.

* Integrated gradients equal Captum's ``LayerIntegratedGradients`` on transformers' word-embedding
  layer with ``method="gausslegendre"``, 50 steps and the [CLS]/[SEP]-kept [PAD] baseline, for a
  sequence classifier (MiniLM + a seeded random head, saved and loaded), a token classifier's tag, QA
  start/end and a masked-LM word; the completeness residual is small.
* Gradient x input equals Captum's ``LayerGradientXActivation``; attention rollout is rebuilt from
  transformers' eager attentions.
* Bad input: a bare encoder, a label that does not exist, an unknown method.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.assets import asset_path
from bertkit.explain.attributions import attribute, baseline_ids

TEXT = "A warm, funny and wholly unexpected film about grief."
PAIR = "It is a comedy."

transformers = pytest.importorskip("transformers")
captum_attr = pytest.importorskip("captum.attr")

# Both sides run float32 through different kernels; measured differences are ~1e-7 of the largest score.
# Scores are compared relative to the largest one.
REL_TOL = 1e-4


@pytest.fixture(scope="module")
def tokenizer():
    from bertkit.tokenization import BertTokenizer

    return BertTokenizer.from_pretrained(asset_path("minilm"))


def _save_with_head(cls_name: str, folder: Path, tokenizer, **config) -> Path:
    """MiniLM's encoder with a seeded random head (std 0.5 so the logits move), saved as a folder."""
    import bertkit.modeling as bm

    torch.manual_seed(0)
    model = getattr(bm, cls_name).from_pretrained(asset_path("minilm"), **config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("bert."):
                p.normal_(0.0, 0.5)
    model.save_pretrained(folder, tokenizer=tokenizer)
    return folder


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, tokenizer) -> Path:
    return _save_with_head(
        "BertForSequenceClassification",
        tmp_path_factory.mktemp("clf"),
        tokenizer,
        num_labels=3,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        label2id={"negative": 0, "neutral": 1, "positive": 2},
    )


def _ours(folder: Path, text: str, pair=None, **kw):
    from bertkit.explain import load_model

    model, tok, _ = load_model(folder)
    return attribute(model, tok, [text], [pair], **kw)[0]


def _captum_ig(ref, forward, ids, types, target) -> torch.Tensor:
    lig = captum_attr.LayerIntegratedGradients(forward, ref.base_model.embeddings.word_embeddings)
    base = torch.tensor([baseline_ids(_hf_tok(), ids[0].tolist())])
    attr = lig.attribute(
        ids,
        baselines=base,
        target=target,
        additional_forward_args=(types,),
        n_steps=50,
        method="gausslegendre",
        internal_batch_size=25,
    )
    return attr.sum(-1)[0].double()


def _hf_tok():
    return transformers.BertTokenizerFast.from_pretrained(asset_path("minilm"))


def _enc(text, pair=None):
    enc = _hf_tok()(text, pair, return_tensors="pt")
    return enc["input_ids"], enc["token_type_ids"]


def _close(ours, theirs) -> float:
    ours = torch.as_tensor(ours, dtype=torch.float64)
    theirs = theirs.detach()
    err = float((ours - theirs).abs().max() / theirs.abs().max())
    assert err < REL_TOL, err
    return err


def test_sequence_classifier_matches_captum(classifier):
    ref = transformers.BertForSequenceClassification.from_pretrained(classifier).eval()
    ids, types = _enc(TEXT, PAIR)
    ours = _ours(classifier, TEXT, PAIR, methods=("integrated-gradients", "gradient-x-input"))
    ig, gxi = ours.results
    with torch.no_grad():
        logits = ref(input_ids=ids, token_type_ids=types).logits[0]
    predicted = int(logits.argmax())
    assert ig.target.label == ref.config.id2label[predicted] and ig.target.position is None
    fwd = lambda i, t: ref(input_ids=i, token_type_ids=t).logits  # noqa: E731
    _close(ig.scores, _captum_ig(ref, fwd, ids, types, predicted))
    # completeness: the scores sum to f(x) - f(baseline), to well under 1% of the logit change
    assert abs(ig.f_x - float(logits[predicted])) < 1e-4
    assert abs(ig.residual) < 1e-2 * abs(ig.f_x - ig.f_baseline) + 1e-4
    assert ours.tokens == _hf_tok().convert_ids_to_tokens(ids[0])
    gx = captum_attr.LayerGradientXActivation(fwd, ref.bert.embeddings.word_embeddings)
    _close(gxi.scores, gx.attribute(ids, target=predicted, additional_forward_args=(types,)).sum(-1)[0].double())
    # a given label is explained instead of the predicted one
    other = (predicted + 1) % 3
    res = _ours(classifier, TEXT, PAIR, target=ref.config.id2label[other]).results[0]
    _close(res.scores, _captum_ig(ref, fwd, ids, types, other))


def test_token_classifier_and_qa_match_captum(tmp_path, tokenizer):
    text = "Ada Lovelace was born in London"
    folder = _save_with_head(
        "BertForTokenClassification",
        tmp_path / "ner",
        tokenizer,
        num_labels=3,
        id2label={0: "O", 1: "B-PER", 2: "B-LOC"},
        label2id={"O": 0, "B-PER": 1, "B-LOC": 2},
    )
    ref = transformers.BertForTokenClassification.from_pretrained(folder).eval()
    ids, types = _enc(text)
    ours = _ours(folder, text)
    words = _hf_tok()(text).word_ids()
    firsts = [i for i, w in enumerate(words) if w is not None and w not in words[:i]]
    assert [r.target.position for r in ours.results] == firsts == [1, 2, 4, 5, 6, 7]  # "love ##lace" is one word
    r = ours.results[1]
    with torch.no_grad():
        tag = int(ref(input_ids=ids, token_type_ids=types).logits[0, r.target.position].argmax())
    assert r.target.label == ref.config.id2label[tag]
    fwd = lambda i, t: ref(input_ids=i, token_type_ids=t).logits[:, r.target.position]  # noqa: E731
    _close(r.scores, _captum_ig(ref, fwd, ids, types, tag))
    assert max(abs(x.residual) for x in ours.results) < 1e-2 * max(abs(x.f_x - x.f_baseline) for x in ours.results)
    chosen = _ours(folder, text, positions=[3], methods=("gradient-x-input",)).results  # "##lace", chosen
    assert [(x.target.position, x.target.index[0]) for x in chosen] == [(3, 3)]

    qa_dir = _save_with_head("BertForQuestionAnswering", tmp_path / "qa", tokenizer, num_labels=2)
    ref = transformers.BertForQuestionAnswering.from_pretrained(qa_dir).eval()
    ids, types = _enc("Where was Ada born?", text)
    start, end = _ours(qa_dir, "Where was Ada born?", text).results
    with torch.no_grad():
        out = ref(input_ids=ids, token_type_ids=types)
    # the answer transformers' logits give: the best span of the context (token type 1, [SEP] aside),
    # start <= end within 30 tokens, as the report shows it (a plain argmax may fall in the question)
    sep = tokenizer.convert_tokens_to_ids(["[SEP]"])[0]
    ctx = [i for i, (t, w) in enumerate(zip(types[0].tolist(), ids[0].tolist())) if t == 1 and w != sep]
    s_l, e_l = out.start_logits[0], out.end_logits[0]
    want = max(((i, j) for a, i in enumerate(ctx) for j in ctx[a : a + 30]), key=lambda p: float(s_l[p[0]] + e_l[p[1]]))
    assert (start.target.position, end.target.position) == want
    # logits whose largest start lies in the question: the target stays on the context's best span
    from bertkit.explain.attributions import resolve_targets
    from bertkit.modeling import BertForQuestionAnswering

    model = BertForQuestionAnswering.from_pretrained(qa_dir)
    keys = [None if t == 0 and i == 0 else (t, i) for i, t in enumerate(types[0].tolist())]
    keys = [
        None if w in (sep, tokenizer.convert_tokens_to_ids(["[CLS]"])[0]) else k for k, w in zip(keys, ids[0].tolist())
    ]
    head = torch.zeros(2, ids.shape[1])
    head[0, 2], head[0, ctx[1]], head[1, ctx[2]] = 9.0, 5.0, 5.0  # token 2 is in the question
    targets, _ = resolve_targets(model, tokenizer, ids[0].tolist(), keys, head)
    assert [t.position for t in targets] == [ctx[1], ctx[2]]
    for res, name in ((start, "start_logits"), (end, "end_logits")):
        fwd = lambda i, t, n=name: getattr(ref(input_ids=i, token_type_ids=t), n)  # noqa: E731
        _close(res.scores, _captum_ig(ref, fwd, ids, types, res.target.position))


def test_masked_lm_word_matches_captum(tmp_path, tokenizer):
    from bertkit.modeling import BertConfig, BertForMaskedLM

    torch.manual_seed(1)
    cfg = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
    )
    folder = tmp_path / "mlm"
    BertForMaskedLM(cfg).save_pretrained(folder, tokenizer=tokenizer)
    ref = transformers.BertForMaskedLM.from_pretrained(folder).eval()
    text = "The capital of France is [MASK]."
    ids, types = _enc(text)
    (res,) = _ours(folder, text).results
    pos = ids[0].tolist().index(tokenizer.mask_token_id)
    with torch.no_grad():
        word = int(ref(input_ids=ids, token_type_ids=types).logits[0, pos].argmax())
    assert res.target.position == pos and res.target.index == (pos, word)
    fwd = lambda i, t: ref(input_ids=i, token_type_ids=t).logits[:, pos]  # noqa: E731
    _close(res.scores, _captum_ig(ref, fwd, ids, types, word))
    (paris,) = _ours(folder, text, target="paris").results
    assert paris.target.label == "paris"


def test_attention_rollout_from_transformers_eager_attentions(classifier):
    ref = transformers.BertForSequenceClassification.from_pretrained(classifier, attn_implementation="eager").eval()
    ids, types = _enc(TEXT)
    with torch.no_grad():
        atts = ref(input_ids=ids, token_type_ids=types, output_attentions=True).attentions
    n = ids.shape[1]
    r = torch.eye(n, dtype=torch.float64)
    for a in atts:  # written out independently of bertkit's rollout_matrix
        m = 0.5 * a[0].double().mean(0) + 0.5 * torch.eye(n, dtype=torch.float64)
        r = (m / m.sum(-1, keepdim=True)) @ r
    (res,) = _ours(classifier, TEXT, methods=("attention-rollout",)).results
    assert (torch.tensor(res.scores, dtype=torch.float64) - r[0]).abs().max() < 1e-5
    assert abs(float(res.scores.sum()) - 1.0) < 1e-4


def test_batch_of_texts_and_bad_input(classifier, tokenizer):
    from bertkit.explain import load_model
    from bertkit.modeling import BertModel

    model, tok, _ = load_model(classifier)
    texts = ["a warm film", "dull, dull, dull and far too long"]
    out = attribute(model, tok, texts, methods=("gradient-x-input",))
    assert [len(a.tokens) for a in out] == [len(tok(t)["input_ids"]) for t in texts]
    assert all(a.scores("gradient-x-input")[0].shape == (len(a.tokens),) for a in out)
    js = out[0].to_json()
    assert js["conventions"]["gradient-x-input"]["layer"] == "word-embedding output"
    with pytest.raises(ValueError, match="is not a label of this model; its labels are: negative, neutral, positive"):
        attribute(model, tok, texts, target="happy")
    with pytest.raises(ValueError, match="choose from integrated-gradients"):
        attribute(model, tok, texts, methods=("saliency",))
    with pytest.raises(ValueError, match="needs a model with a task head"):
        attribute(BertModel.from_pretrained(asset_path("minilm")), tok, texts)


# ------------------------------------------------------------------------------ the command


def test_cli_writes_attributions_to_json_and_rejects_bad_input(classifier, tmp_path, capsys):
    import json

    from bertkit.cli import main as cli_main

    out = tmp_path / "r.json"
    rc = cli_main(
        [
            "explain",
            "--model",
            str(classifier),
            TEXT,
            "--json",
            str(out),
            "--attributions",
            "integrated-gradients,attention-rollout",
            "--attributions",
            "gradient-x-input",
            "--target",
            "neutral",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    att = json.loads(out.read_text())["attributions"]
    assert att["methods"] == ["integrated-gradients", "attention-rollout", "gradient-x-input"]
    conv = att["conventions"]["integrated-gradients"]
    assert conv["steps"] == 50 and "[PAD]" in conv["baseline"] and "Gauss-Legendre" in conv["quadrature"]
    ig = att["results"][0]
    assert ig["target"]["label"] == "neutral" and abs(ig["residual"]) < 1e-3
    assert abs(sum(ig["scores"]) - (ig["f_x"] - ig["f_baseline"]) - ig["residual"]) < 1e-6
    capsys.readouterr()

    def error(*argv: str) -> str:
        with pytest.raises(SystemExit) if "saliency" in argv else _nothing():
            rc = cli_main(["explain", *argv, "--json", str(tmp_path / "bad.json")])
            assert rc == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert "Traceback" not in "\n".join(err)
        lines = [line for line in err if "error:" in line]
        assert len(lines) == 1, err
        return lines[0]

    assert "'happy' is not a label of this model; its labels are: negative, neutral, positive" in error(
        "--model", str(classifier), TEXT, "--attributions", "integrated-gradients", "--target", "happy"
    )
    assert "needs a model with a task head" in error(
        "--model", str(asset_path("minilm")), TEXT, "--attributions", "attention-rollout"
    )
    assert "choose from integrated-gradients" in error("--model", str(classifier), TEXT, "--attributions", "saliency")
    assert "give --attributions too" in error("--model", str(classifier), TEXT, "--target", "neutral")
    assert "outside the model's layers 0-5" in error(
        "--model", str(classifier), TEXT, "--layers", "7", "--attributions", "attention-rollout"
    )
    assert not (tmp_path / "bad.json").exists()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
