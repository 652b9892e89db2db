"""Speeds measured by a load test (``--speed-from RESULT.json``): what a real server did, for the simulator.

A ``kvbudget loadtest --json`` result holds, per concurrency level it held (docs/loadtest.md), the median
decode tokens/s per request (1 / the inter-token latency p50 the client's stream saw; the server's own
``timings`` without a stream) and the median prefill tokens/s (new prompt tokens over TTFT less one inter-token
gap: the prefill the simulator charges before a step's first iteration). From them:

* prefill: the median over the levels of each level's median prefill tokens/s, one prompt at a time;
* a decode iteration of ``running`` sessions takes ``1 / decode tokens/s`` of the level whose concurrency is
  ``running``, linear between the levels measured, the first level's below it, and past the last the last two
  levels' slope (never falling). A level's concurrency is its sessions: with short tool pauses each session has
  a request running most of the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from kvbudget.errors import InputError


@dataclass(frozen=True)
class MeasuredSpeeds:
    """Prefill tokens/s and (concurrency, decode tokens/s per session) points from one load test."""

    source: str
    prefill_tokens_per_s: float
    points: tuple[tuple[int, float], ...]  # ascending concurrency

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(n for n, _ in self.points)

    @property
    def prefill_basis(self) -> str:
        return f"load test {self.source}: median prefill {self.prefill_tokens_per_s:,.0f} tokens/s over its levels"

    @property
    def decode_basis(self) -> str:
        rates = ", ".join(f"{rate:,.1f} at {n}" for n, rate in self.points)
        return f"load test {self.source}: decode tokens/s per session at each concurrency ({rates}), interpolated"

    def iteration_s(self, running: int) -> float:
        """Seconds of one decode iteration with ``running`` sessions decoding (module doc)."""
        pts = [(n, 1 / rate) for n, rate in self.points]
        if running <= pts[0][0] or len(pts) == 1:
            return pts[0][1] if running <= pts[0][0] else max(p[1] for p in pts)
        for (n0, t0), (n1, t1) in pairwise(pts):
            if running <= n1:
                return t0 + (t1 - t0) * (running - n0) / (n1 - n0)
        (n0, t0), (n1, t1) = pts[-2], pts[-1]
        slope = max(0.0, (t1 - t0) / (n1 - n0))
        return t1 + slope * (running - n1)

    def step(self, running: int, kv_bytes: int) -> float:
        """The simulator's hook: the iteration of ``running`` sessions (cache bytes are in the measurement)."""
        return self.iteration_s(max(1, running))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _p50(level: dict[str, object], key: str) -> float | None:
    figure = level.get(key)
    value = figure.get("p50") if isinstance(figure, dict) else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def speeds_of(doc: object, source: str) -> MeasuredSpeeds:
    """The measured speeds of a load-test document (``kvbudget loadtest --json``)."""
    levels = doc.get("levels") if isinstance(doc, dict) else None
    if not isinstance(levels, list):
        raise InputError(f"--speed-from {source}: not a kvbudget loadtest --json result (no levels)")
    points: dict[int, float] = {}
    prefill: list[float] = []
    for level in levels:
        if not isinstance(level, dict) or not isinstance(level.get("sessions"), int):
            continue
        decode = _p50(level, "decode_tokens_per_s")
        if decode is not None:
            points[int(level["sessions"])] = decode
        rate = _p50(level, "prefill_tokens_per_s")
        if rate is not None:
            prefill.append(rate)
    if not points or not prefill:
        raise InputError(
            f"--speed-from {source}: the load test measured no decode or prefill speed per level "
            "(a result of kvbudget loadtest from this version, with completed requests, is needed)"
        )
    return MeasuredSpeeds(source, _median(prefill), tuple(sorted(points.items())))


def measured_speeds(path: str) -> MeasuredSpeeds:
    """The measured speeds in the load-test result at ``path``."""
    from kvbudget.safeio import loads_json, read_text

    text = read_text(Path(path), "--speed-from")
    return speeds_of(loads_json(text, path, "--speed-from"), Path(path).name)
