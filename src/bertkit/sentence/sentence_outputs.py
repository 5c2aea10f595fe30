"""Two parts of bertkit's ``SentenceTransformer`` kept beside it: every output of ``encode`` at once
(``output_value=None``), and the refusal to write over the folder the model was loaded from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["all_outputs", "refuse_own_folder"]


def all_outputs(
    model: Any,
    texts: list[str],
    single: bool,
    prompt_name: str | None,
    prompt: str | None,
    batch_size: int,
    normalize: bool,
    dim: int | None,
) -> Any:
    """``encode(output_value=None)``: per text a dict of its input ids, type ids, attention mask, token
    vectors and sentence vector, each tensor the text's own length (sentence-transformers pads them to
    their batch's longest)."""
    from bertkit.pipelines.long_text import plan_windows

    kw: dict[str, Any] = dict(prompt_name=prompt_name, prompt=prompt, batch_size=batch_size)
    tokens = model.encode(texts, output_value="token_embeddings", **kw)
    vecs = model.encode(texts, convert_to_tensor=True, normalize_embeddings=normalize, truncate_dim=dim, **kw)
    resolved = model._resolve_prompt(prompt, prompt_name) or ""
    plan = plan_windows(model.tokenizer, [resolved + t for t in texts], model.max_seq_length, "cut")
    out = []
    for f, tok, vec in zip(plan.features, tokens, vecs):
        ids = ("input_ids", "token_type_ids", "attention_mask")
        item = {k: torch.tensor(f[k], device=model.device) for k in ids if k in f}
        out.append({**item, "token_embeddings": tok, "sentence_embedding": vec})
    return out[0] if single else out


def refuse_own_folder(model: Any, path: str | Path, what: str) -> None:
    """One line where ``path`` is the folder ``model`` was loaded from: a save there would replace the
    weights it came from (sentence-transformers writes over them; bertkit asks for ``overwrite=True``)."""
    folder = getattr(model, "folder", None)
    if folder is not None and Path(path).expanduser().resolve() == Path(folder).resolve():
        raise ValueError(
            f"{what}: {path} is the folder this model was loaded from; writing there would replace its "
            "weights: give another folder, or pass overwrite=True to replace them"
        )
