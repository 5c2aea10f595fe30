"""The logit lens: what each layer "thinks" the masked word is.

Each layer's hidden state at a ``[MASK]`` (or a chosen position) goes through the model's own
masked-LM head (transform, LayerNorm, decoder), as if the layer were the last. The head was trained
on the last layer's vectors only, so the lens assumes the layers share one space; a layer whose
vectors live elsewhere reads as noise, not as ignorance. At the last layer the lens is the model's
prediction: the same forward, the same head and the same softmax as the fill-mask pipeline, so the
two give the same tokens and probabilities.

Which module is a model's masked-LM head is asked of :data:`LENS_HEADS` (a class name -> a function
returning ``hidden (..., H) -> logits (..., V)``); a registered family whose masked-LM class has the
shared ``_masked_lm`` hook (BERT, DistilBERT, ELECTRA's generator) needs no entry.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["LENS_HEADS", "LogitLens", "lens_head", "lens_lines", "logit_lens", "read_lens", "register_lens_head"]

Head = Callable[[torch.Tensor], torch.Tensor]

# A class name -> a function giving that model's head as hidden -> logits; for a class whose masked-LM
# head is not reached through the shared ``_masked_lm`` hook.
LENS_HEADS: dict[str, Callable[[Any], Head]] = {
    # DistilBERT's masked-LM forward calls its head directly (vocab_transform, GELU, LayerNorm, projector).
    "DistilBertForMaskedLM": lambda model: model._predict,
}

ASSUMPTION = (
    "The lens sends every layer's vector through the head trained on the last layer only: it assumes "
    "the layers share one space. Early layers may read as noise because they live elsewhere, not "
    "because they know nothing."
)


def register_lens_head(class_name: str, head: Callable[[Any], Head]) -> None:
    """Say how the logit lens reaches ``class_name``'s masked-LM head: ``head(model)`` returns a
    function from hidden states (..., H) to vocabulary logits (..., V)."""
    LENS_HEADS[class_name] = head


def lens_head(model: Any) -> Head | None:
    """The model's masked-LM head as hidden -> logits, or None when it has none."""
    from bertkit.modeling import registry

    for cls in type(model).__mro__:
        if cls.__name__ in LENS_HEADS:
            return LENS_HEADS[cls.__name__](model)
    task = registry.model_task_of(model)
    fam = registry.family(model.config.model_type) if task is not None else None
    if fam is None or task not in ("masked-lm", "pretraining") or fam.pipeline_task(task) != "fill-mask":
        return None
    hook = getattr(model, "_masked_lm", None)
    if hook is None:
        return None
    return lambda hidden: hook(hidden, None, False)[0]


def no_head_message(model: Any, where: str) -> str:
    """The one line for a logit lens asked of a model without a masked-LM head."""
    from bertkit.modeling import registry

    name = type(model).__name__
    try:
        fam = registry.family(model.config.model_type)
        mlm = fam.class_name("masked-lm")
    except ValueError:
        mlm = None
    fix = f"; save the model as {mlm} (fill-mask) to see one" if mlm else ""
    return f"the logit lens reads each layer through a masked-LM head; {where} holds a {name}, which has none{fix}"


@dataclass
class LogitLens:
    """Per position and layer, the top tokens the masked-LM head reads from that layer's vector."""

    model: str
    text: str
    tokens: list[str]
    positions: list[dict[str, Any]]  # {"position", "token", "answer", "first_layer", "layers": [...]}
    num_layers: int  # hidden states read: the embeddings (layer 0) and each layer after them
    top_k: int
    assumption: str = ASSUMPTION

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: per position, per layer the top-k tokens, and the final answer's rank and probability."""
        return {
            "model": self.model,
            "text": self.text,
            "tokens": self.tokens,
            "top_k": self.top_k,
            "num_layers": self.num_layers,
            "assumption": self.assumption,
            "positions": self.positions,
        }

    def lines(self) -> list[str]:
        """Short text lines: per position, each layer's top tokens and where the answer first appears."""
        return lens_lines(self.to_json())

    def _repr_html_(self) -> str:
        """A table per position for a notebook: layers down, top tokens across, the answer in bold."""
        e = html.escape
        parts = [f"<div class='bertkit-lens'><p><i>{e(self.assumption)}</i></p>"]
        for p in self.positions:
            ans = p["answer"]["id"]
            parts.append(f"<p><b>position {p['position']} {e(p['token'])}</b>: {e(_first(p))}</p><table>")
            parts.append("<tr><th>layer</th>" + "".join(f"<th>#{i + 1}</th>" for i in range(self.top_k)) + "</tr>")
            for row in p["layers"]:
                cells = "".join(
                    ("<td><b>{}</b> {:.3f}</td>" if t["id"] == ans else "<td>{} {:.3f}</td>").format(
                        e(t["token"]), t["score"]
                    )
                    for t in row["top"]
                )
                mark = " &larr; first" if row["layer"] == p["first_layer"] else ""
                parts.append(f"<tr><td>{row['layer']}{mark}</td>{cells}</tr>")
            parts.append("</table>")
        return "".join(parts) + "</div>"


def lens_lines(data: dict[str, Any]) -> list[str]:
    """:meth:`LogitLens.lines` from the lens's JSON (what ``bertkit explain`` prints)."""
    out = []
    for p in data["positions"]:
        out.append(f"logit lens at position {p['position']} {p['token']}: answer {p['answer']['token']!r}, {_first(p)}")
        for row in p["layers"]:
            tops = ", ".join(f"{t['token']} {t['score']:.3f}" for t in row["top"])
            out.append(f"  layer {row['layer']:>2}: {tops}")
    return out


def _first(p: dict[str, Any]) -> str:
    if p["first_layer"] is None:
        return "never the top token"
    where = "the embeddings" if p["first_layer"] == 0 else f"layer {p['first_layer']}"
    return f"the top token from {where} on"


@torch.no_grad()
def logit_lens(
    model: str | os.PathLike | Any,
    text: str,
    tokenizer: Any = None,
    positions: Sequence[int] | None = None,
    top_k: int = 5,
    pair: str | None = None,
) -> LogitLens:
    """Read every layer of a masked LM at each ``[MASK]`` of ``text`` (or at ``positions``, token
    indices) through its own masked-LM head: the top ``top_k`` tokens and their probabilities per
    layer (layer 0 = the embeddings). ``model`` is a folder or cached id (loaded in float32 as the
    fill-mask pipeline loads it) or a loaded model with its ``tokenizer``."""
    from bertkit._args import positive_int

    top_k = positive_int.check("top_k", top_k)
    if isinstance(model, (str, os.PathLike)):
        from bertkit.inference import prepare_for_inference

        from .collect import load_model

        net, tok, _ = load_model(model)
        tokenizer = tokenizer or tok
        head = lens_head(net)
        if head is None:
            raise ValueError(no_head_message(net, str(model)))
        prepare_for_inference(net, "fp32")  # as the fill-mask pipeline runs it
        name = str(model)
    else:
        if tokenizer is None:
            raise ValueError("logit_lens(model, ...) with a loaded model needs its tokenizer: tokenizer=tok")
        net, name = model, type(model).__name__
        head = lens_head(net)
        if head is None:
            raise ValueError(no_head_message(net, "the model given"))
    return read_lens(net, tokenizer, head, name, text, pair, positions, top_k)


def read_lens(
    net: Any,
    tokenizer: Any,
    head: Head,
    name: str,
    text: str,
    pair: str | None,
    positions: Sequence[int] | None,
    top_k: int,
) -> LogitLens:
    """:func:`logit_lens` on a loaded model whose masked-LM ``head`` (hidden -> logits) is known."""
    from bertkit.inference import softmax
    from bertkit.modeling import registry

    if not isinstance(text, str) or not text.strip():
        raise ValueError("the text for the logit lens is empty; give a sentence with a [MASK] in it")
    enc = tokenizer(text, pair, truncation=True, max_length=net.config.max_position_embeddings)
    ids = list(enc["input_ids"])
    tokens = tokenizer.convert_ids_to_tokens(ids)
    if positions is None:
        positions = [i for i, t in enumerate(ids) if t == tokenizer.mask_token_id]
        if not positions:
            raise ValueError(
                f"no {tokenizer.mask_token} in {text!r}: put one where the lens should look, or give positions"
            )
    bad = [p for p in positions if not isinstance(p, int) or not 0 <= p < len(ids)]
    if bad:
        raise ValueError(f"position {bad[0]!r} is outside the input's tokens 0-{len(ids) - 1}")
    fam = registry.family(net.config.model_type)
    kw = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    if fam.has_token_types and "token_type_ids" in enc:
        kw["token_type_ids"] = torch.tensor([enc["token_type_ids"]])
    was_training = net.training
    net.eval()
    try:
        with torch.inference_mode():
            out = net(**kw, output_hidden_states=True, return_dict=True)
            sel = torch.tensor(list(positions))
            # (L + 1, P, V): every layer's vectors at the chosen positions through the one head
            logits = torch.stack([head(h[0, sel]) for h in out.hidden_states]).float().numpy()
    finally:
        net.train(was_training)
    rows = [_position(logits[:, k], p, tokens[p], tokenizer, top_k, softmax) for k, p in enumerate(positions)]
    return LogitLens(name, text, tokens, rows, logits.shape[0], top_k)


def _position(logits: np.ndarray, pos: int, token: str, tokenizer: Any, top_k: int, softmax: Any) -> dict[str, Any]:
    """One position's rows: per layer the top-k, and the last layer's answer's rank and probability."""
    layers = []
    for layer, lg in enumerate(logits):
        probs = torch.from_numpy(softmax(lg))  # the pipeline's own softmax, so the last layer matches it
        vals, idx = probs.topk(min(top_k, probs.numel()))
        layers.append(
            {
                "layer": layer,
                "top": [
                    {"token": tokenizer.convert_ids_to_tokens(int(i)), "id": int(i), "score": float(v)}
                    for v, i in zip(vals.tolist(), idx.tolist())
                ],
                "probs": probs,
            }
        )
    answer = layers[-1]["top"][0]["id"]
    first = None
    for row in reversed(layers):  # the first layer from which the answer stays the top token
        if row["top"][0]["id"] != answer:
            break
        first = row["layer"]
    for row in layers:
        p = row.pop("probs")
        row["answer_score"] = float(p[answer])
        row["answer_rank"] = int((p > p[answer]).sum()) + 1
    return {
        "position": pos,
        "token": token,
        "answer": {"token": tokenizer.convert_ids_to_tokens(answer), "id": answer},
        "first_layer": first,
        "layers": layers,
    }
