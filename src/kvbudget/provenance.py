"""The provenance labels every figure carries, defined once (docs/architecture.md, "Provenance labels").

A figure of ours is ``exact`` (an engine's own arithmetic or a file's own bytes), ``measured`` (read from a
real run: nvidia-smi, an engine log, a load test), ``computed`` (a rule or model applied to its inputs) or
``heuristic`` (a rule of thumb, fitted range or stand-in that a measurement would replace). ``given`` marks an
input the user set (an option's value), not a figure of ours. Detail words ("nominal datasheet size", "derived
from the log") go in the figure's basis, never in its label.
"""

from __future__ import annotations

from typing import Literal, get_args

Kind = Literal["exact", "measured", "computed", "heuristic"]
Label = Literal["exact", "measured", "computed", "heuristic", "given"]
KINDS: tuple[str, ...] = get_args(Kind)
LABELS: tuple[str, ...] = get_args(Label)
# strongest first; a user's input counts as exact for what is derived from it (the user vouches for it)
_RANK = {"given": 0, "exact": 0, "measured": 1, "computed": 2, "heuristic": 3}


def derived(*inputs: Label) -> Kind:
    """The label of a figure found by exact arithmetic (sums, products) from figures so labelled: the weakest of
    its inputs, a ``given`` input counting as ``exact`` (the usable share, the KV pool, a log's remainder)."""
    weakest: Kind = "exact"
    for label in inputs:
        if label != "given" and _RANK[label] > _RANK[weakest]:
            weakest = label
    return weakest
