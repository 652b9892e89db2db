"""Vectorised draws of the workload distributions (numpy): ``n`` values of one quantity in one call.

The same distributions as ``kvbudget.workload.distributions`` with the same means, drawn from a
numpy generator (``generator``) instead of ``random.Random``; session generation (generate.py) draws
every step of a block of sessions at once this way. Continuous draws become token counts by the
same stochastic rounding, ``floor(x + U)`` with ``U ~ Uniform[0, 1)`` from the same generator, so
integer streams keep the analytic ``mean()``; integer kinds (geometric, Poisson, integral constants
and empirical values) return their draws as they are.

numpy is imported by the callers only when sessions are generated (``import kvbudget`` and the
capacity commands never load it).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Floats = npt.NDArray[np.float64]
    Ints = npt.NDArray[np.int64]


def generator(label: str) -> np.random.RandomState:
    """A generator seeded from ``label`` through SHA-256 (stable across platforms and runs).

    numpy's legacy ``RandomState`` (Mersenne Twister) rather than ``Generator``: its streams are
    frozen for every future numpy release (NEP 19), while ``Generator`` keeps the right to change a
    distribution's algorithm, which would change every seeded simulation with a numpy upgrade."""
    import numpy as np

    entropy = int.from_bytes(hashlib.sha256(label.encode()).digest(), "big")
    return np.random.RandomState(np.random.MT19937(np.random.SeedSequence(entropy)))


def draw(dist: Distribution, rng: np.random.RandomState, n: int) -> Floats:
    """``n`` independent draws of ``dist`` as floats."""
    import numpy as np

    if isinstance(dist, Constant):
        return np.full(n, float(dist.value))
    if isinstance(dist, Uniform):
        return rng.uniform(dist.low, dist.high, n)
    if isinstance(dist, Exponential):
        return rng.exponential(dist.mean_value, n)
    if isinstance(dist, LogNormal):
        return rng.lognormal(dist.mu, dist.sigma, n)
    if isinstance(dist, (Geometric, Poisson)):
        return draw_int(dist, rng, n).astype(np.float64)
    if isinstance(dist, Empirical):
        return _pick(dist, rng, n)
    raise TypeError(f"no vectorised draw for {type(dist).__name__}")


def draw_int(dist: Distribution, rng: np.random.RandomState, n: int) -> Ints:
    """``n`` whole-number draws of ``dist`` with its mean (stochastic rounding of continuous kinds)."""
    import numpy as np

    if isinstance(dist, Geometric):
        if dist.mean_value == 1:
            return np.ones(n, dtype=np.int64)
        return rng.geometric(1.0 / dist.mean_value, n).astype(np.int64)  # support {1, 2, ...}
    if isinstance(dist, Poisson):
        return rng.poisson(dist.mean_value, n).astype(np.int64)
    if isinstance(dist, Constant) and dist.integral:
        return np.full(n, int(dist.value), dtype=np.int64)
    if isinstance(dist, Empirical) and all(float(v).is_integer() for v in dist.values):
        return _pick(dist, rng, n).astype(np.int64)
    values = draw(dist, rng, n)
    return np.floor(values + rng.random_sample(n)).astype(np.int64)


def _pick(dist: Empirical, rng: np.random.RandomState, n: int) -> Floats:
    import numpy as np

    values = np.asarray(dist.values, dtype=np.float64)
    if not dist.weights:
        return values[rng.randint(0, len(values), n)]
    cum = np.cumsum(np.asarray(dist.weights, dtype=np.float64))
    index = np.searchsorted(cum, rng.random_sample(n) * cum[-1], side="right")
    picked: Floats = values[np.minimum(index, len(values) - 1)]
    return picked
