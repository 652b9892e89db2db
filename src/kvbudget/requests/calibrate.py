"""The calibration question: ``kvbudget calibrate``, what engines' start-up logs measured and kvbudget beside it."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import Request, option, required

LOG_ENGINES = ("vllm", "sglang", "trtllm", "llamacpp", "ollama")


@dataclass(frozen=True, kw_only=True)
class CalibrateRequest(Request):
    """Read each of ``logs`` (the reader detected unless ``engine``) and reconcile it with kvbudget's prediction;
    ``model`` when the log's own name cannot be resolved; ``tp``, ``context``, ``kv_dtype`` and ``block_size`` for
    settings the log does not state (the log wins where it does)."""

    command = "calibrate"
    logs: tuple[str, ...] = required("text", many=True, name="LOG")
    model: str | None = option(None, "model")
    engine: str | None = option(None, "text", choices=LOG_ENGINES)
    tp: int | None = option(None, "gpus")
    context: int | None = option(None, "tokens")
    kv_dtype: str | None = option(None, "kv_dtype")
    block_size: int | None = option(None, "count")
    startup: int | str | None = option(None, "startup")  # the start-up taken of logs holding several
