"""From a calibrate request to its answer: each log read, and kvbudget's prediction beside what it measured."""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.measure.calibrate import Calibration
    from kvbudget.measure.logs.record import SettingValue
    from kvbudget.requests.calibrate import CalibrateRequest


@dataclass(frozen=True)
class Calibrations:
    """One calibration per log, in the order given."""

    calibrations: tuple[Calibration, ...]

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget calibrate --json`` document: one log's document, or ``{"logs": [...]}`` for several."""
        from kvbudget.render.calibrate import calibration_json

        docs = [calibration_json(c) for c in self.calibrations]
        return docs[0] if len(docs) == 1 else {"schema_version": 1, "logs": docs}


def given_settings(request: CalibrateRequest) -> dict[str, SettingValue]:
    """The settings the request gives for what a log does not state."""
    given: dict[str, SettingValue] = {}
    if request.tp:
        given["tp"] = request.tp
    if request.context:
        given["context"] = request.context
    if request.kv_dtype:
        given["cache_dtype"] = request.kv_dtype
    if request.block_size:
        given["block_size"] = request.block_size
    return given


def calibrate_logs(request: CalibrateRequest) -> Calibrations:
    """Every log of the request read and reconciled (``kvbudget calibrate``)."""
    from kvbudget.measure.calibrate import calibrate
    from kvbudget.measure.logs import read_log

    given = given_settings(request)
    read = (read_log(path, request.engine, request.startup) for path in request.logs)
    return Calibrations(tuple(_with_speeds(calibrate(log, request.model, given)) for log in read))


def _with_speeds(cal: Calibration) -> Calibration:
    """The calibration with the speeds its log's serving lines give, or a note saying why they give none."""
    from kvbudget.measure.calibrate_speeds import calibration_speeds

    cal.speeds, why = calibration_speeds(cal.log)
    if why:
        cal.notes.append(why)
    return cal
