"""The simulator's knobs: memory policy, preemption, pause behaviour, admission, the cap, timing.

Each rule names the engine behaviour it follows; docs/simulate.md has the whole model in words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

PolicyName = Literal["reserve", "paged", "watermark"]
PreemptMode = Literal["recompute", "swap"]
PauseMode = Literal["hold", "evictable"]
AdmissionMode = Literal["queue", "refuse"]
CapMode = Literal["refuse", "compact", "summarize"]
RouterName = Literal["least-loaded", "round-robin"]
# Whom a replica preempts when a running session's next block cannot be had. "newest": vLLM V1
# (vllm/v1/core/sched/scheduler.py, ``self.running.pop()``: the most recently scheduled request);
# "fewest-decoded": SGLang's retraction (schedule_batch.py ``retract_decode``: fewest generated tokens,
# then the longest prompt). llama.cpp and Ollama reserve fixed slots and never preempt (policy reserve).
VictimRule = Literal["newest", "fewest-decoded"]
VICTIMS: tuple[VictimRule, ...] = ("newest", "fewest-decoded")

POLICIES: tuple[PolicyName, ...] = ("reserve", "paged", "watermark")
DEFAULT_WATERMARK = 0.05  # vLLM V0 BlockSpaceManager used 1%; 5% leaves room for a step's growth
# The library's TimeModel default only (hand-built configurations, tests); `kvbudget simulate` never uses it:
# its speeds come from replica_speeds (computed, given or measured, simulate/speeds.py).
DEFAULT_PREFILL_TOKENS_PER_S = 10_000.0
DEFAULT_DELAY_BOUND_S = 1.0  # the default target's p99 queue-delay bound
# The default target's tolerances: one preemption in 1,000 steps (a recompute of one step's context: a stall a
# user may notice once in a long agent session) and one refused session in 1,000. Zero made one preemption in
# 2,000 sessions fail a whole run (issue 19).
DEFAULT_PREEMPTION_RATE = 0.001
DEFAULT_REFUSAL_RATE = 0.001


@dataclass(frozen=True)
class CapPolicy:
    """What happens when a step would take a session past the cap (``min(cap_tokens, --context)``).

    ``refuse``: the step is refused and the session ends there (counted in ``refused_at_cap``).
    ``compact``: the client cuts the context to ``target_tokens`` (prefix kept); the compacted
    context is new text after the prefix, prefilled again. ``summarize``: as compact, but the model
    first generates ``summary_tokens`` output tokens (the summary's own cost; Claude Code's
    auto-compact). ``target_tokens`` 0 means half the cap. Taken from the workload's ``[cap]``.
    """

    mode: CapMode = "refuse"
    target_tokens: int = 0
    summary_tokens: int = 0
    cap_tokens: int | None = None  # the client's own cap; None: the serving cap (--context)

    def limit(self, serving_cap: int) -> int:
        return min(self.cap_tokens, serving_cap) if self.cap_tokens else serving_cap

    def target(self, serving_cap: int) -> int:
        return self.target_tokens or self.limit(serving_cap) // 2


@dataclass(frozen=True)
class MemoryPolicy:
    """How the KV pool is handed out (one replica)."""

    policy: PolicyName = "paged"
    preempt: PreemptMode = "recompute"
    pause: PauseMode = "hold"
    admission: AdmissionMode = "queue"
    watermark: float = DEFAULT_WATERMARK
    cap: CapPolicy = CapPolicy()
    victim: VictimRule = "newest"


@dataclass(frozen=True)
class TimeModel:
    """Prefill and decode speed of one replica (the hooks ``replica_speeds`` fills, simulate/speeds.py).

    ``step_s(running, kv_bytes)``: seconds of one decode iteration of ``running`` sessions whose caches hold
    ``kv_bytes`` per GPU (the speed model's roofline, or a measured curve). Without it, the bare memory roofline:
    one iteration reads the weights once plus every running session's KV,
    ``iteration_s = (weights_bytes + kv_bytes_read) / bandwidth_bytes_per_s`` (the closed-form tests use it).
    ``decode_tokens_per_s`` set instead gives every session a fixed speed. ``prefill_s(new, cached)``: seconds
    to prefill one prompt of ``new`` tokens after ``cached`` cached ones; without it ``prefill_tokens_per_s``
    (``0`` = instantaneous). ``swap_bytes_per_s`` is the host link.
    """

    weights_bytes: int = 0
    bandwidth_bytes_per_s: float = 0.0
    prefill_tokens_per_s: float = DEFAULT_PREFILL_TOKENS_PER_S
    decode_tokens_per_s: float | None = None
    swap_bytes_per_s: float = 64e9
    prefill_s: Callable[[int, int], float] | None = None
    step_s: Callable[[int, int], float] | None = None
    # Prompts waiting together are prefilled in one batch and get their first token together (llama.cpp's
    # server, scheduler._first_token); off: one after another, each its first token at its own prefill's end.
    group_prompts: bool = False
    # A prompt that comes while decode runs waits for the iteration in progress: the server takes new requests only
    # between two batches (llama.cpp tools/server/server-queue.cpp ``start_loop``: new tasks are drained into the
    # slots, then ``update_slots`` runs one batch; kvbudget.simulate.batch ``join``). On for speeds whose fit took
    # that wait out of the time to first token (measured, kvbudget.measure.loadtest.flow ``waited_s``).
    wait_iteration: bool = False
    # Seconds a request spends before the server's batch takes it, holding nothing (its own overhead and its wait
    # for the running iteration; measured, kvbudget.measure.loadtest.speeds): a step starts this much after its
    # pause (a closed loop's session after the one it replaces) and its TTFT counts it.
    first_token_s: float = 0.0


@dataclass(frozen=True)
class Target:
    """The service target the sustained-sessions search holds to (docs/simulate.md), with tolerances as rates.

    Default: preemptions at most 1 in 1,000 steps (``preemption_rate``), sessions refused at most 1 in 1,000
    arrived (``refusal_rate``: at admission, at the cap and larger than the pool all count), p99 queue delay
    <= 1 s, and a queue that does not grow through the run (``queue_grows``). With ``allow_preemption`` (the
    CLI's ``--target-p99-delay S`` alone): preemptions are not counted. ``ttft_p99_s`` / ``itl_p99_s``: latency
    targets (``--ttft``, ``--itl``) on the run's p99 time to first token and inter-token latency per step; the
    rest is the memory target (``memory_only``), which the search also holds alone to say which one binds.
    """

    p99_delay_s: float = DEFAULT_DELAY_BOUND_S
    allow_preemption: bool = False
    preemption_rate: float = DEFAULT_PREEMPTION_RATE
    refusal_rate: float = DEFAULT_REFUSAL_RATE
    ttft_p99_s: float | None = None
    itl_p99_s: float | None = None

    @property
    def has_latency(self) -> bool:
        return self.ttft_p99_s is not None or self.itl_p99_s is not None

    def memory_only(self) -> Target:
        """The target without its latency bounds: what memory (paging, refusals, queueing for room) must meet."""
        return replace(self, ttft_p99_s=None, itl_p99_s=None)

    def describe_latency(self) -> str:
        """'p99 TTFT <= 2 s and p99 ITL <= 50 ms' (empty without latency targets)."""
        parts = [f"p99 TTFT <= {_seconds(self.ttft_p99_s)}" for _ in [0] if self.ttft_p99_s is not None] + [
            f"p99 ITL <= {_seconds(self.itl_p99_s)}" for _ in [0] if self.itl_p99_s is not None
        ]
        return " and ".join(parts)

    def describe(self) -> str:
        pre = "" if self.allow_preemption else f"preemptions <= {_share(self.preemption_rate)} of steps, "
        latency = f", {self.describe_latency()}" if self.has_latency else ""
        return (
            f"{pre}refusals <= {_share(self.refusal_rate)} of sessions (the cap's included), "
            f"p99 queue delay <= {self.p99_delay_s:g} s, queue stable{latency}"
        )


def _seconds(seconds: float | None) -> str:
    """2 s, 50 ms."""
    assert seconds is not None
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _share(rate: float) -> str:
    return "0" if rate == 0 else f"{100 * rate:.3g}%"
