"""The ``torch.nn.Module`` calls (and the ones refused by name) that a SentenceTransformer and a
CrossEncoder answer alike, through their module lists."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor

# sentence-transformers calls bertkit cannot make, and why: each is refused by name in one line
_REFUSED_CALLS = {
    "push_to_hub": "bertkit never uses the network; save(path) writes the folder, upload it yourself",
    "save_to_hub": "bertkit never uses the network; save(path) writes the folder, upload it yourself",
    "start_multi_process_pool": "bertkit encodes in one process (its batched path already uses every core)",
    "stop_multi_process_pool": "bertkit encodes in one process (its batched path already uses every core)",
    "encode_multi_process": "bertkit encodes in one process: call encode()",
    "old_fit": "it is sentence-transformers' pre-v3 fit under another name: call fit()",
    "double": "bertkit computes in fp32 or bf16 (float() or bfloat16())",
    "compile": "bertkit's inference path is already fused and prepacked; torch.compile is not applied",
    "gradient_checkpointing_enable": "bertkit's encoders do not checkpoint activations",
    "add_adapter": "PEFT adapters are not supported",
    "load_adapter": "PEFT adapters are not supported",
    "set_adapter": "PEFT adapters are not supported",
    "enable_adapters": "PEFT adapters are not supported",
    "disable_adapters": "PEFT adapters are not supported",
    "active_adapters": "PEFT adapters are not supported",
    "get_adapter_state_dict": "PEFT adapters are not supported",
    "delete_adapter": "PEFT adapters are not supported",
}


def _to_dtype(model: Any, dtype: torch.dtype) -> Any:
    """``model.to(torch.float32 / torch.bfloat16 / torch.float16)``: its precision call."""
    calls = {torch.float32: model.float, torch.bfloat16: model.bfloat16, torch.float16: model.half}
    if dtype not in calls:
        raise ValueError(f"{type(model).__name__}.to({dtype}) is not supported: bertkit runs float32 or bfloat16")
    return calls[dtype]()


def _refused(name: str) -> Any:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.{name}() is not supported by bertkit: {_REFUSED_CALLS[name]}")

    call.__name__ = name
    call.__doc__ = f"Refused by name: {_REFUSED_CALLS[name]}."
    return call


class _ModuleCalls:
    """The ``nn.Module`` and sentence-transformers calls a SentenceTransformer or CrossEncoder answers
    through its module list (``self[0]`` the Transformer whose ``model`` is the trainable model).

    bertkit keeps two copies of the weights: the prepared (fused, frozen) inference model that
    encode/predict run, and the fp32 training model that ``forward``, the losses and fit train. The
    module calls (parameters, state_dict, train/eval...) act on the training model, as an optimizer
    over ``parameters()`` must; a change to its weights reaches the inference model at the next
    encode/predict. In bf16 there is no training model, so the module list holds the inference model
    (read-only: load_state_dict is refused there)."""

    backend = "torch"
    trust_remote_code = False  # bertkit runs no code from a model folder
    _CALLER = "model"

    @property
    def model_type(self) -> str:
        """The class name sentence-transformers records for the model."""
        return type(self).__name__

    def _build_modules(self) -> list[torch.nn.Module]:
        raise NotImplementedError

    def _module_count(self) -> int:
        raise NotImplementedError

    def _precision(self, dtype: str, call: str) -> Any:
        raise NotImplementedError

    def _module_seq(self) -> torch.nn.Sequential:
        """The module list as an ``nn.Sequential`` named "0", "1"... (built on first use)."""
        if self.dtype == "int8":
            raise ValueError(
                f"{type(self).__name__}: the module calls (parameters, state_dict, train...) are not supported on "
                "an int8 model, whose weights are quantized: load it with dtype='fp32'"
            )
        seq = self.__dict__.get("_seq")
        if seq is None:
            seq = torch.nn.Sequential(*self._build_modules())
            mode = self.__dict__.get("_train_mode")
            if mode is not None:
                seq.train(mode)
            self.__dict__["_seq"] = seq
            self._keep_inference_eval()
        return seq

    def _drop_modules(self) -> None:
        self.__dict__.pop("_seq", None)

    def _keep_inference_eval(self) -> None:
        # encode/predict always run the inference model in eval mode, whatever train() set
        self.model.eval()

    def __getitem__(self, idx: int | slice) -> Any:
        seq = self._module_seq()
        return list(seq)[idx] if isinstance(idx, slice) else seq[idx]

    def __len__(self) -> int:
        return self._module_count()

    def __bool__(self) -> bool:  # len() would otherwise decide truth
        return True

    def __iter__(self) -> Any:
        return iter(self._module_seq())

    def _first_module(self) -> torch.nn.Module:
        """The Transformer module (``self[0]``)."""
        return self[0]

    def _last_module(self) -> torch.nn.Module:
        """The last module of the list."""
        return self[len(self) - 1]

    @property
    def transformers_model(self) -> torch.nn.Module:
        """The trainable model inside the Transformer module (``self[0].auto_model``)."""
        return self[0].auto_model

    @property
    def training(self) -> bool:
        """Whether :meth:`train` (True, as sentence-transformers starts) or :meth:`eval` was called last."""
        seq = self.__dict__.get("_seq")
        if seq is not None:
            return bool(seq.training)
        mode = self.__dict__.get("_train_mode")
        return True if mode is None else mode

    def train(self, mode: bool = True) -> Any:
        """Dropout on (``mode=True``) or off in the model ``forward`` and the losses run; returns self.
        encode/predict are unaffected: they always run in eval mode."""
        if not isinstance(mode, bool):
            raise ValueError(f"{type(self).__name__}.train(mode): mode must be a bool, got {mode!r}")
        self.__dict__["_train_mode"] = mode
        self._module_seq().train(mode)
        self._keep_inference_eval()
        return self

    def eval(self) -> Any:
        """Same as ``train(False)``; returns self."""
        return self.train(False)

    def parameters(self, recurse: bool = True) -> Any:
        """The trainable weights, in sentence-transformers' order (what an optimizer takes)."""
        return self._module_seq().parameters(recurse)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Any:
        """(name, weight) pairs named as sentence-transformers names them (``0.model.encoder...``)."""
        return self._module_seq().named_parameters(prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Any:
        return self._module_seq().buffers(recurse)

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Any:
        return self._module_seq().named_buffers(prefix, recurse, remove_duplicate)

    def modules(self) -> Any:
        """The module list and everything inside it (the first is the list itself)."""
        return self._module_seq().modules()

    def named_modules(self, memo: Any = None, prefix: str = "", remove_duplicate: bool = True) -> Any:
        return self._module_seq().named_modules(memo, prefix, remove_duplicate)

    def children(self) -> Any:
        return self._module_seq().children()

    def named_children(self) -> Any:
        return self._module_seq().named_children()

    def apply(self, fn: Any) -> Any:
        """``fn`` on every module (of the trainable model); returns self."""
        self._module_seq().apply(fn)
        self._keep_inference_eval()
        return self

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Tensor]:
        """The weights under sentence-transformers' names (``0.model.embeddings...``, ``2.linear.weight``)."""
        return self._module_seq().state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """Load weights named as :meth:`state_dict` (a sentence-transformers model's state_dict loads
        here); encode/predict use them from the next call."""
        if self.dtype != "fp32":
            raise ValueError(
                f"{type(self).__name__}.load_state_dict() on a {self.dtype} model is not supported: call float() first"
            )
        if assign:
            raise ValueError(f"{type(self).__name__}.load_state_dict(assign=True) is not supported: weights are copied")
        return self._module_seq().load_state_dict(state_dict, strict=strict)

    def requires_grad_(self, requires_grad: bool = True) -> Any:
        """Freeze (False) or unfreeze the trainable weights; returns self."""
        self._module_seq().requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the trainable weights' gradients."""
        self._module_seq().zero_grad(set_to_none)

    def get_submodule(self, target: str) -> torch.nn.Module:
        return self._module_seq().get_submodule(target)

    def get_parameter(self, target: str) -> torch.nn.Parameter:
        return self._module_seq().get_parameter(target)

    def get_backend(self) -> str:
        """Always "torch": bertkit runs its own PyTorch path."""
        return self.backend

    @property
    def modalities(self) -> list[str]:
        return ["text"]

    def supports(self, modality: Any) -> bool:
        """True for "text" only."""
        return modality == "text"

    def get_model_kwargs(self) -> list[str]:
        """The extra keyword arguments the model's forward takes: none (as for every BERT folder)."""
        return []

    def is_singular_input(self, inputs: Any) -> bool:
        """True for one example (a string, or one pair for a CrossEncoder), False for a batch."""
        if isinstance(inputs, str):
            return True
        if isinstance(inputs, (list, tuple)) and self._CALLER == "pairs":
            return bool(inputs) and not isinstance(inputs[0], (list, tuple))
        return not isinstance(inputs, (list, tuple, np.ndarray))

    def evaluate(self, evaluator: Any, output_path: str | None = None) -> Any:
        """``evaluator(self, output_path)``, after creating ``output_path``, as sentence-transformers does."""
        if not callable(evaluator):
            raise TypeError(f"{type(self).__name__}.evaluate(evaluator): not callable: {type(evaluator).__name__}")
        if output_path is not None:
            import os

            os.makedirs(output_path, exist_ok=True)
        return evaluator(self, output_path)

    def half(self) -> Any:
        """bertkit has no fp16 path: this runs in bf16 (a warning says so); returns self."""
        warnings.warn(
            f"{type(self).__name__}.half(): bertkit has no float16 path, so the model runs in bfloat16 instead",
            stacklevel=2,
        )
        return self._precision("bf16", "half()")

    def bfloat16(self) -> Any:
        """encode/predict run in bf16 from now on; returns self."""
        return self._precision("bf16", "bfloat16()")

    def float(self) -> Any:
        """encode/predict run in fp32 from now on (weights rounded by an earlier bfloat16() stay
        rounded, as in sentence-transformers); returns self."""
        return self._precision("fp32", "float()")

    def cpu(self) -> Any:
        """Same as ``to("cpu")``."""
        return self.to("cpu")

    def cuda(self, device: int | str | torch.device | None = None) -> Any:
        """Same as ``to("cuda")`` (``to("cuda:N")`` with ``device=N``)."""
        if device is None:
            return self.to("cuda")
        return self.to(device if not isinstance(device, int) else f"cuda:{device}")


for _name in _REFUSED_CALLS:
    setattr(_ModuleCalls, _name, _refused(_name))
del _name
