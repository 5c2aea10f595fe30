"""See inside a BERT: the data behind `bertkit explain`, its HTML/JSON/PNG writers and the from-scratch check."""

from .api import ExplainResult, explain
from .attributions import Attributions, attribute
from .collect import Explanation, collect, load_model, parse_layers, verify
from .from_scratch import Check

__all__ = [
    "Attributions",
    "Check",
    "ExplainResult",
    "Explanation",
    "attribute",
    "collect",
    "explain",
    "load_model",
    "parse_layers",
    "verify",
]
