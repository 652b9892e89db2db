"""The numbers of one report, typed. Every figure is copied from the library call behind a CLI command (the
plan, levers, cost, trace stats, simulate and calibrate documents), so the page shows what the CLI prints.

Bytes are integers, per GPU; token counts are integers; shares are fractions in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from kvbudget.plan.levers import Lever
from kvbudget.plan.plan import Plan

if TYPE_CHECKING:
    from kvbudget.plan.sizing import Sizing
    from kvbudget.report.latency import Latency
    from kvbudget.units import UnitSystem

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class LayerGroup:
    """One group of identical layers, as ``kvbudget cost --json`` lists it at the cap (one sequence)."""

    kind: str
    label: str
    layers: int
    allocated_layers: int
    slot_bytes: int  # bytes of one token slot in one layer
    per_token_bytes: int  # bytes each further token adds past every window (0 for a windowed group)
    token_slots: int  # token slots one session holds at the cap
    bytes_at_cap: int  # bytes one session at the cap holds in this group (slots and fixed state)
    state_bytes: int  # fixed bytes per sequence in one layer (recurrent state, cross-attention source)

    @property
    def held_bytes_per_token(self) -> int:
        """What one token the group holds costs: allocated layers x slot bytes (a windowed group stops
        growing at its window, a full-attention group never does)."""
        return self.allocated_layers * self.slot_bytes

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "label": self.label,
            "layers": self.layers,
            "allocated_layers": self.allocated_layers,
            "slot_bytes": self.slot_bytes,
            "held_bytes_per_token": self.held_bytes_per_token,
            "per_token_bytes": self.per_token_bytes,
            "token_slots": self.token_slots,
            "bytes_at_cap": self.bytes_at_cap,
            "state_bytes": self.state_bytes,
        }


@dataclass(frozen=True)
class CapPoint:
    """Sessions of the same deployment at one cap (``Plan.at_cap``, what ``plan --context CAP`` gives)."""

    cap: int
    sessions: int  # per replica
    total_sessions: int
    per_session_bytes: int

    def to_dict(self) -> dict[str, object]:
        return {
            "cap": self.cap,
            "sessions": self.sessions,
            "total_sessions": self.total_sessions,
            "per_session_bytes": self.per_session_bytes,
        }


@dataclass(frozen=True)
class EnforcedCap:
    """The context cap the deployment enforces per session, and the setting that enforces it."""

    tokens: int
    window: int | None  # the model's advertised context (max_position_embeddings)
    engine: str
    setting: str | None  # e.g. "--max-model-len 32768" from the serve command; None without a server command

    def to_dict(self) -> dict[str, object]:
        return {
            "tokens": self.tokens,
            "advertised_window_tokens": self.window,
            "engine": self.engine,
            "setting": self.setting,
        }


@dataclass(frozen=True)
class TraceSessions:
    """Session lengths from the given traces: the ``trace stats`` figures, the cap analysis, and the CDF of
    session peaks (each session's largest context, sub-agents counted as sessions)."""

    files: tuple[str, ...]
    steps: int
    bad_rows: int
    peaks: dict[str, object]  # trace stats --json "session_peak_tokens"
    cap: dict[str, object]  # trace stats --json "cap" (the cap analysis on this deployment)
    p99_tokens: int
    recommended_cap: int
    cdf: tuple[tuple[int, float], ...]  # (tokens, share of sessions whose peak is at or below it)
    sessions: int
    over_cap: int  # sessions whose peak exceeds the enforced cap
    window: int | None = None  # the model's trained (advertised) window, drawn apart when below the recommendation

    @property
    def recommended_past_window(self) -> bool:
        return self.window is not None and self.recommended_cap > self.window

    def to_dict(self) -> dict[str, object]:
        return {
            "files": list(self.files),
            "steps": self.steps,
            "bad_rows": self.bad_rows,
            "sessions": self.sessions,
            "session_peak_tokens": self.peaks,
            "p99_session_peak_tokens": self.p99_tokens,
            "recommended_cap_tokens": self.recommended_cap,
            "advertised_window_tokens": self.window,
            "recommended_past_window": self.recommended_past_window,
            "sessions_over_cap": self.over_cap,
            "cap": self.cap,
            "cdf": [[tokens, share] for tokens, share in self.cdf],
        }


@dataclass(frozen=True)
class Simulated:
    """The simulator's answer (``kvbudget simulate --json`` fields of the same name)."""

    source: str
    sustained_sessions: float | None  # per replica; None: no load met the target (search_stopped says when none can)
    sustained_sessions_total: float | None
    sustained_basis: str
    target: str
    mean_concurrency: float
    peak_concurrency: int
    sessions_arrived: int
    refused: int
    preemptions: int
    static_plan_sessions: int
    speeds: str = ""  # where the simulation's speeds come from: "prefill measured, decode measured (load test x)"
    # with --ttft / --itl: "memory allows 31.2 sessions per replica; at p99 TTFT <= 2 s ... holds 24.0: latency binds"
    at_targets: str = ""
    search_stopped: dict[str, object] | None = None  # simulate --json search.stopped: no load meets the target

    @property
    def sustained_text(self) -> str:
        """The sessions per replica sustained, or "none found" when no load met the target (or no search ran after
        a run that missed)."""
        return "none found" if self.sustained_sessions is None else f"{self.sustained_sessions:,}"

    def to_dict(self) -> dict[str, object]:
        return {
            "speeds": self.speeds,
            "at_targets": self.at_targets or None,
            "source": self.source,
            "sustained_sessions": self.sustained_sessions,
            "sustained_sessions_total": self.sustained_sessions_total,
            "sustained_basis": self.sustained_basis,
            "search_stopped": self.search_stopped,
            "target": self.target,
            "mean_concurrency": self.mean_concurrency,
            "peak_concurrency": self.peak_concurrency,
            "sessions_arrived": self.sessions_arrived,
            "refused": self.refused,
            "preemptions": self.preemptions,
            "static_plan_sessions": self.static_plan_sessions,
        }


MeasuredSource = Literal["loadtest", "log"]


@dataclass(frozen=True)
class Measured:
    """Sessions one replica served or sized for, as measured: a loadtest result or an engine start-up log."""

    source: MeasuredSource
    path: str
    engine: str | None
    sessions: int | None  # per replica; None when the document states no capacity
    context: int | None  # the cap the measurement ran at
    basis: str
    agreement: tuple[int, int] | None = None  # a log: (figures kvbudget reproduces, figures calibrate checks)

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "path": self.path,
            "engine": self.engine,
            "sessions": self.sessions,
            "context": self.context,
            "basis": self.basis,
            "figures_agreeing": None if self.agreement is None else self.agreement[0],
            "figures_checked": None if self.agreement is None else self.agreement[1],
        }


@dataclass(frozen=True)
class Report:
    plan: Plan
    plan_doc: dict[str, object]  # kvbudget plan --json
    levers: tuple[Lever, ...]  # best first, as kvbudget levers ranks them
    levers_doc: dict[str, object]  # kvbudget levers --json
    groups: tuple[LayerGroup, ...]
    curve: tuple[CapPoint, ...]
    cap: EnforcedCap
    trace: TraceSessions | None
    simulated: Simulated | None
    measured: tuple[Measured, ...]
    units: UnitSystem
    latency: Latency | None = None  # at the planned sessions, and simulated (report/latency.py)
    sizing: Sizing | None = None  # report --size: the kvbudget size answer (report/sizing.py)

    @property
    def commands(self) -> dict[str, dict[str, object]]:
        commands = self.plan_doc["commands"]
        assert isinstance(commands, dict)
        return commands

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget report --json`` document (schema: kvbudget/schemas/report.json)."""
        i = self.plan.inputs
        return {
            "schema_version": SCHEMA_VERSION,
            "model": i.spec.name,
            "engine": i.engine.to_json(),
            "gpu": {"id": i.gpu_id, "name": i.gpu_label},
            "units": self.units,
            "kv_bytes_per_token": self.plan.layout.kv_bytes_per_token,
            "state_bytes": sum(g.allocated_layers * g.state_bytes for g in self.groups),
            "groups": [g.to_dict() for g in self.groups],
            "cap": self.cap.to_dict(),
            "curve": [p.to_dict() for p in self.curve],
            "trace": self.trace.to_dict() if self.trace else None,
            "sessions": {
                "planned": self.plan.sessions,
                "planned_total": self.plan.total_sessions,
                "replicas": self.plan.replicas,
                "simulated": self.simulated.to_dict() if self.simulated else None,
                "measured": [m.to_dict() for m in self.measured],
            },
            "latency": None if self.latency is None else self.latency.to_dict(),
            "sizing": None if self.sizing is None else self.sizing.to_dict(),
            "plan": self.plan_doc,
            "levers": self.levers_doc,
        }
