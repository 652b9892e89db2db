"""Small frozen distributions for workload quantities: counts, token counts and durations.

Every distribution is non-negative (workload quantities are counts and seconds), samples from a
``random.Random`` passed in (deterministic for a seed, no numpy), and knows its mean exactly.
Session generation draws them vectorised instead (``kvbudget.workload.draws``, numpy).

Token counts are whole numbers. ``sample_int`` turns a continuous draw ``x`` into an integer by
*stochastic rounding*, ``floor(x + U)`` with ``U ~ Uniform[0, 1)`` drawn from the same generator:
``E[floor(x + U)] = x`` for every ``x`` (the fractional part rounds up with probability equal to
itself), so the integer stream has exactly the analytic ``mean()`` of the continuous one. Integer
distributions (geometric, Poisson, integral constants and empirical values) return their draw as is.

The forms a workload file writes are in ``kvbudget.workload.loader`` and docs/workload.md.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import ClassVar

from kvbudget.errors import InputError

# z such that P(Z <= z) = 0.99 for a standard normal: 2.3263478740408408.
Z99 = NormalDist().inv_cdf(0.99)


class DistributionError(InputError):
    """A distribution parameter is out of range; ``param`` names it so a loader can say where."""

    def __init__(self, param: str, detail: str) -> None:
        super().__init__(f"{param} {detail}")
        self.param = param
        self.detail = detail


def _number(param: str, value: float, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DistributionError(param, f"must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise DistributionError(param, f"must be positive, got {value:g}")
    if value < 0:
        raise DistributionError(param, f"must not be negative, got {value:g}")
    return float(value)


class Distribution:
    """Base of the distribution kinds: ``sample``, ``sample_int``, exact ``mean``, ``min_value``."""

    __slots__ = ()
    kind: ClassVar[str] = ""
    integer: ClassVar[bool] = False  # every draw is already a whole number

    def sample(self, rng: random.Random) -> float:
        raise NotImplementedError

    def sample_int(self, rng: random.Random) -> int:
        """A whole-number draw with the same mean (stochastic rounding of continuous draws)."""
        return math.floor(self.sample(rng) + rng.random())

    def mean(self) -> float:
        raise NotImplementedError

    def min_value(self) -> float:
        """The smallest value a draw can take (for integer draws: floor of it)."""
        raise NotImplementedError

    def params(self) -> dict[str, object]:
        """The parameters as a workload file writes them (without ``dist``)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, object]:
        return {"dist": self.kind, **self.params()}

    def describe(self) -> str:
        inner = ", ".join(f"{k}={_fmt(v)}" for k, v in self.params().items())
        return f"{self.kind}({inner})"


def fmt_number(value: float) -> str:
    """Four significant digits below 1,000; whole numbers with separators from 1,000 up (no 2e+04)."""
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"


def _fmt(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt_number(value)
    if isinstance(value, (list, tuple)):
        return f"[{len(value)} values]"
    return str(value)


@dataclass(frozen=True, slots=True)
class Constant(Distribution):
    value: float
    kind: ClassVar[str] = "constant"

    def __post_init__(self) -> None:
        _number("value", self.value)

    @property
    def integral(self) -> bool:
        return float(self.value).is_integer()

    def sample(self, rng: random.Random) -> float:
        return float(self.value)

    def sample_int(self, rng: random.Random) -> int:
        if self.integral:
            return int(self.value)
        return math.floor(self.value + rng.random())

    def mean(self) -> float:
        return float(self.value)

    def min_value(self) -> float:
        return float(self.value)

    def params(self) -> dict[str, object]:
        return {"value": self.value}

    def describe(self) -> str:
        return f"constant {_fmt(self.value)}"


@dataclass(frozen=True, slots=True)
class Uniform(Distribution):
    low: float
    high: float
    kind: ClassVar[str] = "uniform"

    def __post_init__(self) -> None:
        _number("low", self.low)
        _number("high", self.high)
        if self.high < self.low:
            raise DistributionError("high", f"must be at least low ({self.low:g}), got {self.high:g}")

    def sample(self, rng: random.Random) -> float:
        return self.low + (self.high - self.low) * rng.random()

    def mean(self) -> float:
        return (self.low + self.high) / 2  # midpoint of [low, high]

    def min_value(self) -> float:
        return float(self.low)

    def params(self) -> dict[str, object]:
        return {"low": self.low, "high": self.high}


@dataclass(frozen=True, slots=True)
class Exponential(Distribution):
    mean_value: float
    kind: ClassVar[str] = "exponential"

    def __post_init__(self) -> None:
        _number("mean", self.mean_value, positive=True)

    def sample(self, rng: random.Random) -> float:
        return -self.mean_value * math.log(1.0 - rng.random())  # inversion: F^-1(u) = -m ln(1-u)

    def mean(self) -> float:
        return float(self.mean_value)

    def min_value(self) -> float:
        return 0.0

    def params(self) -> dict[str, object]:
        return {"mean": self.mean_value}


@dataclass(frozen=True, slots=True)
class LogNormal(Distribution):
    """exp(N(mu, sigma^2)). Build from a mean and p99 with ``from_mean_p99``."""

    mu: float
    sigma: float
    kind: ClassVar[str] = "lognormal"

    def __post_init__(self) -> None:
        if isinstance(self.mu, bool) or not isinstance(self.mu, (int, float)) or not math.isfinite(self.mu):
            raise DistributionError("mu", f"must be a finite number, got {self.mu!r}")
        _number("sigma", self.sigma, positive=True)

    @classmethod
    def from_mean_p99(cls, mean: float, p99: float) -> LogNormal:
        """Solve mean = exp(mu + s^2/2) and p99 = exp(mu + z s) (z = z_0.99) for s and mu.

        Subtracting the logs: s^2/2 - z s + ln(p99/mean) = 0, so s = z - sqrt(z^2 - 2 ln(p99/mean)),
        the smaller root (the larger one is a far heavier tail with the same two numbers). A real
        root needs p99/mean <= exp(z^2/2) = 14.97: no lognormal has a p99 further above its mean.
        """
        _number("mean", mean, positive=True)
        _number("p99", p99, positive=True)
        if p99 <= mean:
            raise DistributionError("p99", f"must exceed mean ({mean:g}) for a lognormal, got {p99:g}")
        ratio = math.log(p99 / mean)
        disc = Z99 * Z99 - 2 * ratio
        if disc < 0:
            limit = math.exp(Z99 * Z99 / 2)
            raise DistributionError(
                "p99",
                f"is {p99 / mean:.3g}x the mean; a lognormal allows at most {limit:.4g}x "
                "(use empirical, or mu and sigma)",
            )
        sigma = Z99 - math.sqrt(disc)
        return cls(mu=math.log(mean) - sigma * sigma / 2, sigma=sigma)

    def sample(self, rng: random.Random) -> float:
        return math.exp(rng.gauss(self.mu, self.sigma))

    def mean(self) -> float:
        return math.exp(self.mu + self.sigma * self.sigma / 2)  # E[e^X] for X ~ N(mu, s^2)

    def p99(self) -> float:
        return math.exp(self.mu + Z99 * self.sigma)

    def min_value(self) -> float:
        return 0.0

    def params(self) -> dict[str, object]:
        return {"mu": self.mu, "sigma": self.sigma}

    def describe(self) -> str:
        return (
            f"lognormal(mean={fmt_number(self.mean())}, p99={fmt_number(self.p99())}; "
            f"mu={self.mu:.4g}, sigma={self.sigma:.4g})"
        )


@dataclass(frozen=True, slots=True)
class Geometric(Distribution):
    """Counts on {1, 2, ...} with mean ``mean_value`` (steps per session: memoryless stopping)."""

    mean_value: float
    kind: ClassVar[str] = "geometric"
    integer: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if isinstance(self.mean_value, bool) or not isinstance(self.mean_value, (int, float)):
            raise DistributionError("mean", f"must be a finite number, got {self.mean_value!r}")
        if not self.mean_value >= 1 or not math.isfinite(self.mean_value):
            raise DistributionError("mean", f"must be at least 1 (counts start at 1), got {self.mean_value:g}")

    def sample(self, rng: random.Random) -> float:
        return float(self.sample_int(rng))

    def sample_int(self, rng: random.Random) -> int:
        if self.mean_value == 1:
            return 1
        # Inversion: P(K > k) = (1-p)^k, so K = 1 + floor(ln(1-U) / ln(1-p)) with p = 1/mean.
        return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - 1.0 / self.mean_value))

    def mean(self) -> float:
        return float(self.mean_value)

    def min_value(self) -> float:
        return 1.0

    def params(self) -> dict[str, object]:
        return {"mean": self.mean_value}


@dataclass(frozen=True, slots=True)
class Poisson(Distribution):
    mean_value: float
    kind: ClassVar[str] = "poisson"
    integer: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _number("mean", self.mean_value)

    def sample(self, rng: random.Random) -> float:
        return float(self.sample_int(rng))

    def sample_int(self, rng: random.Random) -> int:
        lam = self.mean_value
        if lam == 0:
            return 0
        if lam < 10:
            # Knuth's multiplication method: count uniforms until their product drops below e^-lam.
            limit, prod, k = math.exp(-lam), rng.random(), 0
            while prod > limit:
                k += 1
                prod *= rng.random()
            return k
        return _poisson_ptrs(lam, rng)

    def mean(self) -> float:
        return float(self.mean_value)

    def min_value(self) -> float:
        return 0.0

    def params(self) -> dict[str, object]:
        return {"mean": self.mean_value}


def _poisson_ptrs(lam: float, rng: random.Random) -> int:
    """Hörmann's transformed rejection with squeeze (PTRS), for lam >= 10; W. Hörmann, "The
    transformed rejection method for generating Poisson random variables", Insurance: Mathematics
    and Economics 12 (1993) 39-45 (numpy's legacy poisson uses the same constants)."""
    slam, loglam = math.sqrt(lam), math.log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    invalpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2)
    while True:
        u = rng.random() - 0.5
        v = rng.random()
        us = 0.5 - abs(u)
        k = math.floor((2 * a / us + b) * u + lam + 0.43) if us > 0 else -1
        if us >= 0.07 and v <= vr:
            return k
        if k < 0 or (us < 0.013 and v > us):
            continue
        if math.log(v) + math.log(invalpha) - math.log(a / (us * us) + b) <= -lam + k * loglam - math.lgamma(k + 1):
            return k


@dataclass(frozen=True, slots=True)
class Empirical(Distribution):
    """Draws one of ``values`` with probability proportional to ``weights`` (equal when empty)."""

    values: tuple[float, ...]
    weights: tuple[float, ...] = ()
    _cum: tuple[float, ...] = field(default=(), init=False, repr=False, compare=False)
    _integral: bool = field(default=False, init=False, repr=False, compare=False)
    kind: ClassVar[str] = "empirical"

    def __post_init__(self) -> None:
        if not self.values:
            raise DistributionError("values", "must list at least one value")
        for v in self.values:
            _number("values", v)
        if self.weights:
            if len(self.weights) != len(self.values):
                raise DistributionError(
                    "weights", f"must have one weight per value ({len(self.values)}), got {len(self.weights)}"
                )
            for w in self.weights:
                _number("weights", w)
            if sum(self.weights) <= 0:
                raise DistributionError("weights", "must not all be zero")
        cum, total = [], 0.0
        for w in self.weights:
            total += w
            cum.append(total)
        object.__setattr__(self, "_cum", tuple(cum))
        object.__setattr__(self, "_integral", all(float(v).is_integer() for v in self.values))

    def _pick(self, rng: random.Random) -> float:
        n = len(self.values)
        if not self._cum:
            return self.values[min(int(rng.random() * n), n - 1)]
        return self.values[min(bisect_right(self._cum, rng.random() * self._cum[-1]), n - 1)]

    def sample(self, rng: random.Random) -> float:
        return float(self._pick(rng))

    def sample_int(self, rng: random.Random) -> int:
        value = self._pick(rng)
        return int(value) if self._integral else math.floor(value + rng.random())

    def mean(self) -> float:
        if not self.weights:
            return math.fsum(self.values) / len(self.values)
        return math.fsum(v * w for v, w in zip(self.values, self.weights, strict=True)) / math.fsum(self.weights)

    def min_value(self) -> float:
        return float(min(self.values))

    def params(self) -> dict[str, object]:
        out: dict[str, object] = {"values": list(self.values)}
        if self.weights:
            out["weights"] = list(self.weights)
        return out

    def describe(self) -> str:
        return (
            f"empirical({len(self.values)} values, mean={fmt_number(self.mean())}, max={fmt_number(max(self.values))})"
        )
