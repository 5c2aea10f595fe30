"""Static embeddings: one vector per token, a sentence is the mean of its tokens' vectors.

A static folder is what model2vec and sentence-transformers' ``StaticEmbedding`` write, and bertkit
reads both:

- model2vec: ``model.safetensors`` (``embeddings``, and optionally ``weights``/``mapping``),
  ``tokenizer.json`` and ``config.json`` (``"model_type": "model2vec"``, ``normalize``);
  model2vec also writes a ``modules.json`` whose StaticEmbedding sits at ``"."`` so that
  sentence-transformers loads the same folder.
- sentence-transformers: ``modules.json`` naming a ``StaticEmbedding`` module, whose folder
  (``0_StaticEmbedding/``) holds ``model.safetensors`` (``embedding.weight``) and ``tokenizer.json``;
  a ``Normalize`` module after it makes the vectors unit length.

bertkit computes a sentence vector exactly as sentence-transformers' ``StaticEmbedding`` does: the
text's tokens without [CLS]/[SEP] (an [UNK] included), the fp32 mean of their rows (an
``embedding_bag``, no padding), then L2 when the folder normalises. model2vec differs slightly (it
drops [UNK], cuts a text at 512 tokens, and sums in the stored dtype); the two agree to a cosine of
about 0.9995 on short texts. sentence-transformers' rule is followed because it is the one a
``StaticEmbedding`` is trained under, and the one bertkit's ``SentenceTransformer`` answers for.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit._io import atomic_path, atomic_write_json
from bertkit._text import read_json

__all__ = [
    "StaticEmbedder",
    "bert_tokenizer_json",
    "find_static_module",
    "flat_ids",
    "is_static_folder",
    "load_static",
    "save_static",
]

_WEIGHTS = "model.safetensors"
_TOKENIZER = "tokenizer.json"


def _module_kind(module: dict[str, Any]) -> str:
    return str(module.get("type", "")).rsplit(".", 1)[-1]


def _modules(folder: Path) -> list[dict[str, Any]] | None:
    path = folder / "modules.json"
    if not path.is_file():
        return None
    modules = read_json(path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ValueError(f"{path}: expected a JSON list of module objects")
    return modules


def find_static_module(folder: str | Path) -> tuple[Path, bool] | None:
    """(the folder holding the static vectors and tokenizer, whether the vectors are L2-normalised)
    when ``folder`` is a static-embedding folder of either library; None otherwise."""
    folder = Path(folder)
    modules = _modules(folder)
    if modules is not None:
        kinds = [_module_kind(m) for m in modules]
        if "StaticEmbedding" not in kinds:
            return None
        if kinds[0] != "StaticEmbedding" or any(k not in ("StaticEmbedding", "Normalize") for k in kinds[1:]):
            raise ValueError(
                f"{folder / 'modules.json'}: modules {', '.join(kinds)}; bertkit runs a StaticEmbedding "
                "optionally followed by a Normalize"
            )
        return folder / str(modules[0].get("path", "") or "."), "Normalize" in kinds
    cfg_path = folder / "config.json"
    if cfg_path.is_file():
        cfg = read_json(cfg_path)
        if isinstance(cfg, dict) and cfg.get("model_type") == "model2vec":
            return folder, bool(cfg.get("normalize", False))
    return None


def is_static_folder(folder: str | Path) -> bool:
    """Whether ``folder`` holds a static embedding model (model2vec's or sentence-transformers')."""
    folder = Path(folder)
    return folder.is_dir() and find_static_module(folder) is not None


def _fold(tensors: dict[str, torch.Tensor], path: Path) -> torch.Tensor:
    """One fp32 row per token id from either library's weight keys (model2vec's ``mapping`` and per-token
    ``weights`` folded in, so ``row[id] = embeddings[mapping[id]] * weights[id]``)."""
    if "embedding.weight" in tensors:
        return tensors["embedding.weight"].float()
    if "embeddings" not in tensors:
        raise ValueError(f"{path}: no 'embedding.weight' or 'embeddings' tensor (keys: {', '.join(sorted(tensors))})")
    emb = tensors["embeddings"].float()
    if "mapping" in tensors:
        emb = emb[tensors["mapping"].long()]
    if "weights" in tensors:
        emb = emb * tensors["weights"].float()[:, None]
    return emb.contiguous()


def _read_vectors(module_dir: Path) -> torch.Tensor:
    from safetensors.torch import load_file

    path = module_dir / _WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (a static folder keeps its vectors there)")
    try:
        tensors = load_file(str(path))
    except Exception as e:  # safetensors raises its own error types for damaged files
        raise ValueError(f"{path}: cannot read the vectors ({e})") from None
    weight = _fold(tensors, path)
    if weight.ndim != 2:
        raise ValueError(f"{path}: vectors of shape {tuple(weight.shape)}, expected (vocabulary, dims)")
    return weight


def load_static(folder: str | Path) -> StaticEmbedder:
    """The static model in ``folder`` (model2vec's or sentence-transformers' layout); a folder whose
    vocabulary and vectors differ in size is a ValueError naming the files and both sizes."""
    from bertkit.tokenization import BertTokenizer

    folder = Path(folder)
    found = find_static_module(folder)
    if found is None:
        raise ValueError(
            f"{folder}: not a static embedding folder (no modules.json with a StaticEmbedding, "
            "no config.json with model_type model2vec)"
        )
    module_dir, normalize = found
    weight = _read_vectors(module_dir)
    if not (module_dir / _TOKENIZER).is_file():
        raise FileNotFoundError(f"{module_dir / _TOKENIZER}: missing (a static folder keeps its tokenizer there)")
    try:
        tokenizer = BertTokenizer.from_pretrained(module_dir)
    except ValueError as e:
        raise ValueError(f"{module_dir / _TOKENIZER}: bertkit reads WordPiece tokenizers only ({e})") from None
    if len(tokenizer) != weight.shape[0]:
        raise ValueError(
            f"{module_dir / _TOKENIZER} has {len(tokenizer)} tokens but {module_dir / _WEIGHTS} has "
            f"{weight.shape[0]} vectors: the vocabulary does not match the vectors"
        )
    return StaticEmbedder(weight, tokenizer, normalize=normalize, folder=folder)


def flat_ids(ids: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(every id in one flat int64 tensor, each text's start in it): ``embedding_bag``'s input and
    offsets, with no padding."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
    offsets = np.zeros(len(ids), np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device)


class StaticEmbedder(nn.Module):
    """Token vectors ``weight`` (vocabulary, dims) and the tokenizer that indexes them.

    :meth:`embed` tokenizes with the fast id path and takes each text's mean with one
    ``embedding_bag`` per batch (flat ids and offsets: no padding), then L2 when ``normalize``.
    """

    def __init__(
        self, weight: torch.Tensor, tokenizer: Any, normalize: bool = True, folder: str | Path | None = None
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.detach().float().contiguous(), requires_grad=False)
        self.tokenizer = tokenizer
        self.normalize = bool(normalize)
        self.folder = Path(folder) if folder is not None else None

    @property
    def dim(self) -> int:
        """The width of the vectors."""
        return int(self.weight.shape[1])

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, without [CLS]/[SEP], as sentence-transformers' StaticEmbedding takes them."""
        return self.tokenizer.encode_batch_ids(texts)

    def bag(self, ids: Sequence[Sequence[int]], normalize: bool | None = None) -> torch.Tensor:
        """(len(ids), dim) fp32: the mean row of each id list (zeros for an empty one), L2 when
        ``normalize`` (default: the folder's setting)."""
        flat, offsets = flat_ids(ids, self.weight.device)
        with torch.no_grad():
            vec = nn.functional.embedding_bag(flat, self.weight, offsets, mode="mean")
        if self.normalize if normalize is None else normalize:
            vec = nn.functional.normalize(vec, dim=-1)
        return vec

    def forward(self, input_ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """sentence-transformers' StaticEmbedding forward: flat ids and per-text offsets -> mean rows."""
        return nn.functional.embedding_bag(input_ids, self.weight, offsets, mode="mean")

    def embed(self, texts: Sequence[str], batch_size: int = 4096, normalize: bool | None = None) -> np.ndarray:
        """(len(texts), dim) float32 sentence vectors, in batches of ``batch_size`` texts."""
        texts = list(texts)
        out = np.empty((len(texts), self.dim), np.float32)
        for start in range(0, len(texts), batch_size):
            part = texts[start : start + batch_size]
            out[start : start + len(part)] = self.bag(self.token_ids(part), normalize).cpu().numpy()
        return out


def bert_tokenizer_json(tokenizer: Any, tokens: Sequence[str]) -> dict[str, Any]:
    """A ``tokenizers`` tokenizer.json for a WordPiece vocabulary ``tokens`` (id = position) with
    ``tokenizer``'s normalisation, no post-processor (no [CLS]/[SEP]: static models pool the text's
    own tokens), no padding and no truncation, as model2vec writes its tokenizers."""
    ids = {t: i for i, t in enumerate(tokens)}
    specials = [getattr(tokenizer, k) for k in ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")]
    added = [
        {
            "id": ids[t],
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t in dict.fromkeys(specials)
        if t in ids
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": sorted(added, key=lambda a: a["id"]),
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": bool(tokenizer.tokenize_chinese_chars),
            "strip_accents": tokenizer.strip_accents,
            "lowercase": bool(tokenizer.do_lower_case),
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {
            "type": "WordPiece",
            "unk_token": tokenizer.unk_token,
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": int(tokenizer.max_input_chars_per_word),
            "vocab": ids,
        },
    }


def save_static(
    folder: str | Path,
    weight: torch.Tensor,
    tokenizer_json: dict[str, Any],
    normalize: bool = True,
    layout: str = "model2vec",
    config: dict[str, Any] | None = None,
) -> None:
    """Write a static model into ``folder`` (which the caller has made, e.g. an atomic temp folder).

    ``layout="model2vec"``: model2vec's files at the top (``embeddings``) plus the ``modules.json``
    model2vec writes, so model2vec, sentence-transformers and bertkit all load it.
    ``layout="sentence-transformers"``: ``0_StaticEmbedding/`` (``embedding.weight``) and
    ``modules.json``, as sentence-transformers saves a StaticEmbedding."""
    from safetensors.torch import save_file

    if layout not in ("model2vec", "sentence-transformers"):
        raise ValueError(f"layout must be 'model2vec' or 'sentence-transformers', got {layout!r}")
    folder = Path(folder)
    weight = weight.detach().float().cpu().contiguous()
    st = layout == "sentence-transformers"
    module_dir = folder / "0_StaticEmbedding" if st else folder
    module_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(module_dir / _WEIGHTS) as tmp:
        save_file({"embedding.weight" if st else "embeddings": weight}, str(tmp))
    atomic_write_json(module_dir / _TOKENIZER, tokenizer_json, indent=None, ensure_ascii=False)
    modules = [
        {
            "idx": 0,
            "name": "0",
            "path": "0_StaticEmbedding" if st else ".",
            "type": "sentence_transformers.models.StaticEmbedding",
        }
    ]
    if normalize:
        (folder / "1_Normalize").mkdir(exist_ok=True)
        modules.append({"idx": 1, "name": "1", "path": "1_Normalize", "type": "sentence_transformers.models.Normalize"})
    atomic_write_json(folder / "modules.json", modules)
    if not st:
        cfg = {
            "model_type": "model2vec",
            "architectures": ["StaticModel"],
            "hidden_dim": int(weight.shape[1]),
            "seq_length": 1000000,
            "normalize": bool(normalize),
            "embedding_dtype": "float32",
            **(config or {}),
        }
        atomic_write_json(folder / "config.json", cfg)
