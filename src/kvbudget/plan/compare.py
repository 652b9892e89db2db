"""Deployments side by side: models x GPUs x engines x caps x cache dtypes, each planned as ``plan`` plans it.

With prices (per GPU-hour; none is built in, since no price stays current) each row gets its cost per hour, per
session-hour (the deployment's cost / the sessions it holds at the cap) and, with a workload, per million
generated tokens at that concurrency (sessions / E[T] x output tokens per session; E[T] the unloaded session time,
workload/little.py). With an arrival rate and a workload, Little's law gives the concurrent sessions the rate
needs (L = rate x E[T]) and so the replicas and GPUs of each row's deployment at the static plan's sessions per
replica. With ``--simulate`` each served row also gets what the simulator sustains per replica under the workload
(``kvbudget simulate``'s search: growing sessions, pauses, prefix cache, queueing and paging), and so the replicas
and GPUs the rate needs when each replica holds that instead of the worst case.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kvbudget.errors import KvBudgetError
from kvbudget.plan.plan import Plan, sessions_per_replica
from kvbudget.workload.little import SessionTime


@dataclass(frozen=True)
class Choice:
    """One combination of the compared dimensions."""

    model: str
    gpu: str
    engine: str
    context: int
    kv_dtype: str
    weights: str | None = None  # a serving precision; None: the checkpoint's own
    tp: int = 1

    def options(self) -> dict[str, object]:
        """The choice as a plan's named options (what differs between the rows of one comparison)."""
        return {
            "model": self.model,
            "gpu": self.gpu,
            "engine": self.engine,
            "context": self.context,
            "kv_dtype": self.kv_dtype,
            "weights": self.weights,
            "tp": self.tp,
        }


@dataclass(frozen=True)
class Simulated:
    """What the simulator sustains on one replica of a row's deployment under the workload: the mean live sessions
    at the highest arrival rate meeting the target (``kvbudget simulate``'s sustained sessions), or why none."""

    sessions_per_replica: float | None
    basis: str
    target: str
    ttft_s: dict[str, float] | None = None  # the run at the workload's own rate: p50 / p99 time to first token
    itl_s: dict[str, float] | None = None  # and inter-token latency
    speeds: str = ""  # the speeds it ran at and their provenance, in words
    memory_sessions_per_replica: float | None = None  # with latency targets: what the memory target alone holds
    binds: str | None = None  # with latency targets: memory, ttft, itl or ttft+itl
    at_targets: str = ""  # with latency targets: both figures and which binds, in words
    stopped: dict[str, object] | None = None  # the search stopped: no load meets the target (simulate's search.stopped)

    def replicas_for(self, concurrent: float | None) -> int | None:
        """Replicas whose sustained sessions cover ``concurrent`` (Little's law at the asked rate)."""
        if concurrent is None or not self.sessions_per_replica:
            return None
        return max(1, math.ceil(concurrent / self.sessions_per_replica))


@dataclass(frozen=True)
class Row:
    choice: Choice
    plan: Plan | None
    refused: str = ""
    price_per_gpu_hour: float | None = None
    session: SessionTime | None = None
    rate_per_s: float | None = None
    simulated: Simulated | None = None  # the simulator's sustained sessions for this deployment (--simulate)

    @property
    def gpus(self) -> int:
        return self.plan.inputs.gpus if self.plan is not None else 0

    @property
    def sessions(self) -> int:
        return self.plan.total_sessions if self.plan is not None else 0

    @property
    def cost_per_hour(self) -> float | None:
        return None if self.price_per_gpu_hour is None or self.plan is None else self.price_per_gpu_hour * self.gpus

    @property
    def cost_per_session_hour(self) -> float | None:
        cost = self.cost_per_hour
        return None if cost is None or not self.sessions else cost / self.sessions

    @property
    def output_tokens_per_hour(self) -> float | None:
        """Generated tokens an hour with every session slot busy: sessions / E[T] x output tokens per session."""
        if self.session is None or not self.sessions or self.session.mean_s <= 0:
            return None
        return self.sessions / self.session.mean_s * self.session.decode_tokens * 3600

    @property
    def cost_per_million_output_tokens(self) -> float | None:
        cost, tokens = self.cost_per_hour, self.output_tokens_per_hour
        return None if cost is None or not tokens else cost / tokens * 1e6

    @property
    def concurrent_needed(self) -> float | None:
        """Little's law: sessions in flight at the arrival rate, L = rate x E[T]."""
        if self.rate_per_s is None or self.session is None:
            return None
        return self.rate_per_s * self.session.mean_s

    @property
    def replicas_needed(self) -> int | None:
        needed = self.concurrent_needed
        if needed is None or self.plan is None or self.plan.sessions < 1:
            return None
        return max(1, math.ceil(needed / self.plan.sessions))

    @property
    def gpus_needed(self) -> int | None:
        return self._gpus(self.replicas_needed)

    @property
    def replicas_needed_simulated(self) -> int | None:
        """Replicas for the rate when each holds what the simulator sustains (queueing and paging included), not the
        static worst case."""
        return None if self.simulated is None else self.simulated.replicas_for(self.concurrent_needed)

    @property
    def gpus_needed_simulated(self) -> int | None:
        return self._gpus(self.replicas_needed_simulated)

    def _gpus(self, replicas: int | None) -> int | None:
        if replicas is None or self.plan is None:
            return None
        return replicas * self.plan.inputs.tp * self.plan.inputs.pp

    @property
    def provenance(self) -> dict[str, str]:
        """How each byte figure of the row was found, as the plan's ledger labels it (kvbudget.provenance.LABELS)."""
        assert self.plan is not None
        by_label = {line.label: line.provenance for line in self.plan.ledger}
        return {
            "weights_bytes_per_gpu": by_label["weights"],
            "kv_pool_bytes": by_label["KV pool"],  # usable less weights and the runtime overhead (plan shows its own)
            "per_session_bytes": by_label["one session at the cap"],
        }

    def to_dict(self) -> dict[str, object]:
        return self.to_json()

    def to_json(self) -> dict[str, object]:
        c = self.choice
        out: dict[str, object] = {
            "model": c.model,
            "gpu": c.gpu,
            "engine": c.engine,
            "context": c.context,
            "kv_dtype": c.kv_dtype,
            "weights": c.weights,
            "tp": c.tp,
            "refused": self.refused or None,
            "warnings": [],
        }
        if self.plan is not None:
            i = self.plan.inputs
            out |= {
                "engine": {"name": i.engine.name, "version": i.engine.version},
                "context": i.context,
                "kv_dtype": i.kv_dtype_label,
                "gpus": i.gpus,
                "sessions_per_replica": self.plan.sessions,
                "replicas": self.plan.replicas,
                "sessions": self.sessions,
                "per_session_bytes": self.plan.per_session_bytes,
                "kv_pool_bytes": self.plan.kv_pool_bytes,
                "weights_bytes_per_gpu": self.plan.weights_per_gpu,
                "provenance": self.provenance,
                "warnings": list(self.plan.warnings),
            }
            if self.plan.max_context_for_sessions is not None:
                out["max_context_for_sessions"] = self.plan.max_context_for_sessions
                out["sessions_requested"] = i.sessions
                out["sessions_requested_per_replica"] = sessions_per_replica(i.sessions or 0, self.plan.replicas)
        out |= {
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "cost_per_hour": _round(self.cost_per_hour),
            "cost_per_session_hour": _round(self.cost_per_session_hour),
            "cost_per_million_output_tokens": _round(self.cost_per_million_output_tokens),
        }
        if self.rate_per_s is not None:
            out["rate"] = {
                "arrivals_per_s": self.rate_per_s,
                "mean_session_s": _round(self.session.mean_s if self.session else None),
                "concurrent_sessions": _round(self.concurrent_needed),
                "replicas_needed": self.replicas_needed,
                "gpus_needed": self.gpus_needed,
            }
        if self.simulated is not None:
            s = self.simulated
            out["simulated"] = {
                "sustained_sessions_per_replica": _round(s.sessions_per_replica),
                "basis": s.basis,
                "target": s.target,
                "replicas_needed": self.replicas_needed_simulated,
                "gpus_needed": self.gpus_needed_simulated,
                "ttft_s": s.ttft_s,
                "itl_s": s.itl_s,
                "speeds": s.speeds,
                "memory_sessions_per_replica": _round(s.memory_sessions_per_replica),
                "binds": s.binds,
                "at_targets": s.at_targets or None,
                "search_stopped": s.stopped,
            }
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def compare(
    choices: Iterable[Choice],
    planner: Callable[[Choice], Plan],
    *,
    prices: dict[str, float] | None = None,
    session: SessionTime | None = None,
    rate_per_s: float | None = None,
) -> list[Row]:
    """Plan every choice; a deployment an engine refuses is a row with its reason, not an error."""
    rows = []
    for choice in choices:
        try:
            plan = planner(choice)
        except KvBudgetError as exc:
            rows.append(Row(choice, None, str(exc)))
            continue
        price = (prices or {}).get(choice.gpu)
        rows.append(Row(choice, plan, "", price, session, rate_per_s))
    return rows


SORTS = ("sessions", "cost", "gpus")


def sort_rows(rows: list[Row], by: str) -> list[Row]:
    """Best first: most sessions, lowest cost per session-hour, or fewest GPUs for the rate; refused rows last."""

    def key(row: Row) -> tuple[object, ...]:
        if row.plan is None:
            return (2, 0.0)
        if by == "cost":
            cost = row.cost_per_session_hour
            return (0, cost) if cost is not None else (1, -row.sessions)
        if by == "gpus":
            gpus = row.gpus_needed_simulated if row.simulated is not None else row.gpus_needed
            return (0, gpus, row.cost_per_hour or 0.0) if gpus is not None else (1, -row.sessions)
        return (0, -row.sessions)

    return sorted(rows, key=key)
