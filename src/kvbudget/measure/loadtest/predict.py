"""What kvbudget predicts for the server under test, and how the measurement compares.

* **llama.cpp**: the plan's sessions for the server as it runs: llama-server serves one sequence
  per slot, each slot a stream of ``n_ctx`` cells (``kvbudget.engines.llamacpp.context_cells``:
  ``-c C -np S`` gives S streams of pad(pad(C, 256) / S, 256) cells), so a session at the cap fits
  in every slot whose cells hold the cap: S sessions, or 0 when a slot is smaller than the cap.
  With ``--kv-unified`` the slots share one stream: min(S, cells // cap). The simulator then runs
  the same workload on exactly that memory: S slots of n_ctx cells, reserve-at-cap (a slot is
  the session's while it runs, never preempted).
* **Other engines**, given ``--model`` and the plan's deployment options (``--gpu`` or
  ``--gpu-memory``, ``--engine`` when the server does not say): ``make_plan`` and the simulator
  on that plan's pool (paged, pauses evictable: each agent call is a new request).

The simulator's closed-loop figure: N of the run's own sessions (same seed, same steps, pauses
scaled as in the run) start together; the largest N with no refusal, no preemption and no wait
(p99 queue delay and p99 step wait both zero), found by doubling then bisection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvbudget.engines.llamacpp import context_cells
from kvbudget.simulate import MemoryModel, MemoryPolicy, SimConfig, TimeModel, simulate
from kvbudget.simulate.policies import DEFAULT_PREFILL_TOKENS_PER_S

if TYPE_CHECKING:
    from kvbudget.measure.loadtest.server import ServerInfo
    from kvbudget.measure.loadtest.session import Source
    from kvbudget.plan.plan import PlanInputs

SIM_LIMIT = 4096  # the largest concurrency the simulator's search tries


@dataclass
class Prediction:
    plan_sessions: int | None = None
    simulated_sessions: int | None = None
    plan_basis: str = ""
    simulated_basis: str = ""
    trail: list[dict[str, object]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "plan_sessions": self.plan_sessions,
            "simulated_sessions": self.simulated_sessions,
            "plan_basis": self.plan_basis,
            "simulated_basis": self.simulated_basis,
            "simulated_levels": self.trail,
        }


def llamacpp_plan(slots: int, n_ctx: int, cap: int, unified: bool) -> tuple[int, str]:
    """(sessions, basis) of a llama-server with ``slots`` slots of ``n_ctx`` cells at ``cap`` tokens."""
    if unified:
        cells, _ = context_cells(n_ctx, slots, True)
        sessions = min(slots, cells // cap)
        return sessions, (
            f"llama.cpp --kv-unified: {slots} slots share one stream of {cells:,} cells: "
            f"min({slots}, {cells:,} // {cap:,}) = {sessions}"
        )
    plan_cells, _ = context_cells(slots * cap, slots, False)
    sessions = slots if n_ctx >= cap else 0
    holds = "holds" if n_ctx >= cap else "does not hold"
    return sessions, (
        f"llama.cpp: {slots} slots x {n_ctx:,} cells (one stream per slot); each {holds} the {cap:,}-token cap "
        f"(kvbudget's cell rule: -c {slots * cap} -np {slots} gives {plan_cells:,} cells per slot) -> {sessions}"
    )


def slot_memory(slots: int, n_ctx: int, cap: int, unified: bool) -> MemoryModel:
    """llama.cpp's cache as the simulator's pool, in cells (1 byte per cell): a session holds a slot."""
    if unified:
        cells = context_cells(n_ctx, slots, True)[0]
        per_session = max(min(cap, cells), -(-cells // slots))

        def seq(tokens: int) -> int:
            return per_session

        return MemoryModel(cells, min(cap, cells), seq, label=f"llama.cpp {slots} slots, unified {cells} cells")

    def slot(tokens: int) -> int:
        return n_ctx

    return MemoryModel(slots * n_ctx, min(cap, n_ctx), slot, label=f"llama.cpp {slots} slots x {n_ctx} cells")


def closed_loop_sessions(
    source: Source, time_scale: float, config: SimConfig, start_limit: int
) -> tuple[int, list[dict[str, object]]]:
    """The largest N whose N sessions, started together, are never refused, preempted or kept waiting."""
    trail: list[dict[str, object]] = []
    tried: dict[int, bool] = {}

    def holds(n: int) -> bool:
        if n not in tried:
            result = simulate((source.plan(i, time_scale) for i in range(n)), config)
            ok = (
                result.refused_admission == 0
                and result.refused_too_big == 0
                and result.preemptions == 0
                and result.queue_delay_s["p99"] <= 0
                and result.step_wait_s["p99"] <= 0
            )
            tried[n] = ok
            trail.append(
                {
                    "sessions": n,
                    "refused": result.refused_admission + result.refused_too_big,
                    "preemptions": result.preemptions,
                    "queue_delay_p99_s": result.queue_delay_s["p99"],
                    "step_wait_p99_s": result.step_wait_s["p99"],
                    "sessions_capped": result.refused_at_cap,
                    "held": ok,
                }
            )
        return tried[n]

    low, high = 0, max(1, start_limit)
    while high <= SIM_LIMIT and holds(high):
        low, high = high, high * 2
    if high > SIM_LIMIT:
        return low, trail
    while high - low > 1:
        mid = (low + high) // 2
        if holds(mid):
            low = mid
        else:
            high = mid
    trail.sort(key=lambda row: int(str(row["sessions"])))
    return low, trail


def _time_model(decode_rate: float | None, prefill_rate: float | None) -> TimeModel:
    return TimeModel(
        prefill_tokens_per_s=prefill_rate or DEFAULT_PREFILL_TOKENS_PER_S,
        decode_tokens_per_s=decode_rate or 50.0,
    )


def predict(
    info: ServerInfo,
    source: Source,
    cap: int,
    time_scale: float,
    *,
    unified: bool = False,
    inputs: PlanInputs | None = None,
    decode_rate: float | None = None,
    prefill_rate: float | None = None,
) -> Prediction:
    """The plan's and the simulator's sessions for this server (rates: measured in the run)."""
    out = Prediction()
    policy_cap = source.cap(cap)
    if info.engine == "llamacpp" and info.total_slots and info.slot_n_ctx:
        slots, n_ctx = info.total_slots, info.slot_n_ctx
        out.plan_sessions, out.plan_basis = llamacpp_plan(slots, n_ctx, cap, unified)
        config = SimConfig(
            memory=slot_memory(slots, n_ctx, cap, unified),
            policy=MemoryPolicy(policy="reserve", admission="queue", cap=policy_cap),
            time=_time_model(decode_rate, prefill_rate),
        )
        rule = "reserve-at-cap on the slots' cells"
    elif inputs is not None:
        from kvbudget.plan.plan import make_plan
        from kvbudget.simulate.build import memory_from_plan, time_from_plan

        plan = make_plan(inputs)
        out.plan_sessions = plan.sessions
        out.plan_basis = f"kvbudget plan: {plan.statement} ({inputs.engine.label}, {inputs.gpu_label})"
        config = SimConfig(
            memory=memory_from_plan(plan),
            policy=MemoryPolicy(policy="paged", pause="evictable", admission="queue", cap=policy_cap),
            time=time_from_plan(
                plan,
                None,
                prefill_tokens_per_s=prefill_rate or DEFAULT_PREFILL_TOKENS_PER_S,
                decode_tokens_per_s=decode_rate or 50.0,
            ),
        )
        rule = "paged, pauses evictable, on the plan's KV pool"
    else:
        out.plan_basis = (
            f"no prediction for a {info.engine} server without --model and --gpu or --gpu-memory "
            "(llama.cpp servers are predicted from their own /slots)"
        )
        return out
    n, out.trail = closed_loop_sessions(source, time_scale, config, max(1, out.plan_sessions or 1))
    out.simulated_sessions = n
    out.simulated_basis = (
        f"simulator, {rule}: the largest N of the run's sessions started together with no refusal, "
        f"preemption or wait ({len(out.trail)} runs)"
    )
    return out


def reconcile(measured: int | None, prediction: Prediction, why: str) -> list[dict[str, object]]:
    """Measured sessions beside each predicted figure, with the difference and what it means."""
    rows: list[dict[str, object]] = []
    for figure, value in (
        ("plan_sessions", prediction.plan_sessions),
        ("simulated_sessions", prediction.simulated_sessions),
    ):
        if value is None:
            continue
        diff = None if measured is None else measured - value
        if measured is None:
            note = f"nothing measured to compare: {why}"
        elif diff == 0:
            note = "the measurement agrees"
        elif diff is not None and diff < 0:
            note = f"the server sustained {-diff} fewer than predicted: {why}"
        else:
            note = (
                f"the server sustained {diff} more than predicted: the prediction holds every session's "
                "worst case at the cap, and sessions that stay below it or pause leave room"
            )
        rows.append({"figure": figure, "measured": measured, "predicted": value, "difference": diff, "note": note})
    return rows
