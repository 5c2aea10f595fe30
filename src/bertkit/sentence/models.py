"""sentence-transformers' ``models``: the modules a training script builds its model from in code.

The v2 scripts switch with their import line alone::

    from bertkit import SentenceTransformer, models

    word_embedding_model = models.Transformer(model_name, max_seq_length=128)
    pooling_model = models.Pooling(word_embedding_model.get_word_embedding_dimension(), pooling_mode="mean")
    dense = models.Dense(in_features=384, out_features=256, activation_function=nn.Tanh())
    model = SentenceTransformer(modules=[word_embedding_model, pooling_model, dense, models.Normalize()])

The modules describe the model; :class:`~bertkit.SentenceTransformer` loads the Transformer's
folder onto its fast inference path and applies Pooling, Dense and Normalize in that order (the
only order bertkit runs). Pooling takes sentence-transformers 6's ``pooling_mode`` (one mode, or several
concatenated) and v2's ``pooling_mode_*_tokens`` booleans; settings bertkit would not honour are
refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from bertkit.modeling.sentence import POOLING_MODE_KEYS, POOLINGS, Dense

__all__ = ["Dense", "Normalize", "Pooling", "Transformer"]


def _refuse(module: str, name: str, why: str) -> None:
    raise ValueError(f"models.{module}: {name} {why}")


class Transformer(nn.Module):
    """The encoder of a model built in code: a model folder (or a model id in the local Hugging Face
    cache), cut to ``max_seq_length`` tokens. Its weights are loaded by the SentenceTransformer built
    from it; the tokenizer and config are read here for the scripts' questions.

    It is also ``model[0]`` of a SentenceTransformer or CrossEncoder: there :attr:`auto_model` (and
    ``model``) is the trainable model whose weights ``state_dict()`` names ``0.model.*``, as in
    sentence-transformers, and ``max_seq_length`` and ``tokenizer`` are the owner's."""

    def __init__(
        self,
        model_name_or_path: str | Path,
        max_seq_length: int | None = None,
        model_args: dict[str, Any] | None = None,
        tokenizer_args: dict[str, Any] | None = None,
        config_args: dict[str, Any] | None = None,
        cache_dir: str | Path | None = None,
        do_lower_case: bool = False,
        tokenizer_name_or_path: str | Path | None = None,
        backend: str = "torch",
        *,
        model_kwargs: dict[str, Any] | None = None,
        processor_kwargs: dict[str, Any] | None = None,
        config_kwargs: dict[str, Any] | None = None,
        transformer_task: str = "feature-extraction",
    ) -> None:
        from bertkit import _args as A
        from bertkit._text import read_json
        from bertkit.hub import resolve_model_path

        super().__init__()
        self._owner: Any = None
        for name, value in (
            ("tokenizer_args", tokenizer_args),
            ("config_args", config_args),
            ("processor_kwargs", processor_kwargs),
            ("config_kwargs", config_kwargs),
        ):
            if value:
                _refuse("Transformer", f"{name}={value!r}", "is not supported")
        if backend != "torch":
            _refuse("Transformer", f"backend={backend!r}", "is not supported: bertkit runs its own PyTorch path")
        if transformer_task != "feature-extraction":
            _refuse("Transformer", f"transformer_task={transformer_task!r}", "is not supported (feature-extraction)")
        if do_lower_case:
            _refuse("Transformer", "do_lower_case=True", "is not supported: the tokenizer's own casing is used")
        if model_args and model_kwargs:
            _refuse("Transformer", "model_args", "and model_kwargs are the same setting; pass one")
        self.model_kwargs = dict(model_args or model_kwargs or {})
        self.folder = resolve_model_path(model_name_or_path, cache_dir=cache_dir)
        if tokenizer_name_or_path is not None and resolve_model_path(tokenizer_name_or_path) != self.folder:
            _refuse(
                "Transformer",
                f"tokenizer_name_or_path={str(tokenizer_name_or_path)!r}",
                "is not supported: the tokenizer comes from the model's folder",
            )
        if not (self.folder / "config.json").is_file():
            raise FileNotFoundError(f"models.Transformer: {self.folder} is not a model folder (no config.json)")
        self.config: dict[str, Any] = read_json(self.folder / "config.json")
        self.model_name_or_path = str(model_name_or_path)
        self.do_lower_case = False
        self._tokenizer: Any = None
        A.SEQ_LEN.check("max_seq_length", max_seq_length, allow_none=True)
        if max_seq_length is None:  # as sentence-transformers: the model's and the tokenizer's limit
            limits = [self.config.get("max_position_embeddings"), getattr(self.tokenizer, "model_max_length", None)]
            max_seq_length = min(int(v) for v in limits if isinstance(v, int) and 0 < v < 10**9)
        self.max_seq_length = int(max_seq_length)

    @classmethod
    def _bound(cls, owner: Any, model: nn.Module) -> Transformer:
        """``owner[0]``: ``model`` (the owner's trainable model) under the owner's folder, tokenizer and
        ``max_seq_length``, so that a change through either side is seen by both."""
        from bertkit._text import read_json

        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._owner = owner
        self.model_kwargs = {}
        self.folder = owner.folder
        self.config = read_json(self.folder / "config.json")
        self.model_name_or_path = str(owner.folder)
        self.do_lower_case = False
        self._tokenizer = None
        self.model = model
        return self

    @property
    def max_seq_length(self) -> int:
        """Texts are cut to this many tokens (the owner's setting, once the module is bound)."""
        return int(self._owner.max_seq_length if self._owner is not None else self._max_seq_length)

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        if self._owner is not None:
            self._owner.max_seq_length = value
        else:
            self._max_seq_length = int(value)

    @property
    def auto_model(self) -> nn.Module:
        """The encoder with gradients (fp32): the owner's trainable model, or, for a module not yet
        in a model, the folder's weights loaded on first use."""
        if "model" not in self._modules:
            from bertkit.modeling.auto import auto_class_for

            self.model = auto_class_for("BertModel").from_pretrained(str(self.folder))
        return self._modules["model"]

    def forward(self, features: dict[str, Any]) -> dict[str, Any]:
        """``features`` with ``token_embeddings`` added (the encoder's last hidden state), as
        sentence-transformers' Transformer module gives them to the Pooling."""
        keys = ("input_ids", "attention_mask", "token_type_ids")
        out = self.auto_model(**{k: features[k] for k in keys if k in features})
        return {**features, "token_embeddings": out[0]}

    @property
    def tokenizer(self) -> Any:
        """The folder's tokenizer (loaded on first use)."""
        if self._owner is not None:
            return self._owner.tokenizer
        if self._tokenizer is None:
            from bertkit.modeling.auto import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.folder))
        return self._tokenizer

    def get_word_embedding_dimension(self) -> int:
        """The encoder's hidden size: the width of its token vectors."""
        return int(self.config["hidden_size"])

    get_embedding_dimension = get_word_embedding_dimension

    def get_max_seq_length(self) -> int:
        return self.max_seq_length

    def get_config_dict(self) -> dict[str, Any]:
        return {"max_seq_length": self.max_seq_length, "do_lower_case": self.do_lower_case}

    def __repr__(self) -> str:
        return f"Transformer({self.folder}, max_seq_length={self.max_seq_length})"


class Pooling(nn.Module):
    """Token vectors -> one sentence vector, in one of :data:`bertkit.modeling.sentence.POOLINGS`
    ("mean", "cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"), or several of them
    (a list or tuple), whose vectors are concatenated in that order."""

    def __init__(
        self,
        embedding_dimension: int | None = None,
        pooling_mode: str | list[str] | tuple[str, ...] | None = None,
        include_prompt: bool = True,
        word_embedding_dimension: int | None = None,
        **legacy: bool,
    ) -> None:
        super().__init__()
        unknown = sorted(set(legacy) - set(POOLING_MODE_KEYS))
        if unknown:
            raise TypeError(f"models.Pooling got unexpected keyword argument(s) {', '.join(unknown)}")
        if embedding_dimension is not None and word_embedding_dimension is not None:
            _refuse("Pooling", "embedding_dimension", "and word_embedding_dimension are the same setting; pass one")
        dim = embedding_dimension if embedding_dimension is not None else word_embedding_dimension
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            _refuse("Pooling", f"embedding_dimension {dim!r}", "must be a positive integer")
        if pooling_mode is None:
            # v2's booleans (sentence-transformers 6 reads them too): the modes set True, else mean
            modes = [mode for key, mode in POOLING_MODE_KEYS.items() if legacy.get(key)] or ["mean"]
        else:
            modes = [pooling_mode] if isinstance(pooling_mode, str) else list(pooling_mode)
        if not modes:
            _refuse("Pooling", "pooling_mode []", "names no mode; give one or more of " + ", ".join(POOLINGS))
        for mode in modes:
            if mode not in POOLINGS:
                _refuse("Pooling", f"pooling_mode {mode!r}", f"is not one of {', '.join(POOLINGS)}")
        if not include_prompt:
            _refuse("Pooling", "include_prompt=False", "is not supported: bertkit pools the prompt's tokens too")
        self.embedding_dimension = self.word_embedding_dimension = int(dim)
        # one mode as its name, several as a tuple whose vectors are concatenated in order, as in
        # sentence-transformers
        self.pooling_mode: str | tuple[str, ...] = modes[0] if len(modes) == 1 else tuple(modes)
        self.pooling_output_dimension = len(modes) * self.embedding_dimension
        self.include_prompt = True

    @property
    def pooling(self) -> str:
        """The modes as bertkit's pipelines take them: one name, or several joined by "+"."""
        return self.pooling_mode if isinstance(self.pooling_mode, str) else "+".join(self.pooling_mode)

    def forward(self, features: dict[str, Any]) -> dict[str, Any]:
        """``features`` with ``sentence_embedding`` added: ``token_embeddings`` pooled over
        ``attention_mask``, as sentence-transformers' Pooling module does."""
        from bertkit.modeling.sentence import pool

        vec = pool(features["token_embeddings"], features["attention_mask"], self.pooling)
        return {**features, "sentence_embedding": vec}

    def get_sentence_embedding_dimension(self) -> int:
        return self.pooling_output_dimension

    get_embedding_dimension = get_sentence_embedding_dimension

    def get_pooling_mode_str(self) -> str:
        return self.pooling

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "embedding_dimension": self.embedding_dimension,
            "pooling_mode": self.pooling_mode if isinstance(self.pooling_mode, str) else list(self.pooling_mode),
            "include_prompt": self.include_prompt,
        }

    def __repr__(self) -> str:
        return f"Pooling({self.get_config_dict()})"


class Normalize(nn.Module):
    """L2-normalises the sentence vectors (the last module)."""

    def __init__(self, module_input_name: str = "sentence_embedding", module_output_name: str | None = None) -> None:
        super().__init__()
        for name, value in (("module_input_name", module_input_name), ("module_output_name", module_output_name)):
            if value not in (None, "sentence_embedding"):
                _refuse("Normalize", f"{name}={value!r}", "is not supported (bertkit normalises sentence_embedding)")

    def forward(self, x: Any) -> Any:
        if isinstance(x, dict):
            return {**x, "sentence_embedding": self(x["sentence_embedding"])}
        return nn.functional.normalize(x, p=2, dim=-1)


# Users know these classes by sentence-transformers' path (``bertkit.models.Pooling``): messages and
# pickles name them there, where the re-export module holds them.
for _cls in (Transformer, Pooling, Dense, Normalize):
    _cls.__module__ = "bertkit.models"
