"""What the server does with a text over the token limit: the one place every endpoint asks.

A request's ``truncation`` field ("error" | "cut" | "chunk") decides; without it the server's flag does
(``--truncate``: cut, else error). ``error`` answers 413 stating the text's token count and the limit;
``cut`` keeps the first tokens and reports how many each text lost (in the response and in the
``bertkit_truncated_*`` counters of ``/metrics``); ``chunk`` pools overlapping windows (see
:mod:`bertkit.pipelines.long_text`). Token counts are exact: the served tokenizer's, special tokens
included. Token classification and question answering tag or search every token of a long text through
overlapping windows, so for them "chunk" is the default and "cut" is refused.
"""

from typing import Any

import numpy as np

from bertkit.pipelines.long_text import TRUNCATION

from .requests import _HOW_TO_CUT, ApiError, _field

__all__ = [
    "EmbedResult",
    "admit_classification",
    "admit_fill_mask",
    "admit_pairs",
    "admit_windowed",
    "admit_zero_shot",
    "embed_texts",
    "tei_truncation_mode",
    "run_by_mode",
    "truncation_direction",
    "truncation_mode",
]


def truncation_mode(payload: Any, truncate_flag: bool) -> str:
    """The request's ``truncation`` field, else the server's default; a 422 for anything else."""

    mode = payload.get("truncation") if isinstance(payload, dict) else None
    if mode is None:
        return "cut" if truncate_flag else "error"
    if mode not in TRUNCATION:
        raise ApiError(422, f"field 'truncation' must be 'error', 'cut' or 'chunk', got {mode!r}")
    return mode


def truncation_direction(payload: Any) -> str:
    """Which end a cut drops, from text-embeddings-inference's ``truncation_direction`` field ("Right",
    its default, drops a text's last tokens; "Left" its first), in either case; a 422 for anything else."""

    given = payload.get("truncation_direction") if isinstance(payload, dict) else None
    if given is None:
        return "right"
    if not isinstance(given, str) or given.lower() not in ("left", "right"):
        raise ApiError(422, f"field 'truncation_direction' must be 'Left' or 'Right', got {given!r}")
    return given.lower()


def tei_truncation_mode(payload: Any, truncate_flag: bool) -> str:
    """``/embed``'s and ``/rerank``'s mode: bertkit's ``truncation`` field, else text-embeddings-inference's
    ``truncate`` boolean (true: cut; false, its default: error), else the server's default."""

    given = payload.get("truncate") if isinstance(payload, dict) else None
    if given is None or payload.get("truncation") is not None:
        return truncation_mode(payload, truncate_flag)
    if not isinstance(given, bool):
        raise ApiError(422, f"field 'truncate' must be true or false, got {given!r}")
    return "cut" if given else "error"


def run_by_mode(items: list[tuple[Any, str]], run: Any) -> list[Any]:
    """Results of ``(input, mode)`` items in order, one ``run(inputs, mode)`` call per mode in the batch
    (requests with different modes share a batch)."""
    out: list[Any] = [None] * len(items)
    for mode in {m for _, m in items}:
        idx = [i for i, (_, m) in enumerate(items) if m == mode]
        for i, r in zip(idx, run([items[i][0] for i in idx], mode)):
            out[i] = r
    return out


class EmbedResult:
    """Vectors of a request's texts, the tokens the model ran and the tokens each text lost to a cut."""

    def __init__(self, vectors: np.ndarray, tokens: int, dropped: list[int]) -> None:
        self.vectors, self.tokens, self.dropped = vectors, tokens, dropped


async def embed_texts(
    service: Any,
    run_job: Any,
    metrics: Any,
    request: Any,
    texts: list[str],
    mode: str,
    field: str,
    side: str = "right",
    normalize: bool | None = None,
) -> EmbedResult:
    """Sentence vectors of ``texts`` under ``mode``, through the batcher (413 for a long text in "error");
    a cut drops the last tokens, or the first with ``side="left"``. ``normalize`` (a request's) overrides
    whether the model's folder normalises its vectors."""
    from bertkit.pipelines.long_text import plan_windows, pool_windows

    unit = service.embedder.normalize if normalize is None else normalize
    # "embed" is the folder's own setting; otherwise pooled vectors come raw and are normalised here
    kind = "embed" if normalize is None else "embed_raw"
    if mode != "chunk":
        feats, tokens, dropped = service.embed_features(texts, field, cut=mode == "cut", side=side)
        vecs = np.asarray(await run_job(request, kind, feats, tokens), np.float32)
        pooled = normalize is not None
    else:
        plan = plan_windows(service.tokenizer, texts, service.token_limit(), "chunk", field)
        tokens, dropped = sum(len(f["input_ids"]) for f in plan.features), plan.dropped
        if len(plan.features) == len(texts):
            vecs = np.asarray(await run_job(request, kind, plan.features, tokens), np.float32)
            pooled = normalize is not None
        else:  # the windows of a long text are pooled before normalising
            raw = np.asarray(await run_job(request, "embed_raw", plan.features, tokens), np.float32)
            vecs = pool_windows(raw, plan, len(texts))
            pooled = True
    if pooled and unit:
        vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    metrics.count_truncated(dropped)
    return EmbedResult(vecs, tokens, dropped)


def admit_classification(service: Any, items: list[Any], mode: str, batched: bool) -> tuple[int, list[int]]:
    """Token count (for the batcher) and tokens each text (or pair) will lose, before a text-classification
    job is queued: a 413 for a text over the limit in "error", a 422 for a pair in "chunk"."""

    limit, flag = service.classify_limit(), service.config.max_input_tokens
    tokens, dropped = 0, []
    for i, x in enumerate(items):
        text, pair = (x["text"], x.get("text_pair")) if isinstance(x, dict) else (x, None)
        if pair is not None and mode == "chunk":
            where = _field(batched, i)
            raise ApiError(422, f"{where}: truncation 'chunk' is for single texts; a pair takes 'error' or 'cut'")
        n = len(service.tokenizer(text, pair)["input_ids"])
        if n > limit and mode == "error":
            over = f"--max-input-tokens {flag}" if n > flag else f"the model's limit of {limit}"
            raise ApiError(413, f"{_field(batched, i)} has {n} tokens, over {over} ({_HOW_TO_CUT})")
        dropped.append(max(0, n - limit) if mode == "cut" else 0)
        tokens += n if mode == "chunk" else min(n, limit)
    return tokens, dropped


def admit_zero_shot(service: Any, texts: list[str], ask: Any, batched: bool) -> tuple[int, list[int]]:
    """Token count (for the batcher) and tokens each text will lose, before a zero-shot job is queued:
    every (text, hypothesis) pair must fit the limit, so "error" answers 413 for a text whose longest
    pair is over it, and "cut" drops the end of the text (never of a hypothesis); a hypothesis that
    leaves no room for any text is a 413 in either mode."""
    from bertkit.pipelines.zero_shot import pair_cuts

    limit, flag = service.classify_limit(), service.config.max_input_tokens
    hypotheses = [ask.template.format(x) for x in ask.labels]
    cuts = pair_cuts(service.tokenizer, texts, hypotheses, limit)
    over = f"--max-input-tokens {flag}" if limit == flag else f"the model's limit of {limit}"
    if cuts.room < 1:
        longest = hypotheses[cuts.longest_hypothesis]
        raise ApiError(413, f"the hypothesis {longest!r} alone fills {over}, leaving no room for the text")
    for i, (cut, n) in enumerate(zip(cuts.dropped, cuts.longest_pair)):
        if cut and ask.mode == "error":
            raise ApiError(
                413,
                f"{_field(batched, i)} has {n} tokens with its longest hypothesis, over {over} "
                "(send truncation 'cut', or start the server with --truncate)",
            )
    return cuts.tokens, cuts.dropped if ask.mode == "cut" else [0] * len(texts)


def admit_pairs(service: Any, query: str, texts: list[str], mode: str) -> tuple[int, list[int]]:
    """Token count (for the batcher) and tokens each ``(query, texts[i])`` pair will lose, before a rerank
    job is queued. A pair's length is exact (the tokenizer's ``[CLS] query [SEP] text [SEP]``): over the
    limit it is a 413 naming the text in "error"; "cut" drops tokens of the text only (never the query);
    "chunk" scores windows of the text that share the query, cut to half the limit."""

    limit, flag = service.classify_limit(), service.config.max_input_tokens
    tok = service.tokenizer
    q = len(tok.encode_batch_ids([query])[0])
    lengths = [len(ids) for ids in tok([query] * len(texts), texts, verbose=False)["input_ids"]]
    tokens, dropped = 0, []
    for i, n in enumerate(lengths):
        over = f"--max-input-tokens {flag}" if n > flag else f"the model's limit of {limit}"
        if n > limit and mode == "error":
            raise ApiError(
                413,
                f"texts[{i}] has {n} tokens with the query, over {over} (send truncate true, or truncation "
                "'cut' or 'chunk', or start the server with --truncate)",
            )
        if n > limit and mode == "cut" and q + tok.num_special_tokens_to_add(pair=True) >= limit:
            raise ApiError(413, f"field 'query' has {q} tokens, which leaves no room for texts[{i}] within {over}")
        if n <= limit:
            dropped.append(0)
        else:  # chunk keeps the whole text but only the first half-limit of the query
            dropped.append(n - limit if mode == "cut" else max(0, q - limit // 2))
        tokens += n if mode == "chunk" else min(n, limit)
    return tokens, dropped


def admit_fill_mask(service: Any, texts: list[str], mode: str, batched: bool) -> tuple[int, list[int]]:
    """Token count and tokens each fill-mask text will lose: a 413 over the limit in "error"; "cut" keeps
    the first tokens and needs a [MASK] among them; "chunk" is a 422 (a mask is filled from its context)."""

    tok = service.tokenizer
    if mode == "chunk":
        raise ApiError(422, "field 'truncation' must be 'error' or 'cut' for fill-mask")
    limit, flag = service.classify_limit(), service.config.max_input_tokens
    tokens, dropped = 0, []
    for i, ids in enumerate(tok(texts, verbose=False)["input_ids"]):
        n = len(ids)
        if n > limit and mode == "error":
            over = f"--max-input-tokens {flag}" if n > flag else f"the model's limit of {limit}"
            raise ApiError(
                413,
                f"{_field(batched, i)} has {n} tokens, over {over} "
                "(send truncation 'cut', or start the server with --truncate)",
            )
        if n > limit and tok.mask_token_id not in ids[: limit - 1]:
            raise ApiError(
                422, f"{_field(batched, i)}: no {tok.mask_token} in its first {limit} tokens, all that a cut keeps"
            )
        dropped.append(max(0, n - limit))
        tokens += min(n, limit)
    return tokens, dropped


def admit_windowed(service: Any, payload: Any, items: list[Any], batched: bool) -> tuple[int, list[bool]]:
    """Token count and, per input, whether it spans several windows, for token classification and
    question answering, which window long texts themselves. The request's ``truncation`` is "chunk"
    (the default) or "error" (a 413 for an input over one window); "cut" would lose what windows keep."""

    given = payload.get("truncation") if isinstance(payload, dict) else None
    mode = "chunk" if given is None else truncation_mode(payload, False)
    if mode == "cut":
        raise ApiError(422, f"field 'truncation' must be 'chunk' or 'error' for {service.task}: it windows long texts")
    tok, window = service.tokenizer, service.window_limit()
    qa = service.task == "question-answering"
    if qa:
        enc = tok([x["question"] for x in items], [x["context"] for x in items], verbose=False)
    else:
        enc = tok(items, verbose=False)
    lengths = [len(ids) for ids in enc["input_ids"]]
    stride = min(128, window // 2)  # the QA pipeline's context overlap between windows
    for i, n in enumerate(lengths):
        if n > window and mode == "error":
            raise ApiError(
                413,
                f"{_field(batched, i)} has {n} tokens, over one window of {window} (send no truncation, "
                "or 'chunk', to run it as overlapping windows)",
            )
        q = len(tok.encode_batch_ids([items[i]["question"].lstrip()])[0]) if qa and n > window else 0
        if q and q + tok.num_special_tokens_to_add(pair=True) + stride >= window:
            raise ApiError(
                413,
                f"{_field(batched, i)}.question has {q} tokens, too long to share windows of {window} tokens "
                f"with a context that overlaps by {stride}",
            )
    return sum(lengths), [n > window for n in lengths]
