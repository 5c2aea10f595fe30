"""Distil a static embedding model from a sentence model, with no data (model2vec's method).

Each vocabulary token goes through the teacher as ``[CLS] token [SEP]`` on bertkit's batched,
length-sorted path, and its token vectors are mean-pooled (the three positions, as model2vec pools);
PCA then keeps ``dims`` dimensions, and each row is weighted by its token's rank, a Zipf estimate of
its frequency (``sif / (sif + p(rank))``), so frequent tokens count less in a sentence's mean.
``[unused...]`` placeholder tokens are left out, as model2vec leaves them out. Words from a
``vocabulary`` list that the tokenizer does not hold whole are added as tokens, their vectors the
teacher's mean over their pieces.

The folder written loads in model2vec (``StaticModel.from_pretrained``), in sentence-transformers
(``SentenceTransformer``, a ``StaticEmbedding`` then a ``Normalize``) and in bertkit.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["distill_static", "pca", "zipf_weights"]

_UNUSED = re.compile(r"\[unused\d+\]")


def zipf_weights(n: int, sif_coefficient: float = 1e-4) -> np.ndarray:
    """Weights of tokens by rank (id order): ``sif / (sif + p)``, p a Zipf probability of rank + 2."""
    inv_rank = 1.0 / np.arange(2, n + 2)
    proba = inv_rank / inv_rank.sum()
    return sif_coefficient / (sif_coefficient + proba)


def pca(x: np.ndarray, dims: int) -> np.ndarray:
    """``x`` centred and projected on its ``dims`` principal axes (eigenvectors of the covariance),
    each axis signed so that its largest projection is positive, as model2vec signs them. The products
    run in float32 on torch's threads, as model2vec's run in float32; the small eigenproblem in float64."""
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    xc = xt - xt.mean(dim=0)
    cov = (xc.T @ xc).double() / max(len(xc) - 1, 1)
    _, vecs = torch.linalg.eigh(cov)
    comps = vecs.flip(1)[:, :dims].float()
    scores = xc @ comps
    top = scores.abs().argmax(dim=0)
    scores *= torch.sign(scores[top, torch.arange(scores.shape[1])])
    return scores.numpy()


def _load_teacher(model: str | Path, dtype: str) -> tuple[Path, Any, Any]:
    """(folder, encoder prepared for inference, tokenizer) of a sentence model, or a one-line error."""
    from bertkit.hub import resolve_model_path
    from bertkit.inference import prepare_for_inference
    from bertkit.modeling.auto import AutoModel, AutoTokenizer
    from bertkit.modeling.static import is_static_folder

    folder = resolve_model_path(model)
    if is_static_folder(folder):
        raise ValueError(f"{folder} is already a static embedding model: distil from a transformer sentence model")
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} is not a sentence model folder (no config.json)")
    modules = folder / "modules.json"
    if modules.is_file() and '"Transformer"' not in modules.read_text(encoding="utf-8").replace("models.", '"'):
        raise ValueError(f"{modules}: no Transformer module, so there is no encoder to distil")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except (ValueError, FileNotFoundError) as e:
        raise ValueError(f"{folder}: cannot enumerate the tokenizer's vocabulary ({e})") from None
    try:
        encoder = AutoModel.from_pretrained(str(folder))
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise ValueError(f"{folder} is not a sentence model bertkit can run ({e})") from None
    if type(encoder).__name__.startswith("GPT2"):
        raise ValueError(f"{folder} is a text generator (GPT-2), not a sentence encoder")
    if getattr(encoder, "pooler", None) is not None:
        encoder.pooler = None  # the vectors are token means: the [CLS] pooler's product would be thrown away
    return folder, prepare_for_inference(encoder, dtype), tokenizer


def _vocabulary(tokenizer: Any, extra: Sequence[str]) -> tuple[list[str], list[list[int]]]:
    """(the static model's tokens, in id order, and the teacher's input ids for each)."""
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls is None or sep is None:
        raise ValueError(f"{tokenizer.name_or_path}: the tokenizer has no [CLS]/[SEP] token to frame each token with")
    tokens = [t for t, _ in by_id if not _UNUSED.fullmatch(t)]
    ids = [[cls, tokenizer.vocab[t], sep] for t in tokens]
    seen = set(tokens)
    for word in extra:
        pieces = tokenizer._normalizer.words(word)
        # a word the pre-tokenizer splits (punctuation, spaces) would never be looked up whole
        if len(pieces) != 1 or pieces[0] in seen:
            continue
        seen.add(pieces[0])
        tokens.append(pieces[0])
        ids.append([cls, *tokenizer.encode_batch_ids([pieces[0]])[0], sep])
    return tokens, ids


def _teacher_vectors(encoder: Any, ids: list[list[int]], batch_size: int) -> np.ndarray:
    """(len(ids), hidden) mean-pooled token vectors, through the batched, length-sorted path."""
    from bertkit.inference import run_batched
    from bertkit.modeling.sentence import pool

    feats = [{"input_ids": x, "attention_mask": [1] * len(x), "token_type_ids": [0] * len(x)} for x in ids]

    def post(out: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        hidden = (out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]).float()
        return {"v": pool(hidden, batch["attention_mask"], "mean")}

    res = run_batched(encoder, feats, batch_size=batch_size, postprocess=post, max_batch_tokens=batch_size * 8)
    return np.nan_to_num(np.stack([r["v"] for r in res]))


def distill_static(
    model: str | Path,
    output: str | Path | None = None,
    dims: int | None = 256,
    vocabulary: Sequence[str] | None = None,
    dtype: str = "auto",
    sif_coefficient: float = 1e-4,
    batch_size: int = 1024,
    overwrite: bool = False,
) -> Any:
    """Distil the sentence model ``model`` into a static model; write it to ``output`` (when given)
    and return it as a :class:`bertkit.modeling.static.StaticEmbedder`. ``dims`` None keeps the
    teacher's width (still rotated by PCA); above it is an error naming both numbers."""
    from bertkit import _args as A
    from bertkit.modeling.static import StaticEmbedder, bert_tokenizer_json, save_static
    from bertkit.tokenization import BertTokenizer

    A.positive_int.check("dims", dims, allow_none=True)
    if not 0 < sif_coefficient < 1:
        raise ValueError(f"sif_coefficient must be in (0, 1), got {sif_coefficient}")
    claim = None
    if output is not None:
        from bertkit._folders import claim_output_dir

        owned = ("model.safetensors", "tokenizer.json", "config.json", "modules.json", "1_Normalize")
        claim = claim_output_dir(output, "distill-static", overwrite=overwrite, owned=owned, create=False)

    def work() -> StaticEmbedder:
        from bertkit._io import atomic_update_dir

        weight, tokens, tokenizer, config = _distil(model, dims, vocabulary, dtype, sif_coefficient, batch_size)
        if output is not None and claim is not None:
            with atomic_update_dir(output) as tmp:
                claim.write_marker(tmp)
                save_static(tmp, weight, bert_tokenizer_json(tokenizer, tokens), normalize=True, config=config)
        # the teacher's normalisation over the static vocabulary: what the written tokenizer.json says
        static_tok = BertTokenizer(
            vocab={t: i for i, t in enumerate(tokens)},
            do_lower_case=tokenizer.do_lower_case,
            strip_accents=tokenizer.strip_accents,
            tokenize_chinese_chars=tokenizer.tokenize_chinese_chars,
            unk_token=tokenizer.unk_token,
        )
        return StaticEmbedder(weight, static_tok, normalize=True, folder=output)

    from bertkit._folders import within_claim

    return within_claim(claim, work)


def _distil(
    model: str | Path,
    dims: int | None,
    vocabulary: Sequence[str] | None,
    dtype: str,
    sif_coefficient: float,
    batch_size: int,
) -> tuple[torch.Tensor, list[str], Any, dict[str, Any]]:
    """(vectors, tokens, the teacher's tokenizer, the config model2vec records)."""
    from bertkit.inference import inference_dtype

    t0 = time.perf_counter()
    folder, encoder, tokenizer = _load_teacher(model, dtype)
    width = int(encoder.config.hidden_size)
    if dims is not None and dims > width:
        raise ValueError(f"--dims {dims} is above the model's width {width} ({folder / 'config.json'})")
    tokens, ids = _vocabulary(tokenizer, list(vocabulary or []))
    vecs = _teacher_vectors(encoder, ids, batch_size)
    vecs = pca(vecs, dims or width) * zipf_weights(len(vecs), sif_coefficient)[:, None]
    config = {
        "tokenizer_name": str(folder),
        "apply_pca": dims,
        "sif_coefficient": sif_coefficient,
        "pooling": "mean",
        "teacher_dtype": inference_dtype(encoder),
        "distill_seconds": round(time.perf_counter() - t0, 3),
    }
    return torch.from_numpy(vecs.astype(np.float32)), tokens, tokenizer, config
