"""BERT (and DistilBERT, ELECTRA, RoBERTa, XLM-RoBERTa) rebuilt by hand from raw weights, and checked.

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

DistilBERT and ELECTRA are the same equations under other names. DistilBERT has no token types and
no pooler, names its layer's parts ``q_lin``, ``sa_layer_norm``, ``ffn.lin1`` ..., and its
classifier reads the first token through ``pre_classifier`` and ReLU. ELECTRA's embeddings may be
narrower than the hidden size (``embeddings_project`` widens them); it has no pooler either, and its
heads are a replaced-token discriminator, a generator (masked LM) and a classifier of the first token.
RoBERTa and XLM-RoBERTa are BERT's layers with positions counted from ``pad_token_id + 1`` (fairseq's
numbering), one token type, a masked-LM head with exact GELU (``lm_head``) and a two-layer classifier
of the first token (``classifier.dense``, tanh, ``classifier.out_proj``). ModernBERT (rotary positions,
local attention, pre-norm, GeGLU) has its own rebuild in ``verify_modernbert.py``.

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
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "relu":
        return torch.clamp(x, min=0.0)
    raise ValueError(f"the from-scratch check knows hidden_act gelu, gelu_new and relu, not {name!r}")


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference between two tensors of the same shape."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: rebuilt {tuple(a.shape)} vs model {tuple(b.shape)}")
    return float((a.double() - b.double()).abs().max())


class Weights:
    """The checkpoint's tensors by name. Checkpoints of head models put the encoder under the family's
    name (``bert.``, ``distilbert.``, ``electra.``)."""

    def __init__(self, state: Mapping[str, torch.Tensor], prefix: str = "bert."):
        self.state = state
        self.keys = ("", prefix)

    def has(self, name: str) -> bool:
        return any(p + name in self.state for p in self.keys)

    def __call__(self, name: str) -> torch.Tensor:
        for p in self.keys:
            if p + name in self.state:
                return self.state[p + name].float()
        raise KeyError(f"the checkpoint has no tensor {name!r}")


# Where each family keeps the parts of one transformer layer (ELECTRA uses BERT's names).
LAYER_NAMES = {
    "bert": {
        "layer": "encoder.layer.{}.",
        "query": "attention.self.query",
        "key": "attention.self.key",
        "value": "attention.self.value",
        "attention_out": "attention.output.dense",
        "attention_norm": "attention.output.LayerNorm",
        "ffn_in": "intermediate.dense",
        "ffn_out": "output.dense",
        "output_norm": "output.LayerNorm",
    },
    "distilbert": {
        "layer": "transformer.layer.{}.",
        "query": "attention.q_lin",
        "key": "attention.k_lin",
        "value": "attention.v_lin",
        "attention_out": "attention.out_lin",
        "attention_norm": "sa_layer_norm",
        "ffn_in": "ffn.lin1",
        "ffn_out": "ffn.lin2",
        "output_norm": "output_layer_norm",
    },
}
FAMILIES = ("bert", "distilbert", "electra", "roberta", "xlm-roberta")
ROBERTA = ("roberta", "xlm-roberta")
# The name the encoder's tensors sit under in a head model's checkpoint (XLM-RoBERTa keeps RoBERTa's).
PREFIX = {"xlm-roberta": "roberta."}


@dataclass
class Dims:
    """What the rebuild reads from config.json, under one set of names for every family."""

    family: str
    hidden: int  # H
    heads: int  # h
    layers: int
    eps: float
    act: str
    pad: int = 0  # RoBERTa: pad_token_id, the position before the first token's

    @property
    def head_size(self) -> int:  # d
        return self.hidden // self.heads

    @classmethod
    def of(cls, config: Mapping) -> Dims:
        family = config.get("model_type", "bert")
        if family not in FAMILIES:
            raise ValueError(f"the from-scratch check rebuilds {', '.join(FAMILIES)}, not {family!r}")
        if family == "distilbert":  # DistilBERT's own config names; its LayerNorms use eps 1e-12
            return cls(
                family, config["dim"], config["n_heads"], config["n_layers"], 1e-12, config.get("activation", "gelu")
            )
        return cls(
            family,
            config["hidden_size"],
            config["num_attention_heads"],
            config["num_hidden_layers"],
            config.get("layer_norm_eps", 1e-12),
            config.get("hidden_act", "gelu"),
            config.get("pad_token_id", 0) if family in ROBERTA else 0,
        )


# ------------------------------------------------------------------------------ the forward pass, step by step


class Comparer:
    """Collects the checks: each rebuilt tensor against the model's own."""

    def __init__(self, tolerance: float):
        self.tolerance = tolerance
        self.checks: list[Check] = []

    def __call__(self, name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
        self.checks.append(Check(name, max_diff(ours, theirs.float()), self.tolerance))


def rebuild_embeddings(W: Weights, dims: Dims, input_ids: list[int], token_type_ids: list[int]) -> torch.Tensor:
    """1. Embeddings: lookup tables, one row each per token, summed, then LayerNorm: (N, H)."""
    ids = torch.tensor(input_ids)
    positions = torch.arange(len(input_ids))
    if dims.family in ROBERTA:  # real tokens count from pad + 1; a padding token sits at position pad
        is_token = (ids != dims.pad).long()
        positions = torch.cumsum(is_token, dim=0) * is_token + dims.pad
    x = W("embeddings.word_embeddings.weight")[ids] + W("embeddings.position_embeddings.weight")[positions]
    if dims.family != "distilbert":  # DistilBERT has no token types
        x = x + W("embeddings.token_type_embeddings.weight")[torch.tensor(token_type_ids)]
    x = layer_norm(x, W("embeddings.LayerNorm.weight"), W("embeddings.LayerNorm.bias"), dims.eps)
    if W.has("embeddings_project.weight"):  # ELECTRA: narrow embeddings widened to the hidden size
        x = linear(x, W("embeddings_project.weight"), W("embeddings_project.bias"))
    return x


def rebuild_layer(W: Weights, dims: Dims, layer: int, outputs: Mapping[str, object], check: Comparer) -> torch.Tensor:
    """2 and 3. One transformer layer from the model's own input to it, ``hidden_states[layer]``: (N, H)."""
    names = LAYER_NAMES.get(dims.family, LAYER_NAMES["bert"])
    p = names["layer"].format(layer)
    h, d = dims.heads, dims.head_size

    def lin(x: torch.Tensor, part: str) -> torch.Tensor:
        return linear(x, W(p + names[part] + ".weight"), W(p + names[part] + ".bias"))

    def norm(x: torch.Tensor, part: str) -> torch.Tensor:
        return layer_norm(x, W(p + names[part] + ".weight"), W(p + names[part] + ".bias"), dims.eps)

    x = outputs["hidden_states"][layer].float()
    attentions = outputs["attentions"]
    q, k, v = lin(x, "query"), lin(x, "key"), lin(x, "value")  # (N, H) each
    if outputs.get("queries") is not None:
        # The neuron view shows these per-head slices; they must be the checkpoint's projections.
        check(
            f"layer {layer}: neuron view queries = hidden_states[{layer}] W_q^T + b_q, split into heads",
            q.view(-1, h, d).transpose(0, 1),
            outputs["queries"][layer],
        )
        check(
            f"layer {layer}: neuron view keys = hidden_states[{layer}] W_k^T + b_k, split into heads",
            k.view(-1, h, d).transpose(0, 1),
            outputs["keys"][layer],
        )
        qk = outputs["queries"][layer].float() @ outputs["keys"][layer].float().transpose(-1, -2)
        check(
            f"layer {layer}: neuron view softmax(q . k / sqrt({d})) = attentions[{layer}]",
            softmax(qk / math.sqrt(d)),
            attentions[layer],
        )
    heads_out = []
    for head in range(h):
        cols = slice(head * d, (head + 1) * d)  # head `head` owns d consecutive columns of Q, K, V
        scores = q[:, cols] @ k[:, cols].T / math.sqrt(d)  # (N, N): how well token i's query fits token j's key
        probs = softmax(scores)  # each row sums to 1: token i's attention over all tokens
        check(
            f"layer {layer} head {head}: softmax(Q K^T / sqrt({d})) = attentions[{layer}][:, {head}]",
            probs,
            attentions[layer][head],
        )
        heads_out.append(probs @ v[:, cols])  # (N, d): a weighted average of the value vectors
    context = torch.cat(heads_out, dim=-1)  # (N, H): the heads side by side
    # Attention output: project, add the layer's input back (residual), LayerNorm.
    a = norm(lin(context, "attention_out") + x, "attention_norm")
    # Feed-forward: widen to the intermediate size, non-linearity, back to H, add & norm again.
    out = norm(lin(activation(lin(a, "ffn_in"), dims.act), "ffn_out") + a, "output_norm")
    check(
        f"layer {layer}: attention output, add & norm, feed-forward, add & norm = hidden_states[{layer + 1}]",
        out,
        outputs["hidden_states"][layer + 1],
    )
    return out


def _decoder(W: Weights, z: torch.Tensor, weight: str, bias: str) -> torch.Tensor:
    """The vocabulary decoder; it usually shares its weight with the word embeddings ("tied"), so
    checkpoints often leave it out."""
    dec = W(weight) if W.has(weight) else W("embeddings.word_embeddings.weight")
    return linear(z, dec, W(bias))


def rebuild_bert_heads(
    W: Weights, dims: Dims, last: torch.Tensor, outputs: Mapping[str, object], check: Comparer
) -> None:
    """4 and 5. BERT's pooler, masked-LM, next-sentence and classifier heads from the final vectors (N, H)."""
    # Pooler: only the [CLS] token's final vector, through one dense layer and tanh.
    pooled = None
    if outputs.get("pooler_output") is not None and W.has("pooler.dense.weight"):
        pooled = torch.tanh(linear(last[0], W("pooler.dense.weight"), W("pooler.dense.bias")))
        check("pooler: tanh(dense(h_[CLS])) = pooler_output", pooled, outputs["pooler_output"])
    if outputs.get("mlm_logits") is not None:
        t = "cls.predictions.transform."
        z = activation(linear(last, W(t + "dense.weight"), W(t + "dense.bias")), dims.act)
        z = layer_norm(z, W(t + "LayerNorm.weight"), W(t + "LayerNorm.bias"), dims.eps)
        # The decoder's bias is stored as cls.predictions.bias.
        bias = "cls.predictions.bias" if W.has("cls.predictions.bias") else "cls.predictions.decoder.bias"
        check(
            "masked LM: decoder(transform(h)) = logits",
            _decoder(W, z, "cls.predictions.decoder.weight", bias),
            outputs["mlm_logits"],
        )
    if outputs.get("nsp_logits") is not None and pooled is not None:
        nsp = linear(pooled, W("cls.seq_relationship.weight"), W("cls.seq_relationship.bias"))
        check("next sentence: seq_relationship(pooler_output) = logits", nsp, outputs["nsp_logits"])
    logits = outputs.get("classifier_logits")
    if logits is not None and logits.dim() == 1 and pooled is not None:  # sequence classifier: the pooled [CLS]
        check(
            "classifier: linear(pooler_output) = logits",
            linear(pooled, W("classifier.weight"), W("classifier.bias")),
            logits,
        )


def rebuild_distilbert_heads(
    W: Weights, dims: Dims, last: torch.Tensor, outputs: Mapping[str, object], check: Comparer
) -> None:
    """5. DistilBERT's heads: no pooler; the masked LM and the first token's pre_classifier."""
    if outputs.get("mlm_logits") is not None:
        z = activation(linear(last, W("vocab_transform.weight"), W("vocab_transform.bias")), dims.act)
        z = layer_norm(z, W("vocab_layer_norm.weight"), W("vocab_layer_norm.bias"), 1e-12)
        check(
            "masked LM: vocab_projector(LayerNorm(act(vocab_transform(h)))) = logits",
            _decoder(W, z, "vocab_projector.weight", "vocab_projector.bias"),
            outputs["mlm_logits"],
        )
    logits = outputs.get("classifier_logits")
    if logits is not None and logits.dim() == 1:
        pooled = torch.clamp(linear(last[0], W("pre_classifier.weight"), W("pre_classifier.bias")), min=0.0)
        check(
            "classifier: linear(relu(pre_classifier(h_[CLS]))) = logits",
            linear(pooled, W("classifier.weight"), W("classifier.bias")),
            logits,
        )


def rebuild_electra_heads(
    W: Weights, dims: Dims, last: torch.Tensor, outputs: Mapping[str, object], check: Comparer
) -> None:
    """5. ELECTRA's heads: no pooler; the generator, the discriminator, the first token's classifier."""
    if outputs.get("mlm_logits") is not None:  # the generator: its activation is GELU whatever hidden_act says
        z = activation(
            linear(last, W("generator_predictions.dense.weight"), W("generator_predictions.dense.bias")), "gelu"
        )
        z = layer_norm(
            z, W("generator_predictions.LayerNorm.weight"), W("generator_predictions.LayerNorm.bias"), dims.eps
        )
        check(
            "generator: lm_head(LayerNorm(gelu(dense(h)))) = logits",
            _decoder(W, z, "generator_lm_head.weight", "generator_lm_head.bias"),
            outputs["mlm_logits"],
        )
    if outputs.get("replaced_logits") is not None:
        t = "discriminator_predictions."
        z = activation(linear(last, W(t + "dense.weight"), W(t + "dense.bias")), dims.act)
        check(
            "discriminator: dense_prediction(act(dense(h))) = replaced-token logits",
            linear(z, W(t + "dense_prediction.weight"), W(t + "dense_prediction.bias"))[:, 0],
            outputs["replaced_logits"],
        )
    logits = outputs.get("classifier_logits")
    if logits is not None and logits.dim() == 1:
        z = activation(linear(last[0], W("classifier.dense.weight"), W("classifier.dense.bias")), "gelu")
        check(
            "classifier: out_proj(gelu(dense(h_[CLS]))) = logits",
            linear(z, W("classifier.out_proj.weight"), W("classifier.out_proj.bias")),
            logits,
        )


def rebuild_roberta_heads(
    W: Weights, dims: Dims, last: torch.Tensor, outputs: Mapping[str, object], check: Comparer
) -> None:
    """4 and 5. RoBERTa's pooler (bare model only), masked-LM head and first-token classifier."""
    if outputs.get("pooler_output") is not None and W.has("pooler.dense.weight"):
        pooled = torch.tanh(linear(last[0], W("pooler.dense.weight"), W("pooler.dense.bias")))
        check("pooler: tanh(dense(h_<s>)) = pooler_output", pooled, outputs["pooler_output"])
    if outputs.get("mlm_logits") is not None:  # exact GELU whatever hidden_act says
        z = activation(linear(last, W("lm_head.dense.weight"), W("lm_head.dense.bias")), "gelu")
        z = layer_norm(z, W("lm_head.layer_norm.weight"), W("lm_head.layer_norm.bias"), dims.eps)
        bias = "lm_head.bias" if W.has("lm_head.bias") else "lm_head.decoder.bias"
        check(
            "masked LM: decoder(LayerNorm(gelu(dense(h)))) = logits",
            _decoder(W, z, "lm_head.decoder.weight", bias),
            outputs["mlm_logits"],
        )
    logits = outputs.get("classifier_logits")
    if logits is not None and logits.dim() == 1:
        z = torch.tanh(linear(last[0], W("classifier.dense.weight"), W("classifier.dense.bias")))
        check(
            "classifier: out_proj(tanh(dense(h_<s>))) = logits",
            linear(z, W("classifier.out_proj.weight"), W("classifier.out_proj.bias")),
            logits,
        )


_HEADS = {
    "bert": rebuild_bert_heads,
    "distilbert": rebuild_distilbert_heads,
    "electra": rebuild_electra_heads,
    "roberta": rebuild_roberta_heads,
    "xlm-roberta": rebuild_roberta_heads,
}


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
    ``qa_logits`` (N, 2), ``replaced_logits`` (N,), ``nsp_logits`` (2,), and the neuron view's
    ``queries`` and ``keys`` (L of (h, N, d)).
    """
    dims = Dims.of(config)
    W = Weights(state, PREFIX.get(dims.family, dims.family + "."))
    check = Comparer(tolerance)
    x = rebuild_embeddings(W, dims, input_ids, token_type_ids)
    what = "LayerNorm(word + position)" if dims.family == "distilbert" else "LayerNorm(word + position + token_type)"
    if dims.family in ROBERTA:
        what = f"LayerNorm(word + position from {dims.pad + 1} + token_type)"
    if W.has("embeddings_project.weight"):
        what = f"embeddings_project({what})"
    check(f"embeddings: {what} = hidden_states[0]", x, model_outputs["hidden_states"][0])
    for layer in range(dims.layers):
        rebuild_layer(W, dims, layer, model_outputs, check)
    last = model_outputs["hidden_states"][-1].float()  # (N, H)
    _HEADS[dims.family](W, dims, last, model_outputs, check)
    logits = model_outputs.get("classifier_logits")
    if logits is not None and logits.dim() == 2:  # token classifier: every token's final vector
        check(
            "token classifier: linear(h) = logits", linear(last, W("classifier.weight"), W("classifier.bias")), logits
        )
    if model_outputs.get("qa_logits") is not None:  # QA: a start and an end logit per token
        check(
            "question answering: qa_outputs(h) = start and end logits",
            linear(last, W("qa_outputs.weight"), W("qa_outputs.bias")),
            model_outputs["qa_logits"],
        )
    return check.checks
