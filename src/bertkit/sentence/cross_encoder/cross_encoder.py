"""``CrossEncoder``: sentence-transformers' cross-encoder class, answering the same calls from bertkit.

::

    from bertkit import CrossEncoder
    model = CrossEncoder("cross-encoder/ms-marco-MiniLM-L6-v2")  # a folder, or a model id in the HF cache
    scores = model.predict([("query", "passage 1"), ("query", "passage 2")])
    ranks = model.rank("query", ["passage 1", "passage 2"], top_k=1, return_documents=True)

The logits come from :class:`~bertkit.pipelines.text_ranking.TextRankingPipeline`'s batched,
length-sorted path; what sentence-transformers adds on top is done here as it does it: the activation
(sigmoid for a one-label head, identity for a wider one, or the one the folder's config names), the
optional softmax, the output types and the order of ``rank``. ``save`` writes a folder that
sentence-transformers' ``CrossEncoder``, transformers and bertkit all load with the same scores.
Arguments bertkit cannot honour (remote code, other backends, multi-process pools, prompts) are
refused by name rather than ignored.
``fit`` is sentence-transformers' pre-v4 training call (:mod:`bertkit.sentence.cross_encoder.fit`).
"""

from __future__ import annotations

import copy
import importlib
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import _args as A
from bertkit.pipelines.text_ranking import TextRankingPipeline
from bertkit.sentence.losses.base import _fullname
from bertkit.sentence.module_calls import _ModuleCalls, _to_dtype

__all__ = ["CrossEncoder"]

# sentence-transformers' keyword arguments that change what a model computes in ways bertkit does
# not reproduce: refused by name, so a script never runs with one of them silently dropped.
_UNSUPPORTED_INIT = {
    "modules": "bertkit's CrossEncoder is one sequence-classification model; give its folder",
    "model_kwargs": "load options of transformers' AutoModel do not apply to bertkit's models",
    "processor_kwargs": "set max_length=... for the truncation length; other tokenizer options are not taken",
    "tokenizer_kwargs": "set max_length=... for the truncation length; other tokenizer options are not taken",
    "config_kwargs": "bertkit uses the folder's config.json as saved (num_labels must match it)",
    "prompts": "prompts are not supported",
    "default_prompt_name": "prompts are not supported",
    "keep_in_fp32_modules": "bertkit's precision is one setting for the whole model: dtype=",
}
# sentence-transformers' module files: present in a folder, they decide what its CrossEncoder loads.
_ST_FILES = ("modules.json", "config_sentence_transformers.json")


def _activation_from_path(path: str, where: str) -> Callable | None:
    """An activation named in a saved config, as sentence-transformers instantiates it; None (with
    its warning) for a class outside torch, whose code would run only with trust_remote_code."""
    if not isinstance(path, str) or not path.startswith("torch."):
        warnings.warn(
            f"{where}: activation function {path!r} is not a torch class; bertkit runs no code from a model "
            "folder, so the default activation is used instead",
            stacklevel=4,
        )
        return None
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)()
    except (ImportError, AttributeError, TypeError) as e:
        raise ValueError(f"{where}: activation function {path!r} cannot be built ({e})") from None


def _read_json(path: Path) -> Any:
    from bertkit._text import read_json

    return read_json(path)


def _shorten(value: Any, width: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _check_pairs(inputs: Any) -> tuple[list[tuple[str, str]], bool]:
    """The (query, passage) pairs of a predict call and whether it was one pair (as sentence-transformers
    decides: a list or tuple whose first item is not itself a list or tuple)."""
    if isinstance(inputs, np.ndarray):
        if inputs.dtype.kind not in ("U", "O"):
            raise TypeError(f"predict takes (text, text) pairs, got a numpy array of {inputs.dtype}")
        inputs = inputs.tolist()
    if isinstance(inputs, str):
        raise TypeError(
            f"predict takes (text, text) pairs, got the string {_shorten(inputs)}; "
            "pass [(query, passage)] to score one pair"
        )
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"predict takes a list of (text, text) pairs or one pair, got {type(inputs).__name__}")
    if len(inputs) == 0:  # no pairs, no scores: sentence-transformers returns an empty array
        return [], False
    single = not isinstance(inputs[0], (list, tuple))
    rows = [inputs] if single else list(inputs)
    for i, pair in enumerate(rows):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            size = f"{len(pair)} items" if isinstance(pair, (list, tuple)) else f"a {type(pair).__name__}"
            raise ValueError(f"pair {i} must be 2 texts (query, passage), got {size}: {_shorten(pair)}")
        for j, text in enumerate(pair):
            if not isinstance(text, str):
                raise TypeError(
                    f"pair {i} must hold 2 strings, got {type(text).__name__} {_shorten(text)} at position {j}"
                )
    return [(q, p) for q, p in rows], single


# sentence-transformers' per-call arguments that bertkit does not take, and why
_UNSUPPORTED_CALL = {
    "prompt_name": "prompts are not supported",
    "prompt": "prompts are not supported",
    "device": "it scores on the model's device; move the model with .to(device)",
    "pool": "it scores in this process, without a multi-process pool",
    "chunk_size": "it scores in this process, without a multi-process pool",
}


def _refuse_per_call(method: str, given: dict[str, Any]) -> None:
    for name, value in given.items():
        if value is not None:
            raise ValueError(
                f"CrossEncoder.{method}({name}=...) is not supported by bertkit: {_UNSUPPORTED_CALL[name]}"
            )


class CrossEncoder(_ModuleCalls):
    """sentence-transformers' ``CrossEncoder`` over a bertkit sequence-classification folder.

    ``model_name_or_path``: a folder, or a model id in the local Hugging Face cache (``cache_folder``,
    ``revision``); nothing is downloaded, so ``token`` and ``local_files_only`` change nothing.
    ``num_labels`` must match the folder's head; a folder with no classifier (a plain BERT) gets a new
    head of ``num_labels`` (default 1), as in sentence-transformers; ``max_length`` is where pairs are cut (default: the
    tokenizer's limit, at most the model's positions); ``activation_fn`` replaces the default (sigmoid
    for one label, identity otherwise, or the one the folder's config names); ``device`` defaults to
    CUDA when there is one. ``dtype`` (bertkit's own): "fp32" by default, "bf16", "int8" or "auto"
    for the precision the scores are computed in.
    """

    # what its losses check (they sit below this class, whose fit() uses them, so they cannot import it)
    _bertkit_kind = "cross-encoder"

    def __init__(
        self,
        model_name_or_path: str | os.PathLike,
        num_labels: int | None = None,
        max_length: int | None = None,
        activation_fn: Callable | None = None,
        device: str | None = None,
        *,
        cache_folder: str | os.PathLike | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        trust_remote_code: bool = False,
        token: bool | str | None = None,
        backend: str = "torch",
        cache_dir: str | os.PathLike | None = None,
        dtype: str | torch.dtype | None = None,
        model_card_data: Any = None,
        **unsupported: Any,
    ) -> None:
        from bertkit.hub import hub_id, resolve_model_path
        from bertkit.sentence.model_card import CrossEncoderModelCardData, adopt, read_original

        for name, value in unsupported.items():
            if name not in _UNSUPPORTED_INIT:
                raise TypeError(f"CrossEncoder() got an unexpected keyword argument {name!r}")
            if value is not None:
                raise ValueError(f"CrossEncoder({name}=...) is not supported by bertkit: {_UNSUPPORTED_INIT[name]}")
        if trust_remote_code:
            raise ValueError(
                "CrossEncoder(trust_remote_code=True) is not supported by bertkit: it runs only its own model "
                "classes, never code from a model folder"
            )
        if backend != "torch":
            raise ValueError(f"CrossEncoder(backend={backend!r}) is not supported by bertkit: only 'torch' is")
        if activation_fn is not None and not callable(activation_fn):
            raise TypeError(f"activation_fn must be callable (e.g. torch.nn.Sigmoid()), got {_shorten(activation_fn)}")
        A.positive_int.check("num_labels", num_labels, allow_none=True)
        A.positive_int.check("max_length", max_length, allow_none=True)
        if cache_dir is not None and cache_folder is None:  # sentence-transformers' older name for it
            cache_folder = cache_dir
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"

        folder = resolve_model_path(model_name_or_path, cache_dir=cache_folder, revision=revision)
        st_config = self._read_st_files(folder)
        self.folder = folder
        # a folder without a classifier (a plain BERT, as sentence-transformers' training scripts start
        # from) gets a new head of num_labels (default 1), as sentence-transformers gives it; its first
        # weights are kept so that fit() trains the head predict() scores with
        self._fresh_head: dict[str, torch.Tensor] | None = None
        if not self._has_classifier(folder):
            model = self._load_for_training(num_labels or 1)
            self._fresh_head = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self._pipe = TextRankingPipeline(
                model, tokenizer=str(folder), device=device, dtype=dtype or "fp32", num_labels=None
            )
        else:
            self._pipe = TextRankingPipeline(folder, device=device, dtype=dtype, num_labels=None)
        config = self._pipe.model.config
        if num_labels is not None and num_labels != self.num_labels:
            raise ValueError(
                f"num_labels={num_labels}, but {folder}'s trained head has {self.num_labels} label(s); bertkit "
                "does not replace a trained head with a new random one"
            )
        if max_length is None:
            saved = st_config.get("max_seq_length")
            tokenizer_limit = int(getattr(self.tokenizer, "model_max_length", 512))
            max_length = saved or min(tokenizer_limit, int(config.max_position_embeddings))
        self.max_length = max_length
        if activation_fn is None:
            activation_fn = self._saved_activation(st_config)
        if activation_fn is None:
            activation_fn = torch.nn.Sigmoid() if self.num_labels == 1 else torch.nn.Identity()
        self.activation_fn = activation_fn
        # what the README.md written by save() says (the folder's own card, kept while untrained)
        self.model_card_data = adopt(model_card_data, CrossEncoderModelCardData)
        self.model_card_data.original_text = read_original(folder)
        if self.model_card_data.base_model is None:
            self.model_card_data.base_model = hub_id(folder)
        self._trained: Any = None  # fit()'s fp32 copy (TrainedCopy), made on first use
        # after a bfloat16() the folder's weights are no longer the model's: a new training copy
        # starts from the inference model's (rounded) weights, as sentence-transformers' would
        self._weights_from_inference = False

    @staticmethod
    def _has_classifier(folder: Path) -> bool:
        """sentence-transformers' test: the folder's config.json names a ...ForSequenceClassification class."""
        archs = _read_json(folder / "config.json").get("architectures") if (folder / "config.json").is_file() else None
        return any(str(a).endswith("ForSequenceClassification") for a in archs or [])

    def _load_for_training(self, num_labels: int | None = None) -> torch.nn.Module:
        """The folder's fp32 sequence-classification model: with ``num_labels``, the folder's encoder under
        a new head of that size (the loader says which weights are new); after that first build, the
        same weights again, so the model fit() trains starts from the head predict() scored with."""
        from bertkit.modeling.auto import AutoModelForSequenceClassification

        if self._fresh_head is None:
            kwargs = {} if num_labels is None else {"num_labels": num_labels}
            return AutoModelForSequenceClassification.from_pretrained(str(self.folder), **kwargs)
        model = AutoModelForSequenceClassification.from_config(copy.deepcopy(self._pipe.model.config))
        model.load_state_dict(self._fresh_head)  # every weight given: nothing new to report
        return model

    @staticmethod
    def _read_st_files(folder: Path) -> dict[str, Any]:
        """What a sentence-transformers save adds beside the model: its activation and max_seq_length.

        A save of another model type (``config_sentence_transformers.json``'s ``model_type``, a
        SentenceTransformer when absent) is converted as sentence-transformers converts it: its model
        folder gets the CrossEncoder's default module and a new head unless it has one, and its modules
        and settings are not read. A CrossEncoder save listing more than its one Transformer is refused."""
        out: dict[str, Any] = {}
        if not (folder / "modules.json").is_file():
            return out
        cfg = folder / "config_sentence_transformers.json"
        data = _read_json(cfg) if cfg.is_file() else {}
        model_type = data.get("model_type") if isinstance(data, dict) else None
        model_type = str(model_type or "SentenceTransformer")
        if model_type != "CrossEncoder":
            warnings.warn(
                f"Converting {model_type} model {folder} to CrossEncoder (its modules.json and "
                "sentence-transformers settings are not used: only the model folder is)",
                stacklevel=3,
            )
            return out
        modules = _read_json(folder / "modules.json")
        kinds = [str(m.get("type", "")) if isinstance(m, dict) else repr(m) for m in modules]
        extra = [k for k in kinds if not k.endswith(".Transformer")]
        if len(kinds) != 1 or extra:
            raise ValueError(
                f"{folder} is not a cross-encoder: its modules.json lists {', '.join(kinds) or 'no modules'}, and "
                "bertkit's CrossEncoder runs one Transformer module (a sequence-classification model), nothing after it"
            )
        if data.get("activation_fn"):
            out["activation_fn"] = (data["activation_fn"], str(cfg))
        st = folder / "sentence_bert_config.json"
        if st.is_file():
            data = _read_json(st)
            if isinstance(data, dict) and data.get("max_seq_length"):
                out["max_seq_length"] = A.positive_int.check(f"{st} max_seq_length", data["max_seq_length"])
        return out

    def _saved_activation(self, st_config: dict[str, Any]) -> Callable | None:
        """The activation a saved folder names, in sentence-transformers' order: its module config,
        then config.json's ``sentence_transformers``, then the pre-4.0 config.json key."""
        found: Callable | None = None
        if "activation_fn" in st_config:
            found = _activation_from_path(*st_config["activation_fn"])
        if found is not None:
            return found
        extra = self.config.extra
        where = str(self.folder / "config.json")
        saved = extra.get("sentence_transformers")
        if isinstance(saved, dict) and saved.get("activation_fn"):
            return _activation_from_path(saved["activation_fn"], where)
        legacy = extra.get("sbert_ce_default_activation_function")
        if legacy:
            return _activation_from_path(legacy, where)
        return None

    # ------------------------------------------------------------------ what sentence-transformers users touch
    @property
    def model(self) -> torch.nn.Module:
        """The sequence-classification model (bertkit's, with transformers' names)."""
        return self._pipe.model

    @property
    def tokenizer(self) -> Any:
        """The tokenizer, called as transformers' is."""
        return self._pipe.tokenizer

    @property
    def config(self) -> Any:
        """The model's config (config.json's fields as attributes)."""
        return self._pipe.model.config

    @property
    def num_labels(self) -> int:
        """How many scores the head gives per pair."""
        return int(self.config.num_labels)

    @property
    def device(self) -> torch.device:
        """Where the model's weights are."""
        return next(self.model.parameters()).device

    @property
    def max_length(self) -> int:
        """Pairs longer than this many tokens are cut, the longer text first."""
        return self._pipe.max_length

    @max_length.setter
    def max_length(self, value: int) -> None:
        value = A.positive_int.check("max_length", value)
        positions = int(self.config.max_position_embeddings)
        if value > positions:
            raise ValueError(f"max_length={value} is over the model's {positions} positions")
        self._pipe.max_length = value
        self.tokenizer.model_max_length = value  # saved with the tokenizer, as sentence-transformers keeps it

    @property
    def max_seq_length(self) -> int:
        """sentence-transformers' newer name of :attr:`max_length`."""
        return self.max_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        self.max_length = value

    @property
    def dtype(self) -> str:
        """The precision scores are computed in: "fp32", "bf16" or "int8"."""
        return self._pipe.dtype

    def to(self, device: str | torch.device | torch.dtype) -> CrossEncoder:
        """Move the model to ``device`` (a ``torch.dtype`` instead: :meth:`float`, :meth:`bfloat16`,
        :meth:`half`); returns this CrossEncoder."""
        from bertkit._args import check_device

        if isinstance(device, torch.dtype):
            return _to_dtype(self, device)
        self.model.to(check_device("device", device))
        if self._trained is not None:
            self._trained.model.to(self.device)
        self._pipe.device = self.device
        return self

    def __repr__(self) -> str:
        return (
            f"CrossEncoder(model={type(self.model).__name__}, num_labels={self.num_labels}, "
            f"max_length={self.max_length}, activation_fn={self.activation_fn!r}, device={self.device})"
        )

    # ------------------------------------------------------------------ the module list (see _ModuleCalls)
    _CALLER = "pairs"

    def _build_modules(self) -> list[torch.nn.Module]:
        from bertkit.sentence import models

        # fp32: the trainable model; bf16 has none, so the (frozen) inference model is shown
        model = self.training_model if self.dtype == "fp32" else self.model
        return [models.Transformer._bound(self, model)]

    def _module_count(self) -> int:
        return 1

    def _precision(self, dtype: str, call: str) -> CrossEncoder:
        from bertkit.inference import prepare_for_inference

        if self.dtype == "int8":
            raise ValueError(
                f"CrossEncoder.{call} is not supported on an int8 model (its weights are quantized): "
                "load it with dtype='fp32'"
            )
        if dtype == self.dtype:
            return self
        self._sync_inference()  # trained weights first, then the cast
        prepare_for_inference(self.model, dtype)
        # the fp32 training copy no longer holds the model's weights: the next one starts from these
        self._trained = None
        self._weights_from_inference = True
        self._drop_modules()
        return self

    def get_max_seq_length(self) -> int:
        """Same as :attr:`max_length`."""
        return self.max_length

    def preprocess(self, inputs: list[str] | list[tuple[str, str]]) -> dict[str, torch.Tensor]:
        """The padded model inputs for ``inputs``: (text, text) pairs tokenized together as
        :meth:`predict` reads them, or single texts each alone, cut to :attr:`max_length` tokens (the
        longer text of a pair first)."""
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise ValueError(
                f"preprocess takes a non-empty list of texts or (text, text) pairs, got {_shorten(inputs)}"
            )
        if all(isinstance(t, str) for t in inputs):
            first, second = list(inputs), None
        else:
            pairs, _ = _check_pairs(list(inputs))
            first, second = [q for q, _ in pairs], [p for _, p in pairs]
        enc = self.tokenizer(
            first, second, padding=True, truncation="longest_first", max_length=self.max_length, return_tensors="pt"
        )
        return {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask") if k in enc}

    def tokenize(self, inputs: list[str] | list[tuple[str, str]]) -> dict[str, torch.Tensor]:
        """Same as :meth:`preprocess` (sentence-transformers' older name)."""
        return self.preprocess(inputs)

    # ------------------------------------------------------------------ training
    @property
    def training_model(self) -> torch.nn.Module:
        """The sequence-classification model :meth:`fit` trains: fp32 with gradients, loaded from the
        folder on first use (the inference model's fused, frozen weights cannot train)."""
        if self._trained is None:
            from bertkit.inference.precision import TrainedCopy

            if self.dtype != "fp32":
                raise ValueError(f"training a {self.dtype} CrossEncoder is not supported: load it with dtype='fp32'")
            model = self._load_for_training()
            if self._weights_from_inference:
                model.load_state_dict(self.model.state_dict())
            self._trained = TrainedCopy(model.to(self.device))
        return self._trained.model

    def _sync_inference(self) -> None:
        """Give the inference model the training weights, if they changed since the last call."""
        if self._trained is not None:
            self._trained.sync(self.model)

    def smart_batching_collate(self, batch: list[Any]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """InputExamples -> (their pairs tokenized together, the labels: float for one label, else class ids)."""
        from bertkit.sentence.cross_encoder.fit import pair_collate

        return pair_collate(self, batch)

    def fit(self, train_dataloader: Any, evaluator: Any = None, epochs: int = 1, **kwargs: Any) -> None:
        """sentence-transformers' ``CrossEncoder.fit``: train on a DataLoader of (text, text)
        InputExamples; see :mod:`bertkit.sentence.cross_encoder.fit` for every keyword (loss_fct,
        activation_fct, warmup_steps, optimizer_params, evaluation_steps, output_path...), and bertkit's
        keyword-only extras checkpoint_path, checkpoint_save_steps, checkpoint_save_total_limit and
        resume_from_checkpoint (sentence-transformers' CrossEncoder.fit has none)."""
        from bertkit.sentence.cross_encoder.fit import fit
        from bertkit.sentence.sentence_outputs import refuse_own_folder

        # output_path may be the folder the model came from only with overwrite=True (as SentenceTransformer)
        overwrite = bool(kwargs.pop("overwrite", False))
        if kwargs.get("output_path") is not None and not overwrite:
            refuse_own_folder(self, kwargs["output_path"], "fit(output_path=...)")
        self._overwrite_own_folder = overwrite
        try:
            fit(self, train_dataloader, evaluator, epochs, **kwargs)
        finally:
            self._overwrite_own_folder = False

    # ------------------------------------------------------------------ scoring
    def predict(
        self,
        sentences: Any = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        activation_fn: Callable | None = None,
        apply_softmax: bool | None = False,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        *,
        inputs: Any = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        device: Any = None,
        pool: Any = None,
        chunk_size: int | None = None,
    ) -> np.ndarray | torch.Tensor | list[torch.Tensor] | np.floating:
        """Scores of (query, passage) pairs, as sentence-transformers gives them: one pair -> a scalar
        (one label) or a vector; many -> an array of (pairs,) or (pairs, labels). ``activation_fn``
        overrides the model's for this call; ``apply_softmax`` normalises a wider head's scores per pair.
        ``inputs`` is sentence-transformers' newer name of ``sentences``."""
        _refuse_per_call(
            "predict",
            {"prompt_name": prompt_name, "prompt": prompt, "device": device, "pool": pool, "chunk_size": chunk_size},
        )
        if inputs is not None and sentences is not None:
            raise ValueError("give the pairs once: sentences=... or inputs=..., not both")
        pairs, single = _check_pairs(inputs if inputs is not None else sentences)
        batch_size = A.positive_int.check("batch_size", batch_size)
        if activation_fn is not None and not callable(activation_fn):
            raise TypeError(f"activation_fn must be callable (e.g. torch.nn.Sigmoid()), got {_shorten(activation_fn)}")
        if not pairs:
            return (
                torch.tensor([], device=self.device) if convert_to_tensor else np.array([]) if convert_to_numpy else []
            )
        self._sync_inference()
        logits = self._pipe.score_pairs(
            pairs, self.max_length, "cut", batch_size=batch_size, progress=bool(show_progress_bar)
        )
        scores = torch.from_numpy(logits.reshape(len(pairs), -1))
        with torch.no_grad():
            # the activation sees (pairs, labels) as sentence-transformers' does, before a one-label squeeze
            scores = (activation_fn or self.activation_fn)(scores)
            if self.num_labels == 1 and scores.ndim > 1:
                scores = scores.squeeze(-1)
            if apply_softmax and scores.ndim > 1:
                scores = torch.nn.functional.softmax(scores, dim=1)
        out: Any
        if convert_to_tensor:
            out = scores.to(self.device)
        elif convert_to_numpy:
            out = scores.float().cpu().numpy()
        else:
            out = list(scores.to(self.device))
        return out[0] if single else out

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: int | None = None,
        return_documents: bool = False,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        activation_fn: Callable | None = None,
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        device: Any = None,
        pool: Any = None,
        chunk_size: int | None = None,
    ) -> list[dict[str, Any]]:
        """``[{"corpus_id", "score"[, "text"]}]`` for ``documents`` against ``query``, best first (equal
        scores keep the documents' order), the first ``top_k`` of them."""
        _refuse_per_call(
            "rank",
            {"prompt_name": prompt_name, "prompt": prompt, "device": device, "pool": pool, "chunk_size": chunk_size},
        )
        if self.num_labels != 1:
            raise ValueError(
                "CrossEncoder.rank() only works for models with num_labels=1. "
                "Consider using CrossEncoder.predict() with input pairs instead."
            )
        A.positive_int.check("top_k", top_k, allow_none=True)
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__} {_shorten(query)}")
        if isinstance(documents, str) or not isinstance(documents, (Sequence, np.ndarray)):
            raise TypeError(
                f"documents must be a list of strings, got {type(documents).__name__} {_shorten(documents)}"
            )
        documents = list(documents)
        if not documents:
            raise ValueError("rank needs at least one document, got an empty list")
        for i, doc in enumerate(documents):
            if not isinstance(doc, str):
                raise TypeError(f"documents[{i}] must be a string, got {type(doc).__name__} {_shorten(doc)}")
        scores = self.predict(
            [(query, doc) for doc in documents],
            batch_size=batch_size,
            show_progress_bar=show_progress_bar,
            activation_fn=activation_fn,
            convert_to_tensor=True,
        ).tolist()
        results = [
            {"corpus_id": i, "score": score, **({"text": documents[i]} if return_documents else {})}
            for i, score in enumerate(scores)
        ]
        # Python's sort is stable, reverse included: equal scores stay in corpus order, as in sentence-transformers
        return sorted(results, key=lambda r: r["score"], reverse=True)[:top_k]

    # ------------------------------------------------------------------ saving
    def save(
        self,
        path: str | os.PathLike,
        model_name: str | None = None,
        create_model_card: bool = True,
        train_datasets: list[str] | None = None,
        safe_serialization: bool = True,
        overwrite: bool = False,
    ) -> None:
        """Write config.json (naming the activation), the weights and the tokenizer into ``path``, atomically.
        The folder the model was loaded from is refused unless ``overwrite=True``.

        The folder is one transformers' sequence-classification layout, which sentence-transformers'
        CrossEncoder loads with this activation and max_length. Files already in ``path`` that this save
        does not write are kept, but a folder holding another model's sentence-transformers module files
        (which that library would read instead) is refused. With ``create_model_card`` a README.md
        model card is written (:mod:`bertkit.sentence.model_card`), titled ``model_name`` unless
        ``model_card_data`` names the model; ``train_datasets`` is accepted and not read."""
        if not (overwrite or getattr(self, "_overwrite_own_folder", False)):
            from bertkit.sentence.sentence_outputs import refuse_own_folder

            refuse_own_folder(self, path, "CrossEncoder.save()")
        self._sync_inference()
        if self._pipe.dtype != "fp32":
            raise ValueError(
                f"CrossEncoder.save() of a {self._pipe.dtype} model would write rounded weights: "
                "load it with dtype='fp32' to save"
            )
        target = Path(path).expanduser()
        found = [name for name in _ST_FILES if (target / name).exists()]
        if found:
            raise FileExistsError(
                f"{target} holds {', '.join(found)}, which sentence-transformers would read instead of this "
                "cross-encoder's config and which bertkit did not write; save into a new or empty folder"
            )
        extra = self.config.extra
        extra.pop("sbert_ce_default_activation_function", None)  # superseded by the key written below
        extra["sentence_transformers"] = {"activation_fn": _fullname(self.activation_fn)}
        self.model.save_pretrained(target, tokenizer=self.tokenizer, safe_serialization=safe_serialization)
        if create_model_card:
            from bertkit.sentence.model_card import write_card

            write_card(self, target, target, model_name=model_name)

    def save_pretrained(
        self,
        path: str | os.PathLike,
        model_name: str | None = None,
        create_model_card: bool = True,
        train_datasets: list[str] | None = None,
        safe_serialization: bool = True,
        overwrite: bool = False,
    ) -> None:
        """Same as :meth:`save`."""
        self.save(path, model_name, create_model_card, train_datasets, safe_serialization, overwrite)
