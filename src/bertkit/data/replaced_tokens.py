"""ELECTRA's inputs: masking for the generator, then replaced tokens for the discriminator.

The collator masks as for MLM but without random tokens (:func:`electra_collator`): of the chosen
positions 85% become ``[MASK]`` and 15% keep their token, as in ELECTRA's own code; the generator
predicts every chosen position. :func:`replace_with_samples` then puts a token sampled from the
generator's softmax (:func:`sample_from_logits`) at each chosen position. The discriminator's label
is 1 where the token now differs from the original (a sample that equals the original counts as
original, as in the paper).

A temperature above 1 flattens the softmax. A small generator learns the unigram distribution
within a hundred steps; its samples are then frequent words in wrong places, which a discriminator
that has not yet learnt syntax cannot tell from the originals, and on a CPU budget it stays at the
base rate (held-out AUC about 0.5). Flatter samples include tokens it can spot from their
identity and neighbours from the first steps.
"""

from __future__ import annotations

from typing import Sequence

import torch

from bertkit.data.collator import MaskingCollator

__all__ = ["ELECTRA_MASK_TOKEN_PROB", "electra_collator", "replace_with_samples", "sample_from_logits"]

ELECTRA_MASK_TOKEN_PROB = 0.85


def electra_collator(
    vocab: Sequence[str], mask_prob: float = 0.15, whole_word_masking: bool = False, seed: int = 0
) -> MaskingCollator:
    """The generator's masking: ``mask_prob`` of the tokens chosen, 85% ``[MASK]``, 15% unchanged."""
    return MaskingCollator(
        vocab,
        mask_prob=mask_prob,
        mask_token_prob=ELECTRA_MASK_TOKEN_PROB,
        random_token_prob=0.0,
        whole_word_masking=whole_word_masking,
        seed=seed,
    )


@torch.no_grad()
def sample_from_logits(
    logits: torch.Tensor, generator: torch.Generator | None = None, temperature: float = 1.0
) -> torch.Tensor:
    """One id per row of (M, V) ``logits``, drawn from ``softmax(logits / temperature)`` by inverting the CDF.

    One uniform number per row: on a CPU, ``torch.multinomial`` (and the Gumbel trick, which draws V
    numbers per row) over a 30k vocabulary took longer than the discriminator's forward pass.
    """
    logits = logits.float() if temperature == 1.0 else logits.float() / temperature
    cdf = torch.softmax(logits, dim=-1).cumsum_(-1)  # non-decreasing: the terms are >= 0
    u = torch.rand(cdf.shape[0], 1, device=cdf.device, generator=generator) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)


@torch.no_grad()
def replace_with_samples(
    logits: torch.Tensor,  # (M, V) generator logits at the M chosen positions, in row-major order
    input_ids: torch.Tensor,  # (B, N) the masked input
    labels: torch.Tensor,  # (B, N) original ids at chosen positions, -100 elsewhere
    generator: torch.Generator | None = None,
    temperature: float = 1.0,  # > 1 flattens the generator's softmax: more replacements are easy to spot
) -> tuple[torch.Tensor, torch.Tensor]:  # (B, N) discriminator input; (B, N) 1 = replaced, 0 = original
    """Sample a token per chosen position from ``softmax(logits / temperature)`` (no gradient flows
    through it)."""
    chosen = labels != -100
    sampled = sample_from_logits(logits, generator, temperature) if len(logits) else labels[chosen]
    replaced_ids = input_ids.clone()
    replaced_ids[chosen] = sampled.to(input_ids.dtype)
    original = torch.where(chosen, labels, input_ids)
    return replaced_ids, (replaced_ids != original).long()
