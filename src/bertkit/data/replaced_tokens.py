"""ELECTRA's inputs: masking for the generator, then replaced tokens for the discriminator.

The collator masks as for MLM but without random tokens (:func:`electra_collator`): of the chosen
positions 85% become ``[MASK]`` and 15% keep their token, as in ELECTRA's own code; the generator
predicts every chosen position. :func:`replace_with_samples` then puts a token sampled from the
generator's softmax at each chosen position. The discriminator's label is 1 where the token now
differs from the original (a sample that equals the original counts as original, as in the paper).
"""

from __future__ import annotations

from typing import Sequence

import torch

from bertkit.data.collator import MaskingCollator

__all__ = ["ELECTRA_MASK_TOKEN_PROB", "electra_collator", "replace_with_samples"]

ELECTRA_MASK_TOKEN_PROB = 0.85


def electra_collator(vocab: Sequence[str], mask_prob: float = 0.15, whole_word_masking: bool = False,
                     seed: int = 0) -> MaskingCollator:
    """The generator's masking: ``mask_prob`` of the tokens chosen, 85% ``[MASK]``, 15% unchanged."""
    return MaskingCollator(vocab, mask_prob=mask_prob, mask_token_prob=ELECTRA_MASK_TOKEN_PROB,
                           random_token_prob=0.0, whole_word_masking=whole_word_masking, seed=seed)


@torch.no_grad()
def replace_with_samples(
    logits: torch.Tensor,  # (M, V) generator logits at the M chosen positions, in row-major order
    input_ids: torch.Tensor,  # (B, N) the masked input
    labels: torch.Tensor,  # (B, N) original ids at chosen positions, -100 elsewhere
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # (B, N) discriminator input; (B, N) 1 = replaced, 0 = original
    """Sample a token per chosen position from ``softmax(logits)`` (no gradient flows through it)."""
    chosen = labels != -100
    probs = torch.softmax(logits.float(), dim=-1)
    sampled = torch.multinomial(probs, 1, generator=generator).squeeze(1) if len(probs) else labels[chosen]
    replaced_ids = input_ids.clone()
    replaced_ids[chosen] = sampled.to(input_ids.dtype)
    original = torch.where(chosen, labels, input_ids)
    return replaced_ids, (replaced_ids != original).long()
