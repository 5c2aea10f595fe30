"""BERT rebuilt by hand from its raw weights, and checked against the model's own outputs.

This file is meant to be read. It takes the weights exactly as the checkpoint file stores them (a
dict of name -> tensor) and redoes every step of a BERT forward pass with plain tensor code:
matrix products, a softmax and a LayerNorm written out, nothing from ``torch.nn`` or from bertkit's
model classes. Then it compares each step with what the real model produced:

1. embeddings: LayerNorm(word + position + token type) = ``hidden_states[0]``
2. every layer and head: softmax(Q Kᵀ / √d) = ``attentions[l][:, h]``
3. every layer: attention output, add & norm, feed-forward, add & norm = ``hidden_states[l + 1]``
4. pooler: tanh(dense(h_[CLS])) = ``pooler_output``
5. heads: the masked-LM transform and decoder = the MLM logits; a classifier = its logits

Each step starts from the model's own input to that step (``hidden_states[l]`` for layer ``l``), so
a fault shows up in the one step that has it instead of in every step after it. If every check
passes, the model is nothing but these equations.

Shapes: N tokens, H hidden size, h heads, d = H / h.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

__all__ = ["TOLERANCE", "Check", "rebuild_and_compare"]

# float32 arithmetic done in a different order differs around 1e-6; a real fault is far larger.
TOLERANCE = 1e-5


@dataclass
class Check:
    """One comparison: what was rebuilt, and the largest absolute difference from the model."""

    name: str
    max_diff: float
    tolerance: float = TOLERANCE

    @property
    def ok(self) -> bool:
        return self.max_diff <= self.tolerance  # NaN compares False, so a NaN fails

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  max|diff| {self.max_diff:.2e}  {self.name}"


# ------------------------------------------------------------------------------ the building blocks


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """What a Linear layer computes: y = x Wᵀ + b (PyTorch stores W as (out, in), hence the transpose)."""
    return x @ weight.T + bias


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalise each token's vector to mean 0 and variance 1, then scale and shift it."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # the biased variance, as LayerNorm uses
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def softmax(x: torch.Tensor) -> torch.Tensor:
    """exp(x) / sum(exp(x)) over the last axis; subtracting the max first avoids overflow."""
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def activation(x: torch.Tensor, name: str) -> torch.Tensor:
    """The feed-forward non-linearity named by config.json's ``hidden_act``."""
    if name == "gelu":  # the exact GELU: x * Φ(x), with Φ the normal CDF
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_fast", "gelu_pytorch_tanh"):  # the tanh approximation of GELU
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return torch.clamp(x, min=0.0)
    raise ValueError(f"the from-scratch check knows hidden_act gelu, gelu_new and relu, not {name!r}")


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference between two tensors of the same shape."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: rebuilt {tuple(a.shape)} vs model {tuple(b.shape)}")
    return float((a.double() - b.double()).abs().max())


class Weights:
    """The checkpoint's tensors by name. Checkpoints of head models put the encoder under ``bert.``."""

    def __init__(self, state: Mapping[str, torch.Tensor]):
        self.state = state

    def has(self, name: str) -> bool:
        return name in self.state or "bert." + name in self.state

    def __call__(self, name: str) -> torch.Tensor:
        for key in (name, "bert." + name):
            if key in self.state:
                return self.state[key].float()
        raise KeyError(f"the checkpoint has no tensor {name!r}")


# ------------------------------------------------------------------------------ the forward pass, step by step


def rebuild_and_compare(
    state: Mapping[str, torch.Tensor],  # the raw checkpoint tensors
    config: Mapping,  # config.json as a dict
    input_ids: list[int],  # (N,) one sequence, no padding
    token_type_ids: list[int],  # (N,)
    model_outputs: Mapping[str, object],  # what the real model returned (see below)
    tolerance: float = TOLERANCE,
) -> list[Check]:
    """Redo the forward pass from ``state`` and compare each step with ``model_outputs``.

    ``model_outputs`` holds ``hidden_states`` (L + 1 tensors of (N, H)), ``attentions`` (L tensors of
    (h, N, N)), and when the model has them ``pooler_output`` (H,), ``mlm_logits`` (N, V),
    ``classifier_logits`` ((labels,) for a sequence classifier, (N, labels) for a token classifier),
    ``nsp_logits`` (2,), and the neuron view's ``queries`` and ``keys`` (L of (h, N, d)).
    """
    W = Weights(state)
    H = config["hidden_size"]
    h = config["num_attention_heads"]
    d = H // h
    eps = config.get("layer_norm_eps", 1e-12)
    act = config.get("hidden_act", "gelu")
    hidden_states = model_outputs["hidden_states"]
    attentions = model_outputs["attentions"]
    checks: list[Check] = []

    def check(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
        checks.append(Check(name, max_diff(ours, theirs.float()), tolerance))

    # 1. Embeddings: three lookup tables, one row each per token, summed, then LayerNorm.
    ids = torch.tensor(input_ids)
    types = torch.tensor(token_type_ids)
    positions = torch.arange(len(input_ids))
    word = W("embeddings.word_embeddings.weight")[ids]  # (N, H)
    position = W("embeddings.position_embeddings.weight")[positions]  # (N, H)
    token_type = W("embeddings.token_type_embeddings.weight")[types]  # (N, H)
    x = word + token_type + position
    x = layer_norm(x, W("embeddings.LayerNorm.weight"), W("embeddings.LayerNorm.bias"), eps)
    check("embeddings: LayerNorm(word + position + token_type) = hidden_states[0]", x, hidden_states[0])

    # 2 and 3. Each transformer layer.
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        x = hidden_states[layer].float()  # the model's input to this layer
        q = linear(x, W(p + "attention.self.query.weight"), W(p + "attention.self.query.bias"))  # (N, H)
        k = linear(x, W(p + "attention.self.key.weight"), W(p + "attention.self.key.bias"))
        v = linear(x, W(p + "attention.self.value.weight"), W(p + "attention.self.value.bias"))
        if model_outputs.get("queries") is not None:
            # The neuron view shows these per-head slices; they must be the checkpoint's projections.
            check(f"layer {layer}: neuron view queries = hidden_states[{layer}] W_q^T + b_q, split into heads",
                  q.view(-1, h, d).transpose(0, 1), model_outputs["queries"][layer])
            check(f"layer {layer}: neuron view keys = hidden_states[{layer}] W_k^T + b_k, split into heads",
                  k.view(-1, h, d).transpose(0, 1), model_outputs["keys"][layer])
            qk = model_outputs["queries"][layer].float() @ model_outputs["keys"][layer].float().transpose(-1, -2)
            check(f"layer {layer}: neuron view softmax(q . k / sqrt({d})) = attentions[{layer}]",
                  softmax(qk / math.sqrt(d)), attentions[layer])
        heads_out = []
        for head in range(h):
            cols = slice(head * d, (head + 1) * d)  # head `head` owns d consecutive columns of Q, K, V
            scores = q[:, cols] @ k[:, cols].T / math.sqrt(d)  # (N, N): how well token i's query fits token j's key
            probs = softmax(scores)  # each row sums to 1: token i's attention over all tokens
            check(f"layer {layer} head {head}: softmax(Q K^T / sqrt({d})) = attentions[{layer}][:, {head}]",
                  probs, attentions[layer][head])
            heads_out.append(probs @ v[:, cols])  # (N, d): a weighted average of the value vectors
        context = torch.cat(heads_out, dim=-1)  # (N, H): the heads side by side
        # Attention output: project, add the layer's input back (residual), LayerNorm.
        a = linear(context, W(p + "attention.output.dense.weight"), W(p + "attention.output.dense.bias"))
        a = layer_norm(a + x, W(p + "attention.output.LayerNorm.weight"), W(p + "attention.output.LayerNorm.bias"), eps)
        # Feed-forward: widen to the intermediate size, non-linearity, back to H, add & norm again.
        f = activation(linear(a, W(p + "intermediate.dense.weight"), W(p + "intermediate.dense.bias")), act)
        f = linear(f, W(p + "output.dense.weight"), W(p + "output.dense.bias"))
        out = layer_norm(f + a, W(p + "output.LayerNorm.weight"), W(p + "output.LayerNorm.bias"), eps)
        check(f"layer {layer}: attention output, add & norm, feed-forward, add & norm = hidden_states[{layer + 1}]",
              out, hidden_states[layer + 1])

    last = hidden_states[-1].float()  # (N, H)

    # 4. Pooler: only the [CLS] token's final vector, through one dense layer and tanh.
    pooled = None
    if model_outputs.get("pooler_output") is not None and W.has("pooler.dense.weight"):
        pooled = torch.tanh(linear(last[0], W("pooler.dense.weight"), W("pooler.dense.bias")))
        check("pooler: tanh(dense(h_[CLS])) = pooler_output", pooled, model_outputs["pooler_output"])

    # 5. Heads.
    if model_outputs.get("mlm_logits") is not None:
        t = "cls.predictions.transform."
        z = activation(linear(last, W(t + "dense.weight"), W(t + "dense.bias")), act)
        z = layer_norm(z, W(t + "LayerNorm.weight"), W(t + "LayerNorm.bias"), eps)
        # The decoder usually shares its weight with the word embeddings ("tied"), so checkpoints
        # often leave it out; its bias is stored as cls.predictions.bias.
        dec = (W("cls.predictions.decoder.weight") if W.has("cls.predictions.decoder.weight")
               else W("embeddings.word_embeddings.weight"))
        bias = W("cls.predictions.bias") if W.has("cls.predictions.bias") else W("cls.predictions.decoder.bias")
        check("masked LM: decoder(transform(h)) = logits", linear(z, dec, bias), model_outputs["mlm_logits"])
    if model_outputs.get("nsp_logits") is not None and pooled is not None:
        nsp = linear(pooled, W("cls.seq_relationship.weight"), W("cls.seq_relationship.bias"))
        check("next sentence: seq_relationship(pooler_output) = logits", nsp, model_outputs["nsp_logits"])
    logits = model_outputs.get("classifier_logits")
    if logits is not None:
        if logits.dim() == 1 and pooled is not None:  # sequence classifier: reads the pooled [CLS]
            ours = linear(pooled, W("classifier.weight"), W("classifier.bias"))
            check("classifier: linear(pooler_output) = logits", ours, logits)
        elif logits.dim() == 2:  # token classifier: every token's final vector
            ours = linear(last, W("classifier.weight"), W("classifier.bias"))
            check("token classifier: linear(h) = logits", ours, logits)
    return checks
