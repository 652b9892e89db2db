"""The paragraph ``kvbudget size`` ends with: the pick, why, what it costs, and what would change it, written for a
reader who signs off the purchase rather than for one who reads the ledger."""

from __future__ import annotations

from kvbudget.plan.cap_refusals import pct
from kvbudget.units import a_or_an, format_tokens

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.sizing import Candidate, Sizing


def _gpus(c: Candidate) -> str:
    many = "s" if c.gpus != 1 else ""
    layout = f" ({c.replicas} replicas of {c.choice.tp} GPUs each)" if c.choice.tp > 1 else ""
    return f"{c.gpus} {c.choice.gpu.upper()}{many}{layout}"


def _name(c: Candidate) -> str:
    if c.plan is None:
        return f"{c.choice.model} with {c.choice.engine}"  # where: the caller says on which GPU
    i = c.plan.inputs
    weights = f" at {c.choice.weights} weights" if c.choice.weights else ""
    cache = f", {i.kv_dtype_label} cache" if c.choice.kv_dtype != "auto" else ""
    return f"{i.spec.name}{weights} with {i.engine.rules.title}{cache}"


def _cap(tokens: int) -> str:
    """'a 32K' / 'an 8K'."""
    return a_or_an(format_tokens(tokens))


def _seconds(x: float) -> str:
    return "in under 0.1 s" if x < 0.1 else f"within about {x:.1f} s"


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _why(c: Candidate, s: Sizing) -> str:
    per = c.sessions_per_replica
    unit = "GPU" if c.choice.tp == 1 else f"{c.choice.tp}-GPU replica"
    if c.binding == "memory":
        running = c.plan.inputs.options.max_num_seqs if c.plan is not None else None
        if running is not None and per == running:  # vLLM's --max-num-seqs, not the pool, caps the sessions
            return f"--max-num-seqs sets the count: each {unit} runs at most {per:,} sessions at once, the rest wait"
        return (
            f"Memory sets the count: each {unit} keeps the cache of {per:,} sessions at the full "
            f"{format_tokens(s.context)} cap"
        )
    target = "time to first token" if c.binding == "prefill" else "streaming speed (inter-token latency)"
    if c.replicas_basis == "simulated":
        fewer = f"{c.replicas - 1:,} {unit}s" if c.replicas > 2 else f"one {unit}"
        return (
            f"Speed sets the count, not memory: {_gpus_of(c, c.memory_sessions)} would hold the sessions' caches, "
            f"but on {fewer} the p99 {target} misses the target in simulation"
        )
    return (
        f"Speed sets the count, not memory: each {unit} could hold {c.memory_sessions:,} sessions' caches, but "
        f"past {per:,} the {target} would miss the target"
    )


def _gpus_of(c: Candidate, per: int) -> str:
    """'5 GPUs' / '3 replicas': the replicas memory alone needs at ``per`` sessions each."""
    assert c.load is not None
    n = -(-c.load.sessions // per)
    unit = "GPU" if c.choice.tp == 1 else "replica"
    return f"{n:,} {unit}{'s' if n != 1 else ''}"


def _latency(c: Candidate, s: Sizing) -> str:
    if c.latency is None:
        return ""
    lat = c.latency
    targets = [f"{t:g} s" for t in (s.ttft_s,) if t is not None] + [
        f"{t * 1000:g} ms" for t in (s.itl_s,) if t is not None
    ]
    within = f", inside the {' and '.join(targets)} target{'s' if len(targets) > 1 else ''}" if targets else ""
    return (
        f" At {lat.sessions:,} sessions each, {_which(lat.percentile)} should start {_seconds(lat.ttft_s)} and "
        f"stream at about {1 / lat.itl_s:.0f} tokens/s{within} ({_speed_source(s, lat.provenance, c)})."
    )


def _which(percentile: str) -> str:
    """Which replies the latency is of: the p99 step's (a workload's steps differ) or every one (one shape)."""
    return "the slowest 1% of replies (p99 step)" if percentile == "p99" else "a reply"


def _speed_source(s: Sizing, provenance: str, c: Candidate) -> str:
    if provenance == "simulated":
        measured = c.speeds is not None and c.speeds[0] == "measured" and s.speed_from
        speeds = f"the speeds {s.speed_origin} {s.speed_from} measured" if measured else "the speed model's speeds"
        return f"as simulated, on {speeds}"
    if provenance == "measured" and s.speed_from:
        return f"from the speeds {s.speed_origin} {s.speed_from} measured on this model and engine"
    return "computed from the speed model, not measured"


def _checked(c: Candidate, s: Sizing) -> str:
    """How a latency-bound count was verified: the simulation's runs either side of it, or why it is a bound."""
    sim = c.simulated
    load = f"{c.load.sessions:,} sessions in flight" if c.load is not None and s.sessions else "the arrival rate"
    run = (
        f"`kvbudget simulate` of the workload's first {sim.sessions:,} sessions (seed {sim.seed}), their pauses "
        f"included, at {load}"
        if sim is not None
        else ""
    )
    if sim is not None and sim.replicas is not None:
        met, missed = sim.met_probe, sim.missed_probe
        n = _count(c, sim.replicas)
        lines = f" The count is checked by simulation: {run} meets the targets on {n}"
        if met is not None:
            lines += f" (p99 TTFT {met.ttft_p99_s:.2f} s, inter-token {met.itl_p99_s * 1000:.1f} ms)"
        if missed is not None:
            lines += f" and misses them on {_count(c, missed.replicas)} ({'; '.join(missed.misses)})"
        else:
            lines += ", the fewest that hold the sessions' caches"
        if sim.computed > sim.replicas:
            lines += (
                f". Counting every session as generating at once, as if none paused for its tools, would have asked "
                f"for {_count(c, sim.computed)}"
            )
        elif sim.computed < sim.replicas:
            lines += (
                f". Speed's arithmetic alone, at the mean load per replica, gave {_count(c, sim.computed)}, too few in "
                "simulation"
            )
        return lines + "."
    if sim is not None:
        from kvbudget.plan.sizing_check import ABOVE

        probe = sim.at(ABOVE * sim.computed)
        why = f" ({'; '.join(probe.misses)})" if probe is not None and probe.misses else ""
        return (
            f" Simulation does not confirm this count: {run} misses the targets even on "
            f"{_count(c, ABOVE * sim.computed)}{why}, {ABOVE} times speed's count. Loosen the "
            "targets, or measure a replica before buying."
        )
    if s.simulate_check and c.binding != "memory":
        return (
            " This count takes every session as generating at once, tool pauses not subtracted, so it is an upper "
            "bound: without --no-simulate, size checks it by simulation and finds the fewest replicas that meet "
            "the targets."
        )
    return ""


def _count(c: Candidate, replicas: int) -> str:
    unit = "GPU" if c.choice.tp == 1 else "replica"
    return f"{replicas:,} {unit}{'s' if replicas != 1 else ''}"


def _change(c: Candidate, s: Sizing) -> str:
    if c.binding == "memory":
        cheaper = c.plan.inputs.engine.rules.cheaper_kv_dtypes if c.plan is not None else ()
        article = "an" if cheaper and cheaper[0][0] in "aefhilmnorsx" else "a"  # spoken: an fp8, an int8, a q8_0
        cache = f" or {article} {cheaper[0]} KV cache" if cheaper and c.choice.kv_dtype == "auto" else ""
        lever = f"a shorter context cap{cache} would fit more sessions per GPU and could save a GPU"
    elif c.binding == "prefill":
        lever = "a looser time-to-first-token target, or shorter prompts per step, would let each GPU take more"
    else:
        lever = "a looser inter-token target, or a GPU with more memory bandwidth, would let each GPU take more"
    grow = f"; past {c.capacity:,} concurrent sessions it needs another {'GPU' if c.choice.tp == 1 else 'replica'}"
    return f" What would change the answer: {lever}{grow}."


def _refused_everywhere(s: Sizing) -> str:
    """No row meets the load because the cap itself refuses too many sessions: say so, and the cap that would."""
    r = s.refusals
    assert r is not None
    within = s.cap_within
    windows = [c.plan.inputs.spec.max_position_embeddings or 0 for c in s.candidates if c.plan is not None]
    widest = max(windows, default=0)
    past = (
        f", past every candidate model's trained window (the widest is {format_tokens(widest)}): shorten the "
        "workload's sessions (its [cap] compaction) or choose a longer-context model"
        if within is not None and widest and within.cap > widest
        else ""
    )
    raise_to = (
        f"Raise the cap to {format_tokens(within.cap)} (--context {format_tokens(within.cap).lower()}), where "
        f"{pct(within.share)} are refused{past}, and size again"
        if within is not None
        else "No cap up to 1M tokens keeps them within it: shorten the workload's sessions (compaction, [cap])"
    )
    return (
        f"No deployment can meet the target at {_cap(s.context)} cap, whatever its GPUs: {pct(r.share)} of the "
        f"workload's sessions grow past it and are refused there, above the {pct(s.refusal_rate)} tolerated. "
        f"{raise_to}, or accept that share with --target-refusal-rate."
    )


def recommendation(s: Sizing) -> str:
    """The pick, why, what it costs and what would change it; or why nothing meets the load."""
    met = s.met
    load = f"{met[0].load.sessions:,} concurrent sessions" if met and met[0].load else "the load"
    if not met:
        if s.refusals is not None and not s.refusals.within(s.refusal_rate):
            return _refused_everywhere(s)
        first = s.unmet[0]
        lead = "The only combination," if len(s.unmet) == 1 else f"None of the {len(s.unmet)} combinations meets it;"
        what = f"{_name(first)} on {first.choice.gpu}"
        return (
            f"{lead} {'' if len(s.unmet) == 1 else 'the first, '}{what}, cannot serve the load at "
            f"{_cap(s.context)} cap: {first.unmet}. Loosen the latency targets, lower the cap, or add "
            "larger GPUs, lower-precision weights or tensor parallelism to the candidates."
        )
    pick = met[0]
    by_rate = f" ({s.rate_per_s:g} new sessions/s by Little's law)" if s.rate_per_s is not None else ""
    cost = ""
    if pick.cost_per_hour is not None and pick.cost_per_session_hour is not None:
        cost = (
            f" for {_money(pick.cost_per_hour)} an hour, about {_money(pick.cost_per_session_hour)} per session-hour"
            f" at the peak"
        )
    text = (
        f"For {load}{by_rate} at {_cap(s.context)} cap, run {_name(pick)} on {_gpus(pick)}{cost}. "
        f"{_why(pick, s)}, so {pick.replicas:,} {'holds' if pick.replicas == 1 else 'hold'} {pick.capacity:,}, "
        f"{pick.headroom:,} more than the peak."
        f"{_latency(pick, s)}"
    )
    others = [c for c in met[1:] if c.cost_per_hour is not None and pick.cost_per_hour is not None]
    if others:
        nxt = others[0]
        assert nxt.cost_per_hour is not None and pick.cost_per_hour is not None
        more = nxt.cost_per_hour - pick.cost_per_hour
        price = f"costs {_money(more)} more an hour" if more >= 0.005 else "costs the same, with less spare room"
        text += f" The next cheapest, {_name(nxt)} on {_gpus(nxt)}, {price}."
    elif len(met) > 1 and pick.cost_per_hour is None:
        text += " No prices were given, so the pick is the one with the fewest GPUs; add --price to rank by cost."
    if pick.refusals is not None and pick.refusals.refused:
        text += (
            f" At this cap {pct(pick.refusals.share)} of the workload's sessions outgrow it and are refused, within "
            f"the {pct(s.refusal_rate)} tolerated."
        )
    if s.unmet:
        text += f" {len(s.unmet)} other combination{'s' if len(s.unmet) != 1 else ''} cannot meet it (listed above)."
    if pick.plan is not None and any(w.startswith("near the edge") for w in pick.plan.warnings):
        text += (
            " Boot one replica and measure it before buying: its memory is within the model's error margin of "
            "one session fewer per GPU."
        )
    text += _checked(pick, s)
    return text + _change(pick, s)
