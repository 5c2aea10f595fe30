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


@torch.no_grad()
def queries_keys(base: Any, hidden_states: Sequence[torch.Tensor], layers: Sequence[int]) -> dict[str, Any] | None:
    """Queries and keys, each (len(layers), heads, N, d), from layer inputs ``hidden_states`` (L + 1 of (N, H)).

    ``base`` is the encoder (``model.base_model``); None when its layers do not have BERT's
    ``attention.self.query``/``key`` projections.
    """
    try:
        blocks = [base.encoder.layer[i].attention.self for i in layers]
    except AttributeError:
        return None
    qs, ks = [], []
    for i, sa in zip(layers, blocks):
        x = hidden_states[i].float()
        h, d = sa.num_attention_heads, sa.attention_head_size
        qs.append(sa.query(x).view(-1, h, d).transpose(0, 1))  # (heads, N, d)
        ks.append(sa.key(x).view(-1, h, d).transpose(0, 1))
    d = blocks[0].attention_head_size if blocks else 0
    return {"layers": list(layers), "head_size": d, "scale": 1.0 / math.sqrt(d) if d else 0.0,
            "queries": torch.stack(qs).numpy() if qs else np.zeros((0,)),
            "keys": torch.stack(ks).numpy() if ks else np.zeros((0,))}


def attention_from_qk(queries: np.ndarray | torch.Tensor, keys: np.ndarray | torch.Tensor,
                      mask: np.ndarray | torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(d) + mask) over the last axis, in float64; ``mask`` adds -inf (or 0) per key."""
    q = torch.as_tensor(queries, dtype=torch.float64)
    k = torch.as_tensor(keys, dtype=torch.float64)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + torch.as_tensor(mask, dtype=torch.float64)
    return scores.softmax(-1)
