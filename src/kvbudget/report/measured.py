"""Sessions as measured, for the report: a ``kvbudget loadtest --json`` result, or an engine start-up log
read as ``kvbudget calibrate`` reads it.

* loadtest: ``sessions_sustained``, the most concurrent sessions a level held under the TTFT target,
  at the cap the run used (``settings.context``);
* start-up log: vLLM's "Maximum concurrency for N tokens per request: X" gives floor(X) sessions of N
  tokens; otherwise the KV tokens the engine allocated (vLLM "GPU KV cache size", SGLang
  ``max_total_num_tokens``, TensorRT-LLM tokens) divided by the logged context, rounded down. A log
  that states neither has no capacity to show, and says so.
"""

from __future__ import annotations

import math
from typing import Any

from kvbudget.errors import InputError
from kvbudget.report.data import Measured
from kvbudget.safeio import read_json

_TOKEN_FIGURES = ("kv_tokens", "max_total_num_tokens")
KNOWN_ENGINES = ("vllm", "sglang", "llamacpp", "ollama", "trtllm")  # a server kvbudget can plan for

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.hardware import Gpu
    from kvbudget.model.spec import ModelSpec


def from_loadtest(path: str, engine: str | None = None, spec: ModelSpec | None = None, model: str = "") -> Measured:
    """The sessions a load test sustained; refused when its figures are impossible or it ran another engine or
    model than ``engine`` / ``spec`` (report/loadtest_doc.py, measure/belong.py)."""
    from kvbudget.measure import belong
    from kvbudget.report.loadtest_doc import check

    doc: Any = read_json(path, "loadtest result")
    if not isinstance(doc, dict) or doc.get("schema_version") != 1 or "sessions_sustained" not in doc:
        raise InputError(
            f"--loadtest {path}: not a kvbudget loadtest --json document (schema_version 1 with "
            "sessions_sustained); write one with kvbudget loadtest URL ... --out RESULT.json"
        )
    sustained = doc["sessions_sustained"]
    if sustained is not None and (isinstance(sustained, bool) or not isinstance(sustained, int) or sustained < 0):
        raise InputError(f"--loadtest {path}: sessions_sustained {sustained!r} is not a whole number of sessions")
    check(doc, path)
    settings = doc.get("settings")
    settings = settings if isinstance(settings, dict) else {}
    server = doc.get("server")
    server = server if isinstance(server, dict) else {}
    served_by = server.get("engine")
    if engine is not None and isinstance(served_by, str) and served_by in KNOWN_ENGINES:
        belong.check_engine(served_by, engine, path, "--loadtest")
    if spec is not None:
        belong.check_served_model(server.get("model"), spec, model, path)
    context = settings.get("context")
    engine = server.get("engine")
    return Measured(
        source="loadtest",
        path=path,
        engine=engine if isinstance(engine, str) else None,
        sessions=sustained,
        context=context if isinstance(context, int) and not isinstance(context, bool) else None,
        basis=str(doc.get("sustained_basis") or "kvbudget loadtest: sessions sustained"),
    )


def from_log(
    path: str, model: str | None, engine: str | None = None, gpu: Gpu | None = None, startup: int | str | None = None
) -> Measured:
    """What ``kvbudget calibrate LOG --model MODEL`` reads: the capacity the engine logged, and how many of
    the logged figures kvbudget's rules reproduce; refused when the log is of another model (calibrate),
    engine than ``engine`` or GPU than ``gpu`` (measure/belong.py)."""
    from kvbudget.measure import belong
    from kvbudget.measure.calibrate import calibrate
    from kvbudget.measure.logs import read_log

    log = read_log(path, startup=startup)  # startup: the one taken of a file holding several
    if engine is not None:
        belong.check_engine(log.engine, engine, path, "--log")
    if log.engine in ("vllm", "trtllm"):  # CUDA's total as the engine read it
        belong.check_gpu(log.figure("total_gpu_memory_bytes"), gpu, path, "--log")
    cal = calibrate(log, model)
    context = log.setting("context")
    cap = int(context) if isinstance(context, int | float) and not isinstance(context, bool) else None
    # only figures kvbudget's model predicted count: one derived from the log's own figures checks nothing
    agreement = (sum(r.agrees for r in cal.compared), len(cal.compared))
    concurrency = log.measured.get("max_concurrency")
    at = log.setting("concurrency_tokens")
    if concurrency is not None and isinstance(at, int | float) and not isinstance(at, bool):
        return Measured(
            source="log",
            path=path,
            engine=log.engine,
            sessions=math.floor(float(concurrency.value)),
            context=int(at),
            agreement=agreement,
            basis=f"{log.engine} logged maximum concurrency {concurrency.text} for {int(at):,} tokens per "
            f"request (line {concurrency.line}), rounded down",
        )
    for name in _TOKEN_FIGURES:
        tokens = log.measured.get(name)
        if tokens is not None and cap:
            return Measured(
                source="log",
                path=path,
                engine=log.engine,
                sessions=int(tokens.value) // cap,
                context=cap,
                agreement=agreement,
                basis=f"{log.engine} logged {int(tokens.value):,} KV tokens (line {tokens.line}) // the logged "
                f"context {cap:,}",
            )
    return Measured(
        source="log",
        path=path,
        engine=log.engine,
        sessions=None,
        context=cap,
        agreement=agreement,
        basis=f"the {log.engine} log states no KV capacity (no concurrency, or no KV tokens and context)",
    )
