"""``SentenceTransformer``: sentence-transformers' class, answering the same calls on bertkit's path.

A sentence-transformers script switches with its import line alone::

    from bertkit import SentenceTransformer, util

    model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")  # or a folder
    vectors = model.encode(sentences)                      # (n, 384) float32 numpy
    scores = model.similarity(vectors, vectors)            # (n, n) tensor
    hits = util.semantic_search(model.encode(query), vectors, top_k=5)

The folder is read as sentence-transformers reads it: ``modules.json`` (Transformer, Pooling, Dense,
Normalize), ``1_Pooling/config.json``, ``2_Dense/`` (config and weights), ``sentence_bert_config.json``
(``max_seq_length``) and ``config_sentence_transformers.json`` (``prompts``, ``default_prompt_name``,
``similarity_fn_name``); a plain model folder gets mean pooling without normalisation, as there.
Texts over ``max_seq_length`` tokens are cut, as there, and a warning says how many tokens went.
A model built in code, ``SentenceTransformer(modules=[models.Transformer(...), models.Pooling(...),
models.Dense(...), models.Normalize()])`` (:mod:`bertkit.sentence.models`), runs on the same path.

Training: ``fit(train_objectives=[(DataLoader(examples), loss)], ...)`` is sentence-transformers'
pre-v3 call (:mod:`bertkit.sentence.fit`) with the losses of :mod:`bertkit.sentence.losses`. It
trains :attr:`SentenceTransformer.training_model`, an fp32 copy of the encoder with gradients that
``model(features)`` runs (with the Dense modules, when there are any: they are the same modules the
inference path runs, fp32 whatever ``dtype``); :meth:`encode` and :meth:`save` take its weights
whenever they changed.

The vectors come from bertkit's one batched, length-sorted inference path
(:func:`bertkit.inference.run_batched`): no padding beyond each batch's longest text, fused
attention, and ``dtype`` ("fp32" by default, "bf16", "int8" or "auto") for speed. A folder whose
vectors bertkit cannot reproduce (a module other than Transformer, Pooling, Dense and Normalize, a
pooling mode or a Dense activation it does not know) is refused by name.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bertkit import _hooks
from bertkit.sentence import util
from bertkit.sentence.module_calls import _ModuleCalls, _to_dtype
from bertkit.sentence.sentence_outputs import refuse_own_folder

__all__ = ["SentenceTransformer"]

_ST_CONFIG = "config_sentence_transformers.json"
_OUTPUT_VALUES = ("sentence_embedding", "token_embeddings")


def _refuse(name: str, why: str) -> None:
    raise ValueError(f"SentenceTransformer: {name} {why}")


def _texts(inputs: Any) -> tuple[list[str], bool]:
    """(texts, single): one string is a batch of one; any other iterable of strings is a batch."""
    single = isinstance(inputs, str)
    if isinstance(inputs, np.ndarray):
        inputs = inputs.tolist()
    if not single and (not isinstance(inputs, Iterable) or isinstance(inputs, (bytes, dict))):
        raise TypeError(f"encode() takes a string or a list of strings, got {type(inputs).__name__}")
    texts = [inputs] if single else list(inputs)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"encode(): inputs[{i}] is {type(t).__name__}, not a string (bertkit embeds text only)")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate: not text; sentence-transformers refuses it too
            raise ValueError(
                f"encode(): inputs[{i}] holds a lone surrogate (U+{ord(t[e.start]):04X}) at character {e.start}: "
                "not valid Unicode; decode the source with errors='replace'"
            ) from None
    return texts, single


def _read_st_config(folder: Path) -> dict[str, Any]:
    from bertkit._text import read_json

    path = folder / _ST_CONFIG
    if not path.is_file():
        return {}
    cfg = read_json(path)
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected a JSON object")
    prompts = cfg.get("prompts", {}) or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ValueError(f"{path}: 'prompts' must map names to prompt strings")
    return cfg


def _pooling_includes_prompt(folder: Path) -> bool:
    """The Pooling module's ``include_prompt`` (True when the folder has none)."""
    from bertkit.modeling.sentence import sentence_transformers_pooling_config

    found = sentence_transformers_pooling_config(folder)
    return True if found is None else bool(found[1].get("include_prompt", True))


def _dtype_from_model_kwargs(model_kwargs: dict[str, Any] | None) -> Any:
    """The precision a caller asked for in transformers' words (``torch_dtype``/``dtype``); other
    keys are refused, since bertkit would not honour them."""
    if not model_kwargs:
        return None
    kwargs = dict(model_kwargs)
    dtype = kwargs.pop("torch_dtype", None) or kwargs.pop("dtype", None)
    if kwargs:
        _refuse(f"model_kwargs {sorted(kwargs)}", "are not supported (only torch_dtype/dtype)")
    if isinstance(dtype, str) and dtype.startswith("torch."):
        dtype = dtype[len("torch.") :]
    return {"float32": "fp32", "bfloat16": "bf16"}.get(dtype, dtype) if isinstance(dtype, str) else dtype


def _from_modules(modules: Any) -> tuple[Path, str, list[Any], bool, int]:
    """(folder, pooling, dense, normalize, max_seq_length) of ``modules=[Transformer, Pooling, Dense...,
    Normalize]`` (:mod:`bertkit.sentence.models`); any other module, order or width is a ValueError naming it."""
    from bertkit.modeling.sentence import check_dense_chain
    from bertkit.sentence import models

    if not isinstance(modules, (list, tuple)) or not modules:
        _refuse(f"modules={modules!r}", "must be a non-empty list of bertkit.sentence.models modules")
    modules = list(modules)
    names = [type(m).__module__ + "." + type(m).__qualname__ for m in modules]
    order = "bertkit.sentence.models Transformer, Pooling, any Dense, then an optional Normalize"
    for i, m in enumerate(modules):
        if not isinstance(m, (models.Transformer, models.Pooling, models.Dense, models.Normalize)):
            _refuse(f"modules[{i}] ({names[i]})", f"is not a module bertkit runs: it runs {order}")
    if not isinstance(modules[0], models.Transformer):
        _refuse(f"modules[0] ({names[0]})", f"is not a models.Transformer: bertkit runs {order}")
    transformer: Any = modules[0]
    rest = modules[1:]
    pooling_mod: Any = None
    if rest and isinstance(rest[0], models.Pooling):
        pooling_mod, rest = rest[0], rest[1:]
    normalize = bool(rest) and isinstance(rest[-1], models.Normalize)
    dense = rest[:-1] if normalize else rest
    for i, m in enumerate(dense, start=len(modules) - len(rest)):
        if not isinstance(m, models.Dense):
            _refuse(f"modules[{i}] ({names[i]})", f"is out of place: bertkit runs {order}")
    if pooling_mod is None:  # sentence-transformers 6.2 gives no sentence vectors from token vectors either
        _refuse("modules", f"have no models.Pooling after the Transformer: bertkit runs {order}")
    width = transformer.get_word_embedding_dimension()
    if pooling_mod.embedding_dimension != width:
        _refuse(
            f"models.Pooling embedding_dimension={pooling_mod.embedding_dimension}",
            f"does not match the Transformer's {width} ({transformer.folder})",
        )
    check_dense_chain(dense, pooling_mod.get_embedding_dimension(), "SentenceTransformer(modules=...)")
    return transformer.folder, pooling_mod.pooling, dense, normalize, transformer.max_seq_length


def _check_init_call(
    model_name_or_path: Any,
    modules: Any,
    trust_remote_code: bool,
    backend: str,
    tokenizer_kwargs: Any,
    config_kwargs: Any,
) -> None:
    """Refuse, by name, a SentenceTransformer(...) call that bertkit cannot honour."""
    if model_name_or_path is None and modules is None:
        _refuse("model_name_or_path", "is required (or modules=[models.Transformer(...), models.Pooling(...)])")
    if model_name_or_path is not None and modules is not None:
        _refuse("model_name_or_path", "and modules= both give the model; pass one")
    if trust_remote_code:
        _refuse("trust_remote_code=True", "is not supported: bertkit runs no code from a model folder")
    if backend != "torch":
        _refuse(f"backend={backend!r}", "is not supported: bertkit runs its own PyTorch path (see dtype=)")
    for name, value in (("tokenizer_kwargs", tokenizer_kwargs), ("config_kwargs", config_kwargs)):
        if value:
            _refuse(f"{name}={value!r}", "is not supported")


def _check_encode_call(
    sentences: Any,
    inputs: Any,
    kwargs: dict[str, Any],
    pool: Any,
    chunk_size: int | None,
    device: Any,
    output_value: str | None,
    precision: str | None,
    batch_size: Any,
    truncate_dim: int | None,
) -> tuple[Any, Any]:
    """Refuse, by name, an encode(...) call bertkit cannot honour; returns (the texts, the precision)."""
    from bertkit import _args as A

    if sentences is not None and inputs is not None:
        _refuse("encode()", "got both sentences and inputs; pass one")
    if sentences is None:
        sentences = inputs
    if sentences is None:
        _refuse("encode()", "needs the texts to embed")
    if kwargs:
        _refuse(f"encode() keyword(s) {sorted(kwargs)}", "are not used by this model")
    if pool is not None or chunk_size is not None or isinstance(device, (list, tuple)):
        _refuse("encode()", "runs in one process: pool=, chunk_size= and a list of devices are not supported")
    if output_value is None:  # every output per text: the caller answers it before the other checks
        return sentences, precision
    if output_value not in _OUTPUT_VALUES:
        _refuse(f"output_value {output_value!r}", f"is not one of {', '.join(_OUTPUT_VALUES)} or None")
    precision = "float32" if precision is None else precision  # what sentence-transformers' evaluators pass
    if precision not in util.PRECISIONS:
        _refuse(f"precision {precision!r}", f"is not one of {', '.join(util.PRECISIONS)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    A.positive_int.check("truncate_dim", truncate_dim, allow_none=True)
    return sentences, precision


class SentenceTransformer(_ModuleCalls):
    """Sentence vectors from a sentence-transformers folder or model id (the local Hugging Face cache).

    ``dtype``: "fp32" (default; equal to sentence-transformers within float rounding), "bf16",
    "int8" or "auto" (the fastest precision this CPU runs within bertkit's quality gates).
    Arguments of sentence-transformers that bertkit cannot honour are refused by name.
    A static embedding folder (model2vec's or a ``StaticEmbedding``) gives a
    :class:`bertkit.sentence.static.StaticSentenceTransformer`.
    """

    def __new__(cls, model_name_or_path: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is SentenceTransformer:
            # a static folder: the subclass of bertkit.sentence.static, which builds on this module (a hook,
            # so that this module does not import it back)
            static = _hooks.call("sentence.static_class_for", model_name_or_path, kwargs.get("modules"), kwargs)
            if static is not None:
                return super().__new__(static)  # its own __init__ runs next
        return super().__new__(cls)

    def __init__(
        self,
        model_name_or_path: str | Path | None = None,
        device: str | None = None,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        similarity_fn_name: str | None = None,
        cache_folder: str | Path | None = None,
        trust_remote_code: bool = False,
        revision: str | None = None,
        local_files_only: bool = False,
        token: bool | str | None = None,
        truncate_dim: int | None = None,
        model_kwargs: dict[str, Any] | None = None,
        tokenizer_kwargs: dict[str, Any] | None = None,
        config_kwargs: dict[str, Any] | None = None,
        backend: str = "torch",
        dtype: str | torch.dtype | None = None,
        batch_size: int = 32,
        max_batch_tokens: int | None = 16384,
        modules: list[Any] | None = None,
        model_card_data: Any = None,
    ) -> None:
        from bertkit.hub import hub_id, resolve_model_path
        from bertkit.modeling.sentence import sentence_transformers_pooling
        from bertkit.pipelines.pipelines import FeatureExtractionPipeline
        from bertkit.sentence.model_card import SentenceTransformerModelCardData, adopt, read_original

        _check_init_call(model_name_or_path, modules, trust_remote_code, backend, tokenizer_kwargs, config_kwargs)
        kw_dtype = _dtype_from_model_kwargs(model_kwargs)
        if kw_dtype is not None and dtype is not None:
            _refuse("dtype", "and model_kwargs' torch_dtype both set a precision; pass one")
        # token and local_files_only only steer downloads, and bertkit never downloads.
        del token, local_files_only
        if device is None:  # as sentence-transformers: the GPU when there is one
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dense: list[Any] | None = None
        if modules is not None:
            folder, pooling, dense, normalize, max_len = _from_modules(modules)
            # the precision models.Transformer(model_kwargs={"torch_dtype": ...}) asked for
            tf_dtype = _dtype_from_model_kwargs(modules[0].model_kwargs)
            if tf_dtype is not None and (dtype is not None or kw_dtype is not None):
                _refuse("dtype", "is set both here and in models.Transformer's model_kwargs; pass one")
            kw_dtype = kw_dtype if tf_dtype is None else tf_dtype
        else:
            folder = resolve_model_path(model_name_or_path, cache_dir=cache_folder, revision=revision)
            pooling, normalize, max_len = sentence_transformers_pooling(folder, strict=True)
        self.folder = folder
        self._pipe = FeatureExtractionPipeline(
            str(folder),
            device=device,
            dtype=dtype if dtype is not None else kw_dtype,
            sentence=True,
            pooling=pooling or "mean",
            # a plain model folder: sentence-transformers pools without normalising
            normalize=bool(normalize),
            max_length=max_len,
            truncation="cut",
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            dense=dense,  # None: the folder's own Dense modules
        )
        if max_len is None:  # no sentence_bert_config.json: the model's and tokenizer's limit
            limits = [
                getattr(self._pipe.model.config, "max_position_embeddings", None),
                getattr(self._pipe.tokenizer, "model_max_length", None),
            ]
            self._pipe.max_length = min(int(v) for v in limits if isinstance(v, int) and 0 < v < 10**9)
        # a model built in code is a new model: the Transformer folder's own settings are not its
        st_cfg = _read_st_config(folder) if modules is None else {}
        self._set_prompts(st_cfg, prompts, default_prompt_name)
        self._similarity_fn_name: str | None = None
        self.similarity_fn_name = similarity_fn_name or st_cfg.get("similarity_fn_name")
        self.truncate_dim = truncate_dim
        self._includes_prompt = _pooling_includes_prompt(folder) if modules is None else True
        # what the README.md written by save() says (the folder's own card, kept while untrained)
        self.model_card_data = adopt(model_card_data, SentenceTransformerModelCardData)
        if modules is None:
            self.model_card_data.original_text = read_original(folder)
            if self.model_card_data.base_model is None:
                self.model_card_data.base_model = hub_id(folder)
        self._training: Any = None  # the SentenceEncoder that fit() and the losses train, made on first use
        self._trained: Any = None  # its weights, synced into the inference model (TrainedCopy)
        # modules=[...]: the caller's own module objects are model[0], model[1]... as in sentence-transformers
        self._given_modules: list[Any] | None = list(modules) if modules is not None else None
        # after a bfloat16() the folder's weights are no longer the model's: a new training copy
        # starts from the inference model's (rounded) weights, as sentence-transformers' would
        self._weights_from_inference = False

    def _set_prompts(self, st_cfg: dict[str, Any], prompts: dict[str, str] | None, default: str | None) -> None:
        # "query" and "document" always exist (blank unless set), so encode_document never falls
        # through to a "passage" prompt where sentence-transformers would use none.
        self.prompts: dict[str, str] = {"query": "", "document": ""}
        self.prompts.update(st_cfg.get("prompts") or {})
        self.prompts.update(prompts or {})
        self.default_prompt_name = default or st_cfg.get("default_prompt_name")
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            _refuse(
                f"default_prompt_name {self.default_prompt_name!r}",
                f"is not among the prompts ({', '.join(self.prompts) or 'none'})",
            )

    # -- what sentence-transformers users read off the model ------------------------------------

    @property
    def model(self) -> torch.nn.Module:
        """The encoder (``BertModel`` and kin), prepared for inference."""
        return self._pipe.model

    @property
    def tokenizer(self) -> Any:
        return self._pipe.tokenizer

    @property
    def processor(self) -> Any:
        """The tokenizer (sentence-transformers' newer name)."""
        return self.tokenizer

    @property
    def config(self) -> Any:
        """The encoder's config (config.json's fields as attributes)."""
        return self._pipe.model.config

    @property
    def device(self) -> torch.device:
        return next(self._pipe.model.parameters()).device

    @property
    def dtype(self) -> str:
        """The precision the vectors are computed in: fp32, bf16 or int8."""
        return self._pipe.dtype

    @property
    def max_seq_length(self) -> int:
        """Texts are cut to this many tokens, [CLS] and [SEP] included."""
        return self._pipe.max_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        from bertkit import _args as A

        A.SEQ_LEN.check("max_seq_length", value)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and value > limit:
            _refuse(f"max_seq_length {value}", f"is over the model's {limit} positions")
        self._pipe.max_length = int(value)

    def get_max_seq_length(self) -> int:
        return self.max_seq_length

    @property
    def pooling(self) -> str:
        return self._pipe.pooling

    @property
    def normalizes(self) -> bool:
        """Whether the folder's model ends in a Normalize module (unit-length vectors)."""
        return bool(self._pipe.normalize)

    @property
    def dense(self) -> list[torch.nn.Module]:
        """The Dense modules after the pooling (fp32, trained by :meth:`fit`); empty when none."""
        return self._pipe.dense

    def get_embedding_dimension(self) -> int:
        """The width of :meth:`encode`'s vectors (``truncate_dim`` when that is narrower)."""
        dim = int(self._pipe.dim)
        return dim if self.truncate_dim is None else min(dim, self.truncate_dim)

    def get_sentence_embedding_dimension(self) -> int:
        return self.get_embedding_dimension()

    @property
    def similarity_fn_name(self) -> str:
        """ "cosine" (the default), "dot", "euclidean" or "manhattan": what :meth:`similarity` computes."""
        if self._similarity_fn_name is None:
            self._similarity_fn_name = "cosine"
        return self._similarity_fn_name

    @similarity_fn_name.setter
    def similarity_fn_name(self, value: Any) -> None:
        value = getattr(value, "value", value)  # sentence-transformers' SimilarityFunction enum
        if value is not None and value not in util.SIMILARITY_FUNCTIONS:
            _refuse(f"similarity_fn_name {value!r}", f"is not one of {', '.join(util.SIMILARITY_FUNCTIONS)}")
        self._similarity_fn_name = value

    def similarity(self, embeddings1: Any, embeddings2: Any) -> Tensor:
        """(len(embeddings1), len(embeddings2)) scores by :attr:`similarity_fn_name`."""
        return util.SIMILARITY_FUNCTIONS[self.similarity_fn_name][0](embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> Tensor:
        """``res[i]`` = the score of ``embeddings1[i]`` and ``embeddings2[i]``."""
        return util.SIMILARITY_FUNCTIONS[self.similarity_fn_name][1](embeddings1, embeddings2)

    def to(self, device: str | torch.device | torch.dtype) -> SentenceTransformer:
        """Move the model to ``device`` (a ``torch.dtype`` instead: :meth:`float`, :meth:`bfloat16`,
        :meth:`half`); returns self."""
        from bertkit._args import check_device

        if isinstance(device, torch.dtype):
            return _to_dtype(self, device)
        self._pipe.model.to(check_device("device", device))
        self._pipe.device = self.device
        for layer in self.dense:
            layer.to(self.device)
        if self._training is not None:
            self._training.model.to(self.device)
        return self

    def tokenize(self, texts: list[str]) -> dict[str, Tensor]:
        """The padded model inputs for ``texts``, cut to :attr:`max_seq_length`."""
        texts, _ = _texts(texts)
        enc = self.tokenizer(
            texts, padding=True, truncation="longest_first", max_length=self.max_seq_length, return_tensors="pt"
        )
        return {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask") if k in enc}

    def preprocess(self, texts: list[str]) -> dict[str, Tensor]:
        """Same as :meth:`tokenize` (sentence-transformers' newer name)."""
        return self.tokenize(texts)

    # -- the module list (sentence-transformers' nn.Sequential calls, see _ModuleCalls) ----------

    def _build_modules(self) -> list[torch.nn.Module]:
        from bertkit.modeling.sentence import pooling_modes
        from bertkit.sentence import models

        # fp32: the trainable encoder; bf16 has none, so the (frozen) inference encoder is shown
        encoder = self._training_encoder().model if self.dtype == "fp32" else self.model
        if self._given_modules is not None:
            mods = list(self._given_modules)
            mods[0]._owner = self
            mods[0].model = encoder  # what fit and encode use: the module's own load, if any, is replaced
            return mods
        pooling = models.Pooling(int(self.model.config.hidden_size), pooling_mode=pooling_modes(self.pooling))
        pooling.include_prompt = self._includes_prompt
        mods = [models.Transformer._bound(self, encoder), pooling, *self.dense]
        return [*mods, models.Normalize()] if self.normalizes else mods

    def _module_count(self) -> int:
        return 2 + len(self.dense) + int(self.normalizes)

    def _precision(self, dtype: str, call: str) -> SentenceTransformer:
        from bertkit.inference import prepare_for_inference

        if self.dtype == "int8":
            _refuse(call, "is not supported on an int8 model (its weights are quantized): load it with dtype='fp32'")
        if dtype == self.dtype:
            return self
        self._sync_inference()  # trained weights first, then the cast
        prepare_for_inference(self.model, dtype)
        # the fp32 training copy no longer holds the model's weights: the next one starts from these
        self._training = self._trained = None
        self._weights_from_inference = True
        self._drop_modules()
        return self

    def set_pooling_include_prompt(self, include_prompt: bool) -> None:
        """Whether the pooling averages a prompt's tokens too. bertkit pools them always, so False
        makes encode refuse a prompt (rather than give vectors sentence-transformers would not)."""
        if not isinstance(include_prompt, bool):
            raise TypeError(f"set_pooling_include_prompt takes a bool, got {include_prompt!r}")
        self._includes_prompt = include_prompt
        seq = self.__dict__.get("_seq")
        if seq is not None:
            seq[1].include_prompt = include_prompt

    @contextmanager
    def truncate_sentence_embeddings(self, truncate_dim: int | None) -> Iterator[None]:
        """Within the ``with`` block, vectors keep their first ``truncate_dim`` dimensions."""
        from bertkit import _args as A

        A.positive_int.check("truncate_dim", truncate_dim, allow_none=True)
        saved, self.truncate_dim = self.truncate_dim, truncate_dim
        try:
            yield
        finally:
            self.truncate_dim = saved

    truncate_embeddings = truncate_sentence_embeddings  # sentence-transformers 6's name

    # -- training ---------------------------------------------------------------------------------

    @property
    def training_model(self) -> torch.nn.Module:
        """The encoder that ``model(features)``, the losses and :meth:`fit` train: fp32 with gradients,
        loaded from the folder on first use (the inference model's fused, frozen weights cannot train).
        With Dense modules it is a :class:`~bertkit.modeling.sentence.SentenceStack` (``.encoder``,
        ``.dense``), so the optimizer and the gradient clipping cover the Dense weights too."""
        return self._training_encoder().stack

    def _training_encoder(self) -> Any:
        if self._training is None:
            from bertkit.inference.precision import TrainedCopy
            from bertkit.modeling.auto import auto_class_for
            from bertkit.modeling.sentence import SentenceEncoder

            if self.dtype != "fp32":
                _refuse(f"training a {self.dtype} model", "is not supported: load it with dtype='fp32' to train")
            encoder = auto_class_for("BertModel").from_pretrained(str(self.folder)).to(self.device)
            if self._weights_from_inference:
                encoder.load_state_dict(self.model.state_dict())
            # the Dense modules are shared with the inference path: a step shows in encode() at once
            self._training = SentenceEncoder(
                encoder, self.tokenizer, self.pooling, self.normalizes, self.max_seq_length, self.dense
            )
            self._trained = TrainedCopy(encoder)
        return self._training

    def _sync_inference(self) -> None:
        """Give the inference model the training weights, if they changed since the last call."""
        if self._trained is not None:
            self._trained.sync(self.model)

    def forward(self, features: dict[str, Tensor]) -> dict[str, Tensor]:
        """``features`` (a tokenized batch) with ``sentence_embedding`` added, computed by
        :attr:`training_model` with gradients: what the losses call."""
        return {**features, "sentence_embedding": self._training_encoder()(features)}

    __call__ = forward

    def smart_batching_collate(self, batch: list[Any]) -> tuple[list[dict[str, Tensor]], Tensor]:
        """InputExamples -> (one tokenized batch per text column, the labels as a tensor)."""
        from bertkit.sentence.fit import smart_batching_collate

        return smart_batching_collate(self, batch)

    def fit(self, train_objectives: Any, evaluator: Any = None, epochs: int = 1, **kwargs: Any) -> None:
        """sentence-transformers' ``fit``: train on ``[(DataLoader(InputExamples), loss), ...]``; see
        :mod:`bertkit.sentence.fit` for every keyword (warmup_steps, optimizer_params,
        weight_decay, evaluation_steps, output_path, save_best_model, checkpoint_path...)."""
        from bertkit.sentence.fit import fit

        # unlike sentence-transformers, output_path may not be the folder the model was loaded from unless
        # overwrite=True: each save there would replace the pretrained weights in place
        overwrite = bool(kwargs.pop("overwrite", False))
        if kwargs.get("output_path") is not None and not overwrite:
            refuse_own_folder(self, kwargs["output_path"], "fit(output_path=...)")
        self._overwrite_own_folder = overwrite
        try:
            fit(self, train_objectives, evaluator, epochs, **kwargs)
        finally:
            self._overwrite_own_folder = False

    # -- encoding ---------------------------------------------------------------------------------

    def _resolve_prompt(self, prompt: str | None, prompt_name: str | None) -> str | None:
        if prompt is not None:
            return prompt
        if prompt_name is not None:
            if prompt_name not in self.prompts:
                _refuse(
                    f"prompt_name {prompt_name!r}", f"is not among the prompts ({', '.join(self.prompts) or 'none'})"
                )
            return self.prompts[prompt_name]
        if self.default_prompt_name is not None:
            return self.prompts.get(self.default_prompt_name)
        return None

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
        pool: Any = None,
        chunk_size: int | None = None,
        inputs: Any = None,
        **kwargs: Any,
    ) -> np.ndarray | Tensor | list[Tensor]:
        """Vectors for one text (1-D) or a list of texts (2-D), as sentence-transformers returns them.

        ``output_value="token_embeddings"`` gives each text's token vectors instead;
        ``precision`` int8/uint8/binary/ubinary quantizes (:func:`bertkit.sentence.util.quantize_embeddings`);
        ``truncate_dim`` keeps the first dimensions, then ``normalize_embeddings`` scales to length 1.
        """
        from bertkit.inference import run_batched
        from bertkit.pipelines.long_text import plan_windows

        sentences, precision = _check_encode_call(
            sentences, inputs, kwargs, pool, chunk_size, device, output_value, precision, batch_size, truncate_dim
        )
        if output_value is None:  # every output per text, as sentence-transformers gives it
            from bertkit.sentence.sentence_outputs import all_outputs

            texts, single = _texts(sentences)
            return all_outputs(self, texts, single, prompt_name, prompt, batch_size, normalize_embeddings, truncate_dim)
        if device is not None:
            self.to(device)
        self._sync_inference()
        texts, single = _texts(sentences)
        prompt = self._resolve_prompt(prompt, prompt_name)
        if prompt:
            if not self._includes_prompt:
                _refuse(
                    "a prompt",
                    f"cannot be used: {self.folder}'s pooling leaves the prompt's tokens out "
                    "(include_prompt false), which bertkit does not reproduce",
                )
            texts = [prompt + t for t in texts]
        truncate_dim = truncate_dim if truncate_dim is not None else self.truncate_dim
        if show_progress_bar is None:
            show_progress_bar = False

        plan = plan_windows(self.tokenizer, texts, self.max_seq_length, "cut")
        self._report_cut(plan.dropped)
        if output_value == "token_embeddings":
            res = run_batched(
                self.model,
                plan.features,
                batch_size,
                outputs=("last_hidden_state",),
                progress=bool(show_progress_bar),
                desc="Batches",
                max_batch_tokens=self._pipe.max_batch_tokens,
            )
            # on the model's device, as sentence-transformers returns them
            tokens = [torch.from_numpy(r["last_hidden_state"]).to(self.device) for r in res]
            return tokens[0] if single else tokens
        res = run_batched(
            self.model,
            plan.features,
            batch_size,
            progress=bool(show_progress_bar),
            desc="Batches",
            max_batch_tokens=self._pipe.max_batch_tokens,
            postprocess=self._pipe._pool,
        )
        if not res:
            empty = torch.tensor([], device=self.device)
            out: Any = empty if convert_to_tensor else (np.array([]) if convert_to_numpy else [])
            return out
        vecs = torch.from_numpy(np.stack([r["embedding"] for r in res]))
        vecs = util.truncate_embeddings(vecs, truncate_dim)
        if normalize_embeddings:
            vecs = util.normalize_embeddings(vecs)
        result: Any = vecs
        if precision != "float32":
            result = util.quantize_embeddings(vecs, precision)
        if convert_to_tensor:  # float vectors on the model's device, as sentence-transformers gives them
            result = result.to(self.device) if isinstance(result, Tensor) else torch.as_tensor(result)
        elif convert_to_numpy:
            result = result.numpy() if isinstance(result, Tensor) else result
        else:
            result = list(result.to(self.device) if isinstance(result, Tensor) else torch.as_tensor(result))
        return result[0] if single else result

    def _report_cut(self, dropped: list[int]) -> None:
        """Cutting is sentence-transformers' rule too, but a cut is never silent here."""
        cut = [d for d in dropped if d]
        if cut:
            limit = getattr(self.model.config, "max_position_embeddings", None)
            warnings.warn(
                f"{len(cut)} text(s) over max_seq_length={self.max_seq_length} tokens were cut: "
                f"{sum(cut):,} tokens dropped (max_seq_length may rise to the model's {limit} positions)",
                stacklevel=3,
            )

    def encode_query(
        self, sentences: Any = None, prompt_name: str | None = None, prompt: str | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`encode` with the folder's "query" prompt, when it has one and none is given."""
        if prompt_name is None and prompt is None and "query" in self.prompts:
            prompt_name = "query"
        return self.encode(sentences, prompt_name=prompt_name, prompt=prompt, **kwargs)

    def encode_document(
        self, sentences: Any = None, prompt_name: str | None = None, prompt: str | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`encode` with the folder's "document", "passage" or "corpus" prompt (the first it has),
        when none is given."""
        if prompt_name is None and prompt is None:
            prompt_name = next((n for n in ("document", "passage", "corpus") if n in self.prompts), None)
        return self.encode(sentences, prompt_name=prompt_name, prompt=prompt, **kwargs)

    # -- saving -----------------------------------------------------------------------------------

    def save(
        self, path: str | Path, model_name: str | None = None, create_model_card: bool = True, **kwargs: Any
    ) -> None:
        """Write a folder sentence-transformers loads back to the same vectors: the encoder and
        tokenizer, the module files and ``config_sentence_transformers.json``. Files of the same
        names are replaced in one rename each; other files in the folder are kept. The folder the model
        was loaded from is refused unless ``overwrite=True`` (sentence-transformers writes over it)."""
        from bertkit._io import atomic_update_dir, atomic_write_json
        from bertkit.modeling.sentence import save_sentence_folder
        from bertkit.sentence.model_card import write_card

        if not (kwargs.pop("overwrite", False) or getattr(self, "_overwrite_own_folder", False)):
            refuse_own_folder(self, path, "save()")
        if kwargs.get("safe_serialization") is False:
            _refuse("safe_serialization=False", "is not supported here: the folder holds model.safetensors")
        self._sync_inference()
        if self.dtype != "fp32":
            _refuse(
                f"save() of a {self.dtype} model",
                "would write rounded weights: load it with dtype='fp32' to save",
            )
        with atomic_update_dir(path) as tmp:
            self.model.save_pretrained(tmp, tokenizer=self.tokenizer)
            save_sentence_folder(
                tmp,
                int(self.model.config.hidden_size),
                self.pooling,
                self.normalizes,
                self.max_seq_length,
                self.dense,
                include_prompt=self._includes_prompt,
            )
            atomic_write_json(
                Path(tmp) / _ST_CONFIG,
                {
                    "prompts": dict(self.prompts),
                    "default_prompt_name": self.default_prompt_name,
                    "similarity_fn_name": self._similarity_fn_name,
                },
            )
            if create_model_card:
                write_card(self, Path(tmp), Path(path).expanduser(), model_name=model_name)

    def save_pretrained(self, path: str | Path, **kwargs: Any) -> None:
        """Same as :meth:`save`."""
        self.save(path, **kwargs)

    def __repr__(self) -> str:
        return (
            f"SentenceTransformer({self.folder}, {type(self.model).__name__}, pooling={self.pooling}, "
            f"dense={[f'{d.in_features}->{d.out_features}' for d in self.dense]}, "
            f"normalize={self.normalizes}, max_seq_length={self.max_seq_length}, dtype={self.dtype})"
        )
