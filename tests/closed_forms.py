"""Closed forms the simulator is checked against (test oracles, not part of the library)."""

from __future__ import annotations

import math


def erlang_b(servers: int, offered_load: float) -> float:
    """Blocking probability of an M/G/c/c loss system (Erlang B) with ``servers`` slots and
    ``offered_load`` = λ × E[T] erlangs; insensitive to the holding-time distribution.

    Stable recursion (no factorials or powers): B(0, A) = 1, B(n, A) = A B(n-1) / (n + A B(n-1));
    e.g. ITU-T E.521 / Kleinrock, Queueing Systems vol. 1, (3.46)."""
    assert servers >= 0 and math.isfinite(offered_load) and offered_load >= 0
    b = 1.0
    for n in range(1, servers + 1):
        b = offered_load * b / (n + offered_load * b)
    return b
