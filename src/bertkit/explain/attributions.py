"""Per-token attributions for a model's prediction: integrated gradients, gradient x input, attention rollout.

What is explained (the *target*) is one scalar of the head's output:

* a sequence classifier: the logit of one label (the predicted one unless a label is given);
* a token classifier: the logit of one tag at one token, for each chosen token (by default the first
  piece of every word, the piece whose tag is the word's tag);
* extractive QA: the start logit at the predicted start, and the end logit at the predicted end;
* masked LM: the logit of the predicted word (or a given word) at each ``[MASK]``;
* a replaced-token detector (ELECTRA's discriminator): the replaced-or-original logit of one token
  (the one most likely replaced unless a token of the text is given); sigmoid gives the probability;
* a causal LM (GPT-2): the logit of the predicted next token (or a given token) after the last one;
* next-sentence prediction: the logit of is-next or is-random.

What a model's head predicts is read from the model registry (the task of its class), so every
registered family (BERT, DistilBERT, ELECTRA, GPT-2) is explained the same way.

Integrated gradients (Sundararajan et al. 2017) follow one stated convention, the same as Captum's
``LayerIntegratedGradients`` on the word-embedding layer with ``method="gausslegendre"``:

* the path runs over the output of the word-embedding lookup (position and token-type vectors stay);
* the baseline keeps ``[CLS]`` and ``[SEP]`` and replaces every other token by ``[PAD]``; a causal LM
  has no such markers, so its baseline keeps the first token and replaces every other token by the
  end-of-text token (the pad token when the tokenizer has no end-of-text token);
* the path integral uses 50 Gauss-Legendre nodes mapped from [-1, 1] to [0, 1];
* a token's attribution is the sum over the hidden size of (x - baseline) x the averaged gradient.

By completeness the attributions sum to f(x) - f(baseline); the difference that remains (the
*residual*) measures the quadrature error and is reported with every result. The interpolation
steps of all targets are flattened into rows and run in batches, one backward pass per batch.

Attention rollout (Abnar & Zuidema 2020) multiplies the layers' head-averaged attention maps, each
mixed with the identity for the residual connection (0.5 A + 0.5 I, rows renormalised); the row of
the target's token says how much each input token flows into it. It has no baseline and no residual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bertkit import _args as A

__all__ = [
    "CONVENTIONS",
    "METHODS",
    "Attributions",
    "Target",
    "TokenAttribution",
    "attribute",
    "attribute_ids",
    "conventions",
    "head_kind",
    "resolve_targets",
]

METHODS = ("integrated-gradients", "gradient-x-input", "attention-rollout")

CONVENTIONS = {
    "integrated-gradients": {
        "layer": "word-embedding output (position and token-type embeddings unchanged)",
        "baseline": "[CLS] and [SEP] kept, every other token replaced by [PAD]",  # see conventions()
        "steps": 50,
        "quadrature": "Gauss-Legendre (numpy.polynomial.legendre.leggauss) mapped to [0, 1]",
        "reduction": "sum over the hidden size",
        "target": "the predicted label unless --target is given; f = the target's logit",
        "residual": "sum of attributions - (f(x) - f(baseline))",
    },
    "gradient-x-input": {
        "layer": "word-embedding output",
        "formula": "d f / d e(x) * e(x), summed over the hidden size",
        "target": "the predicted label unless --target is given; f = the target's logit",
    },
    "attention-rollout": {
        "reference": "Abnar & Zuidema 2020, Quantifying Attention Flow in Transformers",
        "formula": "R = prod over layers of rownorm(0.5 * mean_heads(A_l) + 0.5 * I); the target token's row of R",
        "layers": "all layers, first to last",
    },
}

_CAUSAL_BASELINE = (
    "the first token kept, every other token replaced by the end-of-text token (the pad token "
    "when the tokenizer has none): a causal LM has no [CLS]/[SEP] to keep"
)
_EXPLAINED_TASKS = ("sequence-classification", "token-classification", "question-answering", "masked-lm")
# Token classifiers get one target per word; past this many the rest are left out with a note.
MAX_TOKEN_TARGETS = 64


def head_kind(model: Any) -> str | None:
    """What the model's head predicts (``"sequence-classification"``, ``"next-token"``, ...), read from
    the model registry (the task of the model's class); None for a bare encoder or a head not explained."""
    from bertkit.modeling import registry

    if type(model).__name__ == "BertForNextSentencePrediction":  # BERT's own head, not a registry task
        return "next-sentence"
    task = registry.model_task_of(model)
    if task == "causal-lm":
        return "next-token"
    if task == "pretraining":  # BERT's pretraining head fills masks; ELECTRA's discriminator tags replacements
        fam = registry.family(model.config.model_type)
        return "masked-lm" if fam.pipeline_task(task) == "fill-mask" else "replaced-token"
    return task if task in _EXPLAINED_TASKS else None


def conventions(method: str, kind: str | None) -> dict[str, Any]:
    """``CONVENTIONS[method]`` as it applies to a head of ``kind`` (a causal LM's baseline differs)."""
    conv = dict(CONVENTIONS[method])
    if method == "integrated-gradients" and kind == "next-token":
        conv["baseline"] = _CAUSAL_BASELINE
    return conv


def _uses_token_types(model: Any) -> bool:
    """Whether the model embeds segment ids (GPT-2 would add them as word vectors; DistilBERT has none)."""
    from bertkit.modeling import registry

    return registry.family(model.config.model_type).has_token_types


@dataclass
class Target:
    """One scalar of the head's output: ``index`` into one sequence's output tensor (batch axis removed)."""

    name: str
    label: str
    position: int | None  # the token the target is read at; None for a sequence-level label
    index: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "position": self.position}


@dataclass
class TokenAttribution:
    """One method's per-token scores for one target."""

    method: str
    target: Target
    scores: np.ndarray  # (N,)
    f_x: float | None = None
    f_baseline: float | None = None
    residual: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "target": self.target.to_json(),
            "scores": self.scores.astype(np.float64).tolist(),
            "f_x": self.f_x,
            "f_baseline": self.f_baseline,
            "residual": self.residual,
        }


@dataclass
class Attributions:
    """Every method's results on one text."""

    text: str
    pair: str | None
    tokens: list[str]
    input_ids: list[int]
    word_ids: list[int | None]
    sequence_ids: list[int | None]
    results: list[TokenAttribution]
    notes: list[str] = field(default_factory=list)
    kind: str | None = None  # what the head predicts (see head_kind)

    def to_json(self) -> dict[str, Any]:
        methods = sorted({r.method for r in self.results}, key=METHODS.index)
        return {
            "text": self.text,
            "pair": self.pair,
            "tokens": self.tokens,
            "input_ids": self.input_ids,
            "word_ids": self.word_ids,
            "sequence_ids": self.sequence_ids,
            "conventions": {m: conventions(m, self.kind) for m in methods},
            "notes": self.notes,
            "kind": self.kind,
            "results": [r.to_json() for r in self.results],
        }

    def scores(self, method: str) -> list[np.ndarray]:
        """The per-token scores of ``method``, one array per target."""
        return [r.scores for r in self.results if r.method == method]


# ------------------------------------------------------------------------------ forward on embeddings


def _head_output(model: Any, kind: str, embeds: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
    """The head's output for word-embedding vectors ``embeds`` (B, N, H): (B, ...) as ``Target.index`` reads."""
    types = token_type_ids if _uses_token_types(model) else None
    out = model(inputs_embeds=embeds, token_type_ids=types, return_dict=True)
    if kind == "question-answering":
        return torch.stack([out.start_logits, out.end_logits], dim=1)  # (B, 2, N)
    if kind == "masked-lm":
        return out.logits if hasattr(out, "logits") and out.logits is not None else out.prediction_logits
    return out.logits  # classes, tags, (N,) replaced-token logits, (N, V) next-token logits


def _rows(output: torch.Tensor, indices: list[tuple[int, ...]]) -> torch.Tensor:
    """output[r][indices[r]] for every row r: one scalar per row."""
    return torch.stack([output[(r, *ix)] for r, ix in enumerate(indices)])


def word_embeddings(model: Any, ids: Sequence[int]) -> torch.Tensor:
    """The word-embedding lookup (N, H) of ``ids``, detached."""
    emb = model.get_input_embeddings()
    with torch.no_grad():
        return emb(torch.tensor([list(ids)]))[0].float()


# ------------------------------------------------------------------------------ targets


def _label_names(model: Any) -> list[str]:
    cfg = model.config
    return [cfg.id2label.get(i, f"LABEL_{i}") for i in range(cfg.num_labels)]


def _label_index(model: Any, label: str, what: str) -> int:
    names = _label_names(model)
    if label in names:
        return names.index(label)
    raise ValueError(
        f"{A.given('target', repr(label))} is not a {what} of this model; its {what}s are: {', '.join(names)}"
    )


def check_methods(methods: Sequence[str]) -> None:
    """Raise a one-line ValueError for a method name that is not one of ``METHODS``."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"{A.given('attributions', repr(unknown[0]))}: choose from {', '.join(METHODS)}")


def check_target(model: Any, tokenizer: Any, target: str | None) -> None:
    """Raise a one-line ValueError when the model has no head or ``target`` names nothing it predicts."""
    kind = head_kind(model)
    if kind is None:
        from bertkit.modeling import registry

        if registry.model_task_of(model) not in (None, "base"):
            raise ValueError(
                f"{A.flag('attributions')} does not explain {type(model).__name__}'s head; it explains "
                "classifiers, token classifiers, QA, masked and causal LMs and ELECTRA's discriminator"
            )
        raise ValueError(
            f"{A.flag('attributions')} needs a model with a task head; {type(model).__name__} is an encoder "
            "only (no prediction to explain)"
        )
    if target is None:
        return
    if kind in ("sequence-classification", "token-classification"):
        _label_index(model, target, "label" if kind == "sequence-classification" else "tag")
    elif kind == "question-answering" and target not in ("start", "end"):
        raise ValueError(f"{A.given('target', repr(target))}: a question-answering model's targets are start and end")
    elif kind == "next-sentence" and target not in ("is_next", "is_random"):
        raise ValueError(
            f"{A.given('target', repr(target))}: next-sentence prediction's targets are is_next and is_random"
        )
    elif kind in ("masked-lm", "next-token"):
        ids = tokenizer.convert_tokens_to_ids([target])
        if not ids or ids[0] is None or ids[0] == tokenizer.unk_token_id:
            raise ValueError(f"{A.given('target', repr(target))} is not a word of the model's vocabulary")


def resolve_targets(
    model: Any,
    tokenizer: Any,
    input_ids: Sequence[int],
    word_ids: Sequence[Any],
    output: torch.Tensor,
    target: str | None = None,
    positions: Sequence[int] | None = None,
) -> tuple[list[Target], list[str]]:
    """The targets to explain, given the head's output (batch axis removed) at the real input; and notes."""
    check_target(model, tokenizer, target)
    kind = head_kind(model)
    tokens = tokenizer.convert_ids_to_tokens(list(input_ids))
    notes: list[str] = []
    if kind == "sequence-classification":
        c = _label_index(model, target, "label") if target is not None else int(output.argmax())
        return [Target(_label_names(model)[c], _label_names(model)[c], None, (c,))], notes
    if kind == "next-sentence":
        c = ["is_next", "is_random"].index(target) if target is not None else int(output.argmax())
        name = ["is_next", "is_random"][c]
        return [Target(name, name, None, (c,))], notes
    if kind == "token-classification":
        if positions is None:
            seen, positions = set(), []
            for i, w in enumerate(word_ids):
                if w is not None and w not in seen:
                    seen.add(w)
                    positions.append(i)
            if len(positions) > MAX_TOKEN_TARGETS:
                notes.append(f"Attributions are shown for the first {MAX_TOKEN_TARGETS} of {len(positions)} words.")
                positions = positions[:MAX_TOKEN_TARGETS]
        out = []
        for p in positions:
            c = _label_index(model, target, "tag") if target is not None else int(output[p].argmax())
            tag = _label_names(model)[c]
            out.append(Target(f"{tag} at {tokens[p]} (token {p})", tag, p, (p, c)))
        return out, notes
    if kind == "question-answering":
        from .collect import best_answer_span

        # the answer the report shows: the best span of the context (the second text of a pair)
        ctx_type = 1 if any(k is not None and k[0] == 1 for k in word_ids) else 0
        context = [i for i, k in enumerate(word_ids) if k is not None and k[0] == ctx_type]
        if context:
            start, end = best_answer_span(output[0], output[1], context)
        else:
            start = int(output[0].argmax())
            end = start + int(output[1, start:].argmax())  # the answer cannot end before it starts
        spans = {
            "start": Target(f"start at {tokens[start]} (token {start})", "start", start, (0, start)),
            "end": Target(f"end at {tokens[end]} (token {end})", "end", end, (1, end)),
        }
        return [spans[target]] if target is not None else [spans["start"], spans["end"]], notes
    if kind == "next-token":
        return [_next_token_target(tokenizer, tokens, output, target)], notes
    if kind == "replaced-token":
        return _replaced_token_targets(tokens, word_ids, output, target, positions), notes
    # masked LM: each [MASK]
    masks = (
        list(positions)
        if positions is not None
        else [i for i, t in enumerate(input_ids) if t == tokenizer.mask_token_id]
    )
    if not masks:
        raise ValueError(
            f"{A.flag('attributions')} on a masked-LM model explains the word predicted at [MASK]; the text has "
            "no [MASK] token"
        )
    out = []
    for p in masks:
        w = tokenizer.convert_tokens_to_ids([target])[0] if target is not None else int(output[p].argmax())
        word = tokenizer.convert_ids_to_tokens(w)
        out.append(Target(f"{word} at {tokens[p]} (token {p})", word, p, (p, w)))
    return out, notes


def _next_token_target(tokenizer: Any, tokens: list[str], output: torch.Tensor, target: str | None) -> Target:
    """A causal LM's prediction after the last token: the predicted (or given) next token's logit there."""
    last = len(tokens) - 1
    w = tokenizer.convert_tokens_to_ids([target])[0] if target is not None else int(output[last].argmax())
    word = tokenizer.convert_ids_to_tokens(w)
    return Target(f"next token {word} after {tokens[last]} (token {last})", word, last, (last, w))


def _replaced_token_targets(
    tokens: list[str],
    word_ids: Sequence[Any],
    output: torch.Tensor,
    target: str | None,
    positions: Sequence[int] | None,
) -> list[Target]:
    """A replaced-token detector's logit at the chosen tokens: ``positions``, the first occurrence of the
    token ``target``, or else the text token the model finds most likely replaced."""
    if positions is None and target is not None:
        if target not in tokens:
            raise ValueError(
                f"{A.given('target', repr(target))}: a replaced-token detector explains one token of the text; "
                f"its tokens are: {' '.join(tokens)}"
            )
        positions = [tokens.index(target)]
    if positions is None:
        text = [i for i, w in enumerate(word_ids) if w is not None] or list(range(len(tokens)))
        positions = [max(text, key=lambda i: float(output[i]))]
    return [Target(f"replaced {tokens[p]} (token {p})", "replaced", p, (p,)) for p in positions]


# ------------------------------------------------------------------------------ the methods


def _gradients(
    model: Any,
    kind: str,
    embeds: torch.Tensor,
    types: torch.Tensor,
    indices: list[tuple[int, ...]],
    batch_size: int,
    progress: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient of row r's target scalar with respect to row r of ``embeds`` (R, N, H); and the scalars (R,)."""
    grads, values = [], []
    for lo in range(0, embeds.shape[0], batch_size):
        e = embeds[lo : lo + batch_size].detach().clone().requires_grad_(True)
        out = _head_output(model, kind, e, types.expand(e.shape[0], -1))
        f = _rows(out, indices[lo : lo + batch_size])
        (g,) = torch.autograd.grad(f.sum(), e)  # rows are independent, so one backward gives every row's gradient
        grads.append(g.detach())
        values.append(f.detach())
        if progress is not None:
            progress.update(e.shape[0])
    return torch.cat(grads), torch.cat(values)


def baseline_ids(tokenizer: Any, input_ids: Sequence[int], causal: bool = False) -> list[int]:
    """``input_ids`` with every token but [CLS] and [SEP] replaced by [PAD]; with ``causal`` (a
    left-to-right LM, which has no [CLS]/[SEP]) the first token kept and every other replaced by the
    end-of-text token, or the pad token when the tokenizer has none."""
    if causal:
        eos = getattr(tokenizer, "eos_token_id", None)
        fill = eos if eos is not None else tokenizer.pad_token_id
        if fill is None:
            raise ValueError(
                "integrated gradients on a causal LM need an end-of-text or pad token for the "
                "baseline; the tokenizer has neither"
            )
        return [t if i == 0 else fill for i, t in enumerate(input_ids)]
    keep = {tokenizer.cls_token_id, tokenizer.sep_token_id}
    return [t if t in keep else tokenizer.pad_token_id for t in input_ids]


def integrated_gradients(
    model: Any,
    kind: str,
    x: torch.Tensor,
    base: torch.Tensor,
    types: torch.Tensor,
    targets: list[Target],
    steps: int = 50,
    batch_size: int = 16,
    progress: Any = None,
) -> list[TokenAttribution]:
    """IG of each target along the straight path from ``base`` to ``x`` (both (N, H) word embeddings)."""
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    alphas = torch.tensor(0.5 * (nodes + 1.0), dtype=x.dtype)  # [-1, 1] -> [0, 1]
    w = torch.tensor(0.5 * weights, dtype=torch.float64)
    path = base[None] + alphas[:, None, None] * (x - base)[None]  # (S, N, H)
    embeds = path.repeat(len(targets), 1, 1)  # row t * S + s
    indices = [t.index for t in targets for _ in range(steps)]
    grads, _ = _gradients(model, kind, embeds, types, indices, batch_size, progress)
    with torch.no_grad():
        ends = _head_output(model, kind, torch.stack([x, base]), types.expand(2, -1))
    out = []
    for ti, t in enumerate(targets):
        g = grads[ti * steps : (ti + 1) * steps].double()  # (S, N, H)
        avg = (w[:, None, None] * g).sum(0)
        scores = ((x - base).double() * avg).sum(-1)
        fx, fb = float(ends[(0, *t.index)]), float(ends[(1, *t.index)])
        out.append(
            TokenAttribution("integrated-gradients", t, scores.float().numpy(), fx, fb, float(scores.sum()) - (fx - fb))
        )
    return out


def gradient_x_input(
    model: Any, kind: str, x: torch.Tensor, types: torch.Tensor, targets: list[Target], batch_size: int = 16
) -> list[TokenAttribution]:
    """d f / d e(x) times e(x), summed over the hidden size, for each target."""
    grads, values = _gradients(
        model, kind, x[None].repeat(len(targets), 1, 1), types, [t.index for t in targets], batch_size
    )
    return [
        TokenAttribution(
            "gradient-x-input", t, (grads[i].double() * x.double()).sum(-1).float().numpy(), float(values[i])
        )
        for i, t in enumerate(targets)
    ]


def rollout_matrix(attentions: Sequence[torch.Tensor]) -> torch.Tensor:
    """Attention rollout (N, N) from per-layer attentions, each (heads, N, N), first layer first."""
    n = attentions[0].shape[-1]
    eye = torch.eye(n, dtype=torch.float64)
    r = eye
    for a in attentions:
        m = 0.5 * a.double().mean(0) + 0.5 * eye  # the residual connection carries half of each token through
        m = m / m.sum(-1, keepdim=True)
        r = m @ r
    return r


def attention_rollout(attentions: Sequence[torch.Tensor], targets: list[Target]) -> list[TokenAttribution]:
    """The rollout row of each target's token ([CLS] for a sequence-level label)."""
    r = rollout_matrix(attentions)
    return [
        TokenAttribution("attention-rollout", t, r[t.position if t.position is not None else 0].float().numpy())
        for t in targets
    ]


# ------------------------------------------------------------------------------ the entry points


def attribute_ids(
    model: Any,
    tokenizer: Any,
    input_ids: Sequence[int],
    token_type_ids: Sequence[int],
    word_ids: Sequence[int | None],
    methods: Sequence[str] = ("integrated-gradients",),
    target: str | None = None,
    positions: Sequence[int] | None = None,
    steps: int = 50,
    batch_size: int = 16,
    progress: bool = False,
) -> tuple[list[TokenAttribution], list[str]]:
    """Every method in ``methods`` on one tokenized input; the results and any notes."""
    from tqdm.auto import tqdm

    check_methods(methods)
    kind = head_kind(model)
    check_target(model, tokenizer, target)
    model.eval()
    types = torch.tensor([list(token_type_ids)])
    x = word_embeddings(model, input_ids)
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([list(input_ids)]),
            token_type_ids=types if _uses_token_types(model) else None,
            output_attentions=True,
            return_dict=True,
        )
        head = _head_output(model, kind, x[None], types)[0]
    # Word ids restart in the second text; the token type tells the two texts apart.
    keys = [None if w is None else (t, w) for w, t in zip(word_ids, token_type_ids)]
    targets, notes = resolve_targets(model, tokenizer, input_ids, keys, head, target, positions)
    results: list[TokenAttribution] = []
    for m in dict.fromkeys(methods):
        if m == "integrated-gradients":
            base = word_embeddings(model, baseline_ids(tokenizer, input_ids, causal=kind == "next-token"))
            with tqdm(
                total=steps * len(targets),
                desc="integrated gradients",
                unit="step",
                disable=None if progress else True,
                leave=False,
            ) as bar:  # None: no bar off a terminal
                results += integrated_gradients(model, kind, x, base, types, targets, steps, batch_size, bar)
        elif m == "gradient-x-input":
            results += gradient_x_input(model, kind, x, types, targets, batch_size)
        else:
            results += attention_rollout([a[0] for a in out.attentions], targets)
    return results, notes


def attribute(
    model: Any,
    tokenizer: Any,
    texts: str | Sequence[str],
    pairs: str | Sequence[str | None] | None = None,
    methods: Sequence[str] = ("integrated-gradients",),
    target: str | None = None,
    steps: int = 50,
    batch_size: int = 16,
    progress: bool = False,
    positions: Sequence[int] | None = None,
) -> list[Attributions]:
    """Attributions for each text of ``texts`` (with its ``pairs`` entry as the second text), one per text.

    ``positions`` chooses the tokens a token classifier's tags (a masked LM's words, a replaced-token
    detector's logits) are explained at; by default the first piece of every word (every ``[MASK]``,
    the token most likely replaced).
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    pairs = [pairs] * len(texts) if pairs is None or isinstance(pairs, str) else list(pairs)
    if len(pairs) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(pairs)} pairs")
    out = []
    for text, pair in zip(texts, pairs):
        if not isinstance(text, str) or not text.strip():
            raise ValueError("a text to explain is empty")
        enc = tokenizer(text, pair, truncation=True, max_length=model.config.max_position_embeddings)
        types = enc.get("token_type_ids") or [0] * len(enc["input_ids"])
        results, notes = attribute_ids(
            model,
            tokenizer,
            enc["input_ids"],
            types,
            enc.word_ids(),
            methods,
            target,
            positions,
            steps=steps,
            batch_size=batch_size,
            progress=progress,
        )
        out.append(
            Attributions(
                text,
                pair,
                tokenizer.convert_ids_to_tokens(enc["input_ids"]),
                list(enc["input_ids"]),
                list(enc.word_ids()),
                list(enc.sequence_ids()),
                results,
                notes,
                head_kind(model),
            )
        )
    return out


def add_to_explanation(
    model: Any,
    tokenizer: Any,
    ex: Any,
    methods: Sequence[str],
    target: str | None = None,
    steps: int = 50,
    batch_size: int = 16,
) -> dict[str, Any]:
    """Compute ``methods`` on an ``Explanation``'s input and store them (JSON-able) as ``ex.attributions``."""
    results, notes = attribute_ids(
        model,
        tokenizer,
        ex.input_ids,
        ex.token_type_ids,
        ex.word_ids,
        methods,
        target,
        steps=steps,
        batch_size=batch_size,
        progress=True,
    )
    ex.notes.extend(notes)
    used = list(dict.fromkeys(methods))
    kind = head_kind(model)
    ex.attributions = {
        "methods": used,
        "kind": kind,
        "conventions": {m: conventions(m, kind) for m in used},
        "results": [r.to_json() for r in results],
    }
    return ex.attributions
