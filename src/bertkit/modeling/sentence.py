"""Sentence embeddings: an encoder, a pooling rule and optional L2 normalisation.

A sentence-embedding folder is the encoder's ``save_pretrained`` folder plus the three files
sentence-transformers reads (``modules.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``), so ``SentenceTransformer(folder)`` and
``pipeline("sentence-embedding", model=folder)`` load the same model and give the same vectors.
Pooling has no weights: the encoder's state dict is the checkpoint's, key for key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit._io import atomic_write_json

__all__ = ["POOLINGS", "SentenceEncoder", "load_sentence_encoder", "pool", "save_sentence_folder"]

POOLINGS = ("mean", "cls", "max")


def pool(
    hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str = "mean", normalize: bool = False
) -> torch.Tensor:
    """(B, N, H) token vectors -> (B, H) sentence vectors: mask-aware mean, [CLS] or max, then L2."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    if pooling == "mean":
        vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    elif pooling == "cls":
        vec = hidden[:, 0]
    elif pooling == "max":
        vec = hidden.masked_fill(mask == 0, float("-inf")).max(1).values
    else:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    return nn.functional.normalize(vec, dim=-1) if normalize else vec


class SentenceEncoder:
    """Embeds tokenized texts with gradients: ``enc(features) -> (B, H)``.

    ``model`` is a bare encoder (BertModel and kin), ``tokenizer`` its tokenizer; ``tokenize(texts)``
    pads a batch to its longest text (at most ``max_seq_length`` tokens).
    """

    def __init__(
        self, model: nn.Module, tokenizer: Any, pooling: str = "mean", normalize: bool = True, max_seq_length: int = 256
    ) -> None:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        self.model, self.tokenizer = model, tokenizer
        self.pooling, self.normalize, self.max_seq_length = pooling, normalize, int(max_seq_length)

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        enc = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_seq_length, return_tensors="pt"
        )
        return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}

    def __call__(self, features: dict[str, torch.Tensor], model: nn.Module | None = None) -> torch.Tensor:
        """Sentence vectors of a padded batch; ``model`` (e.g. the DDP wrapper) replaces ``self.model``."""
        out = (model or self.model)(**features)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return pool(hidden.float(), features["attention_mask"], self.pooling, self.normalize)

    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        """(len(texts), H) float32 vectors without gradients, in eval mode, sorted batches by length."""
        texts = list(texts)
        was = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = torch.zeros(len(texts), self.dim)
        try:
            for s in range(0, len(order), batch_size):
                idx = order[s : s + batch_size]
                feats = {k: v.to(device) for k, v in self.tokenize([texts[i] for i in idx]).items()}
                out[idx] = self(feats).float().cpu()
        finally:
            self.model.train(was)
        return out

    def save(self, directory: str | Path) -> None:
        """Write the encoder, tokenizer and sentence-transformers files into ``directory``."""
        self.model.save_pretrained(str(directory), tokenizer=self.tokenizer)
        save_sentence_folder(directory, self.dim, self.pooling, self.normalize, self.max_seq_length)


def save_sentence_folder(directory: str | Path, dim: int, pooling: str, normalize: bool, max_seq_length: int) -> None:
    """The sentence-transformers module files next to an encoder's ``save_pretrained`` files."""
    d = Path(directory)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (d / "2_Normalize").mkdir(exist_ok=True)
    (d / "1_Pooling").mkdir(exist_ok=True)
    atomic_write_json(
        d / "1_Pooling" / "config.json",
        {
            "word_embedding_dimension": dim,
            "pooling_mode_cls_token": pooling == "cls",
            "pooling_mode_mean_tokens": pooling == "mean",
            "pooling_mode_max_tokens": pooling == "max",
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False,
            "include_prompt": True,
        },
        indent=2,
    )
    atomic_write_json(
        d / "sentence_bert_config.json", {"max_seq_length": int(max_seq_length), "do_lower_case": False}, indent=2
    )
    atomic_write_json(d / "modules.json", modules, indent=2)


def load_sentence_encoder(
    folder: str | Path, pooling: str | None = None, normalize: bool | None = None, max_seq_length: int | None = None
) -> SentenceEncoder:
    """A :class:`SentenceEncoder` from a model folder or a model id in the Hugging Face cache;
    pooling, normalisation and length default to the folder's sentence-transformers files (else
    mean, normalised, 256)."""
    from bertkit.hub import resolve_model_path
    from bertkit.modeling.auto import AutoTokenizer, auto_class_for
    from bertkit.modeling.config import check_length_fits
    from bertkit.pipelines.pipelines import sentence_transformers_pooling

    # A model id resolves to its cache snapshot, where its sentence-transformers files are too.
    folder = resolve_model_path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder}: not a model folder (no config.json)")
    st_pool, st_norm, st_len = sentence_transformers_pooling(folder)
    model = auto_class_for("BertModel").from_pretrained(str(folder))
    check_length_fits(model, max_seq_length)
    tok = AutoTokenizer.from_pretrained(str(folder))
    return SentenceEncoder(
        model,
        tok,
        pooling or st_pool or "mean",
        normalize if normalize is not None else (st_norm if st_norm is not None else True),
        max_seq_length or st_len or 256,
    )
