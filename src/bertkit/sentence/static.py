"""sentence-transformers' ``StaticEmbedding`` module, and a ``SentenceTransformer`` over a static folder.

``SentenceTransformer(folder)`` on a static folder (model2vec's, or sentence-transformers' with a
``StaticEmbedding`` module) gives a :class:`StaticSentenceTransformer`: the same calls, vectors from
the token table (see :mod:`bertkit.modeling.static` for the rule it follows), no transformer run::

    from bertkit import SentenceTransformer
    from bertkit.sentence.static import StaticEmbedding

    model = SentenceTransformer("my-static-model")              # or modules=[StaticEmbedding...]
    vectors = model.encode(["a sentence", "another"])           # tokenization + one embedding_bag
    static = StaticEmbedding.from_distillation("minilm", pca_dims=256)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertkit.sentence import util
from bertkit.sentence.sentence_transformer import SentenceTransformer, _read_st_config, _refuse, _texts

__all__ = ["StaticEmbedding", "StaticSentenceTransformer", "static_model_for"]


class StaticEmbedding(nn.Module):
    """One trainable vector per token (``embedding.weight``, an ``nn.EmbeddingBag``): a text is the
    mean of its tokens' vectors. ``tokenizer`` is a bertkit WordPiece tokenizer (or a folder holding
    one); ``embedding_weights`` the (vocabulary, dims) table, or ``embedding_dim`` for a new random one."""

    def __init__(
        self,
        tokenizer: Any,
        embedding_weights: np.ndarray | Tensor | None = None,
        embedding_dim: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if isinstance(tokenizer, (str, Path)):
            from bertkit.tokenization import BertTokenizer

            tokenizer = BertTokenizer.from_pretrained(tokenizer)
        if embedding_weights is not None:
            weights = torch.as_tensor(
                np.asarray(embedding_weights) if not isinstance(embedding_weights, Tensor) else embedding_weights
            )
            if weights.ndim != 2 or weights.shape[0] != len(tokenizer):
                raise ValueError(
                    f"StaticEmbedding: embedding_weights of shape {tuple(weights.shape)} for a tokenizer of "
                    f"{len(tokenizer)} tokens: the vocabulary does not match the vectors"
                )
            self.embedding = nn.EmbeddingBag.from_pretrained(weights.float(), freeze=False, mode="mean")
        elif embedding_dim is not None:
            self.embedding = nn.EmbeddingBag(len(tokenizer), int(embedding_dim), mode="mean")
        else:
            raise ValueError("StaticEmbedding: give embedding_weights or embedding_dim")
        self.tokenizer = tokenizer
        self.num_embeddings = self.embedding.num_embeddings
        self.embedding_dim = self.embedding.embedding_dim
        self.base_model = kwargs.get("base_model")

    max_seq_length = math.inf  # the whole text, always

    def tokenize(self, texts: list[str], **kwargs: Any) -> dict[str, Tensor]:
        """Flat ``input_ids`` and per-text ``offsets``, as sentence-transformers' StaticEmbedding gives them."""
        from bertkit.modeling.static import flat_ids

        flat, offsets = flat_ids(self.tokenizer.encode_batch_ids(list(texts)))
        return {"input_ids": flat, "offsets": offsets}

    preprocess = tokenize

    def forward(self, features: dict[str, Tensor], **kwargs: Any) -> dict[str, Tensor]:
        """``features`` with ``sentence_embedding``: the mean row of each text's tokens."""
        return {**features, "sentence_embedding": self.embedding(features["input_ids"], features["offsets"])}

    def get_embedding_dimension(self) -> int:
        return int(self.embedding_dim)

    get_sentence_embedding_dimension = get_embedding_dimension

    def save(self, output_path: str | Path, *args: Any, **kwargs: Any) -> None:
        """``model.safetensors`` (``embedding.weight``) and ``tokenizer.json`` into ``output_path``."""
        from safetensors.torch import save_file

        from bertkit._io import atomic_path, atomic_write_json
        from bertkit.modeling.static import bert_tokenizer_json

        out = Path(output_path)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / "model.safetensors") as tmp:
            save_file({"embedding.weight": self.embedding.weight.detach().float().cpu().contiguous()}, str(tmp))
        tokens = [t for t, _ in sorted(self.tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
        atomic_write_json(out / "tokenizer.json", bert_tokenizer_json(self.tokenizer, tokens), indent=None)

    @classmethod
    def load(cls, model_name_or_path: str | Path, **kwargs: Any) -> StaticEmbedding:
        """The module from a folder of either library (a StaticEmbedding module folder, a
        sentence-transformers folder holding one, or a model2vec folder)."""
        from bertkit.modeling.static import is_static_folder, load_static

        folder = Path(model_name_or_path)
        if not is_static_folder(folder) and (folder / "tokenizer.json").is_file():
            # a module folder alone (0_StaticEmbedding/): read it as model2vec's top-level files
            from bertkit.modeling.static import _read_vectors
            from bertkit.tokenization import BertTokenizer

            return cls(BertTokenizer.from_pretrained(folder), embedding_weights=_read_vectors(folder))
        emb = load_static(folder)
        return cls(emb.tokenizer, embedding_weights=emb.weight.data, base_model=str(folder))

    from_model2vec = load

    @classmethod
    def from_distillation(cls, model_name: str | Path, pca_dims: int | None = 256, **kwargs: Any) -> StaticEmbedding:
        """Distil ``model_name`` (a sentence model folder): :func:`bertkit.sentence.distill_static.distill_static`."""
        from .distill_static import distill_static

        vocabulary = kwargs.pop("vocabulary", None)
        emb = distill_static(model_name, None, dims=pca_dims, vocabulary=vocabulary, **kwargs)
        return cls(emb.tokenizer, embedding_weights=emb.weight.data, base_model=str(model_name))

    def __repr__(self) -> str:
        return f"StaticEmbedding({self.num_embeddings}, {self.embedding_dim}, tokenizer=WordPiece)"


def static_model_for(model_name_or_path: Any, modules: Any, cache_folder: Any = None) -> bool:
    """Whether ``SentenceTransformer(model_name_or_path, modules=...)`` is a static model."""
    if modules is not None:
        return bool(modules) and isinstance(list(modules)[0], StaticEmbedding)
    if model_name_or_path is None:
        return False
    from bertkit.hub import resolve_model_path
    from bertkit.modeling.static import is_static_folder

    try:
        folder = resolve_model_path(model_name_or_path, cache_dir=cache_folder)
    except (FileNotFoundError, ValueError, OSError):
        return False  # SentenceTransformer's own loading says what is wrong
    return is_static_folder(folder)


def static_class_for(model_name_or_path: Any, modules: Any, kwargs: dict[str, Any]) -> type | None:
    """:class:`StaticSentenceTransformer` when ``SentenceTransformer(model_name_or_path, **kwargs)`` is a
    static model, else None (the ``sentence.static_class_for`` hook)."""
    if static_model_for(model_name_or_path, modules, kwargs.get("cache_folder")):
        return StaticSentenceTransformer
    return None


class StaticSentenceTransformer(SentenceTransformer):
    """A :class:`~bertkit.SentenceTransformer` whose model is a :class:`StaticEmbedding` (then an
    optional Normalize): ``SentenceTransformer(folder)`` gives one for a static folder. encode runs
    the tokenizer's fast id path and one ``embedding_bag`` mean per block of texts: no padding, no
    cut (a static model has no position limit). ``fit`` trains its table; so does `train-embedder`
    (:mod:`bertkit.sentence.static_fit`)."""

    _BLOCK = 4096  # texts per tokenize + embedding_bag block; the vectors do not depend on it

    def __init__(
        self,
        model_name_or_path: str | Path | None = None,
        device: str | None = None,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        similarity_fn_name: str | None = None,
        cache_folder: str | Path | None = None,
        truncate_dim: int | None = None,
        modules: list[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        from bertkit.hub import resolve_model_path
        from bertkit.modeling.static import load_static
        from bertkit.sentence.models import Normalize

        kwargs.pop("revision", None), kwargs.pop("local_files_only", None), kwargs.pop("token", None)
        for name in ("trust_remote_code", "model_kwargs", "tokenizer_kwargs", "config_kwargs", "model_card_data"):
            if kwargs.pop(name, None):
                _refuse(name, "is not supported for a static embedding model")
        dtype = kwargs.pop("dtype", None)
        if dtype not in (None, "fp32", "auto", torch.float32):
            _refuse(
                f"dtype={dtype!r}", "is not supported for a static model: its vectors are fp32 (no matmul to speed up)"
            )
        kwargs.pop("backend", None), kwargs.pop("batch_size", None), kwargs.pop("max_batch_tokens", None)
        if kwargs:
            _refuse(f"argument(s) {sorted(kwargs)}", "are not supported for a static embedding model")
        if modules is not None:
            mods = list(modules)
            if not all(isinstance(m, Normalize) for m in mods[1:]) or len(mods) > 2:
                _refuse("modules", "of a static model must be a StaticEmbedding, then an optional models.Normalize")
            self.folder = None
            self.static: StaticEmbedding = mods[0]
            self._normalize = len(mods) == 2
            st_cfg: dict[str, Any] = {}
        else:
            self.folder = resolve_model_path(model_name_or_path, cache_dir=cache_folder)
            emb = load_static(self.folder)
            self.static = StaticEmbedding(emb.tokenizer, embedding_weights=emb.weight.data, base_model=str(self.folder))
            self._normalize = emb.normalize
            st_cfg = _read_st_config(self.folder)
        if device is not None:
            self.static.to(device)
        self.prompts = {"query": "", "document": "", **(st_cfg.get("prompts") or {}), **(prompts or {})}
        self.default_prompt_name = default_prompt_name or st_cfg.get("default_prompt_name")
        self._similarity_fn_name = None
        self.similarity_fn_name = similarity_fn_name or st_cfg.get("similarity_fn_name")
        self.truncate_dim = truncate_dim
        self._includes_prompt = True
        self._given_modules = list(modules) if modules is not None else None

    # -- what sentence-transformers users read off the model ------------------------------------
    @property
    def model(self) -> StaticEmbedding:
        """The StaticEmbedding module."""
        return self.static

    @property
    def tokenizer(self) -> Any:
        return self.static.tokenizer

    @property
    def config(self) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(model_type="static", hidden_size=self.static.embedding_dim)

    @property
    def device(self) -> torch.device:
        return self.static.embedding.weight.device

    @property
    def dtype(self) -> str:
        return "fp32"

    @property
    def max_seq_length(self) -> Any:
        """``math.inf``: a static model reads every text whole, as sentence-transformers says."""
        return math.inf

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        _refuse("max_seq_length", "cannot be set on a static model: it reads every text whole")

    @property
    def pooling(self) -> str:
        return "mean"

    @property
    def normalizes(self) -> bool:
        return self._normalize

    @property
    def dense(self) -> list[nn.Module]:
        return []

    def get_embedding_dimension(self) -> int:
        dim = int(self.static.embedding_dim)
        return dim if self.truncate_dim is None else min(dim, self.truncate_dim)

    def to(self, device: str | torch.device | torch.dtype) -> StaticSentenceTransformer:
        from bertkit._args import check_device

        if isinstance(device, torch.dtype):
            return self._precision("fp32" if device == torch.float32 else str(device), f"to({device})")
        self.static.to(check_device("device", device))
        return self

    def tokenize(self, texts: list[str]) -> dict[str, Tensor]:
        """Flat ``input_ids`` and ``offsets``, as sentence-transformers' StaticEmbedding gives them."""
        texts, _ = _texts(texts)
        return self.static.tokenize(texts)

    # -- the module list --------------------------------------------------------------------------
    def _build_modules(self) -> list[nn.Module]:
        from bertkit.sentence.models import Normalize

        if self._given_modules is not None:
            return list(self._given_modules)
        return [self.static, Normalize()] if self._normalize else [self.static]

    def _module_count(self) -> int:
        return 1 + int(self._normalize)

    def _keep_inference_eval(self) -> None:
        pass  # encode reads the table directly: no dropout, no mode

    def _precision(self, dtype: str, call: str) -> StaticSentenceTransformer:
        if dtype != "fp32":
            _refuse(call, "is not supported on a static model: its vectors are fp32 (no matmul to speed up)")
        return self

    def _sync_inference(self) -> None:
        pass

    @property
    def training_model(self) -> nn.Module:
        """The StaticEmbedding module: its table is what :meth:`fit` trains, and what encode reads."""
        return self.static

    def forward(self, features: dict[str, Tensor]) -> dict[str, Tensor]:
        """``features`` (from :meth:`tokenize`) with ``sentence_embedding``, with gradients."""
        out = self.static(features)
        if self._normalize:
            out["sentence_embedding"] = nn.functional.normalize(out["sentence_embedding"], dim=-1)
        return out

    __call__ = forward

    # -- encoding ---------------------------------------------------------------------------------
    def encode(
        self,
        sentences: Any = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        output_value: str | None = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | None = None,
        normalize_embeddings: bool = False,
        truncate_dim: int | None = None,
        inputs: Any = None,
        **kwargs: Any,
    ) -> np.ndarray | Tensor | list[Tensor]:
        """Vectors for one text (1-D) or a list of texts (2-D), as sentence-transformers' StaticEmbedding
        gives them: the fp32 mean of each text's token rows, then the folder's Normalize."""
        if sentences is None:
            sentences = inputs
        if sentences is None:
            _refuse("encode()", "needs the texts to embed")
        unknown = sorted(k for k, v in kwargs.items() if v is not None)
        if unknown:
            _refuse(f"encode() keyword(s) {unknown}", "are not used by this model")
        if output_value != "sentence_embedding":
            _refuse(f"output_value {output_value!r}", "is not supported by a static model (sentence_embedding only)")
        precision = "float32" if precision is None else precision
        if precision not in util.PRECISIONS:
            _refuse(f"precision {precision!r}", f"is not one of {', '.join(util.PRECISIONS)}")
        if device is not None:
            self.to(device)
        texts, single = _texts(sentences)
        prompt = self._resolve_prompt(prompt, prompt_name)
        if prompt:
            texts = [prompt + t for t in texts]
        from bertkit.modeling.static import flat_ids

        weight = self.static.embedding.weight.detach()
        parts = []
        for start in range(0, len(texts), self._BLOCK):
            flat, offsets = flat_ids(self.tokenizer.encode_batch_ids(texts[start : start + self._BLOCK]), weight.device)
            parts.append(nn.functional.embedding_bag(flat, weight, offsets, mode="mean"))
        vecs = torch.cat(parts) if parts else torch.zeros((0, weight.shape[1]), device=weight.device)
        if self._normalize:
            vecs = nn.functional.normalize(vecs, dim=-1)
        vecs = util.truncate_embeddings(vecs.cpu(), truncate_dim if truncate_dim is not None else self.truncate_dim)
        if normalize_embeddings:
            vecs = util.normalize_embeddings(vecs)
        result: Any = vecs if precision == "float32" else util.quantize_embeddings(vecs, precision)
        if convert_to_tensor:
            result = result if isinstance(result, Tensor) else torch.as_tensor(result)
        elif convert_to_numpy:
            result = result.numpy() if isinstance(result, Tensor) else result
        else:
            result = list(result if isinstance(result, Tensor) else torch.as_tensor(result))
        return result[0] if single else result

    # -- saving -----------------------------------------------------------------------------------
    def save(
        self, path: str | Path, model_name: str | None = None, create_model_card: bool = True, **kwargs: Any
    ) -> None:
        """Write sentence-transformers' layout (``0_StaticEmbedding/``, ``modules.json``, a Normalize when
        the model normalises, ``config_sentence_transformers.json``); other files in the folder are kept."""
        from bertkit._io import atomic_update_dir, atomic_write_json
        from bertkit.modeling.static import save_static

        tokens = [t for t, _ in sorted(self.tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
        from bertkit.modeling.static import bert_tokenizer_json

        with atomic_update_dir(path) as tmp:
            save_static(
                tmp,
                self.static.embedding.weight,
                bert_tokenizer_json(self.tokenizer, tokens),
                normalize=self._normalize,
                layout="sentence-transformers",
            )
            atomic_write_json(
                Path(tmp) / "config_sentence_transformers.json",
                {
                    "prompts": dict(self.prompts),
                    "default_prompt_name": self.default_prompt_name,
                    "similarity_fn_name": self._similarity_fn_name,
                },
            )

    def __repr__(self) -> str:
        return (
            f"SentenceTransformer({self.folder}, StaticEmbedding({self.static.num_embeddings}, "
            f"{self.static.embedding_dim}), normalize={self._normalize})"
        )
