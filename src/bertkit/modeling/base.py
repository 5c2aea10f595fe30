"""The base class of every model family: config, weight init and tying, vocabulary resize, input
checks, and checkpoint I/O (``from_pretrained`` / ``save_pretrained``).

Initialisation is BERT's (normal with ``initializer_range``, zero biases, unit LayerNorm), which
DistilBERT shares; a family with its own scheme (GPT-2) overrides ``init_weights``/``_init_module``.
Input validation lives here once: every family's base model calls :meth:`PreTrainedModel.validate_inputs`
first, so BERT, DistilBERT and GPT-2 refuse the same bad inputs with the same messages and honour
the same ``check_inputs`` switch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit import _hooks

from .config import PretrainedConfig
from .loading import init_weights_enabled, load_pretrained

__all__ = ["PreTrainedModel"]


def _check_ids(name: str, ids: torch.Tensor, limit: int, limit_name: str, check_values: bool = True) -> None:
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"{name} must hold integer ids, got dtype {ids.dtype}")
    if not check_values or ids.numel() == 0:
        return
    lo, hi = torch.aminmax(ids)
    lo, hi = int(lo), int(hi)
    if lo < 0 or hi >= limit:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} contains {bad}, outside [0, {limit}) ({limit_name}={limit})")


class PreTrainedModel(nn.Module):
    """Shared plumbing of every family: config, weight init, weight tying, input checks,
    from_pretrained / save_pretrained. A family sets ``config_class`` and ``base_model_prefix``."""

    config_class: type = PretrainedConfig
    base_model_prefix = ""
    main_input_name = "input_ids"  # transformers' name for what a forward's first argument holds
    # False: a trusted caller (serving ids its own tokenizer made) skips the id-range checks, which
    # read the ids on the host; shapes and dtypes are still checked. torch.compile skips them anyway.
    check_inputs: bool = True
    # The config field that bounds positions, as the family names it in messages.
    positions_field = "max_position_embeddings"
    # Whether the family takes a (B, N, N) attention mask besides (B, N) padding masks.
    accepts_square_mask = True
    # tied parameter -> the parameter it shares storage with (checkpoints need only the latter)
    _tied_weights_keys: dict[str, str] = {}
    # what a newly initialised head is, for the load report
    _head_description: str = ""

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}"
                + (
                    f" (model_type {config.model_type!r}: load it with the Auto classes or its own classes)"
                    if hasattr(config, "model_type")
                    else ""
                )
            )
        config.validate()
        self.config = config

    def post_init(self) -> None:
        """Tie weights, then initialise them (skipped inside ``no_init_weights()``)."""
        self.tie_weights()
        if init_weights_enabled():
            self.init_weights()

    # ----------------------------------------------------------------- init
    @torch.no_grad()
    def init_weights(self) -> None:
        """BERT initialisation: normal(0, initializer_range) weights, zero biases, unit LayerNorm."""
        self.apply(self._init_module)
        for m in self.modules():  # a tied decoder may have overwritten the padding row
            if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()

    @torch.no_grad()
    def _init_module(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        _reset_position_ids(module)
        bias = getattr(module, "bias", None)
        if not isinstance(module, (nn.Linear, nn.LayerNorm)) and isinstance(bias, nn.Parameter):
            bias.zero_()  # the MLM output bias (cls.predictions.bias)

    def tie_weights(self) -> None:
        """Share the MLM decoder with the word embeddings (when the config ties them)."""

    @classmethod
    def tied_weights(cls, config: PretrainedConfig) -> dict[str, str]:
        """``{tied parameter: the parameter it shares}`` for this class under ``config``."""
        keys = dict(cls._tied_weights_keys)
        if not config.tie_word_embeddings:
            keys = {t: s for t, s in keys.items() if not s.endswith("word_embeddings.weight")}
        return keys

    @torch.no_grad()
    def init_missing(self, keys: list[str]) -> None:
        """BERT's initialisation of the parameters ``keys`` only, and of the non-persistent buffers.

        For a model whose other parameters came from a checkpoint (their values are kept).
        """
        for key in keys:
            owner_name, _, attr = key.rpartition(".")
            owner = self.get_submodule(owner_name)
            param = getattr(owner, attr)
            if isinstance(owner, nn.LayerNorm):
                param.fill_(1.0 if attr == "weight" else 0.0)
            elif attr == "bias":
                param.zero_()
            else:
                param.normal_(0.0, self.config.initializer_range)
                if isinstance(owner, nn.Embedding) and owner.padding_idx is not None:
                    param[owner.padding_idx].zero_()
        for module in self.modules():
            _reset_position_ids(module)

    # ----------------------------------------------------------------- conveniences
    @property
    def base_model(self) -> "PreTrainedModel":
        return getattr(self, self.base_model_prefix, self)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.word_embeddings

    def get_output_embeddings(self) -> nn.Linear | None:
        return None

    def embedding_tables(self) -> dict[str, nn.Embedding]:
        """The lookup tables summed into the first hidden state: ``word``, and ``position`` and
        ``token_type`` where the family has them (read by ``bertkit explain``)."""
        tables = {"word": self.get_input_embeddings()}
        emb = getattr(self.base_model, "embeddings", None)
        for name, attr in (("position", "position_embeddings"), ("token_type", "token_type_embeddings")):
            if isinstance(getattr(emb, attr, None), nn.Embedding):
                tables[name] = getattr(emb, attr)
        return tables

    def set_input_embeddings(self, new: nn.Embedding) -> None:
        self.base_model.embeddings.word_embeddings = new

    def set_output_embeddings(self, new: nn.Linear) -> None:
        """Replace the vocabulary projection (heads that have one override this)."""
        raise NotImplementedError(f"{type(self).__name__} has no output embeddings")

    @torch.no_grad()
    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Grow or shrink the vocabulary: existing rows are kept; new rows are the mean of the old ones
        (``mean_resizing``, transformers' default, so new tokens start where the known ones are on
        average) or get the model's init. ``pad_to_multiple_of`` rounds the size up; None keeps it.

        Updates ``config.vocab_size`` and keeps the vocabulary projection (the MLM decoder and its
        bias) tied or, untied, sized to match with its existing rows kept.
        """
        old = self.get_input_embeddings()
        n_old, dim = old.weight.shape
        if new_num_tokens is None:
            new_num_tokens = n_old
        for name, value in (("new_num_tokens", new_num_tokens), ("pad_to_multiple_of", pad_to_multiple_of)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if pad_to_multiple_of is not None:
            new_num_tokens = -(-new_num_tokens // pad_to_multiple_of) * pad_to_multiple_of
        if new_num_tokens == n_old:
            return old
        new = nn.Embedding(
            new_num_tokens,
            dim,
            padding_idx=old.padding_idx if old.padding_idx is not None and old.padding_idx < new_num_tokens else None,
        )
        new.to(device=old.weight.device, dtype=old.weight.dtype)
        self._init_module(new)
        keep = min(n_old, new_num_tokens)
        new.weight[:keep] = old.weight[:keep]
        if mean_resizing and new_num_tokens > n_old:
            new.weight[n_old:] = old.weight.float().mean(0).to(old.weight.dtype)
        self.set_input_embeddings(new)
        decoder = self.get_output_embeddings()  # None for a bare encoder or decoder
        if decoder is not None:
            w = decoder.weight
            new_decoder = nn.Linear(dim, new_num_tokens, bias=decoder.bias is not None, device=w.device, dtype=w.dtype)
            grown = mean_resizing and new_num_tokens > n_old
            if not self.config.tie_word_embeddings:
                self._init_module(new_decoder)
                new_decoder.weight[:keep] = w[:keep]
                if grown:
                    new_decoder.weight[n_old:] = w.float().mean(0).to(w.dtype)
            if decoder.bias is not None:
                new_decoder.bias.zero_()
                new_decoder.bias[:keep] = decoder.bias[:keep]
                if grown and not self.config.tie_word_embeddings:
                    new_decoder.bias[n_old:] = decoder.bias.float().mean().to(decoder.bias.dtype)
            self.set_output_embeddings(new_decoder)
        self.config.vocab_size = new_num_tokens
        self.tie_weights()
        return new

    # ----------------------------------------------------------------- activation checkpointing
    supports_gradient_checkpointing = True

    def activation_checkpointing_enable(
        self,
        activation_checkpointing_kwargs: dict[str, Any] | None = None,
        every_n_layers: int = 1,
        offload: bool = False,
    ) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them (every
        ``every_n_layers``-th block from the first), as transformers' method of this name: memory
        for compute, the same gradients. ``activation_checkpointing_kwargs`` go to
        :func:`torch.utils.checkpoint.checkpoint` (``use_reentrant`` False unless given); ``offload``
        keeps the blocks' saved inputs in host memory."""
        from torch.utils.checkpoint import checkpoint

        from .layers import CheckpointedLayer

        if isinstance(every_n_layers, bool) or not isinstance(every_n_layers, int) or every_n_layers < 1:
            raise ValueError(f"every_n_layers must be an integer >= 1, got {every_n_layers!r}")
        kwargs = {"use_reentrant": False, **(activation_checkpointing_kwargs or {})}

        def run(function: Any, *args: Any, **kw: Any) -> Any:
            if offload:
                with torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()):
                    return checkpoint(function, *args, **kwargs, **kw)
            return checkpoint(function, *args, **kwargs, **kw)

        blocks = [m for m in self.modules() if isinstance(m, CheckpointedLayer)]
        for i, block in enumerate(blocks):
            block.gradient_checkpointing = i % every_n_layers == 0
            block._checkpoint_fn = run
        # With use_reentrant=True a checkpoint whose inputs need no gradient (frozen embeddings) would
        # give its block none either; transformers makes the embeddings' output need one, as here.
        if getattr(self, "main_input_name", "input_ids") == "input_ids":
            self.enable_input_require_grads()

    def activation_checkpointing_disable(self) -> None:
        """Keep every block's activations again (the default)."""
        from .layers import CheckpointedLayer

        for m in self.modules():
            if isinstance(m, CheckpointedLayer):
                m.gradient_checkpointing = False

    @property
    def is_activation_checkpointing(self) -> bool:
        from .layers import CheckpointedLayer

        return any(isinstance(m, CheckpointedLayer) and m.gradient_checkpointing for m in self.modules())

    # transformers' former names for the same three
    def gradient_checkpointing_enable(
        self, gradient_checkpointing_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Same as :meth:`activation_checkpointing_enable`."""
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs, **kwargs)

    def gradient_checkpointing_disable(self) -> None:
        """Same as :meth:`activation_checkpointing_disable`."""
        self.activation_checkpointing_disable()

    @property
    def is_gradient_checkpointing(self) -> bool:
        return self.is_activation_checkpointing

    def enable_input_require_grads(self) -> None:
        """Make the input embeddings' output require gradients (for frozen embeddings under
        reentrant checkpointing or adapters), as transformers' method of this name."""
        if getattr(self, "_require_grads_hook", None) is None:
            self._require_grads_hook = self.get_input_embeddings().register_forward_hook(
                lambda module, args, output: output.requires_grad_(True) if torch.is_grad_enabled() else None
            )

    def disable_input_require_grads(self) -> None:
        """Undo :meth:`enable_input_require_grads`."""
        hook = getattr(self, "_require_grads_hook", None)
        if hook is not None:
            hook.remove()
            self._require_grads_hook = None

    def get_memory_footprint(self, return_buffers: bool = True) -> int:
        """Bytes held by the parameters (and buffers, with ``return_buffers``)."""
        size = sum(p.nelement() * p.element_size() for p in self.parameters())
        if return_buffers:
            size += sum(b.nelement() * b.element_size() for b in self.buffers())
        return size

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        """Number of (unique) parameters, like transformers' ``num_parameters``; ``exclude_embeddings``
        leaves out every embedding table (words, positions, token types)."""
        skip = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)} if exclude_embeddings else set()
        return sum(
            p.numel() for p in self.parameters() if (p.requires_grad or not only_trainable) and id(p) not in skip
        )

    @classmethod
    def can_generate(cls) -> bool:
        """Whether this class continues text left to right (``generate``); causal LMs say True."""
        return False

    # ----------------------------------------------------------------- limits and input checks
    @property
    def max_positions(self) -> int:
        """The longest sequence (prompt plus cache) the position embeddings cover."""
        return int(getattr(self.config, self.positions_field))

    @property
    def input_embedding_size(self) -> int:
        """The width of ``inputs_embeds``: hidden_size, unless the family embeds narrower and projects."""
        return int(self.config.hidden_size)

    def token_type_limit(self) -> tuple[int, str] | None:
        """``(limit, config field)`` bounding token_type_ids, or None when the family ignores them."""
        n = getattr(self.config, "type_vocab_size", None)
        return None if n is None else (int(n), "type_vocab_size")

    def validate_inputs(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        past_length: int = 0,
    ) -> tuple[int, int]:
        """Cheap checks that turn deep IndexErrors into messages naming the value and the limit; (B, N).

        Shapes and dtypes are always checked; id ranges only when ``check_inputs`` is set and the graph
        is not being compiled (they read the ids on the host). ``past_length``: tokens already cached.
        """
        check_values = self.check_inputs and not torch.compiler.is_compiling()
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        for name, t in (
            ("input_ids", input_ids),
            ("attention_mask", attention_mask),
            ("token_type_ids", token_type_ids),
            ("position_ids", position_ids),
            ("inputs_embeds", inputs_embeds),
        ):
            if t is not None and not isinstance(t, torch.Tensor):
                raise TypeError(
                    f"{name} must be a torch.Tensor, got {type(t).__name__}; use the tokenizer's "
                    f"return_tensors='pt' or torch.tensor({name})"
                )
        shape = self._check_main_input(input_ids, inputs_embeds, check_values)
        B, N = shape
        limit, field = self.max_positions, self.positions_field
        if position_ids is None and past_length + N > limit:
            raise ValueError(
                f"sequence length {past_length + N} exceeds {field}={limit}; "
                f"truncate the input to at most {limit} tokens"
            )
        if token_type_ids is not None:
            if tuple(token_type_ids.shape) != shape:
                raise ValueError(
                    f"token_type_ids has shape {tuple(token_type_ids.shape)} but the input has shape {shape}"
                )
            types = self.token_type_limit()
            if types is not None:
                _check_ids("token_type_ids", token_type_ids, types[0], types[1], check_values)
        if position_ids is not None:
            if position_ids.dim() != 2 or position_ids.shape[1] != N or position_ids.shape[0] not in (1, B):
                raise ValueError(f"position_ids has shape {tuple(position_ids.shape)} but the input has shape {shape}")
            _check_ids("position_ids", position_ids, limit, field, check_values)
        if attention_mask is not None:
            self._check_attention_mask(attention_mask, shape, past_length)
        return B, N

    def _check_main_input(
        self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, check_values: bool
    ) -> tuple[int, int]:
        cfg = self.config
        if input_ids is not None:
            if input_ids.dim() != 2:
                raise ValueError(
                    f"input_ids must have shape (batch, seq_len), got {tuple(input_ids.shape)}"
                    + ("; add a batch dimension with input_ids.unsqueeze(0)" if input_ids.dim() == 1 else "")
                )
            _check_ids("input_ids", input_ids, cfg.vocab_size, "vocab_size", check_values)
            given, shape = input_ids, tuple(input_ids.shape)
        else:
            width = self.input_embedding_size
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != width:
                raise ValueError(
                    f"inputs_embeds must have shape (batch, seq_len, {width}), got {tuple(inputs_embeds.shape)}"
                )
            given, shape = inputs_embeds, tuple(inputs_embeds.shape[:2])
        if shape[0] == 0 or shape[1] == 0:
            name = "input_ids" if input_ids is not None else "inputs_embeds"
            raise ValueError(
                f"{name} has shape {tuple(given.shape)}: "
                f"an empty batch or empty sequences; every row needs at least one token"
            )
        return shape

    def _check_attention_mask(self, mask: torch.Tensor, shape: tuple[int, int], past_length: int) -> None:
        B, N = shape
        flat = (B, past_length + N)
        ok = mask.dim() == 2 and tuple(mask.shape) == flat
        if self.accepts_square_mask and past_length == 0:
            ok = ok or (mask.dim() == 3 and tuple(mask.shape) == (B, N, N))
        if not ok:
            expected = f"{flat} or {(B, N, N)}" if self.accepts_square_mask and not past_length else str(flat)
            what = " (cached tokens plus new ones)" if past_length else ""
            raise ValueError(
                f"attention_mask has shape {tuple(mask.shape)} but the input has shape {shape} "
                f"(expected {expected}{what})"
            )

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> PreTrainedModel:
        # .to() / .cuda() / .half() of a model prepared for inference: the weights derived from the
        # parameters at preparation (fused projections, oneDNN-packed copies) follow them.
        if "_bertkit_inference_dtype" not in self.__dict__:
            return super()._apply(fn, *args, **kwargs)
        _hooks.call("inference.check_move", self, fn(torch.empty(0)))
        out = super()._apply(fn, *args, **kwargs)
        _hooks.call("inference.follow_move", self)
        return out

    # ----------------------------------------------------------------- checkpoints
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any):
        """Load config.json + weights from a folder, a model id in the local HF cache, or a config.

        Keyword arguments that are config fields override the saved config (``num_labels=5``). Others:
        ``config``, ``cache_dir``, ``dtype``, ``device``, ``ignore_mismatched_sizes``,
        ``output_loading_info``. ``dtype`` (or transformers' former ``torch_dtype``) takes a torch
        dtype, "auto" (the checkpoint's own dtype, as in transformers) or one of bertkit's inference
        precisions "fp32", "bf16", "int8" (the model comes prepared for inference, its weights frozen;
        :func:`bertkit.inference.prepare_for_inference` with "auto" picks the CPU's fastest). Never
        touches the network.
        """
        return load_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike, tokenizer: Any = None, **kwargs: Any) -> Path:
        """Write config.json + model.safetensors (pytorch_model.bin with ``safe_serialization=False``)
        and the tokenizer's files, atomically."""
        from bertkit.checkpoint import save_pretrained

        return save_pretrained(self, save_directory, tokenizer=tokenizer, **kwargs)


def _reset_position_ids(module: nn.Module) -> None:
    """Refill a non-persistent ``position_ids`` buffer (0..P-1), which no checkpoint carries."""
    buf = module._buffers.get("position_ids") if isinstance(module, nn.Module) else None
    if buf is not None:
        buf.copy_(torch.arange(buf.shape[-1]).expand_as(buf))
