"""kvbudget: exact KV-cache memory of LLMs per serving engine, with the arithmetic shown.

The Python API (kvbudget.api, docs/api.md): ``kvbudget.cost``, ``kvbudget.plan``, ``kvbudget.compare`` and
``kvbudget.simulate``, imported on first use so that ``import kvbudget`` (and the CLI's start-up) stays light.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__", "compare", "cost", "plan", "simulate"]

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from typing import Any

    from kvbudget.api import compare, cost, plan, simulate


def __getattr__(name: str) -> Any:
    if name in ("compare", "cost", "plan", "simulate"):
        from kvbudget import api

        return getattr(api, name)
    raise AttributeError(f"module 'kvbudget' has no attribute {name!r}")
