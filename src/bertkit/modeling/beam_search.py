"""Beam search as transformers runs it, step for step, so that ties break the same way (a part of
:class:`~bertkit.modeling.generation.GenerationMixin`, which picks it when ``num_beams`` > 1)."""

from __future__ import annotations

from typing import Any

import torch


def _gather_beams(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``t`` (batch, beams, ...) at the beams ``idx`` (batch, k) picks."""
    while idx.dim() < t.dim():
        idx = idx.unsqueeze(-1)
    return torch.take_along_dim(t, idx, dim=1)


def _beam_candidates(total: torch.Tensor, keep: int, sample: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The best ``keep`` continuations over all beams of each prompt, or (beam sampling) ``keep`` drawn
    without replacement from the softmax of the summed scores, then ranked by those scores: (scores,
    flat indices), each (batch, keep)."""
    if sample:
        topk_flat = torch.multinomial(torch.softmax(total, dim=-1), num_samples=keep)
        topk_scores, order = torch.gather(total, 1, topk_flat).sort(dim=-1, descending=True)
        return topk_scores, topk_flat.gather(-1, order)
    return torch.topk(total, k=keep)


def _keep_best_finished(k: int, pairs: tuple[tuple[torch.Tensor, torch.Tensor], ...]) -> tuple[torch.Tensor, ...]:
    """The ``k`` best finished hypotheses of each prompt: each pair is (the kept ones, this step's) of the
    sequences, scores, beam indices and finished flags, ranked by the scores (the second pair)."""
    merged_scores = torch.cat(pairs[1], dim=1)
    best = torch.topk(merged_scores, k=k)[1]
    return tuple(_gather_beams(torch.cat(pair, dim=1), best) for pair in pairs)


def _beam_start(prompts: torch.Tensor, max_length: int, fill: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The open beams at the start: (batch, K, max_length) ids, the prompts then ``fill``; their scores,
    only the first beam's open, so the K beams do not all pick the same first tokens; and their (batch, K,
    new tokens) beam indices, all -1."""
    batch, k, prompt_len = prompts.shape
    device = prompts.device
    running = torch.full((batch, k, max_length), fill, dtype=torch.int64, device=device)
    running[:, :, :prompt_len] = prompts
    running_scores = torch.zeros((batch, k), dtype=torch.float, device=device)
    running_scores[:, 1:] = -1e9
    running_idx = torch.full((batch, k, max_length - prompt_len), -1, dtype=torch.int32, device=device)
    return running, running_scores, running_idx


def _can_improve(
    running_scores: torch.Tensor, beam_scores: torch.Tensor, is_finished: torch.Tensor, best_penalty: float
) -> torch.Tensor:
    """(batch, 1): whether the best open beam, length-penalised by ``best_penalty`` (transformers'
    estimate), beats the worst finished one."""
    best_open = running_scores[:, :1] / best_penalty
    worst_done = torch.where(is_finished, torch.min(beam_scores, dim=1, keepdim=True)[0], -1.0e9)
    return torch.any(best_open > worst_done, dim=-1, keepdim=True)


def _one_position_more(
    mask: torch.Tensor | None, positions: torch.Tensor | None, token_type_ids: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The padding mask, positions and token types grown by the token just generated."""
    if mask is not None:
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=-1)
        positions = torch.cat([positions, positions[:, -1:] + 1], dim=-1)  # type: ignore[index]
    if token_type_ids is not None:
        token_type_ids = torch.cat([token_type_ids, token_type_ids[:, -1:]], dim=-1)
    return mask, positions, token_type_ids


def _best_beams(
    sequences: torch.Tensor, scores: torch.Tensor, beam_indices: torch.Tensor, n: int, prompt_len: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``n`` best finished sequences of each prompt, their scores and beam indices, cut to the
    longest generated."""
    batch, _, max_length = sequences.shape
    new_tokens = beam_indices.shape[-1]
    sequences = sequences[:, :n].reshape(batch * n, max_length)
    scores = scores[:, :n].reshape(batch * n)
    beam_indices = beam_indices[:, :n].reshape(batch * n, new_tokens)
    generated = int((beam_indices + 1).bool().sum(dim=1).max())
    return sequences[:, : prompt_len + generated], scores, beam_indices[:, :generated]


class BeamSearchMixin:
    """``_beam_decode`` for :class:`~bertkit.modeling.generation.GenerationMixin` (whose ``_last_logits``,
    ``_process_scores`` and ``_warp`` it calls)."""

    def _beam_decode(
        self,
        input_ids: torch.Tensor,  # (B * K, N): each prompt repeated for its K beams
        attention_mask: torch.Tensor | None,
        new_tokens: int,
        cache: Any,
        eos: list[int],
        pad_token_id: int | None,
        opts: dict[str, Any],
        token_type_ids: torch.Tensor | None,
        record: dict[str, list[torch.Tensor]] | None,
        beam: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Beam search with transformers' bookkeeping, step for step, so that ties break the same way.

        Each step keeps the top ``max(2, 1 + len(eos)) * K`` continuations of every prompt over all its
        beams (enough that K stay open when the best ones end); those that end (EOS or the length limit)
        and rank in the top K compete, length-penalised, for the K finished slots, the K best open ones
        continue. Returns the (B * num_return_sequences, N + new) best finished sequences, their scores
        and the (B * num_return_sequences, new) beam each token came from.
        """
        K, penalty, early = beam["num_beams"], beam["length_penalty"], beam["early_stopping"]
        flat, prompt_len = input_ids.shape
        batch, device = flat // K, input_ids.device
        max_length = prompt_len + new_tokens
        # transformers fills unwritten positions with `pad or eos[0]`: a pad id of 0 reads as unset there
        fill = (pad_token_id or eos[0]) if eos else -1
        padded = attention_mask is not None and not bool(attention_mask.all())
        mask = attention_mask.long() if padded else None
        positions = (mask.cumsum(-1) - 1).clamp_min(0) if padded else None
        first_real = mask.argmax(dim=1) if padded else None
        eos_t = torch.tensor(eos, device=device, dtype=torch.long)
        sample, n_eos = opts["do_sample"], opts["eos_count"]

        running, running_scores, running_idx = _beam_start(input_ids.view(batch, K, prompt_len), max_length, fill)
        sequences, beam_indices = running.clone(), running_idx.clone()
        beam_scores = torch.full((batch, K), -1e9, dtype=torch.float, device=device)
        is_finished = torch.zeros((batch, K), dtype=torch.bool, device=device)
        improvable = torch.ones((batch, 1), dtype=torch.bool, device=device)
        keep = max(2, 1 + n_eos) * K
        top_k_mask = torch.cat([torch.ones(K, dtype=torch.bool), torch.zeros(keep - K, dtype=torch.bool)]).to(device)
        batch_offset = torch.arange(batch, device=device).view(-1, 1) * K
        gather = _gather_beams

        cur_len, flat_ids = prompt_len, input_ids
        for step in range(new_tokens):
            if step:
                flat_ids = running[:, :, :cur_len].reshape(flat, cur_len)
            ids = flat_ids if cache is None or step == 0 else flat_ids[:, -1:]
            log_probs = self._beam_log_probs(
                ids, flat_ids, mask, positions, token_type_ids, cache, first_real, opts, record
            )
            vocab = log_probs.shape[-1]
            total = (log_probs.view(batch, K, vocab) + running_scores[:, :, None]).reshape(batch, -1)
            topk_scores, topk_flat = _beam_candidates(total, keep, sample)
            src = topk_flat // vocab
            topk_idx = gather(running_idx, src)
            topk_seqs = gather(running, src)
            tokens = topk_flat % vocab
            topk_seqs[:, :, cur_len] = tokens
            topk_idx[:, :, cur_len - prompt_len] = src + batch_offset
            ends = torch.full_like(tokens, cur_len + 1 >= max_length, dtype=torch.bool)
            if eos:
                ends = ends | torch.isin(tokens, eos_t)

            # the K best that go on
            open_scores = topk_scores + ends.to(torch.float32) * -1.0e9
            chosen = torch.topk(open_scores, k=K)[1]
            running, running_scores, running_idx = (gather(t, chosen) for t in (topk_seqs, open_scores, topk_idx))

            # the finished ones among the top K, length-penalised, against those finished before
            just_finished = ends & top_k_mask[None, :]
            done_scores = topk_scores / ((cur_len + 1 - prompt_len) ** penalty)
            full = torch.all(is_finished, dim=-1, keepdim=True) & (early is True)
            done_scores += full.to(torch.float32) * -1.0e9
            done_scores += (~improvable).to(torch.float32) * -1.0e9
            done_scores += (~just_finished) * -1.0e9
            pairs = (
                (sequences, topk_seqs),
                (beam_scores, done_scores),
                (beam_indices, topk_idx),
                (is_finished, just_finished),
            )
            sequences, beam_scores, beam_indices, is_finished = _keep_best_finished(K, pairs)

            if cache is not None:  # each open beam continues the cache of the beam it came from
                cache.reorder_cache(running_idx[..., cur_len - prompt_len].reshape(-1).long())
            mask, positions, token_type_ids = _one_position_more(mask, positions, token_type_ids)
            cur_len += 1

            # stop when no open beam can beat the worst finished one (by transformers' estimate), when
            # every slot is finished with early_stopping=True, or when every continuation ended
            best_len = (max_length if early == "never" and penalty > 0.0 else cur_len) - prompt_len
            improvable = improvable & _can_improve(running_scores, beam_scores, is_finished, best_len**penalty)
            all_full = bool(torch.all(is_finished)) and early is True
            if not bool(improvable.any()) or all_full or bool(ends.all()):
                break

        return _best_beams(sequences, beam_scores, beam_indices, beam["num_return_sequences"], prompt_len)

    def _beam_log_probs(
        self,
        ids: torch.Tensor,
        flat_ids: torch.Tensor,
        mask: torch.Tensor | None,
        positions: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        cache: Any,
        first_real: torch.Tensor | None,
        opts: dict[str, Any],
        record: dict[str, list[torch.Tensor]] | None,
    ) -> torch.Tensor:
        """One beam-search step's (B * K, V) processed log-probabilities (recorded, with the logits, in
        ``record``)."""
        logits = self._last_logits(ids, mask, positions, token_type_ids, cache).float()
        if record is not None:
            record["logits"].append(logits.clone())
        log_probs = self._process_scores(torch.log_softmax(logits, dim=-1), flat_ids, first_real, opts)
        if opts["do_sample"]:  # each filter keeps enough tokens that a beam can go on past an EOS
            n_eos = opts["eos_count"]
            log_probs = self._warp(log_probs, opts, keep=n_eos + 1 if n_eos else 2)
        if opts["renormalize_logits"]:
            log_probs = torch.log_softmax(log_probs, dim=-1)
        if record is not None:
            record["scores"].append(log_probs.clone())
        return log_probs
