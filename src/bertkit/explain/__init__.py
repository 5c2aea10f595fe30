"""See inside a BERT: the data behind `bertkit explain`, its HTML/JSON/PNG writers and the from-scratch check.

The layer probes are ``bertkit.explain.probe.probe`` (the module keeps its own name here, so that
``import bertkit.explain.probe`` gives the module)."""

from .api import ExplainResult, explain
from .attributions import Attributions, attribute
from .collect import Explanation, collect, load_model, parse_layers, verify
from .from_scratch import Check
from .lens import LogitLens, logit_lens
from .probe import ProbeResult

__all__ = [
    "Attributions",
    "Check",
    "ExplainResult",
    "Explanation",
    "LogitLens",
    "ProbeResult",
    "attribute",
    "collect",
    "explain",
    "load_model",
    "logit_lens",
    "parse_layers",
    "verify",
]
