"""Text generation for causal language models, with transformers' ``generate`` semantics.

Greedy search, sampling (temperature, top-k, top-p, min-p, typical-p, epsilon and eta cutoffs), beam
search (``num_beams``, ``length_penalty``, ``early_stopping``) and beam sampling, repetition penalty,
no-repeat n-grams, ``bad_words_ids``, min lengths, forced and suppressed tokens, ``num_return_sequences``,
EOS/padding handling and left-padded batches with an ``attention_mask``. Scores are processed in
transformers' order (the processors of every search, then for sampling the filters), and random draws
are made in transformers' order and shapes, so output is token for token the same as ``transformers``
(with the same ``torch.manual_seed`` when sampling).

The loop keeps a preallocated KV cache (one new token per step sees the whole cache) and computes the
vocabulary projection for the last position only. A decoding step is bound by reading weights, and
how fast the CPU's BLAS streams the (V, H) output embedding depends on how the product is written:
on the machines measured (``benchmarks/roofline.py``), ``linear(x, W)`` read it at 4-9 GB/s, while
at batch 1 ``x @ W_t`` with a (H, V) copy made once per call, and at batch 2 and up ``(W @ x.T).T``
on the weight as it is, read it at 8-22 GB/s. The sums are the same products in another order
(logits within 1e-6 relative of ``linear``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

import torch

from .beam_search import BeamSearchMixin

__all__ = ["GenerationConfig", "GenerationLimits", "GenerationMixin", "Streamer"]

_DEFAULT_MAX_LENGTH = 20  # transformers' GenerationConfig default

# What generate() reads from a generation config, with transformers' defaults.
GENERATION_DEFAULTS: dict[str, Any] = {
    "max_length": None,
    "max_new_tokens": None,
    "min_new_tokens": 0,
    "do_sample": False,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "num_return_sequences": 1,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "num_beams": 1,
    "length_penalty": 1.0,
    "early_stopping": False,
    "eos_token_id": None,
    "pad_token_id": None,
    "min_length": 0,
    "forced_eos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "renormalize_logits": False,
    "return_dict_in_generate": False,
    "output_scores": False,
    "output_logits": False,
}
GENERATION_CONFIG_NAME = "generation_config.json"

# The score processors generate() takes beyond the core search settings.
_PROCESSOR_FIELDS = (
    "min_new_tokens",
    "min_length",
    "forced_eos_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
    "exponential_decay_length_penalty",
    "min_p",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
    "renormalize_logits",
)

# transformers' generation settings that would change the tokens and are not implemented here, with the
# values that leave them off: a call or a generation config that turns one on is refused by name
# rather than given other tokens than transformers' (a config may carry them switched off).
_UNSUPPORTED_FIELDS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "num_beam_groups": ("diverse (group) beam search", (None, 1)),
    "diversity_penalty": ("diverse (group) beam search", (None, 0, 0.0)),
    "stop_strings": ("stopping on strings; stop on token ids with eos_token_id", (None,)),
    "penalty_alpha": ("contrastive search", (None,)),
    "force_words_ids": ("constrained beam search", (None,)),
    "constraints": ("constrained beam search", (None,)),
    "guidance_scale": ("classifier-free guidance", (None, 1, 1.0)),
    "sequence_bias": ("sequence bias", (None,)),
    "forced_bos_token_id": ("forcing the first new token", (None,)),
    "remove_invalid_values": ("replacing nan/inf scores", (None, False)),
    "encoder_repetition_penalty": ("an encoder's repetition penalty", (None, 1, 1.0)),
    "encoder_no_repeat_ngram_size": ("an encoder's no-repeat n-grams", (None, 0)),
    "top_h": ("top-h sampling", (None,)),
    "max_time": ("a time limit", (None,)),
    "watermarking_config": ("watermarking", (None,)),
    "prompt_lookup_num_tokens": ("prompt lookup decoding", (None,)),
    "assistant_model": ("assisted generation", (None,)),
    "logits_processor": ("custom logits processors", (None, [])),
    "stopping_criteria": ("custom stopping criteria", (None, [])),
    "prefix_allowed_tokens_fn": ("constrained generation", (None,)),
    "output_attentions": ("returning attentions", (None, False)),
    "output_hidden_states": ("returning hidden states", (None, False)),
}


def _refuse_unsupported_fields(config: Any) -> None:
    """Raise ValueError naming the first setting of ``config`` that is on and not implemented."""
    for name, (what, off) in _UNSUPPORTED_FIELDS.items():
        value = getattr(config, name, None)
        if not any(value is o or (type(value) is type(o) and value == o) for o in off):
            raise ValueError(f"generate() does not support {name}={value!r} ({what})")


class _Unset:
    """The default of an argument whose None means something of its own (eos_token_id)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


def _token_list(name: str, value: Any, vocab_size: int) -> list[int]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size for t in values):
        raise ValueError(f"{name} must be a token id or a non-empty list of ids in [0, {vocab_size}), got {value!r}")
    return [int(t) for t in values]


def _check_processor_fields(fields: dict[str, Any], eos: list[int], vocab_size: int) -> dict[str, Any]:
    """Validate the extra processors' settings; returns them as the decoding loops read them."""
    out = dict(fields)
    for name in ("min_new_tokens", "min_length"):
        value = fields[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    forced = fields["forced_eos_token_id"]
    out["forced_eos"] = [] if forced is None else _token_list("forced_eos_token_id", forced, vocab_size)
    for name in ("suppress_tokens", "begin_suppress_tokens"):
        value = fields[name]
        if value is not None:
            if not isinstance(value, (list, tuple)) or any(
                isinstance(t, bool) or not isinstance(t, int) for t in value
            ):
                raise ValueError(f"{name} must be a list of token ids, got {value!r}")
            out[name] = torch.tensor([int(t) for t in value], dtype=torch.long)
    decay = fields["exponential_decay_length_penalty"]
    out["exponential_decay"] = None
    if decay is not None:
        if (
            not isinstance(decay, (list, tuple))
            or len(decay) != 2
            or isinstance(decay[0], bool)
            or not isinstance(decay[0], int)
            or decay[0] < 0
            or isinstance(decay[1], bool)
            or not isinstance(decay[1], (int, float))
        ):
            raise ValueError(f"exponential_decay_length_penalty must be (start_index, decay_factor), got {decay!r}")
        if not eos:
            raise ValueError("exponential_decay_length_penalty raises the EOS score: it needs an eos_token_id")
        out["exponential_decay"] = (int(decay[0]), float(decay[1]))
    checks = {
        "min_p": (lambda v: v is None or 0 <= v <= 1, "in [0, 1]"),
        "typical_p": (lambda v: 0 < v <= 1, "in (0, 1] (1 = off)"),
        "epsilon_cutoff": (lambda v: 0 <= v < 1, "in [0, 1) (0 = off)"),
        "eta_cutoff": (lambda v: 0 <= v < 1, "in [0, 1) (0 = off)"),
    }
    for name, (ok, text) in checks.items():
        value = fields[name]
        if (value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)))) or not ok(value):
            raise ValueError(f"{name} must be a number {text}, got {value!r}")
    if not isinstance(fields["renormalize_logits"], bool):
        raise ValueError(f"renormalize_logits must be True or False, got {fields['renormalize_logits']!r}")
    return out


class GenerationConfig:
    """The defaults ``generate()`` uses for one model: transformers' ``generation_config.json`` beside
    the weights. Fields are attributes; unset ones read transformers' defaults, and fields generate()
    does not use are kept, so saving writes the file back as it was."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        if name in GENERATION_DEFAULTS:
            return GENERATION_DEFAULTS[name]
        raise AttributeError(f"GenerationConfig has no field {name!r}")

    @classmethod
    def from_model_config(cls, config: Any) -> GenerationConfig:
        """The special ids a model's config.json names (what transformers derives without a file)."""
        keys = ("bos_token_id", "eos_token_id", "pad_token_id")
        return cls(**{k: getattr(config, k) for k in keys if getattr(config, k, None) is not None})

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike) -> GenerationConfig:
        """Read ``generation_config.json`` from a model folder (or that file's path)."""
        from bertkit._text import read_json

        path = Path(folder)
        path = path if path.is_file() else path / GENERATION_CONFIG_NAME
        data = read_json(path)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write ``generation_config.json`` into ``save_directory`` atomically; returns the file path."""
        from bertkit._io import atomic_write_text

        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        return atomic_write_text(Path(save_directory) / GENERATION_CONFIG_NAME, text)

    def __repr__(self) -> str:
        return f"GenerationConfig {json.dumps(self.to_dict(), sort_keys=True)}"


class Streamer(Protocol):
    """Anything with ``put(token_ids)`` (called with each step's (B,) new tokens) and ``end()``."""

    def put(self, value: torch.Tensor) -> None: ...

    def end(self) -> None: ...


def _eos_list(eos: int | list[int] | None) -> list[int]:
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def apply_repetition_penalty(
    scores: torch.Tensor, input_ids: torch.Tensor, penalty: float, first_real: torch.Tensor | None
) -> torch.Tensor:
    """Divide positive (multiply negative) scores of every token already present; left padding is skipped."""
    vocab = scores.shape[-1]
    ids = input_ids
    if first_real is not None:  # padding positions point at a spare column that is dropped
        positions = torch.arange(ids.shape[1], device=ids.device)
        ids = ids.masked_fill(positions[None, :] < first_real[:, None], vocab)
    seen = torch.zeros(scores.shape[0], vocab + 1, dtype=torch.bool, device=scores.device)
    seen.scatter_(1, ids, True)
    penalized = torch.where(scores < 0, scores * penalty, scores / penalty)
    return torch.where(seen[:, :vocab], penalized, scores)


def apply_no_repeat_ngram(scores: torch.Tensor, input_ids: torch.Tensor, n: int) -> torch.Tensor:
    """Forbid every token that would complete an n-gram already present in the sequence."""
    length = input_ids.shape[1]
    if length + 1 < n:
        return scores
    rows = input_ids.tolist()
    for b, row in enumerate(rows):
        prefix = tuple(row[length - n + 1 :])
        banned = [row[i + n - 1] for i in range(length - n + 1) if tuple(row[i : i + n - 1]) == prefix]
        if banned:
            scores[b, banned] = -float("inf")
    return scores


BadWords = tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]


def prepare_bad_words(bad_words_ids: Any, vocab_size: int, eos: list[int]) -> BadWords | None:
    """Check ``bad_words_ids`` (a list of token-id lists) and split it into single tokens and, grouped by
    prefix length, the (S, P) prefixes and (S,) last tokens of longer sequences. As transformers does, a
    single-token entry that is an EOS id is dropped (banning it would forbid ending the text)."""
    if bad_words_ids is None:
        return None
    if not isinstance(bad_words_ids, (list, tuple)) or not bad_words_ids:
        raise ValueError(f"bad_words_ids must be a non-empty list of token-id lists, got {bad_words_ids!r}")
    single: list[int] = []
    groups: dict[int, list[list[int]]] = {}
    for seq in bad_words_ids:
        if (
            not isinstance(seq, (list, tuple))
            or not seq
            or any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size for t in seq)
        ):
            raise ValueError(
                f"bad_words_ids must hold non-empty lists of token ids in [0, {vocab_size}), got {list(seq)!r}"
                if isinstance(seq, (list, tuple))
                else f"bad_words_ids must be a list of token-id lists, got the item {seq!r}"
            )
        if len(seq) == 1:
            if seq[0] not in eos:
                single.append(int(seq[0]))
        else:
            groups.setdefault(len(seq) - 1, []).append([int(t) for t in seq])
    multi = [(torch.tensor([g[:-1] for g in group]), torch.tensor([g[-1] for g in group])) for group in groups.values()]
    return single, multi


def apply_bad_words(scores: torch.Tensor, input_ids: torch.Tensor, bad_words: BadWords) -> torch.Tensor:
    """Forbid each banned single token, and the last token of a banned sequence whose prefix ends the row."""
    single, multi = bad_words
    scores = scores.clone()
    if single:
        scores[:, single] = -float("inf")
    for prefixes, last in multi:
        n = prefixes.shape[1]
        if n > input_ids.shape[1]:  # the row is shorter than the prefix: nothing can match yet
            continue
        match = (input_ids[:, None, -n:] == prefixes.to(input_ids.device)).all(dim=-1)  # (B, S)
        rows, which = match.nonzero(as_tuple=True)
        scores[rows, last.to(scores.device)[which]] = -float("inf")
    return scores


def apply_top_k(scores: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` highest scores (ties with the k-th included)."""
    k = min(top_k, scores.shape[-1])
    kth = torch.topk(scores, k)[0][..., -1, None]
    return scores.masked_fill(scores < kth, -float("inf"))


def apply_top_p(scores: torch.Tensor, top_p: float, keep: int = 1) -> torch.Tensor:
    """Nucleus filtering: keep the smallest set of top tokens whose probability reaches ``top_p``
    (and at least the ``keep`` most likely)."""
    sorted_scores, sorted_idx = torch.sort(scores, descending=False)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1 - top_p)
    remove_sorted[..., -keep:] = False
    remove = remove_sorted.scatter(1, sorted_idx, remove_sorted)
    return scores.masked_fill(remove, -float("inf"))


def apply_min_p(scores: torch.Tensor, min_p: float, keep: int) -> torch.Tensor:
    """Drop tokens whose probability is below ``min_p`` times the top one's (the ``keep`` best stay)."""
    probs = scores.softmax(dim=-1)
    remove = probs < min_p * probs.amax(dim=-1, keepdim=True)
    remove.scatter_(-1, torch.topk(probs, min(keep, probs.shape[-1]), dim=-1).indices, False)
    return scores.masked_fill(remove, -float("inf"))


def apply_typical_p(scores: torch.Tensor, mass: float, keep: int) -> torch.Tensor:
    """Locally typical sampling: keep the tokens whose surprise is closest to the entropy, up to ``mass``."""
    normalized = torch.log_softmax(scores, dim=-1)
    entropy = -(normalized * normalized.exp()).nansum(-1, keepdim=True)
    shifted, order = torch.sort(torch.abs(-normalized - entropy), descending=False)
    cumulative = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
    last = (cumulative < mass).sum(dim=1).clamp_(max=shifted.shape[-1] - 1)
    remove_sorted = shifted > shifted.gather(1, last.view(-1, 1))
    remove_sorted[..., :keep] = False
    return scores.masked_fill(remove_sorted.scatter(1, order, remove_sorted), -float("inf"))


def apply_epsilon_cutoff(scores: torch.Tensor, epsilon: float | torch.Tensor, keep: int) -> torch.Tensor:
    """Drop tokens whose probability is below ``epsilon`` (a float, or a (B, 1) tensor); the ``keep`` best stay."""
    remove = scores.softmax(dim=-1) < epsilon
    remove &= scores < torch.topk(scores, min(keep, scores.shape[-1]))[0][..., -1, None]
    return scores.masked_fill(remove, -float("inf"))


def apply_eta_cutoff(scores: torch.Tensor, eta: float, keep: int) -> torch.Tensor:
    """Epsilon cutoff with ``min(eta, sqrt(eta) * exp(-entropy))`` as the threshold of each row."""
    eta_t = torch.tensor(eta, device=scores.device)
    entropy = torch.distributions.Categorical(logits=scores).entropy()
    return apply_epsilon_cutoff(scores, torch.min(eta_t, torch.sqrt(eta_t) * torch.exp(-entropy))[..., None], keep)


def apply_exponential_decay(
    scores: torch.Tensor, eos: list[int], start: int, factor: float, cur_len: int
) -> torch.Tensor:
    """Raise the EOS scores by ``|score| * (factor ** (cur_len - start) - 1)`` once past ``start``."""
    if cur_len <= start:
        return scores
    eos_scores = scores[:, eos]
    penalty = (torch.abs(eos_scores) * (pow(factor, cur_len - start) - 1)).masked_fill(~torch.isfinite(eos_scores), 0.0)
    penalties = torch.zeros_like(scores)
    penalties[:, eos] = penalty
    return scores + penalties


def suppress(scores: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """-inf for the ids in ``tokens`` (ids outside the vocabulary are ignored, as in transformers)."""
    hit = torch.isin(torch.arange(scores.shape[-1], device=scores.device), tokens.to(scores.device))
    return torch.where(hit, -float("inf"), scores)


def _prompt_rows(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    keep: int,
    copies: int,
    pad_token_id: int | None,
    eos: list[int],
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The prompts' last ``keep`` positions, each prompt's row repeated ``copies`` times (its beams or
    returned sequences), and the padding mask inferred from pad ids when none was given, as transformers
    does."""
    input_ids = input_ids[:, -keep:]
    attention_mask = attention_mask[:, -keep:] if attention_mask is not None else None
    token_type_ids = token_type_ids[:, -keep:] if token_type_ids is not None else None
    if copies > 1:
        input_ids = input_ids.repeat_interleave(copies, dim=0)
        if attention_mask is not None:
            attention_mask = attention_mask.repeat_interleave(copies, dim=0)
        if token_type_ids is not None:
            token_type_ids = token_type_ids.repeat_interleave(copies, dim=0)
    if (
        attention_mask is None
        and pad_token_id is not None
        and pad_token_id not in eos
        and bool((input_ids == pad_token_id).any())
    ):
        attention_mask = (input_ids != pad_token_id).long()  # as transformers: infer padding from pad ids
    return input_ids, attention_mask, token_type_ids


def _generate_output(
    sequences: torch.Tensor,
    record: dict[str, list[torch.Tensor]] | None,
    want_scores: bool,
    want_logits: bool,
    sequences_scores: torch.Tensor | None = None,
    beam_indices: torch.Tensor | None = None,
) -> Any:
    """What :meth:`GenerationMixin.generate` returns: the token ids, or with ``return_dict_in_generate``
    (a ``record`` kept) transformers' output of a search (a beam search with ``beam_indices``)."""
    if record is None:
        return sequences
    if beam_indices is not None:
        from .outputs import GenerateBeamDecoderOnlyOutput

        return GenerateBeamDecoderOnlyOutput(
            sequences=sequences,
            sequences_scores=sequences_scores if want_scores else None,
            scores=tuple(record["scores"]) if want_scores else None,
            logits=tuple(record["logits"]) if want_logits else None,
            beam_indices=beam_indices,
        )
    from .outputs import GenerateDecoderOnlyOutput

    return GenerateDecoderOnlyOutput(
        sequences=sequences,
        scores=tuple(record["scores"]) if want_scores else None,
        logits=tuple(record["logits"]) if want_logits else None,
    )


# generate()'s arguments read as ``setting(name, argument)`` (top_k and eos_token_id tell None from unset)
_CALL_SETTINGS = (
    "do_sample",
    "temperature",
    "top_p",
    "num_return_sequences",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "max_length",
    "max_new_tokens",
    "pad_token_id",
    "num_beams",
    "length_penalty",
    "early_stopping",
    "bad_words_ids",
)


def _search_options(
    g: SimpleNamespace, eos: list[int], eos_count: int, prompt_len: int, new_tokens: int, vocab_size: int
) -> dict[str, Any]:
    """The settings every step of a search reads (the processors' and the sampling filters')."""
    return {
        "do_sample": g.do_sample,
        "temperature": g.temperature,
        "top_k": g.top_k,
        "top_p": g.top_p,
        "repetition_penalty": g.repetition_penalty,
        "no_repeat_ngram_size": g.no_repeat_ngram_size,
        "bad_words": prepare_bad_words(g.bad_words_ids, vocab_size, eos),
        "eos": eos,
        "eos_count": eos_count,
        "prompt_len": prompt_len,
        "max_length": prompt_len + new_tokens,
        **_check_processor_fields(g.extra, eos, vocab_size),
    }


@dataclass(frozen=True)
class GenerationLimits:
    """What ``generate`` must stay within: the context, the vocabulary, the EOS and padding ids."""

    max_positions: int
    vocab_size: int
    eos_token_ids: list[int]
    pad_token_id: int | None


class GenerationMixin(BeamSearchMixin):
    """``generate()`` for causal LMs whose ``base_model`` takes ``past_key_values``/``position_ids`` and
    whose logits are ``get_output_embeddings()`` (a Linear) applied to its last hidden state.

    The model provides, besides those: ``max_positions`` (the context length, on every bertkit model),
    ``config.vocab_size``/``eos_token_id``/``pad_token_id`` (read by :meth:`generation_limits`, which a
    family may override) and :meth:`new_cache`. Nothing here knows a family's config names.
    """

    def _validate_generation_args(
        self,
        temperature: float,
        top_k: int,
        top_p: float,
        repetition_penalty: float,
        num_return_sequences: int,
        no_repeat_ngram_size: int,
    ) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature} (use do_sample=False for greedy search)")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if top_k is not None and top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
        if not repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {repetition_penalty}")
        if num_return_sequences < 1:
            raise ValueError(f"num_return_sequences must be >= 1, got {num_return_sequences}")
        if no_repeat_ngram_size < 0:
            raise ValueError(f"no_repeat_ngram_size must be >= 0, got {no_repeat_ngram_size}")

    @staticmethod
    def _validate_beam_args(
        num_beams: Any,
        length_penalty: Any,
        early_stopping: Any,
        num_return_sequences: int,
        streamer: Any,
    ) -> None:
        if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
            raise ValueError(f"num_beams must be an integer >= 1, got {num_beams!r}")
        if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)):
            raise ValueError(f"length_penalty must be a number, got {length_penalty!r}")
        if early_stopping not in (True, False, "never") or not isinstance(early_stopping, (bool, str)):
            raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
        if num_beams == 1:
            return
        if num_return_sequences > num_beams:
            raise ValueError(
                f"num_return_sequences={num_return_sequences} must be <= num_beams={num_beams} in beam search"
            )
        if streamer is not None:
            raise ValueError(f"streamer cannot be used with beam search (num_beams={num_beams}); pass num_beams=1")

    @property
    def generation_config(self) -> GenerationConfig:
        """generate()'s defaults: the folder's ``generation_config.json`` when loaded from one, else the
        special ids of the model's config. Setting it (or changing a field) is saved with the model."""
        found = self.__dict__.get("_generation_config")
        if found is None:
            found = GenerationConfig.from_model_config(self.config)
            self.__dict__["_generation_config"] = found
        return found

    @generation_config.setter
    def generation_config(self, value: Any) -> None:
        self.__dict__["_generation_config"] = value

    # ----------------------------------------------------------------- the interface a model provides
    def generation_limits(self) -> GenerationLimits:
        """The context, vocabulary and special ids ``generate`` works within, read through the model's
        own interface (``max_positions``) and the config fields every family shares."""
        cfg = self.config
        return GenerationLimits(
            max_positions=int(self.max_positions),
            vocab_size=int(cfg.vocab_size),
            eos_token_ids=_eos_list(getattr(cfg, "eos_token_id", None)),
            pad_token_id=getattr(cfg, "pad_token_id", None),
        )

    def new_cache(self, capacity: int) -> Any:
        """An empty key/value cache for ``capacity`` tokens, as the model's ``past_key_values`` takes it."""
        raise NotImplementedError(f"{type(self).__name__} has no key/value cache; pass use_cache=False")

    @classmethod
    def can_generate(cls) -> bool:
        """True: this class continues text left to right (transformers' name)."""
        return True

    # ----------------------------------------------------------------- generate
    def _new_token_count(
        self, prompt_len: int, max_length: int | None, max_new_tokens: int | None, limit: int, truncation: bool
    ) -> tuple[int, int]:
        """(new tokens, prompt tokens to keep): the lengths checked against the context of ``limit``."""
        if max_new_tokens is not None:
            if max_new_tokens < 1:
                raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
            new_tokens = max_new_tokens
        else:
            total = _DEFAULT_MAX_LENGTH if max_length is None else max_length
            new_tokens = total - prompt_len
            if new_tokens < 1:
                # transformers warns and returns after one token; an explicit error is clearer
                raise ValueError(
                    f"the prompt has {prompt_len} tokens and max_length={total} leaves no room for new ones; "
                    "raise max_length or pass max_new_tokens"
                )
        field = getattr(self, "positions_field", "max_positions")
        if new_tokens >= limit:
            raise ValueError(f"{new_tokens} new tokens do not fit the model's context of {field}={limit} tokens")
        if prompt_len + new_tokens > limit:
            if not truncation:
                raise ValueError(
                    f"prompt ({prompt_len} tokens) plus {new_tokens} new tokens exceeds {field}={limit}; "
                    f"shorten the prompt or pass truncation=True to keep its last {limit - new_tokens} tokens"
                )
            return new_tokens, limit - new_tokens
        return new_tokens, prompt_len

    @staticmethod
    def _process_scores(
        scores: torch.Tensor, input_ids: torch.Tensor, first_real: torch.Tensor | None, opts: dict[str, Any]
    ) -> torch.Tensor:
        """The processors every search applies, in transformers' order: repetition penalty, no-repeat
        n-grams, bad words, min_length, min_new_tokens, forced EOS, exponential decay, suppressed tokens
        and tokens suppressed at the first step. ``input_ids`` holds every (padded) token so far."""
        cur_len, eos = input_ids.shape[1], opts["eos"]
        if opts["repetition_penalty"] != 1.0:
            scores = apply_repetition_penalty(scores, input_ids, opts["repetition_penalty"], first_real)
        if opts["no_repeat_ngram_size"] > 0:
            scores = apply_no_repeat_ngram(scores, input_ids, opts["no_repeat_ngram_size"])
        if opts["bad_words"] is not None:
            scores = apply_bad_words(scores, input_ids, opts["bad_words"])
        if eos and cur_len < opts["min_length"]:  # counts the prompt (and its padding), as transformers does
            scores = scores.clone()
            scores[:, eos] = -float("inf")
        if eos and cur_len - opts["prompt_len"] < opts["min_new_tokens"]:
            scores = scores.clone()
            scores[:, eos] = -float("inf")
        forced = opts["forced_eos"]
        if forced and cur_len == opts["max_length"] - 1:
            scores = torch.full_like(scores, -float("inf"))
            scores[:, forced] = 0.0
        if opts["exponential_decay"] is not None:
            start, factor = opts["exponential_decay"]
            scores = apply_exponential_decay(scores, eos, opts["prompt_len"] + start, factor, cur_len)
        if opts["suppress_tokens"] is not None:
            scores = suppress(scores, opts["suppress_tokens"])
        if opts["begin_suppress_tokens"] is not None and cur_len == opts["prompt_len"]:
            scores = suppress(scores, opts["begin_suppress_tokens"])
        return scores

    @staticmethod
    def _warp(scores: torch.Tensor, opts: dict[str, Any], keep: int) -> torch.Tensor:
        """The sampling-only processors in transformers' order (temperature, top-k, top-p, min-p,
        typical-p, epsilon and eta cutoffs); each filter leaves at least ``keep`` tokens."""
        if opts["temperature"] != 1.0:
            scores = scores / opts["temperature"]
        if opts["top_k"]:
            scores = apply_top_k(scores, max(opts["top_k"], keep))
        if opts["top_p"] < 1.0:
            scores = apply_top_p(scores, opts["top_p"], keep)
        if opts["min_p"] is not None:
            scores = apply_min_p(scores, opts["min_p"], keep)
        if opts["typical_p"] < 1.0:
            scores = apply_typical_p(scores, opts["typical_p"], keep)
        if 0.0 < opts["epsilon_cutoff"] < 1.0:
            scores = apply_epsilon_cutoff(scores, opts["epsilon_cutoff"], keep)
        if 0.0 < opts["eta_cutoff"] < 1.0:
            scores = apply_eta_cutoff(scores, opts["eta_cutoff"], keep)
        return scores

    @classmethod
    def _next_tokens(
        cls,
        scores: torch.Tensor,
        input_ids: torch.Tensor,
        first_real: torch.Tensor | None,
        opts: dict[str, Any],
        record: dict[str, list[torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """One step's (B,) tokens from (B, V) scores, processed in transformers' order."""
        scores = cls._process_scores(scores, input_ids, first_real, opts)
        if opts["do_sample"]:
            scores = cls._warp(scores, opts, keep=1)
        if opts["renormalize_logits"]:
            scores = torch.log_softmax(scores, dim=-1)
        if record is not None:
            record["scores"].append(scores)
        if not opts["do_sample"]:
            return scores.argmax(dim=-1)
        return torch.multinomial(scores.softmax(dim=-1), num_samples=1).squeeze(1)

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor | None = None,  # (B, N) prompt ids, left-padded for batches
        attention_mask: torch.Tensor | None = None,  # (B, N): 1 = token, 0 = padding
        max_length: int | None = None,  # prompt + new tokens
        max_new_tokens: int | None = None,  # wins over max_length
        do_sample: bool | None = None,
        temperature: float | None = None,
        top_k: int | None | _Unset = UNSET,  # None given here: no top-k filter (as 0)
        top_p: float | None = None,
        num_return_sequences: int | None = None,
        repetition_penalty: float | None = None,
        no_repeat_ngram_size: int | None = None,
        eos_token_id: int | list[int] | None | _Unset = UNSET,  # None given here: no end-of-text token at all
        pad_token_id: int | None = None,
        use_cache: bool = True,
        truncation: bool = False,
        streamer: Streamer | None = None,
        num_beams: int | None = None,  # > 1: beam search (beam sampling with do_sample=True)
        length_penalty: float | None = None,  # beam score = summed log-probs / new length ** length_penalty
        early_stopping: bool | str | None = None,  # beam search: True, False or "never"
        bad_words_ids: list[list[int]] | None = None,  # token sequences that must not be generated
        **kwargs: Any,
    ) -> torch.Tensor:  # (B * num_return_sequences, prompt + new) token ids
        """Continue each prompt; returns prompt and new tokens (finished rows are padded with pad_token_id).

        ``num_beams`` > 1 runs transformers' beam search (scores are summed log-probs, finished
        hypotheses ranked after ``length_penalty``; ``num_return_sequences`` <= ``num_beams`` best are
        returned, and with ``return_dict_in_generate`` their ``sequences_scores`` when ``output_scores``);
        with ``do_sample=True`` the candidates of each step are drawn as transformers draws them (beam
        sampling). Streaming beams is refused.

        Also taken, with transformers' meaning: ``min_new_tokens``, ``min_length``, ``forced_eos_token_id``,
        ``suppress_tokens``, ``begin_suppress_tokens``, ``exponential_decay_length_penalty``,
        ``renormalize_logits`` and, when sampling, ``min_p``, ``typical_p``, ``epsilon_cutoff`` and
        ``eta_cutoff``. Any other argument, or a generation config field that would change the tokens
        and is not implemented (diverse beam search, stop strings...), is refused by name.

        An argument left at None takes its value from ``generation_config`` (a keyword argument, then
        the model's own: the folder's ``generation_config.json``, else its config's special ids), else
        transformers' default (``GENERATION_DEFAULTS``: greedy, top_k 50, max_length 20...). As in
        transformers, ``eos_token_id=None`` given to the call means no end-of-text token (generation
        runs to the length limit), ``top_k=None`` given to it means no top-k filter (as ``top_k=0``),
        ``max_new_tokens`` from either wins over ``max_length``, and the
        sampling filters only apply when sampling.

        A prompt longer than the model's context is an error naming the limit; with ``truncation=True``
        its left is cut so that prompt and new tokens fit. ``seed`` it with ``torch.manual_seed``.
        """
        # generate()'s own arguments by name (no other local exists yet)
        arguments = {name: value for name, value in locals().items() if name not in ("self", "kwargs")}
        g = self._generation_settings(arguments, kwargs)
        input_ids, token_type_ids, pad_token_id = g.input_ids, g.token_type_ids, g.pad_token_id
        limits = self.generation_limits()
        eos_count = len(_eos_list(g.eos_token_id))
        eos = [e for e in _eos_list(g.eos_token_id) if 0 <= e < limits.vocab_size]  # one outside can never come
        if pad_token_id is None and eos:
            pad_token_id = eos[0]
        new_tokens, keep = self._new_token_count(
            input_ids.shape[1], g.max_length, g.max_new_tokens, limits.max_positions, truncation
        )
        copies = g.num_beams if g.num_beams > 1 else g.num_return_sequences  # rows per prompt
        input_ids, attention_mask, token_type_ids = _prompt_rows(
            input_ids, attention_mask, token_type_ids, keep, copies, pad_token_id, eos
        )
        opts = _search_options(g, eos, eos_count, input_ids.shape[1], new_tokens, limits.vocab_size)
        cache = self.new_cache(input_ids.shape[1] + new_tokens) if use_cache else None
        record: dict[str, list[torch.Tensor]] | None = None
        if g.as_dict:
            record = {"scores": [], "logits": []}
        if g.num_beams > 1:
            sequences, sequences_scores, beam_indices = self._beam_decode(
                input_ids, attention_mask, new_tokens, cache, eos, pad_token_id, opts, token_type_ids, record, vars(g)
            )
            return _generate_output(sequences, record, g.want_scores, g.want_logits, sequences_scores, beam_indices)
        sequences = self._decode(
            input_ids, attention_mask, new_tokens, cache, eos, pad_token_id, opts, streamer, token_type_ids, record
        )
        return _generate_output(sequences, record, g.want_scores, g.want_logits)

    def _generation_settings(self, arguments: dict[str, Any], kwargs: dict[str, Any]) -> SimpleNamespace:
        """:meth:`generate`'s settings from its ``arguments`` and its other ``kwargs``: each argument,
        else the generation config's, else transformers' default; the prompt (``inputs`` or ``input_ids``)
        and its token types as (B, N); the rest of ``kwargs`` taken or refused by name; the sampling
        settings neutral when not sampling; all checked."""
        own = self.__dict__.get("_generation_config") or GenerationConfig.from_model_config(self.config)
        gen = kwargs.pop("generation_config", None)
        # transformers fills what a given generation config leaves unset from the model's own
        sources = [own] if gen is None or gen is own else [gen, own]

        def setting(name: str, given: Any = None) -> Any:
            if given is not None:
                return given
            for source in sources:
                value = getattr(source, name, None)
                if value is not None:
                    return value
            return GENERATION_DEFAULTS[name]

        for source in sources:
            _refuse_unsupported_fields(source)
        g = SimpleNamespace(**{name: setting(name, arguments[name]) for name in _CALL_SETTINGS})
        # transformers keeps an explicit top_k=None, which turns the filter off; left out, it is 50
        top_k, eos_token_id = arguments["top_k"], arguments["eos_token_id"]
        g.top_k = setting("top_k") if top_k is UNSET else (0 if top_k is None else top_k)
        g.eos_token_id = setting("eos_token_id") if eos_token_id is UNSET else eos_token_id
        input_ids = arguments["input_ids"]
        if "inputs" in kwargs:  # transformers' name for the prompt ids
            if input_ids is not None:
                raise TypeError("generate() got the prompt twice: as input_ids and as inputs")
            input_ids = kwargs.pop("inputs")
        # A BertTokenizer's encoding carries token_type_ids; GPT-2 embeds them, and new tokens take
        # the prompt's last type, as in transformers.
        token_type_ids = kwargs.pop("token_type_ids", None)
        g.extra = {name: setting(name, kwargs.pop(name, None)) for name in _PROCESSOR_FIELDS}
        g.as_dict = bool(setting("return_dict_in_generate", kwargs.pop("return_dict_in_generate", None)))
        g.want_scores = bool(setting("output_scores", kwargs.pop("output_scores", None)))
        g.want_logits = bool(setting("output_logits", kwargs.pop("output_logits", None)))
        kwargs.pop("tokenizer", None)  # transformers reads it for stop_strings alone, refused above or below
        for key, value in kwargs.items():
            if key not in _UNSUPPORTED_FIELDS:
                raise TypeError(f"generate() got an unsupported argument {key}={value!r}")
            _refuse_unsupported_fields(GenerationConfig(**{key: value}))  # one left off is transformers' no-op
        if input_ids is None:
            raise ValueError("generate() needs input_ids (the tokenized prompt)")
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(0)
        if token_type_ids is not None:
            token_type_ids = token_type_ids.unsqueeze(0) if token_type_ids.dim() == 1 else token_type_ids
            if token_type_ids.shape != input_ids.shape:
                raise ValueError(
                    f"token_type_ids has shape {tuple(token_type_ids.shape)}, input_ids {tuple(input_ids.shape)}"
                )
        g.input_ids, g.token_type_ids = input_ids, token_type_ids
        if not g.do_sample:  # only sampling reads these, so greedy search ignores them, as transformers does
            g.temperature, g.top_k, g.top_p = 1.0, 0, 1.0
            g.extra.update(min_p=None, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0)
        self._validate_generation_args(
            g.temperature, g.top_k, g.top_p, g.repetition_penalty, g.num_return_sequences, g.no_repeat_ngram_size
        )
        self._validate_beam_args(
            g.num_beams, g.length_penalty, g.early_stopping, g.num_return_sequences, arguments["streamer"]
        )
        return g

    def _last_logits(
        self,
        ids: torch.Tensor,  # (B, n): the new tokens with a cache, else every token
        mask: torch.Tensor | None,  # (B, cached + n) or None without padding
        positions: torch.Tensor | None,  # (B, cached + n) or None without padding
        token_type_ids: torch.Tensor | None,  # (B, cached + n)
        cache: Any,
        head_t: torch.Tensor | None = None,  # (H, V) copy of the output embedding, at batch 1
    ) -> torch.Tensor:  # (B, V) logits of each row's last position
        """One forward of ``ids`` and the vocabulary projection of the last position only."""
        n = ids.shape[1]
        out = self.base_model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=None if positions is None else positions[:, -n:],
            token_type_ids=None if token_type_ids is None else token_type_ids[:, -n:],
            past_key_values=cache,
            use_cache=cache is not None,
            return_dict=True,
        )
        last = out.last_hidden_state[:, -1, :]  # (B, H)
        head = self.get_output_embeddings()
        logits = last @ head_t if head_t is not None else (head.weight @ last.T).T  # (B, V)
        if head.bias is not None:
            logits = logits + head.bias
        return logits

    def _decode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        new_tokens: int,
        cache: Any,
        eos: list[int],
        pad_token_id: int | None,
        opts: dict[str, Any],
        streamer: Streamer | None,
        token_type_ids: torch.Tensor | None = None,
        record: dict[str, list[torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """The decoding loop: one forward of the new token(s) per step, until ``new_tokens`` or every EOS.
        ``record`` collects each step's raw logits and the processed scores the token was chosen from."""
        padded = attention_mask is not None and not bool(attention_mask.all())
        mask = attention_mask.long() if padded else None
        # Left padding: each row's positions start at its first real token (padding positions are 0).
        positions = (mask.cumsum(-1) - 1).clamp_min(0) if padded else None
        first_real = mask.argmax(dim=1) if padded else None
        B, device, use_cache = input_ids.shape[0], input_ids.device, cache is not None
        unfinished = torch.ones(B, dtype=torch.bool, device=device)
        head = self.get_output_embeddings()
        head_t = head.weight.t().contiguous() if B == 1 else None  # (H, V), see the module docs
        step_ids = input_ids
        for step in range(new_tokens):
            ids = step_ids if use_cache else input_ids
            logits = self._last_logits(ids, mask, positions, token_type_ids, cache, head_t)
            if record is not None:
                record["logits"].append(logits.float().clone())  # the scores below may change in place
            scores = logits.float()
            next_tokens = self._next_tokens(scores, input_ids, first_real, opts, record)
            if eos:
                next_tokens = torch.where(unfinished, next_tokens, pad_token_id)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            step_ids = next_tokens[:, None]
            if streamer is not None:
                streamer.put(next_tokens)
            if token_type_ids is not None:
                token_type_ids = torch.cat([token_type_ids, token_type_ids[:, -1:]], dim=-1)
            if padded:
                mask = torch.cat([mask, mask.new_ones(B, 1)], dim=-1)
                positions = torch.cat([positions, positions[:, -1:] + 1], dim=-1)
            if eos:
                unfinished &= ~torch.isin(next_tokens, torch.tensor(eos, device=device))
                if not bool(unfinished.any()):
                    break
        if streamer is not None:
            streamer.end()
        return input_ids
