"""Rendering of a simulation study: plain text, and a time-series plot (extra: plot)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbudget.errors import MissingExtraError
from kvbudget.render.text import fit, table
from kvbudget.simulate.search import Sustained
from kvbudget.simulate.study import Study
from kvbudget.units import counted, format_bytes, format_duration, format_int, format_tokens

if TYPE_CHECKING:
    from kvbudget.units import UnitSystem


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


SUSTAINED_VS_STATIC = (
    "  sustained: the mean number of live sessions at the highest arrival rate that still meets the target, with "
    "sessions at their real, growing sizes and pausing between steps; static: sessions that fit if each holds the "
    "whole cap at once (what the engine admits as a worst case). Sustained above static means real sessions rarely "
    "reach the cap together; below it, the target (queueing, preemption) binds first."
)


def _delay(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds < 120 else format_duration(seconds)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else _delay(seconds)


def speed_lines(speeds: dict[str, Any]) -> list[str]:
    """The speed assumptions with their provenance (the JSON's ``speeds``)."""
    pre, dec = speeds["prefill"], speeds["decode"]
    quotes = " · ".join(
        f"{q['tokens_per_s']:,.1f} tokens/s per session at {q['running']:,} running"
        for q in dec["tokens_per_s_per_session"]
    )
    return [
        f"Speeds: prefill {pre['tokens_per_s']:,.0f} tokens/s ({pre['provenance']}; a "
        f"{pre['quoted_at_prompt_tokens']:,}-token prompt) · decode {quotes} ({dec['provenance']})",
        f"  prefill: {pre['basis']}",
        f"  decode: {dec['basis']}",
    ]


def latency_lines(study: Study) -> list[str]:
    """TTFT, inter-token latency and output speed per session, after the speeds they rest on."""
    from kvbudget.simulate.study import latency_json

    r = study.result
    speeds = study.about.get("speeds")
    lines = speed_lines(speeds) if isinstance(speeds, dict) else []
    t, i = r.ttft_s, r.itl_s
    out = latency_json(r)["output_tokens_per_s_per_session"]
    assert isinstance(out, dict)
    per = (
        f" · output {out['p50']:,.1f} tokens/s per session (slowest 1%: {out['slowest_1pct']:,.1f})"
        if out["p50"] and out["slowest_1pct"]
        else ""
    )
    lines.append(
        f"Latency per step: time to first token p50 {_ms(t['p50'])} · p99 {_ms(t['p99'])} · inter-token "
        f"p50 {_ms(i['p50'])} · p99 {_ms(i['p99'])}{per}"
    )
    return lines


def running_limit_lines(study: Study) -> list[str]:
    """Whether the engine's running limit bound (the JSON's ``running_limit``); none when it has none modelled."""
    from kvbudget.simulate.study import running_limit_json

    limit = running_limit_json(study)
    if limit is None:
        return []
    n, wait = limit["per_replica"], limit["wait_s"]
    assert isinstance(n, int) and isinstance(wait, dict)
    where = f"{limit['basis']}; {limit['provenance']}"
    if limit["bound"]:
        return [
            f"The running limit of {n:,} per replica bound: {counted(int(str(limit['steps_held'])), 'step')} waited "
            f"for a running slot, p50 wait {_delay(wait['p50'])} · p99 wait {_delay(wait['p99'])} (in their TTFT) "
            f"· peak running {limit['peak_running']:,} ({where})"
        ]
    return [f"The running limit of {n:,} per replica did not bind: peak running {limit['peak_running']:,} ({where})"]


def verdict_text(study: Study) -> str:
    """The run's verdict: met, unstable (the queue grows: no capacity at this load) or missed, with what it
    missed."""
    if study.verdict == "met":
        return "met by this run"
    head = "UNSTABLE at this load" if study.verdict == "unstable" else "missed by this run"
    return f"{head}: {'; '.join(study.misses)}"


def render_study(study: Study, units: UnitSystem = "iec") -> str:
    r, c, p, a = study.result, study.config, study.config.policy, study.about
    preempt = f" ({p.preempt})" if p.policy != "reserve" else ""
    water = f", watermark {_pct(p.watermark)}" if p.policy == "watermark" else ""
    engine = a.get("engine")
    label = f"{engine['name']} {engine['version']}".strip() if isinstance(engine, dict) else str(engine or "?")
    head = (
        f"{a.get('model', c.memory.label)} on {label} · {a.get('gpu', '')} · "
        f"cap {format_tokens(c.memory.cap_tokens)} · {counted(c.replicas, 'replica')}, {c.router}"
    )
    lines = [
        head,
        f"Policy {p.policy}{preempt}{water} · pause {p.pause} · admission {p.admission} · "
        f"at the cap {p.cap.mode} · traffic: {a.get('source', 'sessions')} (seed {a.get('seed', 0)})",
        *([f"  policy: {a['policy_basis']}"] if a.get("policy_basis") else []),
        "",
        f"KV pool per GPU {format_bytes(r.pool_bytes, units)} · peak referenced "
        f"{format_bytes(r.peak_pool_bytes, units)} · peak with cached blocks "
        f"{format_bytes(r.peak_resident_bytes, units)}",
        f"Sessions: {format_int(r.arrived)} arrived · {format_int(r.finished)} finished · "
        f"{format_int(r.refused)} refused ({r.refused_admission:,} at admission, {r.refused_at_cap:,} at the cap, "
        f"{r.refused_too_big:,} larger than the pool) · {r.live_at_end:,} live at the end",
        *(
            [
                f"  {counted(r.refused_at_cap, 'session')} ended at the cap: even "
                f"{'summarized' if p.cap.mode == 'summarize' else 'compacted'} to the target (never below the shared "
                "prefix), the step's new tokens and output did not fit under the cap; raise --context or shrink the "
                "workload's steps"
            ]
            if r.refused_at_cap and p.cap.mode != "refuse"
            else []
        ),
        f"Steps {format_int(r.steps)} · prefix hit rate {_pct(r.prefix_hit_rate)} of "
        f"{format_int(r.prompt_tokens)} prompt tokens · recomputed {format_int(r.recomputed_tokens)} tokens",
        f"Preemptions {r.preemptions:,} · swaps {r.swaps:,} ({format_bytes(r.swap_bytes, units)}) · "
        f"compactions {r.compactions:,} · evictions {r.evictions:,}",
        f"Queue delay (arrival to admission): p50 {_delay(r.queue_delay_s['p50'])} · "
        f"p99 {_delay(r.queue_delay_s['p99'])} · waits of later steps: p50 {_delay(r.step_wait_s['p50'])} · "
        f"p99 {_delay(r.step_wait_s['p99'])}",
        *running_limit_lines(study),
        *latency_lines(study),
        f"Mean concurrency {r.mean_concurrency:,.1f} sessions (from {format_duration(r.concurrency_window_s[0])} to "
        f"{format_duration(r.concurrency_window_s[1])}) · peak {r.peak_concurrency:,} · simulated "
        f"{format_duration(r.sim_time_s)}",
        "",
        f"Target: {study.target.describe()} — {verdict_text(study)}",
    ]
    sustained = study.sustained_sessions
    # on a line of its own: wrapped after the figure, "vs static plan" was split from what it compares
    static = f"  vs static plan (worst case reserved at the cap): {study.static_plan_sessions:,} per replica"
    if study.static_prefix_sessions is not None:
        static += f", {study.static_prefix_sessions:,} with the shared prefix"
    at = study.at_targets
    if at is not None:
        lines += [f"Sessions sustained: {at.text}", static]
        lines.append(SUSTAINED_VS_STATIC)
    elif study.sustained is not None and sustained is None:
        lines += ["Sessions sustained per replica: none (no load probed met the target)", static]
    elif sustained is None:
        lines += ["Sessions sustained per replica: not measured (no search, run missed the target)", static]
    else:
        bounded = study.sustained is not None and study.sustained.bounded
        amount = f"{sustained:,.1f}" if bounded else f"at least {sustained:,.1f} (no load tried missed the target)"
        lines += [f"Sessions sustained per replica: {amount}", static]
        lines.append(SUSTAINED_VS_STATIC)
    stopped = study.stopped
    if stopped is not None:
        lines.append(f"  {stopped.text[0].upper()}{stopped.text[1:]}.")
    if study.sustained_memory is not None and study.sustained_memory.trail:
        lines += _trail(study.sustained_memory, "memory target alone")
    if study.sustained is not None and study.sustained.trail:
        lines += _trail(study.sustained, "with the latency targets" if at is not None else "")
    return fit("\n".join(lines))


def _trail(sustained: Sustained, what: str) -> list[str]:
    """A search's probes as a table (the p99 TTFT and ITL when they are part of the target)."""
    rows = [
        [
            f"x{q.scale:.3g}",
            f"{q.mean_concurrency:,.1f}",
            f"{q.p99_delay_s:.3g}",
            f"{q.preemptions:,}",
            f"{q.refused:,}",
            _ms(q.ttft_p99_s),
            _ms(q.itl_p99_s),
            "yes" if q.holds else "unstable" if q.unstable else "no",
        ]
        for q in sustained.trail
    ]
    return [
        f"Search{f', {what}' if what else ''} ({sustained.probe_sessions:,} sessions per probe):",
        table(
            ["arrival rate", "mean concurrency", "p99 delay s", "preemptions", "refused", "p99 TTFT", "p99 ITL", "met"],
            rows,
            [True, True, True, True, True, True, True, False],
        ),
    ]


def require_matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("--plot needs matplotlib: install kvbudget[plot]") from None
    return plt


def plot_study(study: Study, path: str) -> None:
    """Pool use and running / waiting / paused sessions over time, written to ``path``."""
    plt = require_matplotlib()
    samples = study.result.samples
    t = [s.t for s in samples]
    gib = 2**30
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    top.plot(t, [s.used_bytes / gib for s in samples], label="referenced")
    top.plot(t, [(s.used_bytes + s.cached_bytes) / gib for s in samples], label="referenced + cached")
    top.axhline(study.result.pool_bytes * study.result.replicas / gib, color="grey", linestyle="--", label="pool")
    top.set_ylabel("KV pool (GiB, all replicas)")
    top.legend(loc="upper left")
    for name in ("running", "waiting", "paused"):
        bottom.plot(t, [getattr(s, name) for s in samples], label=name)
    bottom.set_xlabel("simulated time (s)")
    bottom.set_ylabel("sessions")
    bottom.legend(loc="upper left")
    fig.suptitle(f"kvbudget simulate · {study.about.get('model', '')} · policy {study.config.policy.policy}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
