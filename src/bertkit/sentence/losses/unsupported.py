"""sentence-transformers' losses bertkit does not compute: each keeps its name, and constructing one
raises NotImplementedError saying why."""

from __future__ import annotations

from typing import Any


def _not_computed(loss: str, why: str) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"bertkit.losses.{loss} is not supported: {why}")

    doc = f"sentence-transformers' {loss}, which bertkit does not compute: {why}. Constructing it raises."
    return type(loss, (), {"__init__": __init__, "__doc__": doc, "__module__": __name__})


_DECODER = "it trains a decoder to rebuild the text from the vector, and bertkit has no text decoder"
DenoisingAutoEncoderLoss = _not_computed("DenoisingAutoEncoderLoss", _DECODER)
ContrastiveTensionLoss = _not_computed(
    "ContrastiveTensionLoss", "it trains a second copy of the encoder against the first, which bertkit does not keep"
)
ContrastiveTensionLossInBatchNegatives = _not_computed(
    "ContrastiveTensionLossInBatchNegatives",
    "it trains a second copy of the encoder against the first, which bertkit does not keep",
)
ContrastiveTensionDataLoader = _not_computed(
    "ContrastiveTensionDataLoader", "it feeds ContrastiveTensionLoss, which bertkit does not compute"
)
AdaptiveLayerLoss = _not_computed(
    "AdaptiveLayerLoss", "it trains on the vectors of every layer, and bertkit's losses see the last layer only"
)
Matryoshka2dLoss = _not_computed(
    "Matryoshka2dLoss", "it trains on the vectors of every layer, and bertkit's losses see the last layer only"
)
