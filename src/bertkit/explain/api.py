"""``explain()``: the one call behind `bertkit explain` (load, collect, write, verify)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .collect import Explanation, check_verifiable, collect, load_model, verify
from .from_scratch import Check

__all__ = ["ExplainResult", "explain"]


@dataclass
class ExplainResult:
    """What ``explain`` wrote, and the from-scratch checks when asked for."""

    explanation: Explanation | None
    html: Path | None = None
    json: Path | None = None
    pngs: list[Path] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def _need(self) -> Explanation:
        if self.explanation is None:
            raise ValueError("this result holds only the --verify checks; nothing was collected to show")
        return self.explanation

    def _repr_html_(self) -> str:
        """The whole report, inline in a notebook (an offline iframe of its own)."""
        from .notebook import inline_html

        return inline_html(self._need())

    def show(self, view: str | None = None, height: int = 720) -> Any:
        """One view ("head", "model", "neuron" or "attributions"), displayed when it ends a notebook cell."""
        from .notebook import ReportView

        return ReportView(self._need(), view, height)

    def save_html(self, path: str | os.PathLike) -> Path:
        """Write the self-contained report page."""
        from .report import write_html

        return write_html(self._need(), path)

    def to_json(self) -> dict[str, Any]:
        """The raw numbers at full precision, as ``--json`` writes them."""
        return self._need().to_json()


def explain(
    model: str | os.PathLike | Any,
    text: str,
    pair: str | None = None,
    output: str | os.PathLike | None = None,
    json_path: str | os.PathLike | None = None,
    png_dir: str | os.PathLike | None = None,
    layers: str | None = None,
    top_k: int = 5,
    all_positions: bool = False,
    verify_weights: bool = False,
    attributions: Sequence[str] | None = None,
    target: str | None = None,
    tokenizer: Any = None,
    heads: str | None = None,
) -> ExplainResult:
    """Explain ``model`` (a folder or cached id) on ``text``: write the HTML report, raw JSON and PNG
    figures that are asked for, and with ``verify_weights`` rebuild the forward pass from the raw
    weights and compare (see ``from_scratch.py``). ``attributions`` names methods of
    ``attributions.METHODS`` to add, explaining ``target`` (a label; default the prediction);
    ``layers`` and ``heads`` ("0-5", "3", "0,2,4-6") choose what the attention views keep.

    The result displays inline in a notebook; ``model`` may also be a loaded model, with its
    ``tokenizer``.
    """
    for p in (output, json_path):
        if p is not None and Path(p).is_dir():
            raise ValueError(f"{p} is a folder; give a file name")
    if isinstance(attributions, str):
        attributions = [a.strip() for a in attributions.split(",") if a.strip()]
    if target is not None and not attributions:
        raise ValueError("--target names what --attributions explain; give --attributions too")
    if isinstance(model, (str, os.PathLike)):
        net, tokenizer, folder = load_model(model)
    elif tokenizer is None:
        raise ValueError(
            "explain(model, ...) with a loaded model needs its tokenizer: explain(model, text, tokenizer=tok)"
        )
    else:
        if verify_weights:
            raise ValueError("verify_weights compares with the weight file on disk; pass the model's folder")
        net, folder = model, None
    if verify_weights:
        check_verifiable(net, folder)  # before any report is written
    was_training = net.training  # a model peeked at mid-training goes back to training mode
    net.eval()
    try:
        if attributions:
            from .attributions import check_methods, check_target

            check_methods(attributions)
            check_target(net, tokenizer, target)
        result = ExplainResult(explanation=None)
        if output is not None or json_path is not None or png_dir is not None or not verify_weights:
            from .report import write_html, write_json, write_pngs

            ex = collect(
                net,
                tokenizer,
                text,
                pair,
                layers=layers,
                top_k=top_k,
                all_positions=all_positions,
                model_path=str(model) if folder is not None else type(net).__name__,
                heads=heads,
            )
            result.explanation = ex
            if attributions:
                from .attributions import add_to_explanation

                add_to_explanation(net, tokenizer, ex, attributions, target)
            if output is not None:
                result.html = write_html(ex, output)
            if json_path is not None:
                result.json = write_json(ex, json_path)
            if png_dir is not None:
                result.pngs = write_pngs(ex, png_dir)
        if verify_weights:
            result.checks = verify(folder, text, pair, model=net, tokenizer=tokenizer)
        return result
    finally:
        net.train(was_training)
