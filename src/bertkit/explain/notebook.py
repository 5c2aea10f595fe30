"""The report inside a notebook: Jupyter, JupyterLab, VS Code and Colab display ``_repr_html_``.

The output is an ``<iframe sandbox="allow-scripts" srcdoc="...">`` holding the whole self-contained
page. The page inlines its data, CSS and script and forbids every request (its
Content-Security-Policy), so it works offline and needs no CDN; the iframe gives each report its own
document, so several reports in one notebook share no element ids, styles or script state, and the
sandbox (an opaque origin) keeps the page's script away from the notebook's own page.
"""

from __future__ import annotations

import html
import uuid
from typing import Any

__all__ = ["VIEWS", "ReportView", "inline_html"]

VIEWS = ("head", "model", "neuron", "attributions", "lens")


def inline_html(ex: Any, view: str | None = None, height: int = 720) -> str:
    """The ``<iframe srcdoc>`` that shows ``ex``'s report (or only one of its ``VIEWS``)."""
    from .report import render_html

    if view is not None:
        if view not in VIEWS:
            raise ValueError(f"view {view!r}: choose from {', '.join(VIEWS)}")
        if view == "attributions" and ex.attributions is None:
            raise ValueError("this report has no attributions; call explain(..., attributions=['attention-rollout'])")
        if view == "lens" and ex.lens is None:
            raise ValueError("this report has no logit lens: it needs a masked-LM model and a [MASK] in the text")
        if view == "neuron" and ex.neuron is None:
            raise ValueError("this report has no neuron view (the model's layers have no query/key projections)")
    page = render_html(ex, view=view)
    frame_id = f"bertkit-explain-{uuid.uuid4().hex[:12]}"
    return (
        f'<iframe id="{frame_id}" class="bertkit-explain" title="bertkit explain" sandbox="allow-scripts" '
        f'style="width: 100%; height: {int(height)}px; border: 1px solid #dde2e8; resize: vertical" '
        f'srcdoc="{html.escape(page, quote=True)}"></iframe>'
    )


class ReportView:
    """One view of a report; a notebook displays it (``_repr_html_``) when it ends a cell."""

    def __init__(self, ex: Any, view: str | None, height: int = 720):
        self._html = inline_html(ex, view, height)

    def _repr_html_(self) -> str:
        return self._html
