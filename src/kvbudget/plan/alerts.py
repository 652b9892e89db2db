"""Prometheus alerting rules tied to a plan's numbers (``kvbudget plan --alerts``).

The rules watch what must hold for the plan to hold: the gateway (``kvbudget gateway``) keeps at most the
planned sessions resident on each replica at the planned cap, and the engine behind it then never queues,
preempts or fills its KV cache past the plan's worst case. The gateway's metric names are those of
kvbudget/gateway/metrics.py (prometheus_client adds ``_total`` to counters); the engines' names are cited
next to each rule. The YAML is written with plain string formatting: every text is a double-quoted scalar
(JSON's escapes are a subset of YAML's), so no YAML library is needed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvbudget.plan.plan import Plan
from kvbudget.units import a_or_an

if TYPE_CHECKING:
    from kvbudget.engines.metrics import EngineMetrics

GROUP = "kvbudget-plan"
PREFIX = "kvbudget_gateway_"  # kvbudget/gateway/metrics.py PREFIX (not imported: it needs prometheus_client)
NEAR_PLAN = 0.9  # heuristic: warn when an upstream holds 90% of its planned sessions (new ones will soon queue)


@dataclass(frozen=True)
class Rule:
    alert: str
    expr: str
    for_: str
    severity: str  # critical: the plan is not holding; warning: it soon will not; info: the cap at work
    summary: str
    description: str

    def to_dict(self) -> dict[str, object]:
        return {
            "alert": self.alert,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity, "source": "kvbudget-plan"},
            "annotations": {"summary": self.summary, "description": self.description},
        }


@dataclass(frozen=True)
class AlertRules:
    """The rules of one plan: ``to_dict()`` is the ``alerts`` object of ``plan --json``; ``yaml()`` the
    Prometheus rules file (``rule_files:``)."""

    engine: str
    sessions: int  # planned resident sessions per replica (the gateway's --sessions)
    cap: int  # the context cap per session (the gateway's --cap)
    kv_usage_planned: float  # the engine's KV usage with every planned session at the cap (computed)
    rules: tuple[Rule, ...]
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "sessions_per_replica": self.sessions,
            "cap": self.cap,
            "kv_usage_planned": self.kv_usage_planned,
            "groups": [{"name": GROUP, "rules": [rule.to_dict() for rule in self.rules]}],
            "notes": list(self.notes),
        }

    def yaml(self) -> str:
        q = json.dumps
        cap = a_or_an(f"{self.cap:,}")
        lines = [f"# kvbudget plan --alerts: {self.engine}, {self.sessions} sessions per replica at {cap}-token cap"]
        lines += [f"# {note}" for note in self.notes]
        lines += ["groups:", f"  - name: {q(GROUP)}", "    rules:"]
        for rule in self.rules:
            d = rule.to_dict()
            lines.append(f"      - alert: {q(rule.alert)}")
            lines.append(f"        expr: {q(rule.expr)}")
            lines.append(f"        for: {q(rule.for_)}")
            for key in ("labels", "annotations"):
                lines.append(f"        {key}:")
                values = d[key]
                assert isinstance(values, dict)
                lines += [f"          {name}: {q(value)}" for name, value in values.items()]
        return "\n".join(lines) + "\n"


def _gateway_rules(n: int, cap: int) -> list[Rule]:
    g = PREFIX
    near = max(1, math.ceil(NEAR_PLAN * n))
    resident = f"max by (upstream) ({g}sessions_resident)"
    return [
        Rule("KvbudgetSessionsOverPlan", f"{resident} > {n}", "1m", "critical",
             f"{{{{ $labels.upstream }}}} holds more sessions than the plan's {n}",
             f"The gateway admits more resident sessions than the plan fits at the {cap}-token cap: the engine "
             f"will queue or preempt. Start it with --sessions {n} or --from-plan plan.json."),
        Rule("KvbudgetSessionsNearPlan", f"{resident} >= {near}", "15m", "warning",
             f"{{{{ $labels.upstream }}}} holds {{{{ $value }}}} of its {n} planned sessions",
             f"New sessions will soon wait for a slot ({near} is {NEAR_PLAN:.0%} of the plan's {n} per "
             "replica): add a replica or plan a smaller cap."),
        Rule("KvbudgetSessionsQueued", f"{g}sessions_queued > 0", "5m", "warning",
             "New sessions have waited for a slot for 5 minutes",
             f"Every upstream holds its {n} planned sessions; new sessions queue (then get 429)."),
        Rule("KvbudgetAdmissionsTimedOut",
             f"sum(increase({g}admissions_refused_total{{reason=~\"queue-timeout|queue-full\"}}[10m])) > 0",
             "0m", "warning", "New sessions were refused after waiting for a slot",
             "The queue timed out or was full: the deployment serves fewer sessions than are arriving."),
        Rule("KvbudgetCapEvents", f"sum by (behaviour) (increase({g}cap_events_total[1h])) > 0", "0m", "info",
             f"Sessions reached the {cap}-token cap ({{{{ $labels.behaviour }}}})",
             "Sessions grew past the cap in the last hour and were refused, truncated or compacted; if this is "
             "frequent, plan a larger cap from the recorded trace (kvbudget trace stats)."),
        Rule("KvbudgetGatewayCapNotPlanned", f"{g}cap_tokens != {cap}", "5m", "warning",
             f"The gateway holds a cap other than the plan's {cap} tokens",
             f"Start the gateway with --cap {cap} or --from-plan plan.json: a larger cap fits fewer sessions."),
    ]  # fmt: skip


def _engine_rules(engine: str, m: EngineMetrics | None, usage: float) -> tuple[list[Rule], list[str]]:
    """The engine's own metrics (engines/metrics.py): KV usage past the plan's worst case, preemptions, requests
    waiting."""
    if m is None:
        return [], [f"{engine}: no engine rules (no Prometheus KV, preemption or queue metrics kvbudget ties to); "
                    "the gateway's rules hold the plan."]  # fmt: skip
    pct = f"{usage:.3f}"
    rules: list[Rule] = []
    if m.kv_usage is not None:
        rules.append(Rule("KvbudgetEngineKvOverPlan", f"max by (instance) ({m.kv_usage}) > {pct}", "5m", "warning",
                          f"{m.label} KV usage past the plan's worst case ({pct}: every planned session at the cap)",
                          "{{ $labels.instance }}: sessions longer than the cap or more sessions than planned reach "
                          "the engine; preemption follows."))  # fmt: skip
    if m.preemptions is not None:
        rules.append(Rule("KvbudgetEnginePreempting", f"sum by (instance) (increase({m.preemptions}[5m])) > 0", "0m",
                          "critical", f"{m.label} {m.preempted} requests",
                          "The KV cache ran out: the plan is not holding."))  # fmt: skip
    rules.append(Rule("KvbudgetEngineQueueing", f"sum by (instance) ({m.waiting}) > 0", "2m", "warning",
                      f"{m.label} has requests waiting",
                      "The engine queues requests: with the gateway holding the plan it should never have to."
                      + m.waiting_hint))  # fmt: skip
    return rules, [m.note] if m.note else []


def alert_rules(plan: Plan) -> AlertRules:
    """The alerting rules of ``plan``: the gateway's (resident sessions against the plan's per replica, the queue,
    refusals, cap events, the cap it holds) and the engine's (KV usage past the plan's worst case, preemptions,
    requests waiting)."""
    engine = plan.inputs.engine.name
    cap = plan.inputs.context
    # computed: with every planned session at the cap, the pool holds sessions x bytes per session
    usage = min(1.0, plan.sessions * plan.per_session_bytes / plan.kv_pool_bytes) if plan.kv_pool_bytes else 1.0
    usage = math.ceil(usage * 1000) / 1000
    engine_rules, notes = _engine_rules(engine, plan.inputs.engine.rules.alert_metrics(), usage)
    if plan.sessions < 1:
        notes = [f"the plan fits no session at the {cap}-token cap: plan a smaller cap first", *notes]
    return AlertRules(engine, plan.sessions, cap, usage, (*_gateway_rules(max(plan.sessions, 1), cap), *engine_rules),
                      tuple(notes))  # fmt: skip
