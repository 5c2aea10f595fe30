"""Export a model folder to ONNX with dynamic batch and sequence axes (needs the onnx extra)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from torch import nn

from bertkit import _args as A
from bertkit._io import atomic_path

__all__ = ["ONNX_INPUTS", "export_onnx"]

logger = logging.getLogger(__name__)

ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# architecture -> (bertkit class, output names)
_HEADS = {
    "BertForSequenceClassification": ("BertForSequenceClassification", ("logits",)),
    "BertForTokenClassification": ("BertForTokenClassification", ("logits",)),
    "BertForQuestionAnswering": ("BertForQuestionAnswering", ("start_logits", "end_logits")),
    "BertForMaskedLM": ("BertForMaskedLM", ("logits",)),
    "BertForPreTraining": ("BertForMaskedLM", ("logits",)),
}


class _OnnxWrapper(nn.Module):
    """Positional tensors in, named outputs out; the traced graph takes the padded (masked) path always."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.outputs = model, outputs
        base = model.base_model
        # Trace the general path: no data-dependent shortcuts. Under export the all-ones mask shortcut
        # is skipped already (AttentionMask.build reads nothing on the host while compiling).
        base.pack_padding = False
        base._validate_inputs = lambda *a, **k: None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return tuple(getattr(out, name) for name in self.outputs)


def export_onnx(model_dir: str | Path, output: str | Path, opset: int | None = None, overwrite: bool = False) -> Path:
    """Write ``model_dir``'s model (the head named in its config.json, else the bare encoder with
    ``last_hidden_state`` and ``pooler_output``) as ONNX at ``output``, atomically. An existing
    ``output`` is replaced only with ``overwrite``, and never one inside ``model_dir`` (a folder, or
    a model id in the Hugging Face cache: then never inside its snapshot).

    Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, shape ``[batch, sequence]``).
    """
    from bertkit._extras import require
    from bertkit._folders import check_output_file, refuse_inside_input
    from bertkit.hub import resolve_model_arg

    # A model id resolves to its cache snapshot first, so the output is checked against (and never
    # written inside) the folder the weights really come from.
    model_dir = resolve_model_arg(model_dir)
    refuse_inside_input(output, model_dir)
    check_output_file(output, overwrite=overwrite)

    for module in ("onnx", "onnxscript"):  # torch's ONNX exporter needs both
        require(module, "onnx", "ONNX export")
    import onnx

    newest = onnx.defs.onnx_opset_version()
    if opset is not None and opset > newest:
        # the exporter does not refuse it: it writes a graph that no runtime loads
        raise ValueError(f"{A.given('opset', str(opset))} is newer than the installed onnx knows (up to {newest})")
    from bertkit import modeling

    cfg_file = model_dir / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{model_dir}: not a model folder (no config.json)")
    archs = json.loads(cfg_file.read_text(encoding="utf-8")).get("architectures") or []
    bare = ("BertModel", ("last_hidden_state", "pooler_output"))
    cls_name, outputs = next((_HEADS[a] for a in archs if a in _HEADS), bare)
    model = getattr(modeling, cls_name).from_pretrained(str(model_dir)).eval()
    if cls_name == "BertModel" and model.pooler is None:
        outputs = ("last_hidden_state",)
    wrapper = _OnnxWrapper(model, outputs).eval()
    ids = torch.tensor([[101, 2023, 2003, 102, 0], [101, 2023, 2003, 1037, 102]]) % model.config.vocab_size
    example = (ids, (ids != 0).long(), torch.zeros_like(ids))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence", max=model.config.max_position_embeddings)
    shapes = {k: {0: batch, 1: seq} for k in ONNX_INPUTS}
    output = Path(output)
    with atomic_path(output) as tmp, torch.no_grad():
        program = torch.onnx.export(
            wrapper,
            example,
            dynamo=True,
            input_names=list(ONNX_INPUTS),
            output_names=list(outputs),
            dynamic_shapes=shapes,
            opset_version=opset,
        )
        program.save(str(tmp))
    return output
