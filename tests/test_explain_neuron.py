"""The neuron view's numbers: the queries and keys `bertkit explain --json` writes make transformers' attention.

softmax(q kᵀ / sqrt(d) + mask), from the JSON's per-head queries and keys of the kept layers alone,
equals transformers' eager attentions on the real MiniLM checkpoint; the mask is real (a padded
batch in transformers, -inf on the padded keys here).
"""

from __future__ import annotations

import json

import pytest
import torch

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main
from bertkit.explain.neuron import attention_from_qk

TEXT = "The quick brown fox jumps over the lazy dog."
PAIR = "Foxes are members of the dog family."


def test_queries_and_keys_reproduce_transformers_eager_attentions(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    minilm = asset_path("minilm")
    out = tmp_path / "r.json"
    assert (
        cli_main(["explain", "--model", str(minilm), TEXT, "--pair", PAIR, "--layers", "1,4,5", "--json", str(out)])
        == 0
    ), capsys.readouterr().err
    data = json.loads(out.read_text())
    neuron = data["neuron"]
    assert neuron["layers"] == [1, 4, 5] and neuron["head_size"] == 32
    q = torch.tensor(neuron["queries"], dtype=torch.float64)  # (3, 12, N, 32)
    k = torch.tensor(neuron["keys"], dtype=torch.float64)
    n = len(data["tokens"])
    assert q.shape == k.shape == (3, 12, n, 32)

    tok = transformers.BertTokenizerFast.from_pretrained(minilm)
    # a batch with a longer second row pads ours: the mask must keep the padded keys out
    enc = tok([TEXT, TEXT + " " + PAIR + " " + PAIR], [PAIR, PAIR], return_tensors="pt", padding=True)
    assert enc["input_ids"][0, :n].tolist() == data["input_ids"] and enc["attention_mask"][0, n:].eq(0).all()
    ref = transformers.BertModel.from_pretrained(minilm, attn_implementation="eager").eval()
    with torch.no_grad():
        atts = ref(**enc, output_attentions=True).attentions
    pad = enc["input_ids"].shape[1]
    mask = torch.zeros(pad, dtype=torch.float64)
    mask[n:] = float("-inf")
    qp = torch.zeros(3, 12, pad, 32, dtype=torch.float64)
    kp = torch.zeros_like(qp)
    qp[:, :, :n], kp[:, :, :n] = q, k  # padded positions' vectors do not matter once masked
    ours = attention_from_qk(qp, kp, mask)[:, :, :n]  # the real query rows
    theirs = torch.stack([atts[i][0, :, :n] for i in (1, 4, 5)]).double()
    assert (ours - theirs).abs().max() < 1e-5
    assert (ours[..., n:] == 0).all()
    assert (ours[..., :n] - torch.tensor(data["attentions"], dtype=torch.float64)).abs().max() < 1e-5


def test_heads_filter_keeps_the_named_heads_and_rejects_out_of_range(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    minilm = asset_path("minilm")
    out = tmp_path / "r.json"
    assert (
        cli_main(["explain", "--model", str(minilm), TEXT, "--layers", "2", "--heads", "3,7-8", "--json", str(out)])
        == 0
    ), capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["heads"] == [3, 7, 8] and data["layers"] == [2]
    tok = transformers.BertTokenizerFast.from_pretrained(minilm)
    ref = transformers.BertModel.from_pretrained(minilm, attn_implementation="eager").eval()
    with torch.no_grad():
        theirs = ref(**tok(TEXT, return_tensors="pt"), output_attentions=True).attentions[2][0, [3, 7, 8]].double()
    assert (torch.tensor(data["attentions"][0], dtype=torch.float64) - theirs).abs().max() < 1e-5
    q, k = (torch.tensor(data["neuron"][n][0]) for n in ("queries", "keys"))
    assert (attention_from_qk(q, k) - theirs).abs().max() < 1e-5
    assert len(data["head_summaries"]["cls"][0]) == 3
    capsys.readouterr()
    out2 = tmp_path / "r2.json"
    assert cli_main(["explain", "--model", str(minilm), TEXT, "--heads", "11-12", "--json", str(out2)]) == 1
    err = capsys.readouterr().err
    assert "--heads: '11-12' is outside the model's heads 0-11" in err and "Traceback" not in err
