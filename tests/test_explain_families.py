"""`bertkit explain --attributions` on DistilBERT, ELECTRA and GPT-2 folders, against Captum on transformers.

Tiny models with seeded random weights are saved once by transformers and loaded by both sides.
Integrated gradients use the same convention on both sides: Captum's ``LayerIntegratedGradients`` on
the word-embedding layer, ``method="gausslegendre"``, 50 steps, bertkit's baseline ids (``[CLS]``/``[SEP]``
kept, the rest ``[PAD]``; on GPT-2 the first token kept, the rest the end-of-text token, here the
WordPiece vocabulary's pad token as it has none). Tolerance: 1e-4 of the largest score (both sides
are float32 through different kernels; measured differences are around 1e-7 relative).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertkit.assets import asset_path
from bertkit.explain.attributions import attribute, baseline_ids

transformers = pytest.importorskip("transformers")
captum_attr = pytest.importorskip("captum.attr")

TEXT = "A warm, funny and wholly unexpected film about grief."
REL_TOL = 1e-4
SMALL = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    initializer_range=0.1,
)
LABELS = dict(
    num_labels=3,
    id2label={0: "negative", 1: "neutral", 2: "positive"},
    label2id={"negative": 0, "neutral": 1, "positive": 2},
)


@pytest.fixture(scope="module")
def tok():
    from bertkit.tokenization import BertTokenizer

    return BertTokenizer.from_pretrained(asset_path("minilm"))


@pytest.fixture(scope="module")
def hf_tok():
    return transformers.BertTokenizerFast.from_pretrained(asset_path("minilm"))


def _save(root: Path, cls_name: str, cfg, tok) -> Path:
    torch.manual_seed(0)
    folder = root / cls_name
    getattr(transformers, cls_name)(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _distil_cfg(tok, **kw):
    return transformers.DistilBertConfig(
        vocab_size=len(tok.vocab),
        dim=32,
        n_layers=2,
        n_heads=4,
        hidden_dim=64,
        max_position_embeddings=64,
        initializer_range=0.1,
        **kw,
    )


def _electra_cfg(tok, **kw):
    return transformers.ElectraConfig(vocab_size=len(tok.vocab), embedding_size=16, **SMALL, **kw)


def _gpt2_cfg(tok):
    return transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=4,
        n_positions=64,
        vocab_size=len(tok.vocab),
        tokenizer_class="BertTokenizer",
        initializer_range=0.1,
    )


def _ours(folder: Path, text: str, pair=None, **kw):
    from bertkit.explain import load_model

    model, t, _ = load_model(folder)
    return attribute(model, t, [text], [pair], **kw)[0]


def _captum_ig(embedding, forward, ids, types, target, tok, causal=False) -> torch.Tensor:
    lig = captum_attr.LayerIntegratedGradients(forward, embedding)
    base = torch.tensor([baseline_ids(tok, ids[0].tolist(), causal=causal)])
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


def _close(ours, theirs) -> None:
    ours = torch.as_tensor(ours, dtype=torch.float64)
    err = float((ours - theirs.detach()).abs().max() / theirs.abs().max())
    assert err < REL_TOL, err


def _check_ig(folder, cls_name, text, embedding_of, out_of, tok, hf_tok, pair=None, causal=False, **kw):
    """Our IG results on ``folder`` equal Captum's on transformers' ``cls_name``, target by target."""
    ref = getattr(transformers, cls_name).from_pretrained(folder).eval()
    enc = hf_tok(text, pair, return_tensors="pt")
    ids = enc["input_ids"]
    # ELECTRA embeds segments as BERT does; DistilBERT and GPT-2 get no token types (as bertkit gives them none)
    types = None if cls_name.startswith(("DistilBert", "GPT2")) else enc["token_type_ids"]
    ours = _ours(folder, text, pair, **kw)
    assert ours.input_ids == ids[0].tolist()
    for res in ours.results:
        fwd = lambda i, t, r=res: out_of(ref(input_ids=i, token_type_ids=t), r.target)  # noqa: E731
        target = res.target.index[-1]  # every out_of leaves (B, K) with the target's last index along K
        with torch.no_grad():
            assert abs(res.f_x - float(fwd(ids, types)[0, target])) < 1e-4
        _close(res.scores, _captum_ig(embedding_of(ref), fwd, ids, types, target, tok, causal))
        assert abs(res.residual) < 2e-2 * abs(res.f_x - res.f_baseline) + 1e-3
    return ours, ref, ids


def test_distilbert_classifier_and_masked_lm_match_captum(tmp_path, tok, hf_tok):
    emb = lambda ref: ref.distilbert.embeddings.word_embeddings  # noqa: E731
    folder = _save(tmp_path, "DistilBertForSequenceClassification", _distil_cfg(tok, **LABELS), tok)
    ours, ref, ids = _check_ig(
        folder, "DistilBertForSequenceClassification", TEXT, emb, lambda out, t: out.logits, tok, hf_tok
    )
    with torch.no_grad():
        assert ours.results[0].target.index == (int(ref(input_ids=ids).logits[0].argmax()),)
    from bertkit.explain import explain

    # the report says what the head reads: DistilBERT has no pooler
    assert "pre_classifier" in explain(folder, TEXT).explanation.predictions["head"]
    mlm = _save(tmp_path, "DistilBertForMaskedLM", _distil_cfg(tok), tok)
    ours, _, ids = _check_ig(
        mlm,
        "DistilBertForMaskedLM",
        "The capital of France is [MASK].",
        emb,
        lambda out, t: out.logits[:, t.position],
        tok,
        hf_tok,
    )
    assert [r.target.position for r in ours.results] == [ids[0].tolist().index(tok.mask_token_id)]


def test_electra_classifier_tags_qa_and_discriminator_match_captum(tmp_path, tok, hf_tok):
    emb = lambda ref: ref.electra.embeddings.word_embeddings  # noqa: E731
    clf = _save(tmp_path, "ElectraForSequenceClassification", _electra_cfg(tok, **LABELS), tok)
    ours, _, _ = _check_ig(
        clf,
        "ElectraForSequenceClassification",
        TEXT,
        emb,
        lambda out, t: out.logits,
        tok,
        hf_tok,
        pair="It is a comedy.",
    )
    assert ours.kind == "sequence-classification"
    from bertkit.explain import explain

    assert "out_proj" in explain(clf, TEXT).explanation.predictions["head"]
    ner = _save(tmp_path, "ElectraForTokenClassification", _electra_cfg(tok, **LABELS), tok)
    ours, _, _ = _check_ig(
        ner,
        "ElectraForTokenClassification",
        "Ada Lovelace was born in London",
        emb,
        lambda out, t: out.logits[:, t.position],
        tok,
        hf_tok,
    )
    assert [r.target.position for r in ours.results] == [1, 2, 4, 5, 6, 7]
    qa = _save(tmp_path, "ElectraForQuestionAnswering", _electra_cfg(tok), tok)
    ours, _, _ = _check_ig(
        qa,
        "ElectraForQuestionAnswering",
        "Where was Ada born?",
        emb,
        lambda out, t: out.start_logits if t.label == "start" else out.end_logits,
        tok,
        hf_tok,
        pair="Ada Lovelace was born in London",
    )
    assert [r.target.label for r in ours.results] == ["start", "end"]
    disc = _save(tmp_path, "ElectraForPreTraining", _electra_cfg(tok), tok)
    ours, ref, ids = _check_ig(disc, "ElectraForPreTraining", TEXT, emb, lambda out, t: out.logits, tok, hf_tok)
    (res,) = ours.results
    with torch.no_grad():
        logits = ref(input_ids=ids).logits[0]
    assert res.target.position == int(logits[1:-1].argmax()) + 1  # the text token most likely replaced
    chosen = _ours(disc, TEXT, target="funny", methods=("gradient-x-input",)).results[0]
    assert chosen.target.position == ours.tokens.index("funny")
    gen = _save(tmp_path, "ElectraForMaskedLM", _electra_cfg(tok), tok)
    _check_ig(
        gen,
        "ElectraForMaskedLM",
        "The capital of France is [MASK].",
        emb,
        lambda out, t: out.logits[:, t.position],
        tok,
        hf_tok,
    )


def test_gpt2_next_token_matches_captum_with_the_causal_baseline(tmp_path, tok, hf_tok):
    folder = _save(tmp_path, "GPT2LMHeadModel", _gpt2_cfg(tok), tok)
    ours, ref, ids = _check_ig(
        folder,
        "GPT2LMHeadModel",
        TEXT,
        lambda r: r.transformer.wte,
        lambda out, t: out.logits[:, -1],
        tok,
        hf_tok,
        causal=True,
    )
    (res,) = ours.results
    with torch.no_grad():
        predicted = int(ref(input_ids=ids).logits[0, -1].argmax())
    assert res.target.index == (ids.shape[1] - 1, predicted)
    base = baseline_ids(tok, ids[0].tolist(), causal=True)
    assert base[0] == ids[0, 0] and set(base[1:]) == {tok.pad_token_id}
    assert ours.to_json()["conventions"]["integrated-gradients"]["baseline"].startswith("the first token kept")
    given = _ours(folder, TEXT, target="film", methods=("gradient-x-input",)).results[0]
    assert given.target.label == "film"


def _rendered_predictions(pages: list[Path]) -> list[str] | None:
    """The predictions section's text of each page in headless Chromium (None: no Chromium here)."""
    chromium = Path("/usr/bin/chromium")
    sync_api = pytest.importorskip("playwright.sync_api") if chromium.exists() else None
    if sync_api is None:
        return None
    texts = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), headless=True, args=["--no-sandbox"])
        for path in pages:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e, errs=errors: errs.append(str(e)))
            page.goto(path.resolve().as_uri())
            page.wait_for_selector("body[data-rendered]", timeout=30000)
            assert not errors, errors
            texts.append(page.inner_text("#preds"))
        browser.close()
    return texts


def test_cli_on_gpt2_and_distilbert_qa_and_bad_input(tmp_path, tok, capsys):
    from bertkit.cli import main as cli_main

    gpt2 = _save(tmp_path, "GPT2LMHeadModel", _gpt2_cfg(tok), tok)
    out = tmp_path / "g.json"
    rc = cli_main(
        [
            "explain",
            "--model",
            str(gpt2),
            TEXT,
            "--json",
            str(out),
            "--attributions",
            "integrated-gradients,attention-rollout",
            "--output",
            str(tmp_path / "g.html"),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    ref = transformers.GPT2LMHeadModel.from_pretrained(gpt2).eval()
    with torch.no_grad():
        probs = ref(input_ids=torch.tensor([data["input_ids"]])).logits[0, -1].softmax(-1)
    vals, idx = probs.topk(5)
    pred = data["predictions"]
    assert pred["kind"] == "next-token" and [t["id"] for t in pred["top"]] == idx.tolist()
    assert max(abs(t["score"] - float(v)) for t, v in zip(pred["top"], vals)) < 1e-5
    assert data["attributions"]["results"][0]["target"]["label"] == pred["top"][0]["token"]
    assert "first token kept" in data["attributions"]["conventions"]["integrated-gradients"]["baseline"]
    assert data["attributions"]["kind"] == "next-token"

    qa = _save(tmp_path, "DistilBertForQuestionAnswering", _distil_cfg(tok), tok)
    q, c = "Where was Ada born?", "Ada Lovelace was born in London in 1815."
    out = tmp_path / "q.json"
    rc = cli_main(
        ["explain", "--model", str(qa), q, "--pair", c, "--json", str(out), "--output", str(tmp_path / "q.html")]
    )
    assert rc == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    ref = transformers.DistilBertForQuestionAnswering.from_pretrained(qa).eval()
    enc = transformers.BertTokenizerFast.from_pretrained(qa)(q, c, return_tensors="pt", return_offsets_mapping=True)
    with torch.no_grad():
        r = ref(input_ids=enc["input_ids"])
    s, e = r.start_logits[0], r.end_logits[0]
    ctx = [i for i, sid in enumerate(enc.sequence_ids()) if sid == 1]
    best = max(((i, j) for i in ctx for j in ctx if i <= j < i + 30), key=lambda p: float(s[p[0]] + e[p[1]]))
    span = data["predictions"]["span"]
    assert (span["start_token"], span["end_token"]) == best
    assert abs(span["start_logit"] - float(s[best[0]])) < 1e-5 and abs(span["end_logit"] - float(e[best[1]])) < 1e-5
    offs = enc["offset_mapping"][0]
    assert span["answer"] == c[int(offs[best[0]][0]) : int(offs[best[1]][1])]
    shown = _rendered_predictions([tmp_path / "g.html", tmp_path / "q.html"])
    if shown is not None:  # the pages draw both heads' predictions with no page error
        assert "Top next tokens" in shown[0] and pred["top"][0]["token"] in shown[0]
        assert f'answer: "{span["answer"]}"' in shown[1] and "start at" in shown[1]
    capsys.readouterr()
    rc = cli_main(
        [
            "explain",
            "--model",
            str(gpt2),
            TEXT,
            "--json",
            str(tmp_path / "bad.json"),
            "--attributions",
            "integrated-gradients",
            "--target",
            "notaword",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and "'notaword' is not a word of the model's vocabulary" in err


@pytest.mark.parametrize("cls_name", ["DistilBertForSequenceClassification", "ElectraForSequenceClassification"])
def test_neuron_view_queries_and_keys_make_transformers_eager_attentions(tmp_path, tok, hf_tok, cls_name):
    """softmax(q kᵀ / sqrt(d)) from the JSON's DistilBERT (q_lin/k_lin) and ELECTRA (query/key) queries and
    keys equals transformers' eager attentions, on every layer and head."""
    from bertkit.explain import explain
    from bertkit.explain.neuron import attention_from_qk

    cfg = _distil_cfg(tok, **LABELS) if cls_name.startswith("Distil") else _electra_cfg(tok, **LABELS)
    folder = _save(tmp_path, cls_name, cfg, tok)
    data = explain(folder, TEXT, "It is a comedy.").to_json()
    q = torch.tensor(data["neuron"]["queries"], dtype=torch.float64)
    assert q.shape == (2, 4, len(data["tokens"]), 8) and data["neuron"]["head_size"] == 8
    ours = attention_from_qk(q, torch.tensor(data["neuron"]["keys"], dtype=torch.float64))
    ref = getattr(transformers, cls_name).from_pretrained(folder, attn_implementation="eager").eval()
    enc = hf_tok(TEXT, "It is a comedy.", return_tensors="pt")
    types = None if cls_name.startswith("Distil") else enc["token_type_ids"]
    with torch.no_grad():
        atts = ref(input_ids=enc["input_ids"], token_type_ids=types, output_attentions=True).attentions
    assert (ours - torch.stack([a[0] for a in atts]).double()).abs().max() < 1e-5


HEAD_CHECKS = {
    "DistilBertForMaskedLM": "masked LM: vocab_projector",
    "DistilBertForTokenClassification": "token classifier",
    "DistilBertForQuestionAnswering": "question answering",
    "ElectraForPreTraining": "discriminator",
    "ElectraForMaskedLM": "generator",
    "ElectraForTokenClassification": "token classifier",
    "ElectraForQuestionAnswering": "question answering",
}


def test_verify_rebuilds_distilbert_and_electra_heads_from_raw_weights(tmp_path, tok):
    """--verify's from-scratch rebuild passes on folders transformers saved, with each head's own check,
    and fails when one attention weight of the model in memory differs from the file."""
    from bertkit.explain import load_model, verify

    for cls_name, head in HEAD_CHECKS.items():
        cfg = (_distil_cfg if cls_name.startswith("Distil") else _electra_cfg)(
            tok, **(LABELS if "Token" in cls_name else {})
        )
        folder = _save(tmp_path, cls_name, cfg, tok)
        checks = verify(folder, "Where was Ada born?", "Ada Lovelace was born in London.")
        assert checks and all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
        assert any(c.name.startswith(head) for c in checks), (cls_name, [c.name for c in checks][-3:])
    model, t, _ = load_model(folder)
    with torch.no_grad():
        model.electra.encoder.layer[1].attention.self.key.weight[3, 5] += 0.5
    bad = [c.name for c in verify(folder, TEXT, model=model, tokenizer=t) if not c.ok]
    assert bad and all("layer 1" in name for name in bad)
    gpt2 = _save(tmp_path, "GPT2LMHeadModel", _gpt2_cfg(tok), tok)
    families = "bert, distilbert, electra, roberta, xlm-roberta, modernbert"
    rebuilds = f"verify_weights rebuilds the forward pass of {families}; .*'gpt2'"
    with pytest.raises(ValueError, match=rebuilds):
        verify(gpt2, TEXT)


def test_heads_it_does_not_explain_and_tokens_not_in_the_text_get_one_line(tmp_path, tok):
    from bertkit.explain import load_model

    mc = _save(tmp_path, "DistilBertForMultipleChoice", _distil_cfg(tok), tok)
    model, t, _ = load_model(mc)
    with pytest.raises(ValueError, match="does not explain DistilBertForMultipleChoice's head"):
        attribute(model, t, TEXT)
    disc = _save(tmp_path, "ElectraForPreTraining", _electra_cfg(tok), tok)
    model, t, _ = load_model(disc)
    with pytest.raises(ValueError, match="'dog': a replaced-token detector explains one token of the text"):
        attribute(model, t, TEXT, target="dog")
