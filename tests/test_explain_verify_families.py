"""`bertkit explain --verify` on ModernBERT, RoBERTa and XLM-RoBERTa folders that transformers saved.

Tiny models with seeded random weights and the real MiniLM WordPiece vocabulary. Two references:

* the rebuild from the raw weights (``verify_modernbert.py``, ``from_scratch.py``) fed transformers'
  own eager hidden states and attentions agrees with them step by step within 1e-5 (float32 both
  sides, different kernels; measured differences are around 1e-6);
* ``verify`` on the folder (the rebuild against bertkit's model) passes every check, with each head's
  own, and fails, naming the layer, when one weight of the model in memory differs from the file.

The ModernBERT texts are longer than its local window (4 tokens each side), so the local layer's
band and its own rotary base are exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertkit.assets import asset_path

transformers = pytest.importorskip("transformers")

TEXT = "Where was Ada Lovelace born?"
PAIR = "Ada Lovelace was born in London in 1815."
TOL = 1e-5
LABELS = dict(num_labels=3, id2label={0: "neg", 1: "mid", 2: "pos"}, label2id={"neg": 0, "mid": 1, "pos": 2})


@pytest.fixture(scope="module")
def tok():
    from bertkit.tokenization import BertTokenizer

    return BertTokenizer.from_pretrained(asset_path("minilm"))


def _modernbert_cfg(tok, **kw):
    # layers 0 and 2 global (theta 160k), layer 1 local (window 4 each side, theta 10k)
    return transformers.ModernBertConfig(
        vocab_size=len(tok.vocab),
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=64,
        local_attention=8,
        global_attn_every_n_layers=2,
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
        cls_token_id=101,
        sep_token_id=102,
        initializer_range=0.2,
        **kw,
    )


def _roberta_cfg(tok, xlm=False, **kw):
    kw.setdefault("max_position_embeddings", 65)
    cls = transformers.XLMRobertaConfig if xlm else transformers.RobertaConfig
    return cls(
        vocab_size=len(tok.vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
        initializer_range=0.1,
        **kw,
    )


def _save(root: Path, cls_name: str, cfg, tok) -> Path:
    torch.manual_seed(0)
    folder = root / cls_name
    getattr(transformers, cls_name)(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _reference_outputs(folder: Path, cls_name: str, ids: list[int]) -> dict:
    """transformers' eager hidden states and attentions of ``cls_name`` on ``ids``, one sequence."""
    ref = getattr(transformers, cls_name).from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        out = ref(input_ids=torch.tensor([ids]), output_hidden_states=True, output_attentions=True)
    return {"hidden_states": [h[0] for h in out.hidden_states], "attentions": [a[0] for a in out.attentions]}


def _raw(folder: Path) -> tuple[dict, dict]:
    from bertkit.checkpoint import find_weights_file, load_state_dict

    return load_state_dict(find_weights_file(folder)), json.loads((folder / "config.json").read_text())


def _ids(tok, text=TEXT, pair=PAIR) -> list[int]:
    return tok(text, pair)["input_ids"]


# ------------------------------------------------------------------------------ ModernBERT

MODERNBERT_HEADS = {
    "ModernBertForMaskedLM": "masked LM: decoder(head(h))",
    "ModernBertForSequenceClassification": "classifier: classifier(head(mean(h)))",
    "ModernBertForTokenClassification": "token classifier",
    "ModernBertForQuestionAnswering": "question answering",
}


def test_modernbert_rebuild_agrees_with_transformers(tmp_path, tok):
    """RoPE, the local band, pre-norm, GeGLU and final_norm rebuilt from the raw weights equal transformers'
    eager ModernBertModel on every hidden state and attention row."""
    from bertkit.explain.verify_modernbert import rebuild_and_compare_modernbert

    folder = _save(tmp_path, "ModernBertModel", _modernbert_cfg(tok), tok)
    ids = _ids(tok)
    assert len(ids) > 2 * 4 + 1  # longer than the local window
    ref = _reference_outputs(folder, "ModernBertModel", ids)
    local = ref["attentions"][1]
    assert (local[:, 0, 5:] == 0).all() and (local[:, 0, :5] > 0).all()  # transformers' band: |i - j| <= 4
    checks = rebuild_and_compare_modernbert(*_raw(folder), ids, ref, tolerance=TOL)
    assert len(checks) == 1 + 3 * 4 + 3
    assert all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
    assert "local (|i - j| <= 4)" in checks[1 + 5].name and "final_norm" in checks[-1].name
    # The original config.json layout (ModernBERT-base's own) names the same model.
    state, config = _raw(folder)
    old = {k: v for k, v in config.items() if k not in ("layer_types", "rope_parameters")}
    old.update(global_rope_theta=160000.0, local_rope_theta=10000.0, global_attn_every_n_layers=2)
    assert all(c.ok for c in rebuild_and_compare_modernbert(state, old, ids, ref, tolerance=TOL))
    # Each layer's rotary base matters: with the two swapped, every attention row of every layer is off.
    old.update(global_rope_theta=10000.0, local_rope_theta=160000.0)
    bad = [c.name for c in rebuild_and_compare_modernbert(state, old, ids, ref, tolerance=TOL) if not c.ok]
    assert sum("head" in name for name in bad) == 3 * 4


def test_verify_modernbert_heads_pass_and_a_corrupted_weight_fails(tmp_path, tok):
    from bertkit.explain import load_model, verify

    for cls_name, head in MODERNBERT_HEADS.items():
        extra = dict(classifier_pooling="mean", **LABELS) if "Sequence" in cls_name else {}
        folder = _save(tmp_path, cls_name, _modernbert_cfg(tok, **extra), tok)
        checks = verify(folder, TEXT, PAIR)
        assert all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
        assert any(c.name.startswith(head) for c in checks), (cls_name, [c.name for c in checks][-2:])
    model, t, _ = load_model(folder)
    with torch.no_grad():  # one weight of the local layer's GeGLU input
        model.model.layers[1].mlp.Wi.weight[40, 5] += 0.5
    bad = [c.name for c in verify(folder, TEXT, PAIR, model=model, tokenizer=t) if not c.ok]
    assert bad == ["layer 1: x + attn(attn_norm(x)), then + Wo(gelu(Wi_1) * Wi_2) = hidden_states[2]"]
    model, t, _ = load_model(folder)
    with torch.no_grad():  # a key weight of head 2 in the last (global) layer
        model.model.layers[2].attn.Wqkv.weight[32 + 2 * 8 + 1, 3] += 0.5
    bad = [c.name for c in verify(folder, TEXT, PAIR, model=model, tokenizer=t) if not c.ok]
    assert bad and bad[0].startswith("layer 2 head 2: global softmax") and all("layer 2" in b for b in bad)


def test_cli_verify_on_modernbert_reports_and_exits_1_on_a_fault(tmp_path, tok, capsys, monkeypatch):
    from bertkit.cli import main as cli_main

    folder = _save(tmp_path, "ModernBertForMaskedLM", _modernbert_cfg(tok), tok)
    rc = cli_main(["explain", "--model", str(folder), TEXT, "--pair", PAIR, "--verify"])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    lines = [line for line in out.splitlines() if "max|diff|" in line]
    assert len(lines) == 1 + 3 * 4 + 3 + 1 and all(line.startswith("ok") for line in lines)
    assert "17 of 17 checks within 1e-05" in out
    # A model that is not the file's: the fault is injected in the loaded model, the check is the real one.
    from bertkit.explain import api

    real = api.load_model

    def corrupted(path):
        model, t, f = real(path)
        with torch.no_grad():
            model.model.final_norm.weight[7] += 0.5
        return model, t, f

    monkeypatch.setattr(api, "load_model", corrupted)
    rc = cli_main(["explain", "--model", str(folder), TEXT, "--verify"])
    out, err = capsys.readouterr()
    assert rc == 1 and "Traceback" not in err
    assert "16 of 17 checks within 1e-05; FAILED: layer 2: final_norm(" in out


# ------------------------------------------------------------------------------ RoBERTa and XLM-RoBERTa


@pytest.mark.parametrize("xlm", [False, True], ids=["roberta", "xlm-roberta"])
def test_roberta_rebuild_agrees_with_transformers_and_verify_passes(tmp_path, tok, xlm):
    """Positions from pad_token_id + 1, the lm_head and the first-token classifier."""
    from bertkit.explain import load_model, verify
    from bertkit.explain.from_scratch import rebuild_and_compare

    prefix = "XLMRoberta" if xlm else "Roberta"
    folder = _save(tmp_path, f"{prefix}Model", _roberta_cfg(tok, xlm), tok)
    ids = _ids(tok)
    ref = _reference_outputs(folder, f"{prefix}Model", ids)
    checks = rebuild_and_compare(*_raw(folder), ids, [0] * len(ids), ref, tolerance=TOL)
    assert checks[0].name == "embeddings: LayerNorm(word + position from 1 + token_type) = hidden_states[0]"
    assert len(checks) == 1 + 2 * 4 + 2 and all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
    names = [c.name for c in verify(folder, TEXT, PAIR)]
    assert names[-1].startswith("pooler") and len(names) == len(checks) + 2 * 3 + 1
    heads = {"ForMaskedLM": "masked LM: decoder(LayerNorm(gelu", "ForSequenceClassification": "classifier: out_proj"}
    for suffix, head in heads.items():
        cfg = _roberta_cfg(tok, xlm, **(LABELS if "Sequence" in suffix else {}))
        folder = _save(tmp_path, prefix + suffix, cfg, tok)
        checks = verify(folder, TEXT, PAIR)
        assert all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
        assert checks[-1].name.startswith(head)
    model, t, _ = load_model(folder)
    with torch.no_grad():
        model.roberta.embeddings.position_embeddings.weight[3, 2] += 0.5  # the third token's position row
    bad = [c.name for c in verify(folder, TEXT, model=model, tokenizer=t) if not c.ok]
    assert bad == ["embeddings: LayerNorm(word + position from 1 + token_type) = hidden_states[0]"]


def test_roberta_text_longer_than_its_positions_is_truncated_to_them_and_verified(tmp_path, tok):
    """With pad_token_id 1 a 34-row table holds positions 2-33: 32 tokens, not 34 (explain used to pass 34
    tokens and the model refused them)."""
    from bertkit.explain import explain

    cfg = _roberta_cfg(tok, max_position_embeddings=34)
    cfg.pad_token_id = 1
    folder = _save(tmp_path, "RobertaForMaskedLM", cfg, tok)
    res = explain(folder, " ".join(["word"] * 40), verify_weights=True, json_path=tmp_path / "r.json")
    assert len(res.explanation.input_ids) == 32 and any("truncated to 32" in n for n in res.explanation.notes)
    assert res.checks[0].name.startswith("embeddings: LayerNorm(word + position from 2 + token_type)")
    assert all(c.ok for c in res.checks), [c.line() for c in res.checks if not c.ok]
