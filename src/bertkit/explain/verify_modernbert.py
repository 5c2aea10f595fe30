"""ModernBERT rebuilt by hand from raw weights, and checked against the model's outputs.

The companion of ``from_scratch.py`` (BERT), meant to be read the same way: it takes the tensors as the
checkpoint file stores them and redoes the forward pass with plain tensor code (its matrix products,
softmax and LayerNorm are ``from_scratch.py``'s), nothing from ``torch.nn`` or from bertkit's ModernBERT
classes. What differs from BERT is written out here:

* **Rotary positions**: no position table. Dimension i of a head's query and key pairs with dimension
  i + d/2, and position p turns each pair by the angle p * theta^(-2i/d). Global layers use
  ``global_rope_theta``, local layers ``local_rope_theta``.
* **Local attention**: only every ``global_attn_every_n_layers``-th layer (layer % n == 0) sees the
  whole text; the others see the tokens within W = ``local_attention`` / 2 on each side.
* **Pre-norm**: ``x + attn(attn_norm(x))``, then ``x + mlp(mlp_norm(x))``; layer 0 has no
  ``attn_norm`` (the embeddings end in a LayerNorm), and ``final_norm`` follows the last layer.
* **GeGLU**: ``Wi`` widens to 2I; the first half goes through GELU and multiplies the second half.
* **No biases** where config.json says so (``attention_bias``, ``mlp_bias``, ``norm_bias``).

The checks, each from the model's own input to that step:

1. embeddings: LayerNorm(tok_embeddings[ids]) = ``hidden_states[0]``
2. every layer and head: softmax(rot(Q) rot(K)ᵀ / √d, outside the window -inf) = ``attentions[l][:, h]``
3. every layer: the pre-norm block = ``hidden_states[l + 1]`` (the last one through ``final_norm``)
4. heads: ``head`` (dense, activation, LayerNorm) then the decoder (masked LM) or ``classifier``

Shapes: N tokens, H hidden size, h heads, d = H / h, I intermediate size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .from_scratch import TOLERANCE, Check, Comparer, Weights, activation, layer_norm, softmax

__all__ = ["rebuild_and_compare_modernbert"]


@dataclass
class ModernDims:
    """What the rebuild reads from config.json (either of its two layouts)."""

    hidden: int  # H
    heads: int  # h
    layers: int
    intermediate: int  # I
    eps: float
    act: str  # the feed-forward's GELU
    head_act: str  # the prediction head's
    is_global: list[bool]  # per layer
    window: int  # W: a local layer's token sees |i - j| <= W
    global_theta: float
    local_theta: float
    pooling: str  # a sequence classifier reads the first token ("cls") or the mean ("mean")

    @property
    def head_size(self) -> int:  # d
        return self.hidden // self.heads

    @classmethod
    def of(cls, config: Mapping) -> ModernDims:
        layers = config["num_hidden_layers"]
        if config.get("layer_types"):  # transformers' newer layout names each layer's kind
            is_global = [kind == "full_attention" for kind in config["layer_types"]]
        else:
            n = max(1, config.get("global_attn_every_n_layers", 3))
            is_global = [layer % n == 0 for layer in range(layers)]
        rope = config.get("rope_parameters") or {}
        thetas = {}
        for kind, name, default in (
            ("full_attention", "global_rope_theta", 160000.0),
            ("sliding_attention", "local_rope_theta", 10000.0),
        ):
            params = rope.get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise ValueError(f"the from-scratch check rebuilds the default rotary embedding, not {params!r}")
            thetas[name] = float(params.get("rope_theta") or config.get(name) or default)
        return cls(
            config["hidden_size"],
            config["num_attention_heads"],
            layers,
            config["intermediate_size"],
            config.get("norm_eps", 1e-5),
            config.get("hidden_activation", "gelu"),
            config.get("classifier_activation", "gelu"),
            is_global,
            config.get("local_attention", 128) // 2,
            thetas["global_rope_theta"],
            thetas["local_rope_theta"],
            config.get("classifier_pooling", "cls"),
        )


# ------------------------------------------------------------------------------ the building blocks


def lin(W: Weights, x: torch.Tensor, name: str) -> torch.Tensor:
    """x Wᵀ (+ b when the checkpoint has a bias: ModernBERT's layers usually have none)."""
    y = x @ W(name + ".weight").T
    return y + W(name + ".bias") if W.has(name + ".bias") else y


def norm(W: Weights, x: torch.Tensor, name: str, eps: float) -> torch.Tensor:
    """LayerNorm; without a stored bias (``norm_bias`` false) the shift is zero."""
    weight = W(name + ".weight")
    bias = W(name + ".bias") if W.has(name + ".bias") else torch.zeros_like(weight)
    return layer_norm(x, weight, bias, eps)


def rotate(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary positions on one head's queries or keys (N, d): token p turns the pair (x_i, x_{i + d/2})
    by the angle p * theta^(-2i/d), so q_m . k_n depends on m - n only."""
    n, d = x.shape
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)  # (d/2,): slower for larger i
    angles = torch.arange(n, dtype=torch.float32)[:, None] * inv_freq[None, :]  # (N, d/2)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[:, : d // 2], x[:, d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


# ------------------------------------------------------------------------------ the forward pass, step by step


def rebuild_layer(
    W: Weights, dims: ModernDims, layer: int, outputs: Mapping[str, object], check: Comparer
) -> torch.Tensor:
    """2 and 3. One pre-norm layer from the model's own input to it, ``hidden_states[layer]``: (N, H)."""
    p = f"layers.{layer}."
    H, h, d = dims.hidden, dims.heads, dims.head_size
    x = outputs["hidden_states"][layer].float()
    n = x.shape[0]
    # Attention on the normalised input (layer 0's input is the embeddings' LayerNorm already).
    a_in = x if layer == 0 else norm(W, x, p + "attn_norm", dims.eps)
    qkv = lin(W, a_in, p + "attn.Wqkv")  # (N, 3H): q, k, v side by side, each h heads of d columns
    q, k, v = qkv[:, :H], qkv[:, H : 2 * H], qkv[:, 2 * H :]
    kind = "global" if dims.is_global[layer] else f"local (|i - j| <= {dims.window})"
    theta = dims.global_theta if dims.is_global[layer] else dims.local_theta
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    outside = torch.zeros(n, n, dtype=torch.bool) if dims.is_global[layer] else (i - j).abs() > dims.window
    heads_out = []
    for head in range(h):
        cols = slice(head * d, (head + 1) * d)
        qh, kh = rotate(q[:, cols], theta), rotate(k[:, cols], theta)  # v is not rotated
        scores = (qh @ kh.T / math.sqrt(d)).masked_fill(outside, float("-inf"))  # (N, N)
        probs = softmax(scores)  # a token outside the window gets exactly 0
        check(
            f"layer {layer} head {head}: {kind} softmax(rot(Q) rot(K)^T / sqrt({d})) = attentions[{layer}][:, {head}]",
            probs,
            outputs["attentions"][layer][head],
        )
        heads_out.append(probs @ v[:, cols])  # (N, d)
    x = x + lin(W, torch.cat(heads_out, dim=-1), p + "attn.Wo")  # the residual stream is not normalised
    # GeGLU: the first half of Wi's output through GELU, times the second half (the gate).
    wide = lin(W, norm(W, x, p + "mlp_norm", dims.eps), p + "mlp.Wi")  # (N, 2I)
    inp, gate = wide[:, : dims.intermediate], wide[:, dims.intermediate :]
    out = x + lin(W, activation(inp, dims.act) * gate, p + "mlp.Wo")
    what = f"x + attn({'x' if layer == 0 else 'attn_norm(x)'}), then + Wo(gelu(Wi_1) * Wi_2)"
    if layer == dims.layers - 1:  # the model's last hidden state is the normalised one
        out = norm(W, out, "final_norm", dims.eps)
        what = f"final_norm({what})"
    check(f"layer {layer}: {what} = hidden_states[{layer + 1}]", out, outputs["hidden_states"][layer + 1])
    return out


def rebuild_heads(W: Weights, dims: ModernDims, last: torch.Tensor, outputs: Mapping[str, object], check: Comparer):
    """4. Every head reads ``head`` (dense, activation, LayerNorm) first."""

    def head(x: torch.Tensor) -> torch.Tensor:
        return norm(W, activation(lin(W, x, "head.dense"), dims.head_act), "head.norm", dims.eps)

    if outputs.get("mlm_logits") is not None:  # the decoder is usually tied to the token embeddings
        z = head(last)
        dec = W("decoder.weight") if W.has("decoder.weight") else W("embeddings.tok_embeddings.weight")
        logits = z @ dec.T + (W("decoder.bias") if W.has("decoder.bias") else 0.0)
        check("masked LM: decoder(head(h)) = logits", logits, outputs["mlm_logits"])
    logits = outputs.get("classifier_logits")
    if logits is not None and logits.dim() == 1:  # sequence classifier: the first token or the mean
        pooled = last[0] if dims.pooling == "cls" else last.mean(dim=0)
        what = "h_[CLS]" if dims.pooling == "cls" else "mean(h)"
        check(f"classifier: classifier(head({what})) = logits", lin(W, head(pooled), "classifier"), logits)
    elif logits is not None:
        check("token classifier: classifier(head(h)) = logits", lin(W, head(last), "classifier"), logits)
    if outputs.get("qa_logits") is not None:
        check(
            "question answering: classifier(head(h)) = start and end logits",
            lin(W, head(last), "classifier"),
            outputs["qa_logits"],
        )


def rebuild_and_compare_modernbert(
    state: Mapping[str, torch.Tensor],  # the raw checkpoint tensors
    config: Mapping,  # config.json as a dict
    input_ids: list[int],  # (N,) one sequence, no padding
    model_outputs: Mapping[str, object],  # as for ``from_scratch.rebuild_and_compare``
    tolerance: float = TOLERANCE,
) -> list[Check]:
    """Redo ModernBERT's forward pass from ``state`` and compare each step with ``model_outputs``."""
    dims = ModernDims.of(config)
    W = Weights(state, "model.")  # head models keep the encoder under ``model.``
    check = Comparer(tolerance)
    x = W("embeddings.tok_embeddings.weight")[torch.tensor(input_ids)]  # (N, H); no positions, no types
    x = norm(W, x, "embeddings.norm", dims.eps)
    check("embeddings: LayerNorm(tok_embeddings) = hidden_states[0]", x, model_outputs["hidden_states"][0])
    for layer in range(dims.layers):
        rebuild_layer(W, dims, layer, model_outputs, check)
    rebuild_heads(W, dims, model_outputs["hidden_states"][-1].float(), model_outputs, check)
    return check.checks
