"""Vectorised draws (workload/draws.py): each kind's sample mean within 5 standard errors of its exact
mean, integer kinds and stochastic rounding give whole numbers, and a label fixes the stream."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvbudget.workload.distributions import (
    Constant,
    Distribution,
    Empirical,
    Exponential,
    Geometric,
    LogNormal,
    Poisson,
    Uniform,
)
from kvbudget.workload.draws import draw, draw_int, generator

N = 200_000
KINDS: list[Distribution] = [
    Constant(7),
    Constant(2.5),
    Uniform(1, 9),
    Exponential(3.0),
    LogNormal.from_mean_p99(1500, 12000),
    Geometric(6),
    Geometric(1),
    Poisson(4.5),
    Poisson(120),
    Empirical((1, 2, 10)),
    Empirical((1.5, 4.0, 10.25), (1, 2, 7)),
]


def _within(values: np.ndarray, mean: float) -> bool:
    sd = float(values.std(ddof=1))
    return abs(float(values.mean()) - mean) <= 5 * sd / math.sqrt(len(values)) + 1e-12


@pytest.mark.parametrize("dist", KINDS, ids=lambda d: d.describe())
def test_means_converge_and_integers_are_whole(dist: Distribution) -> None:
    rng = generator("test/draws")
    floats = draw(dist, rng, N)
    ints = draw_int(dist, rng, N)
    assert floats.shape == ints.shape == (N,)
    assert ints.dtype == np.int64 and floats.dtype == np.float64
    assert _within(floats, dist.mean()) and _within(ints, dist.mean())
    assert float(floats.min()) >= dist.min_value() and int(ints.min()) >= math.floor(dist.min_value())


def test_integer_kinds_are_drawn_as_they_are() -> None:
    rng = generator("test/draws")
    assert set(draw_int(Constant(2.5), rng, 1000).tolist()) == {2, 3}  # stochastic rounding
    assert set(draw_int(Constant(7), rng, 10).tolist()) == {7}
    assert set(draw_int(Empirical((1, 2, 10)), rng, 1000).tolist()) == {1, 2, 10}
    assert int(draw_int(Geometric(6), rng, 1000).min()) == 1
    weighted = draw(Empirical((1.5, 4.0, 10.25), (1, 2, 7)), rng, N)
    assert set(weighted.tolist()) == {1.5, 4.0, 10.25}
    assert float((weighted == 10.25).mean()) == pytest.approx(0.7, abs=0.005)


def test_a_label_fixes_the_stream() -> None:
    a = draw(LogNormal(1.0, 0.5), generator("x/1"), 5)
    b = draw(LogNormal(1.0, 0.5), generator("x/1"), 5)
    c = draw(LogNormal(1.0, 0.5), generator("x/2"), 5)
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
