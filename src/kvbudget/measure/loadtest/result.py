"""The ``kvbudget loadtest --json`` contract (schema_version 1; every field in docs/loadtest.md).

Token counts are integers (the server's own ``usage`` counts); times are seconds; shares are
fractions in [0, 1]. A run stopped by an error or Ctrl-C still produces the whole document, with
what was measured so far, ``stopped_by`` saying why and ``error`` the one-line message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvbudget.measure.loadtest.metrics import KV_USAGE_METRIC
from kvbudget.measure.loadtest.record import Level, Recorder, percentile
from kvbudget.measure.loadtest.speeds import speeds_json

if TYPE_CHECKING:
    from kvbudget.measure.loadtest.predict import Prediction
    from kvbudget.measure.loadtest.prompts import TextUnits
    from kvbudget.measure.loadtest.server import ServerInfo

SCHEMA_VERSION = 1


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def ttft(values: list[float]) -> dict[str, float | None]:
    return {"p50": _r(percentile(values, 50)), "p99": _r(percentile(values, 99)), "max": _r(max(values, default=None))}


def decode_p50(level: Level) -> float | None:
    """Decode tokens/s per request, p50: 1 / the client's inter-token latency p50, else the server's timings."""
    itl = percentile(level.itls, 50)
    return 1 / itl if itl else percentile(level.decode_rates, 50)


def level_json(level: Level) -> dict[str, object]:
    end = level.ended_s if level.ended_s is not None else level.started_s
    return {
        "sessions": level.sessions,
        "duration_s": _r(end - level.started_s, 3),
        "requests": level.requests,
        "errors": level.errors,
        "refused": level.refused,
        "refusals": dict(level.refusals),
        "deferred_scrapes": level.deferred_scrapes,
        "deferred_peak": int(level.deferred_peak),
        "preempted": level.preempted,
        "ttft_s": ttft(level.ttfts),
        "itl_s": {"p50": _r(percentile(level.itls, 50), 6), "p99": _r(percentile(level.itls, 99), 6)},
        "decode_tokens_per_s": {"p50": _r(decode_p50(level), 3)},
        "prefill_tokens_per_s": {"p50": _r(percentile(level.prefill_rates, 50), 3)},
        "kv_usage_peak": _r(level.kv_usage_peak),
        "sessions_started": level.sessions_started,
        "sessions_ended": level.sessions_completed,
        "scrapes": level.scrapes,
        "passed": level.passed,
        "reasons": level.reasons,
    }


@dataclass
class Outcome:
    """Everything one run produced (filled in as far as the run got)."""

    url: str
    settings: dict[str, object]
    server: ServerInfo | None = None
    units: TextUnits | None = None
    recorder: Recorder | None = None
    stopped_by: str = "error"
    error: str | None = None
    duration_s: float = 0.0
    sustained: int | None = None
    sustained_basis: str = "the run stopped before any load was sent"
    prediction: Prediction | None = None
    reconciliation: list[dict[str, object]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def to_json(o: Outcome) -> dict[str, object]:
    rec = o.recorder
    server: dict[str, object] = o.server.to_json() if o.server else {"url": o.url, "engine": None, "version": None}
    hit_rate, hit_source = rec.prefix_hit_rate() if rec else (None, "not measured")
    engine = o.server.engine if o.server else ""
    tokens = rec.tokens if rec else None
    return {
        "schema_version": SCHEMA_VERSION,
        "server": server,
        "settings": o.settings,
        "text": o.units.to_json() if o.units else None,
        "sessions_started": rec.sessions["started"] if rec else 0,
        "sessions_completed": rec.sessions["completed"] if rec else 0,
        "sessions_capped": rec.sessions["capped"] if rec else 0,
        "sessions_failed": rec.sessions["failed"] if rec else 0,
        "compactions": rec.sessions["compactions"] if rec else 0,
        "requests": rec.requests if rec else 0,
        "requests_aborted": rec.aborted if rec else 0,
        "errors": rec.errors if rec else 0,
        "refused": sum(rec.refusals.values()) if rec else 0,
        "refusals": dict(rec.refusals) if rec else {},
        "preempted": rec.preempted if rec else None,
        "deferred_peak": int(rec.deferred_peak) if rec else 0,
        "ttft_s": ttft(rec.ttfts if rec else []),
        "tokens": {
            "prompt": tokens["prompt"] if tokens else 0,
            "planned_prompt": tokens["planned_prompt"] if tokens else 0,
            "output": tokens["output"] if tokens else 0,
            "cached": tokens["cached"] if tokens else 0,
        },
        "sessions_sustained": o.sustained,
        "sustained_basis": o.sustained_basis,
        "kv_usage_peak": _r(rec.kv_usage_peak) if rec else None,
        "kv_usage_source": KV_USAGE_METRIC.get(engine) if rec and rec.kv_usage_peak is not None else None,
        "prefix_hit_rate": _r(hit_rate),
        "prefix_hit_source": hit_source,
        "levels": [level_json(lv) for lv in rec.levels] if rec else [],
        "speeds": speeds_json(rec.decode_gaps, rec.prefills) if rec else None,
        "scrapes": rec.scrapes if rec else 0,
        "scrape_errors": rec.scrape_errors if rec else 0,
        "predicted": o.prediction.to_json() if o.prediction else {"plan_sessions": None, "simulated_sessions": None},
        "reconciliation": o.reconciliation,
        "stopped_by": o.stopped_by,
        "duration_s": _r(o.duration_s, 3),
        "error": o.error,
        "warnings": o.warnings,
    }
