"""Reconcile what an engine logged with what kvbudget predicts for the same model and settings.

Each prediction is fed the log's own measured inputs (the GPU total the engine saw, the weights as
loaded, the activation peak, the KV memory it said it had), so that a difference isolates one rule.
Printed figures are rounded (``11.12 GiB``, ``512.00 MiB``): a prediction agrees when it lies inside
the printed value's interval, and ``diff_pct`` is then 0.

This module holds the rows and how a prediction is paired with a logged figure; each engine's predictions are
measure/calibrate_engines.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kvbudget.errors import KvBudgetError
from kvbudget.measure.logs.record import EngineLog, Figure, Setting, SettingValue
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import CacheDType, parse_cache_dtype

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.measure.calibrate_speeds import CalibratedSpeeds

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Row:
    """One logged figure beside kvbudget's prediction. ``predicted`` is (low, high) when inputs were rounded."""

    figure: str
    logged: Figure
    predicted: tuple[float, float]
    note: str
    derived: bool = False  # computed from the log's own figures alone: a consistency check, not a comparison

    @property
    def consistent(self) -> bool:
        """The prediction lies inside the printed value's interval."""
        low, high = self.predicted
        return high >= self.logged.low - 1e-9 and low <= self.logged.high + 1e-9

    @property
    def agrees(self) -> bool:
        """kvbudget's model agrees with the engine: never said of a figure derived from the log itself."""
        return self.consistent and not self.derived

    @property
    def diff_pct(self) -> float:
        if self.consistent:
            return 0.0
        mid = (self.predicted[0] + self.predicted[1]) / 2
        base = abs(float(self.logged.value)) or 1.0
        return round(100 * (mid - float(self.logged.value)) / base, 3)

    def to_json(self) -> dict[str, object]:
        low, high = self.predicted
        return {
            "figure": self.figure,
            "logged": self.logged.value,
            "logged_text": self.logged.text,
            "line": self.logged.line,
            "predicted": _num(low) if low == high else [_num(low), _num(high)],
            "diff_pct": self.diff_pct,
            "kind": "derived" if self.derived else "compared",
            "agrees": None if self.derived else self.agrees,
            "consistent": self.consistent,
            "note": self.note,
        }


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else round(x, 6)


@dataclass
class Calibration:
    log: EngineLog
    spec: ModelSpec | None
    model_source: str | None
    predicted: dict[str, object] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    speeds: CalibratedSpeeds | None = None  # from the log's serving lines (simulate/measured_calibration.py)

    @property
    def compared(self) -> list[Row]:
        """The rows that test kvbudget's model (not derived from the log's own figures)."""
        return [r for r in self.rows if not r.derived]

    def summary(self) -> dict[str, int]:
        derived = [r for r in self.rows if r.derived]
        return {
            "compared": len(self.compared),
            "agree": sum(r.agrees for r in self.compared),
            "derived": len(derived),
            "derived_consistent": sum(r.consistent for r in derived),
        }


def setting_int(log: EngineLog, name: str, default: int) -> int:
    value = log.setting(name)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def cache_dtype(text: str | None, spec: ModelSpec) -> CacheDType:
    name = (text or "auto").lower()
    return parse_cache_dtype({"fp8_e4m3fn": "fp8_e4m3"}.get(name, name), model_dtype=spec.dtype, what="cache dtype")


def model_reference(log: EngineLog, given: str | None) -> str | None:
    """The model to predict for: ``--model``, else the log's model when kvbudget can resolve it offline."""
    if given:
        return given
    for key in ("model", "model_name"):
        value = log.setting(key)
        if isinstance(value, str) and value:
            from kvbudget.model import catalog

            if Path(value).exists() or catalog.lookup(value) is not None:
                return value
    return None


def calibrate(log: EngineLog, model: str | None = None, given: dict[str, SettingValue] | None = None) -> Calibration:
    """Read the model, predict every figure the log states, and pair them up.

    ``given`` fills settings the log does not state (``tp``, ``context``, ``cache_dtype``, ``block_size``);
    where the log states one, the log wins (it is what the engine ran with) and a differing value is noted.
    """
    ref = model_reference(log, model)
    cal = Calibration(log, None, ref)
    for name, value in (given or {}).items():
        stated = log.settings.get(name)
        if stated is None:
            log.settings[name] = Setting(value, 0)
        elif stated.value != value:
            cal.notes.append(f"the log says {name} = {stated.value} (line {stated.line}); the given {value} is ignored")
    if ref is None:
        named = log.setting("model") or log.setting("model_name")
        cal.notes.append(
            f"no prediction: the log names {named!r}, which kvbudget cannot resolve offline; pass --model "
            "(a catalog name, config.json or .gguf)"
            if named
            else "no prediction: the log names no model; pass --model"
        )
        return cal
    from kvbudget.model.sources import resolve

    cal.spec = resolve(ref)
    if model:  # a model given for the log: the log must be of it (measure/belong.py)
        from kvbudget.measure import belong

        belong.check_model(log, cal.spec, model, "calibrate")
        weights = log.figure("weights_bytes")
        if weights is not None:
            tp = log.setting("tp")
            # a log that prints its arguments omits a default tp of 1 (plan/from_log.py); an excerpt does not say
            logged_tp = tp if isinstance(tp, int) and not isinstance(tp, bool) and tp > 0 else None
            parallel = logged_tp or (1 if log.model is not None else None)
            belong.check_weights(log, weights, parallel, cal.spec, model, "calibrate")
    from kvbudget.measure import calibrate_engines as engines

    try:
        if log.engine == "vllm":
            engines.predict_vllm(cal)
        elif log.engine == "sglang":
            engines.predict_sglang(cal)
        elif log.engine == "trtllm":
            engines.predict_trtllm(cal)
        else:
            engines.predict_llamacpp(cal)
    except KvBudgetError as e:
        cal.notes.append(f"no prediction: {e}")
    return cal


def add(cal: Calibration, name: str, predicted: tuple[float, float], note: str, *, derived: bool = False) -> None:
    fig = cal.log.figure(name)
    if fig is not None:
        add_figure(cal, name, fig, predicted, note, derived=derived)


def add_figure(
    cal: Calibration, name: str, fig: Figure, predicted: tuple[float, float], note: str, *, derived: bool = False
) -> None:
    lo, hi = sorted(predicted)
    cal.rows.append(Row(name, fig, (lo, hi), note, derived or fig.derived))
