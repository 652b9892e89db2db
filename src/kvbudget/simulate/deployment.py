"""From a simulation request to the study: the deployment planned as ``plan`` plans it, the sessions (generated
from a workload or replayed from traces), the engine's own memory policy, the time model, and the run with its
sustained-sessions search (``kvbudget simulate``; docs/simulate.md)."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.errors import InputError
from kvbudget.units import counted

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from kvbudget.engines.contract import EngineRules
    from kvbudget.requests.simulate import SimulateRequest
    from kvbudget.simulate.policies import CapPolicy, Target
    from kvbudget.simulate.runner import Progress, SimConfig
    from kvbudget.simulate.study import Study
    from kvbudget.workload.record import BadRow, SessionPlan

    ProgressHooks = Callable[[str], Progress | None]

# Ceilings past which a run is refused unless allow_long: bench/simulate.py measures about 150,000 model calls a
# second (5.0M in 33 s), so 20M calls is over two minutes; each replica keeps its own pool state.
MAX_CALLS = 20_000_000
MAX_REPLICAS = 10_000
CALLS_PER_S = 150_000


def _sources(
    r: SimulateRequest, context: int
) -> tuple[Callable[[], Iterable[SessionPlan]], CapPolicy, str, int, tuple[float, float]]:
    """(the session source, the cap policy, a description, the shared prefix, (expected sessions of one run, model
    calls per session)) from the workload or the traces."""
    from kvbudget.requests.simulate import DEFAULT_SESSIONS
    from kvbudget.simulate.build import cap_from_workload
    from kvbudget.simulate.policies import CapPolicy

    count, duration = r.sessions, r.duration
    if r.workload:
        from kvbudget.workload.generate import generate_sessions
        from kvbudget.workload.loader import load_workload

        workload = load_workload(r.workload)
        if r.rate is not None:
            if workload.arrival.replay:
                raise InputError(
                    f"--rate: {r.workload} replays a trace's session starts; drop --rate or give the workload "
                    "an [arrival] rate_per_s"
                )
            from dataclasses import replace

            workload = replace(workload, arrival=replace(workload.arrival, rate_per_s=r.rate))
        if count is None and duration is None:
            count = DEFAULT_SESSIONS

        def generated() -> Iterable[SessionPlan]:
            return generate_sessions(workload, seed=r.seed, count=count, duration_s=duration)

        cap = cap_from_workload(workload.cap, context)
        rate = workload.arrival.rate_per_s
        sessions = count if count is not None else (rate or 0.0) * (duration or 0.0)
        return generated, cap, f"workload {r.workload}", workload.prefix_tokens, (sessions, workload.steps.mean())
    from kvbudget.workload.generate import replay_sessions
    from kvbudget.workload.traces import read_records

    files = list(r.trace or ())
    bad: list[BadRow] = []
    records = list(read_records(files, fmt=r.format, strict=r.strict, bad_rows=bad, span_files=r.sessions_span_files))
    if not records:
        raise InputError(f"--trace: no usable step records in {', '.join(files)}")

    def replayed() -> Iterable[SessionPlan]:
        return replay_sessions(records)

    more = f" + {counted(len(files) - 1, 'more file')}" if len(files) > 1 else ""
    skipped = f", {counted(len(bad), 'bad row')} skipped" if bad else ""
    ids = {rec.session for rec in records}
    work = (float(len(ids)), len(records) / max(len(ids), 1))
    return replayed, CapPolicy("refuse"), f"trace {files[0]}{more}{skipped}", 0, work


def _check_bounds(r: SimulateRequest, work: tuple[float, float], replicas: int) -> None:
    """Refuse a run far beyond what the simulator does in a couple of minutes, saying what it would cost."""
    if r.allow_long:
        return
    sessions, per_session = work
    # with latency targets, two searches (memory alone, then with the targets) sharing their runs: at most twice
    searches = 2 if r.ttft is not None or r.itl is not None else 1
    total = (sessions + searches * r.search_sessions * r.search_probes) * per_session
    if total > MAX_CALLS:
        minutes = total / CALLS_PER_S / 60
        raise InputError(
            f"about {total:,.0f} model calls to simulate (the run and its search), about {minutes:,.0f} minutes at "
            f"the measured {CALLS_PER_S:,} calls/s; lower --sessions / --duration / --search-sessions, or pass "
            "--allow-long to run it anyway"
        )
    if replicas > MAX_REPLICAS:
        raise InputError(
            f"--replicas {replicas:,}: each replica keeps its own pool; more than {MAX_REPLICAS:,} is refused "
            "unless --allow-long"
        )


def check_traffic(r: SimulateRequest) -> None:
    """The request's traffic is one workload or one set of traces, counted by sessions or by duration."""
    if bool(r.workload) == bool(r.trace):  # the field first: the one missing, or the second given
        raise InputError(
            f"{'--trace' if r.workload else '--workload'}: give exactly one of --workload FILE or --trace FILE..."
        )
    if r.sessions and r.duration:
        raise InputError("--duration: give --sessions N or --duration S, not both")
    if r.rate is not None and not r.workload:
        raise InputError("--rate: a trace replays its own arrivals; --rate sets a --workload's arrival rate")


@dataclass(frozen=True)
class Prepared:
    """A simulation made ready here (the plan made, the files read, the sessions' source built): ``run()`` needs
    nothing of this machine, so it can run in another process or as a task on a Ray cluster."""

    source: Callable[[], Iterable[SessionPlan]]
    config: SimConfig
    target: Target
    static_plan_sessions: int
    static_prefix_sessions: int | None
    search_sessions: int
    search_probes: int
    about: dict[str, object]
    jobs: int | None
    ray: str | None

    def run(self, progress: ProgressHooks | None = None) -> Study:
        """The study: the run, then (search_sessions > 0) the sustained-sessions search."""
        from kvbudget.simulate.study import run_study

        return run_study(
            self.source,
            self.config,
            self.target,
            static_plan_sessions=self.static_plan_sessions,
            static_prefix_sessions=self.static_prefix_sessions,
            search_sessions=self.search_sessions,
            search_probes=self.search_probes,
            progress=progress,
            about=self.about,
            jobs=self.jobs,
            ray=self.ray,
        )


def simulate_deployment(request: SimulateRequest, progress: ProgressHooks | None = None) -> Study:
    """The study of the request's deployment under its traffic (``kvbudget simulate``); ``progress`` gives a hook
    per run ("run", "search probe i/n"); ``.to_dict()`` is the ``simulate --json`` document."""
    return prepare_deployment(request).run(progress)


def prepare_deployment(request: SimulateRequest) -> Prepared:
    """The request's simulation made ready: its deployment planned, its traffic read, its configuration built."""
    from kvbudget import hardware
    from kvbudget.plan.build import plan_inputs
    from kvbudget.plan.plan import make_plan
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.plan import PlanRequest
    from kvbudget.simulate.build import memory_from_plan
    from kvbudget.simulate.measured import measured_speeds
    from kvbudget.simulate.policies import MemoryPolicy
    from kvbudget.simulate.runner import SimConfig
    from kvbudget.simulate.speeds import replica_speeds

    r = request
    check_traffic(r)
    # the request's sessions count simulated sessions, not the plan's sessions wanted
    inputs, _ = plan_inputs(narrowed(PlanRequest, r, sessions=None))
    plan = make_plan(inputs)
    source, cap, described, prefix, work = _sources(r, inputs.context)
    if prefix >= inputs.context:
        raise InputError(
            f"the workload's shared prefix ({prefix:,} tokens) does not fit under the {inputs.context:,}-token cap: "
            "every session would be refused; raise --context or shorten [prefix]"
        )
    sharing = plan.prefix
    if sharing is None and prefix:
        from kvbudget.plan.sharing import prefix_sharing

        sharing = prefix_sharing(plan.layout, inputs.engine, plan.kv_pool_bytes, inputs.context, prefix)
    measured = measured_speeds(r.speed_from) if r.speed_from else None
    if measured is not None:  # a load test of another engine or model measured another deployment
        from kvbudget.model.sources import resolve

        measured.check(inputs.engine.name, resolve(r.model), r.model)
    speeds = replica_speeds(
        r, plan, prefill_rate=r.prefill_rate, decode_rate=r.decode_rate, bandwidth=r.bandwidth, measured=measured
    )
    time_model = speeds.time_model(float(hardware.link(r.link).bytes_per_s))
    rules = inputs.engine.rules
    policy = MemoryPolicy(
        policy=r.policy or rules.sim_policy,  # type: ignore[arg-type]  # one of the request's choices
        preempt=r.preempt,  # type: ignore[arg-type]
        pause=r.pause or rules.sim_pause,  # type: ignore[arg-type]
        admission=r.admission,  # type: ignore[arg-type]
        watermark=r.watermark,
        cap=cap,
        victim=rules.sim_victim,  # type: ignore[arg-type]  # one of policies.VICTIMS
    )
    replicas = r.replicas or plan.replicas
    limit = plan.running_limit()  # the engine's own rule, as plan and speed apply it (engines/contract.py)
    config = SimConfig(
        memory=memory_from_plan(plan),
        policy=policy,
        time=time_model,
        replicas=replicas,
        router=r.router,  # type: ignore[arg-type]
        host_bytes=r.offload_memory,
        duration_s=r.duration,
        max_sessions=r.sessions,
        check=r.check,
        running_limit=None if limit is None else limit.requests,
    )
    target = target_of(r)
    _check_bounds(r, work, replicas)
    about: dict[str, object] = {
        "model": inputs.spec.name,
        "engine": inputs.engine.to_json(),
        "policy_basis": policy_basis(r, rules),
        "gpu": inputs.gpu_label,
        "kv_dtype": inputs.kv_dtype_label,
        "context": inputs.context,
        "block_size": plan.layout.first.block_size,
        "source": described,
        "seed": r.seed,
        "prefill_tokens_per_s": round(speeds.prefill_tokens_per_s, 3),
        "decode_tokens_per_s": speeds.decode_tokens_per_s,
        "bandwidth_bytes_per_s": r.bandwidth or (hardware.gpu(r.gpu).bandwidth_bytes_per_s if r.gpu else None),
        "weights_bytes_per_gpu": plan.weights_per_gpu,
        "speeds": speeds.to_dict(),
        "running_limit": None
        if limit is None
        else {"per_replica": limit.requests, "basis": limit.basis, "provenance": limit.provenance},
    }
    return Prepared(
        source,
        config,
        target,
        static_plan_sessions=plan.sessions,
        static_prefix_sessions=sharing.sessions if sharing else None,
        search_sessions=r.search_sessions,
        search_probes=r.search_probes,
        about=about,
        jobs=r.jobs,
        ray=r.ray,
    )


def target_of(r: SimulateRequest) -> Target:
    """The request's target: the default's tolerances, each replaced by the option that gives it."""
    from kvbudget.simulate.policies import DEFAULT_PREEMPTION_RATE, DEFAULT_REFUSAL_RATE, Target

    return Target(
        r.target_p99_delay or Target().p99_delay_s,
        # --target-p99-delay alone keeps its old meaning: the delay bound, preemption allowed
        allow_preemption=bool(r.target_p99_delay) and r.target_preemption_rate is None,
        preemption_rate=DEFAULT_PREEMPTION_RATE if r.target_preemption_rate is None else r.target_preemption_rate,
        refusal_rate=DEFAULT_REFUSAL_RATE if r.target_refusal_rate is None else r.target_refusal_rate,
        ttft_p99_s=r.ttft,
        itl_p99_s=r.itl,
    )


def policy_basis(r: SimulateRequest, rules: EngineRules) -> str:
    """Where the policy and pause came from, in words: the engine's behaviour, or the options given."""
    if r.policy and r.pause:
        return "set by --policy and --pause"
    given = "--policy" if r.policy else "--pause" if r.pause else None
    engine = f"{rules.title} {rules.version}".strip()
    return f"{engine}'s behaviour: {rules.sim_basis}" + (f" ({given} as given)" if given else "")
