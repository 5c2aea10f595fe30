"""See inside a BERT: the data behind `bertkit explain`, its HTML/JSON/PNG writers and the from-scratch check."""

from .api import ExplainResult, explain
from .collect import Explanation, collect, load_model, parse_layers, verify
from .from_scratch import Check

__all__ = ["Check", "ExplainResult", "Explanation", "collect", "explain", "load_model", "parse_layers", "verify"]
