"""See inside a BERT: the data behind `bertkit explain`, its HTML/JSON/PNG writers and the from-scratch check."""

from .api import ExplainResult, explain
from .attributions import Attributions, attribute
from .collect import Explanation, collect, load_model, parse_layers, verify
from .from_scratch import Check
from .lens import LogitLens, logit_lens

__all__ = [
    "Attributions",
    "Check",
    "ExplainResult",
    "Explanation",
    "LogitLens",
    "attribute",
    "collect",
    "explain",
    "load_model",
    "logit_lens",
    "parse_layers",
    "verify",
]
