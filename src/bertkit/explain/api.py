"""``explain()``: the one call behind `bertkit explain` (load, collect, write, verify)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit import _args as A
from bertkit._folders import OutputClaim, check_output_file, claim_output_dir, refuse_inside_input, within_claim

from .collect import Explanation, check_verifiable, collect, load_model, verify
from .from_scratch import Check

__all__ = ["ExplainResult", "check_outputs", "explain"]


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
            verify = A.flag("verify_weights", "--verify")
            raise ValueError(f"this result holds only the {verify} checks; nothing was collected to show")
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


def check_outputs(
    model: str | os.PathLike | None,
    output: str | os.PathLike | None = None,
    json_path: str | os.PathLike | None = None,
    png_dir: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> OutputClaim | None:
    """Refuse outputs that would replace a file without ``overwrite``, land in the ``model`` folder,
    or coincide; claim ``png_dir`` (the folder rule of :mod:`bertkit._folders`). Returns the claim,
    or None without ``png_dir``."""
    named = [("--output", "output", output), ("--json", "json_path", json_path)]
    files = [(flag, name, p) for flag, name, p in named if p is not None]
    if len(files) == 2 and Path(files[0][2]).resolve() == Path(files[1][2]).resolve():
        raise ValueError(
            f"{A.flag('output')} and {A.flag('json_path', '--json')} are the same file ({output}); give two names"
        )
    if model is not None:
        for flag, name, p in files + ([("--png", "png_dir", png_dir)] if png_dir is not None else []):
            refuse_inside_input(p, model, flag=flag, name=name)
    for flag, name, p in files:
        check_output_file(p, overwrite=overwrite, flag=flag, name=name)
    if png_dir is None:
        return None
    return claim_output_dir(png_dir, "explain", overwrite=overwrite, owned=("*.png",), flag="--png", name="png_dir")


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
    overwrite: bool = False,
    lens: bool | None = None,
    lang: str = "en",
) -> ExplainResult:
    """Explain ``model`` (a folder or cached id) on ``text``: write the HTML report, raw JSON and PNG
    figures that are asked for, and with ``verify_weights`` rebuild the forward pass from the raw
    weights and compare (see ``from_scratch.py``). ``attributions`` names methods of
    ``attributions.METHODS`` to add, explaining ``target`` (a label; default the prediction);
    ``layers`` and ``heads`` ("0-5", "3", "0,2,4-6") choose what the attention views keep.
    ``lens``: the logit lens at each ``[MASK]`` (see ``lens.py``); None adds it where the model has a
    masked-LM head and the text a ``[MASK]``, True insists (an error without a head), False leaves it out.
    ``lang`` ("en" or "zh") is the language of the report's headings, explanations, labels and figures.

    The result displays inline in a notebook; ``model`` may also be a loaded model, with its
    ``tokenizer``. The outputs follow the command's rule: an existing ``output`` or ``json_path``
    is replaced, and ``png_dir`` may be a folder of an earlier explain's figures, only with
    ``overwrite``; a folder of other files is refused, and nothing is written into the model's folder.
    """
    # Before the model is loaded: a refusal costs no time.
    from .report import check_lang

    check_lang(lang)
    path = model if isinstance(model, (str, os.PathLike)) else None
    claim = check_outputs(path, output, json_path, png_dir, overwrite)
    settings = dict(pair=pair, layers=layers, top_k=top_k, all_positions=all_positions, heads=heads)
    return within_claim(
        claim,
        lambda: _explain(
            model,
            text,
            output,
            json_path,
            png_dir,
            verify_weights,
            attributions,
            target,
            tokenizer,
            settings,
            lens,
            lang,
        ),
    )


def _add_lens(net: Any, tokenizer: Any, head: Any, ex: Explanation, settings: dict[str, Any], required: bool) -> None:
    """The logit lens at the text's [MASK] tokens, into ``ex.lens`` (a text without one: a note, or
    with ``lens=True`` an error)."""
    from .lens import read_lens

    mask = getattr(tokenizer, "mask_token_id", None)
    if mask is None or mask not in ex.input_ids:
        if required:
            raise ValueError(f"the logit lens looks at the [MASK] tokens and {ex.text!r} has none; put one in")
        return
    read = read_lens(net, tokenizer, head, ex.model_path, ex.text, settings["pair"], None, settings["top_k"])
    ex.lens = read.to_json()


def _explain(
    model: str | os.PathLike | Any,
    text: str,
    output: str | os.PathLike | None,
    json_path: str | os.PathLike | None,
    png_dir: str | os.PathLike | None,
    verify_weights: bool,
    attributions: Sequence[str] | None,
    target: str | None,
    tokenizer: Any,
    settings: dict[str, Any],
    lens: bool | None = None,
    lang: str = "en",
) -> ExplainResult:
    """:func:`explain` once its outputs are checked and claimed; ``settings`` are what ``collect`` takes."""
    if isinstance(attributions, str):
        attributions = [a.strip() for a in attributions.split(",") if a.strip()]
    if target is not None and not attributions:
        raise ValueError(
            f"{A.flag('target')} names what {A.flag('attributions')} explain; give {A.flag('attributions')} too"
        )
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
    from .lens import lens_head, no_head_message

    head = lens_head(net) if lens is not False else None
    if lens and head is None:
        raise ValueError(no_head_message(net, str(model) if folder is not None else "the model given"))
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

            model_path = str(model) if folder is not None else type(net).__name__
            ex = collect(net, tokenizer, text, model_path=model_path, **settings)
            result.explanation = ex
            ex.lang = lang
            if attributions:
                from .attributions import add_to_explanation

                add_to_explanation(net, tokenizer, ex, attributions, target)
            if head is not None:
                _add_lens(net, tokenizer, head, ex, settings, required=bool(lens))
            if output is not None:
                result.html = write_html(ex, output)
            if json_path is not None:
                result.json = write_json(ex, json_path)
            if png_dir is not None:
                result.pngs = write_pngs(ex, png_dir)
        if verify_weights:
            result.checks = verify(folder, text, settings["pair"], model=net, tokenizer=tokenizer)
        return result
    finally:
        net.train(was_training)
