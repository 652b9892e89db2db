"""Hand-built sessions and small simulator configurations for the simulator tests."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from kvbudget.simulate import MemoryModel, MemoryPolicy, SimConfig, TimeModel
from kvbudget.workload.record import SessionPlan, Step

BPT = 1_000  # bytes per token of the toy model
BLOCK = 16


def session(
    index: int, arrival: float, steps: list[tuple[int, int, float]], prefix: int = 0, pid: str | None = None
) -> SessionPlan:
    """A session from (append, output, pause) triples."""
    return SessionPlan(
        session_id=pid or f"h{index}",
        arrival_s=arrival,
        steps=iter([Step(a, o, p) for a, o, p in steps]),
        prefix_tokens=prefix,
    )


def agent_sessions(
    n: int,
    *,
    seed: int = 7,
    rate: float = 0.5,
    steps: tuple[int, int] = (5, 30),
    append: tuple[int, int] = (200, 2_000),
    output: tuple[int, int] = (50, 300),
    pause: tuple[float, float] = (0.5, 10.0),
    first: tuple[int, int] = (500, 3_000),
    prefix: int = 0,
) -> Iterator[SessionPlan]:
    """Agent-like sessions: Poisson arrivals, growing contexts, tool pauses (uniform draws)."""
    rng = random.Random(seed)
    t = 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        k = rng.randint(*steps)
        triples = [
            (
                rng.randint(*(first if j == 0 else append)),
                rng.randint(*output),
                rng.uniform(*pause) if j < k - 1 else 0.0,
            )
            for j in range(k)
        ]
        yield session(i, t, triples, prefix)


def config(
    pool_tokens: int,
    *,
    cap: int = 32_768,
    policy: str = "paged",
    pause: str = "hold",
    admission: str = "queue",
    preempt: str = "recompute",
    decode_rate: float | None = 50.0,
    prefill_rate: float = 20_000.0,
    share_prefix: bool = True,
    **extra: Any,
) -> SimConfig:
    """A toy replica: ``pool_tokens`` tokens of pool at 1,000 B/token in 16-token blocks."""
    memory = MemoryModel.linear(pool_tokens * BPT, BPT, cap, BLOCK, share_prefix=share_prefix)
    mp = MemoryPolicy(policy=policy, pause=pause, admission=admission, preempt=preempt)  # type: ignore[arg-type]
    time = TimeModel(
        weights_bytes=10**9,
        bandwidth_bytes_per_s=1e12,
        prefill_tokens_per_s=prefill_rate,
        decode_tokens_per_s=decode_rate,
        swap_bytes_per_s=1e10,
    )
    base = SimConfig(memory=memory, policy=mp, time=time, check=True)
    return replace(base, **extra)
