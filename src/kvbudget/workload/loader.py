"""Reading workload files: TOML (stdlib ``tomllib``; ``tomli`` on Python 3.10) or YAML (PyYAML, the
``yaml`` extra), every value checked where it enters, unknown keys refused, each error one line
naming the file, the field and the fix. ``kvbudget.workload.model.load_workload`` is the entry point.

Distribution forms (``dist`` names the kind; a bare number means ``constant``):

* ``constant``: ``value``
* ``uniform``: ``low``, ``high`` (continuous on [low, high])
* ``exponential``: ``mean``
* ``lognormal``: ``mean`` and ``p99``, or ``mu`` and ``sigma`` (of the underlying normal)
* ``geometric``: ``mean`` (>= 1), on {1, 2, ...}: P(k) = (1-p)^(k-1) p with p = 1/mean
* ``poisson``: ``mean``, on {0, 1, ...}
* ``empirical``: ``values`` and optional ``weights`` (relative; default equal)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

from kvbudget.errors import InputError, MissingExtraError
from kvbudget.model.bounds import brief
from kvbudget.workload.distributions import (
    Constant,
    Distribution,
    DistributionError,
    Empirical,
    Exponential,
    Geometric,
    LogNormal,
    Poisson,
    Uniform,
)
from kvbudget.workload.model import (
    CAP_ACTIONS,
    DISTRIBUTIONS,
    REQUIRED,
    TOP_KEYS,
    Arrival,
    CapPolicy,
    Prefix,
    Retries,
    Workload,
)

KINDS: dict[str, tuple[str, ...]] = {
    "constant": ("value",),
    "uniform": ("low", "high"),
    "exponential": ("mean",),
    "lognormal": ("mean", "p99", "mu", "sigma"),
    "geometric": ("mean",),
    "poisson": ("mean",),
    "empirical": ("values", "weights"),
}

MAX_RETRIES = 100  # retries of one request a [retries] table may declare


def from_params(kind: str, params: dict[str, object]) -> Distribution:
    """Build a distribution from its kind and already type-checked parameters (a loader's job).

    Raises DistributionError naming the parameter at fault; unknown keys are the caller's check."""

    def need(name: str) -> float:
        if name not in params:
            raise DistributionError(name, f"is required for a {kind} distribution")
        return cast(float, params[name])  # each constructor checks the type itself

    if kind == "constant":
        return Constant(need("value"))
    if kind == "uniform":
        return Uniform(need("low"), need("high"))
    if kind == "exponential":
        return Exponential(need("mean"))
    if kind == "lognormal":
        by_moments, by_normal = {"mean", "p99"} & params.keys(), {"mu", "sigma"} & params.keys()
        if by_moments and by_normal:
            raise DistributionError(sorted(by_normal)[0], "cannot be combined with mean/p99; give one pair")
        if by_normal:
            return LogNormal(need("mu"), need("sigma"))
        return LogNormal.from_mean_p99(need("mean"), need("p99"))
    if kind == "geometric":
        return Geometric(need("mean"))
    if kind == "poisson":
        return Poisson(need("mean"))
    if kind == "empirical":
        values = params.get("values")
        weights = params.get("weights", [])
        if not isinstance(values, list):
            raise DistributionError("values", f"must be a list of numbers, got {values!r}")
        if not isinstance(weights, list):
            raise DistributionError("weights", f"must be a list of numbers, got {weights!r}")
        return Empirical(tuple(values), tuple(weights))
    raise DistributionError("dist", f"must be one of {', '.join(KINDS)}, got {kind!r}")


def load_workload(path: str | Path) -> Workload:
    """Read a workload file (``.toml``, ``.yaml`` / ``.yml``). Raises InputError (one line) on any problem."""
    p = Path(path)
    where = str(path)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise InputError(f"{where}: a workload file must end in .toml, .yaml or .yml")
    from kvbudget.safeio import read_text

    text = read_text(p, "workload file")
    data = _parse_toml(text, where) if suffix == ".toml" else _parse_yaml(text, where)
    return workload_from_dict(data, where=where, base=p.parent)


def _parse_toml(text: str, where: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, and an integer past Python's 4,300-digit limit
        raise InputError(f"{where}: not valid TOML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise InputError(f"{where}: nests deeper than a workload file can; it is not a workload file") from None


def _parse_yaml(text: str, where: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise MissingExtraError(f"{where}: reading YAML needs PyYAML: pip install 'kvbudget[yaml]'") from None
    try:
        return yaml.load(text, Loader=_unique_key_loader(yaml))
    except RecursionError:
        raise InputError(f"{where}: nests deeper than a workload file can; it is not a workload file") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer past Python's 4,300-digit limit
        detail = " ".join(str(exc).split())
        raise InputError(f"{where}: not valid YAML: {detail[:300]}") from None


def _unique_key_loader(yaml: Any) -> Any:
    """PyYAML's SafeLoader refusing a key given twice in one mapping (PyYAML keeps the last one silently)."""

    class UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} is given twice (line {key_node.start_mark.line + 1})",
                        key_node.start_mark,
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


class _Reader:
    """Typed access to one table of a workload file, with messages naming file and field."""

    def __init__(self, where: str, section: str, table: object, known: tuple[str, ...]) -> None:
        self.where, self.section = where, section
        if not isinstance(table, dict):
            raise InputError(f"{where}: [{section}] must be a table of keys, got {table!r}")
        self.table: dict[str, Any] = table
        for key in table:
            if key not in known:
                raise InputError(
                    f"{where}: unknown key {self.name(str(key))} (known: {', '.join(known)}); check the spelling"
                )

    def name(self, key: str) -> str:
        return f"[{self.section}].{key}" if self.section else key

    def fail(self, key: str, detail: str) -> InputError:
        return InputError(f"{self.where}: {self.name(key)} {detail}")

    def has(self, key: str) -> bool:
        return key in self.table

    def number(
        self, key: str, default: float | None = None, *, positive: bool = False, maximum: float = 1e15
    ) -> float | None:
        if key not in self.table:
            return default
        value = self.table[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -maximum <= value <= maximum:
            raise self.fail(key, f"must be a number, got {brief(value)} (at most {maximum:g} in size)")
        if positive and value <= 0:
            raise self.fail(key, f"must be positive, got {value:g}")
        if value < 0:
            raise self.fail(key, f"must not be negative, got {value:g}")
        return float(value)

    def count(self, key: str, default: int | None = None, *, minimum: int = 0, maximum: int = 2**40) -> int | None:
        if key not in self.table:
            return default
        value = self.table[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be a whole number, got {brief(value)}")
        if value < minimum:
            raise self.fail(key, f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise self.fail(key, f"must be at most {maximum:,}, got {brief(value)}")
        return value

    def text(self, key: str, default: str | None = None) -> str | None:
        if key not in self.table:
            return default
        value = self.table[key]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.table.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value


def _distribution(where: str, section: str, value: object) -> Distribution:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = {"dist": "constant", "value": value}
    if not isinstance(value, dict):
        raise InputError(f"{where}: [{section}] must be a number or a table with dist = ..., got {value!r}")
    kind = value.get("dist")
    if kind not in KINDS:
        raise InputError(f"{where}: [{section}].dist must be one of {', '.join(KINDS)}, got {kind!r}")
    reader = _Reader(where, section, value, ("dist", *KINDS[kind]))
    params = {k: v for k, v in reader.table.items() if k != "dist"}
    try:
        return from_params(kind, params)
    except DistributionError as exc:
        raise InputError(f"{where}: [{section}].{exc.param} {exc.detail}") from None


def workload_from_dict(data: object, *, where: str = "workload", base: Path | None = None) -> Workload:
    """Build a Workload from a parsed file. ``base`` resolves a relative ``[arrival].replay`` path."""
    if data is not None and not isinstance(data, dict):
        raise InputError(f"{where}: a workload file holds tables ([arrival], [steps], ...), got {type(data).__name__}")
    top = _Reader(where, "", data if data is not None else {}, TOP_KEYS)
    for key in REQUIRED:
        if not top.has(key):
            raise InputError(f"{where}: [{key}] is missing; it is required (see docs/workload.md)")

    arr = _Reader(where, "arrival", top.table["arrival"], ("rate_per_s", "replay", "format"))
    rate = arr.number("rate_per_s", positive=True)
    replay = arr.text("replay")
    fmt = arr.text("format")
    if (rate is None) == (replay is None):
        raise InputError(f"{where}: [arrival] needs exactly one of rate_per_s (Poisson) or replay (a trace path)")
    if fmt is not None and replay is None:
        raise arr.fail("format", "only applies with replay")
    if replay is not None and base is not None and not Path(replay).is_absolute():
        replay = str(base / replay)
    arrival = Arrival(rate_per_s=rate, replay=replay, format=fmt)

    pre = _Reader(where, "prefix", top.table.get("prefix", {}), ("system_prompt_tokens", "tool_catalog_tokens"))
    prefix = Prefix(pre.count("system_prompt_tokens", 0) or 0, pre.count("tool_catalog_tokens", 0) or 0)

    dists = {name: _distribution(where, name, top.table[name]) for name in DISTRIBUTIONS if top.has(name)}

    cap = _cap(where, top.table.get("cap", {}), prefix)

    retries = None
    if top.has("retries"):
        keys = ("timeout_s", "max_retries", "backoff_s", "backoff_multiplier", "server_cancels")
        ret = _Reader(where, "retries", top.table["retries"], keys)
        # bounded so that what retries add is a short sum (workload/little.py loops over the retries and raises
        # the multiplier to their number): no client retries a hundred times or waits more than a day
        timeout = ret.number("timeout_s", positive=True, maximum=86400)
        if timeout is None:
            raise ret.fail("timeout_s", "is required in [retries] (seconds a client waits before retrying)")
        multiplier = ret.number("backoff_multiplier", 2.0, maximum=100)
        if multiplier is not None and multiplier < 1:
            raise ret.fail("backoff_multiplier", f"must be at least 1, got {multiplier:g}")
        retries = Retries(
            timeout_s=timeout,
            max_retries=ret.count("max_retries", 3, maximum=MAX_RETRIES) or 0,
            backoff_s=ret.number("backoff_s", 1.0, maximum=86400) or 0.0,
            backoff_multiplier=multiplier or 2.0,
            server_cancels=ret.flag("server_cancels", False),
        )

    return Workload(
        arrival=arrival,
        prefix=prefix,
        cap=cap,
        retries=retries,
        name=top.text("name", "") or "",
        description=top.text("description", "") or "",
        source=where,
        **dists,
    )


def _cap(where: str, table: object, prefix: Prefix) -> CapPolicy:
    keys = ("at_cap", "tokens", "target_tokens", "target_fraction", "summary_tokens")
    cap = _Reader(where, "cap", table, keys)
    action = cap.text("at_cap", "refuse")
    if action not in CAP_ACTIONS:
        raise cap.fail("at_cap", f"must be one of {', '.join(CAP_ACTIONS)}, got {action!r}")
    tokens = cap.count("tokens", minimum=1)
    target = cap.count("target_tokens", minimum=1)
    fraction = cap.number("target_fraction", positive=True)
    summary = cap.count("summary_tokens", minimum=1)
    if action == "refuse":
        for key in ("target_tokens", "target_fraction", "summary_tokens"):
            if cap.has(key):
                raise cap.fail(key, "only applies when at_cap is compact or summarize")
    else:
        if (target is None) == (fraction is None):
            raise InputError(
                f"{where}: [cap] at_cap = {action!r} needs exactly one of target_tokens or target_fraction"
            )
        if fraction is not None and fraction >= 1:
            raise cap.fail("target_fraction", f"must be below 1 (a share of the cap), got {fraction:g}")
        if target is not None and tokens is not None and target >= tokens:
            raise cap.fail("target_tokens", f"must be below the cap ([cap].tokens = {tokens}), got {target}")
    if action == "summarize":
        if summary is None:
            raise InputError(f"{where}: [cap].summary_tokens is required with at_cap = 'summarize'")
        if target is not None and summary > target - prefix.tokens:
            raise cap.fail(
                "summary_tokens", f"({summary}) must fit in the target after the prefix ({target - prefix.tokens})"
            )
    elif summary is not None:
        raise cap.fail("summary_tokens", "only applies when at_cap is summarize")
    return CapPolicy(
        action=action,
        tokens=tokens,
        target_tokens=target,
        target_fraction=fraction,
        summary_tokens=summary or 0,
    )
