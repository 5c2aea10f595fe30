"""The neuron view's numbers: each head's query and key vectors, and the attention they make.

In layer ``l`` every token's input vector ``hidden_states[l]`` is projected to a query and a key;
head ``h`` owns ``d = hidden / heads`` consecutive columns of each. Token ``i``'s attention row is
``softmax(q_i . k_j / sqrt(d) + mask_j)`` over the tokens ``j``: the neuron view shows ``q_i``, every
``k_j``, their elementwise product (whose sum is the dot product), the scaled scores and the row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["attention_from_qk", "queries_keys"]


def _projections(base: Any, layer: int) -> tuple[Any, Any, int] | None:
    """(query Linear, key Linear, heads) of one layer: BERT and ELECTRA name them ``encoder.layer.N.
    attention.self.query/key``, DistilBERT ``transformer.layer.N.attention.q_lin/k_lin``. None for a
    model with neither (GPT-2 fuses q, k and v in one projection and masks causally: no neuron view)."""
    encoder = getattr(base, "encoder", None)
    if encoder is not None and hasattr(encoder, "layer"):
        sa = encoder.layer[layer].attention.self
        return sa.query, sa.key, sa.num_attention_heads
    transformer = getattr(base, "transformer", None)
    if transformer is not None and hasattr(transformer, "layer"):
        att = transformer.layer[layer].attention
        return att.q_lin, att.k_lin, att.n_heads
    return None


@torch.no_grad()
def queries_keys(base: Any, hidden_states: Sequence[torch.Tensor], layers: Sequence[int]) -> dict[str, Any] | None:
    """Queries and keys, each (len(layers), heads, N, d), from layer inputs ``hidden_states`` (L + 1 of (N, H)).

    ``base`` is the encoder (``model.base_model``); None when its layers have no separate query and
    key projections (see ``_projections``).
    """
    if _projections(base, 0) is None:
        return None
    qs, ks, d = [], [], 0
    for i in layers:
        query, key, h = _projections(base, i)
        x = hidden_states[i].float()
        d = query.out_features // h
        qs.append(query(x).view(-1, h, d).transpose(0, 1))  # (heads, N, d)
        ks.append(key(x).view(-1, h, d).transpose(0, 1))
    return {
        "layers": list(layers),
        "head_size": d,
        "scale": 1.0 / math.sqrt(d) if d else 0.0,
        "queries": torch.stack(qs).numpy() if qs else np.zeros((0,)),
        "keys": torch.stack(ks).numpy() if ks else np.zeros((0,)),
    }


def attention_from_qk(
    queries: np.ndarray | torch.Tensor, keys: np.ndarray | torch.Tensor, mask: np.ndarray | torch.Tensor | None = None
) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(d) + mask) over the last axis, in float64; ``mask`` adds -inf (or 0) per key."""
    q = torch.as_tensor(queries, dtype=torch.float64)
    k = torch.as_tensor(keys, dtype=torch.float64)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + torch.as_tensor(mask, dtype=torch.float64)
    return scores.softmax(-1)
