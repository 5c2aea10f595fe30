"""`bertkit explain`: raw numbers against transformers, the from-scratch check, and bad input.

* ``--json`` attentions equal transformers' eager attentions on the real MiniLM checkpoint.
* ``--verify`` passes on MiniLM, on a model written by ``bertkit pretrain`` and on a fine-tuned
  classifier, and fails, naming the check, when a weight is corrupted or two heads are swapped in
  memory.
* Bad input: empty text, a corrupt folder, an encoder-only folder, a text over 512 tokens.

The report page itself is tested in a real browser in test_explain_browser.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
TEXT = "The quick brown fox jumps over the lazy dog, and the dog sleeps on."
PAIR = "Foxes are members of the dog family."


@pytest.fixture(scope="module")
def minilm() -> Path:
    return asset_path("minilm")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """A tiny model written by `bertkit pretrain` (MLM + NSP head) on a slice of real text."""
    d = tmp_path_factory.mktemp("pretrain")
    corpus = d / "austen.txt"
    corpus.write_text("\n".join(asset_path("austen").read_text(encoding="utf-8").splitlines()[:300]) + "\n")
    out = d / "out"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "BERTKIT_CACHE": str(d / "cache"),
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    cmd = [
        sys.executable,
        "-m",
        "bertkit",
        "pretrain",
        "--corpus",
        str(corpus),
        "--vocab",
        str(asset_path("vocab-uncased")),
        "--config",
        "tiny",
        "--seq-len",
        "32",
        "--batch-size",
        "8",
        "--max-steps",
        "6",
        "--warmup-steps",
        "1",
        "--save-every",
        "0",
        "--eval-every",
        "0",
        "--threads",
        "1",
        "--seed",
        "3",
        "--output",
        str(out),
        "--no-progress",
    ]
    r = subprocess.run(cmd, check=False, env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, pretrained) -> Path:
    """The pretrained tiny model fine-tuned for a few steps on real polarity sentences."""
    from bertkit.tasks import finetune

    d = tmp_path_factory.mktemp("clf")
    train = d / "train.csv"
    lines = asset_path("polarity-train").read_text(encoding="utf-8").splitlines()
    train.write_text("\n".join(lines[:65]) + "\n", encoding="utf-8")
    out = d / "out"
    finetune("text-classification", pretrained, train, out, epochs=1, batch_size=16, max_length=32, lr=1e-3)
    return out


def _run(*argv: str, capsys) -> tuple[int, str, str]:
    rc = cli_main(["explain", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# ------------------------------------------------------------------------------ parity


def test_json_attentions_equal_transformers_eager(minilm, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "r.json"
    rc, _, err = _run("--model", str(minilm), TEXT, "--pair", PAIR, "--json", str(out), capsys=capsys)
    assert rc == 0, err
    data = json.loads(out.read_text())
    tok = transformers.BertTokenizerFast.from_pretrained(minilm)
    enc = tok(TEXT, PAIR, return_tensors="pt", return_offsets_mapping=True)
    assert data["input_ids"] == enc["input_ids"][0].tolist()
    assert data["token_type_ids"] == enc["token_type_ids"][0].tolist()
    assert data["tokens"] == tok.convert_ids_to_tokens(enc["input_ids"][0])
    assert [tuple(o) for o in data["offsets"]] == [tuple(o) for o in enc["offset_mapping"][0].tolist()]
    ref = transformers.BertModel.from_pretrained(minilm, attn_implementation="eager").eval()
    with torch.no_grad():
        r = ref(
            input_ids=enc["input_ids"],
            token_type_ids=enc["token_type_ids"],
            output_attentions=True,
            output_hidden_states=True,
        )
    ours = torch.tensor(data["attentions"], dtype=torch.float64)  # (L, h, N, N)
    theirs = torch.stack([a[0] for a in r.attentions]).double()
    assert ours.shape == theirs.shape == (6, 12, len(data["tokens"]), len(data["tokens"]))
    assert (ours - theirs).abs().max() < 1e-5
    norms = torch.stack([h[0] for h in r.hidden_states]).double().norm(dim=-1)
    assert (torch.tensor(data["hidden_state_norms"]) - norms).abs().max() < 1e-4
    pooled = torch.tensor(data["pooler_output"], dtype=torch.float64)
    assert (pooled - r.pooler_output[0].double()).abs().max() < 1e-5
    # the embedding parts are the model's own tables, looked up by hand here
    n = len(data["tokens"])
    w = ref.embeddings.word_embeddings.weight[enc["input_ids"][0]].norm(dim=-1)
    p = ref.embeddings.position_embeddings.weight[:n].norm(dim=-1)
    assert (torch.tensor(data["embedding_parts"]["word"]) - w).abs().max() < 1e-5
    assert (torch.tensor(data["embedding_parts"]["position"]) - p).abs().max() < 1e-5
    # summaries are consistent with the raw attentions
    a = theirs[:, :, :, 0].mean(-1)  # weight on [CLS] at position 0
    assert (torch.tensor(data["head_summaries"]["cls"]) - a).abs().max() < 1e-5


# ------------------------------------------------------------------------------ --verify


def test_verify_passes_on_minilm(minilm, capsys):
    rc, out, err = _run("--model", str(minilm), TEXT, "--pair", PAIR, "--verify", capsys=capsys)
    assert rc == 0, out + err
    lines = [l for l in out.splitlines() if "max|diff|" in l]
    # embeddings, every head, every layer, the neuron view's q, k and softmax per layer, pooler
    assert len(lines) == 1 + 6 * 12 + 6 + 6 * 3 + 1
    assert all(l.startswith("ok") for l in lines)
    assert "98 of 98 checks within 1e-05" in out


def test_verify_catches_a_corrupted_weight(minilm):
    from bertkit.explain import load_model, verify

    model, tok, _ = load_model(minilm)
    with torch.no_grad():
        model.encoder.layer[3].intermediate.dense.weight[5, 7] += 0.05  # one weight of 590k in layer 3's FFN
    checks = verify(minilm, TEXT, model=model, tokenizer=tok)
    failed = [c.name for c in checks if not c.ok]
    assert failed == ["layer 3: attention output, add & norm, feed-forward, add & norm = hidden_states[4]"]


def test_verify_catches_two_swapped_heads(minilm, capsys):
    from bertkit.explain import load_model, verify

    model, tok, _ = load_model(minilm)
    att = model.encoder.layer[1].attention
    d = att.self.attention_head_size
    a, b = slice(1 * d, 2 * d), slice(4 * d, 5 * d)
    with torch.no_grad():  # swap heads 1 and 4 consistently: the layer's output is unchanged
        for lin in (att.self.query, att.self.key, att.self.value):
            for t in (lin.weight, lin.bias):
                t[a], t[b] = t[b].clone(), t[a].clone()
        w = att.output.dense.weight
        w[:, a], w[:, b] = w[:, b].clone(), w[:, a].clone()
    checks = verify(minilm, TEXT, model=model, tokenizer=tok)
    failed = [c.name for c in checks if not c.ok]
    assert failed == [
        "layer 1: neuron view queries = hidden_states[1] W_q^T + b_q, split into heads",
        "layer 1: neuron view keys = hidden_states[1] W_k^T + b_k, split into heads",
        "layer 1 head 1: softmax(Q K^T / sqrt(32)) = attentions[1][:, 1]",
        "layer 1 head 4: softmax(Q K^T / sqrt(32)) = attentions[1][:, 4]",
    ]


def test_verify_and_report_on_a_pretrain_output(pretrained, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc, text, err = _run(
        "--model",
        str(pretrained),
        "she was the [MASK] of the family .",
        "--pair",
        "mr . darcy walked in .",
        "--verify",
        "--json",
        str(out),
        "--top-k",
        "3",
        capsys=capsys,
    )
    assert rc == 0, text + err
    assert "masked LM: decoder(transform(h)) = logits" in text
    assert "next sentence: seq_relationship(pooler_output) = logits" in text
    assert "FAIL" not in text
    data = json.loads(out.read_text())
    pred = data["predictions"]
    assert pred["kind"] == "masked-lm"
    mask_pos = data["tokens"].index("[MASK]")
    assert [r["position"] for r in pred["positions"]] == [mask_pos]
    scores = [t["score"] for t in pred["positions"][0]["top"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1
    assert abs(pred["next_sentence"]["is_next"] + pred["next_sentence"]["is_random"] - 1) < 1e-6
    # --all-positions: a row for every token
    rc, _, err = _run(
        "--model",
        str(pretrained),
        "she was the [MASK] of the family .",
        "--all-positions",
        "--json",
        str(out),
        "--overwrite",
        capsys=capsys,
    )
    assert rc == 0, err
    data = json.loads(out.read_text())
    assert [r["position"] for r in data["predictions"]["positions"]] == list(range(len(data["tokens"])))


def test_verify_and_report_on_a_finetuned_classifier(classifier, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc, text, err = _run(
        "--model", str(classifier), "a warm and funny film .", "--verify", "--json", str(out), capsys=capsys
    )
    assert rc == 0, text + err
    assert "classifier: linear(pooler_output) = logits" in text and "FAIL" not in text
    data = json.loads(out.read_text())
    labels = data["predictions"]["labels"]
    cfg = json.loads((classifier / "config.json").read_text())
    assert [x["label"] for x in labels] == [cfg["id2label"][str(i)] for i in range(len(cfg["id2label"]))]
    logits = torch.tensor([x["logit"] for x in labels])
    assert torch.allclose(torch.tensor([x["score"] for x in labels]), logits.softmax(-1), atol=1e-6)


def test_token_classifier_tags_each_word(tmp_path, capsys):
    from bertkit.modeling import BertConfig, BertForTokenClassification
    from bertkit.tokenization import BertTokenizer

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        id2label={0: "O", 1: "B-LOC", 2: "I-LOC"},
    )
    folder = tmp_path / "ner"
    tokenizer = BertTokenizer.from_pretrained(asset_path("minilm"))
    BertForTokenClassification(cfg).save_pretrained(folder, tokenizer=tokenizer)
    out = tmp_path / "r.json"
    rc, text, err = _run(
        "--model", str(folder), "flights from Reykjavik to Ouagadougou", "--verify", "--json", str(out), capsys=capsys
    )
    assert rc == 0, text + err
    assert "token classifier: linear(h) = logits" in text
    words = json.loads(out.read_text())["predictions"]["words"]
    assert [w["word"] for w in words] == ["flights", "from", "Reykjavik", "to", "Ouagadougou"]
    assert all(w["tag"] in ("O", "B-LOC", "I-LOC") for w in words)


# ------------------------------------------------------------------------------ bad input


def test_empty_text_is_an_error(minilm, tmp_path, capsys):
    rc, _, err = _run("--model", str(minilm), "   ", "--output", str(tmp_path / "r.html"), capsys=capsys)
    assert rc == 1 and "empty" in err
    assert not (tmp_path / "r.html").exists()


def test_nothing_to_write_is_an_error(minilm, capsys):
    rc, _, err = _run("--model", str(minilm), "a text", capsys=capsys)
    assert rc == 1 and "--output" in err


def test_bad_layers_names_the_range(minilm, tmp_path, capsys):
    rc, _, err = _run(
        "--model", str(minilm), "a text", "--layers", "2-9", "--json", str(tmp_path / "r.json"), capsys=capsys
    )
    assert rc == 1 and "0-5" in err and "2-9" in err
    rc, _, err = _run(
        "--model", str(minilm), "a text", "--layers", "3-1", "--json", str(tmp_path / "r.json"), capsys=capsys
    )
    assert rc == 1 and "'3-1' runs backwards; write the lower index first (1-3)" in err


def test_corrupt_folder_gives_the_load_error(minilm, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        if (minilm / name).exists():
            shutil.copy(minilm / name, bad / name)
    (bad / "model.safetensors").write_bytes((minilm / "model.safetensors").read_bytes()[:5000])
    rc, _, err = _run("--model", str(bad), "a text", "--output", str(tmp_path / "r.html"), capsys=capsys)
    assert rc == 1
    assert "model.safetensors" in err and "corrupt" in err
    assert "Traceback" not in err


def test_headless_folder_explains_the_encoder_and_long_text_is_truncated(minilm, tmp_path, capsys):
    words = asset_path("austen").read_text(encoding="utf-8").split()[:700]
    out = tmp_path / "r.json"
    rc, _, err = _run("--model", str(minilm), " ".join(words), "--layers", "5", "--json", str(out), capsys=capsys)
    assert rc == 0, err
    data = json.loads(out.read_text())
    assert len(data["tokens"]) == 512 and data["tokens"][-1] == "[SEP]"
    assert data["layers"] == [5]
    assert len(data["attentions"]) == 1 and len(data["attentions"][0][0]) == 512
    assert any("truncated to 512" in n for n in data["notes"])
    assert any("encoder only" in n for n in data["notes"])
    assert data["predictions"] is None


def test_png_figures(minilm, tmp_path, capsys):
    rc, _, err = _run(
        "--model", str(minilm), "Hello, BERT.", "--layers", "0,5", "--png", str(tmp_path / "png"), capsys=capsys
    )
    assert rc == 0, err
    names = sorted(p.name for p in (tmp_path / "png").iterdir() if not p.name.startswith("."))
    assert names == ["attention_layer00.png", "attention_layer05.png", "embedding_parts.png", "hidden_states.png"]
    for p in (tmp_path / "png").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_png_figures_draw_chinese_tokens_with_a_cjk_font(minilm, tmp_path, capsys):
    """The user's notes are Chinese: their tokens in a figure must be glyphs, not empty boxes."""
    from bertkit.explain.report import CJK_FONT_PACKAGE, cjk_font

    if cjk_font() is None:
        pytest.skip(f"no CJK font installed (make test installs {CJK_FONT_PACKAGE})")
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, _, err = _run(
            "--model", str(minilm), "我爱北京 BERT", "--layers", "0", "--png", str(tmp_path), capsys=capsys
        )
    assert rc == 0, err
    assert "我" in minilm_tokens(minilm, "我爱北京")  # the vocabulary has the characters, so they are labels
    missing = [str(w.message) for w in caught if "Glyph" in str(w.message)]
    assert not missing, missing[:3]
    assert "findfont" not in err
    import matplotlib

    assert matplotlib.rcParams["font.family"] == ["sans-serif"]  # the CJK font was for those figures only


def minilm_tokens(folder, text):
    from bertkit import BertTokenizer

    return BertTokenizer.from_pretrained(folder).tokenize(text)


# ------------------------------------------------------------------------------ other families


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory) -> Path:
    """A small GPT-2 with random weights on the MiniLM WordPiece vocabulary, saved by transformers."""
    transformers = pytest.importorskip("transformers")
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, n_positions=64, vocab_size=len(tok.vocab), tokenizer_class="BertTokenizer"
    )
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("gpt2") / "model"
    transformers.GPT2LMHeadModel(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_distilbert_folder_explained_as_transformers_computes_it(distilbert_clf, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "r.json"
    rc, _, err = _run(
        "--model", str(distilbert_clf), TEXT, "--json", str(out), "--output", str(tmp_path / "r.html"), capsys=capsys
    )
    assert rc == 0, err
    data = json.loads(out.read_text())
    assert data["model_class"] == "DistilBertForSequenceClassification"
    tok = transformers.BertTokenizerFast.from_pretrained(distilbert_clf)
    enc = tok(TEXT, return_tensors="pt")
    assert data["input_ids"] == enc["input_ids"][0].tolist()
    ref = transformers.DistilBertForSequenceClassification.from_pretrained(
        distilbert_clf, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        r = ref(input_ids=enc["input_ids"], output_attentions=True, output_hidden_states=True)
    ours = torch.tensor(data["attentions"], dtype=torch.float64)
    theirs = torch.stack([a[0] for a in r.attentions]).double()
    assert ours.shape == theirs.shape and (ours - theirs).abs().max() < 1e-5
    norms = torch.stack([h[0] for h in r.hidden_states]).double().norm(dim=-1)
    assert (torch.tensor(data["hidden_state_norms"]) - norms).abs().max() < 1e-4
    probs = r.logits[0].softmax(-1)
    got = {x["label"]: x["score"] for x in data["predictions"]["labels"]}
    assert abs(got["negative"] - float(probs[0])) < 1e-5 and abs(got["positive"] - float(probs[1])) < 1e-5
    assert data["pooler_output"] is None and not any(data["embedding_parts"]["token_type"])
    # --verify rebuilds DistilBERT from the raw weights transformers saved: every step, the neuron view, the head
    rc, out, err = _run("--model", str(distilbert_clf), TEXT, "--verify", capsys=capsys)
    assert rc == 0, out + err
    lines = [line for line in out.splitlines() if "max|diff|" in line]
    assert lines and all(line.startswith("ok") for line in lines)
    assert any("relu(pre_classifier" in line for line in lines) and not any("pooler" in line for line in lines)


def test_gpt2_folder_attention_and_hidden_state_views_equal_transformers(gpt2_folder, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "r.json"
    rc, _, err = _run("--model", str(gpt2_folder), TEXT, "--json", str(out), capsys=capsys)
    assert rc == 0, err
    data = json.loads(out.read_text())
    ids = torch.tensor([data["input_ids"]])
    ref = transformers.GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    with torch.no_grad():
        r = ref(input_ids=ids, output_attentions=True, output_hidden_states=True)
    ours = torch.tensor(data["attentions"], dtype=torch.float64)
    theirs = torch.stack([a[0] for a in r.attentions]).double()
    assert ours.shape == theirs.shape and (ours - theirs).abs().max() < 1e-5
    assert float(ours[0, 0].triu(1).abs().max()) == 0.0  # causal: nothing after the query token
    norms = torch.stack([h[0] for h in r.hidden_states]).double().norm(dim=-1)
    assert (torch.tensor(data["hidden_state_norms"]) - norms).abs().max() < 1e-4
    assert any("causal decoder" in n for n in data["notes"])


def test_electra_classifier_folder_explained_as_transformers_computes_it(electra_clf, tmp_path, capsys):
    """Attentions, hidden-state norms, embedding parts (at embedding_size, before embeddings_project)
    and the classifier's probabilities equal transformers' ElectraForSequenceClassification."""
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "r.json"
    rc, _, err = _run(
        "--model",
        str(electra_clf),
        TEXT,
        "--pair",
        PAIR,
        "--json",
        str(out),
        "--output",
        str(tmp_path / "r.html"),
        capsys=capsys,
    )
    assert rc == 0, err
    data = json.loads(out.read_text())
    assert data["model_class"] == "ElectraForSequenceClassification"
    enc = transformers.BertTokenizerFast.from_pretrained(electra_clf)(TEXT, PAIR, return_tensors="pt")
    assert data["input_ids"] == enc["input_ids"][0].tolist()
    assert data["token_type_ids"] == enc["token_type_ids"][0].tolist()
    ref = transformers.ElectraForSequenceClassification.from_pretrained(electra_clf, attn_implementation="eager").eval()
    with torch.no_grad():
        r = ref(**enc, output_attentions=True, output_hidden_states=True)
    ours = torch.tensor(data["attentions"], dtype=torch.float64)
    theirs = torch.stack([a[0] for a in r.attentions]).double()
    assert ours.shape == theirs.shape and (ours - theirs).abs().max() < 1e-5
    norms = torch.stack([h[0] for h in r.hidden_states]).double().norm(dim=-1)
    assert (torch.tensor(data["hidden_state_norms"]) - norms).abs().max() < 1e-4
    emb = ref.electra.embeddings
    want = {
        "word": emb.word_embeddings(enc["input_ids"]),
        "token_type": emb.token_type_embeddings(enc["token_type_ids"]),
        "position": emb.position_embeddings.weight[: enc["input_ids"].shape[1]][None],
    }
    for key, vec in want.items():  # 32 wide: the embedding size, not hidden_size
        assert vec.shape[-1] == 32
        assert (torch.tensor(data["embedding_parts"][key]) - vec[0].detach().norm(dim=-1)).abs().max() < 1e-5, key
    probs = r.logits[0].softmax(-1)
    got = {x["label"]: x["score"] for x in data["predictions"]["labels"]}
    assert abs(got["negative"] - float(probs[0])) < 1e-5 and abs(got["positive"] - float(probs[1])) < 1e-5
    assert any("embeddings_project" in n for n in data["notes"])
    # --verify rebuilds ELECTRA (embeddings_project, no pooler, the first-token classifier) from the raw weights
    rc, out, err = _run("--model", str(electra_clf), TEXT, "--pair", PAIR, "--verify", capsys=capsys)
    assert rc == 0, out + err
    lines = [line for line in out.splitlines() if "max|diff|" in line]
    assert lines and all(line.startswith("ok") for line in lines)
    assert any("embeddings_project(" in line for line in lines) and any("out_proj(gelu" in line for line in lines)


def test_electra_discriminator_and_generator_predictions_equal_transformers(tmp_path, capsys):
    """A discriminator folder shows, per token, the probability that it was replaced; a generator
    folder the masked-LM top tokens: both as transformers' ELECTRA classes compute them."""
    transformers = pytest.importorskip("transformers")
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    cfg = transformers.ElectraConfig(
        vocab_size=len(tok.vocab),
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
        initializer_range=0.2,
    )
    text = "The quick brown [MASK] jumps over the lazy dog."
    for name in ("ElectraForPreTraining", "ElectraForMaskedLM"):
        torch.manual_seed(0)
        getattr(transformers, name)(cfg).save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
        rc, printed, err = _run(
            "--model", str(tmp_path / name), text, "--json", str(tmp_path / f"{name}.json"), capsys=capsys
        )
        assert rc == 0, err
        data = json.loads((tmp_path / f"{name}.json").read_text())
        ref = getattr(transformers, name).from_pretrained(tmp_path / name).eval()
        with torch.no_grad():
            logits = ref(input_ids=torch.tensor([data["input_ids"]])).logits[0]
        pred = data["predictions"]
        if name == "ElectraForPreTraining":
            assert pred["kind"] == "replaced-token" and "replaced:" in printed
            got = torch.tensor([t["replaced"] for t in pred["tokens"]])
            assert (got - logits.sigmoid()).abs().max() < 1e-5
        else:
            assert pred["kind"] == "masked-lm" and len(pred["positions"]) == 1
            row = pred["positions"][0]
            vals, idx = logits[row["position"]].softmax(-1).topk(5)
            assert [t["id"] for t in row["top"]] == idx.tolist()
            assert max(abs(t["score"] - float(v)) for t, v in zip(row["top"], vals)) < 1e-5


def test_verify_on_a_gpt2_folder_is_refused_before_any_file_is_written(gpt2_folder, tmp_path, capsys):
    """It wrote the report and the JSON, then failed: a second run without --verify was then refused
    ("already exists"). Now nothing is written."""
    out, js = tmp_path / "g.html", tmp_path / "g.json"
    rc, _, err = _run(
        "--model", str(gpt2_folder), TEXT, "--verify", "--json", str(js), "--output", str(out), capsys=capsys
    )
    assert rc == 1 and "--verify rebuilds the forward pass of" in err
    assert not out.exists() and not js.exists()


def test_explaining_a_model_in_training_leaves_it_in_training(classifier):
    """A model looked at mid-training stayed in eval mode afterwards, its dropout silently off."""
    from bertkit import AutoModelForSequenceClassification, AutoTokenizer
    from bertkit.explain import explain

    model = AutoModelForSequenceClassification.from_pretrained(classifier).train()
    result = explain(
        model,
        "a warm and funny film .",
        tokenizer=AutoTokenizer.from_pretrained(classifier),
        attributions=["gradient-x-input"],
    )
    assert result.explanation is not None and model.training
    assert all(m.training for m in model.modules())
