"""The speeds one replica of a deployment runs at, and where each comes from: ``replica_speeds``.

The simulator asks two things of time (hooks in ``TimeModel``): the seconds to prefill a prompt of ``new`` tokens
after ``cached`` ones, and the seconds of one decode iteration of ``running`` sessions whose caches hold
``kv_bytes`` per GPU. Each is one of:

* ``computed``: the speed model's roofline (kvbudget.speed.roofline, the efficiencies fitted in
  kvbudget.speed.efficiency): prefill compute-bound over the context already cached; a decode iteration reads
  the weights a batch touches once plus every running session's cache, or computes, whichever binds, plus the
  fitted per-iteration cost and the tensor-parallel all-reduces. The attention FLOPs of an iteration are taken
  in proportion to the cache bytes it reads (their ratio at half the cap; exact for full attention, a sliding
  window's bytes stop growing where its FLOPs do).
* ``given``: ``--prefill-rate`` tokens/s (one prompt at a time), ``--decode-rate`` tokens/s per session whatever
  the batch (``--bandwidth`` only replaces the datasheet bandwidth in the roofline).
* ``measured``: a ``kvbudget loadtest`` result (kvbudget.simulate.measured): prefill tokens/s, and decode
  tokens/s per session at each concurrency it held, the iteration time interpolated between them.

``kvbudget size`` and other callers take ``replica_speeds(deployment, plan)`` to run the simulator at the
deployment's own speeds.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.errors import InputError
from kvbudget.provenance import Label

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.plan.plan import Plan
    from kvbudget.requests.plan import Deployment
    from kvbudget.simulate.measured import MeasuredSpeeds
    from kvbudget.simulate.policies import TimeModel
    from kvbudget.speed.efficiency import Efficiency
    from kvbudget.speed.roofline import Roofline

REFERENCE_PROMPT = 1000  # tokens: the prompt the prefill speed is quoted at (nothing cached)
REFERENCE_CONTEXT = 4096  # tokens per session the decode speed is quoted at


@dataclass(frozen=True)
class Assumption:
    """One speed and where it comes from: ``computed`` (roofline), ``given`` (a flag) or ``measured`` (a load
    test)."""

    provenance: Label
    basis: str


@dataclass(frozen=True)
class ReplicaSpeeds:
    """How fast one replica prefills and decodes, as the simulator's hooks, with their provenance.

    ``prefill(new, cached)``: seconds for one prompt; ``step(running, kv_bytes)``: seconds of one decode iteration
    (None with a fixed ``decode_tokens_per_s``, given). ``quoted``: the figures the text and JSON show (prefill
    tokens/s at ``REFERENCE_PROMPT``, decode tokens/s per session at a few batches)."""

    prefill: Callable[[int, int], float]
    step: Callable[[int, int], float] | None
    decode_tokens_per_s: float | None
    prefill_from: Assumption
    decode_from: Assumption
    efficiency: Efficiency | None
    prefill_tokens_per_s: float
    decode_quotes: tuple[tuple[int, float], ...]  # (running sessions, decode tokens/s per session)
    group_prompts: bool = False  # prompts waiting together share a batch (TimeModel.group_prompts): measured so
    first_token_s: float = 0.0  # TimeModel.first_token_s (measured)
    wait_iteration: bool = False  # TimeModel.wait_iteration (measured with the wait taken out)

    def time_model(self, swap_bytes_per_s: float) -> TimeModel:
        from kvbudget.simulate.policies import TimeModel

        return TimeModel(
            prefill_tokens_per_s=self.prefill_tokens_per_s,
            decode_tokens_per_s=self.decode_tokens_per_s,
            swap_bytes_per_s=swap_bytes_per_s,
            prefill_s=self.prefill,
            step_s=self.step,
            group_prompts=self.group_prompts,
            first_token_s=self.first_token_s,
            wait_iteration=self.wait_iteration,
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "prefill": {
                "provenance": self.prefill_from.provenance,
                "basis": self.prefill_from.basis,
                "tokens_per_s": round(self.prefill_tokens_per_s, 3),
                "quoted_at_prompt_tokens": REFERENCE_PROMPT,
            },
            "decode": {
                "provenance": self.decode_from.provenance,
                "basis": self.decode_from.basis,
                "quoted_at_context_tokens": REFERENCE_CONTEXT,
                "tokens_per_s_per_session": [
                    {"running": running, "tokens_per_s": round(rate, 3)} for running, rate in self.decode_quotes
                ],
            },
            "efficiency": None if self.efficiency is None else self.efficiency.to_dict(),
        }


def replica_speeds(
    deployment: Deployment,
    plan: Plan,
    *,
    prefill_rate: float | None = None,
    decode_rate: float | None = None,
    bandwidth: float | None = None,
    measured: MeasuredSpeeds | None = None,
) -> ReplicaSpeeds:
    """The speeds of one replica of ``plan`` (planned from ``deployment``): given rates first, then a measured
    load test, then the roofline of the catalog GPU."""
    roof, why = _roofline(deployment, plan, bandwidth)
    if roof is None and decode_rate is None and measured is None:
        raise InputError(
            "the decode roofline needs the GPU's bandwidth: add --bandwidth 3.35TB/s, --decode-rate 50 or "
            "--speed-from a load test"
        )
    kv_per_session = plan.layout.total_bytes(REFERENCE_CONTEXT, 1)
    if prefill_rate is not None:
        rate = prefill_rate
        prefill = _fixed_prefill(rate)
        prefill_from = Assumption("given", f"--prefill-rate {rate:,.0f} tokens/s per replica")
    elif measured is not None:
        rate = measured.prefill_tokens_per_s
        prefill = measured.prefill_s
        prefill_from = Assumption("measured", measured.prefill_basis)
    elif roof is not None and roof.machine.linear_flops:
        prefill = _roof_prefill(roof)
        rate = REFERENCE_PROMPT / prefill(REFERENCE_PROMPT, 0)
        prefill_from = Assumption(
            "computed",
            f"roofline: {why}; prefill efficiency {roof.prefill_efficiency:g}, attention "
            f"{roof.attention_efficiency:g} of the bf16 peak ({roof.efficiency.fit})",
        )
    else:
        raise InputError(
            f"--prefill-rate: {plan.inputs.gpu_label} has no compute figures in the GPU catalog for the prefill "
            "roofline; give --prefill-rate TOKENS/S (measured), --speed-from a load test, or a --gpu that "
            "`kvbudget gpus` lists with dense_tflops"
        )
    step: Callable[[int, int], float] | None
    quotes: tuple[tuple[int, float], ...]
    if decode_rate is not None:
        step, quotes = None, ((1, decode_rate),)
        decode_from = Assumption("given", f"--decode-rate {decode_rate:g} tokens/s per session at any batch")
    elif measured is not None:
        step = measured.step
        quotes = tuple((n, 1 / measured.iteration_s(n)) for n in measured.levels)
        decode_from = Assumption("measured", measured.decode_basis)
    else:
        assert roof is not None  # refused above
        step = _roof_step(roof, plan)
        from kvbudget.speed.answer import running_limit

        held, _ = running_limit(plan)  # the pool's sessions, at most the engine's running limit: kvbudget speed's batch
        quotes = tuple((n, 1 / step(n, n * kv_per_session)) for n in _quoted_batches(held))
        decode_from = Assumption(
            "computed",
            f"roofline: {why}; memory bandwidth efficiency {roof.efficiency.bandwidth:g}, compute "
            f"{roof.efficiency.decode_compute:g}, {roof.efficiency.step_overhead_s * 1e3:g} ms per iteration"
            + (f", {roof.efficiency.sequence_s * 1e6:g} us per sequence" if roof.efficiency.sequence_s else "")
            + f" ({roof.efficiency.fit})",
        )
    return ReplicaSpeeds(
        prefill=prefill,
        step=step,
        decode_tokens_per_s=decode_rate,
        prefill_from=prefill_from,
        decode_from=decode_from,
        efficiency=roof.efficiency
        if roof is not None and "computed" in (prefill_from.provenance, decode_from.provenance)
        else None,
        prefill_tokens_per_s=rate,
        decode_quotes=quotes,
        group_prompts=prefill_from.provenance == "measured" and measured is not None and measured.clean,
        first_token_s=measured.first_token_s
        if prefill_from.provenance == "measured" and measured
        else roof.efficiency.request_s
        if roof is not None and prefill_from.provenance == "computed"
        else 0.0,  # the engine's fitted fixed cost a request (Efficiency.request_s; 0 for TensorRT-LLM)
        wait_iteration=prefill_from.provenance == "measured" and measured is not None and measured.batch_wait,
    )


def measured_time_model(measured: MeasuredSpeeds, swap_bytes_per_s: float = 64e9) -> TimeModel:
    """The simulator's time model from a load test alone (a pool built by hand, as the load test's own prediction
    builds llama.cpp's slots): prefill at the measured tokens/s, decode iterations on the measured curve."""
    from kvbudget.simulate.policies import TimeModel

    return TimeModel(
        prefill_tokens_per_s=measured.prefill_tokens_per_s,
        swap_bytes_per_s=swap_bytes_per_s,
        prefill_s=measured.prefill_s,
        step_s=measured.step,
        group_prompts=measured.clean,
        first_token_s=measured.first_token_s,
        wait_iteration=measured.batch_wait,
    )


def _quoted_batches(sessions: int) -> list[int]:
    return sorted({1, max(1, sessions // 2), max(1, sessions)})


def _fixed_prefill(rate: float) -> Callable[[int, int], float]:
    def prefill(new: int, cached: int) -> float:
        return new / rate

    return prefill


def _roof_prefill(roof: Roofline) -> Callable[[int, int], float]:
    def prefill(new: int, cached: int) -> float:
        return roof.prefill_seconds(new, cached, 1)

    return prefill


def _roof_step(roof: Roofline, plan: Plan) -> Callable[[int, int], float]:
    """The roofline's decode iteration for (running, cache bytes per GPU); attention FLOPs in proportion to the
    bytes (module doc), their ratio at half the cap."""
    context = max(2, plan.inputs.context // 2)
    per_byte = roof.work.attention_flops(context - 1, 1) / max(1, plan.layout.total_bytes(context, 1))
    seconds = roof.iteration_seconds
    terms: dict[int, tuple[float, int, float]] = {}  # per batch size: what does not depend on the caches

    def step(running: int, kv_bytes: int) -> float:
        parts = terms.get(running)
        if parts is None:
            parts = terms[running] = roof.decode_terms(running)
        return seconds(parts, kv_bytes, kv_bytes * per_byte)

    return step


def _roofline(deployment: Deployment, plan: Plan, bandwidth: float | None) -> tuple[Roofline | None, str]:
    """The roofline of one replica: the catalog GPU's peaks and bandwidth (``bandwidth`` replacing the datasheet
    figure); with no catalog compute figures, a memory-only roofline when a bandwidth is known; else None."""
    from dataclasses import replace

    from kvbudget import hardware
    from kvbudget.speed.answer import roofline_of
    from kvbudget.speed.efficiency import efficiency_for

    efficiency = efficiency_for(plan.inputs.engine.name)
    gpu = hardware.gpu(deployment.gpu) if deployment.gpu else None
    if gpu is not None and gpu.dense_tflops and gpu.bandwidth_bytes_per_s:
        roof, _, why = roofline_of(deployment, plan, gpu, efficiency)
        if bandwidth is not None:
            roof = replace(roof, machine=replace(roof.machine, bandwidth=float(bandwidth)))
            why += f"; --bandwidth {bandwidth / 1e12:g} TB/s"
        return roof, f"{gpu.id}, {why}"
    given = bandwidth if bandwidth is not None else gpu.bandwidth_bytes_per_s if gpu is not None else None
    if not given:
        return None, ""
    from kvbudget.speed.roofline import Machine, Roofline
    from kvbudget.speed.work import model_work
    from kvbudget.weights.params import count_params

    spec = plan.inputs.spec
    count = count_params(spec)
    machine = Machine(linear_flops=0.0, attention_flops=0.0, bandwidth=float(given), link=float("inf"), tp=1)
    roof = Roofline(
        model_work(spec, count), machine, efficiency, plan.weights_per_gpu, count.total, plan.layout.total_bytes
    )
    source = "--bandwidth" if bandwidth is not None else "the GPU catalog"
    return roof, f"memory-bound only ({given / 1e12:g} TB/s from {source}; no compute figures for this GPU)"
