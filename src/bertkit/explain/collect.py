"""What `bertkit explain` shows, gathered from one forward pass of a model folder on one text.

:func:`collect` tokenizes the text (and an optional second text), runs the model once with
attentions and hidden states, and derives every number the report shows: the embedding parts,
per-head attention summaries, each layer's similarity to the embeddings, the sentence vectors and
the head's predictions. :func:`verify` rebuilds the forward pass from the raw checkpoint weights
(see ``from_scratch.py``, and ``verify_modernbert.py`` for ModernBERT) and compares.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import _args as A

from .from_scratch import FAMILIES, Check, rebuild_and_compare
from .neuron import queries_keys
from .verify_modernbert import rebuild_and_compare_modernbert

__all__ = ["VERIFIABLE", "Explanation", "collect", "load_model", "model_class_name", "parse_layers", "verify"]

# The families whose forward pass --verify rebuilds from the raw weights.
VERIFIABLE = (*FAMILIES, "modernbert")


# ---------------------------------------------------------------------------------------- loading


def model_class_name(config: Any) -> str:
    """The bertkit class for a config: the first of ``architectures`` its family registers, else the
    family's bare model (see :mod:`bertkit.modeling.registry`)."""
    from bertkit.modeling import registry

    fam = registry.family(config.model_type)
    return next((a for a in (config.architectures or []) if fam.task_of(a) is not None), fam.class_name("base"))


def load_model(path: str | os.PathLike) -> tuple[Any, Any, Path]:
    """(model in eval mode and float32, its tokenizer, the resolved folder) for a model folder or cached id."""
    from bertkit.hub import resolve_model_path
    from bertkit.modeling import registry
    from bertkit.modeling.auto import AutoConfig, AutoTokenizer

    folder = resolve_model_path(path)
    config = AutoConfig.from_pretrained(folder)
    fam = registry.family(config.model_type)
    task = fam.task_of(model_class_name(config))
    model = fam.model_class(task).from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return model, tokenizer, folder


def _family(model: Any) -> Any:
    from bertkit.modeling import registry

    return registry.family(model.config.model_type)


def parse_layers(spec: str | None, num_layers: int, option: str = "layers", what: str = "layers") -> list[int]:
    """``"0-5"``, ``"3"`` or ``"0,2,4-6"`` -> sorted layer (or head) indices; None -> every one.
    ``option`` is the setting's name (``layers`` or ``heads``)."""
    option = A.flag(option)
    if spec is None or str(spec).strip() == "":
        return list(range(num_layers))
    out: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        try:
            lo, _, hi = part.partition("-")
            a, b = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise ValueError(f"{option}: cannot read {part!r}; write e.g. 0-5, 3 or 0,2,4-6") from None
        if a > b:
            raise ValueError(f"{option}: {part!r} runs backwards; write the lower index first ({b}-{a})")
        if not (0 <= a <= b < num_layers):
            raise ValueError(f"{option}: {part!r} is outside the model's {what} 0-{num_layers - 1}")
        out.update(range(a, b + 1))
    return sorted(out)


# ---------------------------------------------------------------------------------------- the data


@dataclass
class Explanation:
    """Everything the report shows. Arrays are float32 numpy; ``to_json`` writes them as full floats."""

    model_path: str
    model_class: str
    config: dict[str, Any]
    text: str
    pair: str | None
    tokens: list[str]
    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int]]  # character span of each token in its own text ((0, 0) for specials)
    sequence_ids: list[int | None]  # 0 = text, 1 = pair, None = special token
    word_ids: list[int | None]
    layers: list[int]  # the layers whose attention is kept
    attentions: np.ndarray  # (len(layers), heads, N, N)
    embedding_parts: dict[str, np.ndarray]  # name -> (N,) norms
    hidden_state_norms: np.ndarray  # (L + 1, N)
    similarity_to_embedding: np.ndarray  # (L + 1, N) cosine of h_l[i] with h_0[i]
    cls_vs_mean: np.ndarray  # (L + 1,) cosine of h_l[CLS] with the mean of the other tokens
    head_summaries: dict[str, np.ndarray]  # name -> (len(layers), heads)
    sentence_vectors: dict[str, np.ndarray]  # "cls", "pooler", "mean" -> (H,)
    pooler_output: np.ndarray | None
    predictions: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    attributions: dict[str, Any] | None = None  # see attributions.py; filled by explain(attributions=...)
    neuron: dict[str, Any] | None = None  # queries and keys per kept layer; see neuron.py
    heads: list[int] | None = None  # the heads kept in attentions and neuron (--heads); None = every head
    lens: dict[str, Any] | None = None  # the logit lens at the [MASK] positions; see lens.py
    lang: str = "en"  # the language of the report's words (report.LANGS)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able dict; floats keep their full float32 value."""

        def arr(a: np.ndarray | None) -> Any:
            return None if a is None else a.astype(np.float64).tolist()

        return {
            "model": self.model_path,
            "model_class": self.model_class,
            "text": self.text,
            "pair": self.pair,
            "notes": self.notes,
            "tokens": self.tokens,
            "input_ids": self.input_ids,
            "token_type_ids": self.token_type_ids,
            "offsets": [list(o) for o in self.offsets],
            "sequence_ids": self.sequence_ids,
            "word_ids": self.word_ids,
            "layers": self.layers,
            "attentions": arr(self.attentions),
            "embedding_parts": {k: arr(v) for k, v in self.embedding_parts.items()},
            "hidden_state_norms": arr(self.hidden_state_norms),
            "similarity_to_embedding": arr(self.similarity_to_embedding),
            "cls_vs_mean": arr(self.cls_vs_mean),
            "head_summaries": {k: arr(v) for k, v in self.head_summaries.items()},
            "sentence_vectors": {k: arr(v) for k, v in self.sentence_vectors.items()},
            "pooler_output": arr(self.pooler_output),
            "predictions": self.predictions,
            "heads": self.heads,
            "attributions": self.attributions,
            "lens": self.lens,
            "neuron": None
            if self.neuron is None
            else {k: arr(v) if isinstance(v, np.ndarray) else v for k, v in self.neuron.items()},
        }


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1).float()


def _max_tokens(model: Any) -> int:
    """The longest input the model's positions cover: RoBERTa's table also holds the padding position
    and the one before the first token, so roberta-base takes 512 tokens, not its 514 rows."""
    return int(getattr(model, "max_positions", model.config.max_position_embeddings))


def _encode(tokenizer: Any, text: str, pair: str | None, max_len: int) -> tuple[Any, list[str]]:
    if not isinstance(text, str) or not text.strip():
        raise ValueError('the text to explain is empty; give a sentence, e.g. bertkit explain --model DIR "a text"')
    if pair is not None and not pair.strip():
        raise ValueError(f"{A.flag('pair')} is empty; leave it out or give a second text")
    notes = []
    full = (
        len(tokenizer.tokenize(text))
        + (len(tokenizer.tokenize(pair)) if pair is not None else 0)
        + tokenizer.num_special_tokens_to_add(pair=pair is not None)
    )
    enc = tokenizer(text, pair, truncation=True, max_length=max_len, return_offsets_mapping=True)
    if full > max_len:
        notes.append(
            f"The input has {full} tokens; it was truncated to {max_len}, the model's "
            f"max_position_embeddings. Tokens past position {max_len - 1} are not shown."
        )
    return enc, notes


def _head_summaries(att: torch.Tensor, tokens: list[str]) -> dict[str, np.ndarray]:
    """Per layer and head, averaged over the query tokens (the patterns of Clark et al. 2019)."""
    n = att.shape[-1]
    p = att.double()
    entropy = -(p * torch.log2(p.clamp_min(1e-30))).sum(-1).mean(-1)  # bits; log2(N) = uniform
    is_cls = torch.tensor([t == "[CLS]" for t in tokens])
    is_sep = torch.tensor([t == "[SEP]" for t in tokens])
    eye = torch.eye(n, dtype=torch.bool)
    nb = torch.zeros(n, n, dtype=torch.bool)
    idx = torch.arange(n - 1)
    nb[idx, idx + 1] = True
    nb[idx + 1, idx] = True
    out = {
        "entropy": entropy,
        "cls": p[..., is_cls].sum(-1).mean(-1),
        "sep": p[..., is_sep].sum(-1).mean(-1),
        "self": p[..., eye].view(*p.shape[:2], n).mean(-1),
        "neighbours": (p * nb).sum(-1).mean(-1),
    }
    return {k: v.float().numpy() for k, v in out.items()}


def _predictions(
    model: Any, out: Any, tokenizer: Any, enc: Any, texts: tuple[str, str | None], top_k: int, all_positions: bool
) -> dict | None:
    from bertkit.modeling.registry import model_task_of

    task = model_task_of(model)
    cfg = model.config
    ids = enc["input_ids"]
    if task in ("masked-lm", "pretraining") and _family(model).pipeline_task(task) == "fill-mask":
        logits = (out.prediction_logits if "prediction_logits" in out else out.logits)[0].float()
        mask_id = tokenizer.mask_token_id
        positions = list(range(len(ids))) if all_positions else [i for i, t in enumerate(ids) if t == mask_id]
        rows = []
        for pos in positions:
            probs = logits[pos].softmax(-1)
            vals, idx = probs.topk(min(top_k, probs.numel()))
            rows.append(
                {
                    "position": pos,
                    "token": tokenizer.convert_ids_to_tokens(ids[pos]),
                    "top": [
                        {"token": tokenizer.convert_ids_to_tokens(int(i)), "id": int(i), "score": float(v)}
                        for v, i in zip(vals, idx)
                    ],
                }
            )
        pred: dict[str, Any] = {"kind": "masked-lm", "positions": rows, "all_positions": all_positions}
        if "seq_relationship_logits" in out:
            nsp = out.seq_relationship_logits[0].float().softmax(-1)
            pred["next_sentence"] = {"is_next": float(nsp[0]), "is_random": float(nsp[1])}
        return pred
    if task == "pretraining" and "logits" in out and out.logits.dim() == 2:  # one logit per token: replaced or not
        probs = out.logits[0].float().sigmoid()
        tokens = tokenizer.convert_ids_to_tokens(ids)
        return {
            "kind": "replaced-token",
            "tokens": [
                {"position": i, "token": t, "replaced": float(p)} for i, (t, p) in enumerate(zip(tokens, probs))
            ],
        }
    if type(model).__name__ == "BertForNextSentencePrediction":  # BERT's own head, not a registry task
        nsp = out.logits[0].float().softmax(-1)
        return {"kind": "next-sentence", "next_sentence": {"is_next": float(nsp[0]), "is_random": float(nsp[1])}}
    if task == "causal-lm":
        return _next_token(out.logits[0, -1].float(), tokenizer, ids, top_k)
    if task == "question-answering":
        return _qa_span(out.start_logits[0].float(), out.end_logits[0].float(), enc, texts)
    if task == "sequence-classification":
        logits = out.logits[0].float()
        if cfg.num_labels == 1:
            kind, scores = "regression", logits
        elif cfg.problem_type == "multi_label_classification":
            kind, scores = "multi-label", logits.sigmoid()
        else:
            kind, scores = "single-label", logits.softmax(-1)
        labels = [
            {"label": cfg.id2label.get(i, f"LABEL_{i}"), "score": float(s), "logit": float(lg)}
            for i, (s, lg) in enumerate(zip(scores, logits))
        ]
        return {"kind": "sequence-classification", "problem": kind, "labels": labels, "head": _classifier_head(model)}
    if task == "token-classification":
        probs = out.logits[0].float().softmax(-1)
        words, seen = [], set()
        text_of = {0: texts[0], 1: texts[1]}
        for i, (w, s) in enumerate(zip(enc.word_ids(), enc.sequence_ids())):
            if w is None or (s, w) in seen:
                continue
            seen.add((s, w))  # a word's tag is read at its first piece, as in training
            j = [k for k, (w2, s2) in enumerate(zip(enc.word_ids(), enc.sequence_ids())) if w2 == w and s2 == s]
            start, end = enc["offset_mapping"][j[0]][0], enc["offset_mapping"][j[-1]][1]
            score, label = probs[i].max(-1)
            words.append(
                {
                    "word": text_of[s][start:end],
                    "sequence": s,
                    "first_token": i,
                    "tag": cfg.id2label.get(int(label), f"LABEL_{int(label)}"),
                    "score": float(score),
                }
            )
        return {"kind": "token-classification", "words": words}
    return None


# What each family's sequence classifier reads; a family not listed reads the pooler as BERT does.
_CLASSIFIER_HEADS = {
    "bert": "a linear layer on pooler_output (tanh(dense(h_[CLS])))",
    "distilbert": "pre_classifier (dense) and ReLU on the first token's final vector, then a linear classifier "
    "(DistilBERT has no pooler)",
    "electra": "classifier.dense and GELU on the first token's final vector, then classifier.out_proj "
    "(ELECTRA has no pooler)",
}


def _classifier_head(model: Any) -> str:
    """What the model's sequence classifier computes its logits from, in words."""
    return _CLASSIFIER_HEADS.get(model.config.model_type, _CLASSIFIER_HEADS["bert"])


def _next_token(logits: torch.Tensor, tokenizer: Any, ids: list[int], top_k: int) -> dict[str, Any]:
    """A causal LM's top next tokens after the last token of the input."""
    probs = logits.softmax(-1)
    vals, idx = probs.topk(min(top_k, probs.numel()))
    return {
        "kind": "next-token",
        "position": len(ids) - 1,
        "after": tokenizer.convert_ids_to_tokens(ids[-1]),
        "top": [
            {
                "token": tokenizer.convert_ids_to_tokens(int(i)),
                "id": int(i),
                "score": float(v),
                "logit": float(logits[i]),
            }
            for v, i in zip(vals, idx)
        ],
    }


def best_answer_span(
    start: torch.Tensor, end: torch.Tensor, context: list[int], max_answer_tokens: int = 30
) -> tuple[int, int]:
    """The (start, end) token positions of extractive QA's answer: context positions s <= e, at most
    ``max_answer_tokens`` apart, with the largest start + end logit (what the report shows and the
    attributions explain)."""
    s_np, e_np = start.double().numpy(), end.double().numpy()
    # The context's tokens are consecutive, so the next max_answer_tokens of them are the spans from i.
    return max(
        ((i, j) for a, i in enumerate(context) for j in context[a : a + max_answer_tokens]),
        key=lambda p: s_np[p[0]] + e_np[p[1]],
    )


def _qa_span(
    start: torch.Tensor, end: torch.Tensor, enc: Any, texts: tuple[str, str | None], max_answer_tokens: int = 30
) -> dict[str, Any]:
    """Extractive QA's best span: the context tokens s <= e (at most ``max_answer_tokens``) with the
    largest start + end logit. The context is the second text when there is one (question, context)."""
    ctx_seq = 1 if texts[1] is not None else 0
    ctx = [i for i, s in enumerate(enc.sequence_ids()) if s == ctx_seq]
    if not ctx:
        return {"kind": "question-answering", "span": None}
    best = best_answer_span(start, end, ctx, max_answer_tokens)
    p_start, p_end = start.softmax(-1), end.softmax(-1)
    offs = enc["offset_mapping"]
    i, j = best
    return {
        "kind": "question-answering",
        "context": "pair" if ctx_seq else "text",
        "max_answer_tokens": max_answer_tokens,
        "span": {
            "answer": texts[ctx_seq][offs[i][0] : offs[j][1]],
            "start_token": i,
            "end_token": j,
            "start_logit": float(start[i]),
            "end_logit": float(end[j]),
            "start_score": float(p_start[i]),
            "end_score": float(p_end[j]),
            "char_start": int(offs[i][0]),
            "char_end": int(offs[j][1]),
        },
    }


# The configuration the report shows beside the model.
_CONFIG_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "hidden_act",
    "layer_norm_eps",
)


@torch.no_grad()
def collect(
    model: Any,
    tokenizer: Any,
    text: str,
    pair: str | None = None,
    layers: str | list[int] | None = None,
    top_k: int = 5,
    all_positions: bool = False,
    model_path: str = "",
    heads: str | list[int] | None = None,
) -> Explanation:
    """Run ``model`` once on ``text`` (and ``pair``) and gather everything the report shows."""
    from bertkit._args import positive_int

    top_k = positive_int.check("top_k", top_k)
    cfg = model.config
    base = model.base_model
    fam = _family(model)
    layer_ids = layers if isinstance(layers, list) else parse_layers(layers, cfg.num_hidden_layers)
    head_ids = heads if isinstance(heads, list) else parse_layers(heads, cfg.num_attention_heads, "heads", "heads")
    enc, notes = _encode(tokenizer, text, pair, _max_tokens(model))
    ids = torch.tensor([enc["input_ids"]])
    types = torch.tensor([enc.get("token_type_ids") or [0] * ids.shape[1]])
    model.eval()
    with torch.inference_mode():
        # Segment ids go in only where the family embeds them as segments (GPT-2 would add word vectors).
        out = model(
            input_ids=ids,
            token_type_ids=types if fam.has_token_types else None,
            output_attentions=True,
            output_hidden_states=True,
            return_dict=True,
        )
        hs = [h[0].float() for h in out.hidden_states]  # L + 1 of (N, H)
        att = torch.stack([a[0].float() for a in out.attentions])  # (L, h, N, N)
        pooler = getattr(base, "pooler", None)
        pooled = pooler(hs[-1][None])[0] if pooler is not None else None
        tables = model.embedding_tables()
        n = ids.shape[1]
        rows = {"word": ids[0], "position": torch.arange(n), "token_type": types[0]}
        parts = {k: t.weight.detach()[rows[k]].float() for k, t in tables.items()}
    parts["sum"] = sum(parts.values())
    # A family without segments adds nothing for them: a zero row keeps the report's table whole.
    parts.setdefault("token_type", torch.zeros_like(parts["sum"]))
    parts["layernorm"] = hs[0]
    if tables["word"].embedding_dim != cfg.hidden_size:
        notes.append(
            f"The embeddings are {tables['word'].embedding_dim} wide and projected to hidden_size "
            f"{cfg.hidden_size} (embeddings_project): 'after LayerNorm' is the projected vector."
        )
    if fam.kind != "encoder":
        notes.append(
            f"{type(model).__name__} is a causal decoder: each token attends to itself and the tokens "
            "before it; the first hidden state is the embedding sum itself (no LayerNorm before layer 0)."
        )
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    H = torch.stack(hs)  # (L + 1, N, H)
    others = H[:, 1:].mean(1) if n > 1 else H[:, 0]
    sentence = {"cls": hs[-1][0], "mean": hs[-1].mean(0)}
    if pooled is not None:
        sentence["pooler"] = pooled
    else:
        notes.append(f"{type(model).__name__} has no pooler, so there is no pooler_output.")
    predictions = _predictions(model, out, tokenizer, enc, (text, pair), top_k, all_positions)
    if predictions is None and fam.task_of(type(model).__name__) != "base":
        notes.append(f"The {type(model).__name__} head is not shown; the report explains its encoder.")
    if fam.task_of(type(model).__name__) == "base":
        notes.append("This folder holds the encoder only (no task head): the report explains the encoder.")
    sel = att[layer_ids][:, head_ids]
    neuron = queries_keys(base, hs, layer_ids)
    if neuron is not None and len(head_ids) < cfg.num_attention_heads:
        neuron.update(queries=neuron["queries"][:, head_ids], keys=neuron["keys"][:, head_ids])
    return Explanation(
        model_path=model_path,
        model_class=type(model).__name__,
        config={k: getattr(cfg, k, None) for k in _CONFIG_FIELDS},
        text=text,
        pair=pair,
        tokens=tokens,
        input_ids=list(enc["input_ids"]),
        token_type_ids=types[0].tolist(),
        offsets=[tuple(o) for o in enc["offset_mapping"]],
        sequence_ids=list(enc.sequence_ids()),
        word_ids=list(enc.word_ids()),
        layers=layer_ids,
        attentions=sel.numpy(),
        embedding_parts={k: v.norm(dim=-1).numpy() for k, v in parts.items()},
        hidden_state_norms=H.norm(dim=-1).numpy(),
        similarity_to_embedding=_cos(H, H[:1].expand_as(H)).numpy(),
        cls_vs_mean=_cos(H[:, 0], others).numpy(),
        head_summaries=_head_summaries(sel, tokens),
        sentence_vectors={k: v.numpy() for k, v in sentence.items()},
        pooler_output=None if pooled is None else pooled.numpy(),
        predictions=predictions,
        notes=notes,
        neuron=neuron,
        heads=None if len(head_ids) == cfg.num_attention_heads else head_ids,
    )


# ---------------------------------------------------------------------------------------- verification


def model_outputs_for_check(model: Any, input_ids: list[int], token_type_ids: list[int]) -> dict[str, Any]:
    """Run ``model`` (one of :data:`VERIFIABLE`) and return the outputs ``rebuild_and_compare`` compares against."""
    from bertkit.modeling.registry import model_task_of

    name = type(model).__name__
    fam = _family(model)
    with torch.inference_mode():
        out = model(
            input_ids=torch.tensor([input_ids]),
            token_type_ids=torch.tensor([token_type_ids]) if fam.has_token_types else None,
            output_attentions=True,
            output_hidden_states=True,
            return_dict=True,
        )
        base = model.base_model
        res: dict[str, Any] = {
            "hidden_states": [h[0] for h in out.hidden_states],
            "attentions": [a[0] for a in out.attentions],
            "pooler_output": None,
        }
        qk = queries_keys(model.base_model, res["hidden_states"], range(len(res["attentions"])))
        if qk is not None:  # the neuron view's numbers, checked against the rebuilt projections
            res["queries"], res["keys"] = torch.from_numpy(qk["queries"]), torch.from_numpy(qk["keys"])
        task = model_task_of(model)
        pooler = getattr(base, "pooler", None)  # DistilBERT and ELECTRA have none
        if task == "base":
            res["pooler_output"] = None if getattr(out, "pooler_output", None) is None else out.pooler_output[0]
        elif pooler is not None:
            # Head models do not return the pooled vector; the pooler module's own output stands in.
            res["pooler_output"] = pooler(out.hidden_states[-1])[0]
        if task == "masked-lm":
            res["mlm_logits"] = out.logits[0]
        elif task == "pretraining" and fam.pipeline_task(task) != "fill-mask":  # ELECTRA's discriminator
            res["replaced_logits"] = out.logits[0]
        elif task == "pretraining":
            res["mlm_logits"] = out.prediction_logits[0]
            res["nsp_logits"] = out.seq_relationship_logits[0]
        elif name == "BertForNextSentencePrediction":  # BERT's own head, not a registry task
            res["nsp_logits"] = out.logits[0]
        elif task in ("sequence-classification", "token-classification"):
            res["classifier_logits"] = out.logits[0]
        elif task == "question-answering":
            res["qa_logits"] = torch.stack([out.start_logits[0], out.end_logits[0]], dim=-1)
    return res


def check_verifiable(model: Any, folder: str | os.PathLike) -> None:
    """Raise a ValueError when ``--verify`` cannot rebuild ``model`` (another family, not float32):
    called before a report is written, so a refused run leaves no files."""
    verify = A.flag("verify_weights", "--verify")
    if model.config.model_type not in VERIFIABLE:
        # from_scratch.py and verify_modernbert.py write out the encoders' equations; GPT-2 is a causal decoder.
        raise ValueError(
            f"{verify} rebuilds the forward pass of {', '.join(VERIFIABLE)}; {folder} holds a "
            f"{model.config.model_type!r} model (its report needs no {verify})"
        )
    if model.dtype != torch.float32:
        raise ValueError(f"{verify} compares in float32; the model is {model.dtype}")


def verify(
    model_dir: str | os.PathLike, text: str, pair: str | None = None, model: Any = None, tokenizer: Any = None
) -> list[Check]:
    """Rebuild ``model_dir``'s forward pass from its raw weight file and compare with the model.

    ``model`` defaults to the folder's model loaded with ``from_pretrained``; pass one to check a
    model in memory against the weights on disk.
    """
    from bertkit.checkpoint import find_weights_file, load_state_dict
    from bertkit.hub import resolve_model_path

    folder = resolve_model_path(model_dir)
    if model is None or tokenizer is None:
        loaded, loaded_tok, _ = load_model(folder)
        model = model if model is not None else loaded
        tokenizer = tokenizer if tokenizer is not None else loaded_tok
    check_verifiable(model, folder)
    state = load_state_dict(find_weights_file(folder))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            "the from-scratch check covers absolute position embeddings only, not "
            f"{config['position_embedding_type']!r}"
        )
    enc, _ = _encode(tokenizer, text, pair, _max_tokens(model))
    ids = list(enc["input_ids"])
    # A family without segments (RoBERTa's one token type) reads type 0 whatever the tokenizer says.
    has_types = _family(model).has_token_types
    types = list(enc.get("token_type_ids") or []) if has_types else []
    types = types or [0] * len(ids)
    outputs = model_outputs_for_check(model.eval(), ids, types)
    if model.config.model_type == "modernbert":
        return rebuild_and_compare_modernbert(state, config, ids, outputs)
    return rebuild_and_compare(state, config, ids, types, outputs)
